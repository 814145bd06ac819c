"""The stochastic quantizer of LFL (Amiri, Gündüz, Kulkarni, Poor, *Federated Learning With
Quantized Global Model Updates*, App. A, eqs. (20)–(23) of version 2 / (17)–(20) of version 1).

Given x in R^d and an integer level count q >= 1, let x_max = max_i |x_i| and
x_min = min_i |x_i| (eq. 20). Each entry is quantized as (eq. 21a)

    Q(x_i, q) = sign(x_i) * (x_min + (x_max - x_min) * phi(u_i, q)),
    u_i = (|x_i| - x_min) / (x_max - x_min),

where phi(u, q) (eq. 21b) picks the integer l in {0, ..., q-1} with u in [l/q, (l+1)/q) and
returns (l+1)/q with probability u q - l, else l/q (at u = 1 we take l = q - 1, returning 1).
The vector Q(x, q) is represented by (eq. 23)

    R_Q(d, q) = 64 + d (1 + log2(q + 1)) bits

(64 for x_max and x_min, d sign bits, d log2(q+1) bits for the level index; real-valued, not
rounded up). Lemma 1 (eq. 1b): E[Q(x)] = x and

    E||Q(x, q)||^2 <= ||x||^2 + d (x_max - x_min)^2 / (4 q^2) = ||x||^2 + eps d ||x||^2 / (4 q^2),

with the skewness eps = (x_max - x_min)^2 / ||x||^2 in [0, 1]: 0 iff all magnitudes are equal,
1 iff x has a single non-zero entry.

**(choice)** When x_max == x_min (all magnitudes equal, including x = 0) the quantizer is exact:
Q(x_i) = sign(x_i) x_min, with sign(0) = 0.

Every function here is batched over leading dimensions: a tensor of shape (..., d) holds
several vectors, each quantized with its own x_max and x_min.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedlangevin._validation import check_int

__all__ = [
    "QuantizedTensor",
    "quantize_encode",
    "quantize_decode",
    "stochastic_quantize",
    "quantized_bits",
    "lossless_bits",
    "broadcast_saving_ratio",
    "quantization_skewness",
    "quantization_second_moment",
    "quantization_error_variance",
    "lemma1_second_moment_bound",
    "stochastic_round_float",
]


@dataclass(frozen=True)
class QuantizedTensor:
    """The transmitted form of Q(x, q) for a batch of vectors (App. A, eq. 23).

    ``x_min`` and ``x_max`` have shape (..., 1) (the 64 header bits of each vector), ``sign``
    is int8 in {-1, 0, 1} with the shape of x (1 bit per entry; 0 only where x_i = 0, which
    then also has level 0 and x_min = 0), ``level`` is int64 in {0, ..., q} (log2(q+1) bits
    per entry) and ``q`` the level count.
    """

    x_min: torch.Tensor
    x_max: torch.Tensor
    sign: torch.Tensor
    level: torch.Tensor
    q: int

    @property
    def dim(self) -> int:
        return int(self.level.shape[-1])

    @property
    def bits(self) -> float:
        """R_Q(d, q) per vector times the number of vectors in the batch."""
        n_vectors = self.level.numel() // max(self.dim, 1)
        return n_vectors * quantized_bits(self.dim, self.q)


def _check_vector_batch(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor; got dtype {x.dtype}")
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must have shape (..., d) with d >= 1; got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} must be finite (no NaN or inf entries)")


def quantize_encode(x: torch.Tensor, q: int, generator: torch.Generator | None = None) -> QuantizedTensor:
    """Encode each row x[..., :] as (x_min, x_max, signs, level indices) — App. A, eq. (21).

    ``generator`` (on x's device) drives the stochastic rounding of phi (eq. 21b).
    """
    q = check_int("q", q, minimum=1)
    _check_vector_batch("x", x)
    return _encode(x, q, generator)


def _encode(x: torch.Tensor, q: int, generator: torch.Generator | None) -> QuantizedTensor:
    """quantize_encode without argument checks (internal hot path; NaN propagates)."""
    a = x.abs()
    x_max = a.amax(dim=-1, keepdim=True)
    x_min = a.amin(dim=-1, keepdim=True)
    span = x_max - x_min
    safe = torch.where(span > 0, span, torch.ones_like(span))
    u = torch.where(span > 0, (a - x_min) / safe, torch.zeros_like(a)).clamp_(0.0, 1.0)
    uq = u * q
    low = torch.floor(uq).clamp_(max=q - 1)  # l in {0..q-1}; u = 1 -> l = q - 1
    p_up = (uq - low).clamp_(0.0, 1.0)  # probability of rounding up to (l+1)/q
    r = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    level = (low + (r < p_up).to(x.dtype)).to(torch.int64)
    sign = torch.sign(x).to(torch.int8)
    return QuantizedTensor(x_min=x_min, x_max=x_max, sign=sign, level=level, q=q)


def quantize_decode(z: QuantizedTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Reconstruct Q(x, q) = sign * (x_min + (x_max - x_min) * level / q) (eq. 21a)."""
    dtype = dtype or z.x_min.dtype
    mag = z.x_min + (z.x_max - z.x_min) * (z.level.to(dtype) / z.q)
    return z.sign.to(dtype) * mag


def stochastic_quantize(x: torch.Tensor, q: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Q(x, q) of LFL App. A (eq. 21–22), applied to every vector x[..., :] independently.

    Unbiased (Lemma 1, eq. 1b): E[Q(x, q)] = x. The output takes at most q + 1 distinct
    magnitudes per vector (x_min + (x_max - x_min) l / q, l = 0..q) and keeps every sign.
    Costs :func:`quantized_bits` (d, q) bits per vector. Pass a seeded ``torch.Generator`` on
    x's device for reproducibility.
    """
    return quantize_decode(quantize_encode(x, q, generator), dtype=x.dtype)


def _quantize(x: torch.Tensor, q: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """stochastic_quantize without argument checks, for the optimizers' inner loops: a
    diverged (non-finite) model then propagates NaN instead of raising mid-run."""
    return quantize_decode(_encode(x, q, generator), dtype=x.dtype)


def quantized_bits(d: int, q: int) -> float:
    """R_Q(d, q) = 64 + d (1 + log2(q + 1)) bits for one quantized d-vector (eq. 23)."""
    d = check_int("d", d, minimum=1)
    q = check_int("q", q, minimum=1)
    return 64.0 + d * (1.0 + math.log2(q + 1))


def lossless_bits(d: int, bits_per_entry: int = 33) -> float:
    """R_LB = 33 d: the paper's cost of sending a d-vector exactly (Sec. 4, before eq. 19)."""
    d = check_int("d", d, minimum=1)
    bits_per_entry = check_int("bits_per_entry", bits_per_entry, minimum=1)
    return float(bits_per_entry * d)


def broadcast_saving_ratio(d: int, q: int, bits_per_entry: int = 33) -> float:
    """R_LB / R_Q = 33 d / (64 + d (1 + log2(q + 1))) (eq. 19); -> 33 / (1 + log2(q + 1)) as d grows."""
    return lossless_bits(d, bits_per_entry) / quantized_bits(d, q)


def quantization_skewness(x: torch.Tensor) -> torch.Tensor:
    """eps = (x_max - x_min)^2 / ||x||^2 of Lemma 1 per vector (shape x.shape[:-1]).

    eps = 0 for x = 0 **(choice)**: the quantizer is then exact.
    """
    _check_vector_batch("x", x)
    a = x.abs()
    span = a.amax(dim=-1) - a.amin(dim=-1)
    sq = (x * x).sum(dim=-1)
    return torch.where(sq > 0, span * span / torch.where(sq > 0, sq, torch.ones_like(sq)), torch.zeros_like(sq))


def quantization_second_moment(x: torch.Tensor, q: int) -> torch.Tensor:
    """Exact E||Q(x, q)||^2 per vector, from the proof of Lemma 1 (eq. 25–26b):

    ||x||^2 + (x_max - x_min)^2 sum_i (u_i q - l_i)(1 - u_i q + l_i) / q^2.
    """
    err = quantization_error_variance(x, q)  # validates x and q
    return (x * x).sum(dim=-1) + err * x.shape[-1]


def quantization_error_variance(x: torch.Tensor, q: int) -> torch.Tensor:
    """Exact E||Q(x, q) - x||^2 / d per vector: the variance of the quantization error per
    coordinate, (x_max - x_min)^2 sum_i (u_i q - l_i)(1 - u_i q + l_i) / (d q^2)
    (Lemma 1's proof, eq. 25–26b; Q is unbiased, so this is E||Q||^2 - ||x||^2 over d).
    At most (x_max - x_min)^2 / (4 q^2).
    """
    q = check_int("q", q, minimum=1)
    _check_vector_batch("x", x)
    a = x.abs()
    x_max = a.amax(dim=-1, keepdim=True)
    x_min = a.amin(dim=-1, keepdim=True)
    span = x_max - x_min
    safe = torch.where(span > 0, span, torch.ones_like(span))
    u = torch.where(span > 0, (a - x_min) / safe, torch.zeros_like(a)).clamp(0.0, 1.0)
    uq = u * q
    frac = uq - torch.floor(uq).clamp(max=q - 1)
    return (span.squeeze(-1) ** 2) * (frac * (1.0 - frac)).mean(dim=-1) / q**2


def lemma1_second_moment_bound(x: torch.Tensor, q: int) -> torch.Tensor:
    """Lemma 1's bound ||x||^2 + eps d ||x||^2 / (4 q^2) on E||Q(x, q)||^2 (eq. 1b), per vector."""
    q = check_int("q", q, minimum=1)
    eps = quantization_skewness(x)
    sq = (x * x).sum(dim=-1)
    d = x.shape[-1]
    return sq + eps * d * sq / (4.0 * q * q)


def stochastic_round_float(
    x: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    mantissa_bits: int = 10,
    min_exponent: int = -14,
    max_value: float = 65504.0,
) -> torch.Tensor:
    """Unbiased stochastic rounding of every entry to a binary floating-point grid.

    The default grid is IEEE half precision (16 bits: sign, 5 exponent bits, 10 mantissa bits,
    subnormals below 2^-14) — the **(choice)** made for DZOFL's M = 16-bit scalar quantizer
    Q (Mhanna & Assaad, Assumption IV.5, eq. 11). Each x lies between two neighbouring grid
    points lo <= |x| <= hi and is rounded up with probability (|x| - lo) / (hi - lo), so
    E[Q(x)] = x and E[(Q(x) - x)^2] <= (ulp/2)^2 <= 2^(-2 mantissa_bits - 2) x^2 for
    normal numbers (Assumption IV.5 with sigma = 2^-22 for half precision; subnormals add an
    absolute 2^-50 at most). Magnitudes beyond ``max_value`` saturate to it (the one biased case).
    The result is exactly representable in the target format (float16 by default).
    """
    mantissa_bits = check_int("mantissa_bits", mantissa_bits, minimum=1, maximum=52)
    min_exponent = check_int("min_exponent", min_exponent, maximum=0)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError("x must be a floating-point torch.Tensor")
    if not torch.isfinite(x).all():
        raise ValueError("x must be finite (no NaN or inf entries)")
    xd = x.to(torch.float64)
    a = xd.abs()
    tiny = 2.0**min_exponent
    e = torch.floor(torch.log2(torch.clamp(a, min=tiny)))
    e = torch.clamp(e, min=float(min_exponent))
    ulp = torch.pow(2.0, e - mantissa_bits)
    lo = torch.floor(a / ulp) * ulp
    p_up = ((a - lo) / ulp).clamp(0.0, 1.0)
    r = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float64)
    mag = torch.clamp(lo + ulp * (r < p_up).to(torch.float64), max=float(max_value))
    return (torch.sign(xd) * mag).to(x.dtype)
