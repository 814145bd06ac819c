"""The local-step bias measured in warm-up against the true error, on the posteriordb posteriors (issue 27).

Per posterior: FALD(problem, local_steps=K, chains=R, init="map") with the defaults
(step_size="auto", warm-up = half the rounds; a fixed K > 1 is checked after the warm-up against
K = 1 companion chains at step K eta and warns where its mean shift exceeds 0.1 sd on evidence),
against Stan's reference draws: the measured worst |mean shift| (unconstrained coordinates, in
K = 1 sds; for "auto" also |sd ratio - 1|) with its lower and upper bound at 95 %, the worst
|sd ratio - 1| against the companions (recorded, not tested), whether the run warned, and the true max
|mean error| / sd and sd ratios of its draws (the model's own coordinates, as docs/validation.md)
and whether it passes the acceptance. ``--auto`` adds a row of local_steps="auto" (the K chosen)
and one of K = 1 with the same seed; every row gives the min bulk ESS (the model's coordinates)
per sampling round (rounds - warm-up; the warm-up is rounds // 2 in every row), so the rounds
"auto" saves are ESS-per-round ratios against the K = 1 row. ``--no-fixed`` leaves out the fixed
K's row.

    python benchmarks/bench_local_bias.py [--rounds 2000] [--chains 32] [--local-steps 10] [--auto]
        [--no-fixed] [--names diamonds-diamonds ...]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlangevin as fl  # noqa: E402
from fedlangevin.experiments.posteriordb import POSTERIORS, compare, load  # noqa: E402
from fedlangevin.fald.warmup.local_bias import margins  # noqa: E402


def row(post, local_steps, rounds: int, chains: int, seed: int) -> str:
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = fl.FALD(post.problem, local_steps=local_steps, chains=chains, seed=seed, init="map")
        trace = sampler.run(rounds, progress=False)
    seconds = time.perf_counter() - start
    warned = any("local-step bias" in str(w.message) for w in caught)
    truth = compare(post, np.asarray(trace.numpy()), seconds, local_steps=sampler.local_steps, rounds=rounds)
    bias = trace.local_step_bias
    if bias is None or not bias.measured:
        measured = f"not measured ({'' if bias is None else bias.note})"
    else:
        conf = bias.confidence
        parts = []
        for est in bias.estimates:
            mean_only = bias.companions and not bias.auto  # a fixed K's check tests the means alone
            tests = margins(est, conf, sd=not mean_only)
            low = max(dev - m for _, _, dev, m in tests)
            high = max(dev + m for _, _, dev, m in tests)
            worst = max(dev for _, _, dev, _ in tests)
            sd = f"; sd {max(abs(v - 1) for v in est.sd_ratio):.3f}" if mean_only else ""
            parts.append(f"K={est.local_steps}: {worst:.3f} [{low:.3f}, {high:.3f}]{sd}")
        measured = "; ".join(parts)
    name = post.name.split("-")[0]
    k = "auto" if isinstance(local_steps, str) else local_steps
    per_round = truth.min_ess_bulk / (rounds - rounds // 2)
    return (f"| {name} | {k} | {sampler.local_steps} | {measured} | {'yes' if warned else 'no'} | "
            f"{truth.max_mean_error:.3f} | {truth.min_sd_ratio:.3f}-{truth.max_sd_ratio:.3f} | "
            f"{'yes' if truth.passes() else 'no'} | {truth.mc_error:.3f} | {truth.min_ess_bulk:.0f} | "
            f"{per_round:.3f} | {seconds:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--auto", action="store_true", help="also rows of local_steps='auto' and K = 1")
    parser.add_argument("--no-fixed", action="store_true", help="no row of the fixed --local-steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--names", nargs="*", default=list(POSTERIORS))
    args = parser.parse_args()
    print("| posterior | K asked | K run | measured worst bias [95 % bounds] | warned | max mean err / sd "
          "| sd ratio min-max | passes | MC err | min ESS | ESS / sampling round | time s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.names:
        post = load(name)
        for k in ([] if args.no_fixed else [args.local_steps]) + (["auto", 1] if args.auto else []):
            print(row(post, k, args.rounds, args.chains, args.seed), flush=True)


if __name__ == "__main__":
    main()
