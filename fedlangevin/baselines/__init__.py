"""Baselines for benchmarks: samplers a federated sampler is measured against, with their
communication counted the same way.

- :mod:`fedlangevin.baselines.nuts`: federated NUTS, the server running Pyro's NUTS on the
  global energy with one round of (noiseless) client queries per energy-and-gradient
  evaluation. Not private: a yardstick, not a product feature (``docs/baselines.md``).
- :mod:`fedlangevin.baselines.consensus`: one-shot consensus Monte Carlo (Scott et al. 2016),
  every client sampling its sub-posterior locally and uploading its draws once, the server
  combining them by precision-weighted averages: one round (``docs/consensus.md``).
- :mod:`fedlangevin.baselines.averaging`: federated averaging (``fedavg``) of SGD on the MAP objective, and deep
  ensembles of it: point-estimate yardsticks (``docs/network.md``).
"""

from fedlangevin.baselines.consensus import (
    ConsensusResult, SubPosterior, client_energy, combine, consensus_monte_carlo,
)
from fedlangevin.baselines.averaging import fedavg
from fedlangevin.baselines.nuts import NUTSResult, RoundCounter, RoundLimitError, federated_nuts

__all__ = [
    "ConsensusResult", "NUTSResult", "RoundCounter", "RoundLimitError", "SubPosterior", "client_energy", "combine",
    "consensus_monte_carlo", "fedavg", "federated_nuts",
]
