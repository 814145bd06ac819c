"""Exact law of FA-LD on quadratic targets: engine moments vs an independent recursion.

With affine gradients the FA-LD iterate is Gaussian and its mean and covariance follow the
linear recursion in ``tests/targets.py`` (numpy, written independently of the engine). We run
R chains and compare the empirical mean and covariance of the global parameter after every
round with the recursion, within Monte Carlo error.

Tolerance: for R i.i.d. Gaussian draws the sample mean of coordinate i has standard error
sqrt(S_ii / R) and the sample covariance entry (i, j) has standard error
sqrt((S_ii S_jj + S_ij^2) / R). We require every entry within 5 standard errors; with 60
entries per configuration, a correct engine fails with probability < 60 * 6e-7 ≈ 4e-5 (and
the seed is fixed, so the outcome is deterministic).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.problems import QuadraticProblem
from tests.targets import fald_moments, small_problem_arrays

R = 20_000
ROUNDS = 6
ETA = 0.05
TAU = 0.7


def _z_scores(samples: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    r = samples.shape[0]
    emp_mean = samples.mean(0)
    emp_cov = np.cov(samples, rowvar=False, ddof=1)
    se_mean = np.sqrt(np.diag(cov) / r)
    var = np.diag(cov)
    se_cov = np.sqrt((np.outer(var, var) + cov**2) / r)
    return np.concatenate([((emp_mean - mean) / se_mean).ravel(), ((emp_cov - cov) / se_cov).ravel()])


@pytest.mark.parametrize("rho", [0.0, 0.7])
@pytest.mark.parametrize("k", [1, 5])
def test_engine_matches_exact_moment_recursion(rho, k):
    hessians, shifts, p = small_problem_arrays()
    problem = QuadraticProblem(hessians, shifts, p)
    init = np.array([3.0, -2.0])
    sampler = fl.FALD(problem, step_size=ETA, local_steps=k, temperature=TAU, correlation=rho,
                      chains=R, init=torch.tensor(init), seed=11)
    trace = sampler.run(ROUNDS)
    exact = fald_moments(hessians, shifts, p, init, [[ETA] * k] * ROUNDS, TAU, rho)
    z = np.concatenate([_z_scores(trace.numpy()[:, i], m, c) for i, (m, c) in enumerate(exact)])
    assert np.abs(z).max() < 5.0, f"max |z| = {np.abs(z).max():.2f}"


def test_recursion_distinguishes_correlation():
    """Power check: with K = 5 the rho = 0 and rho = 0.7 laws differ by more than 7 standard
    errors, so the test above (threshold 5) would catch an engine that ignored rho. With
    K = 1 the law does not depend on rho at all (eq. 15: the averaged noise is the same)."""
    hessians, shifts, p = small_problem_arrays()
    init = np.array([3.0, -2.0])
    (m0, c0), = fald_moments(hessians, shifts, p, init, [[ETA] * 5], TAU, 0.0)
    (m7, c7), = fald_moments(hessians, shifts, p, init, [[ETA] * 5], TAU, 0.7)
    var = np.diag(c0)
    se = np.sqrt((np.outer(var, var) + c0**2) / R)
    assert np.abs((c0 - c7) / se).max() > 7
    (a0, b0), = fald_moments(hessians, shifts, p, init, [[ETA]], TAU, 0.0)
    (a7, b7), = fald_moments(hessians, shifts, p, init, [[ETA]], TAU, 0.7)
    np.testing.assert_allclose(b0, b7, rtol=1e-12)


def test_varying_step_sizes_follow_the_recursion():
    hessians, shifts, p = small_problem_arrays()
    problem = QuadraticProblem(hessians, shifts, p)
    etas = [0.08 / (1 + 0.3 * k) for k in range(12)]
    sampler = fl.FALD(problem, step_size=etas, local_steps=3, temperature=1.0, correlation=0.3,
                      chains=R, seed=5)
    trace = sampler.run(4)
    exact = fald_moments(hessians, shifts, p, np.zeros(2), [etas[3 * i : 3 * i + 3] for i in range(4)], 1.0, 0.3)
    z = np.concatenate([_z_scores(trace.numpy()[:, i], m, c) for i, (m, c) in enumerate(exact)])
    assert np.abs(z).max() < 5.0


@pytest.mark.parametrize("scheme,s", [("I", 2), ("II", 2)])
def test_partial_participation_moments(scheme, s):
    """Random participation: the law is a mixture, but its first two moments are exact."""
    _, shifts, _ = small_problem_arrays()
    rng = np.random.default_rng(0)
    n, d = 4, 2
    hessians = np.stack([np.diag(rng.uniform(0.5, 2.0, d)) for _ in range(n)])
    shifts = rng.standard_normal((n, d))
    p = np.full(n, 1 / n) if scheme == "II" else np.array([0.4, 0.3, 0.2, 0.1])
    problem = QuadraticProblem(hessians, shifts, p)
    rule = fl.SchemeI(s) if scheme == "I" else fl.SchemeII(s)
    sampler = fl.FALD(problem, step_size=0.1, local_steps=4, correlation=0.2, participation=rule,
                      chains=R, seed=2)
    trace = sampler.run(5)
    exact = fald_moments(hessians, shifts, p, np.zeros(d), [[0.1] * 4] * 5, 1.0, 0.2, scheme, s)
    for i, (m, c) in enumerate(exact):
        x = trace.numpy()[:, i]
        # Mean: standard error sqrt(var / R) holds for any law. Covariance: a mixture has
        # heavier tails than a Gaussian, so estimate the standard error of each covariance
        # entry from the data (fourth moments) instead of the Gaussian formula.
        se_mean = np.sqrt(np.diag(c) / R)
        assert np.abs((x.mean(0) - m) / se_mean).max() < 5.0
        xc = x - x.mean(0)
        prods = xc[:, :, None] * xc[:, None, :]
        se_cov = prods.std(0, ddof=1) / np.sqrt(R)
        assert np.abs((np.cov(x, rowvar=False) - c) / se_cov).max() < 5.0
