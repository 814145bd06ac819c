"""The same code on a GPU (``device="cuda"``): both samplers, the adaptive warm-up, float32, private
(per-example clipped) runs, a logistic regression's gradients and a checkpoint resume, each checked
against the CPU or an exact law. Skipped without a CUDA device; the suite's other CUDA tests
(``-k cuda``) sit beside the features they test."""

from __future__ import annotations

import math

import pytest
import torch

import fedlangevin as fl
from fedlangevin.problems import QuadraticProblem

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _logistic(num_clients: int = 4, per_client: int = 30, features: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, generator=g, dtype=torch.float64)
    clients = []
    for _ in range(num_clients):
        x = torch.randn(per_client, features, generator=g, dtype=torch.float64)
        y = (torch.rand(per_client, generator=g, dtype=torch.float64) < torch.sigmoid(x @ w)).long()
        clients.append((x, y))
    return fl.problems.LogisticRegression(clients)


def _gaussian():
    return fl.problems.GaussianSimulation(num_clients=10, samples_per_client=8, seed=2)


def _z_last_draws(trace, mean, cov):
    """The last draw of R independent chains, standardised against the exact law: each mean's z
    and each variance's ratio. With R draws from the law, |z| < 4 fails with probability < 1e-3
    per coordinate, and |ratio - 1| < 4 sqrt(2 / R) likewise (normal approximation)."""
    last = trace.samples[:, -1].to(torch.float64)
    chains = last.shape[0]
    z = (last.mean(0) - mean) / (cov.diagonal().sqrt() / math.sqrt(chains))
    ratio = last.var(0) / cov.diagonal()
    return z, ratio, 4 * math.sqrt(2 / chains)


def test_fahmc_on_cuda_samples_the_posterior():
    """K = 1, full participation: centralised BAOAB, exact in theta on a Gaussian (as the CPU test
    in tests/fahmc/test_sampler.py): 400 chains after 24 time units are 400 posterior draws."""
    h = torch.tensor([[[2.0, 0.3], [0.3, 1.0]], [[1.0, -0.2], [-0.2, 3.0]], [[1.5, 0.0], [0.0, 0.5]]],
                     dtype=torch.float64)
    b = torch.tensor([[1.0, -1.0], [0.5, 2.0], [-1.0, 0.0]], dtype=torch.float64)
    problem = QuadraticProblem(h, b, torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))
    mean, cov = problem.posterior(1.0)
    trace = fl.FAHMC(problem, 0.4, friction=2.0, chains=400, seed=3, device="cuda").run(60, warmup=59)
    assert trace.samples.device.type == "cpu"
    z, ratio, tol = _z_last_draws(trace, mean, cov)
    assert bool((z.abs() < 4).all()), z
    assert bool(((ratio - 1).abs() < tol).all()), ratio


def test_the_adaptive_warmup_on_cuda_in_float32_reaches_the_posterior():
    """step_size="auto" (M and the step adapted from the broadcast iterates) on the GPU in float32:
    the draws are float32 and the last draws of 256 chains match the exact posterior (z-test as
    above; the adapted FA-LD's bias on this Gaussian is far below the 4 sd / sqrt(256) tolerance,
    as its CPU runs in docs/adaptation.md show)."""
    problem = _gaussian()
    mean, cov = problem.posterior(1.0)
    trace = fl.FALD(problem, chains=256, seed=0, device="cuda", dtype=torch.float32).run(400, progress=False)
    assert trace.samples.dtype == torch.float32
    assert trace.settings.step_size != "auto"
    z, ratio, tol = _z_last_draws(trace, mean, cov)
    assert bool((z.abs() < 4).all()), z
    assert bool(((ratio - 1).abs() < tol).all()), ratio


def test_logistic_gradients_and_private_gradients_match_the_cpu():
    """The same theta (R, N, d) on both devices: full-data gradients, per-example clipped gradients
    and the clip's effect agree to float64 rounding."""
    problem = _logistic()
    theta = torch.randn(3, problem.num_clients, problem.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    gpu = problem.to(device="cuda", dtype=torch.float64)
    torch.testing.assert_close(gpu.grad(theta.cuda()).cpu(), problem.grad(theta), rtol=1e-10, atol=1e-10)
    privacy = fl.privacy.RecordLevel(clip=0.5)
    cpu_private = problem.private_grad(theta, privacy)
    gpu_private = gpu.private_grad(theta.cuda(), privacy).cpu()
    torch.testing.assert_close(gpu_private, cpu_private, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(cpu_private, problem.grad(theta))  # the clip is active at 0.5


def test_a_private_run_on_cuda_reports_the_cpu_run_epsilon():
    """The accounting depends on the mechanism, not the device: the same private run on both
    devices releases the same rounds and reports the same epsilon; the GPU draws are finite."""
    problem = _logistic()
    kw = dict(step_size=1e-3, chains=4, seed=0, privacy=fl.privacy.RecordLevel(clip=1.0), batch_size=10)
    cpu = fl.FALD(problem, **kw).run(30, progress=False)
    gpu = fl.FALD(problem, device="cuda", **kw).run(30, progress=False)
    assert bool(torch.isfinite(gpu.samples).all())
    assert gpu.privacy(delta=1e-5).epsilon == pytest.approx(cpu.privacy(delta=1e-5).epsilon, rel=1e-12)


def test_fahmc_cuda_resume_is_bit_for_bit(tmp_path):
    problem = _gaussian()
    kw = dict(step_size=1e-3, friction=1.0, chains=32, seed=3, device="cuda", participation=fl.SchemeI(3))
    whole = fl.FAHMC(problem, **kw).run(30, progress=False)
    fl.FAHMC(problem, **kw).run(30, progress=False, checkpoint=tmp_path / "c", checkpoint_every=10)
    resumed = fl.FAHMC.resume(tmp_path / "c.prev")  # round 20 of 30
    assert resumed.device.type == "cuda"
    assert torch.equal(resumed.run().samples, whole.samples)


@pytest.mark.parametrize("name", ["FALD", "FAHMC"])
def test_defaults_with_minibatches_run_on_cuda_and_check_their_setting(name):
    """The realistic default path on the GPU: step_size="auto" (the warm-up), correction="auto"
    (control variates with minibatches at K = 1), FA-HMC's gradient-noise correction, and the
    end-of-run check of the setting's noise (measured on the CPU in float64): the run finishes,
    its draws are finite and on the CPU, and the check gives a verdict."""
    problem = _logistic(per_client=60)
    sampler = getattr(fl, name)(problem, chains=4, batch_size=10, seed=0, device="cuda")
    trace = sampler.run(400, progress=False)
    assert trace.samples.device.type == "cpu" and bool(torch.isfinite(trace.samples).all())
    assert sampler.setting_noise is not None and sampler.setting_noise.measured
