"""LFL's codecs (Alg. 1 lines 2-5, eqs. 2-3) and those of its baselines LGM and LTGM: the state
identities, the bits and unbiasedness of each."""

from __future__ import annotations

import math

import pytest
import torch

from fedlangevin.compression import lossless_bits, quantized_bits
from fedlangevin.compression.lfl_codecs import (
    LFLBroadcast,
    LGMBroadcast,
    LosslessUpload,
    LTGMBroadcast,
    QuantizedUpload,
    walsh_hadamard,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# Walsh–Hadamard transform


def test_walsh_hadamard_matches_matrix_and_is_an_involution():
    from scipy.linalg import hadamard

    x = torch.randn(3, 16, generator=_gen(0), dtype=torch.float64)
    H = torch.tensor(hadamard(16), dtype=torch.float64) / 4.0
    assert torch.allclose(walsh_hadamard(x), x @ H.T, atol=1e-12)
    assert torch.allclose(walsh_hadamard(walsh_hadamard(x)), x, atol=1e-12)
    assert torch.allclose(walsh_hadamard(x).norm(dim=1), x.norm(dim=1), rtol=1e-12)
    with pytest.raises(ValueError, match="power of two"):
        walsh_hadamard(torch.ones(12))


# ---------------------------------------------------------------------------------------------
# Codecs


def test_lfl_broadcast_tracks_the_model_and_counts_bits():
    d = 37
    theta0 = torch.randn(d, generator=_gen(1), dtype=torch.float64)
    codec = LFLBroadcast(q=2)
    # round 0: theta_hat(-1) = theta(0), the update is zero and quantized exactly
    out = codec(theta0, theta0.clone(), None, _gen(2))
    assert torch.equal(out.theta_hat, theta0) and out.bits == quantized_bits(d, 2)
    # later rounds: theta_hat(t) = theta_hat(t-1) + Q(theta(t) - theta_hat(t-1)) and E theta_hat(t) = theta(t)
    theta1 = theta0 + 0.1 * torch.randn(d, generator=_gen(3), dtype=torch.float64)
    n = 40_000
    prev = theta0.expand(n, -1)
    out = codec(theta1.expand(n, -1), prev, None, _gen(4))
    assert torch.allclose(out.sent, (theta1 - theta0).expand(n, -1))
    # per-entry std of Q is at most (x_max - x_min) / (2 q); 5 standard errors of the mean
    span = float((theta1 - theta0).abs().max() - (theta1 - theta0).abs().min())
    assert float((out.theta_hat.mean(0) - theta1).abs().max()) < 5 * span / 4 / math.sqrt(n)


def test_lgm_error_accumulation_identity():
    d = 20
    codec = LGMBroadcast(q=2)
    theta = torch.randn(d, generator=_gen(5), dtype=torch.float64)
    e = codec.init_state(theta)
    assert torch.equal(e, torch.zeros(d, dtype=torch.float64))
    for t in range(5):
        out = codec(theta, None, e, _gen(6 + t))
        # theta_hat(t) + e(t+1) = theta(t) + e(t) exactly (v = theta + e is split, nothing lost)
        assert torch.allclose(out.theta_hat + out.state, theta + e, atol=1e-12)
        assert torch.allclose(out.sent, theta + e)
        e = out.state
        theta = theta + 0.01


def test_ltgm_bits_padding_and_unbiasedness():
    d = 37  # padded to 64
    theta = torch.randn(d, generator=_gen(7), dtype=torch.float64)
    codec = LTGMBroadcast(q=3)
    s = codec.init_state(theta, _gen(8))
    assert s.shape == (64,) and set(s.unique().tolist()) == {-1.0, 1.0}
    out = codec(theta, None, s, _gen(9))
    assert out.bits == quantized_bits(64, 3) and out.sent.shape == (64,)
    # a huge level count recovers theta: the inverse transform is exact
    fine = LTGMBroadcast(q=10**6)(theta, None, s, _gen(10))
    assert torch.allclose(fine.theta_hat, theta, atol=1e-5 * float(theta.abs().max()))
    # unbiased: H and diag(s) are linear, Q is unbiased
    n = 40_000
    outs = codec(theta.expand(n, -1), None, s, _gen(11))
    err = (outs.theta_hat - theta).std(0) / math.sqrt(n)
    assert float(((outs.theta_hat.mean(0) - theta).abs() / err).max()) < 5.0


def test_quantized_upload_error_feedback_identity_and_bits():
    M, d = 4, 15
    delta = torch.randn(M, d, generator=_gen(12), dtype=torch.float64)
    memory = 0.1 * torch.randn(M, d, generator=_gen(13), dtype=torch.float64)
    out = QuantizedUpload(q=2)(delta, memory, _gen(14))
    # s_m + delta_m(t+1) = Delta_m + delta_m(t) (eq. 3)
    assert torch.allclose(out.sent + out.memory, delta + memory, atol=1e-12)
    assert out.bits == M * quantized_bits(d, 2)
    # each device row is quantized with its own scale: at most q + 1 magnitudes per row
    for m in range(M):
        assert out.sent[m].abs().unique().numel() <= 3
    plain = LosslessUpload()(delta, memory)
    assert torch.equal(plain.sent, delta) and plain.bits == M * lossless_bits(d)
    sel = torch.tensor([True, False, True, False])
    part = QuantizedUpload(q=2)(delta, memory, _gen(14), selected=sel)
    assert part.bits == 2 * quantized_bits(d, 2)
    assert torch.equal(part.memory[~sel], memory[~sel]) and torch.equal(part.sent[~sel], torch.zeros(2, d, dtype=torch.float64))
