"""The companion chains of a fixed K's check (fedlangevin.warmup.companions): their law against
FA-LD's exact K = 1 law on a Gaussian (fedlangevin.experiments.exact), and checkpoints mid-measurement."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.experiments.exact import stationary_moments
from fedlangevin.warmup import companions
from fedlangevin.problems import QuadraticProblem

from tests.stops import resumed_from_prev

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHIFTS = [[2.0, -1.0], [-1.0, 2.0], [0.5, 0.5]]
WEIGHTS = [0.3, 0.3, 0.4]


def _heterogeneous() -> QuadraticProblem:
    """Three clients with different (non-diagonal) curvatures (tests/warmup/test_local_bias.py's)."""
    a = [[[4.0, 1.0], [1.0, 1.0]], [[1.0, -0.5], [-0.5, 3.0]], [[0.5, 0.0], [0.0, 0.5]]]
    return QuadraticProblem(torch.tensor(a, dtype=torch.float64), torch.tensor(SHIFTS, dtype=torch.float64),
                            torch.tensor(WEIGHTS, dtype=torch.float64))


def test_the_companions_have_the_exact_k1_law_at_step_k_eta():
    """K = 5 at eta = 0.05 (companion step 0.25, K eta lambda_max(H) about 0.5): after 1,000 rounds of 128
    chains the companions' kept iterates have the mean and sds of FA-LD's exact K = 1 law at step
    0.25, within 4 standard errors (from the 128 chain means / chain variances across chains)."""
    k, eta, chains = 5, 0.05, 128
    problem = _heterogeneous()
    sampler = fl.FALD(problem, step_size=eta, local_steps=k, chains=chains, seed=4)
    sampler.run(1000, warmup=100, progress=False)
    phase = sampler.companions
    kept = phase.kept[1]  # the companions' kept rounds (class 0: the sampler's chains)
    assert phase is not None and kept >= 1000 - 2 * companions.PILOT and phase.stability <= 1.0
    mean_c = phase.sums[1] / kept + phase.shift  # (R, d) per-chain means
    var_c = phase.squares[1] / kept - (phase.sums[1] / kept) ** 2  # per-chain variances
    m1, c1 = stationary_moments(problem, [k * eta])
    mean_se = mean_c.std(0) / chains ** 0.5
    assert torch.all((mean_c.mean(0) - torch.tensor(m1)).abs() <= 4 * mean_se)
    # the pooled variance: mean of chain variances + variance of chain means (about the grand mean)
    var = var_c.mean(0) + mean_c.var(0, unbiased=False)
    # its standard error: the chain variances' mean, sd / sqrt(R); the chain means' spread s^2, about
    # s^2 sqrt(2 / R) (a chi-square's), bounded by 2 s^2 / sqrt(R)
    var_se = var_c.std(0) / chains ** 0.5 + 2 * mean_c.std(0) ** 2 / chains ** 0.5
    assert torch.all((var - torch.tensor(np.diag(c1))).abs() <= 4 * var_se)
    # and they are not the K chains' law: K = 5's exact mean differs by several standard errors
    mk, _ = stationary_moments(problem, [eta] * k)
    assert np.abs(mk - m1).max() > 8 * float(mean_se.max())


def test_a_checkpoint_mid_measurement_resumes_bit_for_bit(tmp_path):
    """Checkpoints every 150 rounds of a 400-round run whose companions run from round 1: the one at
    round 150 (c.prev, as if the process died after it) holds the companions (iterates, generator,
    sums); resumed, the run ends on the same draws, the same companions' state, record and ledger."""
    kw = dict(step_size=0.02, local_steps=10, chains=16, seed=3)
    whole, reference, resumed = resumed_from_prev(fl.FALD, _heterogeneous(), kw, 400, 50, 150, tmp_path / "c")
    assert resumed.unfinished["done"] == 300 and resumed.companions is not None
    assert resumed.companions.done == 300 and min(resumed.companions.kept) > 0
    trace = resumed.run()
    assert torch.equal(trace.samples, reference.samples)
    for name in ("theta", "generator", "sums", "squares", "shift"):
        assert torch.equal(getattr(resumed.companions, name).cpu(), getattr(whole.companions, name).cpu()), name
    assert trace.local_step_bias == reference.local_step_bias and trace.local_step_bias.measured
    assert dict(resumed.ledger) == dict(whole.ledger)
    assert trace.communication == reference.communication


def test_dropped_chains_end_the_companions_with_a_note():
    """on_divergence='drop' leaves fewer sampler chains than companions: the check ends, saying why."""
    sampler = fl.FALD(_heterogeneous(), step_size=0.02, local_steps=10, chains=8, seed=0)
    sampler.run(60, progress=False)
    assert sampler.companions is not None
    sampler.state = type(sampler.state)(theta=sampler.state.theta[:6].clone(), step=sampler.state.step,
                                        round=sampler.state.round, correction=None)
    sampler.active = sampler.active[:6]
    trace = sampler.run(5, progress=False)
    assert sampler.companions is None and not trace.local_step_bias.measured
    assert "dropped" in trace.local_step_bias.note


def test_coupled_companions_measure_the_same_shift_with_a_fraction_of_the_error():
    """The companions take the sampler's round noise (one step of K eta with the sum of its K steps'
    normals, two of K eta / 2 with its halves: :class:`~fedlangevin.federation.noise.NoiseTally`) and
    participation: their laws are unchanged, so the estimate is within 4 standard errors of the exact
    shift (K = 5 at eta = 0.05, exact law), while the chains move together and the standard error
    falls. Measured over seeds 0-2 (32 chains, 350 kept rounds): coupled (with the extrapolation) /
    independent standard errors 0.14-0.25 per coordinate; the test asks for at most 0.35."""
    k, eta = 5, 0.05
    m1, c1 = stationary_moments(_heterogeneous(), [k * eta])
    _, c2 = stationary_moments(_heterogeneous(), [k * eta / 2])
    mk, _ = stationary_moments(_heterogeneous(), [eta] * k)
    # independent companions: against K = 1 at K eta, in its sds; coupled: against the extrapolation to
    # step 0 (a Gaussian's K = 1 mean is the posterior's at any step), in the sds extrapolated alike
    exact = {False: (mk - m1) / np.sqrt(np.diag(c1)), True: (mk - m1) / np.sqrt(2 * np.diag(c2) - np.diag(c1))}
    found, stability = {}, None
    for coupled in (True, False):
        sampler = fl.FALD(_heterogeneous(), step_size=eta, local_steps=k, chains=32, seed=0)
        if not coupled:  # one group on its own noise: the companions a checkpoint from before the coupling holds
            own = torch.Generator().manual_seed(companions.seed_of(0))
            sampler.companions = companions.Companions((k,), eta, stability, sampler.state.theta.clone()[None],
                                                       own.get_state())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the shift is 0.078 < 0.1: no warning either way
            trace = sampler.run(400, warmup=50, progress=False)
        stability = trace.local_step_bias.stability
        bias = trace.local_step_bias
        assert bias.measured and (("coupled to the sampler's rounds" in bias.note) == coupled)
        (est,) = bias.estimates
        found[coupled] = np.array(est.mean_shift), np.array(est.mean_shift_se)
        assert np.all(np.abs(found[coupled][0] - exact[coupled]) <= 4 * found[coupled][1])
    assert np.all(found[True][1] <= 0.35 * found[False][1])


def _checked_run(problem, chunked: bool, **kw):
    """A 260-round run with the check (companions from round 1, verdict measured) whose sampler's
    rounds run in chunks (the small affine kernel's ``rounds``) or, ``chunked=False``, one by one
    (the same kernel's step without its ``rounds`` attribute)."""
    sampler = fl.FALD(problem, **kw)
    if not chunked:
        raw = sampler._kernel.step
        sampler._kernel = sampler._kernel._replace(step=lambda *a, **k: raw(*a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = sampler.run(130, progress=False)
        second = sampler.run(130, progress=False)
    return sampler, first, second


@pytest.mark.parametrize("clients, tally_rounds", [(1, None), (3, None), (3, 7)])
def test_the_check_is_the_same_with_the_sampler_s_rounds_in_chunks(clients, tally_rounds, monkeypatch):
    """The sampler's rounds run in chunks while the companions observe them (each round's noise tally
    taken in the chunk, the companions advanced round by round after it): the draws, the companions'
    state, the verdict and the ledger are bit for bit those of the round-by-round run (N = 1 and 3
    clients: the kernel's two paths through its rounds; chunks of 130 rounds, or of 7 where the
    tallies' bound says so, ending anywhere in the pilot and the burn-in)."""
    from fedlangevin.runner import loop

    if tally_rounds is not None:  # 12 chains x 3 clients x d = 2, two stretches of normals a round
        monkeypatch.setattr(loop, "TALLY_NUMBERS", tally_rounds * 2 * 12 * clients * 2)
    problem = _heterogeneous() if clients == 3 else QuadraticProblem(
        torch.tensor([[[2.0, 0.5], [0.5, 1.0]]], dtype=torch.float64), torch.tensor([[1.0, -1.0]], dtype=torch.float64),
        torch.tensor([1.0], dtype=torch.float64))
    kw = dict(step_size=0.02, local_steps=6, chains=12, seed=5)
    assert getattr(fl.FALD(problem, **kw)._kernel, "rounds", None) is not None  # the chunked path is there
    a, a1, a2 = _checked_run(problem, True, **kw)
    b, b1, b2 = _checked_run(problem, False, **kw)
    assert torch.equal(a1.samples, b1.samples) and torch.equal(a2.samples, b2.samples)
    for name in ("theta", "generator", "sums", "squares", "shift"):
        assert torch.equal(getattr(a.companions, name).cpu(), getattr(b.companions, name).cpu()), name
    assert a2.local_step_bias == b2.local_step_bias and a2.local_step_bias.measured
    assert dict(a.ledger) == dict(b.ledger) and a2.communication == b2.communication


def test_the_phase_copy_is_dataclasses_replace():
    """The companions' per-round copy of their phase gives the object dataclasses.replace gives, and
    refuses a name that is not a field."""
    import dataclasses

    phase = companions.Companions((4, 4), 0.1, 0.5, torch.zeros(2, 3, 2), torch.zeros(8, dtype=torch.uint8),
                                  roles=(companions.WHOLE, companions.HALVES))
    theta = torch.ones(2, 3, 2)
    fast = companions._with(phase, theta=theta, done=7, kept=(1, 2, 3))
    assert fast == dataclasses.replace(phase, theta=theta, done=7, kept=(1, 2, 3)) and type(fast) is type(phase)
    assert phase.done == 0 and phase.theta is not theta  # the original is untouched
    with pytest.raises(TypeError, match="no field"):
        companions._with(phase, thetas=theta)
