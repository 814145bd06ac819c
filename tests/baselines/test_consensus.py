"""One-shot consensus Monte Carlo (fedlangevin/baselines/consensus.py): the sub-posteriors multiply to
the posterior, the combination rule is the product of Gaussians, the whole run samples a Gaussian
posterior exactly with exact weights and within the weights' estimation error without, and bad
arguments are refused before any sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

import fedlangevin as fl
from fedlangevin.baselines.consensus import ConsensusResult, SubPosterior, client_energy, combine, consensus_monte_carlo
from fedlangevin.problems import QuadraticProblem

pytest.importorskip("pyro")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _quadratic() -> QuadraticProblem:
    """Three clients of different curvatures (their sub-posteriors differ in shape, so the weights
    matter) and shifts: sub-posterior means 0.3 to 0.5 sub-posterior sds from the posterior's."""
    a = torch.tensor([[[2.0, 0.5], [0.5, 1.0]], [[1.0, -0.3], [-0.3, 2.0]], [[1.5, 0.0], [0.0, 1.5]]],
                     dtype=torch.float64)
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-0.5, 0.5]], dtype=torch.float64)
    return QuadraticProblem(a, b, torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64))


def _exact_subs(problem):
    subs = [SubPosterior(problem, c).posterior() for c in range(problem.num_clients)]
    return np.stack([m.numpy() for m, _ in subs]), np.stack([s.numpy() for _, s in subs])


def test_the_sub_posteriors_multiply_to_the_posterior():
    """sum_c p_c f^c = f: the sub-posteriors' energies (SubPosterior.global_energy at tau) add up to the
    global energy over tau, and their gradients to its gradient; the exact sub-posteriors' product
    (precisions add) is the problem's posterior."""
    problem, tau = _quadratic(), 0.7
    theta = torch.randn(5, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    subs = [SubPosterior(problem, c, temperature=tau) for c in range(3)]
    energy = sum(s.global_energy(theta) for s in subs)
    diff = energy - problem.energy(theta) / tau
    torch.testing.assert_close(diff, diff[:1].expand(5))  # equal up to a constant (here 0)
    grad = sum(s.grad(theta[:, None, :])[:, 0] for s in subs)
    torch.testing.assert_close(grad, (theta @ problem.global_hessian - problem.global_shift) / tau)
    assert [s.evaluations for s in subs] == [5, 5, 5]
    means, covs = (np.stack(v) for v in zip(*[[t.numpy() for t in s.posterior()] for s in subs]))
    precision = np.linalg.inv(covs).sum(0)
    mean, cov = (t.numpy() for t in problem.posterior(tau))
    np.testing.assert_allclose(np.linalg.inv(precision), cov, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.solve(precision, np.einsum("nij,nj->i", np.linalg.inv(covs), means)), mean,
                               rtol=1e-12)


def test_client_energies_of_every_kind_sum_to_the_global_energy():
    """client_energy for a quadratic problem, a logistic regression (client_energy), a posteriordb
    regression (client_energy) and an autodiff problem (energy): sum_c p_c f^c = the global energy."""
    from fedlangevin.experiments.posteriordb import custom_problem, load

    post = load("earnings-logearn_interaction_z")
    g = torch.Generator().manual_seed(0)
    parts = [(torch.randn(n, 3, generator=g, dtype=torch.float64), torch.randint(0, 2, (n,), generator=g))
             for n in (15, 20, 25)]
    logistic = fl.problems.LogisticRegression(parts)
    problems = [_quadratic(), post.problem, custom_problem(post), logistic]
    for problem in problems:
        g = torch.Generator().manual_seed(1)
        theta = 0.1 * torch.randn(3, problem.dim, generator=g, dtype=torch.float64)
        total = sum(float(problem.weights[c]) * client_energy(problem, c)(theta) for c in range(problem.num_clients))
        energy = problem.global_energy(theta) if hasattr(problem, "global_energy") else problem.energy(theta)
        torch.testing.assert_close(total, energy, rtol=1e-10, atol=1e-8)
    subset = fl.problems.GaussianSimulation(num_clients=2, alpha=1.0, seed=0).clients([0])
    assert client_energy(subset, 0) is None  # a ClientSubset exposes no energy


def test_the_combination_is_the_product_of_gaussians():
    """Independent computation: the product of the densities N(mu_c, Sigma_c) (scipy's log pdfs) is,
    up to a constant in theta, the density N(mu, Sigma) whose mean combine() returns for draws
    equal to the means with W_c = Sigma_c^-1, and Sigma = (sum W_c)^-1."""
    means, covs = _exact_subs(_quadratic())
    w = np.linalg.inv(covs)
    combined, used = combine(means[:, None, None, :], w)
    np.testing.assert_array_equal(used, w)
    mu, sigma = combined[0, 0], np.linalg.inv(w.sum(0))
    points = np.random.default_rng(0).normal(size=(20, 2)) * 2
    product = sum(scipy.stats.multivariate_normal(m, s).logpdf(points) for m, s in zip(means, covs))
    gap = product - scipy.stats.multivariate_normal(mu, sigma).logpdf(points)
    np.testing.assert_allclose(gap, gap[0], atol=1e-10)


def test_combining_exact_gaussian_draws_with_exact_weights_gives_the_posterior():
    """100,000 i.i.d. draws of each exact sub-posterior, combined with the exact precisions: a
    linear map of independent Gaussians, exactly N(mean, cov) of the posterior. Mean within 4
    standard errors (sd / sqrt(n)); every covariance entry within 4 of its standard errors
    sqrt((S_ii S_jj + S_ij^2) / n) (Gaussian draws)."""
    problem = _quadratic()
    means, covs = _exact_subs(problem)
    rng = np.random.default_rng(1)
    n = 100_000
    draws = np.stack([rng.multivariate_normal(m, s, size=(1, n)) for m, s in zip(means, covs)])
    combined, _ = combine(draws, np.linalg.inv(covs))
    mean, cov = (t.numpy() for t in problem.posterior())
    x = combined.reshape(-1, 2)
    assert np.all(np.abs(x.mean(0) - mean) <= 4 * np.sqrt(np.diag(cov) / n))
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(np.cov(x.T) - cov) <= 4 * se)


def _weight_error_sd(means, covs, n, reps=4000, seed=0):
    """The sd (over replications) of the combined mean and covariance that estimated weights give:
    each W_c the inverse sample covariance of n Gaussian draws of N(0, Sigma_c) (Wishart), the
    combined mean (sum W)^-1 sum W_c mu_c and covariance (sum W)^-1 (sum W_c Sigma_c W_c) (sum W)^-1."""
    rng = np.random.default_rng(seed)
    out_m, out_c = [], []
    for _ in range(reps):
        w = np.stack([np.linalg.inv(np.cov(rng.multivariate_normal(np.zeros(2), s, size=n).T)) for s in covs])
        total = np.linalg.inv(w.sum(0))
        out_m.append(total @ np.einsum("nij,nj->i", w, means))
        out_c.append(total @ np.einsum("nij,njk,nkl->il", w, covs, w) @ total)
    return np.std(out_m, axis=0), np.std(out_c, axis=0)


def test_consensus_with_nuts_samples_the_gaussian_posterior():
    """The whole run (NUTS on each client's sub-posterior, 2 chains x 300 draws after 150 warm-up,
    seed 0), combined once with the exact sub-posterior precisions and once with the estimated
    ones, against the closed-form posterior. Exact weights: the combined draws are a linear map
    of exact sub-posterior draws, so the error is Monte Carlo only: mean within 4 sd / sqrt(ESS),
    variances within 4 sd^2 sqrt(2 / ESS_sq) (ESS and ESS_sq: the combined draws' bulk ESS of the
    coordinate and of its centred square, diagnostics.ess). Estimated weights: plus 4 times the
    sd that the weights' estimation error adds (_weight_error_sd: Wishart replications with n the
    smallest ESS of the client's draws)."""
    import diagnostics as dg

    problem = _quadratic()
    means, covs = _exact_subs(problem)
    mean, cov = (t.numpy() for t in problem.posterior())
    sd = np.sqrt(np.diag(cov))
    exact = consensus_monte_carlo(problem, chains=2, draws=300, warmup=150, seed=0, weights=np.linalg.inv(covs))
    assert isinstance(exact, ConsensusResult) and exact.samples.shape == (2, 300, 2) and exact.rounds == 1
    assert exact.client_samples.shape == (3, 2, 300, 2) and exact.local == "nuts"
    assert (exact.floats_up, exact.floats_down) == (3 * 2 * 300 * 2, 3)
    assert exact.gradient_evaluations == sum(exact.evaluations_per_client) >= 3 * 2 * 450
    estimated, w = combine(exact.client_samples)  # the same draws, the weights estimated
    for samples, extra in ((exact.samples, (0.0, 0.0)), (estimated, None)):
        ess = dg.ess(samples)
        ess_sq = dg.ess((samples - mean) ** 2)
        if extra is None:
            n = int(min(dg.ess(exact.client_samples[c]).min() for c in range(3)))
            sd_m, sd_c = _weight_error_sd(means, covs, n)
            extra = (sd_m, np.diag(sd_c))
        x = samples.reshape(-1, 2)
        assert np.all(np.abs(x.mean(0) - mean) <= 4 * np.sqrt(sd**2 / ess + extra[0] ** 2)), (x.mean(0), mean)
        var_err = np.abs(x.var(0, ddof=1) - sd**2)
        assert np.all(var_err <= 4 * np.sqrt(2 * sd**4 / ess_sq + extra[1] ** 2)), (x.var(0), sd**2)
    np.testing.assert_allclose(np.linalg.inv(w), [np.cov(exact.client_samples[c].reshape(-1, 2).T) for c in range(3)])


def test_consensus_with_fald_locally_runs_and_counts():
    """local='fald': FALD with N = 1 on each sub-posterior; the draws are close to the exact sub-posterior
    (within 0.25 sub-posterior sd: FA-LD's step has its own small bias, and 4 chains x 200 draws
    give standard errors of about 0.05 sd) and the gradient evaluations are counted (R per round)."""
    problem = _quadratic()
    means, covs = _exact_subs(problem)
    res = consensus_monte_carlo(problem, chains=4, draws=200, warmup=200, seed=0, local="fald")
    assert res.samples.shape == (4, 200, 2) and res.local == "fald"
    for c in range(3):
        x = res.client_samples[c].reshape(-1, 2)
        assert np.all(np.abs(x.mean(0) - means[c]) <= 0.25 * np.sqrt(np.diag(covs[c])))
    assert all(e >= 4 * 400 for e in res.evaluations_per_client)
    posterior = res.to_arviz().posterior  # ArviZ-able like the other baselines' draws
    assert posterior["theta"].shape == (4, 200, 2)
    np.testing.assert_array_equal(posterior["theta"].values, res.samples)


def test_seeds_make_runs_reproducible():
    problem = _quadratic()
    a = consensus_monte_carlo(problem, chains=1, draws=20, warmup=10, seed=3)
    b = consensus_monte_carlo(problem, chains=1, draws=20, warmup=10, seed=3)
    np.testing.assert_array_equal(a.samples, b.samples)


@pytest.mark.parametrize("kwargs, match", [
    ({"chains": 0}, "chains must be an integer"), ({"draws": 0}, "draws must be an integer"),
    ({"warmup": 0}, "warmup must be an integer"), ({"seed": -1}, "seed must be an integer"),
    ({"seed": 2**32 - 3}, "seed must be an integer"), ({"local": "hmc"}, "local"),
    ({"temperature": 0.0}, "temperature"), ({"temperature": math.nan}, "temperature"),
    ({"dense_mass": "yes"}, "dense_mass"), ({"chains": 1, "draws": 2}, "draws: the weights"),
    ({"weights": np.eye(2)}, r"weights must have shape \(N, d, d\)"),
    ({"weights": -np.stack([np.eye(2)] * 3)}, "weights must be positive definite"),
    ({"weights": np.stack([[[1.0, 0.5], [0.0, 1.0]]] * 3)}, "weights must be finite symmetric"),
])
def test_bad_arguments_are_refused_before_any_sampling(kwargs, match):
    problem = _quadratic()
    calls = []
    original = problem.grad
    problem.grad = lambda *a, **k: calls.append(1) or original(*a, **k)
    with pytest.raises(ValueError, match=match):
        consensus_monte_carlo(problem, **kwargs)
    assert calls == []


@pytest.mark.parametrize("scale", [1e-200, 1e150, 1e200, 1e300])
def test_combine_is_equivariant_under_a_scale_of_the_draws_to_the_ends_of_float64(scale):
    """Combining draws x s gives the combination of x, times s (Scott et al.'s average is linear in the
    draws and W_c scales as 1/s^2, a common factor it does not depend on): finite and equal to
    rounding also where the draws' squares overflow (s = 1e200) or underflow (1e-200)."""
    x = np.random.default_rng(3).normal(size=(3, 2, 20, 2)) * np.array([1.0, 3.0])
    base, w0 = combine(x)
    combined, w = combine(x * scale)
    assert np.isfinite(combined).all() and np.isfinite(w).all()
    np.testing.assert_allclose(combined, base * scale, rtol=1e-12, atol=0)
    # the W_c used: the inverse sample covariances up to one common factor (1/s^2 where float64 holds it)
    np.testing.assert_allclose(w / w[0, 0, 0], w0 / w0[0, 0, 0], rtol=1e-12, atol=0)
    given = np.linalg.inv(np.stack([np.cov(c.reshape(-1, 2), rowvar=False) for c in x]))
    combined, used = combine(x * scale, given * 1e290)  # exact weights of any common scale
    np.testing.assert_array_equal(used, given * 1e290)
    np.testing.assert_allclose(combined, base * scale, rtol=1e-12, atol=0)


def test_bad_inputs_to_combine_and_sub_posterior():
    with pytest.raises(ValueError, match="client_draws must have shape"):
        combine(np.zeros((3, 10, 2)))
    with pytest.raises(ValueError, match="client_draws must be finite"):
        combine(np.full((2, 1, 5, 2), np.nan))
    with pytest.raises(ValueError, match="client_draws must hold real numbers"):  # was: could not convert string
        combine("abc")
    with pytest.raises(ValueError, match="weights must hold real numbers"):
        combine(np.zeros((2, 1, 5, 2)), [[["1", "0"], ["0", "1"]]] * 2)
    with pytest.raises(ValueError, match="chains x draws >= d \\+ 1"):
        combine(np.zeros((2, 1, 2, 2)))
    with pytest.raises(ValueError, match="singular sample covariance"):
        combine(np.zeros((2, 1, 10, 2)))
    with pytest.raises(ValueError, match="client must be an integer"):
        SubPosterior(_quadratic(), 3)
    with pytest.raises(ValueError, match="problem must be a fedlangevin FederatedProblem"):
        consensus_monte_carlo("gaussian")
    subset = fl.problems.GaussianSimulation(num_clients=3, alpha=1.0, seed=0).clients([0, 1])  # no energies
    with pytest.raises(ValueError, match="local='nuts' needs each client's energy"):
        consensus_monte_carlo(subset)


def test_docs_consensus_python_blocks_run():
    """docs/consensus.md: the example (one round, the floats counted, the errors printed) and the
    weights' estimation-error experiment (its table's rows; the page's table is its output)."""
    from pathlib import Path

    from tests.pages import python_blocks, run_block

    page = Path(__file__).resolve().parents[2] / "docs" / "consensus.md"
    example, experiment = python_blocks(page)
    lines = run_block(example, page).splitlines()
    assert lines[0] == "rounds: 1 floats up: 2400 down: 3" and lines[-1].startswith("sd ratio:")
    table = run_block(experiment, page).strip()
    assert table in page.read_text()  # the page shows what the block prints
