"""The local-step bias estimator (fedlangevin.warmup.local_bias) against FA-LD's exact stationary
law on Gaussian problems (fedlangevin.experiments.exact), fed with the real engine's iterates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedlangevin.experiments.exact import exact_moments, stationary_moments
from fedlangevin.fald.engine import build
from fedlangevin.warmup import local_bias as lb
from fedlangevin.problems import QuadraticProblem

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ETA = 0.1  # eta lambda_max(A_c) <= 0.43 on every client below: every K on the ladder is stable
SHIFTS = [[2.0, -1.0], [-1.0, 2.0], [0.5, 0.5]]
WEIGHTS = [0.3, 0.3, 0.4]


def _heterogeneous() -> QuadraticProblem:
    """Three clients with different curvatures: at eta = 0.1, K = 10 moves the stationary mean by
    (0.095, -0.305) K = 1 sds and widens the sds by 28 % and 21 % (the exact law)."""
    a = [[[4.0, 1.0], [1.0, 1.0]], [[1.0, -0.5], [-0.5, 3.0]], [[0.5, 0.0], [0.0, 0.5]]]
    return QuadraticProblem(torch.tensor(a, dtype=torch.float64), torch.tensor(SHIFTS, dtype=torch.float64),
                            torch.tensor(WEIGHTS, dtype=torch.float64))


def _equal_curvatures() -> QuadraticProblem:
    """The same shifts, one Hessian for every client: a round of K steps then has the K = 1 chain's
    stationary law exactly (Phi_c and the noise the same for every client, sum_c p_c nu_c = 0), for
    every K; only the shifts differ between the clients."""
    a = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    return QuadraticProblem(a.expand(3, 2, 2).clone(), torch.tensor(SHIFTS, dtype=torch.float64),
                            torch.tensor(WEIGHTS, dtype=torch.float64))


def _exact(problem, k):
    """The exact stationary (mean shift, sd ratio) of K = k against K = 1, in K = 1 sds."""
    m1, c1 = stationary_moments(problem, [ETA])
    mk, ck = stationary_moments(problem, [ETA] * k)
    sd1 = np.sqrt(np.diag(c1))
    return (mk - m1) / sd1, np.sqrt(np.diag(ck)) / sd1


def _measure(problem, candidates, chains, cycles, seed, groups=1):
    """The real engine's kernel from the K = 1 stationary law (exact draws), a K = 1 pilot of 200
    rounds for the decay time, then the plan's rounds; one estimate tuple per group of ``chains``."""
    kernel = build(problem)
    g = torch.Generator().manual_seed(seed)
    m1, c1 = stationary_moments(problem, [ETA])
    total = chains * groups
    start = torch.tensor(m1) + torch.randn(total, 2, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(
        torch.tensor(c1)).T
    state = kernel.init(start)
    state, pilot = kernel.rounds(state, [[ETA]] * 200, g)
    plan = lb.plan_segments(candidates, lb.decay_rounds(pilot[:, :chains].clone()), cycles=cycles)
    state, thetas = kernel.rounds(state, [[ETA] * k for k in plan.schedule()], g)
    out = []
    for j in range(groups):
        s = lb.bias_init(plan, chains, 2)
        for t in range(plan.rounds):
            s = lb.bias_update(s, thetas[t, j * chains:(j + 1) * chains])
        out.append(lb.bias_final(s))
    return plan, out


def test_the_exact_laws_of_the_two_problems():
    """The premise of the tests below, from the exact law: K = 10 is biased beyond 0.1 sd on the
    heterogeneous problem and not at all with equal curvatures."""
    shift, ratio = _exact(_heterogeneous(), 10)
    assert np.allclose(shift, [0.0952, -0.3047], atol=1e-4) and np.allclose(ratio, [1.2847, 1.2132], atol=1e-4)
    shift, ratio = _exact(_equal_curvatures(), 10)
    assert np.abs(shift).max() < 1e-12 and np.abs(ratio - 1).max() < 1e-12


@pytest.mark.parametrize("make", [_heterogeneous, _equal_curvatures])
def test_the_estimate_covers_the_exact_difference_within_its_error(make):
    """K = 10 against K = 1, 64 chains, 8 cycles, fixed seed. Tolerance: 4 jackknife standard errors
    (a normal deviate beyond 4 has probability 6e-5; four quantities) plus the plan's transient,
    at most TRANSIENT tau_e / kept = 0.05 / (4 ln 20) = 0.4 % of the difference (module
    docstring), allowed as 1 %. The verdicts: biased on the first problem, not on the second."""
    problem = make()
    plan, [(est,)] = _measure(problem, [10], chains=64, cycles=8, seed=0)
    shift, ratio = _exact(problem, 10)
    assert est.local_steps == 10 and est.chains == 64 and est.rounds == plan.rounds
    assert est.kept == (plan.cycles * plan.kept, plan.cycles * math.ceil(plan.kept / 10))
    for got, se, want in ((est.mean_shift, est.mean_shift_se, shift), (est.sd_ratio, est.sd_ratio_se, ratio)):
        got, se = np.array(got), np.array(se)
        assert (se > 0).all() and (se < 0.05).all()  # informative: well below the tolerance 0.1
        assert (np.abs(got - want) <= 4 * se + 0.01 * np.abs(want - (want > 0.5))).all(), (got, se, want)
    biased = make is _heterogeneous
    assert lb.exceeds(est) is biased and lb.within(est) is (not biased)


def test_the_plans_burn_in_leaves_a_negligible_transient():
    """The estimator's expectation under the plan, from the exact round-by-round law (exact_moments
    over the plan's schedule from the K = 1 stationary law): the kept rounds' mean difference is
    within 1 % of the stationary one (the docstring's bound: 0.4 %)."""
    problem = _heterogeneous()
    m1, c1 = stationary_moments(problem, [ETA])
    exact_decay = -1.0 / math.log(1 - ETA * float(torch.linalg.eigvalsh(problem.global_hessian).min()))
    plan = lb.plan_segments([10], exact_decay, cycles=3)
    means, _ = exact_moments(problem, [[ETA] * k for k in plan.schedule()], init_mean=m1, init_cov=c1)
    where = np.array([plan.where(t) for t in range(plan.rounds)])
    kept1 = means[(where[:, 0] == 0) & where[:, 1].astype(bool)].mean(0)
    kept10 = means[(where[:, 0] == 1) & where[:, 1].astype(bool)].mean(0)
    mk, _ = stationary_moments(problem, [ETA] * 10)
    assert np.abs((kept10 - kept1) - (mk - m1)).max() <= 0.01 * np.abs(mk - m1).max()


def test_the_jackknife_standard_errors_are_calibrated():
    """40 independent groups of 32 chains (one run of 1,280 chains): the z-scores (estimate - exact)
    / se of the 4 quantities, 160 in all, have sd within [0.75, 1.3] (the sd of 160 standard
    normals is within 1 +- 0.15 with probability 0.99; the jackknife's own error from 32 chains
    adds about 1 / sqrt(2 * 31) = 13 %) and mean within 0.35 (0.12 sd of a mean of 160, plus the
    plan's transient bias, about 0.005 / se ~ 0.1)."""
    problem = _heterogeneous()
    shift, ratio = _exact(problem, 10)
    _, groups = _measure(problem, [10], chains=32, cycles=4, seed=1, groups=40)
    z = []
    for (est,) in groups:
        z += list((np.array(est.mean_shift) - shift) / np.array(est.mean_shift_se))
        z += list((np.array(est.sd_ratio) - ratio) / np.array(est.sd_ratio_se))
    z = np.array(z)
    assert 0.75 <= z.std() <= 1.3 and abs(z.mean()) <= 0.35, (z.mean(), z.std())


def test_choose_picks_a_large_k_where_the_curvatures_are_equal_and_at_most_2_where_they_differ():
    """The whole ladder measured at once (one plan, the K = 1 segments shared), 128 chains, 12 cycles
    (standard errors about 0.015: the upper bounds are the estimates + about 0.04). Equal
    curvatures: no K is biased by the exact law, and the choice is the top of the ladder, 50.
    Heterogeneous: by the exact law K = 5 is 0.17 sd off (sd ratio 1.17), and every K >= 5
    exceeds the tolerance on evidence; K = 2 (0.045 off) is within it or inconclusive
    (its upper bound is about 0.08 +- 0.015): the choice is 1 or 2."""
    ladder = lb.DEFAULT_LADDER
    _, [estimates] = _measure(_equal_curvatures(), ladder[1:], chains=128, cycles=12, seed=2)
    choice = lb.choose_local_steps(estimates)
    assert choice.local_steps == 50, choice
    assert [e[0] for e in choice.evidence] == list(ladder[1:]) and all(e[3] for e in choice.evidence)
    assert choice.record()["local_steps"] == 50 and not any(lb.exceeds(e) for e in estimates)
    _, [estimates] = _measure(_heterogeneous(), ladder[1:], chains=128, cycles=12, seed=2)
    choice = lb.choose_local_steps(estimates)
    assert choice.local_steps in (1, 2), choice
    assert [e[3] for e in choice.evidence][1:] == [False] * 4 and all(lb.exceeds(e) for e in estimates[1:])
    for k in ladder[2:]:  # the premise, from the exact law
        shift, ratio = _exact(_heterogeneous(), k)
        assert max(np.abs(shift).max(), np.abs(ratio - 1).max()) > 0.15


def test_decay_rounds_of_an_ar1_chain():
    """AR(1) with rho = 0.9, 200 chains x 2,000 rounds: tau_int / 2 = (1 + rho) / (2 (1 - rho)) = 9.5
    rounds; the estimate within 10 % (its sd here is about 2 %), the largest over the coordinates
    (a second coordinate with rho = 0.5: 1.5)."""
    g = torch.Generator().manual_seed(3)
    rho = torch.tensor([0.5, 0.9], dtype=torch.float64)
    x = torch.empty(2000, 200, 2, dtype=torch.float64)
    x[0] = torch.randn(200, 2, generator=g, dtype=torch.float64)
    noise = torch.randn(2000, 200, 2, generator=g, dtype=torch.float64) * torch.sqrt(1 - rho**2)
    for t in range(1, 2000):
        x[t] = rho * x[t - 1] + noise[t]
    assert lb.decay_rounds(x) == pytest.approx(9.5, rel=0.1)
    assert lb.decay_rounds(torch.randn(500, 8, 1, generator=g, dtype=torch.float64)) == 1.0  # no memory: at least 1


def test_the_schedule_and_the_segments():
    plan = lb.BiasPlan((2, 5), burn_in=3, kept=10, cycles=2)
    assert plan.segments() == ((1, 3, 10), (2, 3, 5), (5, 3, 2))
    one = (1,) * 13 + (2,) * 8 + (5,) * 5
    assert plan.schedule() == one * 2 and plan.rounds == 52
    assert [plan.where(t) for t in (0, 2, 3, 12, 13, 16, 21, 24, 26)] == [
        (0, False), (0, False), (0, True), (0, True), (1, False), (1, True), (2, False), (2, True), (0, False)]
    p = lb.plan_segments([10], 7.0)
    assert (p.burn_in, p.kept, p.cycles) == (math.ceil(7 * math.log(20)), 4 * math.ceil(7 * math.log(20)), 4)
    assert lb.BiasPlan.from_record(plan.record()) == plan


def test_state_and_estimate_records_round_trip():
    plan = lb.BiasPlan((3,), burn_in=1, kept=3, cycles=1)
    g = torch.Generator().manual_seed(4)
    s = lb.bias_init(plan, 4, 2)
    for _ in range(plan.rounds):
        s = lb.bias_update(s, torch.randn(4, 2, generator=g, dtype=torch.float64))
    back = lb.BiasState.from_record(s.record())
    assert back.round == s.round and back.counts == s.counts and torch.equal(back.sums, s.sums)
    (est,) = lb.bias_final(back)
    assert est == lb.bias_final(s)[0] and lb.BiasEstimate.from_record(est.record()) == est
    with pytest.raises(ValueError, match="state: the plan's 6 rounds"):
        lb.bias_update(s, torch.zeros(4, 2))


def _estimate(k, shift, se=0.01, ratio=1.0, chains=32):
    return lb.BiasEstimate(k, (shift, 0.0), (se, se), (ratio, 1.0), (se, se), chains, (100, 10), 200)


def test_verdicts_on_given_estimates():
    """Bonferroni t bounds: 2 d = 4 tests, 31 degrees of freedom, at 95 %: q = t(1 - 0.0125, 31) = 2.35."""
    from scipy.stats import t

    q = t.ppf(1 - 0.05 / 4, 31)
    assert lb.exceeds(_estimate(2, 0.1 + q * 0.01 + 1e-6)) and not lb.exceeds(_estimate(2, 0.1 + q * 0.01 - 1e-6))
    assert lb.within(_estimate(2, 0.1 - q * 0.01 - 1e-6)) and not lb.within(_estimate(2, 0.1 - q * 0.01 + 1e-6))
    assert lb.exceeds(_estimate(2, 0.0, ratio=0.85)) and not lb.within(_estimate(2, 0.0, ratio=0.92))
    assert lb.within(_estimate(2, 0.0, ratio=0.95))
    assert not lb.exceeds(_estimate(2, 0.2, se=0.1)) and not lb.within(_estimate(2, 0.2, se=0.1))  # inconclusive
    assert lb.exceeds(_estimate(2, 0.15), tolerance=0.1) and not lb.exceeds(_estimate(2, 0.15), tolerance=0.2)


def test_the_means_only_verdict_of_the_companions():
    """sd=False (the companions' check): d = 2 tests of the means, q = t(1 - 0.025, 31) = 2.04; an sd
    ratio far off does not count, and the margins name only means."""
    from scipy.stats import t

    q = t.ppf(1 - 0.05 / 2, 31)
    assert lb.exceeds(_estimate(2, 0.1 + q * 0.01 + 1e-6), sd=False)
    assert not lb.exceeds(_estimate(2, 0.1 + q * 0.01 - 1e-6), sd=False)
    assert not lb.exceeds(_estimate(2, 0.0, ratio=0.5), sd=False) and lb.exceeds(_estimate(2, 0.0, ratio=0.5))
    tests = lb.margins(_estimate(2, 0.05), 0.95, sd=False)
    assert [kind for kind, *_ in tests] == ["mean", "mean"] and tests[0][3] == pytest.approx(q * 0.01)


def test_choose_walks_up_the_ladder_and_stops_at_the_first_k_not_within():
    ok, bad = 0.0, 0.5
    pick = lambda shifts: lb.choose_local_steps([_estimate(k, s) for k, s in shifts]).local_steps  # noqa: E731
    assert pick([(2, ok), (5, ok), (10, bad), (20, ok)]) == 5  # 20 after a failed 10: noise
    assert pick([(2, bad), (5, ok)]) == 1
    assert pick([(2, ok), (10, ok)]) == 2  # 5 not measured: no claim beyond it
    assert pick([]) == 1
    assert lb.choose_local_steps([_estimate(4, ok)], ladder=(1, 4)).local_steps == 4
    choice = lb.choose_local_steps([_estimate(2, ok), _estimate(5, bad)])
    assert [(k, ok_) for k, _, _, ok_ in choice.evidence] == [(2, True), (5, False)]
    assert choice.evidence[1][1] == pytest.approx(0.5) and choice.evidence[1][2] > 0.5


@pytest.mark.parametrize("ladder", [(), (2, 5), (1, 5, 2), (1, 2, 2), (1, 0), (1, -2), (1, 2.5), "125", (1, True),
                                    (1, float("nan")), None, 5])
def test_a_bad_ladder_is_refused(ladder):
    with pytest.raises(ValueError, match="ladder"):
        lb.check_ladder(ladder)
    with pytest.raises(ValueError, match="ladder"):
        lb.choose_local_steps([], ladder=ladder)


@pytest.mark.parametrize("tolerance", [0, -0.1, float("nan"), float("inf"), "0.1", None])
def test_a_bad_tolerance_is_refused(tolerance):
    for fn in (lb.exceeds, lb.within):
        with pytest.raises(ValueError, match="tolerance"):
            fn(_estimate(2, 0.0), tolerance=tolerance)
    with pytest.raises(ValueError, match="tolerance"):
        lb.choose_local_steps([], tolerance=tolerance)


@pytest.mark.parametrize("confidence", [0, 1, 1.5, float("nan")])
def test_a_bad_confidence_is_refused(confidence):
    with pytest.raises(ValueError, match="confidence"):
        lb.exceeds(_estimate(2, 0.0), confidence=confidence)
    with pytest.raises(ValueError, match="confidence"):
        lb.choose_local_steps([], confidence=confidence)


@pytest.mark.parametrize("kwargs, name", [
    (dict(candidates=[1, 2]), "candidates"), (dict(candidates=[5, 2]), "candidates"),
    (dict(candidates=[]), "candidates"),
    (dict(candidates="10"), "candidates"), (dict(decay=0.0), "decay"), (dict(decay=float("nan")), "decay"),
    (dict(decay=-1.0), "decay"), (dict(cycles=0), "cycles"), (dict(burn_in=-1), "burn_in"), (dict(kept=0), "kept"),
    (dict(kept=2.5), "kept"), (dict(transient=0.0), "transient"), (dict(transient=1.0), "transient"),
])
def test_a_bad_plan_is_refused(kwargs, name):
    args = dict(candidates=[10], decay=5.0) | kwargs
    with pytest.raises(ValueError, match=name):
        lb.plan_segments(args.pop("candidates"), args.pop("decay"), **args)


def test_bad_states_and_iterates_are_refused():
    plan = lb.BiasPlan((2,), burn_in=0, kept=2, cycles=1)
    with pytest.raises(ValueError, match="plan"):
        lb.bias_init({"candidates": [2]}, 4, 2)
    with pytest.raises(ValueError, match="chains"):
        lb.bias_init(plan, 1, 2)
    with pytest.raises(ValueError, match="dim"):
        lb.bias_init(plan, 4, 0)
    s = lb.bias_init(plan, 4, 2)
    with pytest.raises(ValueError, match="theta must have shape"):
        lb.bias_update(s, torch.zeros(4, 3))
    with pytest.raises(ValueError, match="theta must be finite"):
        lb.bias_update(s, torch.full((4, 2), float("nan")))
    with pytest.raises(ValueError, match=r"state: no kept rounds yet for K = \[1, 2\]"):
        lb.bias_final(s)
    s = lb.bias_update(lb.bias_update(s, torch.ones(4, 2)), torch.ones(4, 2))
    with pytest.raises(ValueError, match="K = \\[2\\]"):
        lb.bias_final(s)
    with pytest.raises(ValueError, match="estimate must be a BiasEstimate"):
        lb.exceeds({"local_steps": 2})
    with pytest.raises(ValueError, match="estimates"):
        lb.choose_local_steps([_estimate(3, 0.0)])  # 3 is not on the default ladder
    with pytest.raises(ValueError, match="twice"):
        lb.choose_local_steps([_estimate(2, 0.0), _estimate(2, 0.0)])
    with pytest.raises(ValueError, match="thetas"):
        lb.decay_rounds(torch.zeros(3, 4, 2))
    with pytest.raises(ValueError, match="thetas"):
        lb.decay_rounds(torch.ones(10, 4, 2))
