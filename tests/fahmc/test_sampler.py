"""FAHMC, the user-facing FA-HMC sampler (fedlangevin/fahmc/sampler.py): it samples through the
shared runner, counts its communication, refuses what is not built, checks every argument before
any work, and resumes from a checkpoint bit for bit, momentum included."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.runner.base import Runner
from fedlangevin.problems import QuadraticProblem
from tests.fahmc.test_kernel import THETA0, heterogeneous
from tests.stops import dies_in_round
from tests.targets import OpaqueProblem, small_problem_arrays

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MASS = [[0.6, 0.15], [0.15, 0.3]]


def test_fahmc_samples_the_posterior_through_the_runner():
    """K = 1 with full participation is centralised BAOAB on the global energy, whose theta
    marginal is exact on a Gaussian (tests/fahmc/test_exact.py): the last draws of R = 400
    independent chains after 24 time units (the slow mode's decay rate is gamma / 2 = 1) are R
    posterior draws, so each mean is within 4 sd / sqrt(R) and each variance ratio within
    4 sqrt(2 / R) of 1 (|z| < 4: a false failure has probability < 1e-3)."""
    problem = heterogeneous()
    mean, cov = problem.posterior(1.0)
    chains = 400
    sampler = fl.FAHMC(problem, 0.4, friction=2.0, chains=chains, init=THETA0, seed=3, preconditioner=MASS)
    trace = sampler.run(60, warmup=59)
    last = trace.samples[:, -1]
    z = (last.mean(0) - mean) / (cov.diagonal().sqrt() / math.sqrt(chains))
    assert bool((z.abs() < 4).all()), z
    ratio = last.var(0) / cov.diagonal()
    assert bool(((ratio - 1).abs() < 4 * math.sqrt(2 / chains)).all()), ratio
    assert trace.settings.sampler == "FA-HMC" and trace.settings.preconditioner.startswith("FactorPreconditioner")
    assert sampler.state.momentum.shape == (chains, 2)


def test_communication_counts_theta_and_momentum_both_ways():
    """2 d floats per upload and 2 d per client down every round; scheme II: S uploads a round;
    the preconditioner is broadcast once (a triangular factor: d (d + 1) / 2 floats per client). The
    sampler's own floats: check_local_bias=False (its companions' floats: tests/fahmc/test_local_bias.py)."""
    problem = heterogeneous(balanced=True)
    sampler = fl.FAHMC(problem, 0.2, local_steps=3, participation=fl.SchemeII(2), chains=4, seed=0, preconditioner=MASS,
                       check_local_bias=False)
    trace = sampler.run(10)
    com = trace.communication
    d, n = problem.dim, problem.num_clients
    assert (com.rounds, com.uploads) == (10, 20.0)
    assert com.floats_up == 20 * 2 * d and com.floats_down == 10 * n * 2 * d
    assert sampler.ledger["steps"] == 30
    assert sampler.communication.floats_down == 10 * n * 2 * d + n * d * (d + 1) // 2
    with pytest.raises(ValueError, match="FA-HMC run clipped nothing"):
        trace.privacy(delta=1e-5, sensitivity=1.0)            # only a private FA-HMC run is accounted


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_checkpoint_kill_resume_is_bit_identical_momentum_included(tmp_path, splitting):
    """A run killed in round 27 resumes from its round-20 checkpoint and ends on the same draws,
    momentum, generator and ledger as an uninterrupted run (scheme I draws, rho = 0.5, a preconditioner)."""
    args = dict(friction=0.7, local_steps=3, correlation=0.5, participation=fl.SchemeI(2), chains=6, seed=11, preconditioner=MASS,
                splitting=splitting)
    problem = heterogeneous()
    whole = fl.FAHMC(problem, 0.2, **args)
    whole_trace = whole.run(40, warmup=5, thin=2)
    sampler = fl.FAHMC(problem, 0.2, **args)
    sampler.kernel.step = dies_in_round(sampler.kernel.step, 27)  # the process dies in round 27
    with pytest.raises(KeyboardInterrupt):
        sampler.run(40, warmup=5, thin=2, checkpoint=tmp_path / "run.ckpt", checkpoint_every=10)
    resumed = fl.FAHMC.resume(tmp_path / "run.ckpt")
    assert isinstance(resumed, fl.FAHMC) and resumed.unfinished["done"] == 20 and resumed.state.round == 20
    assert (resumed.friction, resumed.splitting, resumed.correlation) == (0.7, splitting, 0.5)
    trace = resumed.run()
    assert torch.equal(trace.samples, whole_trace.samples) and (trace.draw_rounds == whole_trace.draw_rounds).all()
    assert torch.equal(resumed.state.theta, whole.state.theta)
    assert torch.equal(resumed.state.momentum, whole.state.momentum)
    assert torch.equal(resumed.generator.get_state(), whole.generator.get_state())
    assert resumed.ledger == whole.ledger and resumed.settings == whole.settings
    more, again = resumed.run(5), whole.run(5)                 # and it goes on as the uninterrupted one
    assert torch.equal(more.samples, again.samples)


def test_a_map_start_is_counted_and_a_run_from_it_resumes_bit_for_bit(tmp_path):
    """init="map": every chain starts at the MAP of FA-LD's mode search (here the posterior mean, to the
    search's tolerance), whose rounds and floats are in the ledger; a checkpoint of the run resumes with
    them and ends on the same draws as an uninterrupted run (the search is not run again)."""
    problem = heterogeneous()
    args = dict(friction=0.7, participation=fl.SchemeI(2), chains=4, seed=2, init="map")
    whole = fl.FAHMC(problem, 0.2, **args)
    search = whole.map_result
    torch.testing.assert_close(search.theta, problem.posterior(1.0)[0].double(), rtol=0, atol=1e-6)
    # scheme I's default correction (control variates at the MAP: no second search) adds each client's
    # gradient there, N d floats up
    assert whole.correction is not None and whole.ledger["correction_rounds"] == 0
    n_d = problem.num_clients * problem.dim
    assert whole.ledger["map_rounds"] == search.rounds and whole.ledger["setup_floats_up"] == search.floats_up + n_d
    torch.testing.assert_close(whole.state.theta, search.theta.expand(4, -1).to(whole.state.theta))
    whole_trace = whole.run(20)
    sampler = fl.FAHMC(problem, 0.2, **args)
    sampler.run(10, checkpoint=tmp_path / "map.ckpt")
    resumed = fl.FAHMC.resume(tmp_path / "map.ckpt")
    assert resumed.map_result is None and resumed.ledger["map_rounds"] == search.rounds
    assert resumed.correction == whole.correction and torch.equal(resumed.centred.reference, whole.centred.reference)
    trace = resumed.run(10)
    assert torch.equal(trace.samples, whole_trace.samples[:, 10:])


def test_resume_needs_what_a_checkpoint_cannot_store_and_refuses_other_samplers(tmp_path):
    problem = OpaqueProblem(heterogeneous())                  # a problem class of your own: not stored
    fl.FAHMC(problem, 0.2, chains=2, seed=0).run(3, checkpoint=tmp_path / "own.ckpt")
    with pytest.raises(ValueError, match="pass it again"):
        fl.FAHMC.resume(tmp_path / "own.ckpt")
    resumed = fl.FAHMC.resume(tmp_path / "own.ckpt", problem=problem)
    assert resumed.state.round == 3
    fl.FALD(heterogeneous(), step_size=0.01, seed=0).run(2, checkpoint=tmp_path / "fald.ckpt")
    with pytest.raises(fl.CheckpointError, match="not a checkpoint of a Runner"):
        fl.FAHMC.resume(tmp_path / "fald.ckpt")
    from tests.runner.test_base import BAOAB

    Runner(BAOAB(heterogeneous()), heterogeneous(), 0.02, seed=0).run(2, checkpoint=tmp_path / "baoab.ckpt")
    with pytest.raises(fl.CheckpointError, match="not a checkpoint of FA-HMC"):
        fl.FAHMC.resume(tmp_path / "baoab.ckpt")


def test_a_diverged_chain_is_dropped_with_its_momentum_row():
    problem = heterogeneous()
    init = torch.zeros(3, 2, dtype=torch.float64)
    init[1] = 1e308                                           # this chain's force overflows in the first step
    sampler = fl.FAHMC(problem, 0.2, chains=3, init=init, seed=0)
    with pytest.warns(RuntimeWarning, match=r"FA-HMC: chain\(s\) \[1\] diverged"):
        trace = sampler.run(10, on_divergence="drop")
    assert list(trace.chain_ids) == [0, 2] and sampler.state.momentum.shape == (2, 2)
    assert bool(torch.isfinite(trace.samples).all())


def test_a_nan_gradient_is_named_as_the_cause_not_the_step_size():
    """The problem's gradient is NaN at every theta with a coordinate above 0.5 (chain 1 starts there):
    the error says the gradient was NaN at finite, moderate parameters, not that the step size was too large."""
    class NaNAbove(type(heterogeneous())):
        def grad(self, theta, *, batch_size=None, generator=None):
            g = super().grad(theta, batch_size=batch_size, generator=generator)
            return torch.where((theta > 0.5).any(-1, keepdim=True), torch.full_like(g, math.nan), g)

    problem = heterogeneous()
    problem.__class__ = NaNAbove
    init = torch.zeros(2, 2, dtype=torch.float64)
    init[1] = 1.0
    with pytest.raises(fl.DivergenceError) as err:
        fl.FAHMC(problem, 0.01, chains=2, init=init, seed=0).run(3)
    message = str(err.value)
    assert "gradient was NaN/inf at finite, moderate parameters" in message and "chain(s) [1]" in message
    assert "smaller step_size" not in message
    assert err.value.causes == {1: "gradient"}


class Counting(QuadraticProblem):
    """Counts gradient evaluations: a refused argument must come before any."""

    def grad(self, theta, *, batch_size=None, generator=None):
        Counting.calls += 1
        return super().grad(theta, batch_size=batch_size, generator=generator)

    def to(self, device=None, dtype=None):
        return self


def _counting() -> Counting:
    h, b, p = small_problem_arrays()
    Counting.calls = 0
    return Counting(torch.tensor(h), torch.tensor(b), torch.tensor(p))


def test_the_counting_problem_sees_the_work_of_a_valid_sampler():
    """The control of the two tests below: a valid sampler probes the gradient (once, when its
    kernel is built), so a refusal with no call came before any work."""
    fl.FAHMC(_counting(), 0.1, friction=1.0)
    assert Counting.calls == 1


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), math.inf, -math.inf, "1", True, None, [1.0], 1j])
def test_bad_friction_is_refused_by_name_before_any_work(value):
    problem = _counting()
    with pytest.raises(ValueError, match="friction"):
        fl.FAHMC(problem, 0.1, friction=value)
    assert Counting.calls == 0


class _NoStream:
    """A transport with exact = False but no private_stream (the contract's extra check)."""

    clients, exact = None, False

    def reduce(self, partial):
        return partial


@pytest.mark.parametrize("kwargs,match", [
    (dict(step_size="auto", local_steps=2), r"step_size='auto' needs local_steps=1 or 'auto' \(got local_steps=2\)"),
    (dict(adapt=True), "adapt=True adapts M in the warm-up of step_size='auto'"),
    (dict(adapt="yes"), "adapt"),
    (dict(friction="fast"), "friction"),
    (dict(step_size="Auto"), "step_size must be 'auto', a number"),
    (dict(step_size="paper"), "not a rule for FA-HMC"),
    (dict(step_size=-0.1), "step_size"),
    (dict(step_size=float("nan")), "step_size"),
    (dict(correction="conducive"), "correction: FA-HMC runs control variates"),
    (dict(privacy=object()), "privacy must be fedlangevin.privacy.RecordLevel"),
    (dict(init="mode"), "init must be an array .* or 'map'; got 'mode'"),
    (dict(preconditioner=[[1.0, 2.0], [0.0, 1.0]]), "preconditioner"),
    (dict(preconditioner=[1.0, 0.0]), "preconditioner"),
    (dict(preconditioner=torch.eye(3)), "preconditioner"),
    (dict(splitting="leapfrog"), "splitting"),
    (dict(local_steps=0), "local_steps"),
    (dict(chains=True), "chains"),
    (dict(correlation=-0.1), "correlation"),
    (dict(temperature="1"), "temperature"),
    (dict(participation=fl.SchemeII(1)), r"SchemeII\(1\) on unequal client weights: with S = 1 .* Use SchemeI\(1\)"),
    (dict(participation=fl.SchemeII(2, noise="paper")), r"noise='paper' is the paper's scheme II, .* Use SchemeI\(2\)"),
    (dict(batch_size=2), "batch_size"),
    (dict(init=[1.0, 2.0, 3.0]), "init"),
    (dict(seed=-1), "seed"),
    (dict(transport=object()), r"transport: object does not implement the transport contract .*missing reduce"),
    (dict(transport=_NoStream()), "transport: _NoStream .* exact = False must have private_stream"),
])
def test_other_bad_arguments_are_refused_by_name_before_any_work(kwargs, match):
    kwargs = {"step_size": 0.1, **kwargs}
    problem = _counting()
    with pytest.raises(ValueError, match=match):
        fl.FAHMC(problem, **kwargs)
    assert Counting.calls == 0


def test_a_step_size_schedule_runs_and_is_recorded():
    """A sequence (one value per local step) and a callable k -> h_k, as FALD's."""
    problem = heterogeneous()
    sampler = fl.FAHMC(problem, [0.1, 0.2, 0.1, 0.2], local_steps=2, chains=2, seed=0)
    trace = sampler.run(2)
    np.testing.assert_allclose(np.asarray(trace.step_sizes), [0.1, 0.2, 0.1, 0.2])
    assert fl.FAHMC(problem, lambda k: 0.1 / (1 + k), chains=2, seed=0).run(3).num_draws == 3
