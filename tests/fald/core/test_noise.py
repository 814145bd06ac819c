"""Injected noise (eq. 10 / 14 / 15)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedlangevin.fald.core.noise import add_noise_, noise_scales


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
