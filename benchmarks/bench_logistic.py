"""Minibatch gradient of LogisticRegression vs the textbook layout, measured in one run.

Both compute the same unbiased minibatch estimate of grad f^c for R chains x N clients
(b points per client): the same indices, the same numbers (checked before timing).

- ours (``LogisticRegression.grad``): class-major weights W (C x p1), the batch gathered with
  one ``index_select`` on the flat (N * n_max, p1) client matrix, logits W X_b^T and gradient
  (S - Y) X_b, i.e. P^T X_b with P = (S - Y)^T;
- textbook: weights (p1 x C), the batch gathered by advanced indexing X[client, i], logits
  X_b W and gradient X_b^T P.

The printed ratio is textbook time / our time on the same machine in the same process
(interleaved repetitions, median), for the shapes of the Sec. 7.2 study.

    python benchmarks/bench_logistic.py [--dtype float32] [--threads 1] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fedlangevin.data import iid_partition
from fedlangevin.problems import LogisticRegression


def textbook_grad(prob, theta, idx):
    """(p1 x C) layout, advanced-indexing gather, X_b^T P; idx (R, N, b) per-client indices."""
    r, n, _ = theta.shape
    c, p1 = prob.num_classes, prob.features.shape[-1]
    w = theta.view(r, n, c, p1).transpose(-1, -2).contiguous()  # (R, N, p1, C): the textbook layout
    clients = torch.arange(n)[None, :, None].expand_as(idx)
    xb = prob.features[clients, idx]  # (R, N, b, p1)
    yb = prob.labels[clients, idx]
    probs = torch.softmax(xb @ w, dim=-1)
    probs -= torch.nn.functional.one_hot(yb, c).to(probs.dtype)
    g = xb.transpose(-1, -2) @ probs  # (R, N, p1, C)
    g = g * (prob.num_data / idx.shape[-1]) + w / prob.prior_scale**2
    return g.transpose(-1, -2).reshape(r, n, -1)


def _indices(prob, r, b, seed):
    """The indices ``grad`` draws from a generator seeded with ``seed``."""
    u = torch.rand(r, prob.num_clients, b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    sizes = prob.client_sizes
    return (u * sizes[None, :, None]).long().minimum(sizes[None, :, None] - 1)


def bench(name, X, y, r, b, dtype, repeats):
    prob = LogisticRegression.from_partition(X, y, iid_partition(len(y), 10, 0)).to(dtype=dtype)
    theta = 0.01 * torch.randn(r, prob.num_clients, prob.dim, dtype=dtype, generator=torch.Generator().manual_seed(1))
    ours = prob.grad(theta, batch_size=b, generator=torch.Generator().manual_seed(5))
    ref = textbook_grad(prob, theta, _indices(prob, r, b, 5))
    tol = 1e-3 if dtype == torch.float32 else 1e-9
    torch.testing.assert_close(ours, ref, rtol=tol, atol=tol * float(ref.abs().max()))
    idx = _indices(prob, r, b, 6)
    gen = torch.Generator().manual_seed(0)
    t_ours, t_ref = [], []
    for _ in range(repeats):  # interleaved, so load changes hit both alike
        t0 = time.perf_counter()
        prob.grad(theta, batch_size=b, generator=gen)
        t1 = time.perf_counter()
        textbook_grad(prob, theta, idx)
        t2 = time.perf_counter()
        t_ours.append(t1 - t0)
        t_ref.append(t2 - t1)
    a, c = statistics.median(t_ours), statistics.median(t_ref)
    print(f"{name:>9} {str((r, prob.num_clients, b, prob.features.shape[-1])):>20} {a * 1e3:>10.3f} {c * 1e3:>12.3f} {c / a:>7.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    from fedlangevin.data import load_digits, load_mnist5k

    print(f"dtype={args.dtype} torch={torch.__version__} threads={torch.get_num_threads()}, median of {args.repeats}")
    print(f"{'data':>9} {'(R, N, b, p+1)':>20} {'ours (ms)':>10} {'textbook (ms)':>12} {'ratio':>7}")
    digits = load_digits()
    mnist = load_mnist5k()
    for r in (1, 4):
        bench("digits", digits.X_train, digits.y_train, r, 50, dtype, args.repeats)
        bench("mnist5k", mnist.X_train, mnist.y_train, r, 200, dtype, args.repeats)


if __name__ == "__main__":
    main()
