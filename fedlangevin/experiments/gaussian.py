"""The paper's simulation study (Deng et al., Sec. 7.1: Fig. 1a-e, Fig. 2; Thm 5.8), as functions.

Every study returns a :class:`StudyResult`: tidy columns (one row per configuration and
round), a matplotlib figure, a short text table and the settings used. The Monte Carlo
measure is the paper's: R = 300 replicate chains, and at each communication round the W2
distance between the Gaussian fitted to the R draws (mean, ddof = 1 covariance) and the
exact posterior; the finite-R floor (what R exact draws would give) is drawn on every plot.
Each Monte Carlo curve is accompanied by the exact W2 of the sampler's own law (R -> oo),
computed by :mod:`fedlangevin.experiments.exact`, as a cross-check.

This module holds the studies and their registry :data:`STUDIES`; the curves are computed
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
    exact_centralised_curve,
    exact_draw_floor,
    exact_first_below,
    exact_w2_curve,
    loglog_slope,
    mc_w2_curve,
    simulation_problem,
    target_moments,
)
from fedlangevin.experiments.exact import w2_to_target
from fedlangevin.experiments.gaussian_plots import (
    correlation_figure,
    density_figure,
    heterogeneity_figure,
    k_figure,
    participation_figure,
    step_size_figure,
)
from fedlangevin.experiments.report import Rows, StudyResult, progress_bar, text_table
from fedlangevin.fald.core.participation import Full, Participation, SchemeI, SchemeII
from fedlangevin.experiments.drift_study import heterogeneity_correction_study
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
    "participation_study",
    "run_study",
    "step_size_study",
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
    sampler = fl.FALD(problem, step_size=step_size, local_steps=local_steps, chains=chains, seed=seed)
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


# -- Fig. 2: partial participation -----------------------------------------------------------


def participation_study(
    rules: Sequence[Participation] = (Full(), SchemeI(40), SchemeII(40), SchemeI(30), SchemeII(30)),
    step_factors: Sequence[float] = (1.5, 0.5, 0.15),
    alpha: float = 0.0,
    local_steps: int = 100,
    rounds: int = 60,
    chains: int = 300,
    seed: int = 0,
    progress: bool | None = None,
) -> StudyResult:
    """Fig. 2: full devices against schemes I and II with S of N = 50, for several eta.

    ``rules``: the participation rules compared (rows and summary keys name a rule by its
    ``scheme`` and S, N for full devices). Step sizes are eta = c / L for c in ``step_factors`` (L = max_c lambda_max(A_c); the
    local chains are stable for c < 2). K = 100, rho = 0, paper setup.
    """
    t_start = time.perf_counter()
    problem = simulation_problem(alpha, 1.0, seed=seed)
    floor = exact_draw_floor(problem, chains, seed)
    L = problem.smoothness
    schemes = [(rule.scheme, rule.num_sampled or problem.num_clients) for rule in rules]
    rows = Rows("scheme", "S", "eta", "c", "round", "w2_mc", "w2_exact")
    data, summary = {}, {}
    bar = progress_bar(len(rules) * len(step_factors), "participation", progress, leave=False)
    for rule, (scheme, s) in zip(rules, schemes):
        for c in step_factors:
            eta = c / L
            mc = mc_w2_curve(problem, eta, local_steps, rounds, participation=rule, chains=chains, seed=seed)
            ex = exact_w2_curve(problem, eta, local_steps, rounds, participation=rule)
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
    for rule, (scheme, s) in zip(rules, schemes):
        vals = []
        for c in limit_factors:
            m_, c_ = stationary_moments(problem, [c / L] * local_steps, 1.0, 0.0, rule)
            vals.append(float(w2_to_target(problem, m_[None], c_[None])[0]))
        limits[(scheme, s)] = np.array(vals)
        summary[(scheme, s, "limit")] = {"eta": float(limit_factors[0] / L), "mc_floor": None,
                                         "exact_end": float(vals[0])}
    table = text_table(["scheme", "S", "eta (c/L)", "c", "W2 last 25% (MC)", "W2 end (exact)"],
                   [[sc, s, v["eta"], (float(limit_factors[0]) if c == "limit" else c), v["mc_floor"], v["exact_end"]]
                    for (sc, s, c), v in summary.items()])
    table += (f"\n(rows with no Monte Carlo value: exact long-run W2 at c = {limit_factors[0]:.3g})"
              f"\nexact-draw floor for R={chains}: {floor.mean:.3g} (5-95%: {floor.q05:.3g} - {floor.q95:.3g})")

    fig = participation_figure(data, schemes, step_factors, floor, limit_factors, limits, summary, chains,
                               problem.num_clients, local_steps, alpha)
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
    from fedlangevin.fald.core.schedules import PaperDecay

    t_start = time.perf_counter()
    problem = simulation_problem(alpha, 1.0, seed=seed)
    L, m = problem.smoothness, problem.convexity
    floor = exact_draw_floor(problem, chains, seed)
    schedules = {"decay (Thm 5.8)": PaperDecay(L, m), "constant 1/(2L)": 1.0 / (2 * L)}
    gradients = {"full gradient": None}
    if batch_size is not None:
        gradients[f"minibatch b={batch_size}"] = batch_size
    rows = Rows("schedule", "gradient", "round", "step", "eta", "w2_mc", "w2_exact")
    data, slopes = {}, {}
    bar = progress_bar(len(schedules) * len(gradients), "step size", progress, leave=False)
    for gname, b in gradients.items():
        noise = None if b is None else minibatch_gradient_noise(problem, b)
        for sname, sched in schedules.items():
            mc = mc_w2_curve(problem, sched, local_steps, rounds, chains=chains, seed=seed, batch_size=b)
            steps, we = exact_centralised_curve(problem, sched, local_steps, exact_rounds, noise)
            data[(sname, gname)] = (mc, steps, we)
            for i in range(rounds):
                k = (i + 1) * local_steps
                eta = sched(k - 1) if callable(sched) else sched
                rows.add(schedule=sname, gradient=gname, round=i + 1, step=k, eta=float(eta), w2_mc=float(mc.w2[i]),
                         w2_exact=float(we[i]))
            if callable(sched):
                slopes[gname] = {f"{lo:g}-{hi:g}": loglog_slope(steps, we, lo, hi)
                                 for lo, hi in ((1e3, 1e4), (1e4, 1e5), (steps[-1] / 10, steps[-1]))}
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    rows_t = []
    for (sname, gname), (mc, st, we) in data.items():
        rows_t.append([sname, gname, float(mc.w2[0]), float(mc.w2[-max(1, rounds // 10):].mean()), float(we[rounds - 1]),
                       float(we[-1])])
    table = text_table(["schedule", "gradient", "W2 round 1 (MC)", f"W2 last 10% of {rounds} rounds (MC)",
                    f"exact, round {rounds}", f"exact, round {exact_rounds}"], rows_t)
    for gname, sl in slopes.items():
        table += f"\nexact slope of log W2 vs log k, decay, {gname}: " + ", ".join(f"k in {r}: {v:.3f}" for r, v in sl.items())
    table += f"\nThm 5.8 bound: slope -0.5. Exact-draw floor R={chains}: {floor.mean:.3g}"

    fig = step_size_figure(data, schedules, gradients, floor, alpha, local_steps, L, m, chains)
    settings = dict(alpha=alpha, local_steps=local_steps, batch_size=batch_size, rounds=rounds, exact_rounds=exact_rounds,
                    chains=chains, seed=seed, smoothness=L, convexity=m)
    return StudyResult("step_size", rows.columns, fig, table, settings, time.perf_counter() - t_start,
                       {"slopes": slopes, "floor": floor.mean,
                        "mc": {k: d[0].w2 for k, d in data.items()}, "exact": {k: d[2] for k, d in data.items()}})


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
