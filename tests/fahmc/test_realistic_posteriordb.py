"""A non-Gaussian posterior (kilpisjarvi's regression, log sigma sampled) under each realistic setting with
FA-HMC's defaults (step_size="auto", correction="auto": control variates) from init="map": scheme I (5 of
10), scheme II (5 of 10) and minibatches of 10 % of a client's records, within the validation's acceptance
up to the run's Monte Carlo error; plain minibatches miss it without either correction (the test can fail)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedlangevin as fl
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.experiments.posteriordb import Recipe, compare, load

SETTINGS = ["scheme1", "scheme2", "minibatch"]


def _run(setting: str, correction="auto", name="kilpisjarvi_mod-kilpisjarvi", gradient_noise="auto"):
    post = load(name)
    participation = {"scheme1": fl.SchemeI(5), "scheme2": fl.SchemeII(5)}.get(setting)
    batch = Recipe(batch_fraction=0.1 if setting == "minibatch" else None).batch_size(post.problem)
    sampler = fl.FAHMC(post.problem, chains=16, seed=1, init="map", participation=participation, batch_size=batch,
                       correction=correction, gradient_noise=gradient_noise)
    trace = sampler.run(800, progress=False)  # warm-up: the first half
    return sampler, compare(post, np.asarray(trace.numpy()), 1.0)


@pytest.mark.parametrize("setting", SETTINGS)
def test_each_setting_samples_the_posterior_with_the_defaults(setting):
    sampler, row = _run(setting)
    assert isinstance(sampler.correction, ControlVariates)
    # tolerances: the acceptance (0.1 sd, sd ratios in [0.9, 1.1]) plus 3 Monte Carlo standard errors of a
    # mean (1 / sqrt(ESS) sd) and of an sd ratio (1 / sqrt(2 ESS)) at the run's smallest bulk ESS
    se = 1 / math.sqrt(row.min_ess_bulk)
    assert row.max_mean_error <= 0.1 + 3 * se, row
    assert 0.9 - 3 * se / math.sqrt(2) <= row.min_sd_ratio and row.max_sd_ratio <= 1.1 + 3 * se / math.sqrt(2), row


def test_uncorrected_minibatches_miss_the_posterior():
    # earnings' plain minibatches (12 of 119-120 records) widen FA-HMC's sds to 1.30-2.31 at 16 x 1,000
    # (docs/realistic.md): beyond the same tolerance, so the check above can fail. (With the gradient-noise
    # correction alone the noise is far more than the refresh holds: floored, sds up to 2.2; docs/gradient-noise.md)
    _, row = _run("minibatch", correction=None, name="earnings-logearn_interaction_z", gradient_noise=None)
    se = 1 / math.sqrt(row.min_ess_bulk)
    assert row.max_sd_ratio > 1.1 + 3 * se / math.sqrt(2), row
