"""Minibatch gradients centred at a reference point (fedlangevin.problems.centred): exact on a
Gaussian (the per-example differences do not depend on the row), unbiased on a regression,
refused where per-example gradients are missing."""

from __future__ import annotations

import pytest
import torch

from fedlangevin.experiments.posteriordb import load
from fedlangevin.problems import GaussianSimulation, QuadraticProblem
from fedlangevin.problems.centred import CentredClients, CentredMinibatches


def test_centred_minibatches_are_the_full_gradient_on_a_gaussian():
    # grad l_i(theta) - grad l_i(theta*) = H (theta - theta*) for every row i: no minibatch noise is left
    problem = GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=12, seed=1)
    centred = CentredMinibatches(problem, torch.tensor([0.3, -0.2]))
    theta = torch.randn(5, 4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = centred.grad(theta, batch_size=3, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(got, problem.grad(theta), rtol=1e-10, atol=1e-8)
    torch.testing.assert_close(centred.grad(theta), problem.grad(theta), rtol=0, atol=0)


def test_centred_minibatches_are_unbiased_on_a_regression():
    problem = load("kilpisjarvi_mod-kilpisjarvi").problem
    centred = CentredMinibatches(problem, torch.zeros(problem.dim, dtype=torch.float64))
    theta = (torch.tensor([0.0, 0.01, 0.5], dtype=torch.float64)).expand(2000, problem.num_clients, 3).clone()
    draws = centred.grad(theta, batch_size=3, generator=torch.Generator().manual_seed(0))
    full = problem.grad(theta[:1])[0]
    # 2,000 independent minibatch draws per client: the mean is within 5 standard errors of the full gradient
    se = draws.std(0) / 2000 ** 0.5
    assert bool(((draws.mean(0) - full).abs() <= 5 * se + 1e-9).all())


def test_centred_minibatches_refuse_a_problem_without_rows():
    a = torch.eye(2, dtype=torch.float64)
    problem = QuadraticProblem(a.expand(2, 2, 2), torch.zeros(2, 2, dtype=torch.float64), [0.5, 0.5])
    with pytest.raises(ValueError, match="problem: centred minibatches need per-example gradients"):
        CentredMinibatches(problem, torch.zeros(2))
    with pytest.raises(ValueError, match=r"reference must be a finite vector of shape \(2,\)"):
        CentredMinibatches(GaussianSimulation(num_clients=2), torch.zeros(3))


def shared_hessian() -> QuadraticProblem:
    """Four 2-d clients with one Hessian and different shifts (their modes far apart), weights unequal."""
    a = torch.tensor([[2.0, 0.6], [0.6, 1.0]], dtype=torch.float64)
    b = torch.tensor([[4.0, -1.0], [-3.0, 2.0], [0.5, 3.0], [-1.0, -4.0]], dtype=torch.float64)
    return QuadraticProblem(a, b, [0.4, 0.3, 0.2, 0.1])


def test_centred_clients_give_every_client_the_global_gradient_on_a_shared_hessian():
    # grad f^c + c_c = A theta - b_c + (b_c - b_bar) = A theta - b_bar for every client, at any theta and any
    # reference: the clients' gradients agree, and their weighted sum is the problem's
    problem = shared_hessian()
    centred = CentredClients(problem, torch.tensor([0.7, -0.4]))
    theta = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = centred.grad(theta)
    b_bar = problem.weights.double() @ problem.shifts
    torch.testing.assert_close(got, theta @ problem.hessians.T - b_bar, rtol=1e-12, atol=1e-12)
    p = problem.weights.double()
    torch.testing.assert_close(torch.einsum("n,rnd->rd", p, got), torch.einsum("n,rnd->rd", p, problem.grad(theta)),
                               rtol=1e-12, atol=1e-12)
    assert not torch.allclose(problem.grad(theta)[:, 0], problem.grad(theta)[:, 1])  # the plain clients differ


def test_centred_clients_strength_zero_is_the_problem_and_bad_arguments_are_refused():
    problem = shared_hessian()
    theta = torch.randn(2, 4, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.equal(CentredClients(problem, torch.zeros(2), strength=0.0).grad(theta), problem.grad(theta))
    with pytest.raises(ValueError, match="reference must be a finite vector of shape"):
        CentredClients(problem, torch.zeros(3))
    with pytest.raises(ValueError, match="strength"):
        CentredClients(problem, torch.zeros(2), strength=1.5)
    # a problem without per-example gradients keeps its minibatches as they come (the client part still applies)
    assert CentredClients(problem, torch.zeros(2)).inner is problem


def test_centred_clients_centre_the_minibatches_of_a_problem_with_rows():
    # on a Gaussian the per-example differences do not depend on the row: the minibatch gradient plus the
    # client's constant is the full gradient plus it
    problem = GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=12, seed=1)
    centred = CentredClients(problem, torch.tensor([0.3, -0.2]))
    theta = torch.randn(5, 4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = centred.grad(theta, batch_size=3, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(got, centred.grad(theta), rtol=1e-10, atol=1e-8)
