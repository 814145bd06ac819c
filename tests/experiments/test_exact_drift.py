"""Exact law of the drift-corrected variants on quadratic problems: against the uncorrected
recursion of experiments.exact, against the engine (Monte Carlo), and the acceptance bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.experiments.exact import exact_moments, stationary_moments, w2_to_target
from fedlangevin.experiments.exact_drift import corrected_moments, corrected_stationary
from fedlangevin.corrections.conducive import Conducive
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.corrections.qlsd import QLSDPlusPlus
from fedlangevin.problems import CurvatureSimulation
from tests.targets import assert_moments_within_mc_error, random_quadratic

VARIANTS = ["control_variates", "conducive", "qlsd++"]


@pytest.mark.parametrize("rho", [0.0, 0.6])
def test_without_correction_the_stacked_law_is_experiments_exact(rho):
    """Two independent implementations (per-client operators vs the stacked state) agree to rounding."""
    problem = random_quadratic(n=4, d=3, seed=2)
    etas = [0.05, 0.04, 0.03]
    m, c = exact_moments(problem, [etas] * 5, correlation=rho)
    m2, c2 = corrected_moments(problem, etas, 5, correlation=rho)
    np.testing.assert_allclose(m2, m, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c2, c, rtol=0, atol=1e-12)
    sm, sc = stationary_moments(problem, etas, correlation=rho)
    sm2, sc2 = corrected_stationary(problem, etas, correlation=rho)
    np.testing.assert_allclose(sm2, sm, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sc2, sc, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("name", VARIANTS)
def test_switched_off_corrections_have_fald_law(name):
    problem = random_quadratic(n=3, d=2, seed=1)
    off = {"control_variates": ControlVariates(strength=0.0), "conducive": None,
           "qlsd++": QLSDPlusPlus(memory_rate=0.0)}[name]
    m0, c0 = corrected_moments(problem, [0.05] * 4, 6)
    m, c = corrected_moments(problem, [0.05] * 4, 6, off)
    np.testing.assert_allclose(m, m0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c, c0, rtol=0, atol=1e-12)


def test_conducive_with_exact_surrogates_is_centralised_langevin():
    """Exact quadratic surrogates make every client's corrected gradient grad f: K local steps of
    size eta have the stationary law of K = 1 (ULA with eta), whatever the heterogeneity."""
    problem = CurvatureSimulation(num_clients=8, alpha=100.0, curvature_spread=1.5)
    m10, c10 = corrected_stationary(problem, [1e-5] * 10, "conducive")
    m1, c1 = corrected_stationary(problem, [1e-5])
    np.testing.assert_allclose(m10, m1, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(c10, c1, rtol=1e-7, atol=0)


@pytest.mark.parametrize("eta", [1e-6, 1e-5, 1e-4])
@pytest.mark.parametrize("name", VARIANTS)
def test_each_correction_cuts_the_stationary_w2_of_fald_at_k10_at_least_fivefold(name, eta):
    """Acceptance: CurvatureSimulation(curvature_spread=1.5, alpha=100), K = 10, the same step size."""
    problem = CurvatureSimulation(alpha=100.0, curvature_spread=1.5)
    base = w2_to_target(problem, *[x[None] for x in corrected_stationary(problem, [eta] * 10)])[0]
    fixed = w2_to_target(problem, *[x[None] for x in corrected_stationary(problem, [eta] * 10, name)])[0]
    assert fixed <= base / 5, (fixed, base)


@pytest.mark.parametrize("name", VARIANTS)
def test_engine_agrees_with_the_exact_recursion(name):
    """R = 4,000 chains of the engine against the exact moments after each of 6 rounds, within
    5 Monte Carlo standard errors (tests.targets.assert_moments_within_mc_error); the reference
    point is the one the engine's federated search found. Power: FA-LD's moments are many
    standard errors away from the corrected ones."""
    problem = CurvatureSimulation(num_clients=6, alpha=100.0, curvature_spread=1.5, samples_per_client=5)
    eta, k, rounds, r = 2e-4, 10, 6, 4000
    sampler = fl.FALD(problem, step_size=eta, local_steps=k, chains=r, seed=11, correction=name)
    x = sampler.run(rounds).numpy()
    ref = sampler.state.correction.get("reference", sampler.state.correction.get("center"))
    ref = None if ref is None else ref.cpu().numpy()
    means, covs = corrected_moments(problem, [eta] * k, rounds, name, reference=ref)
    assert_moments_within_mc_error(x, means, covs)
    m0, _ = corrected_moments(problem, [eta] * k, rounds)
    v = np.diag(covs[-1])
    assert np.max(np.abs(m0[-1] - means[-1]) / np.sqrt(v / r)) > 10  # FA-LD would fail the 5-SE check


def test_exact_law_needs_a_quadratic_problem_and_a_stable_step():
    X = torch.randn(20, 2, generator=torch.Generator().manual_seed(0))
    y = (X[:, 0] > 0).long()
    logistic = fl.problems.LogisticRegression([(X[:10], y[:10]), (X[10:], y[10:])])
    with pytest.raises(ValueError, match="affine gradients"):
        corrected_stationary(logistic, [0.1], "control_variates")
    problem = CurvatureSimulation(num_clients=4, alpha=1.0)
    with pytest.raises(ValueError, match="unstable"):
        corrected_stationary(problem, [1.0] * 2, "qlsd++")
    with pytest.raises(ValueError, match="surrogates"):
        corrected_stationary(problem, [1e-6], Conducive(surrogates=fl.fald.Surrogates(
            np.ones(2), np.ones((4, 2)), np.ones((4, 2)))))
