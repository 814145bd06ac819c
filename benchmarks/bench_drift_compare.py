"""Drift corrections on label-skewed clients: how much of FA-LD's heterogeneity gap they close.

Runs FA-LD on the iid and the label-skew split and the corrected variants on the label-skew
split (``fedlangevin compare``'s runs: K = 10, FA-LD's step size, the corrected runs held to
FA-LD's bits, set-up included), then, per variant, the fraction of the NLL gap closed,

    (NLL[FA-LD, skew] - NLL[variant, skew]) / (NLL[FA-LD, skew] - NLL[FA-LD, iid]),

with a paired bootstrap 95% interval over the test points (the three runs are scored on the
same test points; each resample draws test points with replacement and recomputes the ratio).

    python benchmarks/bench_drift_compare.py --datasets digits mnist5k
"""

from __future__ import annotations

import argparse

import numpy as np

from fedlangevin.experiments.comparison import run_comparison
from fedlangevin.experiments.comparison_settings import CORRECTED


def _nll(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return -np.log(np.clip(probs[np.arange(len(labels)), labels], 1e-300, None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["digits", "mnist5k"])
    parser.add_argument("--boot", type=int, default=2000, help="bootstrap resamples (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for ds in args.datasets:
        res = run_comparison(datasets=(ds,), splits=("iid", "label_skew"), methods=("fald", *CORRECTED), seed=args.seed,
                             log=print)
        from fedlangevin.data import load_dataset

        labels = load_dataset(ds, test_fraction=res.settings.test_fraction, seed=res.settings.seed).y_test.numpy()
        runs = {(r.split, r.method): r for r in res.runs}
        base_iid = _nll(runs[("iid", "fald")].final_probs, labels)
        base_skew = _nll(runs[("label_skew", "fald")].final_probs, labels)
        rng = np.random.default_rng(args.seed)
        idx = rng.integers(0, len(labels), size=(args.boot, len(labels)))
        print(f"\n{ds}: NLL FA-LD iid {base_iid.mean():.4f}, label skew {base_skew.mean():.4f}")
        print("| variant (label skew, FA-LD's bits) | rounds | NLL | gap closed | 95% paired bootstrap |")
        print("| --- | --- | --- | --- | --- |")
        for key in CORRECTED:
            run = runs[("label_skew", key)]
            if run.final_probs is None or not np.isfinite(run.final_probs).all():
                print(f"| {run.label} | {run.info.get('rounds')} | diverged (round {run.info.get('diverged_at')}) | - | - |")
                continue
            nll = _nll(run.final_probs, labels)
            frac = (base_skew.mean() - nll.mean()) / (base_skew.mean() - base_iid.mean())
            boot = (base_skew[idx].mean(1) - nll[idx].mean(1)) / (base_skew[idx].mean(1) - base_iid[idx].mean(1))
            lo, hi = np.quantile(boot, [0.025, 0.975])
            print(f"| {run.label} | {run.info.get('rounds')} | {nll.mean():.4f} | {frac:.2f} | [{lo:.2f}, {hi:.2f}] |")


if __name__ == "__main__":
    main()
