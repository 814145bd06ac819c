"""The local-step bias measured in warm-up against the true error, on the posteriordb posteriors (issue 27).

Per posterior: FALD(problem, local_steps=K, chains=R, init="map") with the defaults
(step_size="auto", warm-up = half the rounds; a fixed K > 1 is checked after the warm-up against
K = 1 companion chains at step K eta and warns where its mean shift exceeds 0.1 sd on evidence),
against Stan's reference draws: the measured worst |mean shift| (unconstrained coordinates, in
K = 1 sds; for "auto" also |sd ratio - 1|) with its lower and upper bound at 95 %, the worst
|sd ratio - 1| against the companions (recorded, not tested), K eta against the step K = 1's acceptance
rule takes at the chains' iterates (fedlangevin.warmup.reach), whether the run warned of a bias
and whether it warned that a round moves no further than one K = 1 step, and the true max
|mean error| / sd and sd ratios of its draws (the model's own coordinates, as docs/validation.md)
and whether it passes the acceptance. ``--auto`` adds a row of local_steps="auto" (the K chosen)
and one of K = 1 with the same seed; every row gives the min bulk ESS (the model's coordinates)
per sampling round (rounds - warm-up; the warm-up is rounds // 2 in every row), so the rounds
"auto" saves are ESS-per-round ratios against the K = 1 row. ``--no-fixed`` leaves out the fixed
K's row. ``--sampler fahmc`` runs FAHMC(problem, local_steps=..., chains=R) with its defaults instead
(step_size="auto": M, h and gamma adapted at K = 1; from zeros, FA-HMC has no init="map"; a fixed K
> 1 refuses step_size="auto", so use it with ``--auto --no-fixed``).

    python benchmarks/bench_local_bias.py [--rounds 2000] [--chains 32] [--local-steps 10] [--auto]
        [--no-fixed] [--sampler fahmc] [--names diamonds-diamonds ...] [--figure docs/img/local_bias_check.png]
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
from fedlangevin.experiments.posteriordb import compare  # noqa: E402
from fedlangevin.experiments.rounds import available, load_posterior  # noqa: E402
from fedlangevin.warmup.local_bias import margins  # noqa: E402


def row(post, local_steps, rounds: int, chains: int, seed: int, hmc: bool = False) -> tuple[str, dict | None]:
    """The table's row, and for a measured fixed K the figure's point (None otherwise)."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if hmc:
            sampler = fl.FAHMC(post.problem, local_steps=local_steps, chains=chains, seed=seed)
        else:
            sampler = fl.FALD(post.problem, local_steps=local_steps, chains=chains, seed=seed, init="map")
        trace = sampler.run(rounds, progress=False)
    seconds = time.perf_counter() - start
    warned = any("local-step bias" in str(w.message) for w in caught)  # the bias warning (the figure's colour)
    slower = any("no more than one K = 1 round" in str(w.message) for w in caught)  # "K > 1 costs rounds"
    truth = compare(post, np.asarray(trace.numpy()), seconds, local_steps=sampler.local_steps, rounds=rounds)
    bias, point = trace.local_step_bias, None
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
            point = dict(worst=worst, low=low, high=high) if mean_only else None
        measured = "; ".join(parts)
    if bias is not None and getattr(bias, "one_step", None) is not None:  # a fixed K: K = 1's reach per round
        measured += (f"; K eta {bias.local_steps * bias.step_size:.3g} vs K = 1's eta "
                     f"{'< K eta' if bias.one_step == 0 else f'{bias.one_step:.3g}'}")
    name = post.name.split("-")[0]
    k = "auto" if isinstance(local_steps, str) else local_steps
    per_round = truth.min_ess_bulk / (rounds - rounds // 2)
    if point is not None:
        point.update(name=name, true=truth.max_mean_error, mc=truth.mc_error, passes=truth.passes(), warned=warned)
    return (f"| {name} | {k} | {sampler.local_steps} | {measured} | {'yes' if warned else 'no'} | "
            f"{'yes' if slower else 'no'} | "
            f"{truth.max_mean_error:.3f} | {truth.min_sd_ratio:.3f}-{truth.max_sd_ratio:.3f} | "
            f"{'yes' if truth.passes() else 'no'} | {truth.mc_error:.3f} | {truth.min_ess_bulk:.0f} | "
            f"{per_round:.3f} | {seconds:.0f} |"), point


def figure(points: list[dict], path: str, tolerance: float = 0.1) -> None:
    """Measured worst mean error (95 % bounds) against the true one (its Monte Carlo error), per
    posterior: filled where the run passes, red where it warned."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    top = max(max(p["high"], p["true"] + p["mc"]) for p in points) * 1.1
    ax.plot([0, top], [0, top], color="0.6", lw=1, label="measured = true")
    ax.axvline(tolerance, color="0.3", ls=":", lw=1)
    ax.axhline(tolerance, color="0.3", ls=":", lw=1)
    for p in points:
        color = "tab:red" if p["warned"] else "tab:blue"
        ax.errorbar(p["worst"], p["true"], xerr=[[p["worst"] - p["low"]], [p["high"] - p["worst"]]], yerr=p["mc"],
                    fmt="o", color=color, mfc=color if p["passes"] else "white", capsize=2)
        ax.annotate(p["name"], (p["worst"], p["true"]), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel("measured by the check: worst |mean error| / sd (95 % bounds)")
    ax.set_ylabel("true: max |mean error| / sd vs Stan (± MC error)")
    ax.set_title("K = 10 with the defaults: red warned, hollow misses the acceptance", fontsize=9)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"figure: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--auto", action="store_true", help="also rows of local_steps='auto' and K = 1")
    parser.add_argument("--no-fixed", action="store_true", help="no row of the fixed --local-steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sampler", choices=("fald", "fahmc"), default="fald")
    parser.add_argument("--names", nargs="*", default=available(),
                        help="posteriordb names and breast_cancer-logistic (default: all twelve)")
    parser.add_argument("--figure", help="write the fixed K's measured-vs-true figure here (a .png)")
    args = parser.parse_args()
    print("| posterior | K asked | K run | measured worst bias [95 % bounds] | warned: bias | warned: K costs rounds "
          "| max mean err / sd "
          "| sd ratio min-max | passes | MC err | min ESS | ESS / sampling round | time s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    points = []
    for name in args.names:
        post = load_posterior(name)
        for k in ([] if args.no_fixed else [args.local_steps]) + (["auto", 1] if args.auto else []):
            text, point = row(post, k, args.rounds, args.chains, args.seed, hmc=args.sampler == "fahmc")
            print(text, flush=True)
            points += [point] if point is not None and k == args.local_steps else []
    if args.figure and points:
        figure(points, args.figure)


if __name__ == "__main__":
    main()
