"""FA-HMC's end-of-run check of its setting (fedlangevin/fahmc/setting_noise.py): the predicted sd ratios
against FA-HMC's exact law under scheme I (fedlangevin/fahmc/exact.py), the warning on a biased setting
and silence on the defaults of the same setting."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.fahmc.exact import stationary_moments
from fedlangevin.fahmc.setting_noise import predicted_sd_ratios
from fedlangevin.warmup.setting_noise import drift_noise
from tests.fahmc.test_kernel import heterogeneous
from tests.problems.test_centred import shared_hessian


@pytest.mark.parametrize("problem", [shared_hessian, heterogeneous])
@pytest.mark.parametrize("h, gamma", [(0.3, 1.0), (0.15, 2.0), (0.2, 1.0)])
def test_the_prediction_brackets_the_exact_law(problem, h, gamma):
    """Scheme I without correction: the exact law's sd ratios against the prediction read from 4,000 draws of
    that law (the check's Sigma is the kept draws'), V_part at the same draws. The prediction's excess variance
    (ratio^2 - 1) is within [0.85, 1.1] times the exact law's: with the kick's weight k(a) the continuous-time
    linearisation is off by 1 + O(h) (0.95-1.0 at h = 0.1, 0.91-0.97 at h = 0.3 from the exact covariance,
    0.8 on one coordinate whose excess is 0.17), and V_part read from 4,000 draws moves it by a few per cent
    (0.90-1.02 measured with this seed). Without k (h^2 for k h^2, as the check once read) it was 1.2-1.3 at
    h = 0.3: the test can fail."""
    problem = problem()
    rule = fl.SchemeI(2)
    _, full = stationary_moments(problem, [h], gamma)
    mean, cov = stationary_moments(problem, [h], gamma, participation=rule)
    exact = np.diag(cov)[:2] / np.diag(full)[:2] - 1
    draws = torch.from_numpy(np.random.default_rng(0).multivariate_normal(mean[:2], cov[:2, :2], size=4000))
    v_part, _ = drift_noise(problem, draws, rule, None, dense=True)
    predicted = predicted_sd_ratios(v_part, None, np.cov(draws.numpy().T), 1.0, h, gamma) ** 2 - 1
    assert (predicted >= 0.85 * exact).all() and (predicted <= 1.1 * exact).all(), (predicted, exact)


def _run(**kwargs):
    sampler = fl.FAHMC(shared_hessian(), 0.3, friction=1.0, chains=8, seed=0, init="map", check_local_bias=False,
                       **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler.run(200, warmup=50, progress=False)
    return sampler, [str(w.message) for w in caught if "off the target" in str(w.message)]


def test_the_warning_fires_on_a_biased_setting_and_not_on_the_defaults():
    # scheme I uncorrected on four clients with far-apart modes: the exact law's sds are 1.29 and 1.23 times
    # full participation's (test_correction.py); the check predicts about that and warns
    sampler, caught = _run(participation=fl.SchemeI(2), correction=None)
    assert sampler.setting_noise.measured and sampler.setting_noise.max_sd_ratio > 1.2
    assert len(caught) == 1 and "client sampling" in caught[0] and "Control variates remove most" in caught[0]
    # the defaults (control variates) leave nothing on a shared Hessian: silent
    sampler, caught = _run(participation=fl.SchemeI(2))
    assert caught == [] and sampler.setting_noise.max_sd_ratio < 1.01


def test_what_is_not_checked_says_so():
    sampler, _ = _run()  # full participation, full batches
    assert sampler.setting_noise is None
    sampler = fl.FAHMC(shared_hessian(), 0.3, friction=1.0, chains=4, seed=0, participation=fl.SchemeI(2),
                       local_steps=2, check_local_bias=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler.run(100, warmup=20, progress=False)
    assert not sampler.setting_noise.measured and "K = 1 only" in sampler.setting_noise.note
