"""``fedlangevin validate``: FA-LD with its defaults on posteriordb posteriors, against Stan's reference.

For each posterior (default: every one found) and each K in ``--local-steps``, runs
``FALD(problem, local_steps=K, chains=R, init="map")`` with ``step_size="auto"`` and the
default warm-up (half the rounds), 10 iid clients (eight schools: a school per client), and
prints one row per run: max |mean - mean_ref| / sd_ref, the range of sd / sd_ref, the
fitted-Gaussian W2 in the unconstrained space / sqrt(tr Sigma_ref), min bulk ESS, ESS per
second, wall time, the Monte Carlo error of the means (1 / sqrt(ESS)) and whether the run passes
the acceptance (max |mean error| <= 0.1 sd and every sd ratio in [0.9, 1.1]; a failing row's
mean error is also marked "(fails)"); a run that diverges (``DivergenceError``) is a
failed row saying in which round, and the other runs go on. ``--recipes corrected`` also (or instead) runs
FA-LD with control variates and shared noise (rho = 1), which K > 1 needs here. The data: the
eleven posteriordb posteriors the package ships (``fedlangevin/experiments/data/posteriordb``);
``--root`` (or ``$FEDLANGEVIN_POSTERIORDB``) reads another posteriordb folder, one sub-folder per
posterior. Exit status 1 with ``--strict`` when a row fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:  # torch-free: --help stays fast
    parser.add_argument("--names", nargs="+", default=None, metavar="NAME",
                        help="posteriordb posteriors to run, e.g. kilpisjarvi_mod-kilpisjarvi (default: every one under --root)")
    parser.add_argument("--root", default=None, metavar="FOLDER",
                        help="a posteriordb folder with one sub-folder per posterior (posterior.json, data.json.zip, "
                             "reference_draws.json.zip) (default: $FEDLANGEVIN_POSTERIORDB when set, else the eleven "
                             "posteriors the package ships)")
    parser.add_argument("--rounds", type=int, default=5000, help="rounds per run, half of them warm-up; at least 7 (4 draws kept) (default: %(default)s)")
    parser.add_argument("--chains", type=int, default=32, help="chains (default: %(default)s)")
    parser.add_argument("--local-steps", type=int, nargs="+", default=[1, 10], help="K values (default: 1 10)")
    parser.add_argument("--recipes", nargs="+", default=["defaults"], choices=["defaults", "corrected"],
                        help="defaults: FA-LD as is; corrected: control variates and shared noise (rho = 1), "
                             "for K > 1 (docs/validation.md) (default: defaults)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of each run (the same seed gives the same samples) (default: %(default)s)")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a posterior misses the acceptance")


def main(args: argparse.Namespace) -> int:
    from fedlangevin.experiments.posteriordb import POSTERIORS, RECIPES, SHARED, ValidationRow, load, validate
    from fedlangevin.runner.results.trace import DivergenceError

    root = Path(args.root) if args.root is not None else SHARED
    where = "--root" if args.root is not None else "$FEDLANGEVIN_POSTERIORDB"
    if not root.is_dir():
        raise ValueError(f"{where}: no such folder {str(root)!r}")
    unknown = [n for n in args.names or () if n not in POSTERIORS]
    if unknown:
        raise ValueError(f"--names must be among {', '.join(POSTERIORS)}; got {', '.join(unknown)}")
    names = args.names or [n for n in POSTERIORS if (root / n).is_dir()]
    if not names:
        raise ValueError(f"{where}: no posteriordb posterior under {str(root)!r}")
    missing = [n for n in names if not (root / n).is_dir()]
    if missing:  # refused before the table's header
        raise ValueError(f"--names: no folder for {', '.join(missing)} under {where} {str(root)!r}; "
                         f"give --root a posteriordb folder that holds them")
    from diagnostics.arviz import MIN_DRAWS

    # half the rounds are warm-up: ceil(rounds / 2) draws per chain are kept, and the ESS needs MIN_DRAWS
    low_rounds = 2 * MIN_DRAWS - 1
    if args.rounds < low_rounds:
        raise ValueError(f"--rounds must be >= {low_rounds} (half are warm-up and the ESS needs {MIN_DRAWS} draws "
                         f"per chain); got {args.rounds}")
    if args.chains < 2:
        raise ValueError(f"--chains must be >= 2; got {args.chains}")
    if any(k < 1 for k in args.local_steps):
        raise ValueError(f"--local-steps must be >= 1; got {args.local_steps}")
    print(ValidationRow.HEADER)
    failed = 0
    for name in names:
        post = load(name, root)
        for recipe in (RECIPES[r] for r in args.recipes):
            for k in args.local_steps:
                try:
                    row = validate(post, local_steps=k, rounds=args.rounds, chains=args.chains, seed=args.seed,
                                   recipe=recipe)
                except DivergenceError as exc:  # a failed row, and the other posteriors still run
                    failed += 1
                    print(f"| {name} | {recipe.label} | {k} | diverged in round {exc.round} (fails) |" + " - |" * 6 + " no |",
                          flush=True)
                    continue
                failed += not row.passes()
                print(row.markdown(recipe.label), flush=True)
    return 1 if (args.strict and failed) else 0
