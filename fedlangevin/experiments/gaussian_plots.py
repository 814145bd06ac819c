"""The figures of the simulation study (:mod:`fedlangevin.experiments.gaussian`), one function
per study: each takes the study's computed curves and returns a matplotlib figure."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from fedlangevin.experiments.report import pyplot

__all__ = [
    "correlation_figure", "density_figure", "density_panels", "floor_band", "heterogeneity_figure", "k_figure",
    "participation_figure", "step_size_figure",
]


def floor_band(ax, floor, label=True) -> None:
    """The 5-95% band of the exact-draw floor (:func:`~fedlangevin.experiments.curves.exact_draw_floor`)."""
    ax.axhspan(floor.q05, floor.q95, color="grey", alpha=0.22, lw=0,
               label=f"exact-draw floor, R={floor.n} (5-95%)" if label else None)


def k_figure(results, paper_exact, curves, exact_curves, floor, eps, eta, spread, curve_alpha):
    """Fig. 1a: rounds to W2 <= eps against K per alpha, and the W2 curves behind the points."""
    plt = pyplot()
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
        floor_band(ax, floor)
        ax.axhline(eps, color="red", lw=0.8, ls="-.", label=f"eps={eps:g}")
        ax.set_yscale("log")
        ax.set_xlabel("local steps k (= rounds x K)")
        ax.set_ylabel("W2 to the exact posterior")
        ax.set_title(f"the W2 curves behind the points, alpha={curve_alpha:g} (dashed: exact)", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def heterogeneity_figure(data, setups, alphas, floors, local_steps, step_size):
    """Fig. 1b: W2 against rounds per alpha; one panel per setup (paper, per-client curvature)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(setups), figsize=(6.2 * len(setups), 4.5), squeeze=False, sharey=True)
    for ax, (label, spread) in zip(axes[0], setups):
        colors = plt.cm.viridis(np.linspace(0, 0.9, len(alphas)))
        for c, alpha in zip(colors, alphas):
            mc, ex, gamma = data[(label, alpha)]
            ax.plot(mc.rounds, mc.w2, color=c, lw=1.1, label=f"alpha={alpha:g} (gamma={gamma:.2g})")
            ax.plot(ex.rounds, ex.w2, "--", color=c, lw=0.9)
        floor_band(ax, floors[label])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("communication rounds")
        ax.set_title(f"Fig. 1b: {label}" + (f" (spread {spread:g})" if spread > 1 else "")
                     + f", K={local_steps}, eta={step_size:g}", fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    axes[0, 0].set_ylabel("W2 to the exact posterior (solid: R=300, dashed: exact)")
    fig.tight_layout()
    return fig


def correlation_figure(data, correlations, floor, alpha, local_steps, step_size, curvature_spread):
    """Fig. 1c: W2 against rounds per rho."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    colors = plt.cm.coolwarm(np.linspace(0, 1, len(correlations)))
    for c, rho in zip(colors, correlations):
        mc, ex = data[rho]
        ax.plot(mc.rounds, mc.w2, color=c, lw=1.1, label=f"rho={rho:g}")
        ax.plot(ex.rounds, ex.w2, "--", color=c, lw=0.9)
    floor_band(ax, floor)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("communication rounds")
    ax.set_ylabel("W2 to the exact posterior (solid: R=300, dashed: exact)")
    setup = "paper setup" if curvature_spread == 1 else f"per-client curvature {curvature_spread:g}"
    ax.set_title(f"Fig. 1c: correlated noise, {setup}, alpha={alpha:g}, K={local_steps}, eta={step_size:g}", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


def density_figure(mean, cov, x, local_steps):
    """Fig. 1d/1e: exact density beside the KDE of the draws ``x`` (M, 2)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.5))
    density_panels(axes, mean, cov, x, ("Fig. 1d: true posterior density",
                                        f"Fig. 1e: empirical density (K={local_steps}, {x.shape[0]} draws)"))
    fig.tight_layout()
    return fig


def participation_figure(data, schemes, step_factors, floor, limit_factors, limits, summary, chains, num_clients, local_steps, alpha):
    """Fig. 2: one panel per (scheme, S) with W2 against rounds per eta, and the long-run bias against eta."""
    plt = pyplot()
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
        floor_band(ax, floor, label=i == 0)
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
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    marks, handles = iter("os^vDP"), []
    for scheme, s in schemes:
        name = "full" if scheme == "full" else f"{scheme}, S={s}"
        mark = next(marks)
        line, = ax.plot(limit_factors, limits[(scheme, s)], "-", lw=1.1)
        mc = [summary[(scheme, s, c)]["mc_floor"] for c in step_factors]
        ax.plot(step_factors, mc, mark, color=line.get_color(), ms=5, ls="")
        handles.append(Line2D([], [], color=line.get_color(), marker=mark, ms=5, lw=1.1, label=name))
    floor_band(ax, floor)
    handles.append(Patch(color="grey", alpha=0.22, lw=0, label=f"exact-draw floor, R={floor.n} (5-95%)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("eta x L")
    ax.set_ylim(top=ax.get_ylim()[1] * 40)  # room for the legend above the curves
    ax.set_ylabel("long-run W2 to the exact posterior")
    ax.set_title(f"({letters[len(schemes)]}) bias against step size", fontsize=10)
    ax.legend(handles=handles, fontsize=7, loc="upper center", ncol=2,
              title=f"line: exact; marker: R={chains}, mean of the last 25% of rounds", title_fontsize=7)
    for extra in flat[len(schemes) + 1 :]:
        extra.axis("off")
    fig.suptitle(f"Fig. 2: device participation, N={num_clients}, K={local_steps}, alpha={alpha:g}", fontsize=10)
    fig.tight_layout()
    return fig


def step_size_figure(data, schedules, gradients, floor, alpha, local_steps, L, m, chains):
    """Thm 5.8: W2 against local steps per schedule and gradient, with reference slopes."""
    plt = pyplot()
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
    floor_band(ax, floor)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("local steps k")
    ax.set_ylabel(f"W2 to the exact posterior (solid: R={chains}, dashed: exact)")
    ax.set_title(f"Thm 5.8: varying step size, alpha={alpha:g}, K={local_steps}, L={L:.4g}, m={m:.3g}", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def density_panels(axes, mean, cov, draws, titles: Sequence[str], points: int = 140) -> None:
    """Fig. 1d/1e on two matplotlib axes: the exact density N(mean, cov) and a Gaussian KDE of
    ``draws`` (M, 2), as filled contours with the same levels, on a +-4 sd grid around ``mean``."""
    from scipy.stats import gaussian_kde, multivariate_normal

    half = 4 * np.sqrt(np.diag(cov))
    gx = np.linspace(mean[0] - half[0], mean[0] + half[0], points)
    gy = np.linspace(mean[1] - half[1], mean[1] + half[1], points)
    xx, yy = np.meshgrid(gx, gy)
    pts = np.stack([xx.ravel(), yy.ravel()], 1)
    true = multivariate_normal(mean, cov).pdf(pts).reshape(xx.shape)
    emp = gaussian_kde(np.asarray(draws).T)(pts.T).reshape(xx.shape)
    levels = np.linspace(0, max(true.max(), emp.max()), 12)[1:]
    for ax, z, title in zip(axes, (true, emp), titles):
        cs = ax.contourf(xx, yy, z, levels=levels, cmap="viridis")
        ax.set_xlabel("theta[0]")
        ax.set_ylabel("theta[1]")
        ax.set_title(title, fontsize=10)
        ax.figure.colorbar(cs, ax=ax, fraction=0.046, label="density")
