"""NetworkProblem: a classification network (torch.nn.Module) over clients. References: autograd on
the module itself (gradients, minibatch gradients, per-example gradients, Hessian-vector products),
the closed-form gradient of LogisticRegression (a single Linear layer is that model), and FA-LD /
FA-HMC with their defaults on a small synthetic classification."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import diagnostics
import fedlangevin as fl
from fedlangevin.baselines import fedavg
from fedlangevin.problems import LogisticRegression, NetworkProblem
from fedlangevin.problems._client_data import minibatch_indices

F64 = torch.float64

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors (tests/conftest.py)


def tiny_net(inputs=5, hidden=7, classes=3, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, classes))


def tiny_clients(sizes=(9, 12, 7), inputs=5, classes=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, inputs, generator=g), torch.randint(0, classes, (n,), generator=g)) for n in sizes]


def reference_energy(problem, net, theta, x, y, scale):
    """scale * sum_i CE(net_theta(x_i), y_i) + |theta|^2 / (2 sigma^2), by autograd on the module."""
    out = torch.func.functional_call(net.double(), problem.unflatten(theta), (x.double(),))
    ce = torch.nn.functional.cross_entropy(out, y, reduction="sum")
    return scale * ce + 0.5 * (theta * theta).sum() / problem.prior_scale**2


def autograd_grad(problem, net, theta, x, y, scale):
    t = theta.detach().clone().requires_grad_(True)
    return torch.autograd.grad(reference_energy(problem, net, t, x, y, scale), t)[0]


@pytest.fixture(scope="module")
def tiny():
    net, clients = tiny_net(), tiny_clients()
    problem = NetworkProblem(net, clients, prior_scale=2.0)
    theta = problem.init_draws(2, seed=3)[:, None, :].expand(2, 3, problem.dim).contiguous()
    theta = theta + 0.1 * torch.randn(theta.shape, generator=torch.Generator().manual_seed(4), dtype=F64)
    return problem, net, clients, theta


def test_layout_and_initial_params(tiny):
    problem, net, _, _ = tiny
    assert problem.dim == 5 * 7 + 7 + 7 * 3 + 3 and problem.num_classes == 3 and problem.num_clients == 3
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).double()
    assert torch.equal(problem.initial_params, flat)
    blocks = problem.constrain(flat)
    assert list(blocks) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert np.array_equal(blocks["0.weight"], net[0].weight.detach().double().numpy())


def test_full_gradient_matches_autograd_with_unequal_clients(tiny):
    # clients of sizes 9, 12, 7 are padded to 12 and masked in one vectorised call
    problem, net, clients, theta = tiny
    n = sum(len(y) for _, y in clients)
    got = problem.grad(theta)
    for r in range(theta.shape[0]):
        for c, (x, y) in enumerate(clients):
            want = autograd_grad(problem, net, theta[r, c], x, y, n / len(y))
            torch.testing.assert_close(got[r, c], want, rtol=1e-10, atol=1e-10)


def test_minibatch_gradient_matches_autograd_on_the_same_rows(tiny):
    problem, net, clients, theta = tiny
    b, n = 4, sum(len(y) for _, y in clients)
    got = problem.grad(theta, batch_size=b, generator=torch.Generator().manual_seed(7))
    idx = minibatch_indices(problem.client_sizes, theta.shape[0], b, torch.Generator().manual_seed(7), "cpu", F64)
    for r in range(theta.shape[0]):
        for c, (x, y) in enumerate(clients):
            rows = idx[r, c]
            want = autograd_grad(problem, net, theta[r, c], x[rows], y[rows], n / b)  # (1/p_c)(n_c/b) = n/b
            torch.testing.assert_close(got[r, c], want, rtol=1e-10, atol=1e-10)


def test_per_example_gradients_match_autograd(tiny):
    problem, net, clients, theta = tiny
    rows = problem.private_rows(theta.shape[0], 5, generator=torch.Generator().manual_seed(2))
    got = problem.per_example_grads(theta, rows)
    assert got.shape == (*rows.shape, problem.dim)
    for r in range(theta.shape[0]):
        for c, (x, y) in enumerate(clients):
            for i, row in enumerate(rows[r, c].tolist()):
                t = theta[r, c].detach().clone().requires_grad_(True)
                out = torch.func.functional_call(net.double(), problem.unflatten(t), (x[row:row + 1].double(),))
                ce = torch.nn.functional.cross_entropy(out, y[row:row + 1], reduction="sum")
                torch.testing.assert_close(got[r, c, i], torch.autograd.grad(ce, t)[0], rtol=1e-10, atol=1e-10)


def test_hvp_matches_the_autograd_hessian(tiny):
    problem, net, clients, theta = tiny
    v = torch.randn(theta.shape, generator=torch.Generator().manual_seed(5), dtype=F64)
    got = problem.hvp(theta, v)
    n = sum(len(y) for _, y in clients)
    for c, (x, y) in enumerate(clients):
        hess = torch.autograd.functional.hessian(lambda t: reference_energy(problem, net, t, x, y, n / len(y)),
                                                 theta[0, c])
        torch.testing.assert_close(got[0, c], hess @ v[0, c], rtol=1e-9, atol=1e-9)


def test_predict_proba_and_nll_match_the_module(tiny):
    problem, net, clients, theta = tiny
    draws = theta[:, 0]
    x, _ = clients[1]
    probs = problem.predict_proba(draws, x, batch=5)  # batches of 5 rows: 12 = 5 + 5 + 2
    for r in range(draws.shape[0]):
        out = torch.func.functional_call(net.double(), problem.unflatten(draws[r]), (x.double(),))
        torch.testing.assert_close(probs[r], torch.softmax(out, -1))
    want = sum(torch.nn.functional.cross_entropy(
        torch.func.functional_call(net.double(), problem.unflatten(draws[0]), (xc.double(),)), yc, reduction="sum")
        for xc, yc in clients)
    torch.testing.assert_close(problem.nll(draws)[0], want)


def test_a_linear_layer_is_logistic_regression():
    # nn.Linear(p, C) is multinomial logistic regression with bias; LogisticRegression packs
    # (weights, bias) class by class, the Linear layer weight then bias: permute and compare
    clients = tiny_clients(sizes=(10, 6), inputs=4, classes=3, seed=8)
    net = torch.nn.Linear(4, 3)
    net_problem = NetworkProblem(net, clients, prior_scale=1.5)
    logistic = LogisticRegression(clients, num_classes=3, prior_scale=1.5)
    theta = torch.randn(2, 2, logistic.dim, generator=torch.Generator().manual_seed(9), dtype=F64)
    w, b = logistic.unpack(theta)
    as_net = torch.cat([w.reshape(2, 2, -1), b], dim=-1)
    got = net_problem.grad(as_net)
    gw, gb = logistic.unpack(logistic.grad(theta))
    torch.testing.assert_close(got, torch.cat([gw.reshape(2, 2, -1), gb], dim=-1), rtol=1e-10, atol=1e-10)


def blobs(n, seed):
    """Three overlapping Gaussian classes in the plane (centres 1 apart, standard deviation 0.5)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    centres = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.5, 0.9]], dtype=F64)
    return centres[y] + 0.5 * torch.randn(n, 2, generator=g, dtype=F64), y


@pytest.fixture(scope="module")
def blob_problem():
    """60 training points over 4 clients, a 2-32-3 tanh network (d = 195) with a wide prior
    (sigma = 3): few data for many weights where the classes overlap, so the MAP (full-batch
    FedAvg to convergence) is overconfident."""
    x, y = blobs(60, 0)
    net = tiny_net(inputs=2, hidden=32, classes=3, seed=0)
    problem = NetworkProblem(net, [(x[i::4], y[i::4]) for i in range(4)], prior_scale=3.0)
    fit = fedavg(problem, 300, lr=1.0, init=problem.initial_params)
    return problem, blobs(2000, 1), fit[0]


@pytest.mark.parametrize("cls", ["FALD", "FAHMC"])
def test_samplers_run_with_defaults_and_beat_the_map(blob_problem, cls):
    # Defaults (warm-up, step_size="auto") with minibatches of 5 rows per client, started at
    # FedAvg's MAP. The posterior predictive (model average of the kept draws) must be finite,
    # keep the MAP's accuracy to within 0.05 (2,000 test points: the binomial standard error of
    # an accuracy near 0.7 is 0.01) and have a lower test NLL than the MAP (measured with these
    # seeds: MAP 0.955, FA-LD 0.86, FA-HMC 0.88): averaging over the posterior tempers the
    # overconfident point estimate. A broken gradient (chains leaving the mode) or a sampler that
    # does not move (its average is then the MAP itself) fails one of these.
    problem, (x_test, y_test), theta_map = blob_problem
    y = y_test.numpy()
    map_probs = problem.predict_proba(theta_map[None], x_test)[0].numpy()
    map_acc, map_nll = (map_probs.argmax(1) == y).mean(), diagnostics.nll(map_probs, y)
    assert map_acc > 0.6  # the fit itself learned something (chance: 1/3)
    sampler = getattr(fl, cls)(problem, chains=2, batch_size=5, init=theta_map, seed=0)
    trace = sampler.run(rounds=300)
    draws = torch.as_tensor(np.asarray(trace.samples))[:, ::5].reshape(-1, problem.dim).double()
    bma = diagnostics.posterior_predictive(problem.predict_proba(draws, x_test).numpy())
    assert np.isfinite(bma).all()
    assert (bma.argmax(1) == y).mean() > map_acc - 0.05
    assert diagnostics.nll(bma, y) < map_nll


def test_fedavg_ensemble_members_differ_and_fit(blob_problem):
    problem, (x_test, y_test), _ = blob_problem
    models = fedavg(problem, 100, lr=1.0, init=problem.init_draws(3, 1), members=3)
    assert models.shape == (3, problem.dim)
    assert float((models[0] - models[1]).norm()) > 1e-3  # independent starts stay apart
    probs = problem.predict_proba(models, x_test).numpy()
    acc = (probs.argmax(-1) == y_test.numpy()[None]).mean(1)
    assert (acc > 0.6).all()


# -- bad input ------------------------------------------------------------------------------------


class NoParams(torch.nn.Module):
    def forward(self, x):
        return torch.stack([x[:, 0], -x[:, 0]], dim=1)


@pytest.mark.parametrize("module, clients, match", [
    (NoParams(), tiny_clients(), "has no parameters"),
    ("not a module", tiny_clients(), "must be a torch.nn.Module"),
    (tiny_net(), [(torch.randn(5, 5), torch.zeros(4, dtype=torch.long))], r"y must have shape \(5,\)"),
    (tiny_net(), [(torch.randn(5, 5), torch.zeros(5))], "integer class labels"),
    (tiny_net(), [(torch.randn(5, 5), torch.full((5,), 3))], r"labels in \[0, 2\]"),
    (tiny_net(), [(torch.randn(5, 4), torch.zeros(5, dtype=torch.long))], "could not run on a row"),
    (tiny_net(), [(torch.randn(5, 5), torch.zeros(5, dtype=torch.long)), (torch.randn(5, 6), torch.zeros(5, dtype=torch.long))],
     "row shape"),
    (tiny_net(), [], "non-empty sequence"),
    (torch.nn.Sequential(torch.nn.Linear(5, 1)), tiny_clients(), "C >= 2"),
])
def test_bad_input_is_refused_by_name(module, clients, match):
    with pytest.raises(ValueError, match=match):
        NetworkProblem(module, clients)


def test_bad_prior_scale_and_hvp_shape(tiny):
    problem, net, clients, theta = tiny
    with pytest.raises(ValueError, match="prior_scale"):
        NetworkProblem(net, clients, prior_scale=0.0)
    with pytest.raises(ValueError, match="v must have the shape of theta"):
        problem.hvp(theta, theta[:1])
    with pytest.raises(ValueError, match="theta must have shape"):
        problem.grad(theta[:, :2])
    with pytest.raises(ValueError, match="lr"):
        fedavg(problem, 1, lr=-1.0)
