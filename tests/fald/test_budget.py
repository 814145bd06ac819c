"""Budgeted private FA-LD runs: FALD(problem, privacy=RecordLevel(epsilon=..., delta=...))."""

import warnings

import pytest
import torch

import fedlangevin as fl
from tests.targets import small_logistic

DELTA = 1e-5


def _logistic(n_per_client=100, clients=4, seed=0):
    return small_logistic(n_per_client, clients, seed)


def _run(problem, epsilon, rounds=40, chains=2, **kw):
    sampler = fl.FALD(problem, chains=chains, seed=0, privacy=fl.privacy.RecordLevel(epsilon=epsilon, delta=DELTA),
                      **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = sampler.run(rounds=rounds, progress=False)
    return sampler, trace


def test_a_budgeted_run_reports_at_most_its_budget_for_everything_released():
    problem = _logistic()
    sampler, trace = _run(problem, 8.0)
    report = trace.privacy(delta=DELTA)
    assert report.epsilon <= 8.0
    assert report.epsilon == pytest.approx(sampler.budget.epsilon, rel=1e-6)  # the plan's composition, reproduced
    assert report.epsilon > report.tight.epsilon  # the start is counted beside the sampling
    assert trace.settings.privacy_spent and trace.settings.clip == pytest.approx(sampler.budget.clip)
    assert "everything released" in report.summary()
    assert "every chain is released and counted" in sampler.budget.summary()


def test_the_chains_start_at_the_private_start():
    problem = _logistic()
    sampler, trace = _run(problem, 8.0, rounds=2)
    start = sampler.budget.start.theta
    # one round of a step of 0.1 / lambda_0 moves the chains by about sqrt(2 eta) per coordinate
    assert float((trace.samples[:, 0] - start).abs().max()) < 10 * (2 * sampler.budget.step_size) ** 0.5 + 1e-3


def test_the_plan_is_monotone_in_the_budget():
    problem = _logistic()
    steps = []
    for eps in (1.0, 4.0):
        sampler, _ = _run(problem, eps, rounds=30)
        steps.append(sampler.budget.step_size)
        assert sampler.budget.epsilon <= eps
    assert steps[0] <= steps[1]


def test_more_chains_buy_a_smaller_step_when_the_budget_binds():
    problem = _logistic()
    one, _ = _run(problem, 2.0, rounds=200, chains=1)
    four, _ = _run(problem, 2.0, rounds=200, chains=4)
    assert four.budget.step_size < one.budget.step_size


def test_the_split_gives_the_start_most_of_the_budget_and_the_sampling_its_relaxation_times():
    """runplan._start_noise: the start gets START_SHARE of epsilon, lowered (not below MIN_SHARE) until the
    sampling has MIN_RELAXATION relaxation times, or more where the sampling's public step leaves more."""
    from fedlangevin.privacy import runplan
    from fedlangevin.privacy.planning import Release, noise_for_epsilon

    problem = _logistic()

    def alone(share, eps):  # the start's noise multiplier when it spends share * eps by itself
        return noise_for_epsilon(share * eps, DELTA, lambda z: Release("start", z, runplan.START_ROUNDS))

    lowered, _ = _run(problem, 2.0, rounds=200, chains=1)  # 0.9 would leave the sampling under 10
    z = lowered.budget.releases[0].noise_multiplier
    assert alone(runplan.START_SHARE, 2.0) < z < alone(runplan.MIN_SHARE, 2.0)
    # the bisection's share to 2^-12 of (0.9 - 0.3) moves the relaxation by well under 1 %
    assert lowered.budget.relaxation == pytest.approx(runplan.MIN_RELAXATION, rel=0.01)
    floored, _ = _run(problem, 2.0, rounds=200, chains=4)  # four chains: even 0.3 leaves less
    assert floored.budget.releases[0].noise_multiplier == pytest.approx(alone(runplan.MIN_SHARE, 2.0), rel=1e-9)
    assert floored.budget.relaxation < runplan.MIN_RELAXATION
    public, _ = _run(problem, 8.0, rounds=200, chains=1)  # the public step costs less than 0.1 of epsilon
    assert public.budget.step_size == pytest.approx(public.budget.public_step, rel=2e-3)
    assert public.budget.releases[0].noise_multiplier < alone(runplan.START_SHARE, 8.0)


def test_a_budget_too_small_for_a_useful_run_is_refused_with_the_numbers():
    problem = _logistic()
    sampler = fl.FALD(problem, chains=4, seed=0, privacy=fl.privacy.RecordLevel(epsilon=0.05, delta=DELTA))
    with pytest.raises(ValueError, match=r"relaxation times .* would not leave their start"):
        sampler.run(rounds=50, progress=False)


def test_a_budget_that_binds_warns_with_the_numbers():
    problem = _logistic()
    sampler = fl.FALD(problem, chains=4, seed=0, privacy=fl.privacy.RecordLevel(epsilon=2.0, delta=DELTA))
    with pytest.warns(UserWarning, match=r"the budget, not stability, sets the step: eta = "):
        sampler.run(rounds=200, progress=False)


def test_a_budget_is_spent_once():
    problem = _logistic()
    sampler, _ = _run(problem, 8.0, rounds=5)
    with pytest.raises(ValueError, match="was planned for and spent"):
        sampler.run(rounds=5, progress=False)


@pytest.mark.parametrize("kwargs, match", [
    (dict(step_size=0.01), "plans its step size"),
    (dict(adapt=True), "adapt=True"),
    (dict(init="mode"), "init must be"),
    (dict(local_steps="auto"), "numeric local_steps"),
    # a budgeted run with M = 4 I ran and reported epsilon 8.81 for a budget of 8 before this refusal
    (dict(preconditioner=torch.full((18,), 4.0)), "preconditioner: a budgeted run plans its step for M = I"),
])
def test_what_a_budget_plans_is_refused_when_given(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fl.FALD(_logistic(), seed=0, privacy=fl.privacy.RecordLevel(epsilon=1.0, delta=DELTA), **kwargs)


def test_a_budgeted_run_is_not_checkpointed(tmp_path):
    sampler = fl.FALD(_logistic(), seed=0, privacy=fl.privacy.RecordLevel(epsilon=1.0, delta=DELTA))
    with pytest.raises(ValueError, match="not checkpointed"):
        sampler.run(rounds=5, checkpoint=tmp_path / "c.pt", progress=False)


def test_init_map_without_a_budget_points_to_one():
    with pytest.raises(ValueError, match="give a budget"):
        fl.FALD(_logistic(), seed=0, init="map", privacy=fl.privacy.RecordLevel(clip=1.0))


def test_a_client_level_budget_reports_at_most_its_budget():
    problem = _logistic()
    sampler = fl.FALD(problem, chains=2, seed=0, privacy=fl.privacy.ClientLevel(epsilon=20.0, delta=DELTA))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = sampler.run(rounds=20, progress=False)
    assert trace.privacy(delta=DELTA).epsilon <= 20.0


def test_the_private_warmup_step_respects_the_prior_curvature():
    """A tiny clip makes the clip's public curvature guess tiny; the N(0, 1) prior alone needs eta < 2, and the
    private warm-up's first step is now at most 0.1 / 1 (it was 0.1 / (n C^2 / p), e.g. 43)."""
    problem = _logistic(n_per_client=10)
    sampler = fl.FALD(problem, chains=4, seed=0, privacy=fl.privacy.RecordLevel(clip=1e-4))
    trace = sampler.run(rounds=40, progress=False)
    assert float(trace.step_sizes[0]) <= 0.1 + 1e-12  # later windows adapt it from the chains' spread
    assert torch.isfinite(trace.samples).all()


@pytest.mark.parametrize("sampler", ["FALD", "FAHMC"])
def test_start_rounds_sets_the_private_starts_rounds_at_the_same_share_of_the_budget(sampler):
    """RecordLevel(start_rounds=T): the start's release runs T rounds and the run still reports at most its
    budget. The start alone is a full-batch Gaussian mechanism, so T rounds at noise multiplier z cost what one
    round at z / sqrt(T) costs: where the split gives the start the same share (here START_SHARE, the sampling
    keeping its relaxation times either way), z grows as sqrt(T) to float precision of the solver (1e-3)."""
    problem = _logistic()
    zs = {}
    for t in (20, 80):
        privacy = fl.privacy.RecordLevel(epsilon=8.0, delta=DELTA, start_rounds=t)
        run = getattr(fl, sampler)(problem, chains=2, seed=0, privacy=privacy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = run.run(rounds=40, progress=False)
        start = run.budget.releases[0]
        assert start.rounds == t and len(run.budget.start.clips) == t
        assert trace.privacy(delta=DELTA).epsilon <= 8.0
        zs[t] = start.noise_multiplier
    assert zs[80] / zs[20] == pytest.approx(2.0, rel=1e-3)


def test_start_rounds_is_checked_and_shown():
    with pytest.raises(ValueError, match="start_rounds"):
        fl.privacy.RecordLevel(epsilon=1.0, delta=DELTA, start_rounds=0)
    assert "start_rounds=200" in repr(fl.privacy.ClientLevel(epsilon=1.0, delta=DELTA, start_rounds=200))
    assert "start_rounds" not in repr(fl.privacy.RecordLevel(epsilon=1.0, delta=DELTA))
