"""A non-Gaussian posterior (kilpisjarvi's regression, log sigma sampled) under each realistic setting
with control variates: scheme I (5 of 10), scheme II (5 of 10) and minibatches of 10 % of a client's
records, at the step size and M of a full-participation pilot (what docs/realistic.md advises):
within the validation's acceptance up to the run's Monte Carlo error, and no setting warning."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import fedlangevin as fl
from fedlangevin.experiments.posteriordb import Recipe, compare, load


@pytest.fixture(scope="module")
def pilot():
    post = load("kilpisjarvi_mod-kilpisjarvi")
    sampler = fl.FALD(post.problem, chains=16, seed=0, init="map")
    sampler.run(400, progress=False)
    return post, sampler


@pytest.mark.parametrize("setting", ["scheme1", "scheme2", "minibatch"])
def test_each_setting_samples_the_posterior_with_control_variates(pilot, setting):
    post, first = pilot
    participation = {"scheme1": fl.SchemeI(5), "scheme2": fl.SchemeII(5, allow_unbalanced=True)}.get(setting)
    batch = Recipe(batch_fraction=0.1 if setting == "minibatch" else None).batch_size(post.problem)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = fl.FALD(post.problem, step_size=float(first.schedule(first.state.step)), chains=16, seed=1,
                          init=first.state.theta, preconditioner=first.preconditioner, participation=participation,
                          batch_size=batch, correction="control_variates")
        trace = sampler.run(400, progress=False)
    assert not [w for w in caught if "off the target" in str(w.message)]
    row = compare(post, np.asarray(trace.numpy()), 1.0)
    # tolerances: the acceptance (0.1 sd, sd ratios in [0.9, 1.1]) plus 3 Monte Carlo standard errors of a
    # mean (1 / sqrt(ESS) sd) and of an sd ratio (1 / sqrt(2 ESS)) at the run's smallest bulk ESS
    se = 1 / math.sqrt(row.min_ess_bulk)
    assert row.max_mean_error <= 0.1 + 3 * se, row
    assert 0.9 - 3 * se / math.sqrt(2) <= row.min_sd_ratio and row.max_sd_ratio <= 1.1 + 3 * se / math.sqrt(2), row


@pytest.mark.parametrize("setting", ["scheme1", "scheme2", "minibatch"])
def test_each_setting_samples_the_posterior_with_the_defaults(setting):
    # FALD's defaults (step_size="auto" adapting in the setting, correction="auto": control variates) from
    # init="map", with the same tolerances as above
    post = load("kilpisjarvi_mod-kilpisjarvi")
    participation = {"scheme1": fl.SchemeI(5), "scheme2": fl.SchemeII(5)}.get(setting)
    batch = Recipe(batch_fraction=0.1 if setting == "minibatch" else None).batch_size(post.problem)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = fl.FALD(post.problem, chains=16, seed=1, init="map", participation=participation, batch_size=batch)
        trace = sampler.run(800, progress=False)
    assert sampler.correction is not None and sampler.correction.name == "control_variates"
    assert not [w for w in caught if "off the target" in str(w.message)]
    row = compare(post, np.asarray(trace.numpy()), 1.0)
    se = 1 / math.sqrt(row.min_ess_bulk)
    assert row.max_mean_error <= 0.1 + 3 * se, row
    assert 0.9 - 3 * se / math.sqrt(2) <= row.min_sd_ratio and row.max_sd_ratio <= 1.1 + 3 * se / math.sqrt(2), row
