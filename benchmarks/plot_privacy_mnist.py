"""The privacy-utility figure of docs/privacy-utility.md: test accuracy, ECE and NLL against epsilon on
the full MNIST and Fashion-MNIST, the budgeted FA-HMC runs of ``bench_budget_mnist.py`` beside DP-SGD
(``bench_dpsgd_mnist.py``) and the MAP without privacy, drawn from the measured rows in
``docs/data/privacy_utility_mnist.csv`` (columns dataset, method, epsilon, accuracy, ece, nll; a method
without epsilon is drawn as a horizontal line).

    python benchmarks/plot_privacy_mnist.py [--csv docs/data/privacy_utility_mnist.csv]
        [--out docs/img/privacy_utility_mnist.png]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STYLES = {"FA-HMC": dict(marker="o", linestyle="-"), "DP-SGD, most accurate": dict(marker="s", linestyle="--"),
          "DP-SGD, best calibrated": dict(marker="^", linestyle=":")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=str(ROOT / "docs/data/privacy_utility_mnist.csv"))
    ap.add_argument("--out", default=str(ROOT / "docs/img/privacy_utility_mnist.png"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(args.csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    metrics = (("accuracy", "test accuracy"), ("ece", "test ECE (15 bins)"), ("nll", "test NLL"))
    fig, axes = plt.subplots(len(datasets), 3, figsize=(14, 4.2 * len(datasets)), squeeze=False)
    for i, name in enumerate(datasets):
        mine = [r for r in rows if r["dataset"] == name]
        methods = list(dict.fromkeys(r["method"] for r in mine))
        for j, (metric, label) in enumerate(metrics):
            ax = axes[i, j]
            for method in methods:
                pts = [r for r in mine if r["method"] == method]
                if not pts[0]["epsilon"]:
                    ax.axhline(float(pts[0][metric]), color="grey", linewidth=1, label=method)
                    continue
                style = next((v for k, v in STYLES.items() if method.startswith(k)), dict(marker="x"))
                ax.plot([float(r["epsilon"]) for r in pts], [float(r[metric]) for r in pts], label=method, **style)
            ax.set_xscale("log")
            ticks = sorted({float(r["epsilon"]) for r in mine if r["epsilon"]})
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.minorticks_off()
            ax.set_xlabel("epsilon (delta = 1e-5)")
            ax.set_ylabel(label)
            ax.set_title(f"{name}: {label}", fontsize=10)
            ax.grid(alpha=0.3, which="both")
        axes[i, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
