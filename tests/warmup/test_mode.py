"""init="map": the federated damped-Newton mode search (fald/mode.py)."""

from __future__ import annotations

import pytest
import torch

import fedlangevin as fl
from fedlangevin.warmup.mode import find_map

pytestmark = pytest.mark.usefixtures("one_torch_thread")
F64 = torch.float64


def _logistic():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(3, 4, generator=g, dtype=F64)
    clients = []
    for m in (30, 40, 50):
        x = torch.randn(m, 4, generator=g, dtype=F64)
        y = torch.multinomial(torch.softmax(x @ w.T, dim=1), 1, generator=g).squeeze(1)  # seeded: the same data
        clients.append((x, y))
    return fl.problems.LogisticRegression(clients, num_classes=3)


def test_quadratic_mode_in_two_rounds():
    problem = fl.problems.GaussianSimulation(num_clients=5, alpha=1.0, samples_per_client=10, seed=0)
    res = find_map(problem)
    mean, _ = problem.posterior()
    torch.testing.assert_close(res.theta, mean, rtol=1e-8, atol=1e-8)
    assert res.converged and res.rounds <= 3
    d, n = problem.dim, problem.num_clients
    # each round a client sends its gradient, its Hessian (d (d + 1) / 2) and its energy (1)
    assert res.floats_down == res.rounds * n * d and res.floats_up == res.rounds * n * (d + d * (d + 1) // 2 + 1)


def test_logistic_mode_matches_the_centralised_optimiser():
    problem = _logistic()
    res = find_map(problem)
    assert res.converged and res.rounds < 50
    torch.testing.assert_close(res.theta, problem.mode().to(F64), rtol=1e-5, atol=1e-6)


def test_sampler_starts_at_the_map_and_counts_its_communication():
    problem = _logistic()
    sampler = fl.FALD(problem, step_size=1e-3, chains=3, seed=0, init="map")
    assert torch.equal(sampler.state.theta, sampler.map_result.theta.expand(3, -1))
    before = fl.FALD(problem, step_size=1e-3, chains=3, seed=0).communication
    assert sampler.communication.floats_up == before.floats_up + sampler.map_result.floats_up
    assert sampler.communication.floats_down == before.floats_down + sampler.map_result.floats_down
    assert sampler.ledger["map_rounds"] == sampler.map_result.rounds


def test_bad_init_string_is_a_value_error():
    with pytest.raises(ValueError, match="init"):
        fl.FALD(_logistic(), step_size=1e-3, init="mode")
