"""Divergence: the error names round, step and chains and keeps the draws; or drop the diverged chains."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.problems import QuadraticProblem


class _Band(QuadraticProblem):
    """f^c = (theta - 10)^2 / 2 for both clients, but the gradient is NaN for 4 < theta < 6.

    With eta = 0.1 and a negligible temperature the chains follow the deterministic
    recursion theta_k = 10 + (theta_0 - 10) 0.9^k: from theta_0 = 0 the chain enters the band
    at k = 5 (theta_5 = 4.095), so step 6 produces NaN; from 4.5 step 1 does; from -1000 it
    enters at k = 49 (theta_49 = 4.216, theta_48 = 3.57), so step 50 does; from 20 or 100 the
    chain never enters the band. No quadratic() fast path: the generic gradient is used.
    """

    def quadratic(self):
        return None

    def grad(self, theta, *, batch_size=None, generator=None):
        g = theta - self.shifts[None, :, :] / self.hessians[0, 0]
        band = (theta > 4) & (theta < 6)
        return torch.where(band, torch.full_like(g, float("nan")), g)


INIT = [0.0, 4.5, -1000.0, 20.0, 100.0]
# chain -> (round, step) of its first non-finite parameters with local_steps = 3
EXPECTED_DROPS = {0: (2, 6), 1: (1, 1), 2: (17, 50)}


def band_problem():
    problem = _Band(hessians=[[1.0]], shifts=[[10.0], [10.0]], weights=[0.5, 0.5])
    return problem, torch.tensor(INIT, dtype=torch.float64)[:, None]


def _band_sampler(**kw):
    problem, init = band_problem()
    args = dict(step_size=0.1, local_steps=3, temperature=1e-30, chains=len(INIT), init=init, seed=0)
    args.update(kw)
    return fl.FALD(problem, **args)


def test_exploding_step_size_raises_with_round_step_chains_and_the_earlier_draws_intact(tmp_path):
    problem = fl.problems.GaussianSimulation(num_clients=5, samples_per_client=10, seed=0)
    kw = dict(step_size=10.0 / problem.smoothness, local_steps=4, chains=3, seed=0)  # eta far above 2 / L
    sampler = fl.FALD(problem, **kw)
    with pytest.raises(fl.DivergenceError) as info:
        sampler.run(2000, store=tmp_path / "s", checkpoint=tmp_path / "c", checkpoint_every=25)
    err = info.value
    k = 4
    assert (err.round - 1) * k < err.step <= err.round * k
    assert sorted(err.chains) == [0, 1, 2] and set(err.causes.values()) == {"parameters"}
    message = str(err)
    assert f"round {err.round}" in message and f"local step {err.step}" in message and "chain(s) [0, 1, 2]" in message
    assert "step_size" in message
    # every draw before the diverging round is kept, finite, and equal to a run that stopped there
    reference = fl.FALD(problem, **kw)
    before = reference.run(err.round - 1)
    assert err.trace.num_draws == err.round - 1 > 0
    assert torch.isfinite(err.trace.samples).all()
    assert torch.equal(err.trace.samples, before.samples)
    # the sampler stays at the last good round, random stream included, and counts its communication
    assert sampler.state.round == err.round - 1
    assert sampler.communication.rounds == err.round - 1 == before.communication.rounds
    assert sampler.communication.uploads == before.communication.uploads
    assert torch.equal(sampler.generator.get_state(), reference.generator.get_state())
    # ... and so do the store and the checkpoint: resuming diverges again at the same step
    resumed = fl.FALD.resume(tmp_path / "c")
    assert resumed.state.round == err.round - 1 and resumed.unfinished["draws"] == err.round - 1
    with pytest.raises(fl.DivergenceError) as again:
        resumed.run()
    assert (again.value.round, again.value.step) == (err.round, err.step)
    assert torch.equal(again.value.trace.samples, before.samples)


def test_first_bad_step_and_cause_are_found_exactly():
    with pytest.raises(fl.DivergenceError) as info:
        _band_sampler().run(30)
    err = info.value
    assert (err.round, err.step, err.chains) == (1, 1, [1])
    assert err.causes == {1: "gradient"} and "gradient was NaN/inf" in str(err)
    assert err.trace.num_draws == 0


def test_drop_mode_removes_only_the_diverged_chains():
    sampler = _band_sampler()
    with pytest.warns(RuntimeWarning, match="dropped") as record:
        trace = sampler.run(30, on_divergence="drop")
    assert len(record) == 3
    assert trace.dropped == EXPECTED_DROPS
    np.testing.assert_array_equal(trace.chain_ids, [3, 4])
    assert trace.samples.shape == (2, 30, 1)
    # the survivors follow theta_k = 10 + (theta_0 - 10) 0.9^k (noise ~1e-15): the rows were not mixed up
    k = 3 * np.arange(1, 31)
    for row, theta0 in enumerate((20.0, 100.0)):
        np.testing.assert_allclose(trace.samples[row, :, 0].numpy(), 10 + (theta0 - 10) * 0.9**k, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(sampler.active, [3, 4])
    later = sampler.run(5)  # later runs sample the survivors only
    assert later.samples.shape == (2, 5, 1) and later.dropped == {}
    np.testing.assert_array_equal(later.chain_ids, [3, 4])


def test_drop_mode_with_every_chain_diverging_raises():
    problem, _ = band_problem()
    init = torch.tensor([[0.0], [-1000.0]], dtype=torch.float64)
    sampler = fl.FALD(problem, step_size=0.1, local_steps=3, temperature=1e-30, chains=2, init=init, seed=0)
    with pytest.warns(RuntimeWarning, match="dropped"):
        with pytest.raises(fl.DivergenceError, match="no chain was left") as info:
            sampler.run(30, on_divergence="drop")
    err = info.value
    assert (err.round, err.step, err.chains) == (17, 50, [1])
    assert err.trace.dropped == {0: (2, 6)}
    np.testing.assert_array_equal(err.trace.chain_ids, [1])
    assert err.trace.num_draws == 16 and torch.isfinite(err.trace.samples).all()


def test_drop_mode_checkpoint_resumes_with_the_surviving_chains(tmp_path):
    reference = _band_sampler()
    with pytest.warns(RuntimeWarning):
        whole = reference.run(30, on_divergence="drop")
    problem, _ = band_problem()
    with pytest.warns(RuntimeWarning):
        _band_sampler().run(30, on_divergence="drop", checkpoint=tmp_path / "c", checkpoint_every=10)
    resumed = fl.FALD.resume(tmp_path / "c.prev", problem=problem)  # round 20; the class is a test's own
    np.testing.assert_array_equal(resumed.active, [3, 4])
    trace = resumed.run()
    assert torch.equal(trace.samples, whole.samples) and trace.dropped == whole.dropped
