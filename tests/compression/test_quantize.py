"""LFL's stochastic quantizer (App. A), its bit cost (eq. 23, 19) and Lemma 1; the
half-precision stochastic rounding used by DZOFL."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlangevin.compression import (
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


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _entry_variance(x: torch.Tensor, q: int) -> torch.Tensor:
    """Exact per-entry Var Q(x_i) = (x_max - x_min)^2 f (1 - f) / q^2, f = u q - l (eq. 25)."""
    a = x.abs()
    span = a.max() - a.min()
    u = (a - a.min()) / span
    f = u * q - torch.floor(u * q).clamp(max=q - 1)
    return span**2 * f * (1 - f) / q**2


@pytest.mark.parametrize("q", [1, 2, 5])
def test_unbiased_monte_carlo(q):
    x = torch.randn(40, generator=_gen(1), dtype=torch.float64) * torch.linspace(0.1, 3.0, 40, dtype=torch.float64)
    n = 100_000
    Q = stochastic_quantize(x.expand(n, -1), q, _gen(2))
    mean = Q.mean(0)
    se = (_entry_variance(x, q) / n).sqrt()
    random = se > 0
    # entries with zero variance (x_min, x_max, exact grid points) are reproduced exactly
    assert torch.allclose(mean[~random], x[~random], rtol=1e-12, atol=0)
    # 40 entries, each |z| <= 5 except with probability 5.7e-7 under the CLT (n = 1e5 draws)
    z = (mean[random] - x[random]) / se[random]
    assert z.abs().max() < 5.0


@pytest.mark.parametrize("q", [1, 2, 7])
def test_second_moment_exact_and_lemma1_bound(q):
    x = torch.randn(30, generator=_gen(3), dtype=torch.float64) ** 3
    n = 100_000
    Q = stochastic_quantize(x.expand(n, -1), q, _gen(4))
    sq = (Q * Q).sum(1)
    exact = quantization_second_moment(x, q)
    # CLT: the mean of 1e5 i.i.d. ||Q||^2 is within 5 standard errors of its expectation
    assert abs(float(sq.mean() - exact)) < 5 * float(sq.std()) / math.sqrt(n)
    bound = lemma1_second_moment_bound(x, q)
    assert float(exact) <= float(bound) + 1e-12
    # the quantization noise is real: E||Q||^2 exceeds ||x||^2 by a visible margin
    assert float(exact) > float((x * x).sum()) * (1 + 1e-3)


def test_lemma1_bound_is_tight_in_the_worst_case():
    # all interior entries halfway between levels: f(1-f) = 1/4 and the bound's d (x_max-x_min)^2/(4q^2)
    # is attained up to the two extreme entries (which are exact)
    q, d = 2, 1000
    x = torch.full((d,), 0.25, dtype=torch.float64)
    x[0], x[1] = 0.0, 1.0
    excess = float(quantization_second_moment(x, q) - (x * x).sum())
    assert excess == pytest.approx((d - 2) * 1.0 / (4 * q * q), rel=1e-12)
    bound_excess = float(lemma1_second_moment_bound(x, q) - (x * x).sum())
    assert excess <= bound_excess and excess / bound_excess > 0.99


@settings(max_examples=60, deadline=None)
@given(
    q=st.integers(1, 12),
    d=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(1e-6, 1e6),
)
def test_at_most_q_plus_1_magnitudes_and_signs_kept(q, d, seed, scale):
    x = torch.randn(d, generator=_gen(seed), dtype=torch.float64) * scale
    Q = stochastic_quantize(x, q, _gen(seed + 1))
    a = x.abs()
    levels = a.min() + (a.max() - a.min()) * torch.arange(q + 1, dtype=torch.float64) / q
    mags = torch.unique(Q.abs())
    assert mags.numel() <= q + 1
    # every output magnitude is one of the q + 1 levels x_min + (x_max - x_min) l / q
    assert torch.isclose(mags[:, None], levels[None, :], rtol=1e-12, atol=0).any(dim=1).all()
    assert torch.equal(torch.sign(Q), torch.sign(x))
    # magnitudes stay within [x_min, x_max] and each entry rounds to an adjacent level
    assert (Q.abs() >= a.min() * (1 - 1e-12)).all() and (Q.abs() <= a.max() * (1 + 1e-12)).all()
    step = (a.max() - a.min()) / q
    assert ((Q.abs() - a).abs() <= step * (1 + 1e-9) + 1e-300).all()


def test_skewness_extremes():
    equal = torch.tensor([1.5, -1.5, 1.5, -1.5, 1.5])
    assert float(quantization_skewness(equal)) == 0.0
    onehot = torch.zeros(17)
    onehot[4] = -3.0
    assert float(quantization_skewness(onehot)) == pytest.approx(1.0, abs=1e-7)
    # equal magnitudes are quantized exactly (x_max = x_min)
    assert torch.equal(stochastic_quantize(equal, 2, _gen(0)), equal)
    assert torch.equal(stochastic_quantize(torch.zeros(5), 3, _gen(0)), torch.zeros(5))
    # eps in [0, 1] for arbitrary vectors, batched
    X = torch.randn(200, 9, generator=_gen(5))
    eps = quantization_skewness(X)
    assert eps.shape == (200,) and (eps >= 0).all() and (eps <= 1 + 1e-6).all()


def test_bit_formula_and_saving_ratios():
    assert quantized_bits(1, 1) == 64 + 1 * (1 + 1)
    assert quantized_bits(1000, 3) == 64 + 1000 * 3
    assert quantized_bits(10, 2) == pytest.approx(64 + 10 * (1 + math.log2(3)))
    assert lossless_bits(100) == 3300
    big = 10**9
    # eq. (19): R_LB / R_Q -> 33 / (1 + log2(q1 + 1)); the paper quotes 12.77 (q1 = 2) and 9.2 (q1 = 5)
    assert round(broadcast_saving_ratio(big, 2), 2) == 12.77
    assert round(broadcast_saving_ratio(big, 5), 1) == 9.2
    assert broadcast_saving_ratio(big, 2) == pytest.approx(33 / (1 + math.log2(3)), rel=1e-6)
    # for a small model the 64 header bits lower the ratio
    assert broadcast_saving_ratio(100, 2) < broadcast_saving_ratio(big, 2)


def test_encode_decode_and_batching():
    X = torch.randn(6, 25, generator=_gen(7)) * torch.tensor([1e-3, 1.0, 10.0, 1e3, 1e5, 0.5])[:, None]
    z = quantize_encode(X, 4, _gen(8))
    assert z.level.dtype == torch.int64 and int(z.level.min()) >= 0 and int(z.level.max()) <= 4
    assert z.x_min.shape == (6, 1) and z.bits == 6 * quantized_bits(25, 4)
    Q = quantize_decode(z)
    assert torch.equal(Q, stochastic_quantize(X, 4, _gen(8)))
    # each row keeps its own scale: its magnitudes lie in its own [x_min, x_max]
    a = X.abs()
    assert (Q.abs() >= a.amin(1, keepdim=True) * (1 - 1e-6)).all()
    assert (Q.abs() <= a.amax(1, keepdim=True) * (1 + 1e-6)).all()


def test_seeded_reproducible_and_dtype_kept():
    x = torch.randn(100, generator=_gen(9))
    a = stochastic_quantize(x, 2, _gen(10))
    b = stochastic_quantize(x, 2, _gen(10))
    c = stochastic_quantize(x, 2, _gen(11))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.dtype == torch.float32 and stochastic_quantize(x.double(), 2).dtype == torch.float64


@pytest.mark.parametrize(
    "args, name",
    [
        ((torch.ones(3), 0), "q"),
        ((torch.ones(3), 1.5), "q"),
        ((torch.ones(3), True), "q"),
        ((torch.ones(3, dtype=torch.int64), 2), "x"),
        ((torch.tensor([1.0, float("nan")]), 2), "x"),
        ((torch.tensor(1.0), 2), "x"),
        ((torch.ones(3, 0), 2), "x"),
    ],
)
def test_bad_input_raises(args, name):
    with pytest.raises(ValueError, match=name):
        stochastic_quantize(*args)


def test_bits_bad_input():
    with pytest.raises(ValueError, match="d"):
        quantized_bits(0, 2)
    with pytest.raises(ValueError, match="q"):
        quantized_bits(10, 0)


def test_half_precision_rounding_unbiased_and_on_grid():
    x = torch.tensor([1.0 + 2**-12, -3.14159, 1e-6, 12345.678, 2.0**-20, 0.0], dtype=torch.float64)
    n = 200_000
    R = stochastic_round_float(x.expand(n, -1), _gen(12))
    # every value is an exact float16 number
    assert torch.equal(R.to(torch.float16).to(torch.float64), R)
    # the rounding picks one of the two neighbouring grid points: error below one ulp
    assert ((R - x).abs() <= (x.abs() * 2**-10).clamp(min=2**-24) * (1 + 1e-12)).all()
    # unbiased: Var <= ulp^2 / 4, so |mean - x| <= 5 sqrt(ulp^2 / (4 n)) except with prob ~6e-7 per entry
    ulp = torch.where(x.abs() >= 2**-14, 2.0 ** (torch.floor(torch.log2(x.abs().clamp(min=2**-14))) - 10), torch.tensor(2.0**-24, dtype=torch.float64))
    assert ((R.mean(0) - x).abs() <= 5 * ulp / 2 / math.sqrt(n) + 1e-300).all()
    assert float(R[:, 5].abs().max()) == 0.0
    # relative variance of Assumption IV.5 with sigma = 2^-22 in the normal range
    normal = x.abs() >= 2**-14
    rel = ((R - x) ** 2).mean(0)[normal] / (x[normal] ** 2)
    assert (rel <= 2.0**-22 * 1.05).all()
    # saturation beyond the largest half-precision number
    assert float(stochastic_round_float(torch.tensor([1e6]), _gen(0))) == 65504.0
