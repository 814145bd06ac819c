"""Warm-up adaptation (fald/adaptation.py) and step_size="auto" in the runner."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedlangevin as fl
from diagnostics import gaussian_w2, w2_floor
from fedlangevin.experiments.exact import exact_moments
from fedlangevin.warmup.adaptation import AdaptedSteps, Window, max_curvature, warmup_windows
from fedlangevin.federation.preconditioning import as_preconditioner, preconditioner_matrix, transformed_quadratic
from fedlangevin.problems import QuadraticProblem

pytestmark = pytest.mark.usefixtures("one_torch_thread")
F64 = torch.float64


def _ill_conditioned(d=6, n=10, condition=1e4, seed=0):
    """A Gaussian posterior with condition number ``condition`` and strong correlations (a random
    rotation of a log-spaced spectrum), iid clients (shared Hessian)."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=F64))
    h = q @ torch.diag(torch.logspace(0, math.log10(condition), d, dtype=F64)) @ q.T
    h = 0.5 * (h + h.T)
    b = (h @ torch.ones(d, dtype=F64)).expand(n, d)
    return QuadraticProblem(h, b, torch.full((n,), 1.0 / n, dtype=F64))


def test_windows_are_stans():
    slow = [(w.start, w.end) for w in warmup_windows(1000) if w.slow]
    assert slow == [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    fast = [(w.start, w.end) for w in warmup_windows(1000) if not w.slow]
    assert fast == [(0, 25), (25, 50), (50, 75), (950, 1000)]
    short = warmup_windows(100)  # 15% / 75% / 10%
    assert [w for w in short if w.slow] == [Window(15, 90, True)] and short[-1] == Window(90, 100, False)
    assert warmup_windows(10) == [Window(0, 10, False)] and warmup_windows(0) == []
    for warmup in (20, 57, 333, 1000, 4321):
        ws = warmup_windows(warmup)
        assert ws[0].start == 0 and ws[-1].end == warmup
        assert all(a.end == b.start for a, b in zip(ws, ws[1:]))


def test_power_iteration_finds_the_preconditioned_curvature():
    problem = _ill_conditioned(d=5)
    theta = torch.zeros(3, 5, dtype=F64)
    h = problem.global_hessian
    lam = max_curvature(problem, theta, per_client=False, generator=torch.Generator().manual_seed(0), iterations=200)
    assert lam == pytest.approx(float(torch.linalg.eigvalsh(h).max()), rel=1e-6)
    pre = as_preconditioner(torch.linalg.inv(h) * 2.0)
    lam = max_curvature(problem, theta, pre, per_client=True, generator=torch.Generator().manual_seed(0))
    assert lam == pytest.approx(2.0, rel=1e-5)


@pytest.mark.parametrize("k", [1, 5])
def test_adapted_matrix_is_the_posterior_covariance_and_the_frozen_kernel_converges(k):
    """Condition number 1e4, strong correlations, R = 100 chains, warm-up 500 rounds (the last slow
    window has w = 200 rounds). (i) M is proportional to Sigma within Monte Carlo error: the
    eigenvalues of Sigma^-1 M, divided by their geometric mean, lie within the 1%/99% Tracy-Widom
    (TW1: -3.90, 2.02) bands around the Marchenko-Pastur edges (1 -+ sqrt(g))^2, g = d / n_eff,
    of a covariance estimated from n_eff = R w / tau independent draws, tau = (1 + a^2) / (1 - a^2)
    the integrated autocorrelation of squares of an AR(1) with a = (1 - eta)^K (the round map in
    z when M ~ Sigma); TW scales n^(-2/3) (1 -+ sqrt g)(1 / sqrt g -+ 1)^(1/3) (Johnstone 2001). (ii) The exact law of the frozen kernel
    (its exact moments from the start theta = 0) has W2 to the posterior below the 5% quantile of
    the R-chain floor after 300 rounds."""
    problem = _ill_conditioned()
    d, r, warmup = problem.dim, 100, 500
    sampler = fl.FALD(problem, local_steps=k, chains=r, seed=3)
    assert sampler.adapt_step and sampler.adapt_matrix
    trace = sampler.run(warmup + 1, warmup=warmup, progress=False)
    assert sampler.adapted and sampler.adapter is None and trace.num_draws == 1
    m = preconditioner_matrix(sampler.preconditioner, d)
    mean, sigma = problem.posterior()
    eig = torch.linalg.eigvals(torch.linalg.solve(sigma, m)).real
    eig = eig / eig.log().mean().exp()
    eta = sampler.schedule(sampler.state.step)
    a2 = (1 - eta) ** (2 * k)
    n_eff = r * 200 / ((1 + a2) / (1 - a2))
    g = d / n_eff
    hi = (1 + math.sqrt(g)) ** 2 + 2.02 * n_eff ** (-2 / 3) * (1 + math.sqrt(g)) * (1 / math.sqrt(g) + 1) ** (1 / 3)
    lo = (1 - math.sqrt(g)) ** 2 - 3.90 * n_eff ** (-2 / 3) * (1 - math.sqrt(g)) * (1 / math.sqrt(g) - 1) ** (1 / 3)
    assert lo <= float(eig.min()) and float(eig.max()) <= hi, (eig, lo, hi)
    # the frozen kernel, exactly
    zp = transformed_quadratic(problem, sampler.preconditioner)
    fac = sampler.preconditioner.factor.numpy()
    means, covs = exact_moments(zp, [[eta] * k] * 300)
    w2 = gaussian_w2(fac @ means[-1], fac @ covs[-1] @ fac.T, mean.numpy(), sigma.numpy())
    floor = w2_floor(mean.numpy(), sigma.numpy(), r)
    assert w2 < floor.q05, (w2, floor)
    # without adaptation, the same number of rounds at the best safe scalar step is far off
    eta_plain = 0.1 / float(torch.linalg.eigvalsh(problem.global_hessian).max())
    pm, pc = exact_moments(problem, [[eta_plain] * k] * 300)
    assert gaussian_w2(pm[-1], pc[-1], mean.numpy(), sigma.numpy()) > 5 * floor.q95


def test_numeric_step_size_keeps_the_old_run_and_adapt_true_adapts_m_only():
    problem = _ill_conditioned(d=3, condition=100.0)
    plain = fl.FALD(problem, step_size=1e-3, chains=8, seed=1)
    assert not plain.adapt_step and not plain.adapt_matrix
    a = plain.run(60, warmup=40, progress=False)
    assert plain.preconditioner is None and plain.settings.preconditioner == "none"
    adapting = fl.FALD(problem, step_size=1e-3, chains=8, seed=1, adapt=True)
    b = adapting.run(60, warmup=40, progress=False)
    assert adapting.preconditioner is not None and adapting.schedule(0) == 1e-3
    assert np.asarray(b.step_sizes).tolist() == [1e-3] * 60
    assert not np.array_equal(np.asarray(a.samples), np.asarray(b.samples))
    # every M installed is broadcast to the N clients: d (d + 1) / 2 floats each
    extra = b.communication.floats_down - 60 * problem.num_clients * problem.dim
    assert extra > 0 and extra % (problem.num_clients * 6) == 0


def test_auto_step_size_is_piecewise_constant_and_frozen_after_warmup():
    problem = _ill_conditioned(d=3, condition=100.0)
    sampler = fl.FALD(problem, chains=16, seed=2)
    trace = sampler.run(200, progress=False)  # warm-up defaults to rounds // 2
    assert trace.num_draws == 100
    etas = np.asarray(trace.step_sizes)
    assert np.all(etas[100:] == etas[-1]) and len(set(etas[:100].tolist())) > 1
    assert isinstance(sampler.schedule, AdaptedSteps)
    frozen = sampler.schedule(sampler.state.step)
    more = sampler.run(10, progress=False)  # later runs: no warm-up, the frozen kernel
    assert more.num_draws == 10 and np.all(np.asarray(more.step_sizes) == frozen)


def test_adaptation_state_is_checkpointed_and_resumes_bit_for_bit(tmp_path):
    problem = _ill_conditioned(d=3, condition=100.0)
    whole = fl.FALD(problem, chains=8, seed=5).run(130, warmup=110, progress=False)
    path = tmp_path / "run.ckpt"
    fl.FALD(problem, chains=8, seed=5).run(130, warmup=110, progress=False, checkpoint=path, checkpoint_every=50)
    prev = path.with_name(path.name + ".prev")  # written at round 100, mid warm-up
    resumed = fl.FALD.resume(prev)
    assert resumed.adapter is not None and resumed.adapter.done == 100
    trace = resumed.run(progress=False)
    assert np.array_equal(np.asarray(trace.samples), np.asarray(whole.samples))


def test_adaptation_with_an_upload_codec_is_a_value_error():
    problem = _ill_conditioned(d=3, condition=100.0)
    with pytest.raises(ValueError, match="adapt"):
        fl.FALD(problem, chains=2, upload=lambda beta, theta, g: beta)


def test_per_client_streams_adapt_the_step_size_only():
    """The per-client kernel (fald/streams.py) takes no preconditioner: "auto" adapts eta there, and
    asking for M is a ValueError."""
    problem = _ill_conditioned(d=3, condition=100.0)
    sampler = fl.FALD(problem, chains=4, seed=0, streams="per_client")
    trace = sampler.run(40, progress=False)
    assert not sampler.adapt_matrix and sampler.preconditioner is None and trace.num_draws == 20
    assert isinstance(sampler.schedule, AdaptedSteps) and sampler.adapted
    with pytest.raises(ValueError, match="per_client"):
        fl.FALD(problem, chains=4, streams="per_client", adapt=True)
    with pytest.raises(ValueError, match="per_client"):
        fl.FALD(problem, step_size=1e-3, chains=4, streams="per_client", preconditioner=torch.ones(3))
