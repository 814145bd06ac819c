"""CustomProblem: a plain torch energy for one parameter vector and one batch, batched over
chains and clients by torch.func. Reference: the built-in Gaussian problem's closed-form
gradients (full batch and minibatch) and its FA-LD trajectories."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.problems import CustomProblem, GaussianSimulation

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors (tests/conftest.py)


def gaussian_as_custom(sim: GaussianSimulation, **kw) -> CustomProblem:
    """The simulation's model written as a user would: l(theta; x) = 1/2 (theta - x)^T Sigma^-1 (theta - x)
    summed over the batch, prior lambda |theta|^2 / 2."""
    prec = torch.linalg.inv(sim.cov)
    lam = sim.prior_precision

    def client_energy(theta, batch):
        r = theta - batch
        return 0.5 * ((r @ prec) * r).sum()

    def prior(theta):
        return 0.5 * lam * (theta * theta).sum()

    clients = [sim.data[c, : int(n)] for c, n in enumerate(sim.client_sizes)]
    return CustomProblem(client_energy, clients, prior=prior, dim=sim.dim, **kw)


def _theta(r, n, d, seed=0):
    return torch.randn(r, n, d, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.parametrize("sizes", [7, [3, 5, 8, 2, 9, 4]])
@pytest.mark.parametrize("vectorize", [None, False])
def test_reproduces_the_gaussian_problems_gradients(sizes, vectorize):
    """Full-batch gradients equal GaussianSimulation.grad (its closed form n Sigma^-1 (theta - xbar_c)
    + lambda theta) to float64 rounding, for equal and unequal client sizes; so do minibatch
    gradients drawn from the same seed (the same row indices)."""
    n = 6 if isinstance(sizes, int) else len(sizes)
    sim = GaussianSimulation(num_clients=n, alpha=3.0, samples_per_client=sizes, prior_precision=0.7, seed=3)
    prob = gaussian_as_custom(sim, vectorize=vectorize)
    theta = _theta(4, n, 2)
    torch.testing.assert_close(prob.grad(theta), sim.grad(theta), rtol=1e-12, atol=1e-11)
    got = prob.grad(theta, batch_size=2, generator=torch.Generator().manual_seed(5))
    ref = sim.grad(theta, batch_size=2, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-11)


def test_fald_on_the_custom_energy_follows_the_gaussian_problems_trajectory():
    """The engine's generic path on CustomProblem and its affine fast path on GaussianSimulation
    consume the same noise stream: equal draws to rounding (K = 3, rho = 0.4, scheme I)."""
    sim = GaussianSimulation(num_clients=5, alpha=1.0, samples_per_client=[4, 6, 5, 7, 3], prior_precision=0.2, seed=1)
    prob = gaussian_as_custom(sim)
    kw = dict(step_size=1e-3, local_steps=3, correlation=0.4, participation=fl.SchemeI(3), chains=4, seed=11)
    a = fl.FALD(prob, **kw).run(30).samples
    b = fl.FALD(sim, **kw).run(30).samples
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_dict_batches_distribution_prior_and_named_blocks():
    """Logistic regression on {"x", "y"} batches with a torch Normal prior; param_shapes names
    the blocks for constrain() / to_arviz()."""
    g = torch.Generator().manual_seed(0)
    clients = []
    for n in (6, 9):
        x = torch.randn(n, 3, generator=g, dtype=F64)
        clients.append({"x": x, "y": (x[:, 0] > 0).to(F64)})

    def nll(theta, batch):
        logits = batch["x"] @ theta[:3] + theta[3]
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["y"], reduction="sum")

    prior = torch.distributions.Normal(torch.zeros(4, dtype=F64), 2.0)
    prob = CustomProblem(nll, clients, prior=prior, param_shapes={"w": (3,), "b": ()})
    assert prob.dim == 4 and prob.parameter_names() == ["w[0]", "w[1]", "w[2]", "b"]
    theta = _theta(2, 2, 4, seed=1)
    got = prob.grad(theta)
    for r in range(2):
        for c, data in enumerate(clients):
            t = theta[r, c].clone().requires_grad_(True)
            f = nll(t, data) / prob.weights[c] - prior.log_prob(t).sum()
            (exp,) = torch.autograd.grad(f, t)
            torch.testing.assert_close(got[r, c], exp, rtol=1e-12, atol=1e-12)
    split = prob.constrain(np.arange(8.0).reshape(2, 4))
    np.testing.assert_array_equal(split["w"], [[0, 1, 2], [4, 5, 6]])
    np.testing.assert_array_equal(split["b"], [3, 7])


def test_nan_energy_at_the_start_is_a_clear_error():
    def log_energy(theta, batch):  # log of a parameter that starts at 0
        return -(torch.log(theta[0]) * batch).sum()

    clients = [torch.ones(3, dtype=F64), torch.ones(4, dtype=F64)]
    with pytest.raises(ValueError, match=r"not finite at the initial point.*client_energy"):
        CustomProblem(log_energy, clients, dim=1)
    CustomProblem(log_energy, clients, init=[1.0])  # fine inside the domain


@pytest.mark.parametrize("kwargs, name", [(dict(dim=10**30), "dim"),
                                          (dict(param_shapes={"w": (10**15, 10**15)}), "param_shapes")])
def test_dimension_beyond_memory_is_refused_by_name(kwargs, name):
    """dim=10**30 failed inside torch.zeros with its C++ frames: refused by name with the range
    that fits this machine's memory, before anything is allocated."""
    clients = [torch.ones(3, 2, dtype=F64)] * 2
    with pytest.raises(ValueError, match=rf"^{name}.* must be an integer in \[1, \d+\]") as info:
        CustomProblem(lambda t, b: (t**2).sum() * b.sum(), clients, **kwargs)
    assert "frame #" not in str(info.value)


def test_non_scalar_energy_and_argument_errors():
    clients = [torch.ones(3, 2, dtype=F64)]
    with pytest.raises(ValueError, match="scalar"):
        CustomProblem(lambda t, b: (t - b).pow(2), clients, dim=2)  # forgot the sum
    energy = lambda t, b: ((t - b) ** 2).sum()  # noqa: E731
    with pytest.raises(ValueError, match="dim=, param_shapes= or init="):
        CustomProblem(energy, clients)
    with pytest.raises(ValueError, match="disagree"):
        CustomProblem(energy, clients, dim=3, init=[0.0, 0.0])
    with pytest.raises(ValueError, match="var_names"):
        CustomProblem(energy, clients, dim=2, var_names=["a"])
    with pytest.raises(ValueError, match="prior"):
        CustomProblem(energy, clients, dim=2, prior=3.0)
    with pytest.raises(ValueError, match="non-finite"):
        CustomProblem(energy, [torch.tensor([[0.0, float("nan")]])], dim=2)
    with pytest.raises(ValueError, match="weights"):
        CustomProblem(energy, clients + clients, dim=2, weights=[0.5, 0.6])
    prob = CustomProblem(energy, clients, dim=2)
    with pytest.raises(ValueError, match="theta must have shape"):
        prob.grad(torch.zeros(2, 2, 2, dtype=F64))


def test_energy_vmap_cannot_run_falls_back_with_a_warning():
    def branchy(theta, batch):  # Python control flow on a tensor value
        if theta.sum() > 100:
            return (theta**4).sum()
        return 0.5 * ((theta - batch) ** 2).sum()

    clients = [torch.randn(n, 2, generator=torch.Generator().manual_seed(n), dtype=F64) for n in (3, 5)]
    with pytest.warns(RuntimeWarning, match="falling back"):
        prob = CustomProblem(branchy, clients, dim=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref = CustomProblem(lambda t, b: 0.5 * ((t - b) ** 2).sum(), clients, dim=2)
    theta = _theta(3, 2, 2)
    torch.testing.assert_close(prob.grad(theta), ref.grad(theta), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="vectorize=True"):
        CustomProblem(branchy, clients, dim=2, vectorize=True)


def test_an_error_in_the_users_energy_is_reported_before_any_vmap():
    def wrong_shapes(theta, batch):
        return (batch @ theta).sum()  # batch is (n, 2), theta (3,)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no misleading "vmap cannot run" warning first
        with pytest.raises(ValueError, match="evaluating the energy on client 0's data at the initial point failed"):
            CustomProblem(wrong_shapes, [torch.ones(4, 2, dtype=F64)], dim=3)


def _positive_regression(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    clients = []
    for n in sizes:
        x = torch.randn(n, 3, generator=g, dtype=torch.float64)
        y = torch.exp(0.3 * x[:, 0] + 0.2 * torch.randn(n, generator=g, dtype=torch.float64))
        clients.append({"x": x, "y": y})
    return clients


def _lognormal_energy(theta, batch):
    resid = torch.log(batch["y"]) - batch["x"] @ theta[:3]
    return 0.5 * (resid * resid).sum() * torch.exp(-2 * theta[3]) + batch["y"].shape[0] * theta[3]


def test_rowwise_energy_takes_one_call_for_clients_of_different_sizes():
    """rowwise=True: five clients of five sizes in one vectorised call (padding masked row by row)
    instead of five; energies and gradients equal the grouped path's to rounding (sums in another
    order)."""
    clients = _positive_regression([7, 3, 12, 5, 9])
    kw = dict(prior=lambda t: 0.5 * (t * t).sum(), dim=4)
    grouped = CustomProblem(_lognormal_energy, clients, **kw)
    rowwise = CustomProblem(_lognormal_energy, clients, rowwise=True, **kw)
    assert len(grouped._full_groups()) == 5 and len(rowwise._full_groups()) == 1
    theta = 0.3 * torch.randn(4, 5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    g = rowwise.grad(theta)
    assert bool(torch.isfinite(g).all())
    torch.testing.assert_close(g, grouped.grad(theta), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rowwise.energy(theta), grouped.energy(theta), rtol=1e-12, atol=1e-12)
    # minibatches have equal sizes: the same draws and numbers either way
    gen = lambda: torch.Generator().manual_seed(2)  # noqa: E731
    torch.testing.assert_close(rowwise.grad(theta, batch_size=2, generator=gen()),
                               grouped.grad(theta, batch_size=2, generator=gen()), rtol=1e-12, atol=1e-12)


def test_rowwise_must_be_a_bool():
    with pytest.raises(ValueError, match="rowwise must be True or False"):
        CustomProblem(_lognormal_energy, _positive_regression([3, 4]), dim=4, rowwise="yes")


@pytest.mark.parametrize("energy", [
    lambda t, b: 3,  # a constant: FA-LD sampled a flat target (pure noise) silently
    lambda t, b: torch.tensor(3.0, dtype=F64),
    lambda t, b: b.sum(),  # the data alone
    lambda t, b: ((t.detach() - b) ** 2).sum(),  # theta cut off from autograd
])
@pytest.mark.parametrize("prior", [None, lambda t: 0.5 * (t * t).sum()])
def test_an_energy_that_does_not_depend_on_theta_is_refused(energy, prior):
    """With a likelihood that ignores theta the sampler draws from the prior (or a flat target)
    whatever the data: refused at construction, naming client_energy."""
    clients = [torch.ones(3, 2, dtype=F64), torch.ones(4, 2, dtype=F64)]
    with pytest.raises(ValueError, match="client_energy.* does not depend on theta"):
        CustomProblem(energy, clients, dim=2, prior=prior)
    # an energy that depends on theta but not on the data is a valid (if odd) model
    CustomProblem(lambda t, b: (t * t).sum(), clients, dim=2, prior=prior)


@pytest.mark.parametrize("sizes", [7, [3, 5, 8, 2, 9, 4]])
def test_hessian_vector_products_by_torch_func_are_the_exact_hessians(sizes):
    """client_hvp (torch.func.jvp of the vectorised gradient) equals the Gaussian's exact client
    Hessians A_c v (n Sigma^-1 + lambda I, every client) to float64 rounding; without vmap there is
    none (central differences), and the curvature module's difference takes the exact one."""
    from fedlangevin.warmup.curvature import gradient_difference

    n = 6 if isinstance(sizes, int) else len(sizes)
    sim = GaussianSimulation(num_clients=n, alpha=3.0, samples_per_client=sizes, prior_precision=0.7, seed=3)
    prob = gaussian_as_custom(sim)
    theta, v = _theta(3, n, 2), _theta(3, n, 2, seed=1)
    form = sim.quadratic()
    hess = form.hessian if form.shared else None
    want = v @ hess.T if hess is not None else torch.einsum("nij,rnj->rni", form.hessian, v)
    torch.testing.assert_close(prob.client_hvp(theta, v), want, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(gradient_difference(prob, theta, 1e-3 * v), 2e-3 * want, rtol=1e-12, atol=1e-10)
    assert gaussian_as_custom(sim, vectorize=False).client_hvp(theta, v) is None
