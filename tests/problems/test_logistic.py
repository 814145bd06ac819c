"""Multinomial logistic regression: gradients against autograd, minibatch estimator, predictive
probabilities, the MAP against scikit-learn, and FA-LD against a quadrature posterior."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.data import iid_partition
from fedlangevin.problems import LogisticRegression


def _clients(sizes=(5, 9, 3, 7), p=4, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        X = torch.randn(n, p, generator=g, dtype=torch.float64)
        y = torch.randint(0, c, (n,), generator=g)
        out.append((X, y))
    return out


@pytest.mark.parametrize("bias", [True, False])
def test_full_gradient_is_autograd_of_client_energy(bias):
    """grad f^c = grad[(1/p_c) sum_i l_i + ||theta||^2 / (2 sigma^2)], unequal client sizes (padding)."""
    prob = LogisticRegression(_clients(), num_classes=3, prior_scale=0.7, bias=bias)
    theta = torch.randn(2, prob.num_clients, prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    t = theta.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(prob.client_energy(t).sum(), t)
    torch.testing.assert_close(prob.grad(theta), expected, rtol=1e-12, atol=1e-12)


def test_client_energy_matches_a_per_point_loop():
    """An independent per-point computation of (1/p_c) sum_i -log softmax(W x_i + b)_{y_i} + prior."""
    clients = _clients()
    prob = LogisticRegression(clients, num_classes=3, prior_scale=2.0)
    theta = torch.randn(prob.num_clients, prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    n = sum(len(y) for _, y in clients)
    for c, (X, y) in enumerate(clients):
        W = theta[c].reshape(3, 5)  # class-major rows (w_k, b_k)
        ell = 0.0
        for x, label in zip(X, y):
            logits = W[:, :4] @ x + W[:, 4]
            ell -= float(torch.log_softmax(logits, 0)[label])
        expected = ell * n / len(y) + 0.5 * float(theta[c] @ theta[c]) / 4.0
        assert float(prob.client_energy(theta)[c]) == pytest.approx(expected, rel=1e-12)


def test_weighted_client_gradients_give_the_global_gradient():
    """sum_c p_c grad f^c(theta) = grad f(theta) with f = NLL + prior (eq. 7)."""
    prob = LogisticRegression(_clients(), num_classes=3)
    x = torch.randn(prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    (g,) = torch.autograd.grad(prob.energy(x), x)
    per_client = prob.grad(x.detach().expand(1, prob.num_clients, -1).clone())[0]
    torch.testing.assert_close((prob.weights[:, None] * per_client).sum(0), g, rtol=1e-12, atol=1e-10)
    assert float((prob.weights * prob.client_energy(x.detach().expand(prob.num_clients, -1))).sum()) == pytest.approx(
        float(prob.energy(x.detach())), rel=1e-12
    )


def test_minibatch_of_a_single_point_client_is_exact():
    """A client with one point: every minibatch (with replacement) is that point b times, so
    (1/p_c)(n_c/b) sum = n grad l exactly."""
    clients = [(torch.tensor([[0.3, -1.0]]), torch.tensor([1])), (torch.tensor([[2.0, 0.5]]), torch.tensor([0]))]
    prob = LogisticRegression(clients, num_classes=2)
    theta = torch.randn(3, 2, prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    g = prob.grad(theta, batch_size=1, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(g, prob.grad(theta), rtol=1e-12, atol=1e-12)


def test_minibatch_gradient_is_unbiased():
    """Mean of M minibatch estimates vs the full gradient: every entry within 6 Monte Carlo
    standard errors (sample sd / sqrt(M)); P(|z| > 6) ~ 2e-9 per entry under the CLT."""
    prob = LogisticRegression(_clients(sizes=(12, 20, 8)), num_classes=3)
    theta = 0.5 * torch.randn(2, 3, prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(7)
    m = 3000
    draws = torch.stack([prob.grad(theta, batch_size=4, generator=gen) for _ in range(m)])
    se = draws.std(0) / m**0.5
    z = (draws.mean(0) - prob.grad(theta)) / se.clamp_min(1e-12)
    assert float(z.abs().max()) < 6.0
    assert float(se.max()) > 0  # the estimator is actually random


def test_minibatch_is_reproducible_from_the_generator():
    prob = LogisticRegression(_clients(), num_classes=3)
    theta = torch.randn(2, 4, prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a = prob.grad(theta, batch_size=3, generator=torch.Generator().manual_seed(11))
    b = prob.grad(theta, batch_size=3, generator=torch.Generator().manual_seed(11))
    c = prob.grad(theta, batch_size=3, generator=torch.Generator().manual_seed(12))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_predict_proba_shapes_and_values():
    prob = LogisticRegression(_clients(), num_classes=3)
    X = torch.randn(6, 4, dtype=torch.float64)
    W = torch.randn(5, 2, 3, 4, dtype=torch.float64)
    b = torch.randn(5, 2, 3, dtype=torch.float64)
    theta = prob.pack(W, b)
    assert theta.shape == (5, 2, prob.dim)
    w2, b2 = prob.unpack(theta)
    assert torch.equal(w2, W) and torch.equal(b2, b)
    probs = prob.predict_proba(theta, X)
    assert probs.shape == (5, 2, 6, 3)
    expected = torch.softmax(torch.einsum("np,sckp->scnk", X, W) + b[:, :, None, :], dim=-1)
    torch.testing.assert_close(probs, expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(probs.sum(-1), torch.ones(5, 2, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match="X must have shape"):
        prob.predict_proba(theta, torch.randn(6, 5))


def test_parameter_names_follow_the_layout():
    prob = LogisticRegression(_clients(p=2, c=3), num_classes=3)
    assert prob.parameter_names()[:4] == ["w[0,0]", "w[0,1]", "b[0]", "w[1,0]"]
    assert len(prob.parameter_names()) == prob.dim == 9


def test_mode_matches_scikit_learn():
    """Without intercept, argmin sum_i l_i + ||W||^2/(2 sigma^2) is scikit-learn's multinomial
    LogisticRegression with C = sigma^2 (its objective is ||W||^2 / 2 + C sum_i l_i)."""
    sklearn_lm = pytest.importorskip("sklearn.linear_model")
    g = torch.Generator().manual_seed(0)
    X = torch.randn(120, 5, generator=g, dtype=torch.float64)
    y = (X[:, 0] + 0.5 * torch.randn(120, generator=g, dtype=torch.float64) > 0).long() + (X[:, 1] > 0.8).long()
    prob = LogisticRegression.from_partition(X, y, iid_partition(120, 4, 0), prior_scale=1.5, bias=False)
    theta = prob.mode(tol=1e-12)
    ref = sklearn_lm.LogisticRegression(C=1.5**2, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X.numpy(), y.numpy())
    np.testing.assert_allclose(prob.unpack(theta)[0].numpy(), ref.coef_, rtol=1e-5, atol=1e-6)


def test_smoothness_bounds_the_hessian():
    """L bounds lambda_max of every client's Hessian (checked at a few points with autograd)."""
    prob = LogisticRegression(_clients(sizes=(6, 10)), num_classes=3)
    for seed in range(3):
        x = torch.randn(prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        for c in range(prob.num_clients):
            def fc(t, c=c):
                return prob.client_energy(t.expand(prob.num_clients, -1))[c]

            h = torch.autograd.functional.hessian(fc, x)
            assert float(torch.linalg.eigvalsh(h).max()) <= prob.smoothness * (1 + 1e-12)
    assert prob.convexity == pytest.approx(1.0)


def test_fald_samples_the_quadrature_posterior():
    """Two classes, one feature, no intercept: theta = (w0, w1) in 2-d, so the tempered
    posterior exp(-f/tau) can be integrated on a grid. SGLD (K = 1) and FA-LD (K = 4) with
    full gradients and a small step (eta L = 0.02: the Euler bias of a variance is about
    eta lambda / 2 <= 1%), R = 1000 chains run for 8 relaxation times of the flattest
    direction (rate m = 1/sigma^2): mean and variances within 4.5 Monte Carlo standard
    errors (sd / sqrt(R) for means, sqrt(2 / R) relative for variances) plus 2% (means, in
    sd) / 3% (variances) for the step-size bias. The checks fail by far if grad returned the
    global instead of the client gradient (variance off by 1/p_c) or forgot the prior."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 1, generator=g, dtype=torch.float64)
    y = (x[:, 0] + 0.8 * torch.randn(16, generator=g, dtype=torch.float64) > 0).long()
    prob = LogisticRegression.from_partition(x, y, [torch.arange(0, 6), torch.arange(6, 16)], prior_scale=0.5, bias=False)
    tau, chains = 0.5, 1000
    grid = torch.linspace(-5, 5, 401, dtype=torch.float64)
    w0, w1 = torch.meshgrid(grid, grid, indexing="ij")
    pts = torch.stack([w0.reshape(-1), w1.reshape(-1)], 1)
    logp = -prob.energy(pts) / tau
    wts = torch.exp(logp - logp.max())
    wts /= wts.sum()
    mean = wts @ pts
    var = ((pts - mean) ** 2 * wts[:, None]).sum(0)
    sd = var.sqrt()
    eta = 0.02 / prob.smoothness
    for k in (1, 4):
        sampler = fl.FALD(prob, step_size=eta, local_steps=k, temperature=tau, chains=chains, seed=3)
        rounds = int(8.0 / (eta * prob.convexity * k))
        last = sampler.run(rounds).samples[:, -1]
        assert torch.all((last.mean(0) - mean).abs() < 4.5 * sd / chains**0.5 + 0.02 * sd), (k, last.mean(0), mean)
        assert torch.all((last.var(0) / var - 1).abs() < 4.5 * (2 / chains) ** 0.5 + 0.03), (k, last.var(0), var)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(clients=[]), "clients"),
        (dict(clients=[(torch.zeros(3, 2), torch.zeros(2, dtype=torch.long))]), "clients\\[0\\] y"),
        (dict(clients=[(torch.zeros(3), torch.zeros(3, dtype=torch.long))]), "clients\\[0\\] X"),
        (dict(clients=[(torch.zeros(3, 2), torch.zeros(3))]), "integer"),
        (dict(clients=[(torch.full((2, 2), float("nan")), torch.zeros(2, dtype=torch.long))]), "finite"),
        (dict(clients=[(torch.zeros(2, 2), torch.tensor([0, -1]))]), ">= 0"),
        (dict(clients=[(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long)),
                       (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))]), "features"),
        (dict(clients=[(torch.zeros(2, 2), torch.tensor([0, 4]))], num_classes=3), "num_classes"),
        (dict(clients=[(torch.zeros(2, 2), torch.tensor([0, 1]))], prior_scale=0.0), "prior_scale"),
        (dict(clients=[(torch.zeros(2, 2), torch.tensor([0, 1]))], bias=1), "bias"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LogisticRegression(**kwargs)


def test_num_classes_beyond_memory_is_refused_by_name():
    """num_classes=10**30 was accepted and the sampler's memory check then named chains."""
    clients = [(torch.zeros(2, 2), torch.tensor([0, 1]))] * 2
    with pytest.raises(ValueError, match=r"^num_classes must be an integer in \[2, \d+\]"):
        LogisticRegression(clients, num_classes=10**30)
    assert LogisticRegression(clients, num_classes=5).dim == 15


def test_batch_size_is_checked_against_the_smallest_client():
    prob = LogisticRegression(_clients(sizes=(5, 3)), num_classes=3)
    with pytest.raises(ValueError, match="batch_size"):
        fl.FALD(prob, step_size=1e-3, batch_size=4)
    fl.FALD(prob, step_size=1e-3, batch_size=3)


def test_to_float32_keeps_results_close():
    prob = LogisticRegression(_clients(), num_classes=3)
    theta = torch.randn(2, 4, prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    g32 = prob.to(dtype=torch.float32).grad(theta.float())
    assert g32.dtype == torch.float32
    torch.testing.assert_close(g32.double(), prob.grad(theta), rtol=1e-4, atol=1e-4)


def test_client_hvp_is_the_derivative_of_the_full_data_gradient():
    """LogisticRegression.client_hvp (analytic) against torch.func.jvp of grad (the same derivative:
    float64 rounding) and against central differences of grad (error O(h^2) ~ 1e-8 relative at h = 1e-5),
    with unequal clients (padding masked); wrong shapes are refused by name."""
    from fedlangevin.problems import LogisticRegression

    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (300,), generator=g)
    parts = [torch.arange(i, 300, 4) for i in range(4)]
    parts[3] = parts[3][:50]
    prob = LogisticRegression.from_partition(X, y, parts, num_classes=3, prior_scale=0.7)
    theta = torch.randn(2, 4, prob.dim, generator=g, dtype=torch.float64)
    v = torch.randn(2, 4, prob.dim, generator=g, dtype=torch.float64)
    hv = prob.client_hvp(theta, v)
    _, jv = torch.func.jvp(lambda t: prob.grad(t), (theta,), (v,))
    torch.testing.assert_close(hv, jv, rtol=1e-12, atol=1e-10)
    h = 1e-5
    fd = (prob.grad(theta + h * v) - prob.grad(theta - h * v)) / (2 * h)
    torch.testing.assert_close(hv, fd, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="theta and vectors"):
        prob.client_hvp(theta, v[:1])
