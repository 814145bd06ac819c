"""Budgeted private FA-HMC runs: FAHMC(problem, privacy=RecordLevel(epsilon=..., delta=...))."""

import math
import warnings

import pytest

import fedlangevin as fl
from fedlangevin.fahmc.budget import HMC_SAFETY, step_rule
from fedlangevin.privacy.hmc import equivalent_step_size
from tests.targets import small_logistic

DELTA = 1e-5


def _logistic(n_per_client=100, clients=4, seed=0):
    return small_logistic(n_per_client, clients, seed)


def _run(problem, epsilon, rounds=40, chains=2, **kw):
    sampler = fl.FAHMC(problem, chains=chains, seed=0,
                       privacy=fl.privacy.RecordLevel(epsilon=epsilon, delta=DELTA), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = sampler.run(rounds=rounds, progress=False)
    return sampler, trace


def test_a_budgeted_run_reports_at_most_its_budget_for_everything_released():
    sampler, trace = _run(_logistic(), 8.0)
    report = trace.privacy(delta=DELTA)
    assert sampler.splitting == "OBABO"  # a private run's default splitting
    assert report.epsilon <= 8.0
    assert report.epsilon == pytest.approx(sampler.budget.epsilon, rel=1e-6)  # the plan's composition, reproduced
    assert report.epsilon > report.tight.epsilon  # the start is counted beside the sampling
    assert trace.settings.privacy_spent and trace.settings.clip == pytest.approx(sampler.budget.clip)
    assert trace.settings.friction == pytest.approx(sampler.budget.friction)
    assert float(trace.step_sizes.max()) == pytest.approx(sampler.budget.step_size)
    assert "everything released" in report.summary()


def test_the_accountant_sees_eta_eq_of_the_planned_h():
    sampler, trace = _run(_logistic(), 8.0, friction=300.0)
    b = sampler.budget
    assert b.friction == 300.0 and sampler.friction == 300.0  # a friction given is kept
    assert trace.privacy(delta=DELTA).mechanism["eta_max"] == pytest.approx(equivalent_step_size(b.step_size, 300.0))


def test_the_default_friction_is_critical_for_the_public_curvature():
    sampler, _ = _run(_logistic(), 8.0)
    b = sampler.budget
    lam0 = (HMC_SAFETY / b.public_step) ** 2  # the public step is HMC_SAFETY / sqrt(lambda_0)
    assert b.friction == pytest.approx(2.0 * math.sqrt(lam0), rel=1e-9)
    # at critical friction the stiffest direction relaxes at rate gamma / 2 = sqrt(lambda_0) per unit of time
    assert b.relaxation == pytest.approx(b.step_size * b.rounds * b.local_steps * math.sqrt(lam0), rel=1e-9)


def test_h_grows_with_the_budget():
    problem, budgets = _logistic(), (1.0, 4.0)
    plans = [_run(problem, eps, rounds=30)[0].budget for eps in budgets]
    assert all(p.epsilon <= eps for p, eps in zip(plans, budgets))
    assert plans[0].step_size < plans[1].step_size


def test_chains_cost_epsilon():
    problem = _logistic()
    one, _ = _run(problem, 2.0, rounds=200, chains=1)
    four, trace = _run(problem, 2.0, rounds=200, chains=4)
    assert four.budget.step_size < one.budget.step_size
    assert trace.privacy(delta=DELTA).epsilon <= 2.0


def test_the_step_rule_maps_h_to_eta_eq_and_caps_h():
    rule = step_rule(2.0)
    assert rule.to_eta(0.1) == pytest.approx(0.01 / (2 * math.tanh(0.1)), rel=1e-12)
    assert rule.public(100.0) == pytest.approx(math.sqrt(0.2) / 10.0, rel=1e-12)  # h^2 / 2 = 0.1 / lambda_0
    assert rule.rate(100.0) == pytest.approx(1.0, rel=1e-12)  # underdamped: gamma / 2
    assert rule.rate(0.5) == pytest.approx(0.5 * (2.0 - math.sqrt(2.0)), rel=1e-12)  # overdamped slow root


def test_a_budget_too_small_for_a_useful_run_is_refused_with_the_numbers():
    sampler = fl.FAHMC(_logistic(), chains=4, seed=0, privacy=fl.privacy.RecordLevel(epsilon=0.05, delta=DELTA))
    with pytest.raises(ValueError, match=r"relaxation times .* would not leave their start"):
        sampler.run(rounds=50, progress=False)




#: what a budgeted FA-HMC run plans itself, or cannot account, given anyway: the argument named in the error
REFUSED = {
    "step_size": (0.01, "step_size='auto'"), "adapt": (True, "adapt=True"), "init": ("mode", "init must be"),
    "splitting": ("BAOAB", "splitting='BAOAB'"), "local_steps": ("auto", "local_steps='auto'"),
    "friction": (-1.0, "friction"), "preconditioner": (None, "preconditioner"),
}


def test_bad_input_is_refused_by_name():
    problem = _logistic()
    budget = fl.privacy.RecordLevel(epsilon=1.0, delta=DELTA)
    for name, (value, match) in REFUSED.items():
        value = [1.0] * problem.dim if name == "preconditioner" else value
        with pytest.raises(ValueError, match=match):
            fl.FAHMC(problem, seed=0, privacy=budget, **{name: value})
    with pytest.raises(ValueError, match="check_local_bias=False"):  # K > 1's companions: a second release
        fl.FAHMC(problem, seed=0, privacy=budget, local_steps=2)


def test_a_budget_is_planned_for_one_run_without_checkpoints(tmp_path):
    budget = fl.privacy.RecordLevel(epsilon=8.0, delta=DELTA)
    with pytest.raises(ValueError, match="not checkpointed"):
        fl.FAHMC(_logistic(), seed=0, privacy=budget).run(rounds=5, checkpoint=tmp_path / "c.pt", progress=False)
    sampler, _ = _run(_logistic(), 8.0, rounds=5)
    with pytest.raises(ValueError, match="was planned for and spent"):  # a second run would spend it again
        sampler.run(rounds=5, progress=False)


def test_a_client_level_budget_reports_at_most_its_budget():
    sampler = fl.FAHMC(_logistic(), chains=2, seed=0, privacy=fl.privacy.ClientLevel(epsilon=20.0, delta=DELTA))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = sampler.run(rounds=20, progress=False)
    assert trace.privacy(delta=DELTA).epsilon <= 20.0


def test_a_friction_far_below_critical_buys_no_useful_run_and_says_so():
    """On a budget h ~ gamma eta_eq while gamma h is small, and the stiffest direction relaxes at gamma / 2: a
    friction of 3 on lambda_0 of thousands moves the chains about (gamma / (2 sqrt(lambda_0)))^2 ~ 1e-3 times
    as far as the critical one (which buys 8 epsilon over ten relaxation times here): refused with the numbers."""
    sampler = fl.FAHMC(_logistic(), chains=2, seed=0, friction=3.0,
                       privacy=fl.privacy.RecordLevel(epsilon=8.0, delta=DELTA))
    with pytest.raises(ValueError, match=r"relaxation times .* would not leave their start"):
        sampler.run(rounds=40, progress=False)


def test_the_split_gives_fahmc_s_start_what_it_gives_fald_s():
    """Many records per client (3,000 x 10): the sampling at its public step leaves the start most of
    epsilon = 4. The split reserves for the sampling at most FA-LD's public step in the accountant's
    units, so both samplers' private starts get the same noise multiplier; FA-HMC's public h at the
    critical friction would cost an eta_eq about 2.4 times that, so its h is then set by the budget
    (below its public step) and its eta_eq lands near FA-LD's eta (within 10 %: the split is made at
    the unit clip without the prior's curvature, the step solved afterwards at the clip found)."""
    problem = small_logistic(3000, 10)
    budget = fl.privacy.RecordLevel(epsilon=4.0, delta=DELTA)
    fald = fl.FALD(problem, chains=2, seed=0, privacy=budget)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fald.run(rounds=100, progress=False)
    with pytest.warns(UserWarning, match="the budget, not stability, sets the step"):
        hmc = fl.FAHMC(problem, chains=2, seed=0, privacy=budget)
        hmc.run(rounds=100, progress=False)
    starts = [s.budget.releases[0] for s in (fald, hmc)]
    assert all(r.name == "start" for r in starts)
    assert starts[0].noise_multiplier == pytest.approx(starts[1].noise_multiplier, rel=1e-9)
    assert hmc.budget.step_size < hmc.budget.public_step
    assert fald.budget.step_size == pytest.approx(fald.budget.public_step)
    eta_eq = equivalent_step_size(hmc.budget.step_size, hmc.budget.friction)
    assert eta_eq == pytest.approx(fald.budget.step_size, rel=0.1)
