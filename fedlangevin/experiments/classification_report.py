"""Results of the classification study (:mod:`fedlangevin.experiments.classification`): the
record of each run (:class:`RunRecord`) and the study's result (:class:`ClassificationResult`)
with its tables, CSV files and figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedlangevin.experiments.classification_plots import plot_curves, reliability_figure
from fedlangevin.experiments.classification_settings import ClassificationSettings
from fedlangevin.experiments.report import slug, write_csv
from fedlangevin.experiments.scoring import METRICS

__all__ = ["RunRecord", "ClassificationResult", "SAMPLER_NAMES"]

#: the samplers' names in tables and figures
SAMPLER_NAMES = {"fald": "FA-LD", "fahmc": "FA-HMC"}


@dataclass
class RunRecord:
    """One run of the study's sampler (one K, one eta, all chains; ``sampler`` "fald" or "fahmc",
    whose step is h = sqrt(2 eta)).

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
    sampler: str = "fald"

    def final(self, mode: str = "after_warmup") -> dict[str, float]:
        """Chain-mean test scores of the BMA at the last round."""
        return {m: float(np.mean(self.test_curves[mode][m][:, -1])) for m in METRICS}

    def validation_score(self, metric: str) -> float:
        return float(np.mean(self.validation[metric]))


@dataclass
class ClassificationResult:
    """What :func:`~fedlangevin.experiments.classification.run_classification` returns: settings, data summary, every run, the eta
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
                rows.append({"dataset": self.dataset, "sampler": self.settings.sampler, "K": k,
                             "step_size": float("nan"), "status": "all step sizes diverged"})
                continue
            row: dict[str, Any] = {"dataset": self.dataset, "sampler": self.settings.sampler, "K": k,
                                   "step_size": run.step_size, "eta_factor": run.factor, "status": "ok"}
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
            row: dict[str, Any] = {"dataset": self.dataset, "sampler": run.sampler, "K": run.local_steps,
                                   "step_size": run.step_size, "eta_factor": run.factor, "diverged": run.diverged,
                                   "selected": run.selected, "seconds": round(run.seconds, 2)}
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
                    row: dict[str, Any] = {"dataset": self.dataset, "sampler": run.sampler, "K": run.local_steps,
                                           "step_size": run.step_size, "selected": run.selected, "mode": mode,
                                           "warmup": self.settings.warmup, "round": int(r)}
                    for m in METRICS:
                        row[m] = float(np.mean(curves[m][:, j]))
                    rows.append(row)
        return rows

    def table(self) -> str:
        """Plain-text summary: chosen eta and final test scores per K, then the MAP."""
        s = self.settings
        head = (f"{SAMPLER_NAMES[s.sampler]} on {self.dataset}: n_train={self.sizes['train']} "
                f"(N={s.num_clients} {s.split} clients), "
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
        """Write ``<stem>_{final,tuning,curves}.csv``, ``<stem>_curves.png`` and
        ``<stem>_reliability.png`` into ``out``, the stem the data set's name (``_fahmc`` appended
        for FA-HMC); returns the paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        stem = slug(self.dataset) + ("" if self.settings.sampler == "fald" else f"_{self.settings.sampler}")
        paths = []
        for name, rows in (("final", self.final_rows()), ("tuning", self.tuning_rows()), ("curves", self.curve_rows())):
            path = out / f"{stem}_{name}.csv"
            write_csv(path, rows)
            paths.append(path)
        paths.append(self.curves_figure(out / f"{stem}_curves.png"))
        if self.reliability is not None:
            paths.append(self.reliability_figure(out / f"{stem}_reliability.png"))
        return paths

    def curves_figure(self, path: str | Path) -> Path:
        """Accuracy, Brier and ECE of the test BMA against communication rounds, one line per K
        (its chosen eta): top row without warm-up (Fig. 3), bottom row with (Fig. 4)."""
        s = self.settings
        title = (f"{SAMPLER_NAMES[s.sampler]}, Bayesian logistic regression on {self.dataset}: "
                 f"N = {s.num_clients} {s.split} clients, "
                 f"tau = {s.temperature:g}, batch {s.batch_size}/client, one sample every {s.thin} rounds, "
                 f"{s.chains} chain(s), eta tuned per K on validation {s.tune_metric}"
                 + (f", h = sqrt(2 eta), friction {s.friction:g}" if s.sampler == "fahmc" else ""))
        return plot_curves(self.curve_rows(), path, title=title, warmup=s.warmup)

    def reliability_figure(self, path: str | Path) -> Path:
        """Reliability diagrams on the test set: the after-warm-up BMA of the K with the best
        validation score, its posterior-mean plug-in, and the MAP."""
        return reliability_figure(self.reliability, self.dataset, self.settings.n_bins, path)
