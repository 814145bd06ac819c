"""The cost of clipping: gradient evaluations per second, clipped vs unclipped, in one run.

For R chains x N clients with b rows per client and call, on the same problem and theta:

- ``grad``: the unprivate minibatch estimate (rows drawn with replacement, nothing clipped);
- ``record``: ``private_grad(theta, RecordLevel(clip=C), batch_size=b)``: b distinct rows per
  client (top-k of uniforms), every per-example gradient clipped to norm C, summed, scaled;
- ``client``: ``private_grad(theta, ClientLevel(clip=C), batch_size=b)``: the same draw, the
  client's scaled likelihood-gradient sum clipped to norm C.

Problems: LogisticRegression on the digits (10 classes, 64 features, d = 650; closed form:
clipping scales the columns of S - Y by C / (||s - e_y|| ||x||)) and a PyroProblem (Bayesian
linear regression with unknown noise scale, d = 5; per-example gradients by torch.func, vmap
of grad over rows, clients and chains). The variants alternate within each repeat (load
changes hit all alike); each number is the best of ``--repeats`` blocks of ``--calls`` calls.

    python benchmarks/bench_clip.py [--chains 4] [--batch 32] [--repeats 7] [--calls 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

import fedlangevin as fl
from fedlangevin.data import iid_partition, load_digits

from bench_autodiff import blr  # the Bayesian linear regression model both benchmarks time


def problems(clients: int, rows: int):
    """(name, problem, theta scale) for the two problems."""
    digits = load_digits()
    logistic = fl.problems.LogisticRegression.from_partition(digits.X_train, digits.y_train,
                                                             iid_partition(len(digits.y_train), clients, 0))
    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(clients):
        X = torch.randn(rows, 4, generator=g, dtype=torch.float64)
        data.append((X, X @ torch.ones(4, dtype=torch.float64) + torch.randn(rows, generator=g, dtype=torch.float64)))
    return [("logistic (digits)", logistic, 0.01), ("pyro (BLR)", fl.problems.PyroProblem(blr, data), 0.1)]


def best_rates(calls: dict, repeats: int, per_block: int) -> dict:
    """Calls per second of each function: best block of ``per_block`` calls over ``repeats``
    rounds, the functions alternating within each round."""
    best = {name: 0.0 for name in calls}
    for fn in calls.values():  # warm-up (vmap tracing, caches)
        fn()
    for _ in range(repeats):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            for _ in range(per_block):
                fn()
            best[name] = max(best[name], per_block / (time.perf_counter() - t0))
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rows", type=int, default=100, help="rows per client of the Pyro problem")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"R = {args.chains} chains x N = {args.clients} clients x b = {args.batch} rows, C = {args.clip:g}, float64, "
          f"{device}, torch {torch.__version__}, threads = {torch.get_num_threads()}; best of {args.repeats} x "
          f"{args.calls} calls")
    print(f"{'problem':>18} {'d':>4} {'grad/s':>9} {'record/s':>9} {'client/s':>9} {'record/grad':>12} {'client/grad':>12}")
    for name, problem, scale in problems(args.clients, args.rows):
        problem = problem.to(device=device)
        theta = scale * torch.randn(args.chains, problem.num_clients, problem.dim, dtype=torch.float64,
                                    generator=torch.Generator().manual_seed(1)).to(device)
        gen = torch.Generator(device=device).manual_seed(2)
        record, client = fl.privacy.RecordLevel(clip=args.clip), fl.privacy.ClientLevel(clip=args.clip)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

        def timed(fn):
            def call():
                fn()
                sync()
            return call

        rates = best_rates({
            "grad": timed(lambda: problem.grad(theta, batch_size=args.batch, generator=gen)),
            "record": timed(lambda: problem.private_grad(theta, record, batch_size=args.batch, generator=gen)),
            "client": timed(lambda: problem.private_grad(theta, client, batch_size=args.batch, generator=gen)),
        }, args.repeats, args.calls)
        print(f"{name:>18} {problem.dim:>4} {rates['grad']:>9.0f} {rates['record']:>9.0f} {rates['client']:>9.0f} "
              f"{rates['record'] / rates['grad']:>12.2f} {rates['client'] / rates['grad']:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
