"""The paper's simulation study (Deng et al., Sec. 7.1: Fig. 1a-e, Fig. 2; Thm 5.8), as functions.

Every study returns a :class:`StudyResult`: tidy columns (one row per configuration and
round), a matplotlib figure, a short text table and the settings used. The Monte Carlo
measure is the paper's: R = 300 replicate chains, and at each communication round the W2
distance between the Gaussian fitted to the R draws (mean, ddof = 1 covariance) and the
exact posterior; the finite-R floor (what R exact draws would give) is drawn on every plot.
Each Monte Carlo curve is accompanied by the exact W2 of the sampler's own law (R -> oo),
computed by :mod:`fedlangevin.experiments.exact`, as a cross-check.

This module holds the studies of Fig. 1 and the registry of every study, :data:`STUDIES`; the
studies in which the step size varies (Fig. 2, Thm 5.8) are in
:mod:`~fedlangevin.experiments.gaussian_step_size`, the drift corrections' study in
:mod:`~fedlangevin.experiments.drift_study`; the curves are computed
by :mod:`~fedlangevin.experiments.curves`, the figures drawn by
:mod:`~fedlangevin.experiments.gaussian_plots`, the rows, progress bar and files handled by
:mod:`~fedlangevin.experiments.report`; the command line lives in
:mod:`fedlangevin.commands.simulate`.

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

import math
import time
from typing import Callable, NamedTuple, Sequence

import numpy as np

from fedlangevin.experiments.curves import (
    Curve,
    exact_draw_floor,
    exact_first_below,
    exact_w2_curve,
    mc_w2_curve,
    simulation_problem,
    target_moments,
)
from fedlangevin.experiments.gaussian_plots import (
    correlation_figure,
    density_figure,
    heterogeneity_figure,
    k_figure,
)
from fedlangevin.experiments.report import Rows, StudyResult, progress_bar, text_table
from fedlangevin.experiments.drift_study import heterogeneity_correction_study
from fedlangevin.experiments.gaussian_step_size import participation_study, step_size_study
from fedlangevin.problems import CurvatureSimulation  # noqa: F401  (import path kept for existing callers)

__all__ = [
    "CurvatureSimulation",
    "PAPER_ALPHAS",
    "STUDIES",
    "Study",
    "StudyResult",
    "correlation_study",
    "density_study",
    "heterogeneity_study",
    "k_study",
    "run_study",
]

#: Heterogeneity levels alpha of Fig. 1a/1b.
PAPER_ALPHAS = (0.0, 1.0, 10.0, 100.0, 1000.0)


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
    rows = Rows("setup", "alpha", "gamma", "K", "eta", "eps", "rounds_mc", "steps_mc", "rounds_exact",
                 "steps_exact", "rounds_run", "seconds")
    curves: dict[tuple, Curve] = {}
    exact_curves: dict[tuple, Curve] = {}
    results: dict[float, dict] = {}
    bar = progress_bar(len(alphas) * len(local_steps), "K study", progress, leave=False)
    floor = None
    paper_exact: dict[float, dict[int, int | None]] = {}
    for alpha in alphas:
        problem = simulation_problem(alpha, curvature_spread, seed=seed)
        paper = simulation_problem(alpha, 1.0, seed=seed)
        if floor is None:
            floor = exact_draw_floor(problem, chains, seed)
        # exact T_eps at K = 1 sets the budget (in local steps) of every run of this alpha
        base = exact_first_below(problem, step_size, 1, eps)
        if base is None:
            raise ValueError(f"k_study: W2 <= eps={eps} is not reachable at K = 1 for alpha={alpha}; raise eps")
        max_steps = int(math.ceil(budget * base))
        gamma = problem.heterogeneity
        res = {}
        paper_exact[alpha] = {}
        unreachable = 0
        for k in local_steps:
            rounds = max(1, math.ceil(max_steps / k))
            ex = exact_first_below(problem, step_size, k, eps, max_rounds=rounds)
            pe = exact_first_below(paper, step_size, k, eps, max_rounds=rounds)
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
    table = text_table(["alpha", "gamma", "rounds K=1", "best K", "rounds", "saving", "best K exact", "rounds exact"],
                   table_rows)
    table += f"\n(rounds to W2 <= {eps:g}; R = {chains} chains; exact-draw floor {floor.mean:.3g}, 95% {floor.q95:.3g})"

    fig = k_figure(results, paper_exact, curves, exact_curves, floor, eps, step_size, curvature_spread, curve_alpha)
    settings = dict(alphas=list(alphas), local_steps=list(local_steps), step_size=step_size, eps=eps,
                    curvature_spread=curvature_spread, chains=chains, seed=seed, budget=budget)
    return StudyResult("k_study", rows.columns, fig, table, settings, time.perf_counter() - t_start, summary)


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
    rows = Rows("setup", "alpha", "gamma", "round", "w2_mc", "w2_exact")
    setups = [("paper", 1.0)] + ([("per-client curvature", curvature_spread)] if curvature_spread > 1 else [])
    data, floors, summary = {}, {}, {}
    bar = progress_bar(len(setups) * len(alphas), "heterogeneity", progress, leave=False)
    for label, spread in setups:
        for alpha in alphas:
            problem = simulation_problem(alpha, spread, seed=seed)
            if label not in floors:
                floors[label] = exact_draw_floor(problem, chains, seed)
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
    table = text_table(
        ["setup", "alpha", "gamma", "W2 last 10% (MC)", "W2 end (exact)", "rounds: exact W2 <= 2x floor"],
        [[lab, a, s["gamma"], s["final_mc"], s["final_exact"], s["rounds_to_2floor"]] for (lab, a), s in summary.items()],
    )
    table += "\n" + "; ".join(f"{k} floor {f.mean:.3g}" for k, f in floors.items())

    fig = heterogeneity_figure(data, setups, alphas, floors, local_steps, step_size)
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
    floor = exact_draw_floor(problem, chains, seed)
    rows = Rows("rho", "round", "w2_mc", "w2_exact")
    data, summary = {}, {}
    bar = progress_bar(len(correlations), "correlation", progress, leave=False)
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
    table = text_table(["rho", "rounds to 2x floor (MC)", "(exact)", "W2 last 10% (MC)", "W2 end (exact)"],
                   [[r, s["mc_first_below_2floor"], s["exact_first_below_2floor"], s["mc_end"], s["exact_end"]]
                    for r, s in summary.items()])
    table += f"\nlargest difference between the exact curves of different rho: {spread_exact:.3g}; floor {floor.mean:.3g}"

    fig = correlation_figure(data, correlations, floor, alpha, local_steps, step_size, curvature_spread)
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

    t_start = time.perf_counter()
    problem = simulation_problem(alpha, 1.0, seed=seed)
    mean, cov = target_moments(problem)
    sampler = fl.FALD(problem, step_size=step_size, local_steps=local_steps, chains=chains, seed=seed,
                      check_local_bias=False)  # Fig. 1e's fixed K, on purpose
    thin = max(1, keep_last // 10)
    trace = sampler.run(rounds, warmup=rounds - keep_last, thin=thin, progress=progress)
    x = trace.numpy().reshape(-1, problem.dim)
    rows = Rows("chain", "round", "theta0", "theta1")
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
    table = text_table(["", "mean[0]", "mean[1]", "sd[0]", "sd[1]", "corr"],
                   [["exact", mean[0], mean[1], *t_sd], ["FA-LD samples", emp_mean[0], emp_mean[1], *e_sd]])
    table += f"\n{x.shape[0]} draws ({trace.num_chains} chains x {trace.num_draws} rounds); fitted W2 per kept round: " \
             f"{last_w2.min():.3g} - {last_w2.max():.3g}"

    fig = density_figure(mean, cov, x, local_steps)
    settings = dict(alpha=alpha, local_steps=local_steps, step_size=step_size, rounds=rounds, keep_last=keep_last,
                    chains=chains, seed=seed)
    return StudyResult("density", rows.columns, fig, table, settings, time.perf_counter() - t_start,
                       {"exact_mean": mean, "exact_cov": cov, "emp_mean": emp_mean, "emp_cov": emp_cov,
                        "w2_kept": last_w2})


# -- the registry used by ``fedlangevin simulate`` ------------------------------------------------

class Study(NamedTuple):
    """A registered study: its function, a one-line help and the reduced keyword arguments
    used in CI (``run_study(name, reduced=True)``, ``fedlangevin simulate <name> --reduced``)."""

    run: Callable[..., StudyResult]
    help: str
    reduced: dict


#: name -> Study; the one registry of the simulation studies (``fedlangevin simulate`` lists it)
STUDIES: dict[str, Study] = {
    "k-study": Study(k_study, "Fig. 1a: communication rounds to W2 <= eps against K, per alpha (U shape)",
        dict(alphas=(1.0,), local_steps=(1, 3, 10, 20, 30), step_size=4e-6, curve_alpha=1.0)),
    "heterogeneity": Study(heterogeneity_study, "Fig. 1b: W2 against rounds for alpha in {0, 1, 10, 100, 1000}, K = 10",
        dict(alphas=(0.0, 100.0), rounds=300, step_size=5e-6)),
    "correlation": Study(correlation_study, "Fig. 1c: W2 against rounds for rho in {0, 0.3, 0.7, 1}, K = 100",
        dict(correlations=(0.0, 1.0), rounds=60, step_size=5e-6)),
    "density": Study(density_study, "Fig. 1d/1e: exact posterior density vs the empirical density of the samples",
        dict(rounds=300, keep_last=20, step_size=5e-6)),
    "participation": Study(participation_study, "Fig. 2: full devices vs schemes I/II with S = 40, 30 of N = 50, several eta",
        dict(step_factors=(1.0, 0.3), rounds=25)),
    "heterogeneity-correction": Study(heterogeneity_correction_study,
        "drift corrections vs FA-LD at alpha = 100, per-client curvature: W2 against rounds and stationary W2 against K",
        dict(rounds=300, ks=(1, 10, 50), chains=100)),
    "step-size": Study(step_size_study, "Thm 5.8: eta_k = 1/(2L + m k/12) vs constant eta, W2 decay rate",
        dict(rounds=150, exact_rounds=20_000)),
}


def run_study(name: str, reduced: bool = False, **overrides) -> StudyResult:
    """Run the study registered as ``name`` (documented settings, or the CI ones with ``reduced``)."""
    if name not in STUDIES:
        raise ValueError(f"study must be one of {', '.join(STUDIES)}; got {name!r}")
    fn, _, small = STUDIES[name]
    kwargs = dict(small) if reduced else {}
    kwargs.update(overrides)
    return fn(**kwargs)
