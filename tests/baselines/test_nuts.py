"""Federated NUTS (fedlangevin/baselines/nuts.py): the rounds it counts are the evaluations Pyro made,
it samples a Gaussian posterior right, and bad arguments are refused before any round."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.problems.base import FederatedProblem

pytest.importorskip("pyro")
from fedlangevin.baselines import NUTSResult, RoundCounter, RoundLimitError, federated_nuts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Counting(FederatedProblem):
    """A Gaussian problem that counts the queries made to it: ``grads`` (the theta of every grad
    call) and ``energies`` (calls of its energy)."""

    def __init__(self, inner):
        self.inner, self.num_clients, self.dim, self.weights = inner, inner.num_clients, inner.dim, inner.weights
        self.grads, self.energies = [], 0

    def grad(self, theta, *, batch_size=None, generator=None):
        self.grads.append(theta.clone())
        return self.inner.grad(theta, batch_size=batch_size, generator=generator)

    def energy(self, theta):
        self.energies += 1
        return self.inner.energy(theta)

    def quadratic(self):
        return self.inner.quadratic()

    def to(self, device=None, dtype=None):
        return self  # one set of counts, whatever the copy


def _gaussian(num_clients=4):
    return fl.problems.GaussianSimulation(num_clients=num_clients, alpha=1.0, seed=0)


def test_rounds_counted_equal_the_energy_and_gradient_evaluations_pyro_made(monkeypatch):
    """Pyro's NUTS is replaced by a subclass that counts its calls of potential_fn (each is one
    energy-and-gradient evaluation: Pyro's setup, its initial step-size search and every leapfrog
    step): the rounds reported, the problem's grad calls, its energy calls and Pyro's calls agree,
    per chain and in total, and every query is one broadcast theta (1, N, d), the same for every client."""
    import pyro.infer
    from pyro.infer import NUTS

    calls = []

    class CountingNUTS(NUTS):
        def __init__(self, potential_fn, **kwargs):
            def counted(z):
                calls.append(1)
                return potential_fn(z)

            super().__init__(potential_fn=counted, **kwargs)

    monkeypatch.setattr(pyro.infer, "NUTS", CountingNUTS)
    problem = Counting(_gaussian())
    result = federated_nuts(problem, chains=2, draws=30, warmup=20, seed=3)
    assert result.rounds == len(calls) == len(problem.grads) == problem.energies
    assert sum(result.rounds_per_chain) == result.rounds and len(result.rounds_per_chain) == 2
    for theta in problem.grads:
        assert theta.shape == (1, problem.num_clients, problem.dim) and bool((theta == theta[:, :1]).all())
    # each kept draw costs at least one leapfrog step (one round) and at most 2**10 - 1 (tree depth 10)
    for total, warm in zip(result.rounds_per_chain, result.warmup_rounds_per_chain):
        assert 20 <= warm and 30 <= total - warm <= 30 * (2**10 - 1)
    n, d = problem.num_clients, problem.dim
    assert (result.floats_down, result.floats_up) == (result.rounds * n * d, result.rounds * n * (d + 1))


def test_warmup_rounds_are_the_rounds_before_the_first_kept_draw(monkeypatch):
    """With a hook of our own counting the rounds when Pyro's warm-up ends (its last warm-up
    iteration), the warm-up rounds reported are those."""
    from pyro.infer import mcmc as pyro_mcmc

    problem = Counting(_gaussian())
    seen = []
    original = pyro_mcmc.api.MCMC.__init__

    def init(self, kernel, *args, hook_fn=None, **kwargs):
        def hook(kernel_, params, stage, i):
            if stage.startswith("Sample") and i == 0:
                seen.append(len(problem.grads))  # after the first kept draw
            if stage.startswith("Warmup"):
                seen.append(-len(problem.grads))
            hook_fn(kernel_, params, stage, i)

        original(self, kernel, *args, hook_fn=hook, **kwargs)

    monkeypatch.setattr(pyro_mcmc.api.MCMC, "__init__", init)
    result = federated_nuts(problem, chains=1, draws=5, warmup=10, seed=0)
    last_warmup = -min(s for s in seen if s <= 0)
    assert result.warmup_rounds_per_chain == (last_warmup,)
    assert max(seen) > last_warmup  # the first kept draw took rounds of its own


def test_nuts_on_a_gaussian_problem_gets_the_exact_mean_and_sd():
    """Exact posterior N(m, S) of a Gaussian problem (d = 2, correlated, 4 clients), dense mass
    matrix, 2 chains x 400 draws after 300 warm-up. The Monte Carlo standard error of a mean is
    sd / sqrt(ESS) and of an sd, for Gaussian draws, sd / sqrt(2 ESS) (ESS: the run's own bulk
    ESS per coordinate); the test allows 4 standard errors."""
    import diagnostics as dg

    problem = _gaussian()
    mean, cov = problem.posterior()
    result = federated_nuts(problem, chains=2, draws=400, warmup=300, seed=0, dense_mass=True)
    assert isinstance(result, NUTSResult) and result.samples.shape == (2, 400, 2) and result.divergences == (0, 0)
    ess = dg.ess(result.samples)
    assert result.min_ess_bulk() == pytest.approx(ess.min()) and ess.min() > 100
    assert result.ess_per_round() == pytest.approx(ess.min() / result.rounds)
    flat = result.samples.reshape(-1, 2)
    sd = cov.diagonal().sqrt().numpy()
    assert np.all(np.abs(flat.mean(0) - mean.numpy()) <= 4 * sd / np.sqrt(ess))
    assert np.all(np.abs(flat.std(0, ddof=1) / sd - 1) <= 4 / np.sqrt(2 * ess))


def test_the_same_seed_gives_the_same_draws_and_the_global_generators_are_restored():
    problem = _gaussian()
    torch.manual_seed(123)
    np.random.seed(7)
    a = federated_nuts(problem, chains=1, draws=10, warmup=10, seed=5, init=[0.1, -0.2])
    after_torch, after_np = torch.rand(1), np.random.rand()
    torch.manual_seed(123)
    np.random.seed(7)
    assert (torch.rand(1) == after_torch).all() and np.random.rand() == after_np
    b = federated_nuts(problem, chains=1, draws=10, warmup=10, seed=5, init=[0.1, -0.2])
    np.testing.assert_array_equal(a.samples, b.samples)
    assert a.rounds_per_chain == b.rounds_per_chain


def test_max_rounds_stops_the_run_at_exactly_that_many_rounds():
    """A cost cap: with max_rounds below what the run needs, the clients answer exactly max_rounds
    queries and the run stops with RoundLimitError naming the chain; a cap the run stays under
    changes nothing (same draws, same rounds)."""
    free = federated_nuts(_gaussian(), chains=2, draws=10, warmup=10, seed=1)
    problem = Counting(_gaussian())
    cap = free.rounds_per_chain[0] + 3  # inside the second chain
    with pytest.raises(RoundLimitError, match=f"max_rounds = {cap:,} rounds \\(in chain 1\\)") as err:
        federated_nuts(problem, chains=2, draws=10, warmup=10, seed=1, max_rounds=cap)
    assert err.value.rounds == cap == len(problem.grads) and err.value.chain == 1 and err.value.seconds > 0
    capped = federated_nuts(_gaussian(), chains=2, draws=10, warmup=10, seed=1, max_rounds=free.rounds)
    np.testing.assert_array_equal(capped.samples, free.samples)
    assert capped.rounds_per_chain == free.rounds_per_chain


def test_round_counter_sums_the_clients_answers():
    problem = _gaussian()
    counter = RoundCounter(problem)
    theta = torch.tensor([0.3, -0.7], dtype=torch.float64)
    energy, grad = counter.query(theta)
    assert counter.rounds == 1 and energy == pytest.approx(float(problem.energy(theta)))
    a, b = problem.global_hessian.double(), problem.global_shift.double()
    torch.testing.assert_close(grad, a @ theta - b)  # grad f = A theta - b, f = sum_c p_c f^c
    x = theta.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(counter.potential(x), x)
    torch.testing.assert_close(g, grad)
    assert counter.rounds == 2


@pytest.mark.parametrize("kwargs, match", [
    ({"chains": 0}, "chains must be an integer"),
    ({"draws": 0}, "draws must be an integer"),
    ({"warmup": 0}, "warmup must be an integer"),
    ({"warmup": 2.5}, "warmup must be an integer"),
    ({"seed": -1}, "seed must be an integer"),
    ({"seed": 2**32}, "seed must be an integer"),
    ({"target_accept": 1.0}, "target_accept must be a finite real number in"),
    ({"target_accept": 0.0}, "target_accept must be a finite real number in"),
    ({"target_accept": math.nan}, "target_accept must be a finite real number"),
    ({"max_tree_depth": 0}, "max_tree_depth must be an integer"),
    ({"max_rounds": 0}, "max_rounds must be an integer"),
    ({"max_rounds": math.nan}, "max_rounds must be an integer"),
    ({"dense_mass": "yes"}, "dense_mass"),
    ({"init": [0.0, 0.0, 0.0]}, r"init must have shape \(d,\) = \(2,\)"),
    ({"init": [math.nan, 0.0]}, "init must be finite"),
    ({"draws": 10**12}, "chains, draws: keeping 4 chains x 1000000000000 draws"),  # ran until killed
    ({"chains": 10**9}, "chains, draws: keeping 1000000000 chains"),
])
def test_bad_arguments_are_refused_before_any_round(kwargs, match):
    problem = Counting(_gaussian())
    with pytest.raises(ValueError, match=match):
        federated_nuts(problem, **kwargs)
    assert problem.grads == [] and problem.energies == 0


def test_a_start_where_the_energy_is_not_finite_is_refused_naming_init():
    """U(1e300, 0) overflows: Pyro failed inside its first trajectory with a raw RuntimeError. Pyro's
    first round of a chain is at its start: the run stops there."""
    problem = Counting(_gaussian())
    with pytest.raises(ValueError, match="init: the energy or its gradient at the start of chain 0 is not finite"):
        federated_nuts(problem, chains=2, draws=5, warmup=5, init=[1e300, 0.0])
    assert len(problem.grads) == 1
    with pytest.raises(ValueError, match="init: the energy or its gradient at the start of chain 1 is not finite"):
        federated_nuts(_gaussian(), chains=2, draws=5, warmup=5, init=[[0.0, 0.0], [1e300, 0.0]])


def test_a_single_draw_per_chain_is_a_result():
    """draws=1: Pyro's diagnostics (an ESS) need two draws; the divergences are read without them."""
    one = federated_nuts(_gaussian(), chains=2, draws=1, warmup=5, seed=3)
    more = federated_nuts(_gaussian(), chains=2, draws=3, warmup=5, seed=3)
    assert one.samples.shape == (2, 1, 2) and len(one.divergences) == 2
    np.testing.assert_array_equal(one.samples[:, 0], more.samples[:, 0])  # the same chain, cut after one draw


def test_round_counter_refuses_a_theta_of_another_size_by_name():
    counter = RoundCounter(_gaussian())
    for theta in (torch.zeros(3, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64), [0.0, 0.0]):
        with pytest.raises(ValueError, match="theta must be a tensor of d = 2 entries"):
            counter.query(theta)
    assert counter.rounds == 0


def test_a_problem_without_energies_is_refused():
    with pytest.raises(ValueError, match="problem: federated NUTS needs the clients' energies"):
        federated_nuts(_gaussian().clients([0, 1]))
    with pytest.raises(ValueError, match="problem must be a fedlangevin FederatedProblem"):
        federated_nuts("gaussian")


def test_docs_baselines_python_block_runs():
    from tests.pages import python_blocks, run_block

    page = Path(__file__).resolve().parents[2] / "docs" / "baselines.md"
    (code,) = python_blocks(page)
    lines = run_block(code, page).splitlines()
    assert lines[0].startswith("rounds per chain") and lines[-1].startswith("mean error")


def test_a_problem_whose_gradient_uses_autograd_works_inside_pyros_potential():
    """Autograd switches grad mode off inside a custom Function's forward; the round turns it back
    on, so a problem computing grad f^c with torch.autograd.grad (as users write them) works."""

    class AutogradGaussian(Counting):
        def grad(self, theta, *, batch_size=None, generator=None):
            x = theta.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(self.inner.client_energies(x).sum(), x)
            return g

    inner = _gaussian()
    a, b = inner.hessians.double(), inner.shifts.double()
    inner.client_energies = lambda x: 0.5 * torch.einsum("rnd,de,rne->rn", x, a, x) - (x * b).sum(-1)
    result = federated_nuts(AutogradGaussian(inner), chains=1, draws=5, warmup=5, seed=0)
    assert result.samples.shape == (1, 5, 2) and np.isfinite(result.samples).all()
