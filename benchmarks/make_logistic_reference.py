"""Regenerate the long-run NUTS reference of the breast cancer logistic regression
(fedlangevin/experiments/data/breast_cancer_reference.npz; see
fedlangevin.experiments.logistic_posterior): Pyro's NUTS, dense mass matrix, 4 chains x
(2,000 warm-up + 10,000 kept iterations) from zeros, seeds 0..3, thinned by 5 (8,000 draws,
float32, about 0.6 MB). About 15-30 minutes on one loaded core.

    python benchmarks/make_logistic_reference.py [--out PATH] [--chains 4] [--warmup 2000] [--draws 10000] [--thin 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlangevin.experiments.logistic_posterior import REFERENCE, make_reference, write_reference  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REFERENCE))
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--draws", type=int, default=10000)
    ap.add_argument("--thin", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    draws, info = make_reference(args.chains, args.warmup, args.draws, args.thin, args.seed, progress=args.progress)
    write_reference(args.out, draws, info)
    print(f"{args.out}: draws {draws.shape}, max R-hat {info['max_rhat']:.4f}, min bulk ESS {info['min_ess_bulk']:.0f} "
          f"(all kept iterations), {info['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
