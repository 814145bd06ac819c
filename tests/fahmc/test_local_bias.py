"""FA-HMC's check of a fixed K > 1 (fedlangevin.fahmc.local_bias): K = 1 companion chains at the same h,
against FA-HMC's exact stationary law on Gaussians (fedlangevin.fahmc.exact); the sampler's chains
unchanged; checkpoints mid-measurement; where it does not run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.fahmc import local_bias as hcheck
from fedlangevin.fahmc.exact import stationary_moments
from fedlangevin.federation.extensions import LocalTransport
from fedlangevin.warmup.companions import MIN_KEPT, PILOT
from fedlangevin.problems import QuadraticProblem

from tests.stops import dies_in_round

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHIFTS = [[2.0, -1.0], [-1.0, 2.0], [0.5, 0.5]]
WEIGHTS = [0.3, 0.3, 0.4]
#: h, K and the friction of the known-biased run (FA-HMC's step: h sqrt(lambda_max(H)) = 0.40, stable)
H, K, FRICTION = 0.3, 5, 1.0


def _problem(equal: bool = False) -> QuadraticProblem:
    """Three clients with different (non-diagonal) curvatures (tests/warmup/test_companions.py's), or
    with one curvature for all (``equal``: then a round of K local steps is K centralised steps, no bias)."""
    a = ([[[2.0, 0.5], [0.5, 1.0]]] * 3 if equal
         else [[[4.0, 1.0], [1.0, 1.0]], [[1.0, -0.5], [-0.5, 3.0]], [[0.5, 0.0], [0.0, 0.5]]])
    return QuadraticProblem(torch.tensor(a, dtype=torch.float64), torch.tensor(SHIFTS, dtype=torch.float64),
                            torch.tensor(WEIGHTS, dtype=torch.float64))


def _exact(problem) -> tuple[np.ndarray, np.ndarray]:
    """FA-HMC's exact mean shift of K = K at h against K = 1 at h, in K = 1 sds, and sd ratio (theta's d)."""
    m1, c1 = stationary_moments(problem, [H], friction=FRICTION)
    mk, ck = stationary_moments(problem, [H] * K, friction=FRICTION)
    sd1 = np.sqrt(np.diag(c1)[:2])
    return (mk[:2] - m1[:2]) / sd1, np.sqrt(np.diag(ck)[:2]) / sd1


def _bias_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "local-step bias" in str(w.message)]


def _sampler(problem, **kw) -> fl.FAHMC:
    return fl.FAHMC(problem, step_size=H, friction=FRICTION, local_steps=K, **{"chains": 64, "seed": 0, **kw})


def test_a_biased_fixed_k_warns_near_the_exact_bias_and_equal_curvatures_do_not():
    """K = 5 at h = 0.3, 64 chains, 400 rounds. Heterogeneous curvatures: FA-HMC's exact law moves the
    means by (+0.063, -0.242) K = 1 sds and widens the sds by 1.144 and 1.096; the warning names the
    number, the tolerance and the remedies, and every estimate (2 mean shifts, 2 sd ratios) is within
    4 jackknife standard errors of the exact value (a two-sided t_63 beyond 4 has probability 2e-4:
    about 1e-3 over the four). Equal curvatures: exact shift 0 and ratio 1 (a round is K centralised
    steps): no warning, and the estimates are within 4 standard errors of 0 and 1."""
    shift, ratio = _exact(_problem())
    assert np.allclose(shift, [0.0632, -0.2420], atol=1e-3) and np.allclose(ratio, [1.1438, 1.0957], atol=1e-3)
    with pytest.warns(UserWarning, match=r"FA-HMC local_steps=5: the local-step bias measured against K = 1 "
                                         r"companion chains \(FA-HMC at the same h\) is 0\.\d+ posterior sd .*"
                                         r"tolerance 0\.1") as caught:
        sampler = _sampler(_problem())
        trace = sampler.run(400, warmup=100, progress=False)
    (message,) = _bias_warnings(caught)
    for remedy in ("smaller K", "K = 1 with FA-HMC's warm-up (step_size='auto'", "check_local_bias=False"):
        assert remedy in message
    bias = trace.local_step_bias
    assert isinstance(bias, hcheck.HMCLocalStepBias) and bias.exceeds and bias.measured and bias.companions
    (est,) = bias.estimates
    assert np.all(np.abs(np.array(est.mean_shift) - shift) <= 4 * np.array(est.mean_shift_se))
    assert np.all(np.abs(np.array(est.sd_ratio) - ratio) <= 4 * np.array(est.sd_ratio_se))
    assert 0 < bias.stability < hcheck.STABLE and bias.rounds == 400 and est.kept == (400 - PILOT,) * 2
    assert sampler.local_steps == K and np.all(np.diff(trace.draw_steps) == K)

    shift, ratio = _exact(_problem(equal=True))
    assert np.abs(shift).max() < 1e-10 and np.abs(ratio - 1).max() < 1e-10
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = _sampler(_problem(equal=True)).run(400, warmup=100, progress=False)
    assert _bias_warnings(caught) == []
    bias = trace.local_step_bias
    assert bias.measured and not bias.exceeds
    (est,) = bias.estimates
    assert np.all(np.abs(est.mean_shift) <= 4 * np.array(est.mean_shift_se))
    assert np.all(np.abs(np.array(est.sd_ratio) - 1) <= 4 * np.array(est.sd_ratio_se))


@pytest.mark.filterwarnings("ignore:SchemeII assumes balanced")  # its law is not what this test is about
def test_the_chains_draw_the_same_numbers_with_the_check_on_and_off():
    """The sampler's draws, velocities, generator, step sizes, rounds and steps are the same bits with the
    check on and off (the companions have their own generator); the companions' floats are counted:
    2 d up per upload (scheme II: S = 2 uploads a round, drawn from their own stream) and 2 d down per client,
    per round, as the sampler's own."""
    runs = {}
    for check in (True, False):
        sampler = _sampler(_problem(), chains=8, participation=fl.SchemeII(2, allow_unbalanced=True), correlation=0.5, check_local_bias=check)
        runs[check] = (sampler, sampler.run(120, warmup=20, progress=False))
    (on, with_check), (off, without) = runs[True], runs[False]
    assert torch.equal(with_check.samples, without.samples)
    assert torch.equal(on.state.theta, off.state.theta) and torch.equal(on.state.momentum, off.state.momentum)
    assert torch.equal(on.generator.get_state(), off.generator.get_state())
    assert np.array_equal(np.asarray(with_check.step_sizes), np.asarray(without.step_sizes))
    assert on.ledger["rounds"] == off.ledger["rounds"] == 120 and on.ledger["steps"] == off.ledger["steps"] == 600
    assert without.local_step_bias is None and off.companions is None and on.companions.done == 120
    assert with_check.settings.check_local_bias and not without.settings.check_local_bias
    d, n = 2, 3
    more_up = with_check.communication.floats_up - without.communication.floats_up
    more_down = with_check.communication.floats_down - without.communication.floats_down
    assert more_up == 120 * 2 * 2 * d and more_down == 120 * n * 2 * d
    assert without.communication.floats_up == 120 * 2 * 2 * d  # the sampler's own: the same


@pytest.mark.filterwarnings("ignore:FA-HMC local_steps=5")  # the biased problem's warning (the first test's)
def test_a_checkpoint_mid_measurement_resumes_bit_for_bit(tmp_path):
    """A 300-round run checkpointed every 100 rounds dies in round 170: its round-100 checkpoint (plain values,
    read weights-only) holds the companions in their kept rounds (iterates, velocities, generator, sums);
    resumed, the run ends on the same draws, companions, record, ledger and communication as an
    uninterrupted run."""
    whole = _sampler(_problem(), chains=16, seed=3)
    reference = whole.run(300, warmup=50, progress=False)
    sampler = _sampler(_problem(), chains=16, seed=3)
    sampler.kernel.step = dies_in_round(sampler.kernel.step, 170)  # the process dies in round 170
    with pytest.raises(KeyboardInterrupt):
        sampler.run(300, warmup=50, progress=False, checkpoint=tmp_path / "c", checkpoint_every=100)
    resumed = fl.FAHMC.resume(tmp_path / "c")
    assert resumed.unfinished["done"] == 100 and resumed.companions is not None
    assert resumed.companions.done == 100 and resumed.companions.kept == (100 - PILOT,) * 2 and resumed.check_local_bias
    trace = resumed.run()
    assert torch.equal(trace.samples, reference.samples)
    assert torch.equal(resumed.state.momentum, whole.state.momentum)
    for name in ("theta", "momentum", "generator", "sums", "squares", "shift"):
        assert torch.equal(getattr(resumed.companions, name).cpu(), getattr(whole.companions, name).cpu()), name
    assert trace.local_step_bias == reference.local_step_bias and trace.local_step_bias.measured
    assert dict(resumed.ledger) == dict(whole.ledger) and trace.communication == reference.communication
    more, again = resumed.run(60, progress=False), whole.run(60, progress=False)  # the companions go on
    assert torch.equal(more.samples, again.samples) and more.local_step_bias == again.local_step_bias
    assert more.local_step_bias.estimates[0].kept == (360 - PILOT,) * 2


def test_the_check_is_off_or_says_why_where_it_cannot_measure():
    """No companions and no warning: check_local_bias=False or K = 1 (no record); one chain, a transport,
    a step size that varies with the step (a note saying why, the draws those of the check off). Too
    few rounds kept: the record says how many the verdict needs, and the next run gives it."""
    problem = _problem()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _sampler(problem, check_local_bias=False).run(60, progress=False).local_step_bias is None
        assert fl.FAHMC(problem, step_size=H, chains=8, seed=0).run(60, progress=False).local_step_bias is None
        notes = {
            "chains=1": _sampler(problem, chains=1).run(60, progress=False),
            "a transport": _sampler(problem, chains=4, transport=LocalTransport()).run(60, progress=False),
            "varies with the step": fl.FAHMC(problem, step_size=fl.Polynomial(H, gamma=0.1), friction=FRICTION, local_steps=2, chains=4,
                                             seed=0).run(60, progress=False),
        }
        short = _sampler(problem, chains=8)
        first = short.run(PILOT + 20, progress=False)
    assert _bias_warnings(caught) == []
    for why, trace in notes.items():
        bias = trace.local_step_bias
        assert not bias.measured and why in bias.note and bias.rounds == 0, why
    plain = fl.FAHMC(problem, step_size=fl.Polynomial(H, gamma=0.1), friction=FRICTION, local_steps=2, chains=4, seed=0,
                     check_local_bias=False).run(60, progress=False)
    assert torch.equal(plain.samples, notes["varies with the step"].samples)
    bias = first.local_step_bias  # a pilot of 50 rounds, 20 kept
    assert not bias.measured and bias.rounds == PILOT + 20 and f"needs {MIN_KEPT}" in bias.note
    later = short.run(40, progress=False)
    assert later.local_step_bias.measured and later.local_step_bias.estimates[0].kept == (60, 60)


@pytest.mark.parametrize("value", ["no", 1, None, "False"])
def test_a_bad_check_local_bias_is_refused_by_name_before_any_work(value):
    """check_local_bias must be a bool: anything else is a ValueError naming it, before the gradient
    is ever evaluated (the problem below refuses to be evaluated)."""

    class Untouchable(QuadraticProblem):
        def grad(self, *args, **kwargs):
            raise AssertionError("the problem was evaluated before the argument was checked")

    base = _problem()
    problem = Untouchable(base.hessians, base.shifts, base.weights)
    with pytest.raises(ValueError, match="check_local_bias"):
        fl.FAHMC(problem, step_size=H, local_steps=K, chains=4, check_local_bias=value)
