"""The runner is kernel-agnostic (fedlangevin/runner/base.py): a second sampler family, an
underdamped Langevin kernel defined here (not in the package), runs through the same runner as
FA-LD — plan, draws, divergence handling, checkpoint + kill + resume bit for bit."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

import fedlangevin as fl
from fedlangevin.federation.contracts import KERNEL, conformance
from fedlangevin.runner.base import Runner


@dataclass(frozen=True)
class UnderdampedState:
    theta: torch.Tensor          # (R, d)
    v: torch.Tensor              # (R, d): the momentum, one row per chain (kept, dropped, checkpointed with it)
    step: int = 0
    round: int = 0


class BAOAB:
    """Centralised underdamped Langevin dynamics with unit mass, BAOAB splitting (Leimkuhler &
    Matthews 2013): half kick (B), half drift (A), exact Ornstein-Uhlenbeck refresh of the momentum
    (O), half drift, half kick, on the global energy f = sum_c p_c f^c. On a Gaussian target its theta
    marginal is exact for any stable step h (the property the test below uses)."""

    name = "BAOAB"

    def __init__(self, problem, friction: float = 5.0, temperature: float = 1.0):
        self.problem, self.friction, self.temperature = problem, friction, temperature
        self.weights = torch.as_tensor(problem.weights, dtype=torch.float64)

    def force(self, theta):
        per_client = self.problem.grad(theta.unsqueeze(1).expand(-1, self.problem.num_clients, -1).contiguous())
        return -(self.weights.to(theta)[None, :, None] * per_client).sum(1)

    def init(self, theta0):
        return UnderdampedState(theta=theta0.clone(), v=torch.zeros_like(theta0))

    def step(self, state, step_sizes, generator):
        theta, v = state.theta, state.v
        for h in step_sizes:
            v = v + 0.5 * h * self.force(theta)
            theta = theta + 0.5 * h * v
            a = math.exp(-self.friction * h)
            xi = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=theta.device)
            v = a * v + math.sqrt(self.temperature * (1 - a * a)) * xi
            theta = theta + 0.5 * h * v
            v = v + 0.5 * h * self.force(theta)
        return UnderdampedState(theta, v, state.step + len(step_sizes), state.round + 1), None

    def settings(self):
        return {"temperature": self.temperature}

    def record(self):
        return {"friction": self.friction, "temperature": self.temperature}


def problem():
    return fl.problems.GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=20, seed=0)


def test_the_kernel_conforms_and_a_broken_one_is_refused_before_any_work():
    assert conformance(BAOAB(problem()), KERNEL) == []
    with pytest.raises(ValueError, match="kernel.*step"):
        Runner(object.__new__(type("NoStep", (), {"init": lambda self, t: t})), problem(), 0.01)
    with pytest.raises(ValueError, match="step_size"):
        Runner(BAOAB(problem()), problem(), -1.0)


def test_a_second_kernel_samples_the_exact_gaussian_posterior_through_the_runner():
    """BAOAB's theta marginal is exact on a Gaussian: the last draws of R independent chains after
    a long burn-in are R draws of the posterior, so each mean is within 4 sd / sqrt(R) and each
    variance ratio within 4 sqrt(2 / R) of 1 (|z| < 4: a false failure has probability < 1e-3)."""
    p = problem()
    mean, cov = p.posterior(1.0)
    chains = 400
    runner = Runner(BAOAB(p), p, step_size=0.02, local_steps=5, chains=chains, seed=3)
    trace = runner.run(120, warmup=119)                    # 12 time units: ~40 relaxation times of the slow mode
    last = trace.samples[:, -1].to(torch.float64)          # (R, d)
    sd = cov.diagonal().sqrt()
    z = (last.mean(0) - mean) / (sd / math.sqrt(chains))
    assert bool((z.abs() < 4).all()), z
    ratio = last.var(0) / cov.diagonal()
    assert bool(((ratio - 1).abs() < 4 * math.sqrt(2 / chains)).all()), ratio
    assert trace.settings.sampler == "BAOAB" and trace.settings.local_steps == 5
    assert runner.ledger["rounds"] == 120 and runner.ledger["steps"] == 600
    assert trace.communication.uploads == 120 * p.num_clients  # without uploads(info): N a round
    with pytest.raises(ValueError, match="FA-LD"):
        trace.privacy(delta=1e-5, sensitivity=1.0)                   # FA-LD's accountant does not cover it


def test_checkpoint_kill_resume_is_bit_identical_for_a_kernel_of_your_own(tmp_path):
    p = problem()
    whole = Runner(BAOAB(p), p, 0.02, local_steps=3, chains=6, seed=11).run(40, warmup=5, thin=2)
    runner = Runner(BAOAB(p), p, 0.02, local_steps=3, chains=6, seed=11)
    kernel, calls = runner.kernel, [0]

    class Dies(BAOAB):  # the process dies in round 27; the last checkpoint is at round 20
        def step(self, state, step_sizes, generator):
            calls[0] += 1
            if calls[0] == 27:
                raise KeyboardInterrupt
            return kernel.step(state, step_sizes, generator)

    runner._kernel = Dies(p)
    with pytest.raises(KeyboardInterrupt):
        runner.run(40, warmup=5, thin=2, checkpoint=tmp_path / "run.ckpt", checkpoint_every=10)
    resumed = Runner.resume(tmp_path / "run.ckpt", BAOAB(p))
    assert resumed.unfinished["done"] == 20 and resumed.state.round == 20
    trace = resumed.run()
    assert torch.equal(trace.samples, whole.samples)
    assert (trace.draw_rounds == whole.draw_rounds).all()
    again = Runner(BAOAB(p), p, 0.02, local_steps=3, chains=6, seed=11)
    again.run(40, warmup=5, thin=2)
    assert torch.equal(resumed.state.v, again.state.v)    # the momentum came back from the file
    assert resumed.ledger == again.ledger


def test_resume_refuses_a_different_kernel(tmp_path):
    p = problem()
    Runner(BAOAB(p), p, 0.02, chains=2, seed=0).run(5, checkpoint=tmp_path / "run.ckpt")
    with pytest.raises(ValueError, match="record"):
        Runner.resume(tmp_path / "run.ckpt", BAOAB(p, friction=1.0))
    fl.FALD(p, step_size=0.01, seed=0).run(2, checkpoint=tmp_path / "fald.ckpt")
    with pytest.raises(fl.fald.CheckpointError, match="not a checkpoint of a Runner"):
        Runner.resume(tmp_path / "fald.ckpt", BAOAB(p))


def test_a_diverged_chain_is_dropped_with_its_momentum_row_and_the_rest_continue():
    p = problem()
    init = torch.zeros(3, p.dim, dtype=torch.float64)
    init[1] = 1e307                                        # this chain's force overflows in the first step
    runner = Runner(BAOAB(p), p, 0.02, chains=3, init=init, seed=0)
    with pytest.warns(RuntimeWarning, match=r"BAOAB: chain\(s\) \[1\] diverged"):
        trace = runner.run(10, on_divergence="drop")
    assert list(trace.chain_ids) == [0, 2] and runner.state.v.shape == (2, p.dim)
    assert bool(torch.isfinite(trace.samples).all())
    stop = Runner(BAOAB(p), p, 0.02, chains=3, init=init, seed=0)
    with pytest.raises(fl.DivergenceError, match="BAOAB diverged in round 1") as info:
        stop.run(10)
    assert info.value.trace.num_draws == 0 and stop.state.round == 0
