"""Bayesian logistic regression on real images with FA-LD: Deng et al., Sec. 7.2 (Fig. 3 and 4).

The study. A data set with a held-out test split (``digits``, ``mnist5k``, or the user's
MNIST-format files) is split into N clients (the paper: iid, N = 10); a validation set is
carved from the *training* data first and held out of every client. For each number of local
steps K (the paper: 1, 10, 20, 50, 100), FA-LD samples the posterior of a multinomial
logistic regression (:class:`~fedlangevin.problems.LogisticRegression`, prior N(0, sigma^2 I))
at temperature tau = 0.05 with minibatch gradients (the paper: 200 points per client), for the
same number of communication rounds, with several step sizes eta. One sample is kept every 10
rounds and the Bayesian model average (BMA) of all samples so far — the mean of their
predicted probabilities (:class:`diagnostics.PosteriorPredictive`) — is scored by accuracy,
Brier score and ECE (:func:`diagnostics.brier`, :func:`diagnostics.ece`) on the test set
after every sample: once averaging every sample from the start (Fig. 3) and once leaving
out the samples of a warm-up period (Fig. 4; the paper: 500 rounds).

Step size. For each K, eta is chosen by the validation score (default: the NLL of the
after-warm-up BMA at the last round, mean over chains); the test set is never used for the
choice, and the reported test curves are those of the chosen runs. The candidates form a
ladder of factors times 1/L (L = ``problem.smoothness``); ``search="grid"`` runs every
candidate, ``search="ladder"`` (default, for CPU budgets) walks the ladder: the first K
starts at ``eta_start``, every later K at the previous K's choice, tries one rung down, and
keeps stepping in the direction that improves the validation score until it stops improving
(so each K costs at least three runs, and the choice is a local optimum on the ladder).

Point estimates. Beside the BMA, the study scores single parameter vectors on the same test
set: the last FA-LD sample, the plug-in of the posterior mean (mean of the after-warm-up
samples) and the MAP (:meth:`LogisticRegression.mode`, full-batch L-BFGS on pooled data —
a centralised reference).

Use :func:`run_classification` from Python or ``fedlangevin simulate classification`` from
the shell; both write the curves as CSV and the figures as PNG.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.data.splits import SPLITS

__all__ = [
    "ClassificationSettings",
    "ClassificationResult",
    "RunRecord",
    "DATASET_DEFAULTS",
    "METRICS",
    "paired_bootstrap",
    "plot_curves",
    "run_classification",
    "cli_configure",
    "cli_run",
]

#: the paper's numbers of local steps (Sec. 7.2)
PAPER_LOCAL_STEPS = (1, 10, 20, 50, 100)

#: test statistics of the curves (accuracy: higher is better; the others: lower is better)
METRICS = ("accuracy", "brier", "ece", "nll")
_TUNE_METRICS = ("nll", "brier", "accuracy", "ece")

#: per data set defaults of the settings left as ``None``, sized for a CPU: with one thread on
#: 2 cores, digits took 13 minutes (machine under load) and mnist5k 14 minutes (machine idle);
#: docs/classification.md reports both runs.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "digits": dict(batch_size=50, rounds=1000, warmup=200, chains=2),
    "mnist5k": dict(batch_size=200, rounds=500, warmup=100, chains=1),
}
_GENERIC_DEFAULTS = dict(batch_size=200, rounds=500, warmup=100, chains=1)

#: default ladder of step sizes, as multiples of 1/L
ETA_FACTORS = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)


@dataclass(frozen=True)
class ClassificationSettings:
    """Settings of the study (``None``: the data set's default in :data:`DATASET_DEFAULTS`).

    Parameters
    ----------
    dataset : ``"digits"``, ``"mnist5k"``, a folder with the four MNIST-format IDX files, or
        an ``.npz`` file (see :func:`fedlangevin.data.load_dataset`).
    local_steps : the values of K compared (the paper: 1, 10, 20, 50, 100).
    rounds : communication rounds per run (the same for every K: an equal budget).
    warmup : rounds whose samples the "with warm-up" average leaves out (the paper: 500).
    thin : keep one sample every ``thin`` rounds (the paper: 10).
    temperature : tau (the paper: 0.05).
    num_clients, split : N clients and the split (``"iid"``, ``"label_skew"`` with
        ``classes_per_client``, ``"dirichlet"`` with ``dirichlet_alpha``).
    batch_size : minibatch per client and local step (the paper: 200; at most the smallest
        client's size).
    prior_scale : sigma of the N(0, sigma^2 I) prior.
    eta_factors : the candidate step sizes as multiples of 1/L, L = ``problem.smoothness``
        (an upper bound on the clients' smoothness, so usable steps are larger than 1/L);
        ``step_sizes`` gives the candidates as absolute values instead.
    search : ``"ladder"`` (walk the sorted candidates from ``eta_start``, see the module
        docstring) or ``"grid"`` (run every candidate for every K).
    eta_start : the candidate (a factor, or an absolute step with ``step_sizes``) the ladder
        starts from for the first K (default: 16 with the default factors, else the middle).
    tune_metric : validation score that picks eta per K (``"nll"``, ``"brier"``,
        ``"accuracy"``, ``"ece"``), of the after-warm-up BMA at the last round.
    validation_fraction : share of each class of the training data held out for tuning.
    test_fraction : test share for the bundled data sets (files bring their own test split).
    chains : independent chains per run (curves are chain means).
    seed : seeds the data split, the validation split and the sampler.
    dtype : ``"float32"`` (default, about 2x faster on CPU) or ``"float64"``.
    n_bins : ECE bins (equal width, Guo et al. 2017).
    """

    dataset: str = "digits"
    local_steps: tuple[int, ...] = PAPER_LOCAL_STEPS
    rounds: int | None = None
    warmup: int | None = None
    thin: int = 10
    temperature: float = 0.05
    num_clients: int = 10
    split: str = "iid"
    classes_per_client: int = 2
    dirichlet_alpha: float = 0.5
    batch_size: int | None = None
    prior_scale: float = 1.0
    eta_factors: tuple[float, ...] = ETA_FACTORS
    step_sizes: tuple[float, ...] | None = None
    search: str = "ladder"
    eta_start: float | None = None
    tune_metric: str = "nll"
    validation_fraction: float = 0.15
    test_fraction: float = 0.2
    chains: int | None = None
    seed: int = 0
    dtype: str = "float32"
    n_bins: int = 15

    def resolved(self) -> "ClassificationSettings":
        """Fill the ``None`` fields from the data set's defaults and validate everything."""
        defaults = DATASET_DEFAULTS.get(self.dataset, _GENERIC_DEFAULTS)
        s = replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})
        ks = tuple(check_int("local_steps", k, 1) for k in s.local_steps)
        if not ks or len(set(ks)) != len(ks):
            raise ValueError(f"local_steps must be a non-empty list of distinct integers >= 1; got {s.local_steps}")
        rounds = check_int("rounds", s.rounds, 1)
        thin = check_int("thin", s.thin, 1, rounds)
        warmup = check_int("warmup", s.warmup, 0, rounds - thin)
        check_real("temperature", s.temperature, low=0.0, low_open=True)
        check_int("num_clients", s.num_clients, 1)
        if s.split not in ("iid", "label_skew", "dirichlet"):
            raise ValueError(f"split must be one of iid, label_skew, dirichlet; got {s.split!r}")
        check_int("classes_per_client", s.classes_per_client, 1)
        check_real("dirichlet_alpha", s.dirichlet_alpha, low=0.0, low_open=True)
        if s.batch_size is not None:
            check_int("batch_size", s.batch_size, 1)
        check_real("prior_scale", s.prior_scale, low=0.0, low_open=True)
        name, values = ("step_sizes", s.step_sizes) if s.step_sizes is not None else ("eta_factors", s.eta_factors)
        grid = tuple(sorted({check_real(name, e, low=0.0, low_open=True) for e in values}))
        if not grid:
            raise ValueError(f"{name} must hold at least one value")
        s = replace(s, **{name: grid})
        if s.search not in ("ladder", "grid"):
            raise ValueError(f"search must be 'ladder' or 'grid'; got {s.search!r}")
        if s.eta_start is None:
            start = 16.0 if s.step_sizes is None and 16.0 in grid else grid[(len(grid) - 1) // 2]
            s = replace(s, eta_start=start)
        elif s.eta_start not in grid:
            raise ValueError(f"eta_start must be one of the {name} {list(grid)}; got {s.eta_start!r}")
        if s.tune_metric not in _TUNE_METRICS:
            raise ValueError(f"tune_metric must be one of {', '.join(_TUNE_METRICS)}; got {s.tune_metric!r}")
        check_real("validation_fraction", s.validation_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
        check_real("test_fraction", s.test_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
        check_int("chains", s.chains, 1)
        check_int("seed", s.seed, 0)
        if s.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64'; got {s.dtype!r}")
        check_int("n_bins", s.n_bins, 1)
        return replace(s, local_steps=ks, rounds=rounds, thin=thin, warmup=warmup)


@dataclass
class RunRecord:
    """One FA-LD run (one K, one eta, all chains).

    ``draw_rounds`` (D,): the rounds of the kept samples. ``test_curves[mode][metric]`` is a
    (chains, D) array of the test score of the BMA after each sample, for ``mode`` ``"all"``
    (every sample from the start, Fig. 3) and ``"after_warmup"`` (NaN until the first sample
    after the warm-up, Fig. 4). ``validation[metric]``: per-chain scores of the final
    after-warm-up BMA on the validation set. ``point[name][metric]``: per-chain test scores of
    the single-parameter predictors ``"last_draw"`` and ``"posterior_mean"``.
    """

    local_steps: int
    step_size: float
    factor: float | None
    diverged: bool
    seconds: float
    draw_rounds: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    test_curves: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    validation: dict[str, np.ndarray] = field(default_factory=dict)
    point: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    message: str = ""
    selected: bool = False

    def final(self, mode: str = "after_warmup") -> dict[str, float]:
        """Chain-mean test scores of the BMA at the last round."""
        return {m: float(np.mean(self.test_curves[mode][m][:, -1])) for m in METRICS}

    def validation_score(self, metric: str) -> float:
        return float(np.mean(self.validation[metric]))


@dataclass
class ClassificationResult:
    """What :func:`run_classification` returns: settings, data summary, every run, the eta
    chosen per K, and the MAP's test scores."""

    settings: ClassificationSettings
    dataset: str
    sizes: dict[str, int]
    smoothness: float
    runs: list[RunRecord]
    chosen: dict[int, RunRecord]
    map_scores: dict[str, float]
    seconds: float
    #: per K: ECE(BMA) - ECE(MAP) and ECE(BMA) - ECE(single sample) on the test set (chain 0)
    #: with 90% paired-bootstrap intervals over test points
    bootstrap: dict[int, dict[str, float]] = field(default_factory=dict)
    #: test-set probabilities behind the reliability figure ({"labels", "probs": {name: (n, C)}})
    reliability: dict[str, Any] | None = field(default=None, repr=False)

    # -- tables -------------------------------------------------------------------------------
    def final_rows(self) -> list[dict[str, Any]]:
        """One row per K: chosen eta and the final test scores of the BMA (with and without
        warm-up) and of the single-parameter predictors (chain means)."""
        rows = []
        for k in self.settings.local_steps:
            run = self.chosen.get(k)
            if run is None:
                rows.append({"dataset": self.dataset, "K": k, "step_size": float("nan"), "status": "all step sizes diverged"})
                continue
            row: dict[str, Any] = {"dataset": self.dataset, "K": k, "step_size": run.step_size,
                                   "eta_factor": run.factor, "status": "ok"}
            for mode, tag in (("after_warmup", "bma"), ("all", "bma_nowarmup")):
                for m, v in run.final(mode).items():
                    row[f"{tag}_{m}"] = v
            for name in ("single_draw", "posterior_mean", "last_draw"):
                for m in METRICS:
                    row[f"{name}_{m}"] = float(np.mean(run.point[name][m]))
            for key, value in self.bootstrap.get(k, {}).items():
                row[key] = value
            rows.append(row)
        return rows

    def tuning_rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            row: dict[str, Any] = {"dataset": self.dataset, "K": run.local_steps, "step_size": run.step_size,
                                   "eta_factor": run.factor, "diverged": run.diverged, "selected": run.selected,
                                   "seconds": round(run.seconds, 2)}
            for m in METRICS:
                row[f"val_{m}"] = run.validation_score(m) if not run.diverged else float("nan")
            for m in METRICS:
                row[f"test_{m}"] = run.final()[m] if not run.diverged else float("nan")
            rows.append(row)
        return rows

    def curve_rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            if run.diverged:
                continue
            for mode in ("all", "after_warmup"):
                curves = run.test_curves[mode]
                for j, r in enumerate(run.draw_rounds):
                    if mode == "after_warmup" and r <= self.settings.warmup:
                        continue
                    row: dict[str, Any] = {"dataset": self.dataset, "K": run.local_steps, "step_size": run.step_size,
                                           "selected": run.selected, "mode": mode, "warmup": self.settings.warmup,
                                           "round": int(r)}
                    for m in METRICS:
                        row[m] = float(np.mean(curves[m][:, j]))
                    rows.append(row)
        return rows

    def table(self) -> str:
        """Plain-text summary: chosen eta and final test scores per K, then the MAP."""
        s = self.settings
        head = (f"{self.dataset}: n_train={self.sizes['train']} (N={s.num_clients} {s.split} clients), "
                f"n_val={self.sizes['validation']}, n_test={self.sizes['test']}, d={self.sizes['dim']}, "
                f"tau={s.temperature:g}, batch={s.batch_size}, {s.rounds} rounds, warm-up {s.warmup}, "
                f"one sample / {s.thin} rounds, {s.chains} chain(s), eta chosen by validation {s.tune_metric}")
        cols = (f"{'K':>4} {'eta':>9} | {'acc':>6} {'Brier':>6} {'ECE':>6} {'NLL':>6} | {'acc':>6} {'Brier':>6} "
                f"{'ECE':>6} | {'acc':>6} {'Brier':>6} {'ECE':>6} {'NLL':>6} | {'acc':>6} {'ECE':>6} | {'ECE(BMA) - ECE(MAP)':>27}")
        top = (f"{'':>4} {'':>9} | {'BMA after warm-up':<27} | {'BMA, no warm-up':<20} | "
               f"{'one sample (mean over samples)':<27} | {'post. mean':<13} | {'test, 90% paired bootstrap':>27}")
        lines = [head, "", top, cols, "-" * len(cols)]
        for row in self.final_rows():
            if row["status"] != "ok":
                lines.append(f"{row['K']:>4} {'-':>9} | {row['status']}")
                continue
            boot = ""
            if "ece_bma_minus_map" in row:
                boot = (f"{row['ece_bma_minus_map']:+.4f} [{row['ece_bma_minus_map_lo90']:+.4f}, "
                        f"{row['ece_bma_minus_map_hi90']:+.4f}]")
            lines.append(
                f"{row['K']:>4} {row['step_size']:>9.3g} | {row['bma_accuracy']:>6.4f} {row['bma_brier']:>6.4f} "
                f"{row['bma_ece']:>6.4f} {row['bma_nll']:>6.4f} | {row['bma_nowarmup_accuracy']:>6.4f} "
                f"{row['bma_nowarmup_brier']:>6.4f} {row['bma_nowarmup_ece']:>6.4f} | "
                f"{row['single_draw_accuracy']:>6.4f} {row['single_draw_brier']:>6.4f} {row['single_draw_ece']:>6.4f} "
                f"{row['single_draw_nll']:>6.4f} | {row['posterior_mean_accuracy']:>6.4f} "
                f"{row['posterior_mean_ece']:>6.4f} | {boot:>27}"
            )
        m = self.map_scores
        lines.append(f"MAP (L-BFGS, pooled data): acc {m['accuracy']:.4f}, Brier {m['brier']:.4f}, "
                     f"ECE {m['ece']:.4f}, NLL {m['nll']:.4f}")
        lines.append(f"total time {self.seconds:.0f} s")
        return "\n".join(lines)

    # -- files --------------------------------------------------------------------------------
    def write(self, out: str | Path) -> list[Path]:
        """Write ``<dataset>_{final,tuning,curves}.csv``, ``<dataset>_curves.png`` and
        ``<dataset>_reliability.png`` into ``out``; returns the paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        stem = _slug(self.dataset)
        paths = []
        for name, rows in (("final", self.final_rows()), ("tuning", self.tuning_rows()), ("curves", self.curve_rows())):
            path = out / f"{stem}_{name}.csv"
            _write_csv(path, rows)
            paths.append(path)
        paths.append(self.curves_figure(out / f"{stem}_curves.png"))
        if self.reliability is not None:
            paths.append(self.reliability_figure(out / f"{stem}_reliability.png"))
        return paths

    def curves_figure(self, path: str | Path) -> Path:
        """Accuracy, Brier and ECE of the test BMA against communication rounds, one line per K
        (its chosen eta): top row without warm-up (Fig. 3), bottom row with (Fig. 4)."""
        s = self.settings
        title = (f"FA-LD, Bayesian logistic regression on {self.dataset}: N = {s.num_clients} {s.split} clients, "
                 f"tau = {s.temperature:g}, batch {s.batch_size}/client, one sample every {s.thin} rounds, "
                 f"{s.chains} chain(s), eta tuned per K on validation {s.tune_metric}")
        return plot_curves(self.curve_rows(), path, title=title, warmup=s.warmup)

    def reliability_figure(self, path: str | Path) -> Path:
        """Reliability diagrams on the test set: the after-warm-up BMA of the K with the best
        validation score, its posterior-mean plug-in, and the MAP."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from diagnostics import calibration_bins

        rel = self.reliability
        fig, axes = plt.subplots(1, len(rel["probs"]), figsize=(4.6 * len(rel["probs"]), 4.6), sharey=True)
        for ax, (name, probs) in zip(np.atleast_1d(axes), rel["probs"].items()):
            bins = calibration_bins(probs, rel["labels"], self.settings.n_bins)
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
        fig.suptitle(f"{self.dataset} test set, {self.settings.n_bins} equal-width bins (numbers: test points per bin), "
                     "chain 0", fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return Path(path)


def plot_curves(rows, path: str | Path, title: str | None = None, warmup: int | None = None) -> Path:
    """Plot the chosen runs' test curves from :meth:`ClassificationResult.curve_rows` or from a
    ``<dataset>_curves.csv`` file written by the study (so a figure can be redrawn without
    sampling again): accuracy, Brier and ECE of the BMA against communication rounds, one line
    per K; top row without warm-up (log axes, Fig. 3), bottom row after the warm-up (linear
    axes, Fig. 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(rows, (str, Path)):
        with open(rows, newline="") as fh:
            rows = list(csv.DictReader(fh))
    runs: dict[int, dict[str, Any]] = {}
    for row in rows:
        if str(row["selected"]) not in ("True", "true", "1"):
            continue
        k = int(row["K"])
        run = runs.setdefault(k, {"eta": float(row["step_size"]), "all": [], "after_warmup": []})
        run[row["mode"]].append((int(row["round"]), *(float(row[m]) for m in ("accuracy", "brier", "ece"))))
    if not runs:
        raise ValueError("rows hold no selected run to plot")
    if warmup is None:
        warmup = int(rows[0]["warmup"]) if "warmup" in rows[0] else None
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.2), sharex="row")
    labels = {"accuracy": "test accuracy", "brier": "test Brier score", "ece": "test ECE (15 bins)"}
    colors = plt.cm.viridis(np.linspace(0.0, 0.9, len(runs)))
    rows_spec = (("all", "BMA of all samples from round 0 (no warm-up, cf. Fig. 3)"),
                 ("after_warmup", "BMA of the samples after the warm-up" +
                  (f" of {warmup} rounds" if warmup is not None else "") + " (cf. Fig. 4)"))
    for row, (mode, subtitle) in enumerate(rows_spec):
        for col, metric in enumerate(("accuracy", "brier", "ece")):
            ax = axes[row, col]
            for color, k in zip(colors, sorted(runs)):
                pts = np.array(sorted(runs[k][mode]))
                if pts.size:
                    ax.plot(pts[:, 0], pts[:, 1 + col], color=color, label=f"K = {k} (eta = {runs[k]['eta']:.2g})")
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


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in Path(name).name) or "data"


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


# -- scoring -------------------------------------------------------------------------------------


def _scores(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> dict[str, float]:
    import diagnostics

    return {
        "accuracy": float(np.mean(np.argmax(probs, axis=1) == labels)),
        "brier": diagnostics.brier(probs, labels),
        "ece": diagnostics.ece(probs, labels, n_bins),
        "nll": diagnostics.nll(probs, labels),
    }


def _metric_function(metric: str, n_bins: int):
    import diagnostics

    if metric == "accuracy":
        return lambda p, y: float(np.mean(np.argmax(p, axis=1) == y))
    if metric == "ece":
        return lambda p, y: diagnostics.ece(p, y, n_bins)
    if metric in ("brier", "nll"):
        return getattr(diagnostics, metric)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")


def _probs(problem, theta: torch.Tensor, X: torch.Tensor) -> np.ndarray:
    """Per-draw class probabilities (..., n, C) as float64 numpy."""
    return problem.predict_proba(theta.double(), X.double()).numpy()


def _curves(problem, samples: torch.Tensor, draw_rounds: np.ndarray, warmup: int, X, y, n_bins: int):
    """BMA scores after every kept sample, per chain: {mode: {metric: (chains, D)}}."""
    from diagnostics import PosteriorPredictive

    chains, draws = samples.shape[:2]
    labels = y.numpy()
    out = {mode: {m: np.full((chains, draws), np.nan) for m in METRICS} for mode in ("all", "after_warmup")}
    for r in range(chains):
        probs = _probs(problem, samples[r], X)  # (D, n, C)
        bma = {"all": PosteriorPredictive(), "after_warmup": PosteriorPredictive()}
        for j in range(draws):
            for mode, pp in bma.items():
                if mode == "after_warmup" and draw_rounds[j] <= warmup:
                    continue
                pp.update(probs[j])
                for m, v in _scores(pp.probs, labels, n_bins).items():
                    out[mode][m][r, j] = v
    return out


def _final_validation(problem, samples, draw_rounds, warmup, X, y, n_bins) -> dict[str, np.ndarray]:
    from diagnostics import posterior_predictive

    keep = draw_rounds > warmup
    labels = y.numpy()
    per_chain = [_scores(posterior_predictive(_probs(problem, samples[r, keep], X)), labels, n_bins)
                 for r in range(samples.shape[0])]
    return {m: np.array([s[m] for s in per_chain]) for m in METRICS}


def _point_scores(problem, samples, draw_rounds, warmup, X, y, n_bins) -> dict[str, dict[str, np.ndarray]]:
    """Per-chain test scores of single parameter vectors: the last sample, the posterior-mean
    plug-in, and a single sample's predictive averaged over the after-warm-up samples."""
    keep = draw_rounds > warmup
    labels = y.numpy()
    out = {}
    for name, theta in (("last_draw", samples[:, -1]), ("posterior_mean", samples[:, keep].mean(1))):
        per_chain = [_scores(_probs(problem, theta[r], X), labels, n_bins) for r in range(samples.shape[0])]
        out[name] = {m: np.array([s[m] for s in per_chain]) for m in METRICS}
    single = np.zeros((samples.shape[0], len(METRICS)))
    for r in range(samples.shape[0]):
        probs = _probs(problem, samples[r, keep], X)
        single[r] = np.mean([[_scores(p, labels, n_bins)[m] for m in METRICS] for p in probs], axis=0)
    out["single_draw"] = {m: single[:, i] for i, m in enumerate(METRICS)}
    return out


def paired_bootstrap(probs_a, probs_b, labels, metric: str = "ece", n_bins: int = 15, repeats: int = 1000,
                     level: float = 0.9, seed: int = 0) -> tuple[float, float, float]:
    """metric(a) - metric(b) on the same test points, with a paired bootstrap interval.

    Test points are resampled with replacement ``repeats`` times (the same indices for both
    predictors); returns (difference on the full set, lower, upper) at the central ``level``.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    rng = np.random.default_rng(seed)
    score = _metric_function(metric, n_bins)
    full = score(probs_a, labels) - score(probs_b, labels)
    diffs = np.empty(repeats)
    for i in range(repeats):
        idx = rng.integers(0, n, n)
        diffs[i] = score(probs_a[idx], labels[idx]) - score(probs_b[idx], labels[idx])
    lo, hi = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    return float(full), float(lo), float(hi)


# -- the study -------------------------------------------------------------------------------------


def _progress(total: int, enabled: bool | None, desc: str):
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", mininterval=1.0)


def run_classification(
    settings: ClassificationSettings | None = None,
    *,
    progress: bool | None = None,
    log=None,
    **overrides: Any,
) -> ClassificationResult:
    """Run the study (see the module docstring); keyword arguments override ``settings``.

    ``progress``: a progress bar over all local steps on stderr (default: only on a TTY);
    ``log``: a callable receiving one line per finished run (e.g. ``print``).
    """
    import fedlangevin as fl
    from fedlangevin.data import load_dataset, make_partition
    from fedlangevin.problems import LogisticRegression

    t_start = time.perf_counter()
    settings = replace(settings or ClassificationSettings(), **overrides).resolved()
    s = settings
    data = load_dataset(s.dataset, test_fraction=s.test_fraction, seed=s.seed)
    train, (X_val, y_val) = data.validation_split(s.validation_fraction, seed=s.seed)
    parts = make_partition(s.split, train.y_train, s.num_clients, torch.Generator().manual_seed(s.seed),
                           classes_per_client=s.classes_per_client, alpha=s.dirichlet_alpha,
                           min_size=s.batch_size or 1)
    problem = LogisticRegression.from_partition(train.X_train, train.y_train, parts,
                                                num_classes=data.num_classes, prior_scale=s.prior_scale)
    smallest = int(problem.client_sizes.min())
    if s.batch_size is not None and s.batch_size > smallest:
        raise ValueError(f"batch_size={s.batch_size} is larger than the smallest client ({smallest} points); "
                         f"choose batch_size <= {smallest}")
    scoring = problem.to(dtype=torch.float64)
    L = problem.smoothness
    if s.step_sizes is not None:
        candidates = [(eta, None) for eta in s.step_sizes]
        start = s.step_sizes.index(s.eta_start)
    else:
        candidates = [(f / L, f) for f in s.eta_factors]
        start = s.eta_factors.index(s.eta_start)
    dtype = torch.float32 if s.dtype == "float32" else torch.float64
    sign = -1.0 if s.tune_metric == "accuracy" else 1.0

    runs: list[RunRecord] = []
    samples_of: dict[int, torch.Tensor] = {}
    chosen: dict[int, RunRecord] = {}
    expected = (len(candidates) if s.search == "grid" else min(3, len(candidates))) * s.rounds * sum(s.local_steps)
    bar = _progress(expected, progress, f"classification ({s.dataset})")

    def evaluate(k: int, i: int) -> RunRecord:
        eta, factor = candidates[i]
        sampler = fl.FALD(problem, step_size=eta, local_steps=k, temperature=s.temperature,
                          chains=s.chains, batch_size=s.batch_size, dtype=dtype, seed=s.seed)
        t0 = time.perf_counter()
        try:
            trace = sampler.run(s.rounds, thin=s.thin, progress=False)
        except fl.DivergenceError as exc:
            run = RunRecord(k, eta, factor, True, time.perf_counter() - t0, message=str(exc).split(";")[0])
            if log:
                log(f"K={k:<4} eta={eta:.3g}: diverged ({run.message})")
        else:
            seconds = time.perf_counter() - t0
            rounds, samples = trace.draw_rounds, trace.samples
            run = RunRecord(
                k, eta, factor, False, seconds, draw_rounds=rounds,
                test_curves=_curves(scoring, samples, rounds, s.warmup, data.X_test, data.y_test, s.n_bins),
                validation=_final_validation(scoring, samples, rounds, s.warmup, X_val, y_val, s.n_bins),
                point=_point_scores(scoring, samples, rounds, s.warmup, data.X_test, data.y_test, s.n_bins),
            )
            samples_of[id(run)] = samples  # kept for the reliability figure
            if log:
                v, t = run.validation, run.final()
                log(f"K={k:<4} eta={eta:.3g}: val {s.tune_metric} {np.mean(v[s.tune_metric]):.4f} | "
                    f"test acc {t['accuracy']:.4f} Brier {t['brier']:.4f} ECE {t['ece']:.4f} ({seconds:.1f} s)")
        runs.append(run)
        if bar is not None:
            bar.update(s.rounds * k)
        return run

    def score(run: RunRecord) -> float:
        return math.inf if run.diverged else sign * run.validation_score(s.tune_metric)

    try:
        for k in s.local_steps:
            tried: dict[int, RunRecord] = {}

            def at(i: int) -> float:
                if i not in tried:
                    tried[i] = evaluate(k, i)
                return score(tried[i])

            if s.search == "grid":
                for i in range(len(candidates)):
                    at(i)
            else:
                i = start
                at(i)
                if i > 0 and at(i - 1) < at(i):
                    i -= 1
                    while i > 0 and at(i - 1) < at(i):
                        i -= 1
                else:
                    while i + 1 < len(candidates) and at(i + 1) < at(i):
                        i += 1
            finite = [j for j in tried if math.isfinite(score(tried[j]))]
            if finite:
                best = tried[min(finite, key=lambda j: (score(tried[j]), j))]
                best.selected = True
                chosen[k] = best
                start = min(finite, key=lambda j: (score(tried[j]), j))  # the next K starts here
    finally:
        if bar is not None:
            bar.close()

    theta_map = problem.mode()
    map_probs = _probs(scoring, theta_map, data.X_test)
    map_scores = _scores(map_probs, data.y_test.numpy(), s.n_bins)
    result = ClassificationResult(
        settings=s, dataset=data.name,
        sizes={"train": problem.num_data, "validation": int(len(y_val)), "test": int(len(data.y_test)), "dim": problem.dim},
        smoothness=L, runs=runs, chosen=chosen, map_scores=map_scores, seconds=0.0,
    )
    labels = data.y_test.numpy()
    for k, run in chosen.items():
        keep = run.draw_rounds > s.warmup
        draws = _probs(scoring, samples_of[id(run)][0, keep], data.X_test)  # (D, n, C), chain 0
        bma = draws.mean(0)
        d_map = paired_bootstrap(bma, map_probs, labels, "ece", s.n_bins, seed=s.seed)
        # a single sample: the middle after-warm-up sample of chain 0
        d_one = paired_bootstrap(bma, draws[len(draws) // 2], labels, "ece", s.n_bins, seed=s.seed)
        result.bootstrap[k] = {
            "ece_bma_minus_map": d_map[0], "ece_bma_minus_map_lo90": d_map[1], "ece_bma_minus_map_hi90": d_map[2],
            "ece_bma_minus_one_draw": d_one[0], "ece_bma_minus_one_draw_lo90": d_one[1],
            "ece_bma_minus_one_draw_hi90": d_one[2],
        }
    if chosen:
        best = min(chosen.values(), key=lambda r: sign * r.validation_score(s.tune_metric))
        keep = best.draw_rounds > s.warmup
        samples = samples_of[id(best)]
        result.reliability = {
            "labels": data.y_test.numpy(),
            "probs": {
                f"BMA after warm-up, K = {best.local_steps}": _probs(scoring, samples[0, keep], data.X_test).mean(0),
                f"posterior-mean plug-in, K = {best.local_steps}": _probs(scoring, samples[0, keep].mean(0), data.X_test),
                "MAP (L-BFGS)": map_probs,
            },
        }
    result.seconds = time.perf_counter() - t_start
    return result


# -- command line ------------------------------------------------------------------------------------


def cli_configure(name: str, parser: argparse.ArgumentParser) -> None:
    d = ClassificationSettings()
    parser.add_argument("--dataset", nargs="+", default=["digits"],
                        help="digits, mnist5k, a folder of MNIST-format IDX files or an .npz file; several run one "
                             "after the other (default: %(default)s)")
    parser.add_argument("--local-steps", type=int, nargs="+", default=list(d.local_steps), metavar="K",
                        help="numbers of local steps K (default: %(default)s, as the paper)")
    parser.add_argument("--rounds", type=int, default=None, help="communication rounds per run "
                        "(default: digits 1000, mnist5k 500)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up rounds left out of the second average "
                        "(default: digits 200, mnist5k 100)")
    parser.add_argument("--thin", type=int, default=d.thin, help="one sample every THIN rounds (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=d.temperature, help="tau (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=d.num_clients, help="N clients (default: %(default)s)")
    parser.add_argument("--split", choices=SPLITS, default=d.split,
                        help="federated split (default: %(default)s)")
    parser.add_argument("--classes-per-client", type=int, default=d.classes_per_client,
                        help="classes per client for --split label_skew (default: %(default)s)")
    parser.add_argument("--dirichlet-alpha", type=float, default=d.dirichlet_alpha,
                        help="alpha for --split dirichlet (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=None, help="minibatch per client (default: digits 50, mnist5k 200)")
    parser.add_argument("--prior-scale", type=float, default=d.prior_scale, help="sigma of the N(0, sigma^2 I) prior "
                        "(default: %(default)s)")
    parser.add_argument("--eta-factors", type=float, nargs="+", default=list(d.eta_factors), metavar="F",
                        help="candidate step sizes as multiples of 1/L (default: %(default)s)")
    parser.add_argument("--step-sizes", type=float, nargs="+", default=None, metavar="ETA",
                        help="candidate step sizes as absolute values (overrides --eta-factors)")
    parser.add_argument("--search", choices=("ladder", "grid"), default=d.search,
                        help="ladder: walk the candidates from --eta-start (about 3 runs per K); grid: run them all "
                             "(default: %(default)s)")
    parser.add_argument("--eta-start", type=float, default=None,
                        help="candidate the ladder starts from for the first K (default: 16, or the middle one)")
    parser.add_argument("--tune-metric", choices=_TUNE_METRICS, default=d.tune_metric,
                        help="validation score that picks eta per K (default: %(default)s)")
    parser.add_argument("--val-fraction", type=float, default=d.validation_fraction,
                        help="share of the training data held out for tuning (default: %(default)s)")
    parser.add_argument("--chains", type=int, default=None, help="chains per run (default: digits 2, mnist5k 1)")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of splits and sampler (default: %(default)s)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default=d.dtype, help="(default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice; 1 is fastest on a busy machine)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def cli_run(name: str, args: argparse.Namespace) -> int:
    if args.threads is not None:
        torch.set_num_threads(check_int("threads", args.threads, 1))
    results = []
    for dataset in args.dataset:
        settings = ClassificationSettings(
            dataset=dataset, local_steps=tuple(args.local_steps), rounds=args.rounds, warmup=args.warmup,
            thin=args.thin, temperature=args.temperature, num_clients=args.clients, split=args.split,
            classes_per_client=args.classes_per_client, dirichlet_alpha=args.dirichlet_alpha,
            batch_size=args.batch_size, prior_scale=args.prior_scale,
            eta_factors=tuple(args.eta_factors),
            step_sizes=None if args.step_sizes is None else tuple(args.step_sizes),
            search=args.search, eta_start=args.eta_start,
            tune_metric=args.tune_metric, validation_fraction=args.val_fraction, chains=args.chains,
            seed=args.seed, dtype=args.dtype,
        ).resolved()
        result = run_classification(settings, progress=False if args.no_progress else None,
                                    log=lambda line: print(line, file=sys.stderr, flush=True))
        paths = result.write(args.out)
        print(result.table())
        print("files: " + ", ".join(str(p) for p in paths))
        print()
        results.append(result)
    return 0
