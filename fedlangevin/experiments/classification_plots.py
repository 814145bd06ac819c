"""Figures of the classification study (:mod:`fedlangevin.experiments.classification`): the
test curves of the Bayesian model average against rounds (Fig. 3/4) and reliability diagrams."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from fedlangevin.experiments.report import pyplot

__all__ = ["plot_curves", "reliability_figure"]


def plot_curves(rows, path: str | Path, title: str | None = None, warmup: int | None = None) -> Path:
    """Plot the chosen runs' test curves from :meth:`ClassificationResult.curve_rows` or from
    ``<stem>_curves.csv`` files written by the study (one path or a list: e.g. FA-LD's and
    FA-HMC's of the same data set, so a figure can be redrawn without sampling again):
    accuracy, Brier and ECE of the BMA against communication rounds, one line per sampler and
    K (FA-LD solid, FA-HMC dashed, one colour per K); top row without warm-up (log axes, Fig. 3),
    bottom row after the warm-up (linear axes, Fig. 4)."""
    plt = pyplot()

    if isinstance(rows, (str, Path)):
        rows = [rows]
    if rows and all(isinstance(r, (str, Path)) for r in rows):
        read = []
        for name in rows:
            with open(name, newline="") as fh:
                read.extend(csv.DictReader(fh))
        rows = read
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        if str(row["selected"]) not in ("True", "true", "1"):
            continue
        key = (str(row.get("sampler") or "fald"), int(row["K"]))  # files written before FA-HMC joined: FA-LD
        run = runs.setdefault(key, {"eta": float(row["step_size"]), "all": [], "after_warmup": []})
        run[row["mode"]].append((int(row["round"]), *(float(row[m]) for m in ("accuracy", "brier", "ece"))))
    if not runs:
        raise ValueError("rows hold no selected run to plot")
    if warmup is None:
        warmup = int(rows[0]["warmup"]) if "warmup" in rows[0] else None
    ks = sorted({k for _, k in runs})
    colour_of = dict(zip(ks, plt.cm.viridis(np.linspace(0.0, 0.9, len(ks)))))
    styles = {"fald": ("-", "FA-LD"), "fahmc": ("--", "FA-HMC")}
    several = len({name for name, _ in runs}) > 1
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.2), sharex="row")
    labels = {"accuracy": "test accuracy", "brier": "test Brier score", "ece": "test ECE (15 bins)"}
    rows_spec = (("all", "BMA of all samples from round 0 (no warm-up, cf. Fig. 3)"),
                 ("after_warmup", "BMA of the samples after the warm-up" +
                  (f" of {warmup} rounds" if warmup is not None else "") + " (cf. Fig. 4)"))
    for row, (mode, subtitle) in enumerate(rows_spec):
        for col, metric in enumerate(("accuracy", "brier", "ece")):
            ax = axes[row, col]
            for (name, k), run in sorted(runs.items()):
                pts = np.array(sorted(run[mode]))
                style, label = styles.get(name, (":", name))
                if pts.size:
                    ax.plot(pts[:, 0], pts[:, 1 + col], style, color=colour_of[k],
                            label=(f"{label} " if several else "") + f"K = {k} (eta = {run['eta']:.2g})")
            ax.set_xlabel("communication rounds" + (" (log)" if mode == "all" else ""))
            ax.set_ylabel(labels[metric])
            if mode == "all":
                ax.set_xscale("log")
            if metric != "accuracy" and mode == "all":
                ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
            ax.set_title(subtitle if col == 1 else "", fontsize=10)
        axes[row, 0].legend(fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def reliability_figure(rel: dict[str, Any], dataset: str, n_bins: int, path: str | Path) -> Path:
    """Reliability diagrams on the test set, one panel per predictor of ``rel["probs"]``
    ({name: (n, C) probabilities}) against ``rel["labels"]``, with ``n_bins`` equal-width bins."""
    from diagnostics import calibration_bins

    plt = pyplot()
    fig, axes = plt.subplots(1, len(rel["probs"]), figsize=(4.6 * len(rel["probs"]), 4.6), sharey=True)
    for ax, (name, probs) in zip(np.atleast_1d(axes), rel["probs"].items()):
        bins = calibration_bins(probs, rel["labels"], n_bins)
        nz = bins.counts > 0
        left, width = bins.edges[:-1][nz], np.diff(bins.edges)[nz]
        acc_b, conf_b = bins.accuracy[nz], bins.confidence[nz]
        ax.bar(left, acc_b, width=width, align="edge", color="#4c72b0", edgecolor="black",
               linewidth=0.5, label="accuracy in bin")
        over = acc_b < conf_b
        ax.bar(left[over], (conf_b - acc_b)[over], bottom=acc_b[over], width=width[over], align="edge",
               color="#dd8452", alpha=0.5, edgecolor="#c44e52", linewidth=0.5, hatch="//",
               label="over-confident gap")
        ax.bar(left[~over], (acc_b - conf_b)[~over], bottom=conf_b[~over], width=width[~over], align="edge",
               color="white", alpha=0.6, edgecolor="#8172b3", linewidth=0.5, hatch="\\\\",
               label="under-confident gap")
        for xl, w, a, c in zip(left, width, acc_b, bins.counts[nz]):
            ax.text(xl + w / 2, min(a, 0.97) + 0.01, str(int(c)), ha="center", va="bottom", fontsize=6)
        ax.plot([0, 1], [0, 1], "k--", linewidth=1, label="perfect calibration")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("confidence (top-class probability)")
        acc = float(np.mean(np.argmax(probs, 1) == rel["labels"]))
        ax.set_title(f"{name}\nacc {acc:.4f}, ECE {bins.ece:.4f}", fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel("accuracy")
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{dataset} test set, {n_bins} equal-width bins (numbers: test points per bin), "
                 "chain 0", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
