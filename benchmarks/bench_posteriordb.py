"""FA-LD with its defaults on the nine posteriordb posteriors, beside Pyro's NUTS, in one run.

Per posterior and K (local steps): FALD(problem, local_steps=K, chains=R, init="map") with
step_size="auto" and warm-up = half the rounds (no hand-tuning), 10 iid clients (eight
schools: a school per client), against Stan's reference draws: max |mean - mean_ref| / sd_ref,
min and max sd / sd_ref, fitted-Gaussian W2 in the unconstrained space / sqrt(tr Sigma_ref),
min bulk ESS per second, wall time; and Pyro's NUTS on the same density (one process, same
machine, 4 chains run one after the other, `--nuts-samples` draws after as many warm-up
iterations), with the same metrics. Times are comparable within one run only.

    python benchmarks/bench_posteriordb.py [--rounds 5000] [--chains 32] [--local-steps 1 10]
        [--names kilpisjarvi_mod-kilpisjarvi ...] [--nuts-samples 1000] [--csv out.csv] [--figure out.png]
    python benchmarks/bench_posteriordb.py --plot-only run1.txt run2.txt --figure docs/img/validation.png
    python benchmarks/bench_posteriordb.py --recipes defaults corrected --local-steps 10 --nuts-samples 0
    python benchmarks/bench_posteriordb.py --sweep --figure docs/img/validation-k10.png
    python benchmarks/bench_posteriordb.py --speed [--seconds 3]

``--recipes corrected`` adds control variates and shared noise (rho = 1) to the defaults
(``experiments.posteriordb.RECIPES``). ``--sweep``: at K = 10, the max mean error against the
noise correlation rho (0, 0.5, 0.9, 1), with and without control variates, per posterior: why
K = 10 needs both. ``--speed``: FA-LD steps per second (32 chains x 10 clients, K = 10, a fixed
small step) through the hand-written problem (closed-form regression gradients from sufficient
statistics), a CustomProblem of the same energy and the Pyro model (PyroProblem, vmap), the
three timed alternately in one run (best of 3 passes of >= --seconds each).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlangevin.experiments.posteriordb import POSTERIORS, RECIPES, Recipe, ValidationRow, compare, load, validate  # noqa: E402


def nuts(post, samples: int, chains: int, seed: int) -> ValidationRow:
    """Pyro NUTS on ``post.potential`` (the same density), from the MAP-free default start (zeros)."""
    import pyro
    from pyro.infer import MCMC, NUTS

    pyro.set_rng_seed(seed)
    d = post.problem.dim
    start = time.perf_counter()
    kernel = NUTS(potential_fn=lambda p: post.potential(p["theta"]), target_accept_prob=0.8)
    draws = []
    for c in range(chains):
        mcmc = MCMC(kernel, num_samples=samples, warmup_steps=samples,
                    initial_params={"theta": torch.zeros(d, dtype=torch.float64)}, disable_progbar=True)
        mcmc.run()
        draws.append(mcmc.get_samples()["theta"].numpy())
    seconds = time.perf_counter() - start
    theta = np.stack(draws)
    return compare(post, theta, seconds, rounds=samples * 2)


def figure(rows, path) -> None:
    """Mean errors and sd-ratio ranges per posterior and sampler, with the acceptance lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def key(label, r):
        return f"{label} K={r.local_steps}" if label.startswith("FA-LD") else label

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = sorted({key(lab, r) for lab, r in rows})
    names = list(dict.fromkeys(r.name for _, r in rows))
    width = 0.8 / len(labels)
    for i, lab in enumerate(labels):
        pick = {r.name: r for l2, r in rows if key(l2, r) == lab}
        xs = np.arange(len(names)) + i * width
        axes[0].bar(xs, [pick[n].max_mean_error if n in pick else np.nan for n in names], width, label=lab)
        axes[1].vlines(xs, [pick[n].min_sd_ratio if n in pick else np.nan for n in names],
                       [pick[n].max_sd_ratio if n in pick else np.nan for n in names], lw=4, label=lab, color=f"C{i}")
    axes[0].axhline(0.1, color="k", ls="--", lw=1)
    for level in (0.9, 1.1):
        axes[1].axhline(level, color="k", ls="--", lw=1)
    axes[0].set_ylabel("max |mean - mean_ref| / sd_ref")
    axes[1].set_ylabel("sd / sd_ref (min to max)")
    for ax in axes:
        ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2)
        ax.set_xticklabels([n.split("-")[0] for n in names], rotation=45, ha="right")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


SWEEP_NAMES = ["diamonds-diamonds", "earnings-logearn_interaction_z", "kidiq_with_mom_work-kidscore_interaction_c",
               "nes2000-nes", "sblri-blr", "eight_schools-eight_schools_noncentered"]
SWEEP_RHOS = [0.0, 0.5, 0.9, 1.0]


def sweep(names, rounds: int, chains: int, path) -> None:
    """K = 10: max |mean error| / sd against rho, FA-LD and FA-LD with control variates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    print("| posterior | correction | " + " | ".join(f"rho = {r:g}" for r in SWEEP_RHOS) + " |")
    print("| --- | --- |" + " --- |" * len(SWEEP_RHOS))
    for i, name in enumerate(names):
        post = load(name)
        for ax, correction in zip(axes, (None, "control_variates")):
            errs = [validate(post, local_steps=10, rounds=rounds, chains=chains,
                             recipe=Recipe("FA-LD", correction, rho)).max_mean_error for rho in SWEEP_RHOS]
            ax.plot(SWEEP_RHOS, errs, "o-", color=f"C{i}", label=name.split("-")[0])
            print(f"| {name} | {correction or 'none'} | " + " | ".join(f"{e:.3f}" for e in errs) + " |", flush=True)
    for ax, title in zip(axes, ("FA-LD, K = 10", "FA-LD + control variates, K = 10")):
        ax.axhline(0.1, color="k", ls="--", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("noise correlation rho (eq. 14)")
        ax.set_title(title)
    axes[0].set_ylabel("max |mean - mean_ref| / sd_ref")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def steps_per_second(problem, seconds: float, chains: int = 32) -> float:
    """Local steps per second of FALD(problem, K = 10) at a fixed small step size (timing only)."""
    import fedlangevin as fl

    sampler = fl.FALD(problem, step_size=1e-7, local_steps=10, chains=chains, seed=0, init=torch.zeros(problem.dim))
    sampler.run(2, progress=False, keep_samples=False)
    rounds, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        sampler.run(5, progress=False, keep_samples=False)
        rounds += 5
    return rounds * 10 / (time.perf_counter() - start)


def speed(names, seconds: float, chains: int) -> None:
    """Item 6 of the validation: what autodiff costs over hand-written gradients on the same models."""
    from fedlangevin.experiments.posteriordb import custom_problem
    from fedlangevin.experiments.posteriordb_pyro import pyro_problem

    print("| posterior | d | closed form steps/s | CustomProblem | PyroProblem | closed / custom | custom / pyro |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        post = load(name)
        problems = {"pyro": pyro_problem(post)}
        if name.startswith("eight_schools"):  # written by hand as a CustomProblem: no closed form
            problems["custom"] = post.problem
        else:
            problems["hand"], problems["custom"] = post.problem, custom_problem(post)
        best = {key: 0.0 for key in problems}
        for _ in range(3):
            for key, problem in problems.items():
                best[key] = max(best[key], steps_per_second(problem, seconds, chains))
        hand = best.get("hand", math.nan)
        print(f"| {name} | {post.problem.dim} | {hand:.0f} | {best['custom']:.0f} | {best['pyro']:.0f} | "
              f"{hand / best['custom']:.1f}x | {best['custom'] / best['pyro']:.2f}x |", flush=True)


def read_rows(paths) -> list:
    """(sampler, ValidationRow) pairs from the tables printed by earlier runs (their stdout)."""
    rows = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 10 or cells[0] in ("posterior", "---"):
                continue
            name, label, k, err, sd, w2, ess, rate, seconds, mc = cells
            lo, hi = sd.split("-")
            rows.append((label, ValidationRow(name, 0 if k == "-" else int(k), 0, float(err.split()[0]), float(lo),
                                              float(hi), float(w2), float(ess), float(rate), float(seconds), float(mc),
                                              math.nan, 0)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--chains", type=int, default=32)
    ap.add_argument("--local-steps", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--names", nargs="+", default=list(POSTERIORS), choices=POSTERIORS)
    ap.add_argument("--nuts-samples", type=int, default=1000, help="0: no NUTS")
    ap.add_argument("--nuts-chains", type=int, default=4)
    ap.add_argument("--recipes", nargs="+", default=["defaults"], choices=list(RECIPES))
    ap.add_argument("--sweep", action="store_true", help="K = 10 mean error against rho, with and without control "
                    "variates (--names default: the six K = 10 misses), figure to --figure")
    ap.add_argument("--speed", action="store_true", help="steps/s: hand-written vs CustomProblem vs PyroProblem")
    ap.add_argument("--seconds", type=float, default=2.0, help="--speed: seconds per timed pass")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--figure", default=None)
    ap.add_argument("--plot-only", nargs="+", default=None, metavar="TABLE",
                    help="draw --figure and print the table from the printed tables of earlier runs, run nothing")
    args = ap.parse_args()
    if args.plot_only:
        rows = read_rows(args.plot_only)
        print(ValidationRow.HEADER)
        for label, r in rows:
            print(r.markdown(label))
        if args.figure:
            figure(rows, args.figure)
        return 0
    torch.set_num_threads(1)
    if args.speed:
        speed(args.names, args.seconds, args.chains)
        return 0
    if args.sweep:
        names = args.names if args.names != list(POSTERIORS) else SWEEP_NAMES
        sweep(names, args.rounds, args.chains, args.figure or "validation-k10.png")
        return 0
    rows = []
    print(ValidationRow.HEADER)
    for name in args.names:
        post = load(name)
        results = [(RECIPES[r].label, validate(post, local_steps=k, rounds=args.rounds, chains=args.chains,
                                               recipe=RECIPES[r]))
                   for r in args.recipes for k in args.local_steps]
        if args.nuts_samples:
            results.append(("NUTS", nuts(post, args.nuts_samples, args.nuts_chains, 0)))
        for label, r in results:
            rows.append((label, r))
            print(r.markdown(label), flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            fields = list(asdict(rows[0][1]).keys())
            w.writerow(["sampler"] + fields)
            for label, r in rows:
                w.writerow([label] + [asdict(r)[k] for k in fields])
    if args.figure:
        figure(rows, args.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
