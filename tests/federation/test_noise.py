"""Injected noise (eq. 10 / 14 / 15)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedlangevin.federation.noise import NoiseTally, add_noise_, client_noise_weight, noise_scales


@pytest.mark.parametrize("rho", [0.0, 0.4, 1.0])
def test_averaged_noise_has_covariance_2_eta_tau(rho):
    """sum_c p_c (client noise) ~ N(0, 2 eta tau I) for any rho (eq. 15).

    Monte Carlo: with R draws, a variance estimate has standard error v sqrt(2 / R) and a
    covariance (true value 0) has standard error v / sqrt(R); we allow 5 standard errors.
    """
    r, eta, tau = 200_000, 0.01, 1.7
    p = torch.tensor([0.5, 0.25, 0.15, 0.1], dtype=torch.float64)
    scales = noise_scales(p, tau, rho)
    g = torch.Generator().manual_seed(1)
    x = add_noise_(torch.zeros(r, 4, 3, dtype=torch.float64), scales, eta, g)
    avg = torch.einsum("n,rnd->rd", p, x).numpy()
    v = 2 * eta * tau
    cov = np.cov(avg, rowvar=False)
    assert np.abs(np.diag(cov) - v).max() < 5 * v * math.sqrt(2 / r)
    off = cov[~np.eye(3, dtype=bool)]
    assert np.abs(off).max() < 5 * v / math.sqrt(r)
    assert np.abs(avg.mean(0)).max() < 5 * math.sqrt(v / r)


def test_per_client_variance_and_cross_client_correlation():
    """Client c's noise has variance 2 eta tau (rho^2 + (1 - rho^2)/p_c) (the temperature
    T_{c,rho} of Sec. 5.3.3) and clients c != c' have covariance 2 eta tau rho^2."""
    r, eta, tau, rho = 200_000, 0.02, 1.0, 0.6
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    x = add_noise_(torch.zeros(r, 3, 1, dtype=torch.float64), noise_scales(p, tau, rho), eta, g)[..., 0].numpy()
    cov = np.cov(x, rowvar=False)
    expected = 2 * eta * tau * (rho**2 * np.ones((3, 3)) + np.diag((1 - rho**2) / p.numpy()))
    se = np.sqrt((np.outer(np.diag(expected), np.diag(expected)) + expected**2) / r)
    assert np.abs((cov - expected) / se).max() < 5


def test_rho_one_draws_only_shared_noise_and_rho_zero_only_private():
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    assert noise_scales(p, 1.0, 1.0).private is None
    assert noise_scales(p, 1.0, 0.0).shared is None
    # rho = 1: every client gets the same vector, identical to one (R, d) draw.
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    x = add_noise_(torch.zeros(5, 2, 3, dtype=torch.float64), noise_scales(p, 1.0, 1.0), 0.5, g1)
    ref = math.sqrt(2 * 0.5) * torch.randn(5, 3, generator=g2, dtype=torch.float64)
    torch.testing.assert_close(x[:, 0], ref, rtol=1e-15, atol=0)
    torch.testing.assert_close(x[:, 1], ref, rtol=1e-15, atol=0)


@pytest.mark.parametrize("rho", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("noise_dtype", [None, torch.float32])
def test_a_tally_of_k_steps_is_one_step_of_k_eta(rho, noise_dtype):
    """Noise alone (no gradient): K steps of eta add sqrt(eta) sum_k xi_k, and one step of K eta with
    the tally's normals (sum_k xi_k / sqrt(K)) adds the same, to rounding; also through a transform (a
    preconditioner's factor A). Tallying draws nothing: the generator ends where it ends without."""
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    scales = noise_scales(p, 1.3, rho, noise_dtype=noise_dtype)
    factor = torch.tensor([[1.0, 0.0, 0.0], [0.4, 0.8, 0.0], [-0.2, 0.1, 0.5]], dtype=torch.float64)
    for transform in (None, lambda z: z @ factor.T):
        k, eta = 6, 0.03
        tally, g, plain = NoiseTally(), torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
        many = torch.zeros(7, 3, 3, dtype=torch.float64)
        same = torch.zeros(7, 3, 3, dtype=torch.float64)
        for _ in range(k):
            add_noise_(many, scales, eta, g, tally=tally, transform=transform)
            add_noise_(same, scales, eta, plain, transform=transform)
        assert torch.equal(many, same) and torch.equal(g.get_state(), plain.get_state())
        assert tally.steps == k and (tally.shared is None) == (rho == 0.0) and (tally.private is None) == (rho == 1.0)
        one = add_noise_(torch.zeros(7, 3, 3, dtype=torch.float64), scales, k * eta, None, normals=tally.normals(),
                         transform=transform)
        torch.testing.assert_close(one, many, rtol=0, atol=1e-12)


def test_given_normals_are_checked_and_an_empty_tally_refused():
    scales = noise_scales(torch.tensor([0.5, 0.5], dtype=torch.float64), 1.0, 0.5)
    theta = torch.zeros(4, 2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"normals: the private normals must have shape \(4, 2, 3\)"):
        add_noise_(theta, scales, 0.1, None, normals=(torch.zeros(4, 1, 3), torch.zeros(4, 1, 3)))
    with pytest.raises(ValueError, match=r"normals: the shared normals must have shape \(4, 1, 3\)"):
        add_noise_(theta, scales, 0.1, None, normals=(None, torch.zeros(4, 2, 3)))
    with pytest.raises(ValueError, match="tally: no local step"):
        NoiseTally().normals()


@pytest.mark.parametrize("k", [2, 5, 6])
def test_the_halves_of_a_tally_are_two_steps_of_k_eta_over_2(k):
    """normals(0) and normals(1): two steps of K eta / 2 that add, noise alone, what the K steps add (to
    rounding; an odd K's middle step split by a Brownian bridge). Each half is a standard normal and
    the two are independent: over 20,000 chains their variances are 1 and their covariance 0 within 5
    standard errors (sqrt(2 / R) and sqrt(1 / R))."""
    p = torch.tensor([0.6, 0.4], dtype=torch.float64)
    scales = noise_scales(p, 1.0, 0.5)
    eta, r = 0.01, 20_000
    tally, g = NoiseTally(halves_of=k), torch.Generator().manual_seed(8)
    many = torch.zeros(r, 2, 1, dtype=torch.float64)
    for _ in range(k):
        add_noise_(many, scales, eta, g, tally=tally)
    bridge = torch.Generator().manual_seed(3)
    first, second = tally.normals(0, bridge), tally.normals(1, bridge)
    two = torch.zeros(r, 2, 1, dtype=torch.float64)
    for half in (first, second):
        add_noise_(two, scales, k * eta / 2, None, normals=half)
    torch.testing.assert_close(two, many, rtol=0, atol=1e-12)
    for a, b in zip(first, second):  # shared (R, 1, 1), private (R, 2, 1)
        a, b = a.reshape(r, -1), b.reshape(r, -1)
        assert (a.var(0) - 1).abs().max() < 5 * math.sqrt(2 / r) and (b.var(0) - 1).abs().max() < 5 * math.sqrt(2 / r)
        assert ((a * b).mean(0)).abs().max() < 5 / math.sqrt(r)
    assert tally.normals(0, bridge)[1].equal(first[1])  # the bridge is drawn once
    with pytest.raises(ValueError, match="half: 0 or 1"):
        _one_step_tally().normals(0)


def _one_step_tally() -> NoiseTally:
    tally = NoiseTally()
    tally.add(None, torch.zeros(2, 2, 1))
    return tally


def test_a_clients_noise_weight_is_its_p_c_or_the_rules_q_c():
    """One client's noise weight: p_c in (0, 1] without a noise_weight, else q_c > 0 (finite) in its place;
    a bad one is refused by name (FA-LD's and FA-HMC's client rounds both read this check)."""
    assert client_noise_weight(0.25) == 0.25
    assert client_noise_weight(0.25, 0.4) == 0.4
    for bad in (0.0, 1.5, math.nan):
        with pytest.raises(ValueError, match="weight"):
            client_noise_weight(bad, 0.4)
    for bad in (0.0, -0.1, math.nan, math.inf, "q"):
        with pytest.raises(ValueError, match="noise_weight"):
            client_noise_weight(0.25, bad)
