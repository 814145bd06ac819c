"""The acceptance step rule of step_size="auto" (fedlangevin.warmup.acceptance)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from scipy import integrate, stats

import fedlangevin as fl
from fedlangevin.federation.preconditioning import as_preconditioner
from fedlangevin.warmup.curvature import mean_hessian
from fedlangevin.warmup.acceptance import (
    AutoStep, da_final, da_init, da_update, excess_step, gaussian_acceptance, log_acceptance, matrix_growth,
    mean_acceptance, resolve_target,
)
from fedlangevin.problems import QuadraticProblem
from tests.targets import OpaqueProblem


def _spd(d, seed, condition=10.0):
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return (q * torch.logspace(0, math.log10(condition), d, dtype=torch.float64)) @ q.T


def test_log_acceptance_equals_the_mala_ratio_computed_with_the_proposal_densities():
    # direct: log pi(y) - log pi(x) + log q(x | y) - log q(y | x), q(y | x) = N(x - eta M g(x), 2 eta tau M)
    d, eta, tau = 4, 0.3, 0.7
    a, m = _spd(d, 0), _spd(d, 1, 5.0)
    b = torch.arange(d, dtype=torch.float64)
    u = lambda t: 0.5 * ((t @ a) * t).sum(-1) - t @ b  # noqa: E731
    grad = lambda t: t @ a - b  # noqa: E731
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, d, generator=g, dtype=torch.float64)
    y = torch.randn(5, d, generator=g, dtype=torch.float64)
    cov = (2 * eta * tau * m).numpy()

    def log_q(to, frm):
        mean = (frm - eta * grad(frm) @ m).numpy()
        return np.array([stats.multivariate_normal(mean[i], cov).logpdf(to[i].numpy()) for i in range(len(to))])

    direct = (-u(y) + u(x)).numpy() / tau + log_q(x, y) - log_q(y, x)
    ours = log_acceptance(x, y, u(x), u(y), grad(x), grad(y), eta, as_preconditioner(m, d), tau).numpy()
    np.testing.assert_allclose(ours, direct, rtol=1e-10, atol=1e-10)


def test_mean_acceptance_caps_at_one_and_counts_a_blown_up_energy_as_a_rejection():
    la = torch.tensor([0.5, math.log(0.25), math.nan, -math.inf, math.inf])
    assert mean_acceptance(la) == pytest.approx((1 + 0.25 + 0 + 0 + 1) / 5)


def test_gaussian_acceptance_in_one_dimension_matches_a_quadrature():
    # the independent computation: a 2-d quadrature of min(1, alpha) over the stationary law of x
    # and the step's y | x. Our Monte Carlo has <= 100,000 pairs, sd of min(1, alpha) <= 0.5:
    # standard error <= 0.0016; 0.006 is about 4 standard errors.
    eta = 0.6
    v = 1 / (1 - eta / 2)

    def integrand(y, x):
        la = log_acceptance(torch.tensor([[x]]), torch.tensor([[y]]), torch.tensor([x * x / 2]),
                            torch.tensor([y * y / 2]), torch.tensor([[x]]), torch.tensor([[y]]), eta)
        return (min(1.0, math.exp(float(la))) * stats.norm.pdf(x, scale=math.sqrt(v))
                * stats.norm.pdf(y, loc=(1 - eta) * x, scale=math.sqrt(2 * eta)))

    exact, _ = integrate.dblquad(integrand, -8 * math.sqrt(v), 8 * math.sqrt(v), lambda x: (1 - eta) * x - 9,
                                 lambda x: (1 - eta) * x + 9, epsabs=1e-6)
    assert gaussian_acceptance(eta, 1) == pytest.approx(exact, abs=0.006)


def test_the_auto_target_falls_with_the_dimension_and_means_the_same_gaussian_bias():
    # eta of a 3% sd excess: (1 - eta / 2)^(-1/2) = 1.03
    eta = excess_step(0.03)
    assert (1 - eta / 2) ** -0.5 == pytest.approx(1.03)
    targets = [resolve_target("auto", d) for d in (1, 10, 100)]
    assert targets[0] > targets[1] > targets[2] > 0.5
    assert gaussian_acceptance(0.05, 10) > gaussian_acceptance(0.2, 10) > gaussian_acceptance(0.8, 10)


def test_dual_averaging_finds_the_step_of_the_target_on_a_known_acceptance_curve():
    # a deterministic acceptance a(eta) = exp(-eta^2): the target 0.8 is met at eta* = sqrt(-log 0.8)
    state = da_init(1e-6)
    for _ in range(3000):
        state = da_update(state, math.exp(-math.exp(2 * state.x)), 0.8)
    assert not state.searching
    assert da_final(state) == pytest.approx(math.sqrt(-math.log(0.8)), rel=0.02)


def test_the_search_doubles_the_step_while_the_acceptance_is_above_the_target():
    state = da_init(1e-3)
    for i in range(5):
        state = da_update(state, 1.0, 0.9)
        assert math.exp(state.x) == pytest.approx(1e-3 * 2 ** (i + 1))
    state = da_update(state, 0.0, 0.9)
    assert not state.searching and math.exp(state.x) < 1e-3 * 2 ** 5


def test_matrix_growth_is_the_largest_generalised_eigenvalue():
    d = 5
    old, new = _spd(d, 3), _spd(d, 4, 100.0)
    expected = scipy.linalg.eigh(new.numpy(), old.numpy(), eigvals_only=True).max()
    got = matrix_growth(as_preconditioner(old, d), as_preconditioner(new, d), d)
    assert got == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, math.nan, math.inf, "high", True, None])
def test_a_target_outside_zero_one_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match="target_accept"):
        AutoStep(target_accept=bad)


def test_a_private_run_refuses_a_numeric_target():
    from tests.fald.test_privacy import _clients

    problem = fl.problems.LogisticRegression(_clients(False))
    with pytest.raises(ValueError, match="privacy: step_size=AutoStep"):
        fl.FALD(problem, step_size=fl.AutoStep(0.9), privacy=fl.privacy.RecordLevel(clip=1.0))
    fl.FALD(problem, step_size=fl.AutoStep(), privacy=fl.privacy.RecordLevel(clip=1.0))  # the private rule


def _gaussian_problem(d=4, n=3):
    a = torch.stack([_spd(d, 10 + c, 50.0) for c in range(n)])
    b = torch.randn(n, d, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 5 + 20
    return QuadraticProblem(a, b, torch.full((n,), 1 / n, dtype=torch.float64))


def test_the_rule_lands_on_its_target_and_counts_what_the_clients_send(monkeypatch):
    from fedlangevin.warmup import adaptation

    hessians = []  # every Laplace M: each client returns its Hessian with the round's upload
    monkeypatch.setattr(adaptation, "mean_hessian", lambda p, x: hessians.append(x.shape[0]) or mean_hessian(p, x))
    problem = _gaussian_problem()
    sampler = fl.FALD(problem, chains=16, seed=1)
    trace = sampler.run(800, thin=1, progress=False)
    # the acceptance of the frozen step's moves after warm-up, from the draws (400 rounds, 16 chains)
    x = trace.samples.to(torch.float64)
    u = problem.energy
    g = lambda t: t @ problem.global_hessian - problem.global_shift  # noqa: E731
    eta = float(sampler.schedule(sampler.state.step))
    pre = sampler.preconditioner
    la = log_acceptance(x[:, :-1].reshape(-1, 4), x[:, 1:].reshape(-1, 4), u(x[:, :-1].reshape(-1, 4)),
                        u(x[:, 1:].reshape(-1, 4)), g(x[:, :-1].reshape(-1, 4)), g(x[:, 1:].reshape(-1, 4)), eta, pre)
    target = resolve_target("auto", 4)
    # dual averaging's final step is exp(mean log eta), not the step of mean acceptance = target
    # (Jensen), and the adapted M is an estimate: 0.02 is a few times the per-round spread / sqrt(rounds)
    assert mean_acceptance(la) == pytest.approx(target, abs=0.02)
    comm = trace.communication
    n, d = problem.num_clients, problem.dim
    # warm-up: 400 rounds, each with (U, grad U) of every client at the new iterate, plus the start,
    # and the Laplace M's Hessians (d (d + 1) / 2 floats per client, summed over the chains: counted per chain)
    assert len(hessians) >= 2  # at the start and at the approach's end
    assert comm.floats_up == pytest.approx(comm.uploads * d + 401 * n * (d + 1)
                                           + sum(n * d * (d + 1) / 2 / r for r in hessians))


def test_the_warm_up_reaches_the_bulk_from_zeros_on_a_posterior_whose_mode_is_far():
    # sblri: a regression whose posterior mean is ~1000 posterior sds from zero in one coordinate
    from fedlangevin.experiments.posteriordb import compare, load

    post = load("sblri-blr")
    assert np.abs(post.unconstrain(post.reference).mean(0) / post.unconstrain(post.reference).std(0)).max() > 10
    sampler = fl.FALD(post.problem, chains=16, seed=0)
    trace = sampler.run(2000, progress=False)
    row = compare(post, np.asarray(trace.numpy()), 1.0)
    assert row.passes(), row


def test_one_local_step_under_random_participation_or_minibatches_adapts_by_acceptance():
    """With K = 1, scheme I, scheme II and minibatches adapt eta by the acceptance of the rounds' actual
    moves (the drift's noise counts against the target); K > 1 keeps the curvature rule, and so does a
    problem without an energy under random participation (the largest client curvature: a round there
    sums a few clients' energies)."""
    from fedlangevin.warmup import session

    gauss = fl.problems.GaussianSimulation(num_clients=4, samples_per_client=10, prior_precision=1.0, seed=0)
    cases = [(gauss, dict(participation=fl.SchemeI(2)), "acceptance", False),
             (gauss, dict(participation=fl.SchemeII(2)), "acceptance", False),
             (gauss, dict(batch_size=3), "acceptance", False),
             (gauss, dict(participation=fl.SchemeI(2), local_steps=2, check_local_bias=False), "curvature", True),
             (OpaqueProblem(gauss), dict(participation=fl.SchemeI(2)), "curvature", True)]
    for problem, kwargs, rule, per_client in cases:
        sampler = fl.FALD(problem, chains=4, seed=0, **kwargs)
        adapter, _ = session.init(sampler, 100)
        assert (adapter.rule, adapter.per_client) == (rule, per_client), kwargs

