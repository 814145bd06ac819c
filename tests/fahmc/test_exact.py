"""Exact moments of FA-HMC (fedlangevin/fahmc/exact.py) against independent computations: the
centralised BAOAB and OBABO recursions written out here (N = 1, and K = 1 rounds of any
federation), FA-LD's exact law (fedlangevin/experiments/exact.py) in the infinite-friction limit,
the posterior as h -> 0, and the stationary law as the limit of the rounds."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.experiments import exact as fald_exact
from fedlangevin.fahmc.exact import exact_moments, round_operators, stationary_moments
from fedlangevin.problems import QuadraticProblem
from tests.fahmc.test_kernel import THETA0, heterogeneous
from tests.targets import OpaqueProblem

MASS = np.array([[0.6, 0.15], [0.15, 0.3]])


def one_client() -> QuadraticProblem:
    """The heterogeneous problem's global energy as one client."""
    problem = heterogeneous()
    return QuadraticProblem(problem.global_hessian[None], problem.global_shift[None], torch.ones(1, dtype=torch.float64))


# -- the centralised integrators, written out (no code of the package) -----------------------------
def centralised_ops(a: np.ndarray, b: np.ndarray, m: np.ndarray, tau: float, gamma: float, h: float, order: str):
    """One step's affine map z -> T z + o with noise covariance Q on z = (theta, v) for the
    textbook splitting ``order`` ("BAOAB": B(h/2) A(h/2) O(h) A(h/2) B(h/2); "OBABO": O(h/2) B(h/2)
    A(h) B(h/2) O(h/2)) on grad f = a theta - b, preconditioner m."""
    d = len(b)
    t, o, q = np.eye(2 * d), np.zeros(2 * d), np.zeros((2 * d, 2 * d))

    def then(t_new, o_new, q_new=None):
        nonlocal t, o, q
        t, o, q = t_new @ t, t_new @ o + o_new, t_new @ q @ t_new.T + (0 if q_new is None else q_new)

    def b_op(s):
        tt = np.eye(2 * d)
        tt[d:, :d] = -s * m @ a
        then(tt, np.concatenate([np.zeros(d), s * m @ b]))

    def a_op(s):
        tt = np.eye(2 * d)
        tt[:d, d:] = s * np.eye(d)
        then(tt, np.zeros(2 * d))

    def o_op(s):
        c = math.exp(-gamma * s)
        tt = np.eye(2 * d)
        tt[d:, d:] *= c
        qq = np.zeros((2 * d, 2 * d))
        qq[d:, d:] = tau * (1 - c * c) * m
        then(tt, np.zeros(2 * d), qq)

    if order == "BAOAB":
        b_op(h / 2), a_op(h / 2), o_op(h), a_op(h / 2), b_op(h / 2)
    else:
        o_op(h / 2), b_op(h / 2), a_op(h), b_op(h / 2), o_op(h / 2)
    return t, o, q


def centralised_stationary(t, o, q):
    """The fixed point of z -> T z + o + noise(Q), by a Kronecker solve (not scipy's Lyapunov)."""
    n = len(o)
    mean = np.linalg.solve(np.eye(n) - t, o)
    cov = np.linalg.solve(np.eye(n * n) - np.kron(t, t), q.reshape(-1)).reshape(n, n)
    return mean, cov


def test_one_client_baoab_is_centralised_baoab_round_by_round():
    """N = 1: FA-HMC's BAOAB is the textbook B A O A B chain in theta, round by round (K = 3, a
    dense preconditioner, tau = 1.5). The kernel's momentum is BAOAB's before the closing half kick, so the
    textbook chain starts at v_0 = -(h/2) M grad f(theta_0) for the kernel's zero momentum."""
    problem = one_client()
    a, b = problem.global_hessian.numpy(), problem.global_shift.numpy()
    h, k, tau, gamma = 0.3, 3, 1.5, 0.7
    means, covs = exact_moments(problem, [[h] * k] * 8, gamma, temperature=tau, preconditioner=MASS, init_mean=THETA0)
    t, o, q = centralised_ops(a, b, MASS, tau, gamma, h, "BAOAB")
    theta0 = np.array(THETA0)
    mean = np.concatenate([theta0, -h / 2 * MASS @ (a @ theta0 - b)])
    cov = np.zeros((4, 4))
    for r in range(8):
        for _ in range(k):
            mean, cov = t @ mean + o, t @ cov @ t.T + q
        np.testing.assert_allclose(means[r, :2], mean[:2], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(covs[r, :2, :2], cov[:2, :2], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_one_client_stationary_law_is_the_centralised_one(splitting):
    """N = 1, K = 2: the stationary theta law equals the textbook splitting's (solved here
    independently); for BAOAB it is moreover the posterior N(A^-1 b, tau A^-1) exactly (BAOAB's
    theta marginal is exact on Gaussians), for OBABO it is not (its error is O(h^2))."""
    problem = one_client()
    a, b = problem.global_hessian.numpy(), problem.global_shift.numpy()
    h, tau, gamma = 0.4, 1.5, 0.7
    mean, cov = stationary_moments(problem, [h, h], gamma, temperature=tau, preconditioner=MASS, splitting=splitting)
    ref_mean, ref_cov = centralised_stationary(*centralised_ops(a, b, MASS, tau, gamma, h, splitting))
    np.testing.assert_allclose(mean[:2], ref_mean[:2], rtol=1e-10)
    np.testing.assert_allclose(cov[:2, :2], ref_cov[:2, :2], rtol=1e-9)
    post_cov = tau * np.linalg.inv(a)
    np.testing.assert_allclose(mean[:2], np.linalg.solve(a, b), rtol=1e-10)
    if splitting == "BAOAB":
        np.testing.assert_allclose(cov[:2, :2], post_cov, rtol=1e-9)
    else:
        assert np.abs(cov[:2, :2] - post_cov).max() > 1e-3 * np.abs(post_cov).max()


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_one_step_rounds_of_a_heterogeneous_federation_are_centralised(splitting, rho):
    """K = 1, full participation: the round kicks at the common broadcast theta, where sum_c p_c
    grad f^c = grad f, and the averaged noise has the centralised law, so the law of (theta, v) is
    the one-client problem's on the global energy, round by round, however different the clients."""
    fed, single = heterogeneous(), one_client()
    args = dict(friction=0.8, correlation=rho, preconditioner=MASS, splitting=splitting, init_mean=THETA0)
    m1, c1 = exact_moments(fed, [[0.3]] * 10, **args)
    args["correlation"] = 0.0
    m2, c2 = exact_moments(single, [[0.3]] * 10, **args)
    np.testing.assert_allclose(m1, m2, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(c1, c2, rtol=1e-10, atol=1e-13)


RULES = {"full": (None, False), "I": (fl.SchemeI(2), False), "II": (fl.SchemeII(2), True)}


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("rule", sorted(RULES))
def test_obabo_with_infinite_friction_is_fald_with_eta_h_squared_over_two(k, rule):
    """gamma -> infinity (a = exp(-gamma h) = 0 once gamma h > 745): OBABO's local step is FA-LD's
    eq. 10 with eta = h^2 / 2, so theta's law equals FA-LD's exact law (experiments/exact.py)
    round by round, for every participation rule and rho = 0.5. At finite friction the gap
    closes like a = exp(-gamma h): each further 5 units of gamma h shrink it by e^-5 = 6.7e-3
    (below 2e-2 asked)."""
    participation, balanced = RULES[rule]
    problem = heterogeneous(balanced)
    h = 0.2
    fald_means, fald_covs = fald_exact.exact_moments(problem, [[h * h / 2] * k] * 6, correlation=0.5,
                                                     participation=participation, init_mean=THETA0)

    def gap(gamma):
        means, covs = exact_moments(problem, [[h] * k] * 6, gamma, correlation=0.5, participation=participation,
                                    splitting="OBABO", init_mean=THETA0)
        return max(np.abs(means[:, :2] - fald_means).max(), np.abs(covs[:, :2, :2] - fald_covs).max())

    gaps = [gap(x / h) for x in (5.0, 10.0, 15.0)]
    assert gaps[1] < 2e-2 * gaps[0] and gaps[2] < 2e-2 * gaps[1], gaps
    assert gap(1e4) < 1e-13


def test_baoab_with_infinite_friction_differs_from_fald_at_order_eta():
    """BAOAB's infinite-friction limit is the (federated) Leimkuhler-Matthews scheme, not FA-LD:
    their stationary theta covariances differ by O(eta) = O(h^2): halving h divides the gap by
    about 4 (between 3 and 5 asked), and the gap is not zero."""
    problem = heterogeneous()
    gaps = []
    for h in (0.2, 0.1, 0.05):
        _, cov = stationary_moments(problem, [h] * 3, 1e4)
        _, fald_cov = fald_exact.stationary_moments(problem, [h * h / 2] * 3)
        gaps.append(np.abs(cov[:2, :2] - fald_cov).max())
    assert gaps[-1] > 1e-5
    assert 3 < gaps[0] / gaps[1] < 5.5 and 3 < gaps[1] / gaps[2] < 5, gaps


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_the_stationary_bias_shrinks_as_h_goes_to_zero(splitting):
    """K = 3 local steps on heterogeneous clients: the stationary theta law's distance to the
    posterior (largest error of the mean and of the covariance) falls with every halving of h,
    to below a tenth of its value at h = 0.2 by h = 0.025."""
    problem = heterogeneous()
    post_mean, post_cov = (x.numpy() for x in problem.posterior(1.0))
    errors = []
    for h in (0.2, 0.1, 0.05, 0.025):
        mean, cov = stationary_moments(problem, [h] * 3, 1.0, splitting=splitting)
        errors.append(max(np.abs(mean[:2] - post_mean).max(), np.abs(cov[:2, :2] - post_cov).max()))
    assert all(later < earlier for earlier, later in zip(errors, errors[1:])), errors
    assert errors[-1] < 0.1 * errors[0], errors


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_stationary_law_is_the_limit_of_the_rounds(rule, splitting):
    """600 rounds of the moment recursion from a point reach the stationary mean and covariance of
    (theta, v) (Lyapunov solve; with random participation its fixed-point iteration)."""
    participation, balanced = RULES[rule]
    problem = heterogeneous(balanced)
    args = dict(correlation=0.5, participation=participation, preconditioner=MASS, splitting=splitting)
    means, covs = exact_moments(problem, [[0.25] * 3] * 600, 1.0, init_mean=THETA0, **args)
    mean, cov = stationary_moments(problem, [0.25] * 3, 1.0, **args)
    np.testing.assert_allclose(means[-1], mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(covs[-1], cov, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
@pytest.mark.parametrize("rule,paper_factor", [(fl.SchemeI(3), 8 / 3 + 1 - 1 / 3), (fl.SchemeII(3), 8 / 3)])
def test_calibrated_participation_has_no_noise_inflation(rule, paper_factor, splitting):
    """K = 1, N = 8 balanced clients with one Hessian (their means differ), gamma = 1: the refresh's
    private noise calibrated as FA-LD's (1 / q_c, q_c = E[w_c^2] / p_c) leaves the stationary law of
    theta at the posterior and v at N(0, tau I) as h -> 0 (every eigenvalue of Sigma_post^{-1} Cov theta
    and of Cov v tends to 1); the paper's 1 / p_c inflates both by f = N/S + 1 - 1/S (scheme I) or
    N/S (scheme II), as for FA-LD. The remainder (discretisation, client-sampling noise of the
    force) is O(h): a tenfold smaller h shrinks it at least 6.6x, to below 5e-3 f at h = 0.01."""
    rng = np.random.default_rng(0)
    n, d = 8, 2
    a = np.array([[2.0, 0.5], [0.5, 1.0]])
    problem = QuadraticProblem(np.broadcast_to(a, (n, d, d)).copy(), rng.standard_normal((n, d)), np.full(n, 1 / n))
    post = problem.posterior(1.0)[1].double().numpy()
    for noise, target in (("calibrated", 1.0), ("paper", paper_factor)):
        r = dataclasses.replace(rule, noise=noise)
        gaps = []
        for h in (0.1, 0.01):
            _, cov = stationary_moments(problem, [h], 1.0, participation=r, splitting=splitting)
            ratios = np.concatenate([np.linalg.eigvals(np.linalg.solve(post, cov[:d, :d])).real,
                                     np.linalg.eigvalsh(cov[d:, d:])])
            gaps.append(np.abs(ratios - target).max())
        assert gaps[1] < 0.15 * gaps[0] and gaps[1] < 5e-3 * target, (noise, gaps)


def test_the_round_operators_have_the_clients_shape_and_no_shared_term_without_correlation():
    ops = round_operators(heterogeneous(), [0.1, 0.2], 1.0)
    assert ops.phi.shape == (3, 4, 4) and ops.offset.shape == (3, 4) and ops.private.shape == (3, 4, 4)
    assert ops.shared is None
    assert round_operators(heterogeneous(), [0.1], 1.0, correlation=0.5).shared.shape == (3, 3, 4, 4)


@pytest.mark.parametrize("call,name", [
    (lambda p: exact_moments(p, [[0.1]], 0.0), "friction"),
    (lambda p: exact_moments(p, [[0.1]], float("nan")), "friction"),
    (lambda p: exact_moments(p, [[0.1]], "1"), "friction"),
    (lambda p: exact_moments(p, [[0.1]], 1.0, splitting="leapfrog"), "splitting"),
    (lambda p: exact_moments(p, [[0.1]], 1.0, preconditioner=[1.0, -2.0]), "preconditioner"),
    (lambda p: exact_moments(p, [[0.1]], 1.0, init_mean=[1.0, 2.0, 3.0]), "init_mean"),
    (lambda p: exact_moments(p, [[-0.1]], 1.0), "etas"),
    (lambda p: stationary_moments(p, [3.0], 1.0), "etas"),                       # unstable: h sqrt(15) > 2
    (lambda p: exact_moments(OpaqueProblem(p), [[0.1]], 1.0), "problem"),          # gradients only: no law
])
def test_bad_arguments_are_refused_by_name(call, name):
    with pytest.raises(ValueError, match=name):
        call(heterogeneous())
