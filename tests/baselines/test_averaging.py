"""fedavg: federated averaging of SGD on a problem's energy. Reference: with one local step and
full batches it is gradient descent on f = sum_c p_c f^c, whose limit on a convex problem is the
MAP (LogisticRegression.mode(), L-BFGS on the pooled data)."""

from __future__ import annotations

import pytest
import torch

from fedlangevin.baselines import fedavg
from fedlangevin.problems import LogisticRegression

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def logistic():
    g = torch.Generator().manual_seed(0)
    clients = []
    for n in (30, 45, 25):  # unequal clients, overlapping classes (no separation: a finite MAP)
        x = torch.randn(n, 3, generator=g, dtype=torch.float64)
        y = (x[:, 0] + 0.8 * torch.randn(n, generator=g, dtype=torch.float64) > 0).long()
        clients.append((x, y))
    return LogisticRegression(clients, num_classes=2, prior_scale=1.0)


def test_one_local_step_full_batch_converges_to_the_map(logistic):
    # gradient descent with step lr / n on a smooth, strongly convex f: linear convergence; after
    # 3,000 rounds the distance to the L-BFGS mode is at rounding level of the mode's own tolerance
    got = fedavg(logistic, 3000, lr=1.0)[0]
    want = logistic.mode(tol=1e-12)
    assert float((got - want).abs().max()) < 1e-6


def test_members_run_side_by_side_and_match_single_runs(logistic):
    starts = torch.randn(3, logistic.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    together = fedavg(logistic, 20, lr=0.5, local_steps=3, batch_size=5, init=starts, members=3, seed=4)
    assert together.shape == (3, logistic.dim)
    assert len({tuple(row.tolist()) for row in together}) == 3
    alone = fedavg(logistic, 20, lr=0.5, local_steps=3, init=starts[1], members=1)[0]  # full batch: no draws
    both = fedavg(logistic, 20, lr=0.5, local_steps=3, init=starts, members=3)[1]
    torch.testing.assert_close(alone, both, rtol=1e-12, atol=1e-12)


def test_callback_sees_every_round(logistic):
    seen = []
    fedavg(logistic, 4, lr=0.5, callback=lambda r, theta: seen.append((r, tuple(theta.shape))))
    assert seen == [(r, (1, logistic.dim)) for r in range(1, 5)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(rounds=0, lr=1.0), "rounds"),
    (dict(rounds=1, lr=0.0), "lr"),
    (dict(rounds=1, lr=1.0, local_steps=0), "local_steps"),
    (dict(rounds=1, lr=1.0, members=0), "members"),
    (dict(rounds=1, lr=1.0, batch_size=1000), "batch_size"),
    (dict(rounds=1, lr=1.0, init=torch.zeros(2, 5), members=3), "init must be"),
])
def test_bad_input_is_refused_by_name(logistic, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fedavg(logistic, **kwargs)
