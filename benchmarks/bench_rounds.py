"""Effective samples per communication round: FA-LD and FA-HMC with their defaults beside federated
NUTS on every validation posterior (docs/rounds.md; fedlangevin.experiments.rounds).

Per posterior (the eleven posteriordb ones the package ships, or those under
$FEDLANGEVIN_POSTERIORDB when set, and the breast cancer logistic regression shipped
with the package) and sampler (FA-LD as a user gets it: FALD(problem, local_steps=1, chains=32),
no init, no step size; FA-HMC likewise, FAHMC(problem, local_steps=1, chains=32); federated NUTS: Pyro's NUTS, dense mass, 4 chains, one round per
gradient): rounds to the acceptance (the smallest budget of the grid whose run passes: max |mean
err| <= 0.1 sd, sd ratios in [0.9, 1.1]), and of the largest budget's run (FA-LD 2,000 rounds,
NUTS 1,000 warm-up + 1,000 draws per chain): the acceptance figures, min bulk ESS, ESS per
chain-round (warm-up included; NUTS: per gradient), bits sent, wall time. Prints a progress line
per run, the table and the targets' tables; writes the rows as JSON and one figure.

    python benchmarks/bench_rounds.py                                  # everything (97 min on 2 loaded cores, 95 % NUTS)
    python benchmarks/bench_rounds.py --quick                          # a smoke run: 2 posteriors, tiny budgets (30 s)
    python benchmarks/bench_rounds.py --posteriors kidiq-kidscore_momhsiq breast_cancer-logistic
    python benchmarks/bench_rounds.py --samplers fald                  # FA-LD rows only
    python benchmarks/bench_rounds.py --samplers fahmc                 # FA-HMC rows only
    python benchmarks/bench_rounds.py --samplers consensus --posteriors kidiq-kidscore_momhsiq   # consensus MC rows
    python benchmarks/bench_rounds.py --from-json docs/img/rounds.json # redraw the table and figure
    python benchmarks/bench_rounds.py --from-json a.json b.json --json merged.json   # b's rows replace a's
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedlangevin.experiments.logistic_posterior import NAME as LOGISTIC  # noqa: E402
from fedlangevin.experiments.rounds import (  # noqa: E402
    QUICK, SAMPLERS, Budgets, available, figure, load_posterior, measure, merge_rows, read_rows, summary_table, table,
    versus_table, write_json,
)

QUICK_POSTERIORS = ["earnings-logearn_interaction_z", LOGISTIC]
DEFAULT_SAMPLERS = ("fald", "nuts")


def redraw(paths, figure_path, json_path) -> int:
    """The tables and the figure of earlier runs' JSON files, merged (:func:`merge_rows`)."""
    runs = [read_rows(p) for p in paths]
    budgets = runs[0][1]
    if any(b != budgets for _, b in runs):
        raise SystemExit(f"--from-json: the files were made with different settings: {[b for _, b in runs]}")
    rows = merge_rows(*(r for r, _ in runs))
    print(table(rows, budgets), "", summary_table(rows, max_rounds=2000), "", versus_table(rows), sep="\n")
    figure(rows, figure_path)
    if json_path:
        meta = [json.loads(Path(p).read_text()) for p in paths]
        write_json(rows, json_path, budgets=budgets, seconds=sum(m["seconds"] for m in meta),
                   command=" && ".join(m["command"] for m in meta))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--posteriors", nargs="+", default=None, help="default: every one found (--quick: "
                    + ", ".join(QUICK_POSTERIORS) + ")")
    ap.add_argument("--samplers", nargs="+", default=list(DEFAULT_SAMPLERS), choices=list(SAMPLERS),
                    help=f"default: {' '.join(DEFAULT_SAMPLERS)} (consensus runs NUTS on every client: slow, ask for it)")
    ap.add_argument("--quick", action="store_true", help="tiny budgets and few chains: a smoke run, not a measurement")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="default: docs/img/rounds.json (--quick: none)")
    ap.add_argument("--figure", default=None, help="default: docs/img/rounds.png (--quick: none)")
    ap.add_argument("--from-json", nargs="+", default=None, metavar="JSON", help="print the tables and draw the "
                    "figure from earlier runs' JSON (several: a later file's row replaces the same posterior and "
                    "sampler's row of an earlier one; --json: write the merged rows); run nothing")
    args = ap.parse_args(argv)
    if args.from_json:
        return redraw(args.from_json, args.figure or str(ROOT / "docs" / "img" / "rounds.png"), args.json)
    if not args.quick:
        args.json = args.json or str(ROOT / "docs" / "img" / "rounds.json")
        args.figure = args.figure or str(ROOT / "docs" / "img" / "rounds.png")
    found = available()
    names = args.posteriors or (QUICK_POSTERIORS if args.quick else found)
    missing = [n for n in names if n not in found]
    if missing:
        ap.error(f"--posteriors: not found: {', '.join(missing)} (found: {', '.join(found)})")
    budgets = Budgets(**{**vars(QUICK if args.quick else Budgets()), "seed": args.seed})
    torch.set_num_threads(1)
    command = " ".join(["python benchmarks/bench_rounds.py"] + [shlex.quote(a) for a in (argv or sys.argv[1:])])
    start, rows = time.perf_counter(), []
    for i, name in enumerate(names, 1):
        post = load_posterior(name)
        for sampler in args.samplers:
            t = time.perf_counter()
            row = measure(post, sampler, budgets, progress=lambda line: print(line, flush=True))
            rows.append(row)
            reach = "-" if row.rounds_to_accept is None else f"{row.rounds_to_accept:,}"
            print(f"[{i}/{len(names)}] {name} {row.sampler}: reach {reach} rounds, ESS/chain-round "
                  f"{row.ess_per_round:.3g}, {'passes' if row.passes else 'fails'} at {row.rounds:,} rounds "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)
            if args.json:  # after every row: a long run stopped half-way keeps what it measured
                write_json(rows, args.json, budgets=budgets, seconds=time.perf_counter() - start, command=command)
    seconds = time.perf_counter() - start
    print(f"\n{command}: {seconds:.0f} s\n")
    print(table(rows, budgets), "", summary_table(rows, max_rounds=2000), "", versus_table(rows), sep="\n")
    if args.json:
        write_json(rows, args.json, budgets=budgets, seconds=seconds, command=command)
    if args.figure:
        figure(rows, args.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
