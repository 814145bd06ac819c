"""One client's FA-HMC round (fedlangevin/fahmc/client.py), what a Flower node runs: with one
generator and N = 1 it is the kernel's round bit for bit; rounds of per-client streams averaged
by a server have the exact law of fedlangevin/fahmc/exact.py within Monte Carlo error; bad
arguments are refused by name before any work."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.fahmc import build
from fedlangevin.fahmc.client import client_round
from fedlangevin.fahmc.exact import exact_moments
from fedlangevin.federation.participation import as_participation, synchronize
from fedlangevin.federation.streams import participation_stream, private_stream, shared_stream
from fedlangevin.problems import GaussianSimulation
from tests.fahmc.test_kernel import THETA0, assert_within_mc_error, heterogeneous

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
@pytest.mark.parametrize("batch_size,pre", [(None, None), (5, [0.5, 2.0]), (None, [[0.5, 0.1], [0.1, 0.3]])])
def test_one_generator_and_one_client_is_the_kernels_round_bit_for_bit(splitting, batch_size, pre):
    """N = 1, the same generator for the shared and the private streams: the kernel draws the same
    numbers in the same order (minibatch, shared normals, private normals per step), and its
    average over one client with weight 1 is the client's state itself."""
    problem = GaussianSimulation(num_clients=1, seed=0)
    kernel = build(problem, correlation=0.5, friction=0.7, splitting=splitting, batch_size=batch_size,
                   preconditioner=pre)
    state = kernel.init(torch.randn(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    state, _ = kernel.step(state, [0.1] * 3, torch.Generator().manual_seed(1))  # a non-zero velocity
    theta, v = state.theta.clone(), state.momentum.clone()
    new, _ = kernel.step(state, [0.1, 0.05, 0.1, 0.1], torch.Generator().manual_seed(2))
    gen = torch.Generator().manual_seed(2)
    x, u = client_round(problem, state.theta, state.momentum, [0.1, 0.05, 0.1, 0.1], weight=1.0, friction=0.7,
                        splitting=splitting, correlation=0.5, batch_size=batch_size, preconditioner=pre,
                        shared_generator=gen, private_generator=gen)
    assert torch.equal(x, new.theta) and torch.equal(u, new.momentum)
    assert torch.equal(state.theta, theta) and torch.equal(state.momentum, v)  # the inputs are not modified


def per_client_rounds(problem, rounds: int, k: int, h: float, chains: int, seed: int, *, rho: float,
                      participation=None, friction: float = 1.0, splitting: str = "BAOAB",
                      private_seed: int | None = None) -> np.ndarray:
    """(R, rounds, 2d): a server's rounds over per-client streams, by hand: the participation draw of
    (seed, t), each sampled client's client_round from the broadcast (theta, v) with the shared
    stream of (seed, t) and its private stream of (private_seed, c, t) (default: seed) and the rule's
    noise weight q_c, theta and v averaged with the weights."""
    private_seed = seed if private_seed is None else private_seed
    rule = as_participation(participation)
    n, d = problem.num_clients, problem.dim
    theta = torch.tensor(THETA0, dtype=torch.float64).expand(chains, d).clone()
    v = torch.zeros_like(theta)
    p = problem.weights.to(torch.float64)
    q = rule.noise_weights(p)  # the private noise's weights (the rule's calibrated noise; p for full participation)
    out = []
    for t in range(rounds):
        w = rule.weights(p, chains, participation_stream(seed, t))
        taking_part = ((w != 0) if w.dim() == 1 else (w != 0).any(dim=0)).nonzero().flatten().tolist()
        xs, us = torch.zeros(chains, n, d, dtype=torch.float64), torch.zeros(chains, n, d, dtype=torch.float64)
        for c in taking_part:
            xs[:, c], us[:, c] = client_round(problem.clients([c]), theta, v, [h] * k, weight=float(p[c]),
                                              noise_weight=float(q[c]), friction=friction, splitting=splitting, correlation=rho,
                                              shared_generator=shared_stream(seed, t),
                                              private_generator=private_stream(private_seed, c, t))
        theta, v = synchronize(xs, w), synchronize(us, w)
        out.append(torch.cat([theta, v], 1).numpy())
    return np.stack(out, 1)


@pytest.mark.parametrize("k,rho,rule", [(1, 0.0, "full"), (5, 0.5, "full"), (5, 0.5, "I"), (3, 0.0, "II")])
def test_per_client_streams_have_the_exact_law(k, rho, rule):
    """R = 4000 chains, 6 rounds (h = 0.2, gamma = 1) of the per-client layout (what the Flower server
    runs, bit for bit: tests/flower): every round's mean and covariance of the stacked (theta, v)
    match fahmc.exact within Monte Carlo error (z < 5, see assert_within_mc_error: a false failure
    has probability 5.7e-7 per comparison)."""
    participation = {"full": None, "I": fl.SchemeI(2), "II": fl.SchemeII(2)}[rule]
    problem = heterogeneous(balanced=rule == "II")
    x = per_client_rounds(problem, 6, k, 0.2, 4000, seed=3 + k, rho=rho, participation=participation)
    means, covs = exact_moments(problem, [[0.2] * k] * 6, 1.0, correlation=rho, participation=participation,
                                init_mean=THETA0)
    assert_within_mc_error(x, means, covs)


def test_obabo_per_client_rounds_have_the_exact_law():
    problem = heterogeneous()
    x = per_client_rounds(problem, 5, 3, 0.25, 4000, seed=9, rho=0.5, friction=2.0, splitting="OBABO")
    means, covs = exact_moments(problem, [[0.25] * 3] * 5, 2.0, correlation=0.5, splitting="OBABO", init_mean=THETA0)
    assert_within_mc_error(x, means, covs)


def _call(**changes):
    problem = GaussianSimulation(num_clients=2, seed=0)
    args = dict(problem=problem.clients([0]), theta=torch.zeros(2, 2, dtype=torch.float64),
                momentum=torch.zeros(2, 2, dtype=torch.float64), step_sizes=[0.1], weight=0.5, friction=1.0,
                shared_generator=None, private_generator=None)
    args.update(changes)
    return client_round(**args)


@pytest.mark.parametrize("changes,name", [
    ({"friction": 0.0}, "friction"), ({"friction": -1.0}, "friction"), ({"friction": math.nan}, "friction"),
    ({"friction": math.inf}, "friction"), ({"friction": "auto"}, "friction"), ({"friction": "1.0"}, "friction"),
    ({"splitting": "ABOBA"}, "splitting"), ({"weight": 0.0}, "weight"), ({"weight": 1.5}, "weight"),
    ({"temperature": 0.0}, "temperature"), ({"correlation": 2.0}, "correlation"),
    ({"problem": GaussianSimulation(num_clients=2, seed=0)}, "problem"),
    ({"momentum": torch.zeros(3, 2, dtype=torch.float64)}, "momentum"),
    ({"theta": torch.zeros(2, 3, dtype=torch.float64), "momentum": torch.zeros(2, 3, dtype=torch.float64)}, "theta"),
    ({"preconditioner": [1.0, -1.0]}, "preconditioner"), ({"noise_weight": 0.0}, "noise_weight"),
    ({"noise_weight": math.nan}, "noise_weight"),
])
def test_bad_arguments_are_refused_by_name(changes, name):
    with pytest.raises(ValueError, match=name):
        _call(**changes)
