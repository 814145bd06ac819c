"""FA-HMC's local_steps="auto" (fedlangevin.fahmc.auto): against FA-HMC's exact stationary laws on
Gaussians (fedlangevin.fahmc.exact), the sampler's chains unchanged, the adaptive warm-up, checkpoints
mid-measurement, and what it refuses."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.fahmc import local_bias as hcheck
from fedlangevin.fahmc.exact import stationary_moments
from fedlangevin.warmup.curvature import curvature_at
from fedlangevin.warmup.local_bias import exceeds
from fedlangevin.problems import QuadraticProblem

from tests.stops import dies_in_round, finishes_as, measures_afresh_after_a_stop

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: h and the friction of every run here (h sqrt(lambda_max(H_c)) = 0.64 on the stiffest client: stable)
H, FRICTION = 0.3, 1.0
LADDER = (1, 2, 5, 10)
SHIFTS = [[2.0, -1.0], [-1.0, 2.0], [0.5, 0.5]]
WEIGHTS = [0.3, 0.3, 0.4]


def _problem(kind: str) -> QuadraticProblem:
    """Three clients: "mixed" curvatures (tests/fahmc/test_local_bias.py's), the same with the optima five
    times as far apart ("far": the means' bias grows with the shifts), or one curvature for all ("equal": a
    round of K local steps is K centralised steps, no bias by the exact law)."""
    a = ([[[2.0, 0.5], [0.5, 1.0]]] * 3 if kind == "equal"
         else [[[4.0, 1.0], [1.0, 1.0]], [[1.0, -0.5], [-0.5, 3.0]], [[0.5, 0.0], [0.0, 0.5]]])
    shifts = torch.tensor(SHIFTS, dtype=torch.float64) * (5.0 if kind == "far" else 1.0)
    return QuadraticProblem(torch.tensor(a, dtype=torch.float64), shifts, torch.tensor(WEIGHTS, dtype=torch.float64))


def _exact_worst(problem, k: int) -> float:
    """FA-HMC's exact worst |mean shift| (K = 1 sds) or |sd ratio - 1| of K local steps at h against K = 1."""
    m1, c1 = stationary_moments(problem, [H], friction=FRICTION)
    mk, ck = stationary_moments(problem, [H] * k, friction=FRICTION)
    sd1 = np.sqrt(np.diag(c1)[:2])
    return float(max(np.abs((mk[:2] - m1[:2]) / sd1).max(), np.abs(np.sqrt(np.diag(ck)[:2]) / sd1 - 1).max()))


def _auto(kind: str, seed: int = 0, chains: int = 256, rounds: int = 2010, warmup: int = 2000, **kw):
    sampler = fl.FAHMC(_problem(kind), step_size=H, friction=FRICTION, local_steps=fl.AutoLocalSteps(LADDER),
                       chains=chains, seed=seed, **kw)
    return sampler, sampler.run(rounds, warmup=warmup, progress=False)


def _within_4_se(est, kind: str) -> bool:
    """The worst estimate within 4 jackknife standard errors (+1 % transient) of the exact worst value."""
    se = max(est.mean_shift_se + est.sd_ratio_se)
    return abs(est.worst - _exact_worst(_problem(kind), est.local_steps)) <= 4 * se + 0.01 * est.worst


def test_the_exact_laws_of_the_three_problems():
    """The premises: far apart, every K > 1 is beyond 0.1 (K = 2 by 0.18 sd); mixed, K = 2 is within
    (0.035) and K = 5 beyond (0.24); equal curvatures, nothing is biased."""
    far = [_exact_worst(_problem("far"), k) for k in LADDER[1:]]
    assert min(far) > 0.15 and far == sorted(far)
    assert _exact_worst(_problem("mixed"), 2) < 0.04 and _exact_worst(_problem("mixed"), 5) > 0.2
    assert max(_exact_worst(_problem("equal"), k) for k in LADDER[1:]) < 1e-12


def test_auto_keeps_k1_where_every_k_is_biased():
    """256 chains: K = 2 is called biased at its first look (its lower bound is above 0.1: exceeds), no
    larger K starts, and the run goes on with K = 1; the estimate is within 4 standard errors of the
    exact 0.18."""
    sampler, trace = _auto("far")
    bias = trace.local_step_bias
    assert isinstance(bias, hcheck.HMCLocalStepBias) and bias.auto and bias.measured and bias.companions
    assert sampler.local_steps == 1 and bias.local_steps == 1 and bias.choice.local_steps == 1
    assert trace.settings.local_steps == 1 and trace.settings.auto_local_steps
    assert [e.local_steps for e in bias.estimates] == [2] and "K = 2 biased" in bias.note
    assert exceeds(bias.estimates[0], 0.1, 0.95) and not any(ok for *_, ok in bias.choice.evidence)
    assert all(_within_4_se(est, "far") for est in bias.estimates)
    assert 0.0 < bias.stability < hcheck.STABLE and bias.decay > 1
    np.testing.assert_array_equal(np.diff(trace.draw_steps), 1)


def test_auto_takes_the_largest_k_within_the_tolerance():
    """Mixed curvatures: K = 2 (exact 0.035) is certified within 0.1, K = 5 (exact 0.24) is called
    biased; the run goes on with K = 2 and every estimate is within 4 standard errors of the exact law."""
    sampler, trace = _auto("mixed")
    bias = trace.local_step_bias
    assert sampler.local_steps == 2 and bias.choice.local_steps == 2
    assert [(k, ok) for k, _, _, ok in bias.choice.evidence] == [(2, True), (5, False)]
    assert "K = 5 biased" in bias.note and all(_within_4_se(est, "mixed") for est in bias.estimates)
    np.testing.assert_array_equal(np.diff(trace.draw_steps), 2)
    assert trace.draw_steps[-1] == sampler.state.step


def test_auto_takes_the_top_of_the_ladder_where_the_curvatures_are_equal():
    """No K is biased by the exact law: every K is within 0.1 at 95 % (upper bounds about 0.02), the run
    goes on with K = 10; steps and the ledger count what each round ran; a later run keeps the choice."""
    sampler, trace = _auto("equal")
    bias = trace.local_step_bias
    assert sampler.local_steps == 10 and trace.settings.local_steps == 10 and bias.choice.local_steps == 10
    assert all(ok and upper <= 0.1 for _, _, upper, ok in bias.choice.evidence)
    np.testing.assert_array_equal(np.diff(trace.draw_steps), 10)
    assert trace.draw_steps[-1] == sampler.state.step == sampler.ledger.steps
    assert sampler.ledger.rounds == 2010 and sampler.ledger.steps == 2000 + 10 * 10
    again = sampler.run(20, progress=False)
    assert sampler.local_steps == 10 and again.local_step_bias is bias and sampler.measurement is None
    assert np.diff(again.draw_steps).tolist() == [10] * 19


def test_auto_leaves_the_sampler_as_k1_does_and_counts_the_candidates():
    """The sampler's chains run K = 1 through the whole warm-up and the candidates draw from their own
    generator: where auto keeps K = 1 the draws are the bits of a K = 1 run with the same seed. Each
    candidate round sends 2 d floats (theta and v) per client up and 2 N d down (per chain, as the trace
    counts)."""
    kw = dict(step_size=H, friction=FRICTION, chains=32, seed=5)
    auto = fl.FAHMC(_problem("far"), local_steps=fl.AutoLocalSteps(LADDER), **kw)
    one = fl.FAHMC(_problem("far"), local_steps=1, **kw)
    a, b = auto.run(500, warmup=400, progress=False), one.run(500, warmup=400, progress=False)
    bias = a.local_step_bias
    assert auto.local_steps == 1 and bias.measured and torch.equal(a.samples, b.samples)
    # one candidate (K = 2) ran every round of the measurement (the warm-up's second half)
    assert [e.local_steps for e in bias.estimates] == [2] and bias.rounds == 200
    per_round = 2 * 3 * 2  # per chain: 2 d floats (theta, v) per client, N = 3, d = 2
    assert a.communication.floats_up - b.communication.floats_up == per_round * bias.rounds
    assert a.communication.floats_down - b.communication.floats_down == per_round * bias.rounds
    assert auto.ledger.rounds == one.ledger.rounds == 500


def test_auto_with_the_adaptive_warm_up():
    """The defaults (step_size="auto"): M, h and gamma adapt at K = 1 in the first half of the warm-up,
    the second half measures with them frozen; the record, the settings and the ArviZ attributes say what
    was chosen."""
    sampler = fl.FAHMC(_problem("equal"), local_steps="auto", chains=64, seed=1)
    trace = sampler.run(1200, progress=False)
    assert sampler.adapted and sampler.adapter is None and sampler.measurement is None
    bias = trace.local_step_bias
    assert bias.measured and bias.local_steps == sampler.local_steps == trace.settings.local_steps > 1
    assert bias.rounds <= 300  # the measurement took at most the second half of the 600-round warm-up
    posterior = trace.to_arviz().posterior
    assert posterior.attrs["local_steps"] == sampler.local_steps
    assert json.loads(posterior.attrs["local_step_bias"]) == json.loads(json.dumps(bias.record()))
    assert hcheck.HMCLocalStepBias.from_record(bias.record()) == bias


def test_auto_that_cannot_measure_warns_and_keeps_k1():
    """A warm-up too short to measure: K = 1 and a UserWarning naming the reason; an h at which K > 1
    local steps are not stable on some client (h sqrt(lambda_max(H_c)) = 2.1 >= 2): K = 1, silently."""
    with pytest.warns(UserWarning, match="local_steps='auto': the local-step bias was not measured .*too short"):
        sampler = fl.FAHMC(_problem("mixed"), step_size=H, local_steps="auto", chains=8, seed=0)
        trace = sampler.run(100, progress=False)
    assert sampler.local_steps == 1 and not trace.local_step_bias.measured
    stiffest = curvature_at(_problem("mixed"), torch.zeros(1, 2, dtype=torch.float64), None, 0, per_client=True)
    h = 2.1 / math.sqrt(stiffest)  # a quadratic's curvature is the same everywhere
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = fl.FAHMC(_problem("mixed"), step_size=h, local_steps="auto", chains=16, seed=0)
        trace = sampler.run(600, progress=False)
    assert [w for w in caught if "local" in str(w.message)] == [] and sampler.local_steps == 1
    bias = trace.local_step_bias
    assert not bias.measured and bias.stability == pytest.approx(2.1, rel=1e-3) and "not stable" in bias.note


def test_a_checkpoint_in_the_measurement_resumes_bit_for_bit(tmp_path, monkeypatch):
    """A process dies in round 300 of a 450-round run whose measurement takes rounds 200-400; resumed
    from the checkpoint of round 250 (the candidates and their velocities in progress), the run ends on
    the same draws, record, K, steps and ledger as without the stop."""
    kw = dict(step_size=H, friction=FRICTION, local_steps=fl.AutoLocalSteps(LADDER), chains=16, seed=3)
    whole = fl.FAHMC(_problem("equal"), **kw)
    reference = whole.run(450, warmup=400, progress=False)
    first = fl.FAHMC(_problem("equal"), **kw)
    monkeypatch.setattr(first._kernel, "step", dies_in_round(first._kernel.step, 300))
    with pytest.raises(KeyboardInterrupt):
        first.run(450, warmup=400, progress=False, checkpoint=tmp_path / "c", checkpoint_every=250)
    resumed = fl.FAHMC.resume(tmp_path / "c")
    assert resumed.unfinished["done"] == 250 and resumed.measurement.phase == "measure"
    assert resumed.companions is not None and resumed.companions.done == 50 and resumed.local_step_bias is None
    assert resumed.companions.momentum.shape[1:] == (16, 2)
    finishes_as(resumed, whole, reference)


def test_a_run_stopped_in_the_measurement_leaves_the_next_run_a_fresh_one():
    sampler = fl.FAHMC(_problem("equal"), step_size=H, local_steps=fl.AutoLocalSteps(LADDER), chains=16, seed=0)
    measures_afresh_after_a_stop(sampler)


def test_bad_values_are_refused_by_name_before_any_work():
    problem = _problem("equal")
    for value in ("fast", "AUTO", "", "10", 0, 2.5):
        with pytest.raises(ValueError, match="local_steps"):
            fl.FAHMC(problem, local_steps=value)
    with pytest.raises(ValueError, match="check_local_bias"):
        fl.FAHMC(problem, local_steps="auto", chains=4, check_local_bias=False)
    for kw in (dict(chains=1), dict(chains=4, step_size=lambda k: 0.3 / (1 + k))):
        with pytest.raises(ValueError, match="local_steps='auto'"):
            fl.FAHMC(problem, local_steps="auto", **kw)
    assert fl.FAHMC(problem, local_steps=fl.AutoLocalSteps((1, 3), tolerance=0.2), chains=2).local_steps == 1
