"""What the default check of a fixed K > 1 (``check_local_bias=True``) costs against the same run without it.

FA-LD on the paper's Gaussian simulation (``GaussianSimulation``: 50 clients, d = 2) with K local
steps (default 10), ``--chains`` chains (default 300, the paper's count) and a fixed step
(0.05 / L), ``--rounds`` rounds per run (default 300: the companions' pilot, burn-in and kept
rounds, and the verdict), in one process: runs with the check off and on alternate
(``--repeats`` pairs, after one untimed pair that pays the one-off imports), and the table gives
the local steps per second of each and the ratio of their totals, in CPU time of the process
(``time.process_time``: one thread, so it is the run's own work, whatever else the machine runs)
and in wall time.

    python benchmarks/bench_local_bias_cost.py [--local-steps 10] [--chains 300] [--rounds 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlangevin as fl  # noqa: E402
from fedlangevin.problems import GaussianSimulation  # noqa: E402


def timed(problem, check: bool, args) -> tuple[float, float, str]:
    """(CPU s, wall s, the check's record) of one run."""
    sampler = fl.FALD(problem, step_size=0.05 / problem.smoothness, local_steps=args.local_steps,
                      chains=args.chains, seed=0, check_local_bias=check)
    cpu, wall = time.process_time(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = sampler.run(args.rounds, progress=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    bias = trace.local_step_bias
    return cpu, wall, "-" if bias is None else ("measured" if bias.measured else "not measured")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--local-steps", type=int, default=10)
    ap.add_argument("--chains", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    problem = GaussianSimulation(num_clients=50)
    timed(problem, False, args), timed(problem, True, args)  # the one-off imports and caches
    totals = {False: [0.0, 0.0], True: [0.0, 0.0]}
    record = "-"
    for _ in range(args.repeats):
        for check in (False, True):
            cpu, wall, rec = timed(problem, check, args)
            totals[check][0] += cpu
            totals[check][1] += wall
            record = rec if check else record
    steps = args.repeats * args.rounds * args.local_steps
    print(f"FA-LD, K = {args.local_steps}, {args.chains} chains x 50 clients, d = 2, fixed step, "
          f"{args.rounds} rounds x {args.repeats} runs each (the check: {record})")
    print("| check_local_bias | local steps/s (CPU) | local steps/s (wall) |")
    print("| --- | ---: | ---: |")
    for check in (False, True):
        cpu, wall = totals[check]
        print(f"| {check} | {steps / cpu:,.0f} | {steps / wall:,.0f} |")
    print(f"| ratio on / off | {totals[True][0] / totals[False][0]:.2f} | {totals[True][1] / totals[False][1]:.2f} |")


if __name__ == "__main__":
    main()
