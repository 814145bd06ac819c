"""Baselines for benchmarks: samplers a federated sampler is measured against, with their
communication counted the same way.

- :mod:`fedlangevin.baselines.nuts`: federated NUTS, the server running Pyro's NUTS on the
  global energy with one round of (noiseless) client queries per energy-and-gradient
  evaluation. Not private: a yardstick, not a product feature (``docs/baselines.md``).
"""

from fedlangevin.baselines.nuts import NUTSResult, RoundCounter, RoundLimitError, federated_nuts

__all__ = ["NUTSResult", "RoundCounter", "RoundLimitError", "federated_nuts"]
