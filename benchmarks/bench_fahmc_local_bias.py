"""FA-HMC's check of a fixed K > 1 (fedlangevin.fahmc.local_bias) against the true error, on posteriordb posteriors.

Per posterior: M, h and the friction from a K = 1 run with FA-HMC's defaults (``FAHMC(problem,
chains=R, seed=0)``, 1,000 rounds, warm-up 500), then per K a run with that numeric h, friction
and M from its last iterates (``FAHMC(..., step_size=h, friction=gamma, local_steps=K,
preconditioner=M, init=...)``, R chains, ``--rounds`` rounds of which 100 are discarded, seed 1;
``check_local_bias=True``, the default): the measured worst bias against the K = 1 companion chains
(mean shift or sd ratio - 1, unconstrained coordinates, in K = 1 sds, with its jackknife standard
error), whether the run warned, and the true max |mean error| / sd and sd ratios of its draws
against Stan's reference (``posteriordb.compare``, the model's own coordinates).

    python benchmarks/bench_fahmc_local_bias.py [--names earnings-logearn_interaction_z ...] [--ks 2 5 10]
        [--rounds 1000] [--chains 32]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlangevin as fl  # noqa: E402
from fedlangevin.experiments import posteriordb as pdb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", default=["earnings-logearn_interaction_z"])
    parser.add_argument("--ks", nargs="+", type=int, default=[2, 5, 10])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| posterior | K | measured worst bias (se) | warning | true max \\|mean err\\| / sd | true sd ratios |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.names:
        post = pdb.load(name)
        start = time.time()
        first = fl.FAHMC(post.problem, chains=args.chains, seed=0)
        trace = first.run(1000, progress=False)  # warm-up 500: M, h and gamma adapted at K = 1
        h, gamma, matrix = float(first.schedule(first.state.step)), first.friction, first.preconditioner
        row = pdb.compare(post, trace.samples.numpy(), time.time() - start, local_steps=1, rounds=1000)
        print(f"| {name} | 1 (defaults: h = {h:.3g}, gamma = {gamma:.3g}) | - | - | {row.max_mean_error:.3f} | "
              f"{row.min_sd_ratio:.3f}-{row.max_sd_ratio:.3f} |", flush=True)
        names = post.problem.parameter_names()
        for k in args.ks:
            start = time.time()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sampler = fl.FAHMC(post.problem, step_size=h, friction=gamma, local_steps=k, chains=args.chains,
                                   seed=1, preconditioner=matrix, init=first.state.theta)
                trace = sampler.run(args.rounds, warmup=100, progress=False)
            warned = any("local-step bias" in str(w.message) for w in caught)
            row = pdb.compare(post, trace.samples.numpy(), time.time() - start, local_steps=k, rounds=args.rounds)
            bias = trace.local_step_bias
            if bias.estimates:
                (e,) = bias.estimates
                devs = [(abs(v), f"mean shift {v:+.3f} ({se:.3f}) on {names[i]}")
                        for i, (v, se) in enumerate(zip(e.mean_shift, e.mean_shift_se))]
                devs += [(abs(v - 1), f"sd ratio {v:.3f} ({se:.3f}) on {names[i]}")
                         for i, (v, se) in enumerate(zip(e.sd_ratio, e.sd_ratio_se))]
                measured = max(devs)[1]
            else:
                measured = f"not measured: {bias.note}"
            print(f"| {name} | {k} | {measured} | {'yes' if warned else 'no'} | {row.max_mean_error:.3f} | "
                  f"{row.min_sd_ratio:.3f}-{row.max_sd_ratio:.3f} |", flush=True)


if __name__ == "__main__":
    main()
