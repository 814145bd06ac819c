"""Quantized-communication federated optimizers, for comparison with FA-LD.

* :mod:`.quantize` — LFL's stochastic quantizer (App. A), its bit cost and Lemma 1;
* :mod:`.lfl` — LFL with its baselines LGM, LTGM, LB, lossless/FedAvg as pluggable codecs;
* :mod:`.bounds` — LFL's Theorem 1 recursion, Corollary 1, Theorem 2 and the tau rule;
* :mod:`.dzofl` — digital zero-order FL (DZOFL) with its bit and energy models;
* :mod:`.wireless` — FL over wireless networks: packet-loss aggregation, G_eps, optimal E_l, K,
  bandwidth and CPU-frequency allocation;
* :mod:`.models` — flat-parameter classifiers, stacked client data, metrics;
* :mod:`.runner` — :func:`run_method`: any optimizer on given federated data, per-round test
  metrics against cumulative bits.
"""

from fedlangevin.compression.quantize import (
    QuantizedTensor,
    broadcast_saving_ratio,
    lemma1_second_moment_bound,
    lossless_bits,
    quantization_second_moment,
    quantization_skewness,
    quantize_decode,
    quantize_encode,
    quantized_bits,
    stochastic_quantize,
    stochastic_round_float,
)

__all__ = [
    "QuantizedTensor",
    "broadcast_saving_ratio",
    "lemma1_second_moment_bound",
    "lossless_bits",
    "quantization_second_moment",
    "quantization_skewness",
    "quantize_decode",
    "quantize_encode",
    "quantized_bits",
    "stochastic_quantize",
    "stochastic_round_float",
]
