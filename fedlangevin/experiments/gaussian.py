"""The paper's simulation study (Deng et al., Sec. 7.1: Fig. 1a-e, Fig. 2; Thm 5.8), as functions.

Every study returns a :class:`StudyResult`: tidy columns (one row per configuration and
round), a matplotlib figure, a short text table and the settings used. The Monte Carlo
measure is the paper's: R = 300 replicate chains, and at each communication round the W2
distance between the Gaussian fitted to the R draws (mean, ddof = 1 covariance) and the
exact posterior; the finite-R floor (what R exact draws would give) is drawn on every plot.
Each Monte Carlo curve is accompanied by the exact W2 of the sampler's own law (R -> oo),
computed by :mod:`fedlangevin.experiments.exact`, as a cross-check.

The problem. The paper's generator (:class:`~fedlangevin.problems.GaussianSimulation`):
N = 50 clients, centres theta_c ~ N(0, alpha I), n_c = 20 points x_ci ~ N(theta_c, Sigma),
Sigma = [[5, -2], [-2, 1]], tau = 1. Every client then has the same Hessian n Sigma^{-1},
so averaging commutes with the (affine) local updates and the law of the global iterate is
the same for every K and every rho (see docs/simulation.md). Local-step bias, and with it
the U shape of Fig. 1a, needs clients whose curvature differs: :func:`simulation_problem`
with ``curvature_spread`` s > 1 gives client c the data covariance s_c Sigma, with the s_c
log-evenly spaced in [1/s, s] (clients measuring with different noise levels), and nothing
else changed (same centres and standard-normal draws as the paper's generator).
"""

from __future__ import annotations

import csv
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.experiments.exact import exact_moments, w2_to_target
from fedlangevin.problems import PAPER_COV, GaussianSimulation, QuadraticProblem

__all__ = [
    "CurvatureSimulation",
    "PAPER_ALPHAS",
    "StudyResult",
    "STUDIES",
    "correlation_study",
    "density_study",
    "exact_w2_curve",
    "heterogeneity_study",
    "k_study",
    "mc_w2_curve",
    "participation_study",
    "run_study",
    "simulation_problem",
    "step_size_study",
]

#: Heterogeneity levels alpha of Fig. 1a/1b.
PAPER_ALPHAS = (0.0, 1.0, 10.0, 100.0, 1000.0)


# -- problems ------------------------------------------------------------------------------


class CurvatureSimulation(QuadraticProblem):
    """The paper's Gaussian simulation with client-specific data covariance s_c Sigma.

    Client c draws n_c points x_ci ~ N(theta_c, s_c Sigma), theta_c ~ N(0, alpha I), with
    s_c = spread^(-1 + 2 c / (N - 1)) (log-evenly spaced in [1/spread, spread]). Its energy
    f^c = (1/p_c) sum_i 1/2 (theta - x_ci)^T (s_c Sigma)^{-1} (theta - x_ci) has Hessian
    A_c = (n / s_c) Sigma^{-1} and b_c = A_c xbar_c; the posterior is N(A^{-1} b, tau A^{-1})
    with A = sum_c p_c A_c. The centres and the standard-normal draws are those of
    :class:`~fedlangevin.problems.GaussianSimulation` with the same seed, so spread = 1
    reproduces its data exactly.
    """

    def __init__(
        self,
        num_clients: int = 50,
        alpha: float = 1.0,
        samples_per_client: int = 20,
        curvature_spread: float = 1.5,
        seed: int = 0,
    ) -> None:
        n_clients = check_int("num_clients", num_clients, 2)
        alpha = check_real("alpha", alpha, low=0.0)
        n_c = check_int("samples_per_client", samples_per_client, 1)
        spread = check_real("curvature_spread", curvature_spread, low=1.0)
        seed = check_int("seed", seed, 0)
        sigma = torch.tensor(PAPER_COV, dtype=torch.float64)
        d = sigma.shape[0]
        g = torch.Generator().manual_seed(seed)
        centres = alpha**0.5 * torch.randn(n_clients, d, generator=g, dtype=torch.float64)
        z = torch.randn(n_clients, n_c, d, generator=g, dtype=torch.float64)
        scales = spread ** torch.linspace(-1.0, 1.0, n_clients, dtype=torch.float64)
        chol = torch.linalg.cholesky(sigma)
        data = centres[:, None, :] + (z @ chol.T) * scales.sqrt()[:, None, None]
        client_means = data.mean(1)
        n_total = n_clients * n_c
        precision = torch.linalg.inv(sigma)
        precision = 0.5 * (precision + precision.T)
        hessians = n_total * precision[None] / scales[:, None, None]
        shifts = torch.einsum("nij,nj->ni", hessians, client_means)
        self.alpha, self.curvature_spread, self.seed = alpha, spread, seed
        self.cov, self.noise_scales, self.centres, self.client_means = sigma, scales, centres, client_means
        self.client_sizes = torch.full((n_clients,), n_c, dtype=torch.int64)
        super().__init__(hessians, shifts, torch.full((n_clients,), 1.0 / n_clients, dtype=torch.float64))

    @property
    def num_data(self) -> int:
        return int(self.client_sizes.sum())

    def __repr__(self) -> str:
        return (
            f"CurvatureSimulation(num_clients={self.num_clients}, alpha={self.alpha:g}, n={self.num_data}, "
            f"curvature_spread={self.curvature_spread:g}, seed={self.seed})"
        )


def simulation_problem(
    alpha: float = 1.0,
    curvature_spread: float = 1.0,
    num_clients: int = 50,
    samples_per_client: int = 20,
    seed: int = 0,
) -> QuadraticProblem:
    """The paper's simulation (``curvature_spread = 1``) or its per-client-curvature variant."""
    spread = check_real("curvature_spread", curvature_spread, low=1.0)
    if spread == 1.0:
        return GaussianSimulation(num_clients=num_clients, alpha=alpha, samples_per_client=samples_per_client, seed=seed)
    return CurvatureSimulation(num_clients, alpha, samples_per_client, spread, seed)


def _target(problem) -> tuple[np.ndarray, np.ndarray]:
    mean, cov = problem.posterior(1.0)
    return mean.double().numpy(), cov.double().numpy()


# -- curves --------------------------------------------------------------------------------


@dataclass
class Curve:
    """W2 after each round: ``w2[i]`` after round i + 1 (K (i + 1) local steps)."""

    local_steps: int
    w2: np.ndarray
    seconds: float = 0.0

    @property
    def rounds(self) -> np.ndarray:
        return np.arange(1, self.w2.size + 1)

    @property
    def steps(self) -> np.ndarray:
        return self.rounds * self.local_steps

    def first_below(self, eps: float) -> int | None:
        """First round with W2 <= eps (``None`` if never)."""
        hit = np.flatnonzero(self.w2 <= eps)
        return int(hit[0]) + 1 if hit.size else None


def mc_w2_curve(
    problem,
    step_size: Any,
    local_steps: int,
    rounds: int,
    *,
    correlation: float = 0.0,
    participation=None,
    chains: int = 300,
    seed: int = 0,
    stop_below: float | None = None,
    chunk_rounds: int = 2000,
    batch_size: int | None = None,
) -> Curve:
    """The paper's measure: fitted-Gaussian W2 of ``chains`` replicate chains after every round.

    Runs :class:`~fedlangevin.FALD` for up to ``rounds`` rounds in chunks (bounded memory);
    with ``stop_below`` it stops after the chunk in which W2 first falls to that level.
    """
    import fedlangevin as fl

    mean, cov = _target(problem)
    sampler = fl.FALD(problem, step_size=step_size, local_steps=local_steps, correlation=correlation,
                      participation=participation, chains=chains, seed=seed, batch_size=batch_size)
    parts, done = [], 0
    t0 = time.perf_counter()
    while done < rounds:
        n = min(chunk_rounds, rounds - done)
        w = sampler.run(n, progress=False).w2(mean, cov)
        parts.append(w)
        done += n
        if stop_below is not None and bool((w <= stop_below).any()):
            break
    return Curve(local_steps, np.concatenate(parts), time.perf_counter() - t0)


def exact_w2_curve(
    problem,
    step_size: Any,
    local_steps: int,
    rounds: int,
    *,
    correlation: float = 0.0,
    scheme: str = "full",
    num_sampled: int | None = None,
) -> Curve:
    """W2 of the sampler's exact law (the R -> oo limit of :func:`mc_w2_curve`)."""
    from fedlangevin.fald.schedules import as_schedule, step_sizes

    k = local_steps
    schedule = as_schedule(step_size, problem)
    if isinstance(step_size, (int, float)):
        etas = [[float(step_size)] * k] * rounds
    else:
        flat = step_sizes(schedule, 0, rounds * k)
        etas = [flat[i * k : (i + 1) * k] for i in range(rounds)]
    t0 = time.perf_counter()
    means, covs = exact_moments(problem, etas, 1.0, correlation, scheme, num_sampled)
    return Curve(k, w2_to_target(problem, means, covs), time.perf_counter() - t0)


def _floor(problem, chains: int, seed: int = 0):
    from diagnostics import w2_floor

    mean, cov = _target(problem)
    return w2_floor(mean, cov, chains, repeats=400, seed=seed)


# -- results -------------------------------------------------------------------------------


@dataclass
class StudyResult:
    """Tidy data (``columns``: equal-length lists), a figure, a text table and the settings."""

    name: str
    columns: dict[str, list]
    figure: Any
    table: str
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        names = list(self.columns)
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(names)
            for row in zip(*(self.columns[c] for c in names)):
                w.writerow(["" if v is None else (f"{v:.8g}" if isinstance(v, float) else v) for v in row])
        return path

    def save(self, out: str | Path) -> tuple[Path, Path]:
        """Write ``<out>/<name>.png`` and ``<out>/<name>.csv``; returns their paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        png = out / f"{self.name}.png"
        self.figure.savefig(png, dpi=110)
        return png, self.to_csv(out / f"{self.name}.csv")


class _Rows:
    def __init__(self, *names: str) -> None:
        self.columns: dict[str, list] = {n: [] for n in names}

    def add(self, **values) -> None:
        for k, col in self.columns.items():
            col.append(values.get(k))


def _progress(total: int, desc: str, progress: bool | None):
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="run", leave=False)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _floor_band(ax, floor, label=True) -> None:
    ax.axhspan(floor.q05, floor.q95, color="grey", alpha=0.22, lw=0,
               label=f"exact-draw floor, R={floor.n} (5-95%)" if label else None)


def _fmt(x, digits=4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)] if cells else [len(h) for h in header]
    line = "  ".join(h.rjust(w) for h, w in zip(header, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


# -- Fig. 1a: optimal number of local steps ----------------------------------------------------


def k_study(
    alphas: Sequence[float] = PAPER_ALPHAS,
    local_steps: Sequence[int] = (1, 2, 3, 4, 6, 8, 10, 15, 20, 30, 50, 70, 80, 100, 150, 300, 1000),
    step_size: float = 1e-6,
    eps: float = 0.02,
    curvature_spread: float = 1.5,
    chains: int = 300,
    seed: int = 0,
    budget: float = 1.5,
    curve_alpha: float | None = 10.0,
    skip_after: int = 2,
    progress: bool | None = None,
) -> StudyResult:
    """Fig. 1a: communication rounds T_eps / K to reach W2 <= eps, against K, per alpha.

    rho = 0, full participation, chains start at 0. For each (alpha, K) the sampler runs
    until its fitted-Gaussian W2 first falls to ``eps`` or it has spent ``budget`` times the
    local steps that the exact law needs at K = 1 (then the point is "not reached"). The
    exact law gives T_eps for every K as a cross-check, and for the paper's own setup
    (identical client Hessians), where T_eps does not depend on K. Once the exact law fails
    to reach eps for ``skip_after`` values of K, larger K are not simulated (their rows
    have ``rounds_run = 0``): past the bias wall a run would only spend its whole budget.
    """
    t_start = time.perf_counter()
    rows = _Rows("setup", "alpha", "gamma", "K", "eta", "eps", "rounds_mc", "steps_mc", "rounds_exact",
                 "steps_exact", "rounds_run", "seconds")
    curves: dict[tuple, Curve] = {}
    exact_curves: dict[tuple, Curve] = {}
    results: dict[float, dict] = {}
    bar = _progress(len(alphas) * len(local_steps), "K study", progress)
    floor = None
    paper_exact: dict[float, dict[int, int | None]] = {}
    for alpha in alphas:
        problem = simulation_problem(alpha, curvature_spread, seed=seed)
        paper = simulation_problem(alpha, 1.0, seed=seed)
        if floor is None:
            floor = _floor(problem, chains, seed)
        # exact T_eps at K = 1 sets the budget (in local steps) of every run of this alpha
        base = _exact_first_below(problem, step_size, 1, eps)
        if base is None:
            raise ValueError(f"k_study: W2 <= eps={eps} is not reachable at K = 1 for alpha={alpha}; raise eps")
        max_steps = int(math.ceil(budget * base))
        gamma = problem.heterogeneity
        res = {}
        paper_exact[alpha] = {}
        unreachable = 0
        for k in local_steps:
            rounds = max(1, math.ceil(max_steps / k))
            ex = _exact_first_below(problem, step_size, k, eps, max_rounds=rounds)
            pe = _exact_first_below(paper, step_size, k, eps, max_rounds=rounds)
            paper_exact[alpha][k] = pe
            unreachable += ex is None
            if unreachable <= skip_after:
                curve = mc_w2_curve(problem, step_size, k, rounds, chains=chains, seed=seed, stop_below=eps)
                t_mc, run, secs = curve.first_below(eps), int(curve.w2.size), curve.seconds
            else:  # past the wall: the exact law stays above eps, as it did for the previous K
                curve, t_mc, run, secs = None, None, 0, 0.0
            res[k] = (t_mc, ex, run)
            rows.add(setup="per-client curvature", alpha=alpha, gamma=gamma, K=k, eta=step_size, eps=eps,
                     rounds_mc=t_mc, steps_mc=None if t_mc is None else t_mc * k,
                     rounds_exact=ex, steps_exact=None if ex is None else ex * k,
                     rounds_run=run, seconds=secs)
            rows.add(setup="paper (identical Hessians)", alpha=alpha, gamma=paper.heterogeneity, K=k, eta=step_size,
                     eps=eps, rounds_exact=pe, steps_exact=None if pe is None else pe * k, rounds_run=0)
            if curve is not None and curve_alpha is not None and alpha == curve_alpha:
                curves[(alpha, k)] = curve
                exact_curves[(alpha, k)] = exact_w2_curve(problem, step_size, k, int(curve.w2.size))
            if bar is not None:
                bar.update(1)
        results[alpha] = {"gamma": gamma, "points": res}
    if bar is not None:
        bar.close()

    summary = {}
    table_rows = []
    for alpha, r in results.items():
        pts = {k: v[0] for k, v in r["points"].items()}
        reached = {k: t for k, t in pts.items() if t is not None}
        k_opt = min(reached, key=lambda k: (reached[k], k)) if reached else None
        ex = {k: v[1] for k, v in r["points"].items() if v[1] is not None}
        k_opt_ex = min(ex, key=lambda k: (ex[k], k)) if ex else None
        t1 = pts.get(min(pts))
        saving = (t1 / reached[k_opt]) if (k_opt is not None and t1) else None
        summary[alpha] = {"k_opt": k_opt, "rounds_opt": reached.get(k_opt), "rounds_k1": t1, "saving": saving,
                          "k_opt_exact": k_opt_ex, "rounds_mc": pts, "rounds_exact": ex}
        table_rows.append([alpha, r["gamma"], t1, k_opt, reached.get(k_opt), saving, k_opt_ex, ex.get(k_opt_ex)])
    table = _table(["alpha", "gamma", "rounds K=1", "best K", "rounds", "saving", "best K exact", "rounds exact"],
                   table_rows)
    table += f"\n(rounds to W2 <= {eps:g}; R = {chains} chains; exact-draw floor {floor.mean:.3g}, 95% {floor.q95:.3g})"

    fig = _k_figure(results, paper_exact, curves, exact_curves, floor, eps, step_size, curvature_spread, curve_alpha)
    settings = dict(alphas=list(alphas), local_steps=list(local_steps), step_size=step_size, eps=eps,
                    curvature_spread=curvature_spread, chains=chains, seed=seed, budget=budget)
    return StudyResult("k_study", rows.columns, fig, table, settings, time.perf_counter() - t_start, summary)


def _exact_first_below(problem, step_size, k, eps, max_rounds: int | None = None, chunk: int = 2000) -> int | None:
    """First round whose exact W2 is <= eps (chunks of rounds, stops early); None if not by max_rounds."""
    from fedlangevin.experiments.exact import _apply_round, participation_moments, round_operators

    ops = round_operators(problem, [step_size] * k)
    ew, eww = participation_moments(problem.weights.double().numpy())
    tm, tc = _target(problem)
    from diagnostics import gaussian_w2

    mean, cov = np.zeros(problem.dim), np.zeros((problem.dim, problem.dim))
    done = 0
    limit = max_rounds if max_rounds is not None else 10**7
    while done < limit:
        n = min(chunk, limit - done)
        ms, cs = np.empty((n, problem.dim)), np.empty((n, problem.dim, problem.dim))
        for i in range(n):
            mean, cov = _apply_round(ops, ew, eww, True, mean, cov)
            ms[i], cs[i] = mean, cov
        w = np.atleast_1d(gaussian_w2(ms, cs, tm, tc))
        hit = np.flatnonzero(w <= eps)
        if hit.size:
            return done + int(hit[0]) + 1
        done += n
        if max_rounds is None and done >= 50 * chunk and np.all(np.abs(np.diff(w[-10:])) < 1e-12):
            return None  # stationary above eps
    return None


def _k_figure(results, paper_exact, curves, exact_curves, floor, eps, eta, spread, curve_alpha):
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    ncols = 2 if curves else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.6 * ncols, 5.0), squeeze=False)
    ax = axes[0, 0]
    top = blended_transform_factory(ax.transData, ax.transAxes)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(results)))
    handles = []
    for color, (alpha, r) in zip(colors, results.items()):
        ks = np.array(sorted(r["points"]))
        mc = np.array([np.nan if r["points"][k][0] is None else r["points"][k][0] for k in ks], dtype=float)
        ex = np.array([np.nan if r["points"][k][1] is None else r["points"][k][1] for k in ks], dtype=float)
        ax.plot(ks, mc, "o-", color=color, ms=4)
        ax.plot(ks, ex, "--", color=color, lw=1, alpha=0.8)
        miss = ks[np.isnan(mc) & np.array([r["points"][k][2] > 0 for k in ks])]
        ax.plot(miss, np.full(miss.size, 0.96), "x", color=color, ms=6, transform=top, clip_on=False)
        handles.append(Line2D([], [], color=color, marker="o", ms=4, label=f"alpha={alpha:g} (gamma={r['gamma']:.2g})"))
    a0 = list(paper_exact)[-1]  # the most heterogeneous: the contrast with its wall is largest
    pk = np.array(sorted(paper_exact[a0]))
    pv = np.array([np.nan if paper_exact[a0][k] is None else paper_exact[a0][k] for k in pk], dtype=float)
    ax.plot(pk, pv, ":", color="black", lw=1.2)
    handles += [
        Line2D([], [], color="black", ls=":", label=f"paper setup (identical Hessians), alpha={a0:g}, exact"),
        Line2D([], [], color="grey", marker="o", ms=4, label=f"R={floor.n} chains"),
        Line2D([], [], color="grey", ls="--", label="exact law"),
        Line2D([], [], color="grey", marker="x", ls="", label="run, never reached eps (top row)"),
    ]
    ax.set_xscale("log")
    ax.set_yscale("log")
    low = np.nanmin([v for r in results.values() for v in (r["points"][k][0] for k in r["points"]) if v is not None]
                    or [1.0])
    ax.set_ylim(bottom=max(0.05, low / 30))  # room for the legend below the curves
    ax.set_xlabel("local steps K")
    ax.set_ylabel(f"communication rounds T_eps / K to reach W2 <= {eps:g}")
    ax.set_title(f"Fig. 1a: K study, per-client curvature (spread {spread:g}), eta={eta:g}", fontsize=10)
    ax.legend(handles=handles, fontsize=7, loc="lower left")
    if curves:
        ax = axes[0, 1]
        ks = sorted(k for (a, k) in curves)
        wanted = [k for k in ks if k in (1, 4, 10, 15, 20, 30)]
        show = wanted or ks[:: max(1, len(ks) // 5)]
        cs = plt.cm.plasma(np.linspace(0, 0.85, len(show)))
        for c, k in zip(cs, show):
            cv, ex = curves[(curve_alpha, k)], exact_curves[(curve_alpha, k)]
            ax.plot(cv.steps, cv.w2, color=c, lw=1.2, label=f"K={k}")
            ax.plot(ex.steps, ex.w2, "--", color=c, lw=0.9)
        _floor_band(ax, floor)
        ax.axhline(eps, color="red", lw=0.8, ls="-.", label=f"eps={eps:g}")
        ax.set_yscale("log")
        ax.set_xlabel("local steps k (= rounds x K)")
        ax.set_ylabel("W2 to the exact posterior")
        ax.set_title(f"the W2 curves behind the points, alpha={curve_alpha:g} (dashed: exact)", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


# -- Fig. 1b: heterogeneity ------------------------------------------------------------------


def heterogeneity_study(
    alphas: Sequence[float] = PAPER_ALPHAS,
    local_steps: int = 10,
    step_size: float = 5e-6,
    rounds: int = 2000,
    curvature_spread: float = 1.5,
    chains: int = 300,
    seed: int = 0,
    progress: bool | None = None,
) -> StudyResult:
    """Fig. 1b: W2 against rounds for several alpha (K = 10, rho = 0, full participation).

    Left panel: the paper's setup (identical client Hessians); right panel: per-client
    curvature (``curvature_spread``), where the local-step bias grows with gamma.
    """
    t_start = time.perf_counter()
    rows = _Rows("setup", "alpha", "gamma", "round", "w2_mc", "w2_exact")
    setups = [("paper", 1.0)] + ([("per-client curvature", curvature_spread)] if curvature_spread > 1 else [])
    data, floors, summary = {}, {}, {}
    bar = _progress(len(setups) * len(alphas), "heterogeneity", progress)
    for label, spread in setups:
        for alpha in alphas:
            problem = simulation_problem(alpha, spread, seed=seed)
            if label not in floors:
                floors[label] = _floor(problem, chains, seed)
            mc = mc_w2_curve(problem, step_size, local_steps, rounds, chains=chains, seed=seed)
            ex = exact_w2_curve(problem, step_size, local_steps, rounds)
            gamma = problem.heterogeneity
            data[(label, alpha)] = (mc, ex, gamma)
            for i in range(rounds):
                rows.add(setup=label, alpha=alpha, gamma=gamma, round=i + 1, w2_mc=float(mc.w2[i]), w2_exact=float(ex.w2[i]))
            tail = max(1, rounds // 10)
            summary[(label, alpha)] = {"gamma": gamma, "final_mc": float(mc.w2[-tail:].mean()),
                                       "final_exact": float(ex.w2[-1]),
                                       "rounds_to_2floor": Curve(local_steps, ex.w2).first_below(2 * floors[label].mean)}
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    table = _table(
        ["setup", "alpha", "gamma", "W2 last 10% (MC)", "W2 end (exact)", "rounds: exact W2 <= 2x floor"],
        [[lab, a, s["gamma"], s["final_mc"], s["final_exact"], s["rounds_to_2floor"]] for (lab, a), s in summary.items()],
    )
    table += "\n" + "; ".join(f"{k} floor {f.mean:.3g}" for k, f in floors.items())

    plt = _plt()
    fig, axes = plt.subplots(1, len(setups), figsize=(6.2 * len(setups), 4.5), squeeze=False, sharey=True)
    for ax, (label, spread) in zip(axes[0], setups):
        colors = plt.cm.viridis(np.linspace(0, 0.9, len(alphas)))
        for c, alpha in zip(colors, alphas):
            mc, ex, gamma = data[(label, alpha)]
            ax.plot(mc.rounds, mc.w2, color=c, lw=1.1, label=f"alpha={alpha:g} (gamma={gamma:.2g})")
            ax.plot(ex.rounds, ex.w2, "--", color=c, lw=0.9)
        _floor_band(ax, floors[label])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("communication rounds")
        ax.set_title(f"Fig. 1b: {label}" + (f" (spread {spread:g})" if spread > 1 else "")
                     + f", K={local_steps}, eta={step_size:g}", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    axes[0, 0].set_ylabel("W2 to the exact posterior (solid: R=300, dashed: exact)")
    fig.tight_layout()
    settings = dict(alphas=list(alphas), local_steps=local_steps, step_size=step_size, rounds=rounds,
                    curvature_spread=curvature_spread, chains=chains, seed=seed)
    return StudyResult("heterogeneity", rows.columns, fig, table, settings, time.perf_counter() - t_start,
                       {"curves": summary, "floors": {k: f.mean for k, f in floors.items()}})


# -- Fig. 1c: correlated noise ---------------------------------------------------------------


def correlation_study(
    correlations: Sequence[float] = (0.0, 0.3, 0.7, 1.0),
    alpha: float = 0.0,
    local_steps: int = 100,
    step_size: float = 5e-6,
    rounds: int = 100,
    curvature_spread: float = 1.0,
    chains: int = 300,
    seed: int = 0,
    progress: bool | None = None,
) -> StudyResult:
    """Fig. 1c: W2 against rounds for rho in {0, 0.3, 0.7, 1} (K = 100, alpha = 0 as the paper)."""
    t_start = time.perf_counter()
    problem = simulation_problem(alpha, curvature_spread, seed=seed)
    floor = _floor(problem, chains, seed)
    rows = _Rows("rho", "round", "w2_mc", "w2_exact")
    data, summary = {}, {}
    bar = _progress(len(correlations), "correlation", progress)
    for rho in correlations:
        mc = mc_w2_curve(problem, step_size, local_steps, rounds, correlation=rho, chains=chains, seed=seed)
        ex = exact_w2_curve(problem, step_size, local_steps, rounds, correlation=rho)
        data[rho] = (mc, ex)
        for i in range(rounds):
            rows.add(rho=rho, round=i + 1, w2_mc=float(mc.w2[i]), w2_exact=float(ex.w2[i]))
        summary[rho] = {"mc_first_below_2floor": mc.first_below(2 * floor.mean),
                        "exact_first_below_2floor": ex.first_below(2 * floor.mean),
                        "mc_end": float(mc.w2[-max(1, rounds // 10):].mean()), "exact_end": float(ex.w2[-1])}
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    ex0 = data[correlations[0]][1].w2
    spread_exact = max(float(np.max(np.abs(data[r][1].w2 - ex0))) for r in correlations)
    table = _table(["rho", "rounds to 2x floor (MC)", "(exact)", "W2 last 10% (MC)", "W2 end (exact)"],
                   [[r, s["mc_first_below_2floor"], s["exact_first_below_2floor"], s["mc_end"], s["exact_end"]]
                    for r, s in summary.items()])
    table += f"\nlargest difference between the exact curves of different rho: {spread_exact:.3g}; floor {floor.mean:.3g}"

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    colors = plt.cm.coolwarm(np.linspace(0, 1, len(correlations)))
    for c, rho in zip(colors, correlations):
        mc, ex = data[rho]
        ax.plot(mc.rounds, mc.w2, color=c, lw=1.1, label=f"rho={rho:g}")
        ax.plot(ex.rounds, ex.w2, "--", color=c, lw=0.9)
    _floor_band(ax, floor)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("communication rounds")
    ax.set_ylabel("W2 to the exact posterior (solid: R=300, dashed: exact)")
    setup = "paper setup" if curvature_spread == 1 else f"per-client curvature {curvature_spread:g}"
    ax.set_title(f"Fig. 1c: correlated noise, {setup}, alpha={alpha:g}, K={local_steps}, eta={step_size:g}", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    settings = dict(correlations=list(correlations), alpha=alpha, local_steps=local_steps, step_size=step_size,
                    rounds=rounds, curvature_spread=curvature_spread, chains=chains, seed=seed)
    return StudyResult("correlation", rows.columns, fig, table, settings, time.perf_counter() - t_start,
                       {"curves": summary, "max_exact_difference": spread_exact, "floor": floor.mean})


# -- Fig. 1d/1e: densities -------------------------------------------------------------------


def density_study(
    alpha: float = 0.0,
    local_steps: int = 10,
    step_size: float = 5e-6,
    rounds: int = 1000,
    keep_last: int = 50,
    chains: int = 300,
    seed: int = 0,
    progress: bool | None = None,
) -> StudyResult:
    """Fig. 1d/1e: the exact posterior density and the empirical density of FA-LD's samples.

    rho = 0, full participation, K = 10, alpha = 0 (gamma ~ 1e3 here; the paper's 1e8 is
    for its larger n). The empirical density is a Gaussian KDE of the last ``keep_last``
    rounds of all chains (every ``keep_last // 10``-th round, to thin the autocorrelation).
    """
    import fedlangevin as fl
    from scipy.stats import gaussian_kde, multivariate_normal

    t_start = time.perf_counter()
    problem = simulation_problem(alpha, 1.0, seed=seed)
    mean, cov = _target(problem)
    sampler = fl.FALD(problem, step_size=step_size, local_steps=local_steps, chains=chains, seed=seed)
    thin = max(1, keep_last // 10)
    trace = sampler.run(rounds, warmup=rounds - keep_last, thin=thin, progress=progress)
    x = trace.numpy().reshape(-1, problem.dim)
    rows = _Rows("chain", "round", "theta0", "theta1")
    for c in range(trace.num_chains):
        for j, rnd in enumerate(trace.draw_rounds):
            rows.add(chain=c, round=int(rnd), theta0=float(trace.samples[c, j, 0]), theta1=float(trace.samples[c, j, 1]))
    emp_mean = x.mean(0)
    emp_cov = np.cov(x, rowvar=False)

    def sd_corr(c):
        s = np.sqrt(np.diag(c))
        return s[0], s[1], c[0, 1] / (s[0] * s[1])

    t_sd = sd_corr(cov)
    e_sd = sd_corr(emp_cov)
    last_w2 = trace.w2(mean, cov)
    table = _table(["", "mean[0]", "mean[1]", "sd[0]", "sd[1]", "corr"],
                   [["exact", mean[0], mean[1], *t_sd], ["FA-LD samples", emp_mean[0], emp_mean[1], *e_sd]])
    table += f"\n{x.shape[0]} draws ({trace.num_chains} chains x {trace.num_draws} rounds); fitted W2 per kept round: " \
             f"{last_w2.min():.3g} - {last_w2.max():.3g}"

    plt = _plt()
    half = 4 * np.sqrt(np.diag(cov))
    gx = np.linspace(mean[0] - half[0], mean[0] + half[0], 140)
    gy = np.linspace(mean[1] - half[1], mean[1] + half[1], 140)
    xx, yy = np.meshgrid(gx, gy)
    pts = np.stack([xx.ravel(), yy.ravel()], 1)
    true = multivariate_normal(mean, cov).pdf(pts).reshape(xx.shape)
    emp = gaussian_kde(x.T)(pts.T).reshape(xx.shape)
    levels = np.linspace(0, max(true.max(), emp.max()), 12)[1:]
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.5))
    for ax, z, title in ((axes[0], true, "Fig. 1d: true posterior density"),
                         (axes[1], emp, f"Fig. 1e: empirical density (K={local_steps}, {x.shape[0]} draws)")):
        cs = ax.contourf(xx, yy, z, levels=levels, cmap="viridis")
        ax.set_xlabel("theta[0]")
        ax.set_ylabel("theta[1]")
        ax.set_title(title, fontsize=10)
        fig.colorbar(cs, ax=ax, fraction=0.046, label="density")
    fig.tight_layout()
    settings = dict(alpha=alpha, local_steps=local_steps, step_size=step_size, rounds=rounds, keep_last=keep_last,
                    chains=chains, seed=seed)
    return StudyResult("density", rows.columns, fig, table, settings, time.perf_counter() - t_start,
                       {"exact_mean": mean, "exact_cov": cov, "emp_mean": emp_mean, "emp_cov": emp_cov,
                        "w2_kept": last_w2})


# -- Fig. 2: partial participation -----------------------------------------------------------


def participation_study(
    schemes: Sequence[tuple[str, int]] = (("full", 50), ("I", 40), ("II", 40), ("I", 30), ("II", 30)),
    step_factors: Sequence[float] = (1.5, 0.5, 0.15),
    alpha: float = 0.0,
    local_steps: int = 100,
    rounds: int = 60,
    chains: int = 300,
    seed: int = 0,
    progress: bool | None = None,
) -> StudyResult:
    """Fig. 2: full devices against schemes I and II with S of N = 50, for several eta.

    Step sizes are eta = c / L for c in ``step_factors`` (L = max_c lambda_max(A_c); the
    local chains are stable for c < 2). K = 100, rho = 0, paper setup.
    """
    import fedlangevin as fl

    t_start = time.perf_counter()
    problem = simulation_problem(alpha, 1.0, seed=seed)
    floor = _floor(problem, chains, seed)
    L = problem.smoothness
    rows = _Rows("scheme", "S", "eta", "c", "round", "w2_mc", "w2_exact")
    data, summary = {}, {}
    bar = _progress(len(schemes) * len(step_factors), "participation", progress)
    for scheme, s in schemes:
        rule = fl.Full() if scheme == "full" else (fl.SchemeI(s) if scheme == "I" else fl.SchemeII(s))
        for c in step_factors:
            eta = c / L
            mc = mc_w2_curve(problem, eta, local_steps, rounds, participation=rule, chains=chains, seed=seed)
            ex = exact_w2_curve(problem, eta, local_steps, rounds, scheme=scheme, num_sampled=None if scheme == "full" else s)
            data[(scheme, s, c)] = (mc, ex)
            for i in range(rounds):
                rows.add(scheme=scheme, S=s, eta=eta, c=c, round=i + 1, w2_mc=float(mc.w2[i]), w2_exact=float(ex.w2[i]))
            tail = max(1, rounds // 4)
            summary[(scheme, s, c)] = {"eta": eta, "mc_floor": float(mc.w2[-tail:].mean()), "exact_end": float(ex.w2[-1])}
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    # the long-run level as eta -> 0, from the exact stationary law (no simulation needed)
    from fedlangevin.experiments.exact import stationary_moments

    limit_factors = np.geomspace(min(step_factors) / 100, max(step_factors), 13)
    limits = {}
    for scheme, s in schemes:
        vals = []
        for c in limit_factors:
            m_, c_ = stationary_moments(problem, [c / L] * local_steps, 1.0, 0.0, scheme, None if scheme == "full" else s)
            vals.append(float(w2_to_target(problem, m_[None], c_[None])[0]))
        limits[(scheme, s)] = np.array(vals)
        summary[(scheme, s, "limit")] = {"eta": float(limit_factors[0] / L), "mc_floor": None,
                                         "exact_end": float(vals[0])}
    table = _table(["scheme", "S", "eta (c/L)", "c", "W2 last 25% (MC)", "W2 end (exact)"],
                   [[sc, s, v["eta"], (float(limit_factors[0]) if c == "limit" else c), v["mc_floor"], v["exact_end"]]
                    for (sc, s, c), v in summary.items()])
    table += (f"\n(rows with no Monte Carlo value: exact long-run W2 at c = {limit_factors[0]:.3g})"
              f"\nexact-draw floor for R={chains}: {floor.mean:.3g} (5-95%: {floor.q05:.3g} - {floor.q95:.3g})")

    plt = _plt()
    ncols = 3
    nrows = math.ceil((len(schemes) + 1) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.8 * nrows), squeeze=False)
    flat = axes.ravel()
    colors = plt.cm.viridis(np.linspace(0, 0.85, len(step_factors)))
    letters = "abcdefgh"
    lims = (min(min(float(np.min(d[0].w2)), float(np.min(d[1].w2))) for d in data.values()) * 0.7,
            max(max(float(np.max(d[0].w2)), float(np.max(d[1].w2))) for d in data.values()) * 1.4)
    for i, (ax, (scheme, s)) in enumerate(zip(flat, schemes)):
        for col, c in zip(colors, step_factors):
            mc, ex = data[(scheme, s, c)]
            ax.plot(mc.rounds, mc.w2, color=col, lw=1.1, label=f"eta={c:g}/L")
            ax.plot(ex.rounds, ex.w2, "--", color=col, lw=0.9)
        _floor_band(ax, floor, label=i == 0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(*lims)
        ax.set_xlabel("communication rounds")
        name = "full devices" if scheme == "full" else f"scheme {scheme}"
        ax.set_title(f"({letters[i]}) {name}: S={s}", fontsize=10)
        if i % ncols == 0:
            ax.set_ylabel(f"W2 (solid: R={chains}, dashed: exact)")
        if i == 0:
            ax.legend(fontsize=7, loc="lower left")
    ax = flat[len(schemes)]
    marks = iter("os^vDP")
    for scheme, s in schemes:
        name = "full" if scheme == "full" else f"{scheme}, S={s}"
        line, = ax.plot(limit_factors, limits[(scheme, s)], "-", lw=1.1, label=f"{name} (exact)")
        mc = [summary[(scheme, s, c)]["mc_floor"] for c in step_factors]
        ax.plot(step_factors, mc, next(marks), color=line.get_color(), ms=5, ls="")
    _floor_band(ax, floor)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("eta x L")
    ax.set_ylabel("long-run W2 (markers: R=300, last 25%)")
    ax.set_title(f"({letters[len(schemes)]}) bias against step size", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    for extra in flat[len(schemes) + 1 :]:
        extra.axis("off")
    fig.suptitle(f"Fig. 2: device participation, N={problem.num_clients}, K={local_steps}, alpha={alpha:g}", fontsize=10)
    fig.tight_layout()
    settings = dict(schemes=[list(x) for x in schemes], step_factors=list(step_factors), smoothness=L, alpha=alpha,
                    local_steps=local_steps, rounds=rounds, chains=chains, seed=seed)
    return StudyResult("participation", rows.columns, fig, table, settings, time.perf_counter() - t_start,
                       {"curves": {k: v for k, v in summary.items() if k[2] != "limit"}, "floor": floor.mean,
                        "limit_factors": limit_factors, "limits": limits})


# -- Thm 5.8: varying step size --------------------------------------------------------------


def step_size_study(
    alpha: float = 0.0,
    local_steps: int = 10,
    batch_size: int | None = 1,
    rounds: int = 2000,
    exact_rounds: int = 100_000,
    chains: int = 300,
    seed: int = 0,
    progress: bool | None = None,
) -> StudyResult:
    """Thm 5.8: eta_k = 1/(2L + m k/12) against the constant eta = 1/(2L) it starts from.

    Both with full gradients and with minibatch gradients of ``batch_size`` points per
    client and step (the theorem's stochastic-gradient setting; ``None`` skips them). The
    Monte Carlo curves (R chains) run for ``rounds`` rounds, the exact law for
    ``exact_rounds`` (cheap), long enough to read the asymptotic rate: the fitted slope of
    log W2 against log k is reported next to Thm 5.8's -1/2.
    """
    from fedlangevin.experiments.exact import minibatch_gradient_noise
    from fedlangevin.fald.schedules import PaperDecay

    t_start = time.perf_counter()
    problem = simulation_problem(alpha, 1.0, seed=seed)
    L, m = problem.smoothness, problem.convexity
    floor = _floor(problem, chains, seed)
    schedules = {"decay (Thm 5.8)": PaperDecay(L, m), "constant 1/(2L)": 1.0 / (2 * L)}
    gradients = {"full gradient": None}
    if batch_size is not None:
        gradients[f"minibatch b={batch_size}"] = batch_size
    rows = _Rows("schedule", "gradient", "round", "step", "eta", "w2_mc", "w2_exact")
    data, slopes = {}, {}
    bar = _progress(len(schedules) * len(gradients), "step size", progress)
    for gname, b in gradients.items():
        noise = None if b is None else minibatch_gradient_noise(problem, b)
        for sname, sched in schedules.items():
            mc = mc_w2_curve(problem, sched, local_steps, rounds, chains=chains, seed=seed, batch_size=b)
            steps, we = _exact_centralised_curve(problem, sched, local_steps, exact_rounds, noise)
            data[(sname, gname)] = (mc, steps, we)
            for i in range(rounds):
                k = (i + 1) * local_steps
                eta = sched(k - 1) if callable(sched) else sched
                rows.add(schedule=sname, gradient=gname, round=i + 1, step=k, eta=float(eta), w2_mc=float(mc.w2[i]),
                         w2_exact=float(we[i]))
            if callable(sched):
                slopes[gname] = {f"{lo:g}-{hi:g}": _slope(steps, we, lo, hi)
                                 for lo, hi in ((1e3, 1e4), (1e4, 1e5), (steps[-1] / 10, steps[-1]))}
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    rows_t = []
    for (sname, gname), (mc, st, we) in data.items():
        rows_t.append([sname, gname, float(mc.w2[0]), float(mc.w2[-max(1, rounds // 10):].mean()), float(we[rounds - 1]),
                       float(we[-1])])
    table = _table(["schedule", "gradient", "W2 round 1 (MC)", f"W2 last 10% of {rounds} rounds (MC)",
                    f"exact, round {rounds}", f"exact, round {exact_rounds}"], rows_t)
    for gname, sl in slopes.items():
        table += f"\nexact slope of log W2 vs log k, decay, {gname}: " + ", ".join(f"k in {r}: {v:.3f}" for r, v in sl.items())
    table += f"\nThm 5.8 bound: slope -0.5. Exact-draw floor R={chains}: {floor.mean:.3g}"

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.4, 5.0))
    palette = iter(["tab:blue", "tab:orange", "tab:green", "tab:red"])
    for (sname, gname), (mc, st, we) in data.items():
        col = next(palette)
        ax.plot(mc.steps, mc.w2, color=col, lw=1.0, alpha=0.9, label=f"{sname}, {gname}")
        ax.plot(st, we, "--", color=col, lw=1.0)
    st, we = data[(next(iter(schedules)), next(reversed(gradients)))][1:]
    k0 = 1e3
    w0 = float(np.interp(k0, st, we))
    ks = np.geomspace(k0, st[-1], 50)
    ax.plot(ks, 1.5 * w0 * (ks / k0) ** -0.5, color="black", lw=0.9, ls=":", label="slope k^(-1/2) (Thm 5.8)")
    ax.plot(ks, 0.6 * w0 * (ks / k0) ** -1.0, color="grey", lw=0.9, ls="-.", label="slope k^(-1)")
    _floor_band(ax, floor)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("local steps k")
    ax.set_ylabel(f"W2 to the exact posterior (solid: R={chains}, dashed: exact)")
    ax.set_title(f"Thm 5.8: varying step size, alpha={alpha:g}, K={local_steps}, L={L:.4g}, m={m:.3g}", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    settings = dict(alpha=alpha, local_steps=local_steps, batch_size=batch_size, rounds=rounds, exact_rounds=exact_rounds,
                    chains=chains, seed=seed, smoothness=L, convexity=m)
    return StudyResult("step_size", rows.columns, fig, table, settings, time.perf_counter() - t_start,
                       {"slopes": slopes, "floor": floor.mean,
                        "mc": {k: d[0].w2 for k, d in data.items()}, "exact": {k: d[2] for k, d in data.items()}})


def _slope(steps: np.ndarray, w: np.ndarray, lo: float, hi: float) -> float:
    sel = (steps >= lo) & (steps <= hi)
    return float(np.polyfit(np.log(steps[sel]), np.log(w[sel]), 1)[0]) if sel.sum() >= 2 else float("nan")


def _exact_centralised_curve(problem, schedule, k: int, rounds: int, gradient_noise: np.ndarray | None = None):
    """Exact W2 after each round for a step-size schedule, on a problem with one shared Hessian.

    With A_c = A for every client, averaging commutes with the local updates and the global
    law after k local steps is that of k steps of centralised Langevin on f with per-step
    noise covariance 2 eta I + eta^2 G, G = sum_c p_c^2 G_c the aggregated gradient-noise
    covariance. In A's eigenbasis (A = V diag(w) V^T) every entry of the mean and of the
    covariance follows a scalar first-order recursion,

        m_i <- (1 - eta w_i) m_i + eta b~_i,
        C_ij <- (1 - eta w_i)(1 - eta w_j) C_ij + 2 eta [i = j] + eta^2 G~_ij,

    solved with a chunked cumulative-product scan (exact and vectorised: 10^6 steps in about
    a second). Cross-checked against :func:`~fedlangevin.experiments.exact.exact_moments`.
    """
    form = problem.quadratic()
    if not form.shared:
        raise ValueError("the long exact curve needs identical client Hessians")
    a = form.hessian.double().numpy()
    b = problem.global_shift.double().numpy()
    p = problem.weights.double().numpy()
    w, v = np.linalg.eigh(a)
    d = w.size
    bt = v.T @ b
    g = np.zeros((d, d)) if gradient_noise is None else v.T @ np.einsum("n,nij->ij", p**2, gradient_noise) @ v
    n = rounds * k
    etas = np.array([schedule(i) for i in range(n)]) if callable(schedule) else np.full(n, float(schedule))
    factor = 1.0 - etas[:, None] * w[None, :]  # (n, d)
    means = _affine_scan(factor, etas[:, None] * bt[None, :], np.zeros(d))[k - 1 :: k]
    pair = (factor[:, :, None] * factor[:, None, :]).reshape(n, d * d)
    inject = (2.0 * etas[:, None, None] * np.eye(d) + etas[:, None, None] ** 2 * g).reshape(n, d * d)
    covs = _affine_scan(pair, inject, np.zeros(d * d))[k - 1 :: k].reshape(rounds, d, d)
    from diagnostics import gaussian_w2

    w2 = np.atleast_1d(gaussian_w2(means, covs, bt / w, np.diag(1.0 / w)))
    return np.arange(1, rounds + 1) * k, w2


def _affine_scan(a: np.ndarray, c: np.ndarray, x0: np.ndarray, chunk: int = 256) -> np.ndarray:
    """x_j = a_j x_{j-1} + c_j for all j (rows), by cumulative products over chunks.

    Within a chunk x_j = P_j (x_0 + sum_{i<=j} c_i / P_i) with P_j = prod_{i<=j} a_i; chunks
    of 256 steps keep P_j far from underflow for |a| >= e^-0.5.
    """
    out = np.empty_like(c)
    x = x0
    for s in range(0, a.shape[0], chunk):
        p = np.cumprod(a[s : s + chunk], axis=0)
        out[s : s + chunk] = p * (x + np.cumsum(c[s : s + chunk] / p, axis=0))
        x = out[min(s + chunk, a.shape[0]) - 1]
    return out


# -- the registry used by ``fedlangevin simulate`` ------------------------------------------------

#: name -> (function, one-line help, reduced keyword arguments for CI)
STUDIES: dict[str, tuple[Callable[..., StudyResult], str, dict]] = {
    "k-study": (k_study, "Fig. 1a: communication rounds to W2 <= eps against K, per alpha (U shape)",
                dict(alphas=(1.0,), local_steps=(1, 3, 10, 20, 30), step_size=4e-6, curve_alpha=1.0)),
    "heterogeneity": (heterogeneity_study, "Fig. 1b: W2 against rounds for alpha in {0, 1, 10, 100, 1000}, K = 10",
                      dict(alphas=(0.0, 100.0), rounds=300, step_size=5e-6)),
    "correlation": (correlation_study, "Fig. 1c: W2 against rounds for rho in {0, 0.3, 0.7, 1}, K = 100",
                    dict(correlations=(0.0, 1.0), rounds=60, step_size=5e-6)),
    "density": (density_study, "Fig. 1d/1e: exact posterior density vs the empirical density of the samples",
                dict(rounds=300, keep_last=20, step_size=5e-6)),
    "participation": (participation_study, "Fig. 2: full devices vs schemes I/II with S = 40, 30 of N = 50, several eta",
                      dict(step_factors=(1.0, 0.3), rounds=25)),
    "step-size": (step_size_study, "Thm 5.8: eta_k = 1/(2L + m k/12) vs constant eta, W2 decay rate",
                  dict(rounds=150, exact_rounds=20_000)),
}


# -- command line (``fedlangevin simulate <study>``) ---------------------------------------------


def cli_configure(name: str, parser) -> None:
    parser.add_argument("--reduced", action="store_true",
                        help="the small settings used in CI (seconds instead of minutes; same qualitative claims)")
    parser.add_argument("--chains", type=int, default=300, help="replicate chains R (default: %(default)s, as the paper)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and sampler (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run_study(name: str, reduced: bool = False, **overrides) -> StudyResult:
    """Run the study registered as ``name`` (documented settings, or the CI ones with ``reduced``)."""
    if name not in STUDIES:
        raise ValueError(f"study must be one of {', '.join(STUDIES)}; got {name!r}")
    fn, _, small = STUDIES[name]
    kwargs = dict(small) if reduced else {}
    kwargs.update(overrides)
    return fn(**kwargs)


def cli_run(name: str, args) -> int:
    check_int("chains", args.chains, 2)
    check_int("seed", args.seed, 0)
    names = list(STUDIES) if name == "all" else [name]
    progress = False if args.no_progress else None
    timings = []
    for study in names:
        result = run_study(study, reduced=args.reduced, chains=args.chains, seed=args.seed, progress=progress)
        png, csv_path = result.save(args.out)
        import matplotlib.pyplot as plt

        plt.close(result.figure)
        title = STUDIES[study][1]
        print(f"== {study}: {title}")
        print(", ".join(f"{k}={v}" for k, v in result.settings.items()))
        print(result.table)
        print(f"time: {result.seconds:.1f} s; wrote {png} and {csv_path} ({result.num_rows} rows)\n")
        timings.append((study, result.seconds))
    if len(names) > 1:
        print(_table(["study", "seconds"], [[n, float(t)] for n, t in timings] + [["total", float(sum(t for _, t in timings))]]))
    return 0
