"""FA-LD (and FA-HMC) with their defaults in realistic federated settings on the posteriordb set.

Per posterior and setting: full participation with full-batch gradients (the lab corner),
``SchemeI(5)``, ``SchemeII(5)`` (``allow_unbalanced=True`` where the clients' sizes differ) and
minibatches of 10 % of the smallest client's records (at least 5), 10 clients, ``init="map"``,
``step_size="auto"``, warm-up half the rounds; ``--corrections control_variates`` adds FA-LD's
control variates (which centre minibatches too). Columns: max |mean error| / sd, sd ratio range,
min bulk ESS per chain and kept round, eta, whether the row meets the validation's acceptance
(mean error <= 0.1 sd, sd ratios in [0.9, 1.1]), and the run's setting warning if it gave one.

``--pilot``: every setting runs at the step size and M of the full-participation run of the same
posterior (no warm-up, all rounds kept, from its last states): what the setting's own noise costs,
apart from what its warm-up adapts. ``--fahmc``: FA-HMC rows for the minibatch setting, its
defaults (``step_size="auto"``, from the MAP) with the plain minibatch gradients and with
``CentredMinibatches`` at the MAP.

    python benchmarks/bench_realistic.py [--rounds 2000] [--chains 32] [--names ...] [--settings full scheme1 ...]
        [--corrections none control_variates] [--pilot] [--fahmc]
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
from fedlangevin.experiments.posteriordb import POSTERIORS, Recipe, compare, load, validate  # noqa: E402
from fedlangevin.problems import CentredMinibatches  # noqa: E402
from fedlangevin.warmup.mode import find_map  # noqa: E402

SETTINGS = ("full", "scheme1", "scheme2", "minibatch")


def recipe(setting: str, correction: str | None, problem) -> Recipe:
    """The validation recipe of one setting (and correction) on ``problem``."""
    balanced = bool(torch.allclose(problem.weights, torch.full_like(problem.weights, 1 / problem.num_clients)))
    participation = {"scheme1": fl.SchemeI(5), "scheme2": fl.SchemeII(5, allow_unbalanced=not balanced)}.get(setting)
    return Recipe(f"FA-LD {setting}" + ("" if correction is None else f" {correction}"), correction, 0.0,
                  participation, 0.1 if setting == "minibatch" else None)


def caught_notes(caught) -> str:
    return "; ".join(sorted({str(w.message)[:70] for w in caught if "off the target" in str(w.message)}))


def pilot_run(post, setting, correction, pilot, rounds, chains):
    """The setting at the pilot's eta and M, from its last states, every round kept."""
    r = recipe(setting, correction, post.problem)
    start = time.perf_counter()
    sampler = fl.FALD(post.problem, step_size=float(pilot.schedule(pilot.state.step)), chains=chains, seed=1,
                      init=pilot.state.theta, preconditioner=pilot.preconditioner, participation=r.participation,
                      batch_size=r.batch_size(post.problem), correction=correction)
    trace = sampler.run(rounds, progress=False)
    row = compare(post, np.asarray(trace.numpy()), time.perf_counter() - start, rounds=rounds,
                  step_size=float(sampler.schedule(sampler.state.step)))
    return row, rounds


def fahmc_run(post, centred: bool, rounds, chains):
    """FA-HMC's defaults on minibatches of 10 %, from the MAP; ``centred``: CentredMinibatches at the MAP."""
    mode = find_map(post.problem).theta
    problem = CentredMinibatches(post.problem, mode) if centred else post.problem
    start = time.perf_counter()
    sampler = fl.FAHMC(problem, chains=chains, seed=0, init=mode,
                       batch_size=Recipe(batch_fraction=0.1).batch_size(post.problem))
    trace = sampler.run(rounds, progress=False)
    row = compare(post, np.asarray(trace.numpy()), time.perf_counter() - start, rounds=rounds, step_size=float("nan"))
    return row, rounds - rounds // 2


def line(name, setting, label, row, chains, kept, notes=""):
    per = row.min_ess_bulk / (chains * kept)
    return (f"| {name} | {setting} | {label} | {row.max_mean_error:.3f} | {row.min_sd_ratio:.3f}-{row.max_sd_ratio:.3f} | "
            f"{per:.4f} | {row.step_size:.3g} | {'yes' if row.passes() else 'no'} | {row.seconds:.1f} |"
            + (f" {notes}" if notes else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--chains", type=int, default=32)
    ap.add_argument("--names", nargs="+", default=[n for n in POSTERIORS], choices=POSTERIORS)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    ap.add_argument("--corrections", nargs="+", default=["none"], choices=["none", "control_variates"])
    ap.add_argument("--pilot", action="store_true", help="every setting at the full-participation run's eta and M")
    ap.add_argument("--fahmc", action="store_true", help="FA-HMC minibatch rows (plain and centred at the MAP)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| posterior | setting | sampler | max mean err / sd | sd ratio min-max | ESS / chain-round | eta | "
          "passes | time s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.names:
        post = load(name)
        pilot = None
        if args.pilot:
            pilot = fl.FALD(post.problem, chains=args.chains, seed=0, init="map")
            start = time.perf_counter()
            trace = pilot.run(args.rounds, progress=False)
            row = compare(post, np.asarray(trace.numpy()), time.perf_counter() - start, rounds=args.rounds,
                          step_size=float(pilot.schedule(pilot.state.step)))
            print(line(name, "full (pilot)", "FA-LD", row, args.chains, args.rounds - args.rounds // 2), flush=True)
        for setting in args.settings:
            if pilot is not None and setting == "full":
                continue
            for corr in args.corrections:
                correction = None if corr == "none" else corr
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    if pilot is not None:
                        row, kept = pilot_run(post, setting, correction, pilot, args.rounds // 2, args.chains)
                    else:
                        row = validate(post, rounds=args.rounds, chains=args.chains,
                                       recipe=recipe(setting, correction, post.problem))
                        kept = args.rounds - args.rounds // 2
                label = "FA-LD" + ("" if correction is None else " + CV")
                print(line(name, setting, label, row, args.chains, kept, caught_notes(caught)), flush=True)
        if args.fahmc:
            for centred in (False, True):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    row, kept = fahmc_run(post, centred, args.rounds, args.chains)
                label = "FA-HMC" + (" centred" if centred else "")
                print(line(name, "minibatch", label, row, args.chains, kept, caught_notes(caught)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
