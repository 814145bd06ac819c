"""The simulation studies in which the step size varies (Deng et al., Sec. 7.1: Fig. 2; Thm 5.8).

- :func:`participation_study` (Fig. 2): full devices against partial-participation schemes I
  and II at several eta = c / L, and the exact long-run W2 as eta -> 0;
- :func:`step_size_study` (Thm 5.8): the decaying eta_k = 1/(2L + m k/12) against the constant
  eta = 1/(2L) it starts from, with full and with minibatch gradients, and the decay rate.

Both run on the paper's setup (identical client Hessians, alpha = 0) and measure as every study of
:mod:`~fedlangevin.experiments.gaussian`, where they are registered in
:data:`~fedlangevin.experiments.gaussian.STUDIES`: the W2 of R replicate chains against the
exact law of :mod:`fedlangevin.experiments.exact`, with the exact-draw floor.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from fedlangevin.experiments.curves import (
    exact_centralised_curve,
    exact_draw_floor,
    exact_w2_curve,
    loglog_slope,
    mc_w2_curve,
    simulation_problem,
)
from fedlangevin.experiments.exact import w2_to_target
from fedlangevin.experiments.gaussian_plots import participation_figure, step_size_figure
from fedlangevin.experiments.report import Rows, StudyResult, progress_bar, text_table
from fedlangevin.federation.participation import Full, Participation, SchemeI, SchemeII

__all__ = ["participation_study", "step_size_study"]


# -- Fig. 2: partial participation -----------------------------------------------------------


def participation_study(
    rules: Sequence[Participation] = (Full(), SchemeI(40, noise="paper"), SchemeII(40, noise="paper"),
                                      SchemeI(30, noise="paper"), SchemeII(30, noise="paper")),
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
    local chains are stable for c < 2). K = 100, rho = 0, paper setup: the rules' private noise is
    the paper's eq. 10 (``noise="paper"``), whose inflation under partial participation is what
    Fig. 2 shows; rules with the default ``noise="calibrated"`` remove it
    (:mod:`fedlangevin.federation.participation`).
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
    from fedlangevin.federation.schedules import PaperDecay

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

