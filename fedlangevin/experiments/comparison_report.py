"""The results of the FA-LD vs compressed-optimizer comparison
(:mod:`fedlangevin.experiments.comparison`): tidy tables, the text summary, one figure per
data set and split, the CSV files, and paired-bootstrap differences between methods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlangevin.experiments.report import pyplot, slug, write_csv
from fedlangevin.experiments.scoring import METRICS, paired_bootstrap

if TYPE_CHECKING:
    from fedlangevin.experiments.comparison_settings import ComparisonSettings, MethodRun

__all__ = ["ComparisonResult", "paired_differences"]


def paired_differences(runs: list[MethodRun], labels: np.ndarray, s: ComparisonSettings) -> list[dict[str, Any]]:
    """Paired-bootstrap differences on the test points: FA-LD minus FedAvg (what sampling
    buys at the same bits) and quantized minus exact FA-LD (what quantization costs)."""
    by = {r.method: r for r in runs}
    pairs = []
    if "fald" in by and "fedavg" in by:
        pairs.append(("fald", "fedavg"))
    pairs.extend((k, "fald") for k in by if k.startswith("fald_q") and "fald" in by)
    rows = []
    for a, b in pairs:
        ra, rb = by[a], by[b]
        if ra.final_probs is None or rb.final_probs is None:
            continue
        row: dict[str, Any] = {"dataset": ra.dataset, "split": ra.split, "a": a, "b": b}
        for m in METRICS:
            full, lo, hi = paired_bootstrap(ra.final_probs, rb.final_probs, labels, m, s.n_bins, repeats=s.bootstrap,
                                            seed=s.seed)
            row[m], row[f"{m}_lo90"], row[f"{m}_hi90"] = full, lo, hi
        rows.append(row)
    return rows


# -- results --------------------------------------------------------------------------------------


@dataclass
class ComparisonResult:
    """Everything :func:`run_comparison` measured: runs per setting, paired differences, sizes."""

    settings: ComparisonSettings
    runs: list[MethodRun]
    differences: list[dict[str, Any]]
    sizes: dict[tuple[str, str], dict[str, Any]]
    seconds: float = 0.0

    def settings_keys(self) -> list[tuple[str, str]]:
        return list(self.sizes)

    def runs_of(self, dataset: str, split: str) -> list[MethodRun]:
        return [r for r in self.runs if r.dataset == dataset and r.split == split]

    def run(self, dataset: str, split: str, method: str) -> MethodRun:
        for r in self.runs_of(dataset, split):
            if r.method == method:
                return r
        raise KeyError((dataset, split, method))

    # -- tidy tables ----------------------------------------------------------------------------
    def curve_rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            for j, r in enumerate(run.rounds):
                row = {"dataset": run.dataset, "split": run.split, "method": run.method, "round": r,
                       "bits_up": run.bits_up[j], "bits_down": run.bits_down[j], "bits_total": run.bits_total[j]}
                row.update({m: run.metrics[m][j] for m in METRICS})
                rows.append(row)
        return rows

    def final_rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            row: dict[str, Any] = {"dataset": run.dataset, "split": run.split, "method": run.method,
                                   "label": run.label, "rounds": run.rounds[-1]}
            row.update(run.final())
            row.update(bits_up=run.bits_up[-1], bits_down=run.bits_down[-1], bits_total=run.bits_total[-1],
                       seconds=round(run.seconds, 2), diverged_at=run.info.get("diverged_at"))
            if "error_to_noise" in run.info:
                row.update(self._masking(run))
            rows.append(row)
        return rows

    def _masking(self, run: MethodRun) -> dict[str, float]:
        """Quantization-error variance / injected-noise variance per round: mean after the
        warm-up (the rounds the final BMA averages over) and in the first round."""
        ratio = run.info["error_to_noise"]
        start = int(math.floor(self.settings.warmup_fraction * len(ratio)))
        tail = ratio[start:]
        exact = [r for r in self.runs_of(run.dataset, run.split) if r.method == "fald"]
        spread = run.info["sample_variance"] / exact[0].info["sample_variance"] if exact else float("nan")
        return {"q": run.info["q"], "error_to_noise_after_warmup": float(np.nanmean(tail)) if tail.size else float("nan"),
                "sample_variance_vs_exact": spread,
                "error_to_noise_first_round": float(ratio[0]) if ratio.size else float("nan"),
                "error_variance_after_warmup": float(np.nanmean(run.info["error_variance"][start:])) if tail.size else float("nan"),
                "injected_variance_per_round": run.info["injected_variance_per_round"]}

    def masking_rows(self) -> list[dict[str, Any]]:
        """Per round of every quantized FA-LD run: error variance, injected variance, ratio."""
        rows = []
        for run in self.runs:
            if "error_to_noise" not in run.info:
                continue
            for j, (v, ratio) in enumerate(zip(run.info["error_variance"], run.info["error_to_noise"])):
                rows.append({"dataset": run.dataset, "split": run.split, "q": run.info["q"], "round": j + 1,
                             "error_variance": float(v), "injected_variance": run.info["injected_variance_per_round"],
                             "ratio": float(ratio)})
        return rows

    def table(self) -> str:
        """Plain-text table: final metrics and total bits per method, per setting, the masking
        measurement and the paired differences."""
        s = self.settings
        lines = [f"{len(self.sizes)} setting(s), {s.rounds} rounds (DZOFL {s.dzofl_rounds}), K = {s.local_steps} local "
                 f"steps, batch {s.batch_size}; FA-LD: tau = {s.temperature:g}, prior sigma = {s.prior_scale:g}, "
                 f"eta = {s.eta_factor:g}/L, BMA after a warm-up of {s.warmup_fraction:g} T, one chain; optimizers: "
                 f"SGD lr {'eta n (FA-LD drift)' if s.lr is None else format(s.lr, 'g')}; exact entries "
                 f"{s.bits_per_entry} bits, broadcast counted "
                 f"{'once per round' if s.downlink == 'broadcast' else 'once per client'}"]
        head = (f"{'method':<38} {'acc':>6} {'Brier':>6} {'ECE':>6} {'NLL':>6} | {'bits up':>9} {'bits down':>9} "
                f"{'total':>9} | {'time':>6}")
        for (ds, split), size in self.sizes.items():
            lines += ["", f"{ds}, {split} split: N = {size['clients']} clients (sizes {size['client_min']}-"
                      f"{size['client_max']}), n_train = {size['train']}, n_test = {size['test']}, d = {size['dim']}; "
                      f"eta = {size['eta']:.3g}, SGD lr = {size['lr']:.3g}",
                      head, "-" * len(head)]
            for run in self.runs_of(ds, split):
                f = run.final()
                note = f"  (diverged at round {run.info['diverged_at']})" if run.info.get("diverged_at") else ""
                lines.append(f"{run.label:<38} {f['accuracy']:>6.4f} {f['brier']:>6.4f} {f['ece']:>6.4f} "
                             f"{f['nll']:>6.4f} | {run.bits_up[-1]:>9.3g} {run.bits_down[-1]:>9.3g} "
                             f"{run.bits_total[-1]:>9.3g} | {run.seconds:>5.1f}s{note}")
            for run in self.runs_of(ds, split):
                if "error_to_noise" in run.info:
                    mk = self._masking(run)
                    lines.append(f"  q = {mk['q']}: quantization-error variance / injected noise variance "
                                 f"(2 eta tau K = {mk['injected_variance_per_round']:.3g}) per round = "
                                 f"{mk['error_to_noise_after_warmup']:.3g} after warm-up "
                                 f"(first round {mk['error_to_noise_first_round']:.3g}); chain variance "
                                 f"x {mk['sample_variance_vs_exact']:.3g} of the exact-upload chain's")
            for row in self.differences:
                if (row["dataset"], row["split"]) != (ds, split):
                    continue
                parts = ", ".join(f"{m} {row[m]:+.4f} [{row[m + '_lo90']:+.4f}, {row[m + '_hi90']:+.4f}]"
                                  for m in METRICS)
                lines.append(f"  {row['a']} - {row['b']} (90% paired bootstrap): {parts}")
        lines.append(f"total time {self.seconds:.0f} s")
        return "\n".join(lines)

    # -- files ----------------------------------------------------------------------------------
    def figure(self, dataset: str, split: str, path: str | Path) -> Path:
        """Accuracy, Brier, ECE and NLL against total bits (log axis), one line per method."""
        plt = pyplot()

        s = self.settings
        runs = self.runs_of(dataset, split)
        fig, axes = plt.subplots(1, 4, figsize=(20, 5.2))
        names = {"accuracy": "test accuracy", "brier": "test Brier score", "ece": f"test ECE ({s.n_bins} bins)",
                 "nll": "test NLL (nats)"}
        styles = _styles([r.method for r in runs])
        for ax, m in zip(axes, METRICS):
            for run in runs:
                x = np.array(run.bits_total)
                y = np.array(run.metrics[m], dtype=float)
                ok = np.isfinite(y)
                if not ok.any():
                    continue
                st = styles[run.method]
                ax.plot(x[ok], y[ok], label=run.label, **st)
                ax.plot(x[ok][-1:], y[ok][-1:], marker="o", color=st["color"], markersize=6, linestyle="none")
            ax.set_xscale("log")
            if m != "accuracy":
                ax.set_yscale("log")
            ax.set_xlabel("total bits communicated (upload + broadcast, log)")
            ax.set_ylabel(names[m])
            ax.grid(alpha=0.3, which="both")
        size = self.sizes[(dataset, split)]
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=9, frameon=False)
        fig.suptitle(f"{dataset}, {split} split over N = {size['clients']} clients, d = {size['dim']}: "
                     f"{s.rounds} rounds of K = {s.local_steps} local steps (DZOFL {s.dzofl_rounds} rounds); "
                     f"FA-LD scored by its BMA, optimizers by their model; dot = end of run", fontsize=10)
        fig.tight_layout(rect=(0, 0.1 if len(labels) > 5 else 0.06, 1, 0.95))
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return Path(path)

    def write(self, out: str | Path) -> list[Path]:
        """Write ``comparison_{final,curves,differences,masking}.csv`` and one
        ``comparison_<dataset>_<split>.png`` per setting into ``out``; returns the paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, rows in (("final", self.final_rows()), ("curves", self.curve_rows()),
                           ("differences", self.differences), ("masking", self.masking_rows())):
            if rows:
                path = out / f"comparison_{name}.csv"
                write_csv(path, rows)
                paths.append(path)
        for ds, split in self.sizes:
            paths.append(self.figure(ds, split, out / f"comparison_{slug(ds)}_{split}.png"))
        return paths


def _styles(methods: list[str]) -> dict[str, dict[str, Any]]:
    colors = {"fald": "#000000", "fedavg": "#1f77b4", "lb": "#17becf", "lfl": "#2ca02c", "lgm": "#ff7f0e",
              "ltgm": "#d62728", "dzofl": "#9467bd"}
    quantized = [m for m in methods if m.startswith("fald_q")]
    greys = dict(zip(quantized, ("#7f7f7f", "#bcbd22", "#8c564b", "#e377c2", "#aec7e8")))
    out = {}
    for m in methods:
        if m == "fald":
            out[m] = dict(color=colors[m], linewidth=2.4, linestyle="-")
        elif m in greys:
            out[m] = dict(color=greys[m], linewidth=2.0, linestyle="--")
        else:
            out[m] = dict(color=colors.get(m, "#333333"), linewidth=1.4, linestyle=":" if m == "dzofl" else "-")
    return out
