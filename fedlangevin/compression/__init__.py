"""Quantized-communication federated optimizers, for comparison with FA-LD.

* :mod:`.quantize` — LFL's stochastic quantizer (App. A), its bit cost and Lemma 1;
* :mod:`.lfl` — LFL with its baselines LGM, LTGM, LB, lossless/FedAvg as pluggable codecs;
* :mod:`.lfl_codecs` — the broadcast and upload codecs of LFL and its baselines, per named method;
* :mod:`.local_solvers` — the devices' local SGD / Adam steps of LFL and its baselines;
* :mod:`.bounds` — LFL's Theorem 1 recursion, Corollary 1, Theorem 2 and the tau rule;
* :mod:`.dzofl` — digital zero-order FL (DZOFL) with its bit and energy models;
* :mod:`.wireless` — FL over wireless networks: packet-loss aggregation, G_eps, optimal E_l, K,
  bandwidth and CPU-frequency allocation;
* :mod:`.models` — flat-parameter classifiers, stacked client data, metrics;
* :mod:`.optimizer` — :data:`METHODS` (every named optimizer) and the runners' shared base
  :class:`~fedlangevin.compression.optimizer.FederatedOptimizer` (checks, ``evaluate``, ``run``);
* :mod:`.runner` — :func:`run_method`: any optimizer on given federated data, per-round test
  metrics against cumulative bits;
* :mod:`.fald_upload` — :class:`QuantizedUpdateUpload`: FA-LD with quantized uploads.

See docs/compression.md.
"""

from fedlangevin.compression.quantize import (
    QuantizedTensor,
    broadcast_saving_ratio,
    lemma1_second_moment_bound,
    lossless_bits,
    quantization_error_variance,
    quantization_second_moment,
    quantization_skewness,
    quantize_decode,
    quantize_encode,
    quantized_bits,
    stochastic_quantize,
    stochastic_round_float,
)
from fedlangevin.compression.models import MLP, History, MultinomialLogistic, StackedClients
from fedlangevin.compression.lfl import LFLOptimizer
from fedlangevin.compression.local_solvers import LocalAdam, LocalSGD
from fedlangevin.compression.dzofl import DZOFLConfig, DZOFLOptimizer
from fedlangevin.compression.runner import METHODS, make_optimizer, run_method
from fedlangevin.compression.fald_upload import QuantizedUpdateUpload, aggregated_error_variance
from fedlangevin.compression import (
    bounds,
    dzofl,
    fald_upload,
    lfl,
    lfl_codecs,
    local_solvers,
    models,
    optimizer,
    quantize,
    runner,
    wireless,
)

__all__ = [
    "QuantizedTensor",
    "broadcast_saving_ratio",
    "lemma1_second_moment_bound",
    "lossless_bits",
    "quantization_error_variance",
    "quantization_second_moment",
    "quantization_skewness",
    "quantize_decode",
    "quantize_encode",
    "quantized_bits",
    "stochastic_quantize",
    "stochastic_round_float",
    "MLP",
    "History",
    "MultinomialLogistic",
    "StackedClients",
    "LFLOptimizer",
    "LocalAdam",
    "LocalSGD",
    "DZOFLConfig",
    "DZOFLOptimizer",
    "METHODS",
    "make_optimizer",
    "run_method",
    "QuantizedUpdateUpload",
    "aggregated_error_variance",
    "bounds",
    "dzofl",
    "fald_upload",
    "lfl",
    "lfl_codecs",
    "local_solvers",
    "models",
    "optimizer",
    "quantize",
    "runner",
    "wireless",
]
