"""``fedlangevin simulate heterogeneity-correction``: FA-LD's heterogeneity bias and the drift corrections.

On the per-client-curvature Gaussian simulation (:class:`~fedlangevin.problems.CurvatureSimulation`,
alpha = 100: client centres far apart, client Hessians spread by ``curvature_spread``), where
FA-LD's local steps are biased (Deng et al., Fig. 1b), the study compares FA-LD with the three
corrections of :mod:`fedlangevin.corrections.drift`:

- left: W2 against rounds at K = ``local_steps``: R chains of the engine (solid) and the exact
  law of :mod:`fedlangevin.experiments.exact_drift` (dashed), with the exact-draw floor;
- right: the stationary exact W2 against K at the same step size per local step, the bias
  each variant leaves (FA-LD's grows with K; K = 1 is SGLD's discretisation bias).

The table gives the stationary W2 per K and variant and its ratio to FA-LD's.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch

from fedlangevin.experiments.curves import Curve, exact_draw_floor, mc_w2_curve, simulation_problem
from fedlangevin.experiments.exact import w2_to_target
from fedlangevin.experiments.exact_drift import corrected_moments, corrected_stationary
from fedlangevin.experiments.gaussian_plots import floor_band
from fedlangevin.experiments.report import Rows, StudyResult, progress_bar, pyplot, text_table
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.corrections.base import find_reference

__all__ = ["VARIANTS", "heterogeneity_correction_study"]

#: the variants compared: None is FA-LD
VARIANTS = (None, "control_variates", "conducive", "qlsd++")


def _label(variant) -> str:
    return "FA-LD" if variant is None else variant


def heterogeneity_correction_study(
    alpha: float = 100.0,
    curvature_spread: float = 1.5,
    local_steps: int = 10,
    step_size: float = 2e-5,
    rounds: int = 500,
    ks: Sequence[int] = (1, 2, 5, 10, 20, 50, 100),
    chains: int = 300,
    seed: int = 0,
    progress: bool | None = None,
) -> StudyResult:
    """W2 against rounds (engine and exact law) and stationary W2 against K, per variant."""
    t_start = time.perf_counter()
    problem = simulation_problem(alpha, curvature_spread, seed=seed)
    floor = exact_draw_floor(problem, chains, seed)
    rows = Rows("variant", "kind", "K", "round", "w2_mc", "w2_exact")
    curves, stationary = {}, {}
    # the reference point the engine's corrections find with their default settings (the same search)
    reference = find_reference(problem.to(device="cpu", dtype=torch.float64), None, ControlVariates().search_rounds)[0].numpy()
    bar = progress_bar(len(VARIANTS), "heterogeneity-correction", progress, leave=False)
    for variant in VARIANTS:
        mc = mc_w2_curve(problem, step_size, local_steps, rounds, chains=chains, seed=seed, correction=variant)
        ref = reference if variant in ("control_variates", "conducive") else None  # the engine's theta*
        means, covs = corrected_moments(problem, [step_size] * local_steps, rounds, variant, reference=ref)
        ex = Curve(local_steps, w2_to_target(problem, means, covs))
        curves[variant] = (mc, ex)
        for i in range(rounds):
            rows.add(variant=_label(variant), kind="curve", K=local_steps, round=i + 1, w2_mc=float(mc.w2[i]),
                     w2_exact=float(ex.w2[i]))
        for k in ks:
            m, c = corrected_stationary(problem, [step_size] * k, variant, reference=ref)
            stationary[(variant, k)] = float(w2_to_target(problem, m[None], c[None])[0])
            rows.add(variant=_label(variant), kind="stationary", K=k, w2_exact=stationary[(variant, k)])
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    header = ["K", *[f"{_label(v)} W2" for v in VARIANTS], *[f"{_label(v)} / FA-LD" for v in VARIANTS[1:]]]
    table = text_table(header, [[k, *[stationary[(v, k)] for v in VARIANTS],
                                 *[stationary[(v, k)] / stationary[(None, k)] for v in VARIANTS[1:]]] for k in ks])
    table += f"\nstationary exact W2, eta = {step_size:g} per local step; floor of R = {chains} exact draws {floor.mean:.3g}"
    fig = _figure(curves, stationary, ks, floor, alpha, curvature_spread, local_steps, step_size)
    settings = dict(alpha=alpha, curvature_spread=curvature_spread, local_steps=local_steps, step_size=step_size,
                    rounds=rounds, ks=list(ks), chains=chains, seed=seed)
    summary = {"stationary": {f"{_label(v)} K={k}": w for (v, k), w in stationary.items()}, "floor": floor.mean,
               "mc_end": {_label(v): float(mc.w2[-max(1, rounds // 10):].mean()) for v, (mc, _) in curves.items()}}
    return StudyResult("heterogeneity-correction", rows.columns, fig, table, settings,
                       time.perf_counter() - t_start, summary)


def _figure(curves, stationary, ks, floor, alpha, spread, local_steps, step_size):
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.4, 4.6))
    colors = plt.cm.tab10(np.arange(len(VARIANTS)))
    for color, variant in zip(colors, VARIANTS):
        mc, ex = curves[variant]
        left.plot(mc.rounds, mc.w2, color=color, lw=1.1, label=_label(variant))
        left.plot(ex.rounds, ex.w2, "--", color=color, lw=0.9)
        right.plot(ks, [stationary[(variant, k)] for k in ks], "o-", color=color, label=_label(variant))
    floor_band(left, floor)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    left.set_xlabel("communication rounds")
    left.set_ylabel(f"W2 to the posterior (solid: R={floor.n} chains, dashed: exact)")
    left.set_title(f"alpha={alpha:g}, curvature spread {spread:g}, K={local_steps}, eta={step_size:g}", fontsize=10)
    right.set_xlabel("local steps K")
    right.set_ylabel("stationary W2 (exact law)")
    right.set_title("bias left at stationarity, same eta per local step", fontsize=10)
    fig.tight_layout()
    return fig
