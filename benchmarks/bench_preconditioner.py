"""Cost of a preconditioner per local step, by dimension: none, diagonal, dense, in one run.

A dense M adds two (R N x d) @ (d x d) products per local step (M grad, A xi); a diagonal M two
elementwise products. This measures steps per second of ``fald.engine.build`` rounds on a
logistic regression (R = 32 chains, N = 10 clients, 50 rows per client, d features, 2 classes:
d + 1... parameters per class) with no, a diagonal and a dense preconditioner, as ratios to the
unpreconditioned kernel within the same run. It informs
``fedlangevin.warmup.adaptation.DENSE_MAX_DIM`` together with the statistical limit (a dense M
is estimated from R x w draws per window, which must be well above d).

    python benchmarks/bench_preconditioner.py [--dims 10 50 100 200] [--seconds 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlangevin as fl  # noqa: E402
from fedlangevin.fald.engine import build  # noqa: E402
from fedlangevin.federation.preconditioning import as_preconditioner  # noqa: E402


def steps_per_second(kernel, theta, seconds: float) -> float:
    g = torch.Generator().manual_seed(0)
    state = kernel.init(theta)
    state, _ = kernel.step(state, [1e-4] * 5, g)  # warm buffers
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        state, _ = kernel.step(state, [1e-4] * 5, g)
        n += 5
    return n / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 50, 100, 200])
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| features | d | none steps/s | diagonal / none | dense / none |")
    print("| --- | --- | --- | --- | --- |")
    for f in args.dims:
        g = torch.Generator().manual_seed(f)
        clients = [(torch.randn(50, f, generator=g, dtype=torch.float64), torch.randint(0, 2, (50,), generator=g))
                   for _ in range(10)]
        problem = fl.problems.LogisticRegression(clients, num_classes=2)
        d = problem.dim
        q = torch.randn(d, d, generator=g, dtype=torch.float64)
        dense = as_preconditioner(q @ q.T / d + torch.eye(d, dtype=torch.float64))
        diag = as_preconditioner(torch.rand(d, generator=g, dtype=torch.float64) + 0.5)
        theta = torch.zeros(32, d, dtype=torch.float64)
        rates = [steps_per_second(build(problem, preconditioner=p, kernel="gradient"), theta, args.seconds)
                 for p in (None, diag, dense)]
        print(f"| {f} | {d} | {rates[0]:.0f} | {rates[1] / rates[0]:.2f} | {rates[2] / rates[0]:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
