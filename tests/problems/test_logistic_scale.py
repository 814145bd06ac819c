"""Multinomial logistic regression at scale: the full-data gradient, client energies and clipped
gradients of many chains share one copy of the features (chains folded into the class axis) and
agree with the per-chain broadcast formula to float64 rounding."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from fedlangevin.problems import LogisticRegression


def _problem(sizes=(5, 9, 3, 7), p=4, c=3, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    clients = [(torch.randn(n, p, generator=g, dtype=torch.float64), torch.randint(0, c, (n,), generator=g))
               for n in sizes]
    return LogisticRegression(clients, num_classes=c, prior_scale=0.7, bias=bias)


def _broadcast_grad(prob, theta):
    """The per-chain formula: logits (R, N, C, p1) @ (1, N, p1, n_max) broadcast over the chains."""
    r, n, d = theta.shape
    w = theta.view(r, n, prob.num_classes, prob._p1)
    x = prob.features.unsqueeze(0)
    s = torch.softmax(torch.matmul(w, x.transpose(-1, -2)), dim=-2)
    s.scatter_add_(-2, prob.labels.unsqueeze(0).expand(r, -1, -1).unsqueeze(-2), torch.full_like(s[..., :1, :], -1.0))
    s.mul_(prob.mask.unsqueeze(1))
    g = torch.matmul(s, x) * prob._client_scale + prob.prior_precision * w
    return g.reshape(r, n, d)


def _broadcast_client_nll(prob, theta):
    w = theta.reshape(*theta.shape[:-1], prob.num_classes, prob._p1)
    logp = torch.log_softmax(torch.matmul(w, prob.features.transpose(-1, -2)), dim=-2)
    labels = prob.labels.expand(*logp.shape[:-3], -1, -1).unsqueeze(-2)
    return -(logp.gather(-2, labels).squeeze(-2) * prob.mask).sum(-1)


def test_full_gradient_matches_the_broadcast_formula_to_rounding():
    """Same sums in another order: agreement to a few ulps of the gradient's scale (rtol 1e-13,
    float64 eps 2.2e-16 times sums of at most 9 terms and the 1/p_c scaling)."""
    for bias in (True, False):
        prob = _problem(bias=bias)
        theta = torch.randn(5, prob.num_clients, prob.dim, dtype=torch.float64,
                            generator=torch.Generator().manual_seed(1))
        torch.testing.assert_close(prob.grad(theta), _broadcast_grad(prob, theta), rtol=1e-13, atol=1e-13)


def test_client_energy_and_nll_match_the_broadcast_formula():
    prob = _problem()
    theta = torch.randn(3, 2, prob.num_clients, prob.dim, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(prob._client_nll(theta), _broadcast_client_nll(prob, theta), rtol=1e-13, atol=1e-13)
    one = theta[:, :, :1, :]  # one point for every client: (..., 1, d)
    torch.testing.assert_close(prob._client_nll(one), _broadcast_client_nll(prob, one), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(prob.nll(theta[0, 0]), _broadcast_client_nll(prob, theta[0, 0][:, None, :]).sum(-1),
                               rtol=1e-13, atol=1e-13)
    assert prob.client_energy(theta[0, 0]).shape == (prob.num_clients,)


def test_clipped_full_gradient_matches_per_chain_calls():
    """The private full-data gradient of R chains is the R single-chain ones (clipping included)."""
    prob = _problem()
    theta = torch.randn(4, prob.num_clients, prob.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for clip in (None, 0.5):
        together = prob._nll_grad(theta, None, clip)
        apart = torch.cat([prob._nll_grad(theta[i:i + 1], None, clip) for i in range(4)])
        torch.testing.assert_close(together, apart, rtol=1e-13, atol=1e-13)


def test_full_gradient_of_many_chains_does_not_copy_the_features():
    """64 chains, 4 clients, 20,000 x 400 features (64 MB): a per-chain copy would take 64 x 64 MB = 4 GB.
    With the chains folded into the class axis the call needs the logits and residuals
    (2 x 64 x 2 classes x 20,000 x 8 B = 41 MB) and the gradients (1 MB); the peak RSS growth of
    a fresh process over the call is asserted below 400 MB (allocator slack included)."""
    code = textwrap.dedent("""
        import resource, torch
        from fedlangevin.problems import LogisticRegression
        torch.set_num_threads(1)
        g = torch.Generator().manual_seed(0)
        n, p = 20_000, 399
        X = torch.randn(n, p, generator=g, dtype=torch.float64)
        y = torch.randint(0, 2, (n,), generator=g)
        prob = LogisticRegression([(X[i::4], y[i::4]) for i in range(4)], num_classes=2)
        theta = 0.01 * torch.randn(64, 4, prob.dim, generator=g, dtype=torch.float64)
        del X
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        prob.grad(theta)
        prob.client_energy(theta)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print((after - before) / 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    growth_mb = float(out.stdout.strip().splitlines()[-1])
    print(f"peak RSS growth {growth_mb:.0f} MB")
    assert growth_mb < 400, f"peak RSS grew by {growth_mb:.0f} MB over one 64-chain full-data gradient"
