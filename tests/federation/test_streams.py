"""Per-client random streams (fedlangevin.federation.streams, FALD(streams="per_client")): the law of
FA-LD is unchanged, the step-by-step (replay) path equals the round path, runs resume bit for
bit, bad arguments are refused."""

import pytest
import torch

import fedlangevin as fl
from fedlangevin.experiments.exact import exact_moments
from fedlangevin.fald import SchemeI, SchemeII
from fedlangevin.fald.per_client import build_per_client
from fedlangevin.federation.streams import private_stream, shared_stream, stream_seed
from tests.targets import assert_moments_within_mc_error


@pytest.mark.parametrize("rule", [None, SchemeI(2), SchemeII(2)])
def test_per_client_streams_keep_the_exact_law(rule):
    """Mean and covariance of R = 4,000 chains after each round within 5 Monte Carlo standard
    errors of the exact moments (mean: sqrt(var / R); covariance entries:
    sqrt((S_ii S_jj + S_ij^2) / R), the Gaussian formula: the law is Gaussian given the draws
    and a small mixture over participation draws)."""
    problem = fl.problems.GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=6, seed=3)
    eta, k, rounds, r, rho = 0.3 / problem.smoothness, 2, 3, 4_000, 0.5
    means, covs = exact_moments(problem, [[eta] * k] * rounds, 1.0, rho, rule)
    trace = fl.FALD(problem, step_size=eta, local_steps=k, chains=r, seed=4, correlation=rho, participation=rule,
                    streams="per_client").run(rounds)
    assert_moments_within_mc_error(trace.numpy(), means, covs)


def test_step_by_step_path_equals_the_round_path():
    problem = fl.problems.GaussianSimulation(num_clients=3, seed=0)
    kernel = build_per_client(problem, correlation=0.3, participation=SchemeI(2), seed=9)
    state = kernel.init(torch.randn(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
    seen = []
    a, _ = kernel.step(state, [1e-3, 2e-3, 1e-3], None)
    b, _ = kernel.step(state, [1e-3, 2e-3, 1e-3], None, on_step=lambda i, beta: seen.append(i))
    assert torch.equal(a.theta, b.theta) and seen == [0, 1, 2]


def test_streams_are_distinct_and_reproducible():
    seeds = {stream_seed(1, tag, t, c) for tag in (1, 2, 3) for t in range(5) for c in range(5)}
    assert len(seeds) == 75 and all(0 <= s < 2**63 for s in seeds)
    assert torch.equal(torch.randn(3, generator=shared_stream(1, 2)), torch.randn(3, generator=shared_stream(1, 2)))
    assert not torch.equal(torch.randn(3, generator=private_stream(1, 0, 2)),
                           torch.randn(3, generator=private_stream(1, 1, 2)))


def test_per_client_run_resumes_bit_for_bit(tmp_path):
    problem = fl.problems.GaussianSimulation(num_clients=3, seed=0)
    kw = dict(step_size=1e-3, local_steps=2, chains=3, seed=5, participation=SchemeII(2, allow_unbalanced=True),
              streams="per_client")
    whole = fl.FALD(problem, **kw).run(6).samples
    first = fl.FALD(problem, **kw)
    part = first.run(3, checkpoint=tmp_path / "c.pt").samples
    resumed = fl.FALD.resume(tmp_path / "c.pt", problem=problem)
    assert resumed.settings.streams == "per_client"
    assert torch.equal(torch.cat([part, resumed.run(3).samples], 1), whole)


def test_bad_stream_arguments_are_refused():
    problem = fl.problems.GaussianSimulation(num_clients=3, seed=0)
    with pytest.raises(ValueError, match="streams must be"):
        fl.FALD(problem, step_size=1e-3, streams="per_round")
    with pytest.raises(ValueError, match="upload"):
        fl.FALD(problem, step_size=1e-3, streams="per_client", upload=lambda beta, theta, g: beta)
    with pytest.raises(ValueError, match="private_seeds"):
        build_per_client(problem, seed=1, private_seeds=[1, 2])
    assert fl.FALD(problem, step_size=1e-3).settings.streams == "single"
