"""Reproduce LFL's Fig. 1a / Fig. 2 on the SPEC's small problem and draw the docs figure.

Problem (SPEC-comparison, Sec. A "Experiments"): 10-class Gaussian mixture in 20 dimensions
(class means ~ N(0, 1.2^2 I), unit noise, 200 training and 500 test points per class), MLP
20-64-10 (d = 1994), 20 devices holding one class each (each class split in 2), tau = 4 local
SGD steps, batch 50, lr 0.1, 300 rounds, q2 = 2 for every quantized upload.

    python benchmarks/bench_compression.py [--seeds 0 1 2] [--rounds 300] [--out docs/img]

Prints a markdown table (mean test accuracy over the last 50 rounds, min-max over seeds; bits
per round) and writes ``compression_lfl_reproduction.png`` to ``--out``. About 70 s on
two idle CPU cores for three seeds.
"""

from __future__ import annotations

import argparse
import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from fedlangevin.compression.lfl import LFLOptimizer  # noqa: E402
from fedlangevin.compression.lfl_codecs import method_codecs  # noqa: E402
from fedlangevin.compression.local_solvers import LocalSGD  # noqa: E402
from fedlangevin.compression.models import MLP, gaussian_mixture, split_by_class  # noqa: E402

CONFIGS = [  # label, method, q1, SPEC's reported final accuracy
    ("fully lossless", "lossless", 2, "0.995"),
    ("LB (q2=2)", "lb", 2, "0.996"),
    ("LFL (2,2)", "lfl", 2, "0.996"),
    ("LGM (2,2)", "lgm", 2, "0.93-0.95"),
    ("LTGM (2,2)", "ltgm", 2, "0.66-0.74"),
    ("LTGM (50,2)", "ltgm", 50, "0.994"),
]


def problem(seed: int):
    g = torch.Generator().manual_seed(seed)
    X, y, means = gaussian_mixture(200, num_classes=10, dim=20, separation=1.2, generator=g)
    Xt, yt, _ = gaussian_mixture(500, num_classes=10, dim=20, means=means, generator=g)
    return split_by_class(X, y, 20, generator=g), (Xt, yt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    model = MLP(20, 64, 10)
    results: dict[str, list] = {label: [] for label, *_ in CONFIGS}
    extra_fresh = []
    t0 = time.time()
    for seed in args.seeds:
        clients, test = problem(seed)
        for label, method, q1, _ in CONFIGS:
            opt = LFLOptimizer(model, clients, method=method, q1=q1, q2=2, local=LocalSGD(0.1, 4, 50),
                               seed=seed, device=args.device)
            results[label].append(opt.run(args.rounds, test, eval_every=10))
        # LTGM with a fresh sign vector every round (not the default): diverges at q1 = 2
        b, _ = method_codecs("ltgm", 2, 2)
        from dataclasses import replace

        opt = LFLOptimizer(model, clients, method="ltgm", broadcast=replace(b, resample_signs=True),
                           local=LocalSGD(0.1, 4, 50), seed=seed, device=args.device)
        extra_fresh.append(opt.run(args.rounds, test, eval_every=10).diverged_at)
    elapsed = time.time() - t0

    # ---- table
    d = model.dim
    print(f"d = {d}, seeds {args.seeds}, {args.rounds} rounds, {elapsed:.0f} s\n")
    print("| method (q1, q2) | test accuracy, last 50 rounds (min-max over seeds) | SPEC | NLL | Brier | ECE "
          "| broadcast bits / round | upload bits / round (20 devices) | total bits, 300 rounds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, method, q1, spec in CONFIGS:
        hs = results[label]
        acc = [np.nanmean(h.metrics["accuracy"][-6:]) for h in hs]
        nll = np.mean([np.nanmean(h.metrics["nll"][-6:]) for h in hs])
        brier = np.mean([np.nanmean(h.metrics["brier"][-6:]) for h in hs])
        ece = np.mean([np.nanmean(h.metrics["ece"][-6:]) for h in hs])
        h = hs[0]
        down = h.bits_down[-1] / h.rounds[-1]
        up = h.bits_up[-1] / h.rounds[-1]
        div = [x.diverged_at for x in hs if x.diverged_at]
        note = f" (diverged at {div})" if div else ""
        print(f"| {label} | {min(acc):.3f}-{max(acc):.3f}{note} | {spec} | {nll:.3f} | {brier:.4f} | {ece:.4f} "
              f"| {down:,.0f} | {up:,.0f} | {h.bits_total[-1]:.3e} |")
    print("\nper-seed accuracy (last 50 rounds):")
    for label, *_ in CONFIGS:
        print(f"  {label:15s} " + "  ".join(f"{np.nanmean(h.metrics['accuracy'][-6:]):.4f}" for h in results[label]))
    print(f"\nLTGM (2,2) with fresh signs every round: diverged at rounds {extra_fresh}")
    for label in ("LFL (2,2)", "LGM (2,2)", "LTGM (2,2)"):
        eps = np.concatenate([np.asarray(h.extra["sent_skewness"]) for h in results[label]])
        var = np.mean([np.mean(h.extra["sent_variance"][-50:]) for h in results[label]])
        par = np.mean([np.mean(h.extra["sent_peak_to_average"][-50:]) for h in results[label]])
        print(f"{label}: broadcast-vector skewness eps median {np.median(eps):.2e} (90% {np.quantile(eps, 0.9):.2e}); "
              f"variance of |x| (last 50 rounds) {var:.3e}; peak-to-average {par:.2f}")

    # ---- figure (seed = first seed)
    colors = {"fully lossless": "k", "LB (q2=2)": "tab:gray", "LFL (2,2)": "tab:blue", "LGM (2,2)": "tab:red",
              "LTGM (2,2)": "tab:orange", "LTGM (50,2)": "tab:green"}
    styles = {"fully lossless": "-", "LB (q2=2)": ":", "LFL (2,2)": "--"}
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    for label, *_ in CONFIGS:
        h = results[label][0]
        kw = dict(color=colors[label], ls=styles.get(label, "-"), label=label, lw=1.6)
        ax[0, 0].plot(h.rounds, h.metrics["accuracy"], **kw)
        ax[0, 1].plot(h.bits_total, h.metrics["accuracy"], **kw)
        if h.extra["sent_variance"] and not np.isnan(h.extra["sent_variance"][0]):
            r = np.arange(1, len(h.extra["sent_variance"]) + 1)
            ax[1, 0].plot(r, h.extra["sent_variance"], **kw)
            ax[1, 1].plot(r, h.extra["sent_peak_to_average"], **kw)
    ins = ax[0, 0].inset_axes([0.52, 0.1, 0.45, 0.28])
    for label in ("fully lossless", "LB (q2=2)", "LFL (2,2)", "LTGM (50,2)"):
        h = results[label][0]
        ins.plot(h.rounds, h.metrics["accuracy"], color=colors[label], ls=styles.get(label, "-"), lw=1.4)
    ins.set_ylim(0.98, 1.0)
    ins.set_title("zoom: 0.98-1.00", fontsize=8)
    ins.tick_params(labelsize=7)
    ins.grid(alpha=0.3)
    ax[0, 0].set(xlabel="round", ylabel="test accuracy", title="(a) test accuracy (non-iid, 20 one-class devices)", ylim=(0, 1.02))
    ax[0, 1].set(xlabel="total bits communicated (broadcast + uploads)", ylabel="test accuracy", xscale="log",
                 title="(b) accuracy against bits", ylim=(0, 1.02))
    ax[1, 0].set(xlabel="round", ylabel="variance of |x_i|", yscale="log",
                 title="(c) vector quantized at the PS: variance")
    ax[1, 1].set(xlabel="round", ylabel="max|x_i| / mean|x_i|", title="(d) vector quantized at the PS: peak-to-average")
    for a in ax.ravel():
        a.grid(alpha=0.3)
    ax[0, 1].legend(loc="lower right", fontsize=9)
    ax[1, 0].legend(loc="center right", fontsize=9)
    fig.suptitle(f"LFL vs LGM / LTGM / lossless on a 10-class Gaussian mixture, MLP d = {d} (seed {args.seeds[0]})")
    fig.tight_layout()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "compression_lfl_reproduction.png")
    fig.savefig(path, dpi=110)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
