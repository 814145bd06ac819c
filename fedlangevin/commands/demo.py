"""``fedlangevin demo``: FA-LD on the paper's Gaussian simulation (Sec. 7.1) in about 15 seconds on a CPU.

Runs R = 300 replicate chains for a few numbers of local steps K, prints the fitted-Gaussian
W2 to the exact posterior by communication round, and writes a figure with W2 against
rounds (log scale) and the true vs empirical posterior density (as Fig. 1d/1e).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

DEFAULT_KS = (1, 10, 50)

#: fewest chains the demo can report on: it fits a Gaussian (W2) and a density (the figure) to
#: the 2-d draws across chains, which need d + 1 = 3 points in general position (two chains
#: gave scipy's "singular data covariance" on the density of a short run)
MIN_CHAINS = 3


def check_chains(chains) -> int:
    """``chains`` as an int >= :data:`MIN_CHAINS`, else a ValueError naming chains."""
    from fedlangevin._validation import check_int

    try:
        return check_int("chains", chains, MIN_CHAINS)
    except ValueError as exc:
        raise ValueError(f"{exc} (the demo fits a Gaussian and a density to the 2-d draws across chains, which "
                         f"needs d + 1 = {MIN_CHAINS}; the paper uses 300)") from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="fedlangevin-demo", help="output folder (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=200, help="communication rounds per K (default: %(default)s)")
    parser.add_argument("--chains", type=int, default=300,
                        help=f"replicate chains R, at least {MIN_CHAINS} (default: %(default)s, as the paper)")
    parser.add_argument("--local-steps", type=int, nargs="+", default=list(DEFAULT_KS), metavar="K",
                        help="values of K to compare (default: %(default)s)")
    parser.add_argument("--step-size", type=float, default=2e-5, help="eta (default: %(default)s; 1/(2L) = 8.6e-5)")
    parser.add_argument("--alpha", type=float, default=1.0, help="heterogeneity alpha (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and sampler (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run_demo(
    out: str | Path = "fedlangevin-demo",
    rounds: int = 200,
    chains: int = 300,
    local_steps=DEFAULT_KS,
    step_size: float = 2e-5,
    alpha: float = 1.0,
    seed: int = 0,
    progress: bool | None = None,
) -> dict:
    """Run the demo; returns the W2 curves, the floor and the path of the figure. ``chains``
    must be at least :data:`MIN_CHAINS` (a ValueError naming chains, before any run)."""
    import fedlangevin as fl

    chains = check_chains(chains)

    problem = fl.problems.GaussianSimulation(num_clients=50, alpha=alpha, samples_per_client=20, seed=seed)
    mean, cov = (t.numpy() for t in problem.posterior(1.0))
    curves, traces, timings = {}, {}, {}
    for k in local_steps:
        sampler = fl.FALD(problem, step_size=step_size, local_steps=k, chains=chains, seed=seed,
                          check_local_bias=False)  # the paper's K side by side, on purpose
        t0 = time.perf_counter()
        trace = sampler.run(rounds, progress=progress)
        timings[k] = time.perf_counter() - t0
        curves[k] = trace.w2(mean, cov)
        traces[k] = trace
    floor = traces[local_steps[0]].w2_floor(mean, cov)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figure = out / "demo.png"
    _figure(problem, curves, floor, traces[local_steps[len(local_steps) // 2]], mean, cov, figure, step_size)
    return {"problem": problem, "curves": curves, "floor": floor, "figure": figure, "timings": timings,
            "rounds": rounds, "chains": chains, "step_size": step_size}


def _figure(problem, curves, floor, trace, mean, cov, path, eta) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedlangevin.experiments.gaussian_plots import density_panels

    fig, axes = plt.subplots(1, 3, figsize=(15, 5.0))
    ax = axes[0]
    for k, w in curves.items():
        ax.plot(np.arange(1, w.size + 1), w, label=f"K = {k}")
    ax.axhspan(floor.q05, floor.q95, color="grey", alpha=0.25, label=f"exact-draw floor (R={floor.n}, 5-95%)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("communication rounds")
    ax.set_ylabel("W2 to the exact posterior")
    ax.set_title(f"FA-LD, N={problem.num_clients}, alpha={problem.alpha:g}, eta={eta:g}")
    # below the axes: inside, it covered the K = 1 curve (flat near the top) or the floor band
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)

    last = trace.numpy()[:, -max(1, trace.num_draws // 4) :].reshape(-1, 2)
    density_panels(axes[1:], mean, cov, last, ("true posterior density (Fig. 1d)",
                                               f"empirical density, K={trace.settings['local_steps']} (Fig. 1e)"),
                   points=120)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_table(result: dict) -> str:
    curves, floor = result["curves"], result["floor"]
    rounds = result["rounds"]
    marks = [r for r in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000) if r <= rounds]
    if marks[-1] != rounds:
        marks.append(rounds)
    head = "round " + "".join(f"{'K=' + str(k):>12}" for k in curves)
    lines = [head, "-" * len(head)]
    for r in marks:
        lines.append(f"{r:>5} " + "".join(f"{curves[k][r - 1]:>12.4g}" for k in curves))
    lines.append(f"exact-draw floor for R={floor.n}: mean {floor.mean:.4g} (5-95%: {floor.q05:.4g} - {floor.q95:.4g})")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from fedlangevin.commands._checks import check_output_dir

    check_output_dir("--out", args.out)
    check_chains(args.chains)
    result = run_demo(out=args.out, rounds=args.rounds, chains=args.chains, local_steps=tuple(args.local_steps),
                      step_size=args.step_size, alpha=args.alpha, seed=args.seed,
                      progress=False if args.no_progress else None)
    p = result["problem"]
    print(f"FA-LD on the paper's Gaussian simulation: N={p.num_clients} clients, n={p.num_data} points, "
          f"alpha={p.alpha:g}, eta={result['step_size']:g}, R={result['chains']} chains, rho=0, full participation")
    print("W2 (fitted Gaussian over chains) to the exact posterior N(u, Sigma/n), by communication round:\n")
    print(format_table(result))
    print("\ntime per K: " + ", ".join(f"K={k}: {t:.1f}s" for k, t in result["timings"].items()))
    print(f"figure: {result['figure']}")
    return 0
