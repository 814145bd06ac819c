"""Long runs: peak memory against run length (draws in memory, on-disk store, statistics only)
and the time cost of the store, checkpoints and streaming statistics, measured in one run.

    python benchmarks/bench_long_runs.py [--rounds 500 1000 2000 4000 8000] [--chains 100]
                                         [--dim 20] [--out docs/img]

Memory: every (mode, rounds) pair runs in a fresh process, which first makes a short warm-up
run and then the measured one; the growth of the peak resident set size (``ru_maxrss``) over
the warm-up's is printed (MiB), next to what the draws occupy in memory (chains x d x 8 bytes
per draw). Writes ``long_runs_memory.png`` to ``--out``.

Time: the same run (memory mode as the baseline) with a store, with a checkpoint every 100
rounds (memory mode and store mode), with statistics, and with statistics and a W2 target;
each timed three times, alternating, best of three; the ratios to the baseline and the extra
time per draw or per checkpoint are printed. Rounds are cheap here (a small problem), so the
ratios are an upper bound of what a real run pays; a checkpoint costs mostly fsync latency.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, sys, torch
import fedlangevin as fl
rounds, chains, dim, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def peak():  # MiB; VmHWM starts afresh at exec, ru_maxrss keeps the parent's peak from fork
    try:
        line = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]
        return int(line.split()[1]) / 1024
    except (OSError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
problem = fl.problems.GaussianSimulation(num_clients=4, samples_per_client=5, cov=torch.eye(dim) * 2, seed=0)
sampler = fl.FALD(problem, step_size=1e-4, chains=chains, seed=0)
kw = {"memory": {}, "store": {"store": "store"}, "stats": {"keep_samples": False, "stats": True}}[mode]
sampler.run(100, **({"store": "warm"} if mode == "store" else kw))
base = peak()
sampler.run(rounds, **kw)
print(json.dumps({"growth": peak() - base}))
"""


def memory_growth(rounds: int, chains: int, dim: int, mode: str, timeout: float | None = None) -> float:
    """Growth (MiB) of the peak resident set of a fresh process over its warm-up, for a run of
    ``rounds`` rounds in ``mode`` ("memory", "store" or "stats"); also used by tests/runner/io/test_store.py."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        res = subprocess.run([sys.executable, "-c", CHILD, str(rounds), str(chains), str(dim), mode], cwd=tmp,
                             env=env, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"memory probe ({rounds} rounds, {mode}) failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])["growth"]


def timings(rounds: int, chains: int, dim: int) -> dict[str, float]:
    import torch

    import fedlangevin as fl

    problem = fl.problems.GaussianSimulation(num_clients=4, samples_per_client=5, cov=torch.eye(dim) * 2, seed=0)
    configs = {
        "memory (baseline)": lambda d: {},
        "store": lambda d: {"store": d / "s"},
        "checkpoint every 100 rounds": lambda d: {"checkpoint": d / "c", "checkpoint_every": 100},
        "store + checkpoint every 100": lambda d: {"store": d / "s", "checkpoint": d / "c", "checkpoint_every": 100},
        "statistics only (no draws)": lambda d: {"keep_samples": False, "stats": True},
        "statistics + W2 to target": lambda d: {"keep_samples": False, "target": "posterior"},
    }
    best = {name: float("inf") for name in configs}
    for _ in range(3):
        for name, make in configs.items():
            with tempfile.TemporaryDirectory() as tmp:
                sampler = fl.FALD(problem, step_size=1e-4, chains=chains, seed=0)
                t0 = time.perf_counter()
                sampler.run(rounds, **make(Path(tmp)))
                best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, nargs="+", default=[500, 1000, 2000, 4000, 8000])
    ap.add_argument("--chains", type=int, default=100)
    ap.add_argument("--dim", type=int, default=20)
    ap.add_argument("--time-rounds", type=int, default=2000)
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args()

    modes = ["memory", "store", "stats"]
    growth = {m: [memory_growth(r, args.chains, args.dim, m) for r in args.rounds] for m in modes}
    draws_mib = [r * args.chains * args.dim * 8 / 2**20 for r in args.rounds]
    print(f"peak RSS growth (MiB) of a run of R = {args.chains} chains, d = {args.dim}, one draw per round")
    print("| rounds | draws in memory (size) | memory | store | statistics only |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(args.rounds):
        print(f"| {r} | {draws_mib[i]:.1f} | {growth['memory'][i]:.1f} | {growth['store'][i]:.1f} | {growth['stats'][i]:.1f} |")

    best = timings(args.time_rounds, args.chains, args.dim)
    base = best["memory (baseline)"]
    n = args.time_rounds
    print(f"\ntime of {n} rounds, best of 3 (ratio to keeping the draws in memory; extra cost per unit)")
    per = {"store": (n, "draw"), "checkpoint every 100 rounds": (n // 100, "checkpoint"),
           "store + checkpoint every 100": (n // 100, "checkpoint"), "statistics only (no draws)": (n, "draw"),
           "statistics + W2 to target": (n, "draw")}
    for name, t in best.items():
        extra = ""
        if name in per:
            count, unit = per[name]
            extra = f"   {(t - base) / count * 1e3:+.3f} ms per {unit}"
        print(f"  {name:32s} {t:7.3f} s   x{t / base:.2f}{extra}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(args.rounds, draws_mib, "k:", label="size of the draws")
    for mode, label, marker in (("memory", "draws in memory", "o"), ("store", "on-disk store", "s"),
                                ("stats", "statistics only", "^")):
        ax.plot(args.rounds, growth[mode], marker=marker, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(args.rounds)
    ax.set_xticklabels([str(r) for r in args.rounds])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("rounds (one draw per round)")
    ax.set_ylabel("peak resident memory growth (MiB)")
    ax.set_title(f"FA-LD run, {args.chains} chains x d = {args.dim}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "long_runs_memory.png", dpi=120)
    print(f"\nwrote {out / 'long_runs_memory.png'}")


if __name__ == "__main__":
    main()
