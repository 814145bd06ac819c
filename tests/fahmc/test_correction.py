"""FA-HMC's control variates (fedlangevin/fahmc/correction.py): the default under random participation and
minibatches, exact on a Gaussian (scheme I's law becomes full participation's), refused where FA-HMC
cannot run them, and resumed from a checkpoint without a second search."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.fahmc.exact import stationary_moments
from fedlangevin.problems import GaussianSimulation, QuadraticProblem
from tests.problems.test_centred import shared_hessian

H, GAMMA = 0.3, 1.0


def rows_problem() -> GaussianSimulation:
    """A problem with per-example gradients (what privacy needs)."""
    return GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=12, seed=1)


def test_control_variates_make_scheme_one_full_participation_on_a_shared_hessian():
    """With one Hessian every corrected client's gradient is A theta - b_bar (tests/problems/test_centred.py),
    so the corrected problem is a federation of identical clients, whose law under scheme I with the
    calibrated noise is full participation's exactly; uncorrected, scheme I widens the sds (the test can fail)."""
    problem = shared_hessian()
    full_mean, full_cov = stationary_moments(problem, [H], GAMMA)
    _, plain_cov = stationary_moments(problem, [H], GAMMA, participation=fl.SchemeI(2))
    assert (np.diag(plain_cov)[:2] / np.diag(full_cov)[:2]).min() > 1.4
    b_bar = problem.weights.double() @ problem.shifts
    corrected = QuadraticProblem(problem.hessians, b_bar.expand(4, 2), problem.weights)
    mean, cov = stationary_moments(corrected, [H], GAMMA, participation=fl.SchemeI(2))
    np.testing.assert_allclose(mean, full_mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cov, full_cov, rtol=1e-10, atol=1e-13)


def test_the_default_run_under_scheme_one_samples_full_participations_law():
    """FAHMC's defaults under SchemeI(2) run control variates and sample the exact law above. Monte Carlo:
    4,000 independent chains, their last states after 150 rounds (the round map contracts by at least
    exp(-gamma h / 2) = 0.86 a round: 150 rounds leave 1e-10 of the start). The mean's error is within 4.5
    standard errors sqrt(var / R); each variance within 4.5 sds of its estimate, sqrt(2 / R) = 2.2 % relative;
    uncorrected, the variances are 51-67 % larger."""
    problem, chains = shared_hessian(), 4000
    sampler = fl.FAHMC(problem, H, friction=GAMMA, participation=fl.SchemeI(2), chains=chains, seed=3,
                       init="map", check_local_bias=False)
    assert isinstance(sampler.correction, ControlVariates)
    trace = sampler.run(150, warmup=0, progress=False)
    last = trace.samples[:, -1].numpy()
    mean, cov = stationary_moments(problem, [H], GAMMA)
    var = np.diag(cov)[:2]
    assert (np.abs(last.mean(0) - mean[:2]) <= 4.5 * np.sqrt(var / chains)).all()
    assert (np.abs(last.var(0) / var - 1) <= 4.5 * np.sqrt(2 / chains)).all()


@pytest.mark.parametrize("setting, expected", [
    (dict(), None),                                                  # every client, full batches: nothing to remove
    (dict(participation=fl.SchemeI(2)), ControlVariates),
    (dict(participation=fl.SchemeII(2)), ControlVariates),             # (on balanced clients)
    (dict(participation=fl.SchemeI(2, noise="paper")), None),        # the paper's scheme, as it ran
    (dict(participation=fl.SchemeI(2), local_steps=3), None),        # K > 1 is checked against uncorrected K = 1
    (dict(participation=fl.SchemeI(2), correction=None), None),
    (dict(participation=fl.SchemeI(2), privacy=fl.privacy.RecordLevel(clip=1.0), splitting="OBABO"), None),
])
def test_auto_runs_control_variates_where_the_setting_needs_them(setting, expected):
    rows = "privacy" in setting or isinstance(setting.get("participation"), fl.SchemeII)
    problem = rows_problem() if rows else shared_hessian()
    sampler = fl.FAHMC(problem, H, chains=2, seed=0, check_local_bias=False, **setting)
    assert (sampler.correction is None) if expected is None else isinstance(sampler.correction, expected)
    assert (sampler.centred is None) == (expected is None)


@pytest.mark.parametrize("setting, match", [
    (dict(correction="conducive"), "correction: FA-HMC runs control variates"),
    (dict(correction="qlsd++"), "correction: FA-HMC runs control variates"),
    (dict(correction="control_variates", privacy=fl.privacy.RecordLevel(clip=1.0), splitting="OBABO"),
     "privacy: a drift correction releases noiseless"),
])
def test_what_fahmc_cannot_run_is_refused_before_any_work(setting, match):
    problem = rows_problem() if "privacy" in setting else shared_hessian()
    with pytest.raises(ValueError, match=match):
        fl.FAHMC(problem, H, chains=2, seed=0, participation=fl.SchemeI(2), **setting)
