"""Exact FA-LD moments on quadratic problems against the brute-force recursion and the engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.experiments.exact import exact_moments, minibatch_gradient_noise, participation_moments
from fedlangevin.experiments.curves import exact_centralised_curve, simulation_problem
from fedlangevin.experiments.exact import w2_to_target
from fedlangevin.federation.schedules import PaperDecay
from fedlangevin.problems import QuadraticProblem
from tests.targets import assert_moments_within_mc_error, fald_moments, small_problem_arrays, weight_moments


def _rule(scheme, s):
    return {"full": fl.Full, "I": fl.SchemeI, "II": fl.SchemeII}[scheme](*(() if s is None else (s,)))


@pytest.mark.parametrize("scheme,s", [("full", None), ("I", 2), ("II", 2)])
@pytest.mark.parametrize("rho", [0.0, 0.6, 1.0])
def test_round_recursion_equals_the_stacked_state_recursion(scheme, s, rho):
    """Two derivations of the same law: per-client operators (d x d) vs the stacked (N d)
    state of tests/targets.py. Agreement to rounding (1e-12) on heterogeneous Hessians,
    unequal weights (balanced for scheme II) and step sizes varying within a round."""
    h, b, p = small_problem_arrays()
    if scheme == "II":
        p = np.full(3, 1 / 3)
    problem = QuadraticProblem(h, b, p)
    etas = [[0.05, 0.03, 0.04], [0.02, 0.05, 0.01]] * 3
    m, c = exact_moments(problem, etas, 0.7, rho, _rule(scheme, s), init_mean=[3.0, -2.0])
    ref = fald_moments(h, b, p, np.array([3.0, -2.0]), etas, 0.7, rho, scheme, s)
    for i, (rm, rc) in enumerate(ref):
        np.testing.assert_allclose(m[i], rm, rtol=0, atol=1e-12)
        np.testing.assert_allclose(c[i], rc, rtol=0, atol=1e-12)


def test_participation_moments_match_the_test_targets():
    p = np.array([0.4, 0.3, 0.2, 0.1])
    for scheme, s in (("full", None), ("I", 3), ("II", 3)):
        pp = np.full(4, 0.25) if scheme == "II" else p
        for got, want in zip(participation_moments(pp, _rule(scheme, s)), weight_moments(pp, scheme, s)):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="scheme"):
        participation_moments(p, "III")


def test_minibatch_gradient_noise_moments_match_the_engine():
    """Minibatch gradients add state-independent noise of covariance H S_c H / b; the exact
    moments with it match the engine's R = 20,000 chains within 5 Monte Carlo standard errors
    (mean: sqrt(var / R); covariance entries: sqrt((S_ii S_jj + S_ij^2) / R), Gaussian-based,
    adequate since the law is a near-Gaussian mixture of many small minibatch effects)."""
    problem = fl.problems.GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=6, seed=3)
    eta, k, rounds, r = 0.3 / problem.smoothness, 3, 4, 20_000
    g = minibatch_gradient_noise(problem, 2)
    means, covs = exact_moments(problem, [[eta] * k] * rounds, gradient_noise=g)
    trace = fl.FALD(problem, step_size=eta, local_steps=k, batch_size=2, chains=r, seed=4).run(rounds)
    assert_moments_within_mc_error(trace.numpy(), means, covs)
    # power: without the gradient noise the covariance is visibly smaller
    _, covs0 = exact_moments(problem, [[eta] * k] * rounds)
    v = np.diag(covs[-1])
    assert np.max(np.abs(covs[-1] - covs0[-1]) / np.sqrt((np.outer(v, v) + covs[-1] ** 2) / r)) > 10


@pytest.mark.parametrize("batch", [None, 1])
def test_centralised_scan_equals_the_round_recursion(batch):
    """The long-curve scan (eigenbasis, cumulative products) equals exact_moments to rounding."""
    problem = simulation_problem(0.0, 1.0)
    sched = PaperDecay(problem.smoothness, problem.convexity)
    noise = None if batch is None else minibatch_gradient_noise(problem, batch)
    steps, w = exact_centralised_curve(problem, sched, 10, 40, noise)
    etas = [sched(i) for i in range(400)]
    m, c = exact_moments(problem, [etas[i * 10 : (i + 1) * 10] for i in range(40)], gradient_noise=noise)
    np.testing.assert_allclose(w, w2_to_target(problem, m, c), rtol=1e-9, atol=1e-13)
    np.testing.assert_array_equal(steps, np.arange(1, 41) * 10)


def test_exact_moments_need_a_quadratic_problem():
    class Opaque(fl.problems.FederatedProblem):
        num_clients, dim = 2, 1
        weights = torch.tensor([0.5, 0.5], dtype=torch.float64)

    with pytest.raises(ValueError, match="affine"):
        exact_moments(Opaque(), [[0.1]])


@pytest.mark.parametrize("scheme,s", [("full", None), ("I", 2), ("II", 2)])
def test_stationary_moments_are_the_limit_of_the_round_recursion(scheme, s):
    h, b, p = small_problem_arrays()
    if scheme == "II":
        p = np.full(3, 1 / 3)
    problem = QuadraticProblem(h, b, p)
    etas = [0.05, 0.03, 0.04]
    from fedlangevin.experiments.exact import stationary_moments

    m, c = stationary_moments(problem, etas, 0.7, 0.4, _rule(scheme, s))
    means, covs = exact_moments(problem, [etas] * 400, 0.7, 0.4, _rule(scheme, s), init_mean=[3.0, -2.0])
    np.testing.assert_allclose(m, means[-1], rtol=0, atol=1e-10)
    np.testing.assert_allclose(c, covs[-1], rtol=0, atol=1e-10)
