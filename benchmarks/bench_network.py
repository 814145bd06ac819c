"""A Bayesian neural network on Fashion-MNIST over 10 clients: FA-LD and FA-HMC against FedAvg's
MAP and a deep ensemble of the same network (accuracy, NLL, ECE of the predictive against rounds,
wall time and peak memory).

Each method runs in its own process (``--method``), so that its peak resident memory
(``ru_maxrss``) is its own; ``--method all`` runs the four one after the other and prints the
table (docs/network.md). Needs the installed Fashion-MNIST (``load_dataset("fashion-mnist")``).

    nice python benchmarks/bench_network.py --method all --threads 1
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import diagnostics  # noqa: E402
from fedlangevin.baselines import fedavg  # noqa: E402
from fedlangevin.data import load_dataset, make_partition  # noqa: E402
from fedlangevin.problems import NetworkProblem  # noqa: E402

METHODS = ("fald", "fahmc", "fedavg", "ensemble")


def build(args):
    data = load_dataset("fashion-mnist")
    gen = torch.Generator().manual_seed(args.seed)
    keep = torch.randperm(data.y_train.numel(), generator=gen)[: args.records]
    x, y = data.X_train[keep].double(), data.y_train[keep]
    parts = make_partition("iid", y, args.clients, torch.Generator().manual_seed(args.seed))
    torch.manual_seed(args.seed)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], args.hidden), torch.nn.ReLU(),
                              torch.nn.Linear(args.hidden, 10))
    problem = NetworkProblem.from_partition(net, x, y, parts, prior_scale=args.prior_scale)
    return problem, data.X_test.double(), data.y_test.numpy()


class Scorer:
    """Running predictive: the mean of the class probabilities of every draw scored so far."""

    def __init__(self, problem, x_test, y_test):
        self.problem, self.x, self.y = problem, x_test, y_test
        self.total, self.count, self.rows = None, 0, []

    def add(self, draws: torch.Tensor) -> None:
        probs = self.problem.predict_proba(draws.reshape(-1, self.problem.dim).double(), self.x).sum(0)
        self.total = probs if self.total is None else self.total + probs
        self.count += draws.reshape(-1, self.problem.dim).shape[0]

    def score(self, rounds: int, wall: float, probs=None) -> dict:
        p = (self.total / self.count).numpy() if probs is None else probs
        p = np.clip(p, 1e-12, 1.0)
        p = p / p.sum(1, keepdims=True)
        row = dict(rounds=rounds, wall_s=round(wall, 1), draws=self.count,
                   accuracy=float((p.argmax(1) == self.y).mean()), nll=float(diagnostics.nll(p, self.y)),
                   ece=float(diagnostics.ece(p, self.y)))
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        return row


def fedavg_map(args, problem):
    """The samplers' start: FedAvg's model after ``--map-rounds`` rounds (the run ``--method fedavg`` makes)."""
    return fedavg(problem, args.map_rounds, lr=args.lr, local_steps=args.local_steps, batch_size=args.batch,
                  init=problem.init_draws(1, args.seed), seed=args.seed, dtype=torch.float32)[0].double()


def run_sampler(args, problem, scorer, kind):
    import fedlangevin as fl

    cls = fl.FALD if kind == "fald" else fl.FAHMC
    start = time.perf_counter()
    if args.start == "map":
        init, offset = fedavg_map(args, problem), args.map_rounds  # rounds counted from FedAvg's first
    else:
        init, offset = problem.init_draws(args.chains, args.seed), 0
    sampler = cls(problem, chains=args.chains, batch_size=args.batch, temperature=args.temperature,
                  init=init, seed=args.seed, dtype=torch.float32)
    trace = sampler.run(rounds=2 * args.warmup, warmup=args.warmup)  # adapts during the first half
    done = 2 * args.warmup
    scorer.add(torch.as_tensor(np.asarray(trace.samples))[:, :: args.thin])
    scorer.score(offset + done, time.perf_counter() - start)
    while done < args.rounds:
        trace = sampler.run(rounds=args.every)
        done += args.every
        scorer.add(torch.as_tensor(np.asarray(trace.samples))[:, :: args.thin])
        scorer.score(offset + done, time.perf_counter() - start)
    return dict(start=args.start, sampler_rounds=done, start_rounds=offset)


def run_fedavg(args, problem, scorer, members):
    start = time.perf_counter()
    init = problem.init_draws(members, args.seed)
    total = args.rounds + (args.map_rounds if args.start == "map" else 0)  # as many rounds as the samplers

    def callback(r, theta):
        if r % args.every == 0 or r == total:
            scorer.total, scorer.count = None, 0
            scorer.add(theta.float().double())
            scorer.score(r, time.perf_counter() - start)

    fedavg(problem, total, lr=args.lr, local_steps=args.local_steps, batch_size=args.batch, init=init,
           members=members, seed=args.seed, dtype=torch.float32, callback=callback)
    return {}


def one(args):
    torch.set_num_threads(args.threads)
    problem, x_test, y_test = build(args)
    scorer = Scorer(problem, x_test, y_test)
    start = time.perf_counter()
    if args.method in ("fald", "fahmc"):
        extra = run_sampler(args, problem, scorer, args.method)
    else:
        extra = run_fedavg(args, problem, scorer, 1 if args.method == "fedavg" else args.members)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)
    out = dict(method=args.method, d=problem.dim, records=problem.num_data, wall_s=round(time.perf_counter() - start, 1),
               peak_gib=round(peak, 2), curve=scorer.rows, **extra)
    print("RESULT " + json.dumps(out), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=(*METHODS, "all"), default="all")
    ap.add_argument("--records", type=int, default=6_000, help="training records used (a random subset)")
    ap.add_argument("--hidden", type=int, default=50, help="hidden units of the 784-h-10 ReLU MLP")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--batch", type=int, default=100, help="minibatch rows per client and step")
    ap.add_argument("--rounds", type=int, default=300, help="rounds of each method (the samplers: after their start)")
    ap.add_argument("--start", choices=("map", "init"), default="map",
                    help="samplers start at FedAvg's model after --map-rounds rounds, or at the module's initialisation")
    ap.add_argument("--map-rounds", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50, help="sampler warm-up rounds (then as many kept)")
    ap.add_argument("--every", type=int, default=100, help="score every this many rounds")
    ap.add_argument("--thin", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed to each method's process")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--prior-scale", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=0.1, help="FedAvg's learning rate (mean per-record loss)")
    ap.add_argument("--local-steps", type=int, default=5, help="FedAvg's local steps per round")
    ap.add_argument("--members", type=int, default=4, help="deep ensemble members")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write the results (JSON) here")
    args = ap.parse_args(argv)
    if args.method != "all":
        one(args)
        return
    results = []
    for method in METHODS:
        cmd = [sys.executable, __file__, "--method", method] + [a for a in (argv or sys.argv[1:])
                                                               if a not in ("--method", "all")]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"{method} did not finish within {args.timeout:.0f} s", flush=True)
            continue
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            print(f"{method} failed:\n{proc.stderr[-3000:]}", flush=True)
            continue
        res = json.loads(lines[-1][len("RESULT "):])
        results.append(res)
        last = res["curve"][-1]
        print(f"{method:9s} acc {last['accuracy']:.4f}  NLL {last['nll']:.4f}  ECE {last['ece']:.4f}  rounds "
              f"{last['rounds']}  wall {res['wall_s']:.0f} s  peak {res['peak_gib']:.2f} GiB", flush=True)
    print("\n| method | rounds | accuracy | NLL | ECE | wall (s) | peak memory (GiB) |\n|---|---|---|---|---|---|---|")
    for res in results:
        last = res["curve"][-1]
        print(f"| {res['method']} | {last['rounds']} | {last['accuracy']:.4f} | {last['nll']:.4f} | {last['ece']:.4f} "
              f"| {res['wall_s']:.0f} | {res['peak_gib']:.2f} |")
    if args.out is not None:
        args.out.write_text(json.dumps(dict(settings=vars(args) | {"out": str(args.out)}, results=results), indent=1))


if __name__ == "__main__":
    main()
