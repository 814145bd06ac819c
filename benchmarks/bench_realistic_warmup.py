"""Both samplers with their defaults under partial participation and minibatch gradients, on the
posteriordb validation set: what ``step_size="auto"`` picks and what it gives.

Per posterior, sampler (FA-LD with ``init="map"``, FA-HMC with ``init="map"``) and setting (``full``:
every client every round; ``I``: ``SchemeI(5)``; ``II``: ``SchemeII(5)``; ``mb``: minibatches of 10 % of
each client's records, at least 5; not run where a client holds 5 records or fewer), 10 clients, the defaults otherwise (``step_size="auto"``, warm-up
half the rounds): the adapted step, max |mean error| / sd, the sd ratios, min bulk ESS per chain and
kept round, and whether the row meets the validation's acceptance (means within 0.1 sd, sds within
10 %). One row per line, printed as it finishes.

    python benchmarks/bench_realistic_warmup.py [--chains 16] [--rounds 1000] [--settings full I II mb]
        [--samplers fald fahmc] [--names arK-arK ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlangevin as fl  # noqa: E402
from fedlangevin.experiments.posteriordb import POSTERIORS, compare, load  # noqa: E402

SETTINGS = ("full", "I", "II", "mb")


def setting_arguments(post, setting: str) -> dict:
    """The sampler arguments of a setting (module docstring)."""
    if setting == "I":
        return {"participation": fl.SchemeI(5)}
    if setting == "II":
        return {"participation": fl.SchemeII(5)}
    if setting == "mb":
        sizes = getattr(post.problem, "client_sizes", None)
        if sizes is None:
            return {}
        smallest = min(int(n) for n in sizes)
        if smallest <= 5:  # 10 % but at least 5 records: the whole client (full gradients) here
            return {}
        return {"batch_size": max(5, int(0.1 * smallest))}
    return {}


def run(post, sampler: str, setting: str, chains: int, rounds: int, seed: int = 0) -> str:
    """One row (markdown) of the table."""
    kwargs = setting_arguments(post, setting)
    if setting == "mb" and not kwargs:
        return f"| {post.name} | {sampler} | {setting} | - | no minibatches (no per-record data, or 5 records or fewer) | | | |"
    start = time.perf_counter()
    try:
        cls = fl.FALD if sampler == "fald" else fl.FAHMC
        s = cls(post.problem, chains=chains, seed=seed, init="map", **kwargs)
        trace = s.run(rounds, progress=False)
    except ValueError as err:
        return f"| {post.name} | {sampler} | {setting} | - | refused: {str(err)[:80]} | | | |"
    row = compare(post, np.asarray(trace.numpy()), time.perf_counter() - start, rounds=rounds)
    kept = trace.numpy().shape[1]
    step = float(s.schedule(s.state.step))
    return (f"| {post.name} | {sampler} | {setting} | {step:.3g} | {row.max_mean_error:.3f} | "
            f"{row.min_sd_ratio:.3f}-{row.max_sd_ratio:.3f} | {row.min_ess_bulk / (chains * kept):.4f} | "
            f"{'yes' if row.passes() else 'no'} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    ap.add_argument("--samplers", nargs="+", default=["fald", "fahmc"], choices=["fald", "fahmc"])
    ap.add_argument("--names", nargs="+", default=list(POSTERIORS), choices=POSTERIORS)
    args = ap.parse_args()
    print("| posterior | sampler | setting | step | max mean err / sd | sd ratio min-max | min ESS / chain-round | "
          "passes |\n| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for name in args.names:
        post = load(name)
        for sampler in args.samplers:
            for setting in args.settings:
                print(run(post, sampler, setting, args.chains, args.rounds), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
