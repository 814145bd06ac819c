"""Trace and rank plots of MCMC samples (matplotlib only; no torch, no ArviZ needed).

Both plots are drawn here rather than with ArviZ's ``plot_trace`` / ``plot_rank`` because
the two ArviZ families have different plotting stacks (0.x: matplotlib functions returning
axes; 1.x: ``arviz-plots`` ``PlotCollection`` objects): drawing them ourselves gives the
same figure whichever family is installed, and works on raw numpy samples without ArviZ.

- **Trace plot**: for every entry, the per-chain histogram of the draws (left) and the draws
  against their index (right). Chains that disagree show as shifted histograms and lines.
- **Rank plot** (Vehtari et al. 2021, Sec. 4.1, "rank plots"): all draws of an entry are
  ranked together over all chains; each chain's ranks are binned. If the chains sample the
  same distribution every chain's histogram is uniform: the dashed line is the expected
  count draws / bins and the grey band the central 99% interval of a Binomial(draws,
  1 / bins) count, a guide to what sampling noise looks like (exact for independent draws).

Both return a ``matplotlib.figure.Figure`` (no pyplot state) and save it to ``path`` when
given. Large models: at most ``max_vars`` entries and ``max_chains`` chains are drawn (the
title says so); ranks always use all chains.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from diagnostics._validation import check_int

__all__ = ["rank_plot", "trace_plot"]


def _check_positive_int(name: str, value: Any) -> int:
    return check_int(name, value, 1)


def _check_path(path: Any) -> None:
    """``path`` (a str or os.PathLike; file objects pass) must name a file: not a folder, not a
    name that is empty, "." or ".." (matplotlib would write a hidden ``.png`` there)."""
    if not isinstance(path, (str, os.PathLike)):
        return
    text = os.fsdecode(os.fspath(path))
    if os.path.isdir(text):
        raise ValueError(f"path {text!r} is a folder; give a file name such as 'trace.png'")
    if os.path.basename(text) in ("", ".", ".."):
        raise ValueError(f"path {text!r} names no file; give a file name such as 'trace.png'")


def _prepare(data: Any, var_names, max_vars: int, max_chains: int):
    from diagnostics.arviz import flatten_posterior

    max_vars = _check_positive_int("max_vars", max_vars)
    max_chains = _check_positive_int("max_chains", max_chains)
    x, labels = flatten_posterior(data, var_names)
    k, chains = x.shape[2], x.shape[0]
    note = []
    if k > max_vars:
        note.append(f"first {max_vars} of {k} entries")
    if chains > max_chains:
        note.append(f"first {max_chains} of {chains} chains")
    return x, labels[:max_vars], min(k, max_vars), min(chains, max_chains), ", ".join(note)


def _colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["tab10"] if n <= 10 else colormaps["viridis"]
    return [cmap(i if n <= 10 else i / max(n - 1, 1)) for i in range(n)]


def trace_plot(
    data: Any,
    var_names: Sequence[str] | str | None = None,
    *,
    max_vars: int = 8,
    max_chains: int = 8,
    bins: int = 30,
    path: Any = None,
):
    """Per-chain histograms and traces, one row per posterior entry.

    ``data``: samples (chains, draws, d) (numpy or torch), ArviZ data or a ``Trace``;
    ``var_names`` selects variables or entries (as in :func:`diagnostics.summary`);
    ``path``: a file to save the figure to (not a folder), or a writable file object.
    """
    from matplotlib.figure import Figure

    _check_path(path)
    bins = _check_positive_int("bins", bins)
    x, labels, k, chains, note = _prepare(data, var_names, max_vars, max_chains)
    colors = _colors(chains)
    fig = Figure(figsize=(10, 1.9 * k + 0.6), layout="constrained")
    axes = np.atleast_2d(fig.subplots(k, 2, squeeze=False, gridspec_kw={"width_ratios": [1, 2.4]}))
    draws = np.arange(x.shape[1])
    for j in range(k):
        ax_h, ax_t = axes[j]
        vals = x[:, :, j]
        edges = np.histogram_bin_edges(vals[:chains], bins=bins)
        for c in range(chains):
            ax_h.hist(vals[c], bins=edges, density=True, histtype="step", color=colors[c], linewidth=1.0)
            ax_t.plot(draws, vals[c], color=colors[c], linewidth=0.6, alpha=0.8, label=f"chain {c}")
        ax_h.set_ylabel("density")
        ax_h.set_title(labels[j], fontsize=9, loc="left")
        ax_t.set_ylabel(labels[j])
        ax_t.set_xlim(0, max(x.shape[1] - 1, 1))
        if j == k - 1:
            ax_h.set_xlabel("value")
            ax_t.set_xlabel("draw")
    if chains <= 10:
        axes[0, 1].legend(fontsize=7, ncol=min(chains, 5), loc="upper right")
    fig.suptitle(f"Trace plot: {x.shape[0]} chains x {x.shape[1]} draws" + (f" ({note})" if note else ""), fontsize=10)
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def rank_plot(
    data: Any,
    var_names: Sequence[str] | str | None = None,
    *,
    max_vars: int = 8,
    max_chains: int = 8,
    bins: int | None = None,
    path: Any = None,
):
    """Per-chain histograms of the pooled ranks (Vehtari et al. 2021), one panel per entry.

    ``bins`` defaults to min(20, draws // 5) (at least 1): about five expected ranks per bin
    and chain at least. See the module docstring for the reference line and band. ``path``:
    as in :func:`trace_plot`.
    """
    from matplotlib.figure import Figure
    from scipy.stats import binom, rankdata

    _check_path(path)
    x, labels, k, chains, note = _prepare(data, var_names, max_vars, max_chains)
    n_chain_all, draws = x.shape[0], x.shape[1]
    bins = max(1, min(20, draws // 5)) if bins is None else _check_positive_int("bins", bins)
    colors = _colors(chains)
    ncols = min(k, 2)
    nrows = int(np.ceil(k / ncols))
    fig = Figure(figsize=(5.2 * ncols, 2.6 * nrows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    total = n_chain_all * draws
    edges = np.linspace(0.0, total, bins + 1)
    expected = draws / bins
    lo, hi = binom.ppf([0.005, 0.995], draws, 1.0 / bins)
    for j in range(k):
        ax = axes[j]
        ranks = rankdata(x[:, :, j].ravel(), method="average").reshape(n_chain_all, draws)
        ax.axhspan(lo, hi, color="grey", alpha=0.25, label="99% band (uniform ranks)")
        ax.axhline(expected, color="black", linestyle="--", linewidth=1.0, label="expected count")
        for c in range(chains):
            counts, _ = np.histogram(ranks[c], bins=edges)
            ax.stairs(counts, edges, baseline=None, color=colors[c], linewidth=1.1, label=f"chain {c}")
        ax.set_title(labels[j], fontsize=9, loc="left")
        ax.set_xlabel(f"rank among all {total} draws")
        ax.set_ylabel(f"draws per bin ({bins} bins)")
        ax.set_xlim(0, total)
        ax.set_ylim(bottom=0)
    for ax in axes[k:]:
        ax.set_visible(False)
    handles, lab = axes[0].get_legend_handles_labels()
    if chains > 10:
        handles, lab = handles[:2], lab[:2]
    fig.legend(handles, lab, fontsize=7, ncol=min(len(lab), 3 * ncols), loc="outside lower center")
    fig.suptitle(
        f"Rank plot: {n_chain_all} chains x {draws} draws" + (f" ({note})" if note else ""), fontsize=10
    )
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
