"""The budget planner: releases composed, the step solved within a target epsilon, refusals with numbers."""

import math

import pytest

import fedlangevin as fl
from fedlangevin.privacy import tight_epsilon
from fedlangevin.privacy.planning import (
    Release,
    combined_noise_multiplier,
    compose_epsilon,
    gradient_noise_multiplier,
    largest_within,
    noise_for_epsilon,
)

DELTA = 1e-5


def test_one_release_is_the_tight_accountant_of_the_same_mechanism():
    # full batch, every client: z = (1 / 2C) sqrt(2 p / eta) with C = 1, p = 0.1
    eta = 0.2 / (4 * 30.0 ** 2)
    expected = tight_epsilon(eta=eta, gamma=1.0, sensitivity=2.0, p_min=0.1, num_clients=10, num_sampled=10,
                             local_steps=1, iterations=400, delta=DELTA)
    assert compose_epsilon([Release("sampling", 30.0, 100, copies=4)], DELTA) == pytest.approx(expected, rel=1e-9)


def test_chains_and_a_start_each_cost_epsilon():
    one = compose_epsilon([Release("sampling", 30.0, 100)], DELTA)
    four = compose_epsilon([Release("sampling", 30.0, 100, copies=4)], DELTA)
    both = compose_epsilon([Release("start", 30.0, 50), Release("sampling", 30.0, 100, copies=4)], DELTA)
    assert one < four < both


def test_noise_for_epsilon_meets_the_target_and_is_smallest():
    make = lambda z: Release("start", z, 50)  # noqa: E731
    z = noise_for_epsilon(0.5, DELTA, make)
    assert compose_epsilon([make(z)], DELTA) <= 0.5
    assert compose_epsilon([make(z / 1.01)], DELTA) > 0.5  # rtol 1e-3: 1% less noise spends more


def test_largest_within_is_within_the_target_and_monotone_in_the_budget():
    fixed = [Release("start", 40.0, 50)]
    make = lambda eta: Release("sampling", 1.0 / math.sqrt(eta), 100, copies=4)  # noqa: E731
    steps = []
    for eps in (1.0, 2.0, 4.0):
        eta, spent = largest_within(eps, DELTA, fixed, make, upper=1.0)
        assert spent <= eps and compose_epsilon(fixed + [make(eta)], DELTA) <= eps
        assert compose_epsilon(fixed + [make(eta * 1.01)], DELTA) > eps
        steps.append(eta)
    assert steps[0] < steps[1] < steps[2]


def test_largest_within_refuses_with_the_numbers_when_the_fixed_releases_spend_it_all():
    with pytest.raises(ValueError, match=r"already spend epsilon = [0-9.]+ of the 0.1"):
        largest_within(0.1, DELTA, [Release("start", 2.0, 50)], lambda e: Release("s", 1 / math.sqrt(e), 1), 1.0)


def test_combined_noise_multiplier_and_its_inverse():
    # (z_g^-2 + sigma_b^-2)^(-1/2): one Gaussian mechanism for the gradient sum and the count
    assert combined_noise_multiplier(3.0, 4.0) == pytest.approx(2.4)
    assert gradient_noise_multiplier(2.4, 4.0) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="count_noise must exceed"):
        gradient_noise_multiplier(2.0, 1.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="x", noise_multiplier=0.0, rounds=1), "noise_multiplier"),
    (dict(name="x", noise_multiplier=1.0, rounds=0), "rounds"),
    (dict(name="x", noise_multiplier=1.0, rounds=1, batch_fraction=1.5), "batch_fraction"),
    (dict(name="x", noise_multiplier=1.0, rounds=1, inclusion=0.0), "inclusion"),
    (dict(name="x", noise_multiplier=1.0, rounds=1, copies=0), "copies"),
])
def test_bad_releases_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Release(**kwargs)


def test_release_records_round_trip():
    r = Release("start", 12.5, 50, 2, 0.5, 0.3, 3)
    assert Release.from_record(list(r.record())) == r


@pytest.mark.parametrize("kwargs, match", [
    (dict(), "give clip=C"),
    (dict(epsilon=1.0), "epsilon and delta"),
    (dict(epsilon=0.0, delta=1e-5), "epsilon"),
    (dict(epsilon=1.0, delta=1.0), "delta"),
    (dict(epsilon=1.0, delta=1e-5, quantile=1.0), "quantile"),
])
def test_budget_records_refuse_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fl.privacy.RecordLevel(**kwargs)
    with pytest.raises(ValueError, match=match):
        fl.privacy.ClientLevel(**kwargs)


def test_a_budget_record_has_no_sensitivity_before_its_plan():
    with pytest.raises(ValueError, match="has no clip yet"):
        fl.privacy.RecordLevel(epsilon=1.0, delta=DELTA).sensitivity
    assert repr(fl.privacy.RecordLevel(clip=1.0)) == "RecordLevel(clip=1.0)"
