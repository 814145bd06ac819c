"""Gradient calls per second of the autodiff problems: vmap over chains x clients vs a loop.

Both paths compute the same numbers (tests/problems/test_pyro.py and test_custom.py check
it): ``vectorize=True`` runs torch.func.grad under vmap over clients and chains, one traced
run of the model per call; ``vectorize=False`` is the reference, one autograd call per
(chain, client) pair, as a first implementation would. Also printed: CustomProblem against
the closed-form gradient of the built-in Gaussian problem (what the autodiff costs over
hand-written gradients), and a CustomProblem over clients of different sizes grouped by size
against ``rowwise=True``. Ratios are measured in one run, in the same process.

    python benchmarks/bench_autodiff.py [--chains 1 16 128] [--seconds 2]
"""

from __future__ import annotations

import argparse
import time

import pyro
import pyro.distributions as dist
import torch

import fedlangevin as fl


def blr(data):
    X, y = data
    beta = pyro.sample("beta", dist.Normal(X.new_zeros(X.shape[1]), 1.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(X.new_tensor(1.0)))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)


def rate(fn, seconds: float) -> float:
    """Calls per second of fn(), timed over at least ``seconds``."""
    fn()
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return calls / dt


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 16, 128])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rows", type=int, default=50, help="rows per client")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    data = []
    for c in range(args.clients):
        X = torch.randn(args.rows, 4, generator=g, dtype=torch.float64)
        data.append((X, X @ torch.ones(4, dtype=torch.float64) + torch.randn(args.rows, generator=g, dtype=torch.float64)))
    vec = fl.problems.PyroProblem(blr, data, vectorize=True)
    loop = fl.problems.PyroProblem(blr, data, vectorize=False)
    sim = fl.problems.GaussianSimulation(num_clients=args.clients, samples_per_client=args.rows, prior_precision=1.0, seed=0)
    prec = torch.linalg.inv(sim.cov)
    custom = fl.problems.CustomProblem(
        lambda t, x: 0.5 * (((t - x) @ prec) * (t - x)).sum(),
        [sim.data[c] for c in range(args.clients)],
        prior=lambda t: 0.5 * (t * t).sum(),
        dim=2,
    )
    print(f"PyroProblem (Bayesian linear regression, d = 5), N = {args.clients} clients x {args.rows} rows; "
          f"CustomProblem vs GaussianSimulation closed form (d = 2); torch threads = {torch.get_num_threads()}")
    print(f"{'chains':>6} {'pyro vmap/s':>12} {'pyro loop/s':>12} {'vmap/loop':>10} {'custom/s':>10} {'closed/s':>10} {'closed/custom':>14}")
    for r in args.chains:
        theta = 0.1 * torch.randn(r, args.clients, 5, generator=g, dtype=torch.float64)
        theta2 = torch.randn(r, args.clients, 2, generator=g, dtype=torch.float64)
        a = rate(lambda: vec.grad(theta), args.seconds)
        b = rate(lambda: loop.grad(theta), args.seconds)
        c = rate(lambda: custom.grad(theta2), args.seconds)
        d = rate(lambda: sim.grad(theta2), args.seconds)
        print(f"{r:6d} {a:12.1f} {b:12.1f} {a / b:10.1f} {c:10.1f} {d:10.1f} {d / c:14.1f}")
    unequal(args, g)
    return 0


def unequal(args, g) -> None:
    """CustomProblem over N clients of N different sizes (args.rows // 2 to 3 args.rows // 2 rows):
    grouped by size (N vectorised calls) against rowwise=True (one padded, masked call)."""
    sizes = torch.linspace(args.rows // 2, 3 * args.rows // 2, args.clients).long().tolist()
    data = []
    for n in sizes:
        X = torch.randn(n, 4, generator=g, dtype=torch.float64)
        data.append((X, X @ torch.ones(4, dtype=torch.float64) + torch.randn(n, generator=g, dtype=torch.float64)))

    def energy(t, batch):
        X, y = batch
        return 0.5 * ((y - X @ t) ** 2).sum()

    grouped = fl.problems.CustomProblem(energy, data, dim=4)
    rowwise = fl.problems.CustomProblem(energy, data, dim=4, rowwise=True)
    print(f"\nCustomProblem, {args.clients} clients of {len(set(sizes))} sizes ({sizes[0]} to {sizes[-1]} rows): "
          "grouped by size vs rowwise=True")
    print(f"{'chains':>6} {'grouped/s':>10} {'rowwise/s':>10} {'rowwise/grouped':>16}")
    for r in args.chains:
        theta = 0.1 * torch.randn(r, args.clients, 4, generator=g, dtype=torch.float64)
        a = rate(lambda: grouped.grad(theta), args.seconds)
        b = rate(lambda: rowwise.grad(theta), args.seconds)
        print(f"{r:6d} {a:10.1f} {b:10.1f} {b / a:16.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
