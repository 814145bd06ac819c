"""Exact FA-LD moments on quadratic problems against the brute-force recursion and the engine."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.experiments.exact import (
    exact_moments, minibatch_gradient_noise, noise_weights, participation_moments, stationary_moments,
)
from fedlangevin.experiments.curves import exact_centralised_curve, simulation_problem
from fedlangevin.experiments.exact import w2_to_target
from fedlangevin.federation.schedules import PaperDecay
from fedlangevin.problems import QuadraticProblem
from tests.targets import assert_moments_within_mc_error, fald_moments, small_problem_arrays, weight_moments


def _rule(scheme, s):
    return {"full": fl.Full, "I": fl.SchemeI, "II": fl.SchemeII}[scheme](*(() if s is None else (s,)))


@pytest.mark.parametrize("scheme,s", [("full", None), ("I", 2), ("II", 2)])
@pytest.mark.parametrize("rho", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("noise", ["calibrated", "paper"])
def test_round_recursion_equals_the_stacked_state_recursion(scheme, s, rho, noise):
    """Two derivations of the same law: per-client operators (d x d) vs the stacked (N d)
    state of tests/targets.py. Agreement to rounding (1e-12) on heterogeneous Hessians,
    unequal weights (balanced for scheme II) and step sizes varying within a round, for
    either private-noise rule of the participation."""
    h, b, p = small_problem_arrays()
    if scheme == "II":
        p = np.full(3, 1 / 3)
    problem = QuadraticProblem(h, b, p)
    etas = [[0.05, 0.03, 0.04], [0.02, 0.05, 0.01]] * 3
    rule = _rule(scheme, s) if scheme == "full" else dataclasses.replace(_rule(scheme, s), noise=noise)
    m, c = exact_moments(problem, etas, 0.7, rho, rule, init_mean=[3.0, -2.0])
    ref = fald_moments(h, b, p, np.array([3.0, -2.0]), etas, 0.7, rho, scheme, s, noise=noise)
    for i, (rm, rc) in enumerate(ref):
        np.testing.assert_allclose(m[i], rm, rtol=0, atol=1e-12)
        np.testing.assert_allclose(c[i], rc, rtol=0, atol=1e-12)


def _ratio_to(problem, cov) -> np.ndarray:
    """Eigenvalues of Sigma_post^{-1} cov: all 1 when cov is the posterior's covariance."""
    post = problem.posterior(1.0)[1].double().numpy()
    return np.sort(np.linalg.eigvals(np.linalg.solve(post, cov)).real)


@pytest.mark.parametrize("rule,paper_factor", [(fl.SchemeI(3), 8 / 3 + 1 - 1 / 3), (fl.SchemeII(3), 8 / 3)])
def test_calibrated_participation_has_no_noise_inflation_on_homogeneous_clients(rule, paper_factor):
    """K = 1, N = 8 balanced clients with one Hessian (their means differ): the exact stationary
    covariance of the global iterate over the posterior's tends to 1 as eta -> 0 under the
    calibrated noise, and to the paper's inflation f = N/S + 1 - 1/S (scheme I) or N/S (scheme II)
    under noise="paper" (docs/simulation.md, Fig. 2). The remainder is the discretisation and the
    client-sampling noise of the drift (eta^2 Var(sum_c w_c b_c) per step against 2 eta): O(eta), so
    a tenfold smaller eta must shrink it about tenfold (at most 0.15x here), to below 1e-3 at
    eta = 1e-3 / L."""
    rng = np.random.default_rng(0)
    n, d = 8, 2
    a = np.array([[2.0, 0.5], [0.5, 1.0]])
    problem = QuadraticProblem(np.broadcast_to(a, (n, d, d)).copy(), rng.standard_normal((n, d)), np.full(n, 1 / n))
    big_l = float(np.linalg.eigvalsh(a).max())
    for noise, target in (("calibrated", 1.0), ("paper", paper_factor)):
        r = dataclasses.replace(rule, noise=noise)
        gaps = [np.abs(_ratio_to(problem, stationary_moments(problem, [c / big_l], participation=r)[1]) - target).max()
                for c in (1e-2, 1e-3)]
        assert gaps[1] < 0.15 * gaps[0] and gaps[1] < 1e-3 * target, (noise, gaps)


def test_calibrated_participation_reaches_full_participations_law_on_heterogeneous_clients():
    """K = 5 local steps, rho = 0.5, N = 8 clients with their own Hessians and unequal weights, scheme I
    with S = 3: the exact stationary covariance under the calibrated noise and full participation's
    both tend to the posterior's as eta -> 0 (first order: (sum_c E[w_c] A_c) S + S (...) = 2 tau
    with E[sum_c w_c^2 (1 - rho^2) / q_c + rho^2 (sum_c w_c)^2] = 1), the calibrated one within
    O(eta) of full participation's (tenfold smaller eta, at most 0.15x the gap); the paper's noise
    keeps rho^2 + (1 - rho^2)((N - 1)/S + 1) = 2.75 times it."""
    rng = np.random.default_rng(1)
    n, d = 8, 2
    h = np.stack([np.diag(rng.uniform(0.5, 2.0, d)) for _ in range(n)])
    w = rng.uniform(0.5, 1.5, n)
    problem = QuadraticProblem(h, rng.standard_normal((n, d)), w / w.sum())
    big_l = float(h.max())
    gaps, paper = [], []
    for c in (1e-2, 1e-3):
        etas = [c / big_l] * 5
        full = _ratio_to(problem, stationary_moments(problem, etas, correlation=0.5)[1])
        calibrated = _ratio_to(problem, stationary_moments(problem, etas, correlation=0.5, participation=fl.SchemeI(3))[1])
        gaps.append(np.abs(calibrated - full).max())
        paper.append(_ratio_to(problem, stationary_moments(problem, etas, correlation=0.5,
                                                           participation=fl.SchemeI(3, noise="paper"))[1]))
        assert np.abs(full - 1).max() < 10 * c  # full participation's own discretisation bias, O(eta)
    assert gaps[1] < 0.15 * gaps[0] and gaps[1] < 2e-3, gaps
    np.testing.assert_allclose(paper[1], 0.25 + 0.75 * (7 / 3 + 1), rtol=2e-3)


def test_the_noise_weights_follow_the_rule():
    """exact.noise_weights is the rule's q: p for full participation and noise="paper", E[w_c^2] / p_c
    (from participation_moments' E[w w^T]) for the calibrated rule."""
    p = np.array([0.4, 0.3, 0.2, 0.1])
    np.testing.assert_array_equal(noise_weights(p), p)
    np.testing.assert_array_equal(noise_weights(p, fl.SchemeI(3, noise="paper")), p)
    for rule, pp in ((fl.SchemeI(3), p), (fl.SchemeII(3), np.full(4, 0.25))):
        np.testing.assert_allclose(noise_weights(pp, rule), np.diag(participation_moments(pp, rule)[1]) / pp, rtol=1e-14)


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


def test_scheme_two_on_nearly_balanced_clients_has_the_posteriors_long_run_law():
    """N = 10 clients of 56 and 57 records (p_c = n_c / sum n), K = 3 local steps, rho = 0.5, one
    Hessian per record, means far apart: scheme II's weights for nearly balanced clients (E[w_c] =
    p_c, sum 1) and the calibrated noise give the exact stationary mean of full participation (the
    drift is unbiased: to rounding) and a covariance within O(eta) of full participation's (a tenfold
    smaller eta, at most 0.15x the gap: what remains is the client-sampling noise of the drift, eta^2
    Var(sum_c w_c grad f^c) per step against 2 eta, large here where the clients' means are far apart);
    the paper's plain mean (allow_unbalanced=True) averages the
    unweighted mean of the clients' targets: its mean is off by more than 1e-3 sd at any eta."""
    sizes = np.array([57, 56, 57, 56, 56, 57, 56, 57, 56, 56], dtype=np.float64)
    n, d = sizes.size, 2
    a = np.array([[2.0, 0.5], [0.5, 1.0]])
    problem = QuadraticProblem(np.broadcast_to(a, (n, d, d)).copy(), 20 * np.random.default_rng(2).standard_normal((n, d)),
                               sizes / sizes.sum())
    mean, post = (t.double().numpy() for t in problem.posterior(1.0))
    sd = np.sqrt(np.diag(post))
    big_l = float(np.linalg.eigvalsh(a).max())
    gaps = []
    for c in (1e-2, 1e-3):
        etas = [c / big_l] * 3
        m_full, full = stationary_moments(problem, etas, correlation=0.5)
        m_ii, cov_ii = stationary_moments(problem, etas, correlation=0.5, participation=fl.SchemeII(5))
        np.testing.assert_allclose((m_ii - m_full) / sd, 0.0, atol=1e-9)
        gaps.append(np.abs(_ratio_to(problem, cov_ii) - _ratio_to(problem, full)).max())
        with pytest.warns(UserWarning, match="SchemeII assumes balanced"):
            plain = fl.SchemeII(5, allow_unbalanced=True)
            plain.validate(problem.weights)
        m_plain, _ = stationary_moments(problem, etas, correlation=0.5, participation=plain)
        assert np.abs((m_plain - m_full) / sd).max() > 1e-3
    assert gaps[1] < 0.15 * gaps[0], gaps
