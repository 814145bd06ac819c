"""DZOFL (Mhanna & Assaad, Alg. 1): mean update on a quadratic, packet loss, step sizes, bits and
the energy model of Sec. III-C."""

from __future__ import annotations

import math

import pytest
import torch

from fedlangevin.compression.dzofl import (
    DZOFLConfig,
    DZOFLOptimizer,
    EnergyModel,
    backward_energy,
    check_exponents,
    dzofl_estimate,
    dzofl_upload_bits,
    forward_energy,
    mac_energy,
    perturbation,
    received_probability,
    standard_fl_upload_bits,
    step_sizes,
)
from fedlangevin.compression.models import MultinomialLogistic, gaussian_mixture, split_iid


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_mean_update_on_a_quadratic_is_2_q_gamma_grad_over_d():
    """f_i(theta) = (1/2) theta^T A_i theta - b_i^T theta: Delta f_i = 2 gamma Phi^T grad F_i(theta)
    exactly, so E[g] = 2 q gamma grad F / d (Lemma A.1–A.2 with zero bias), q = 1 - (1-p)^N."""
    gen = _gen(0)
    d, N, p, gamma, K = 6, 5, 0.3, 0.05, 400_000
    A = torch.randn(N, d, d, generator=gen, dtype=torch.float64)
    A = A @ A.transpose(1, 2) / d + torch.eye(d, dtype=torch.float64)
    b = torch.randn(N, d, generator=gen, dtype=torch.float64)
    theta = torch.randn(d, generator=gen, dtype=torch.float64)
    grads = A @ theta - b  # (N, d): grad F_i(theta)
    phi = perturbation(d, generator=gen, batch=(K,), dtype=torch.float64)  # (K, d)

    def f(x):  # x (K, d) -> (K, N)
        return 0.5 * torch.einsum("kd,nde,ke->kn", x, A, x) - x @ b.T

    delta_f = f(theta + gamma * phi) - f(theta - gamma * phi)
    assert torch.allclose(delta_f, 2 * gamma * phi @ grads.T, atol=1e-12)
    received = torch.rand(K, N, generator=gen) < p
    g, _ = dzofl_estimate(delta_f, phi, received, gen)
    q = received_probability(p, N)
    assert q == pytest.approx(1 - 0.7**5)
    target = 2 * q * gamma * grads.sum(0) / d
    mean, se = g.mean(0), g.std(0) / math.sqrt(K)
    # CLT: each of the 6 coordinates within 5 standard errors (failure probability ~ 3e-6)
    assert ((mean - target).abs() / se).max() < 5.0
    # the signal is resolved: |target| is many standard errors away from 0 in every coordinate
    assert (target.abs() / se).min() > 10.0
    # without packet loss the estimate of 2 gamma grad F / d is just as unbiased (q = 1)
    g1, _ = dzofl_estimate(delta_f, phi, torch.ones(K, N, dtype=torch.bool), gen)
    assert ((g1.mean(0) - 2 * gamma * grads.sum(0) / d).abs() / (g1.std(0) / math.sqrt(K))).max() < 5.0


def test_empty_receive_set_keeps_the_model_and_aggregate_scales_by_n_over_s():
    phi = perturbation(4, generator=_gen(1), dtype=torch.float64)
    delta_f = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    g, down = dzofl_estimate(delta_f, phi, torch.zeros(3, dtype=torch.bool), _gen(2))
    assert float(down) == 0.0 and torch.equal(g, torch.zeros(4, dtype=torch.float64))
    g, down = dzofl_estimate(delta_f, phi, torch.tensor([True, False, True]), quantize=False)
    assert float(down) == pytest.approx(3 / 2 * (1.0 + 3.0))  # (N / |S|) sum_S Delta f_i, eq. (3)
    assert torch.allclose(g, phi * down)
    # perturbation entries are +-1/sqrt(d): ||Phi|| = 1
    assert set((phi * 2).tolist()) <= {-1.0, 1.0} and float(phi.norm()) == pytest.approx(1.0)


def test_step_sizes_and_exponent_conditions():
    a, g = step_sizes(3, alpha0=0.1, gamma0=0.2, v1=0.26, v2=0.26)
    assert a == pytest.approx(0.1 * 4**-0.26) and g == pytest.approx(0.2 * 4**-0.26)
    check_exponents(0.25 + 0.01, 0.25 + 0.01)  # the paper's 1/4 + eps/2
    check_exponents(0.5, 0.5)
    check_exponents(0.9, 0.05)  # v1 + 3 v2 = 1.05 > 1
    for v1, v2 in ((0.25, 0.25), (0.1, 0.3), (0.6, 0.6), (0.9, 0.03)):
        with pytest.raises(ValueError, match="v1"):
            check_exponents(v1, v2)
    with pytest.raises(ValueError, match="v2"):
        check_exponents(0.5, -0.1)
    with pytest.raises(ValueError, match="p"):
        DZOFLConfig(p=0.0)


def test_bit_counts():
    # Sec. III-A: d = 4e5, M = 16, T' = 100 -> 6.4e8 bits per device for standard FL
    assert standard_fl_upload_bits(100, d=400_000, M=16) == 6.4e8
    # DZOFL sends T M bits per device: 40000x fewer for T = 1000, 4000x for T = 10000 (the paper
    # states 40000x for T = 10000, an arithmetic slip)
    assert standard_fl_upload_bits(100, d=400_000) / dzofl_upload_bits(1000) == 40_000
    assert standard_fl_upload_bits(100, d=400_000) / dzofl_upload_bits(10_000) == 4_000
    assert dzofl_upload_bits(10, N=50) == 8000


def test_energy_constants_reproduce_the_paper():
    assert mac_energy(16) == pytest.approx(1.5557e-12, rel=1e-4)
    fp = forward_energy()
    assert fp["total"] == pytest.approx(2.347e-5, rel=2e-4)
    assert sum(v for k, v in fp.items() if k != "total") == pytest.approx(fp["total"])
    assert backward_energy() == pytest.approx(8.993e-5, rel=1e-4)
    assert backward_energy() / fp["total"] == pytest.approx(3.83, abs=0.005)
    # the SRAM term switches on once the weights and activations no longer fit in S
    small = EnergyModel(S_bits=1e6)
    assert forward_energy(small)["dram"] > fp["dram"] and backward_energy(small) > backward_energy()
    with pytest.raises(ValueError, match="mu"):
        EnergyModel(mu=2.5)


def test_dzofl_learns_a_separable_problem_and_counts_bits():
    g = _gen(3)
    X, y, means = gaussian_mixture(100, num_classes=3, dim=5, separation=3.0, generator=g)
    Xt, yt, _ = gaussian_mixture(100, num_classes=3, dim=5, means=means, generator=g)
    clients = split_iid(X, y, 10, generator=g)
    opt = DZOFLOptimizer(MultinomialLogistic(5, 3), clients, DZOFLConfig(alpha0=0.5, gamma0=0.05, p=0.8), seed=4)
    hist = opt.run(600, (Xt, yt), eval_every=300)
    # theta(0) = 0 predicts one class (accuracy 1/3); 600 zero-order rounds get well above it
    assert hist.final() > 0.8
    assert hist.bits_up[-1] == 600 * 10 * 16 and hist.bits_down[-1] == 600 * 16


def test_processing_energy_totals():
    from fedlangevin.compression.dzofl import processing_energy

    fp, bp = forward_energy()["total"], backward_energy()
    assert processing_energy(1000, backward=False) == pytest.approx(1000 * fp)
    assert processing_energy(100, backward=True) == pytest.approx(100 * (fp + bp))
    assert processing_energy(10, backward=False, forward_passes=2) == pytest.approx(20 * fp)
    with pytest.raises(ValueError, match="forward_passes"):
        processing_energy(10, backward=False, forward_passes=0)
