"""LFL's bounds: Theorem 1 (recursion vs product–sum, and validity on a simulated strongly convex
problem), Corollary 1, Theorem 2 and the choice of tau."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedlangevin.compression.bounds import (
    choose_tau,
    corollary1_bound,
    corollary1_closed_form,
    h_tau,
    tau_coefficients,
    theorem1_bound,
    theorem1_terms,
    theorem2_bound,
)
from fedlangevin.compression.lfl_codecs import LFLBroadcast

COMMON = dict(G=2.0, q1=2, eps=0.3, d=50)


def test_theorem1_recursion_equals_product_sum():
    rng = np.random.default_rng(0)
    etas = rng.uniform(0.01, 0.2, size=25)
    kw = dict(mu=0.5, tau=3, Gamma=0.7, eta_prev=0.05, **COMMON)
    A, B = theorem1_terms(etas, **kw)
    b = theorem1_bound(etas, dist0=4.0, **kw)
    for t in range(len(etas) + 1):
        direct = np.prod(A[:t]) * 4.0 + sum(B[j] * np.prod(A[j + 1 : t]) for j in range(t))
        assert b[t] == pytest.approx(direct, rel=1e-12)
    # A(i) written out (eq. 11b) and the first B (eq. 11c) with eta(-1) = eta_prev
    e, tau, mu, G, q1, eps, d = etas[0], 3, 0.5, 2.0, 2, 0.3, 50
    assert A[0] == pytest.approx(1 - mu * e * (tau - e * (tau - 1)))
    B0 = (
        A[0] * (0.05 * tau * G / (2 * q1)) ** 2 * eps * d
        + e**2 * (tau**2 + tau - 1) * G**2
        + (1 + mu * (1 - e)) * e**2 * G**2 * tau * (tau - 1) * (2 * tau - 1) / 6
        + 2 * e * (tau - 1) * 0.7
    )
    assert B[0] == pytest.approx(B0, rel=1e-12)


def test_corollary1_closed_form_equals_recursion_for_tau_1():
    for T in (1, 7, 100):
        rec = corollary1_bound([0.05] * T, L=3.0, dist0=2.5, mu=0.8, tau=1, **COMMON)
        closed = corollary1_closed_form(T, eta=0.05, L=3.0, mu=0.8, dist0=2.5, **COMMON)
        assert rec == pytest.approx(closed, rel=1e-12)


def test_theorem1_step_size_condition():
    with pytest.raises(ValueError, match="min\\(1, 1/\\(mu tau\\)\\)"):
        theorem1_bound([0.5], dist0=1.0, mu=1.0, tau=3, **COMMON)
    with pytest.raises(ValueError, match="etas"):
        theorem1_bound([0.1, -0.1], dist0=1.0, mu=1.0, tau=1, **COMMON)
    with pytest.raises(ValueError, match="eps"):
        theorem1_bound([0.1], dist0=1.0, mu=1.0, tau=1, G=1.0, q1=2, eps=1.5, d=3)


def test_theorem2_constant_step_is_h_of_tau():
    """With constant eta and eta(-1) = eta, eq. (14) is exactly h(tau) of eq. (17)–(18)."""
    kw = dict(L=2.0, G=1.5, q1=3, eps=0.01, d=1000, F0_gap=5.0, Gamma=0.4)
    eta, T = 0.02, 400
    coeffs = tau_coefficients(eta=eta, T=T, **kw)
    for tau in (1, 2, 5, 13):
        assert theorem2_bound([eta] * T, tau=tau, **kw) == pytest.approx(h_tau(tau, coeffs), rel=1e-12)


def test_choose_tau_rule():
    kw = dict(L=1.0, G=1.0, q1=2, eps=1e-3, d=1000)
    # a_{-1} <= a1 + 2 a2: tau = 1 (start close to the optimum, relatively large eta)
    c = tau_coefficients(eta=0.1, T=1000, F0_gap=0.01, **kw)
    assert c[0] <= c[2] + 2 * c[3] and choose_tau(eta=0.1, T=1000, F0_gap=0.01, **kw) == 1
    # a_{-1} large: tau is the integer nearest the positive root of (a1 + 2 a2 tau) tau^2 = a_{-1}
    for F0_gap, T in ((50.0, 100), (500.0, 50), (5.0, 200)):
        a_m1, a0, a1, a2 = tau_coefficients(eta=0.01, T=T, F0_gap=F0_gap, **kw)
        tau = choose_tau(eta=0.01, T=T, F0_gap=F0_gap, **kw)
        roots = [r.real for r in np.roots([2 * a2, a1, 0, -a_m1]) if abs(r.imag) < 1e-9 and r.real > 0]
        assert len(roots) == 1 and tau == max(1, round(roots[0]))
        assert tau > 1
        # and the rule lands within one step of the brute-force integer minimiser of h
        grid = np.arange(1, 10 * tau + 10)
        best = grid[np.argmin([h_tau(t, (a_m1, a0, a1, a2)) for t in grid])]
        assert abs(best - tau) <= 1


def test_theorem1_holds_on_a_simulated_strongly_convex_problem():
    """LFL broadcast (q1 = 2) with exact uploads and local SGD on F_m = (1/2)(x - c_m)^T A (x - c_m)
    plus N(0, sigma^2 I) gradient noise; 1000 replicates run as one batch.

    G^2 is the largest E||grad F_m(theta, xi)||^2 = ||A(theta - c_m)||^2 + sigma^2 d seen on any
    iterate of any replicate, so Assumption 1 holds on the simulated paths; eps = 1 (worst case).
    """
    gen = torch.Generator().manual_seed(0)
    R, M, d, tau, eta, sigma, T = 1000, 4, 8, 3, 0.1, 0.3, 40
    A = torch.linspace(1.0, 2.0, d, dtype=torch.float64)  # diagonal: mu = 1, L = 2
    c = 2.0 * torch.randn(M, d, generator=gen, dtype=torch.float64)
    theta_star = c.mean(0)
    Gamma = float((0.5 * A * (theta_star - c) ** 2).sum(1).mean())  # F* - mean_m F_m*, F_m* = 0
    theta = torch.full((R, d), 3.0, dtype=torch.float64)
    theta_hat = theta.clone()
    codec = LFLBroadcast(q=2)
    dist = [float(((theta - theta_star) ** 2).sum(1).mean())]
    G2 = 0.0
    for _ in range(T):
        theta_hat = codec(theta, theta_hat, None, gen).theta_hat
        local = theta_hat[:, None, :].expand(R, M, d).clone()
        for _ in range(tau):
            full = A * (local - c)
            G2 = max(G2, float(((full**2).sum(-1) + sigma**2 * d).max()))
            local = local - eta * (full + sigma * torch.randn(R, M, d, generator=gen, dtype=torch.float64))
        theta = theta_hat + (local - theta_hat[:, None, :]).mean(1)  # eq. (7), exact uploads
        sq = ((theta - theta_star) ** 2).sum(1)
        dist.append(float(sq.mean()))
    full = A * (theta_hat[:, None, :] - c)
    G2 = max(G2, float(((full**2).sum(-1) + sigma**2 * d).max()))
    bound = theorem1_bound([eta] * T, dist0=dist[0], mu=1.0, tau=tau, G=math.sqrt(G2), q1=2, eps=1.0, d=d, Gamma=Gamma)
    dist = np.array(dist)
    assert bound[0] == dist[0]
    # the empirical mean has a few per cent Monte Carlo error (R = 1000); require a 10 % margin
    assert np.all(bound[1:] >= 1.1 * dist[1:])
    # and the simulation did converge towards theta* (the check is not vacuous)
    assert dist[-1] < 0.1 * dist[0]
