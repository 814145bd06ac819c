"""Quantized uploads for FA-LD: the codec is unbiased, its exact error variance matches Monte
Carlo, and the FALD upload hook is free when unused and exact in the limit of many levels."""

from __future__ import annotations

import math

import pytest
import torch

import fedlangevin as fl
from fedlangevin.compression import (
    QuantizedUpdateUpload,
    aggregated_error_variance,
    quantization_error_variance,
    quantized_bits,
)
from fedlangevin.problems import QuadraticProblem
from tests.targets import small_problem_arrays


def _states(seed: int = 0, r: int = 2, n: int = 3, d: int = 40):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(r, d, generator=g, dtype=torch.float64)
    beta = theta[:, None, :] + 0.3 * torch.randn(r, n, d, generator=g, dtype=torch.float64)
    return beta, theta


def test_codec_is_unbiased_and_its_error_variance_is_exact():
    """Monte Carlo over 20000 codec draws: the mean received state equals beta (within 5
    standard errors per coordinate, from the exact per-entry variance), and the mean squared
    error of the weighted server average equals sum_c w_c^2 v_c (5 standard errors of the
    squared-error mean, estimated from the draws)."""
    beta, theta = _states()
    w = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    codec = QuantizedUpdateUpload(2, generator=torch.Generator().manual_seed(1))
    m = 20000
    received = codec(beta.expand(m, -1, -1, -1).reshape(m * 2, 3, 40),
                     theta.expand(m, -1, -1).reshape(m * 2, 40)).reshape(m, 2, 3, 40)
    err = received - beta
    per_entry_var = quantization_error_variance(beta - theta[:, None, :], 2)  # (2, 3): mean over entries
    mean_err = err.mean(0)
    # a per-entry variance is at most span^2 / (4 q^2); use that bound for the standard error
    span = (beta - theta[:, None, :]).abs().amax(-1) - (beta - theta[:, None, :]).abs().amin(-1)
    se = (span / 4).unsqueeze(-1) / math.sqrt(m)
    assert bool((mean_err.abs() <= 5 * se + 1e-12).all())
    agg = torch.einsum("n,mrnd->mrd", w, err)  # error of the server average
    sq = (agg * agg).mean(-1)  # (m, r): per-coordinate squared error
    exact = aggregated_error_variance(beta, theta, w, 2)
    assert exact.shape == (2,)
    assert torch.allclose(exact, (w * w * per_entry_var).sum(-1))
    mc, mc_se = sq.mean(0), sq.std(0) / math.sqrt(m)
    assert bool(((mc - exact).abs() <= 5 * mc_se).all()), (mc, exact, mc_se)


def test_codec_bits_and_validation():
    assert QuantizedUpdateUpload(2).bits(650) == quantized_bits(650, 2) == 64 + 650 * (1 + math.log2(3))
    with pytest.raises(ValueError, match="q"):
        QuantizedUpdateUpload(0)
    with pytest.raises(ValueError, match="generator"):
        QuantizedUpdateUpload(2, generator=3)


def _problem():
    h, b, p = small_problem_arrays()
    return QuadraticProblem(h, b, p)


def test_upload_hook_none_and_identity_give_the_same_draws():
    """upload=None and an identity codec produce bit-identical samples (the hook changes
    nothing else, e.g. the random stream)."""
    kw = dict(step_size=0.02, local_steps=3, chains=4, seed=5)
    a = fl.FALD(_problem(), **kw).run(15).samples
    b = fl.FALD(_problem(), upload=lambda beta, theta, g: beta.clone(), **kw).run(15).samples
    assert torch.equal(a, b)


def test_upload_hook_sees_broadcast_and_local_states():
    """The codec receives (beta (R, N, d), theta (R, d)) with theta the broadcast global, and
    the server averages what it returns: sending theta from every client freezes the chain."""
    seen = []

    def frozen(beta, theta, g):
        seen.append((tuple(beta.shape), tuple(theta.shape)))
        return theta.unsqueeze(1).expand_as(beta).clone()

    trace = fl.FALD(_problem(), step_size=0.02, local_steps=2, chains=3, seed=0, init=[1.0, -2.0],
                    upload=frozen).run(4)
    assert seen == [((3, 3, 2), (3, 2))] * 4
    assert torch.allclose(trace.samples, torch.tensor([1.0, -2.0], dtype=torch.float64).expand_as(trace.samples))


def test_upload_hook_validation():
    with pytest.raises(ValueError, match="upload"):
        fl.FALD(_problem(), step_size=0.02, upload="quantize")
    for wrong in (lambda beta, theta, g: theta, lambda beta, theta, g: beta.float(),
                  lambda beta, theta, g: beta.tolist()):
        with pytest.raises(ValueError, match="upload codec must return"):
            fl.FALD(_problem(), step_size=0.02, upload=wrong).run(2)


def test_a_codec_that_returns_nan_is_named_as_the_cause():
    """Client states finite, codec output not: the divergence error blames the upload, in the
    round where it happened, and keeps the draws before it."""
    calls = []

    def spoiled(beta, theta, g):
        calls.append(1)
        out = beta.clone()
        if len(calls) == 3:
            out[0, 0, 0] = float("nan")
        return out

    with pytest.raises(fl.DivergenceError) as info:
        fl.FALD(_problem(), step_size=0.02, local_steps=2, chains=3, seed=0, upload=spoiled).run(5)
    err = info.value
    assert err.round == 3 and err.chains == [0] and err.causes == {0: "upload"}
    assert "upload codec" in str(err) and err.trace.num_draws == 2


def test_a_run_with_an_upload_codec_refuses_checkpoints(tmp_path):
    """The codec (and its random stream) is not part of a checkpoint, so a resumed run could
    not continue bit for bit: refused before any work, naming the argument."""
    sampler = fl.FALD(_problem(), step_size=0.02, upload=lambda beta, theta, g: beta.clone())
    with pytest.raises(ValueError, match="checkpoint"):
        sampler.run(3, checkpoint=tmp_path / "run.ckpt")
    assert sampler.state.round == 0 and not (tmp_path / "run.ckpt").exists()


def test_many_levels_reproduce_the_exact_run():
    """With its own random stream the codec leaves the sampler's noise unchanged, so q = 2^30
    (quantization error <= span / q ~ 1e-9 per coordinate) reproduces the exact-upload chain to
    floating-point accuracy; q = 2 does not. (d = 8: with d = 2 the quantizer is exact, its two
    magnitudes being x_min and x_max.)"""
    g = torch.Generator().manual_seed(4)
    shifts = torch.randn(3, 8, generator=g, dtype=torch.float64)
    problem = QuadraticProblem(torch.diag(torch.linspace(0.5, 4.0, 8, dtype=torch.float64)), shifts, [0.5, 0.3, 0.2])
    kw = dict(step_size=0.02, local_steps=3, chains=4, seed=9)
    exact = fl.FALD(problem, **kw).run(30).samples
    fine = fl.FALD(problem, upload=QuantizedUpdateUpload(2**30, torch.Generator().manual_seed(0)), **kw).run(30).samples
    coarse = fl.FALD(problem, upload=QuantizedUpdateUpload(2, torch.Generator().manual_seed(0)), **kw).run(30).samples
    assert float((fine - exact).abs().max()) < 1e-7
    assert float((coarse - exact).abs().max()) > 1e-3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_codec_generator_on_another_device_is_a_clear_error_and_cuda_codec_runs():
    with pytest.raises(ValueError, match="upload"):
        fl.FALD(_problem(), step_size=0.02, device="cuda", upload=QuantizedUpdateUpload(2, torch.Generator()))
    codec = QuantizedUpdateUpload(2, torch.Generator(device="cuda").manual_seed(0))
    trace = fl.FALD(_problem(), step_size=0.02, local_steps=2, chains=3, seed=0, device="cuda", upload=codec).run(5)
    assert trace.samples.shape == (3, 5, 2) and torch.isfinite(trace.samples).all()
