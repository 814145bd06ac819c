"""FA-LD with the defaults from the default start (zeros) on the posteriordb posteriors.

    python benchmarks/bench_default_start.py [rounds] [target]

One row per posterior: ``FALD(post.problem, chains=16, seed=0)`` (no ``init=``, no step size;
``target`` other than "auto" runs ``step_size=fl.AutoStep(target)``), K = 1, ``rounds`` rounds
(default 2,000, half warm-up), compared with the reference draws (pass: max |mean error| <= 0.1
sd, sd ratios in [0.9, 1.1]); ESS per chain-round = min bulk ESS / (chains x rounds), warm-up
included. Posteriors whose reference draws are not found are skipped. Prints a markdown table
(docs/adaptation.md, "From the default start: measured").
"""

from __future__ import annotations

import sys
import time

import numpy as np

import fedlangevin as fl
from fedlangevin.experiments import posteriordb as pdb

CHAINS = 16


def main(rounds: int = 2000, target: str = "auto") -> None:
    print("| posterior | d | frozen eta | max mean err / sd | sd ratio min-max | min bulk ESS | ESS per chain-round | "
          "passes | time s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in pdb.POSTERIORS:
        try:
            post = pdb.load(name)
        except Exception as error:  # reference draws not found
            print(f"| {name} | skipped: {str(error)[:60]} |", flush=True)
            continue
        step = "auto" if target == "auto" else fl.AutoStep(float(target))
        start = time.perf_counter()
        sampler = fl.FALD(post.problem, step_size=step, chains=CHAINS, seed=0)
        try:
            trace = sampler.run(rounds, progress=False)
        except fl.DivergenceError as error:
            print(f"| {name} | {post.problem.dim} | diverged: {str(error)[:60]} |", flush=True)
            continue
        seconds = time.perf_counter() - start
        row = pdb.compare(post, np.asarray(trace.numpy()), seconds, local_steps=1, rounds=rounds)
        print(f"| {name} | {post.problem.dim} | {sampler.schedule(sampler.state.step):.3g} | {row.max_mean_error:.3f} | "
              f"{row.min_sd_ratio:.3f}-{row.max_sd_ratio:.3f} | {row.min_ess_bulk:.0f} | "
              f"{row.min_ess_bulk / (CHAINS * rounds):.4f} | {'yes' if row.passes() else 'no'} | {seconds:.0f} |",
              flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000, sys.argv[2] if len(sys.argv) > 2 else "auto")
