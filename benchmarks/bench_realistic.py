"""FA-LD (and FA-HMC) with their defaults in realistic federated settings on the posteriordb set.

Per posterior and setting: full participation with full-batch gradients (the lab corner),
``SchemeI(5)``, ``SchemeII(5)`` (``allow_unbalanced=True`` where the clients' sizes differ) and
minibatches of 10 % of the smallest client's records (at least 5), 10 clients, ``init="map"``,
``step_size="auto"``, warm-up half the rounds; a ``--recipes`` entry adds a correction. Columns:
max |mean error| / sd, sd ratio range, min bulk ESS per chain and kept round, and whether the
row meets the validation's acceptance (mean error <= 0.1 sd, sd ratios in [0.9, 1.1]).

    python benchmarks/bench_realistic.py [--rounds 2000] [--chains 32] [--names ...] [--settings full scheme1 ...]
        [--corrections none control_variates]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlangevin as fl  # noqa: E402
from fedlangevin.experiments.posteriordb import POSTERIORS, Recipe, load, validate  # noqa: E402

SETTINGS = ("full", "scheme1", "scheme2", "minibatch")


def recipe(setting: str, correction: str | None, problem) -> Recipe:
    """The validation recipe of one setting (and correction) on ``problem``."""
    balanced = bool(torch.allclose(problem.weights, torch.full_like(problem.weights, 1 / problem.num_clients)))
    participation = {"scheme1": fl.SchemeI(5), "scheme2": fl.SchemeII(5, allow_unbalanced=not balanced)}.get(setting)
    return Recipe(f"FA-LD {setting}" + ("" if correction is None else f" {correction}"), correction, 0.0,
                  participation, 0.1 if setting == "minibatch" else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--chains", type=int, default=32)
    ap.add_argument("--names", nargs="+", default=[n for n in POSTERIORS], choices=POSTERIORS)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    ap.add_argument("--corrections", nargs="+", default=["none"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| posterior | setting | correction | max mean err / sd | sd ratio min-max | ESS / chain-round | eta | "
          "passes | time s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.names:
        post = load(name)
        for setting in args.settings:
            for corr in args.corrections:
                correction = None if corr == "none" else corr
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    row = validate(post, rounds=args.rounds, chains=args.chains,
                                   recipe=recipe(setting, correction, post.problem))
                notes = "; ".join(sorted({str(w.message)[:60] for w in caught if "balanced" not in str(w.message)}))
                per = row.min_ess_bulk / (args.chains * (args.rounds - args.rounds // 2))
                print(f"| {name} | {setting} | {corr} | {row.max_mean_error:.3f} | {row.min_sd_ratio:.3f}-"
                      f"{row.max_sd_ratio:.3f} | {per:.4f} | {row.step_size:.3g} | {'yes' if row.passes() else 'no'} | "
                      f"{row.seconds:.1f} |" + (f" {notes}" if notes else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
