"""Gaussian problems: the paper's simulation generator and its exact posterior."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlangevin.problems import PAPER_COV, CurvatureSimulation, GaussianSimulation, QuadraticProblem


def test_posterior_is_data_mean_and_sigma_over_n():
    """Sec. 7.1: the target is N(u, tau Sigma / n) with u the mean of all points."""
    prob = GaussianSimulation(num_clients=7, alpha=10.0, samples_per_client=[3, 5, 8, 2, 9, 4, 6], seed=4)
    x = torch.cat([prob.data[c, : int(n)] for c, n in enumerate(prob.client_sizes)])
    mean, cov = prob.posterior(temperature=0.5)
    torch.testing.assert_close(mean, x.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cov, 0.5 * prob.cov / x.shape[0], rtol=1e-12, atol=1e-15)


def test_client_gradient_is_scaled_negative_log_likelihood_gradient():
    """grad f^c = (1/p_c) sum_i Sigma^{-1}(theta - x_ci), checked against autograd."""
    prob = GaussianSimulation(num_clients=3, alpha=1.0, samples_per_client=[4, 6, 5], seed=0)
    theta = torch.randn(2, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    prec = torch.linalg.inv(prob.cov)
    for r in range(2):
        for c in range(3):
            t = theta[r, c].clone().requires_grad_(True)
            x = prob.data[c, : int(prob.client_sizes[c])]
            ell = 0.5 * torch.einsum("id,de,ie->", t - x, prec, t - x)
            (g,) = torch.autograd.grad(ell / prob.weights[c], t)
            torch.testing.assert_close(prob.grad(theta)[r, c], g, rtol=1e-10, atol=1e-10)


def test_centres_spread_with_alpha_and_heterogeneity_grows():
    gammas = [GaussianSimulation(num_clients=50, alpha=a, seed=1).heterogeneity for a in (0.0, 1.0, 100.0)]
    assert gammas[0] < gammas[1] < gammas[2]


def test_smoothness_and_convexity_are_extreme_eigenvalues():
    prob = GaussianSimulation(num_clients=5, samples_per_client=10, seed=0)
    ev = np.linalg.eigvalsh(np.linalg.inv(prob.cov.numpy())) * 50
    assert prob.smoothness == pytest.approx(ev.max(), rel=1e-12)
    assert prob.convexity == pytest.approx(ev.min(), rel=1e-12)


def test_prior_precision_shrinks_posterior():
    flat = GaussianSimulation(num_clients=5, samples_per_client=4, seed=0)
    shrunk = GaussianSimulation(num_clients=5, samples_per_client=4, seed=0, prior_precision=30.0)
    a = flat.global_hessian + 30.0 * torch.eye(2, dtype=torch.float64)
    torch.testing.assert_close(shrunk.posterior()[1], torch.linalg.inv(a))


def test_any_dimension_with_user_covariance():
    cov = torch.diag(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64))
    prob = GaussianSimulation(num_clients=4, samples_per_client=5, cov=cov, seed=0)
    assert prob.dim == 4 and prob.posterior()[1].shape == (4, 4)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(num_clients=0), "num_clients"),
        (dict(alpha=-1.0), "alpha"),
        (dict(samples_per_client=0), "samples_per_client"),
        (dict(samples_per_client=[3, 4]), "samples_per_client"),
        (dict(cov=[[1.0, 2.0], [2.0, 1.0]]), "cov"),
        (dict(cov=[[1.0, 0.5], [0.0, 1.0]]), "cov"),
        (dict(cov=[1.0, 2.0]), "cov"),
        (dict(prior_precision=-1.0), "prior_precision"),
    ],
)
def test_invalid_simulation_arguments(kwargs, name):
    base = dict(num_clients=3)
    base.update(kwargs)
    with pytest.raises(ValueError, match=name):
        GaussianSimulation(**base)


@pytest.mark.parametrize("kwargs, name, low", [(dict(num_clients=10**30), "num_clients", 2),
                                               (dict(samples_per_client=10**30), "samples_per_client", 1)])
def test_curvature_simulation_sizes_beyond_memory_are_refused_with_a_range(kwargs, name, low):
    """10**30 clients failed inside torch with its C++ frames: refused by name with the range
    that fits this machine's memory, before anything is allocated."""
    with pytest.raises(ValueError, match=rf"^{name} must be an integer in \[{low}, \d+\]") as info:
        CurvatureSimulation(**kwargs)
    assert "frame #" not in str(info.value) and "GiB of memory" in str(info.value)


@pytest.mark.parametrize(
    "weights,match",
    [([0.5, 0.6], "sum to 1"), ([1.2, -0.2], "> 0"), ([0.5, 0.5, 0.0], "one entry per client"), ([[0.5, 0.5]], "1-d")],
)
def test_invalid_weights(weights, match):
    with pytest.raises(ValueError, match="weights"):
        QuadraticProblem(np.eye(2), np.zeros((2, 2)), weights)


def test_invalid_quadratic_shapes():
    with pytest.raises(ValueError, match="hessians"):
        QuadraticProblem(np.eye(3), np.zeros((2, 2)), [0.5, 0.5])
    with pytest.raises(ValueError, match="shifts"):
        QuadraticProblem(np.eye(2), np.zeros(2), [0.5, 0.5])
    with pytest.raises(ValueError, match="positive definite"):
        QuadraticProblem(np.zeros((2, 2)), np.zeros((2, 2)), [0.5, 0.5])


def _reference_draw(num_clients, n_c, alpha, seed, spread=None):
    """The simulation's data as both generators drew it before they shared one draw
    (centres, then standard normals, from one generator): the bit-for-bit reference."""
    sigma = torch.tensor(PAPER_COV, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    centres = alpha**0.5 * torch.randn(num_clients, 2, generator=g, dtype=torch.float64)
    z = torch.randn(num_clients, n_c, 2, generator=g, dtype=torch.float64)
    chol = torch.linalg.cholesky(sigma)
    if spread is None:
        return centres, centres[:, None, :] + z @ chol.T
    scales = spread ** torch.linspace(-1.0, 1.0, num_clients, dtype=torch.float64)
    return centres, centres[:, None, :] + (z @ chol.T) * scales.sqrt()[:, None, None]


@pytest.mark.parametrize("seed", [0, 7])
def test_gaussian_and_curvature_simulations_share_one_data_draw_bit_for_bit(seed):
    centres, data = _reference_draw(6, 5, 3.0, seed)
    g = GaussianSimulation(num_clients=6, alpha=3.0, samples_per_client=5, seed=seed)
    assert torch.equal(g.centres, centres) and torch.equal(g.data, data)
    for spread in (1.0, 2.5):
        centres, data = _reference_draw(6, 5, 3.0, seed, spread)
        c = CurvatureSimulation(num_clients=6, alpha=3.0, samples_per_client=5, curvature_spread=spread, seed=seed)
        assert torch.equal(c.centres, centres) and torch.equal(c.client_means, data.mean(1))
    # the same seed gives both problems the same centres and the same point noise
    c = CurvatureSimulation(num_clients=6, alpha=3.0, samples_per_client=5, curvature_spread=1.0, seed=seed)
    torch.testing.assert_close(c.client_means, g.client_means, rtol=0, atol=1e-14)
