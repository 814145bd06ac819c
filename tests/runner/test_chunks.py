"""Rounds in chunks (``Kernel.rounds``, ``FALD._advance``): the runner's chunked rounds are its
round-by-round rounds bit for bit (draws, state, generator, ledger, statistics, stores and
checkpoints), divergences included, and an interrupted chunk leaves the sampler at its start."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.fald.engine import build

pytestmark = pytest.mark.usefixtures("one_torch_thread")
F64 = torch.float64


def _round_by_round(sampler):
    """The sampler with its kernel's step wrapped: no ``rounds`` attribute, so every round goes
    through ``kernel.step``, as before chunks existed."""
    step = sampler._kernel.step
    sampler._kernel = sampler._kernel._replace(step=lambda *a, **k: step(*a, **k))
    assert sampler._kernel.rounds is None
    return sampler


def _quadratic(n, d, seed=0, per_client=False):
    g = torch.Generator().manual_seed(seed)
    shape = (n, d, d) if per_client else (d, d)
    q = torch.randn(shape, generator=g, dtype=F64)
    a = q @ q.transpose(-1, -2) / d + torch.eye(d, dtype=F64)
    return fl.problems.QuadraticProblem(a, torch.randn(n, d, generator=g, dtype=F64),
                                        torch.full((n,), 1.0 / n, dtype=F64))


def _same(a, b):
    assert torch.equal(torch.as_tensor(a.samples), torch.as_tensor(b.samples))
    np.testing.assert_array_equal(a.draw_rounds, b.draw_rounds)
    assert a.ledger == b.ledger and a.communication == b.communication


CASES = {
    "N=1 K=1": dict(problem=lambda: fl.problems.GaussianSimulation(num_clients=1, samples_per_client=50, seed=0)),
    "N=1 K=3 rho": dict(problem=lambda: fl.problems.GaussianSimulation(num_clients=1, seed=0), local_steps=3,
                        correlation=0.5),
    "N=1 weight": dict(problem=lambda: fl.problems.QuadraticProblem(torch.eye(2, dtype=F64) * 3,
                                                                     torch.ones(1, 2, dtype=F64),
                                                                     torch.tensor([1.0 - 1e-12], dtype=F64))),
    "N=1 d=1 float32": dict(problem=lambda: _quadratic(1, 1), dtype=torch.float32, noise_dtype=torch.float64),
    "N=4 K=1": dict(problem=lambda: fl.problems.GaussianSimulation(num_clients=4, seed=1)),
    "N=3 K=2 per-client": dict(problem=lambda: _quadratic(3, 3, per_client=True), local_steps=2, correlation=0.3),
    "N=3 d=1": dict(problem=lambda: _quadratic(3, 1), local_steps=2),
    "schedule": dict(problem=lambda: fl.problems.GaussianSimulation(num_clients=1, seed=0),
                     step_size=lambda k: 2e-3 / (1 + k) ** 0.25),
}


@pytest.mark.parametrize("name", list(CASES))
def test_chunks_are_the_round_by_round_run_bit_for_bit(name):
    case = dict(CASES[name])
    problem = case.pop("problem")()
    kw = dict(step_size=0.1 / problem.smoothness, chains=5, seed=4)
    kw.update(case)
    chunked, plain = fl.FALD(problem, **kw), _round_by_round(fl.FALD(problem, **kw))
    assert chunked._kernel.rounds is not None
    for args in (dict(rounds=700, warmup=33, thin=3, stats=True), dict(rounds=5), dict(rounds=300, thin=7)):
        a, b = chunked.run(progress=False, **args), plain.run(progress=False, **args)
        _same(a, b)
        if a.stats is not None:
            assert torch.equal(torch.as_tensor(a.stats.mean), torch.as_tensor(b.stats.mean))
    assert torch.equal(chunked.state.theta, plain.state.theta)
    assert (chunked.state.step, chunked.state.round) == (plain.state.step, plain.state.round)
    assert torch.equal(chunked.generator.get_state(), plain.generator.get_state())
    theta = chunked.state.theta  # an ordinary tensor, though the chunk ran in inference mode
    assert not theta.is_inference() and not torch.as_tensor(a.samples).is_inference()


def test_chunks_with_a_store_checkpoints_and_a_resume(tmp_path):
    problem = fl.problems.GaussianSimulation(num_clients=1, samples_per_client=50, seed=0)
    kw = dict(step_size=1e-3, chains=4, seed=1)
    whole = _round_by_round(fl.FALD(problem, **kw)).run(1000, warmup=10, thin=2, target="posterior", progress=False)
    fl.FALD(problem, **kw).run(1000, warmup=10, thin=2, target="posterior", store=tmp_path / "s",
                               checkpoint=tmp_path / "c", checkpoint_every=300, progress=False)
    resumed = fl.FALD.resume(tmp_path / "c.prev")  # the checkpoint before the final one: round 900 of 1000
    assert resumed.unfinished["done"] == 900
    trace = resumed.run(progress=False)
    assert torch.equal(torch.as_tensor(trace.samples), torch.as_tensor(whole.samples))
    np.testing.assert_allclose(trace.stats.w2, whole.stats.w2, rtol=1e-12)


def test_chunks_end_at_checkpoint_boundaries(tmp_path, monkeypatch):
    from fedlangevin.runner.resume import CheckpointWriter

    written = []
    real = CheckpointWriter.write
    monkeypatch.setattr(CheckpointWriter, "write",
                        lambda self, path, sampler, run: (written.append(run.done), real(self, path, sampler, run)))
    problem = fl.problems.GaussianSimulation(num_clients=1, seed=0)
    fl.FALD(problem, step_size=1e-3, chains=3, seed=0).run(1000, checkpoint=tmp_path / "c", checkpoint_every=300,
                                                           progress=False)
    assert written == [300, 600, 900, 1000]


def _exploding(chains_at_risk):
    """N = 1 with eta above 2 / L: every chain grows by about 1.5 a round; the chains started at 1e290
    overflow within a chunk, those started at 0 a thousand rounds later."""
    problem = fl.problems.QuadraticProblem(torch.eye(2, dtype=F64), torch.zeros(1, 2, dtype=F64),
                                           torch.ones(1, dtype=F64))
    init = torch.zeros(6, 2, dtype=F64)
    init[chains_at_risk] = 1e290
    return problem, dict(step_size=2.5, chains=6, init=init, seed=0, temperature=1e-6)


@pytest.mark.parametrize("mode", ["raise", "drop"])
def test_a_divergence_inside_a_chunk_is_the_round_by_round_outcome(mode):
    problem, kw = _exploding([1, 4])
    outcomes = []
    for sampler in (fl.FALD(problem, **kw), _round_by_round(fl.FALD(problem, **kw))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                trace, error = sampler.run(400, thin=3, on_divergence=mode, progress=False), None
            except fl.DivergenceError as err:
                trace, error = err.trace, err
        outcomes.append((sampler, trace, error, [str(w.message) for w in caught]))
    (a, ta, ea, wa), (b, tb, eb, wb) = outcomes
    _same(ta, tb)
    assert wa == wb and ta.dropped == tb.dropped
    assert torch.equal(a.generator.get_state(), b.generator.get_state())
    assert torch.equal(a.state.theta, b.state.theta) and a.state.round == b.state.round
    if mode == "raise":
        assert ea is not None and (ea.round, ea.step, ea.chains) == (eb.round, eb.step, eb.chains) == (ea.round, ea.step, [1, 4])
        assert a.state.round == ea.round - 1
    else:
        assert ea is None and sorted(ta.dropped) == [1, 4] and len(wa) == 1
        np.testing.assert_array_equal(a.active, [0, 2, 3, 5])


def test_an_interrupted_chunk_leaves_the_sampler_at_its_start():
    problem = fl.problems.GaussianSimulation(num_clients=1, seed=0)
    kw = dict(step_size=1e-3, chains=3, seed=5)
    whole = fl.FALD(problem, **kw).run(600, progress=False)
    sampler = fl.FALD(problem, **kw)
    rounds, calls = sampler._kernel.step.rounds, [0]

    def interrupted(state, chunk, generator):
        calls[0] += 1
        if calls[0] == 2:  # the second chunk: its rounds run, then Ctrl-C
            rounds(state, chunk, generator)
            raise KeyboardInterrupt
        return rounds(state, chunk, generator)

    sampler._kernel.step.rounds = interrupted
    with pytest.raises(KeyboardInterrupt):
        sampler.run(600, progress=False)
    sampler._kernel.step.rounds = rounds
    done = sampler.state.round
    assert done == 256 and sampler.interrupted_trace.num_draws == done
    assert torch.equal(torch.as_tensor(sampler.interrupted_trace.samples), torch.as_tensor(whole.samples[:, :done]))
    rest = sampler.run(600 - done, progress=False)  # the generator went back to the chunk's start
    assert torch.equal(torch.as_tensor(rest.samples), torch.as_tensor(whole.samples[:, done:]))


def test_only_plain_full_participation_small_kernels_run_rounds_together():
    gauss = fl.problems.GaussianSimulation(num_clients=3, seed=0)
    assert build(gauss).rounds is not None
    assert build(gauss, participation=fl.SchemeII(2)).rounds is None
    assert build(gauss, kernel="dense").rounds is None
    assert build(gauss, upload=lambda beta, theta, g: beta).rounds is None
    assert build(gauss, correction=fl.fald.ControlVariates()).rounds is None
    assert build(gauss, preconditioner=fl.fald.FactorPreconditioner(torch.eye(2, dtype=F64) * 2)).rounds is None
    kernel = build(gauss)
    assert kernel._replace(step=lambda *a, **k: kernel.step(*a, **k)).rounds is None
