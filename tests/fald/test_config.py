"""FA-LD's configuration record: validated once, before any work, frozen; Settings derive from it;
the warm-up's and the correction's values are applied in one place."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import fedlangevin as fl
from fedlangevin.federation.participation import Full
from fedlangevin.fald.config import Config
from fedlangevin.warmup import session
from fedlangevin.problems import QuadraticProblem
from tests.targets import random_quadratic, small_problem_arrays


def _problem():
    h, b, p = small_problem_arrays()
    return QuadraticProblem(h, b, p)


def test_the_configuration_is_a_frozen_record_and_the_settings_derive_from_it():
    sampler = fl.FALD(_problem(), step_size=1e-2, local_steps=3, correlation=0.4, chains=5, seed=7)
    config = sampler.config
    assert isinstance(config, Config) and (config.local_steps, config.correlation, config.chains) == (3, 0.4, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.correlation = 0.9
    with pytest.raises(AttributeError):
        sampler.correlation = 0.9  # FA-LD's settings are read from the record, never reassigned
    derived = config.settings(sampler.problem, schedule=sampler.schedule, preconditioner=sampler.preconditioner,
                              preconditioner_norm=sampler.preconditioner_norm, correction_active=False)
    assert sampler.settings == derived and sampler.settings.correlation == 0.4 and sampler.settings.seed == 7


def test_arguments_are_validated_once(monkeypatch):
    """The participation rule and the batch size are checked against the problem once per sampler:
    the kernel is built from the checked record (no second validation)."""
    calls = {"validate": 0, "batch": 0}
    real_validate, real_batch = Full.validate, QuadraticProblem.check_batch_size

    def validate(self, weights):
        calls["validate"] += 1
        return real_validate(self, weights)

    def check_batch_size(self, batch_size):
        calls["batch"] += 1
        return real_batch(self, batch_size)

    monkeypatch.setattr(Full, "validate", validate)
    monkeypatch.setattr(QuadraticProblem, "check_batch_size", check_batch_size)
    fl.FALD(_problem(), step_size=1e-2, chains=2, seed=0)
    assert calls == {"validate": 1, "batch": 1}


@pytest.mark.parametrize("kwargs, name", [
    ({"streams": "both"}, "streams"),
    ({"upload": object()}, "upload"),
    ({"transport": object()}, "transport"),
    ({"correction": "none-such"}, "correction"),
    ({"adapt": "yes"}, "adapt"),
])
def test_every_argument_is_checked_before_the_mode_search(monkeypatch, kwargs, name):
    """init='map' runs a federated mode search (rounds of client queries): a bad argument must be
    refused before it, by name (the combination checks used to come after it)."""
    from fedlangevin.warmup import mode

    def no_search(*args, **kw):
        raise AssertionError("the mode search ran before the arguments were checked")

    monkeypatch.setattr(mode, "find_map", no_search)
    with pytest.raises(ValueError, match=name):
        fl.FALD(_problem(), init="map", seed=0, **kwargs)


def test_warmup_changes_are_applied_in_one_place(monkeypatch):
    """Every M, eta and reset of an adaptive warm-up reaches the sampler through FALD._apply."""
    applied = []
    real = fl.FALD._apply

    def spy(self, changes, run=None):
        applied.append(changes)
        return real(self, changes, run)

    monkeypatch.setattr(fl.FALD, "_apply", spy)
    sampler = fl.FALD(random_quadratic(4, 3, 0), chains=4, seed=0)
    sampler.run(rounds=40, progress=False)
    assert sampler.adapted and sampler.adapter is None
    assert all(isinstance(c, session.Changes) for c in applied)
    new_ms = [c.preconditioner for c in applied if c.preconditioner is not session.KEEP]
    assert new_ms and new_ms[-1] is sampler.preconditioner  # the last M installed is the one frozen
    assert applied[-1].finished and sum(c.finished for c in applied) == 1
    etas = [c.step_size for c in applied if c.step_size is not None]
    assert sampler.schedule(sampler.state.step) == etas[-1]


def test_a_corrections_setup_comes_back_as_values_counted_once():
    problem = random_quadratic(4, 3, 1)
    sampler = fl.FALD(problem, step_size=1e-2, correction="control_variates", chains=3, seed=0)
    assert sampler.state.correction is None
    sampler.run(rounds=2, progress=False)
    rounds_after_first = sampler.ledger["correction_rounds"]
    assert sampler.state.correction is not None and rounds_after_first > 0
    sampler.run(rounds=2, progress=False)  # the set-up runs once
    assert sampler.ledger["correction_rounds"] == rounds_after_first
    assert torch.isfinite(sampler.state.theta).all()
