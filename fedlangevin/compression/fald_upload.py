"""Quantized uploads for FA-LD: the LFL quantizer (App. A) on the clients' round updates.

FA-LD (Deng et al., Alg. 1) uploads each client's local state beta^c after K local steps and
the server averages them. With this codec client c instead sends

    s_c = Q(beta^c - theta, q)        (theta: the global parameters broadcast this round)

with :func:`~fedlangevin.compression.stochastic_quantize` (R_Q(d, q) = 64 + d (1 + log2(q+1))
bits, :func:`~fedlangevin.compression.quantized_bits`), and the server averages
theta + s_c. Q is unbiased, so the average is unbiased too; the price is extra variance: given
the updates, client c's quantization error has variance v_c =
:func:`~fedlangevin.compression.quantization_error_variance` (beta^c - theta, q) per
coordinate, and the averaged error sum_c w_c (s_c - (beta^c - theta)) has
sum_c w_c^2 v_c (errors are independent across clients). FA-LD's injected noise adds
2 eta tau per local step to the average, 2 eta tau K per round (eq. 15, rho any), so

    ratio = sum_c w_c^2 v_c / (2 eta tau K)

says whether the Langevin noise masks the quantization: ratio << 1, the extra variance is
negligible; ratio ~ r, the average moves as if the temperature were about tau (1 + r) for
that round (the error is not Gaussian, but it is zero-mean and independent across rounds).

**(choice)** The update, not the state, is quantized (as LFL's uploads, Alg. 1 line 5), and
there is no error feedback: the codec is stateless, so the sampler's update stays unbiased
round by round. ``generator`` gives the quantizer its own random stream; then the sampler's
noise and minibatches are exactly those of the exact-upload run with the same seed, and the
two runs differ by the quantization alone (common random numbers).
"""

from __future__ import annotations

import torch

from fedlangevin._validation import check_int
from fedlangevin.compression.quantize import _quantize, quantization_error_variance, quantized_bits

__all__ = ["QuantizedUpdateUpload", "aggregated_error_variance"]


class QuantizedUpdateUpload:
    """FA-LD upload codec: the server receives theta + Q(beta^c - theta, q) from client c.

    A :data:`fedlangevin.federation.rounds.UploadCodec`: pass it as ``FALD(..., upload=codec)``.
    ``generator``: the quantizer's own random stream (on the sampler's device); ``None`` draws
    from the sampler's generator (then the quantized run's noise differs from the exact run's).
    A run stopped by a divergence rolls the sampler's generator back to the last good round,
    not this one: continuing such a run re-quantizes with different random numbers.
    """

    def __init__(self, q: int, generator: torch.Generator | None = None) -> None:
        self.q = check_int("q", q, minimum=1)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None; got {type(generator).__name__}")
        self.generator = generator

    def bits(self, d: int) -> float:
        """Bits of one upload: R_Q(d, q)."""
        return quantized_bits(d, self.q)

    def __call__(self, beta: torch.Tensor, theta: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        base = theta.unsqueeze(1)  # (R, 1, d)
        g = self.generator if self.generator is not None else generator
        return base + _quantize(beta - base, self.q, g)

    def __repr__(self) -> str:
        return f"QuantizedUpdateUpload(q={self.q})"


def aggregated_error_variance(
    beta: torch.Tensor, theta: torch.Tensor, weights: torch.Tensor, q: int
) -> torch.Tensor:
    """sum_c w_c^2 v_c per chain (R,): the exact variance per coordinate, given the updates,
    of the quantization error in the server average (module docstring). ``beta`` (R, N, d),
    ``theta`` (R, d), ``weights`` (N,) or (R, N)."""
    v = quantization_error_variance(beta - theta.unsqueeze(1), q)  # (R, N)
    w = weights.to(v)
    return (w * w * v).sum(dim=-1)
