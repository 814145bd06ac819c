"""The audit's statistics: an empirical lower bound on epsilon from the scores of two worlds.

A membership test "in" against "out" with false-positive rate FPR and false-negative rate FNR
bounds any (epsilon, delta) the mechanism satisfies: epsilon >= log((1 - delta - FPR) / FNR)
(and with the rates swapped). :func:`epsilon_lower_bound` chooses the test on one half of the
replicates and bounds its rates on the other with Clopper-Pearson upper bounds, so the bound
holds with the stated confidence (:mod:`fedlangevin.privacy.canary` runs the worlds). numpy and
scipy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlangevin._validation import check_real, check_seed

__all__ = ["MIN_REPLICATES", "epsilon_lower_bound"]

#: fewest replicates per world an audit accepts
MIN_REPLICATES = 100


def _upper(errors: np.ndarray, n: int, level: float) -> np.ndarray:
    """Clopper–Pearson upper bounds at ``level`` on a rate from ``errors`` of ``n`` trials."""
    from scipy.stats import beta

    errors = np.asarray(errors)
    out = np.ones(errors.shape, dtype=np.float64)
    some = errors < n
    out[some] = beta.ppf(level, errors[some] + 1, n - errors[some])
    return out


def _bound(fpr_hi: np.ndarray, fnr_hi: np.ndarray, delta: float) -> np.ndarray:
    """log((1 - delta - FPR) / FNR) (-inf where the numerator is <= 0: no bound)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        num = 1.0 - delta - fpr_hi
        return np.where(num > 0, np.log(np.maximum(num, 1e-300)) - np.log(fnr_hi), -np.inf)


def _rates(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray):
    """For "guess in when score > t": false positives (out scores > t) and false negatives
    (in scores <= t), counts."""
    s_in, s_out = np.sort(scores_in), np.sort(scores_out)
    fn = np.searchsorted(s_in, thresholds, side="right")
    fp = s_out.size - np.searchsorted(s_out, thresholds, side="right")
    return fp, fn


def epsilon_lower_bound(scores_in: Any, scores_out: Any, *, delta: float, confidence: float = 0.95,
                        seed: int = 0) -> dict:
    """The audited lower bound on epsilon from the scores of the two worlds (module docstring).

    ``scores_in``/``scores_out``: one score per replicate (larger: "in" more likely), at least
    :data:`MIN_REPLICATES` each. The replicates are split at random in halves; the first
    chooses the threshold and direction, the second gives the bound with Clopper–Pearson upper
    bounds on FPR and FNR at level 1 - (1 - confidence)/2 each. Returns a dict: ``epsilon``
    (>= 0), ``threshold``, ``direction`` ("greater": guess "in" when score > threshold, or
    "less"), ``false_positive``/``false_negative`` (the upper bounds used), ``counts``.
    """
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    confidence = check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    seed = check_seed("seed", seed)
    arrays = []
    for name, value in (("scores_in", scores_in), ("scores_out", scores_out)):
        a = np.asarray(value, dtype=np.float64)
        if a.ndim != 1 or a.size < MIN_REPLICATES:
            raise ValueError(f"{name} must be a vector of at least {MIN_REPLICATES} scores (one per replicate); "
                             f"got shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite")
        arrays.append(a)
    rng = np.random.default_rng(seed)
    halves = []
    for a in arrays:
        perm = rng.permutation(a.size)
        halves.append((a[perm[: a.size // 2]], a[perm[a.size // 2:]]))
    (sel_in, test_in), (sel_out, test_out) = halves
    level = 1.0 - (1.0 - confidence) / 2.0

    def bounds(s_in, s_out, t):
        fp, fn = _rates(s_in, s_out, t)
        fpr, fnr = _upper(fp, s_out.size, level), _upper(fn, s_in.size, level)
        # "greater": guess in when score > t; "less": the complementary test (its FPR is 1 - ...)
        fp_l, fn_l = s_out.size - fp, s_in.size - fn        # guess in when score <= t
        fpr_l, fnr_l = _upper(fp_l, s_out.size, level), _upper(fn_l, s_in.size, level)
        return {"greater": (fpr, fnr), "less": (fpr_l, fnr_l)}

    thresholds = np.unique(np.concatenate([sel_in, sel_out]))
    best = (-np.inf, 0.0, "greater")
    for direction, (fpr, fnr) in bounds(sel_in, sel_out, thresholds).items():
        eps = np.maximum(_bound(fpr, fnr, delta), _bound(fnr, fpr, delta))
        i = int(np.argmax(eps))
        if eps[i] > best[0]:
            best = (float(eps[i]), float(thresholds[i]), direction)
    _, threshold, direction = best
    fpr, fnr = bounds(test_in, test_out, np.array([threshold]))[direction]
    eps = max(float(_bound(fpr, fnr, delta)[0]), float(_bound(fnr, fpr, delta)[0]), 0.0)
    fp, fn = _rates(test_in, test_out, np.array([threshold]))
    if direction == "less":
        fp, fn = test_out.size - fp, test_in.size - fn
    return dict(epsilon=eps, threshold=threshold, direction=direction, false_positive=float(fpr[0]),
                false_negative=float(fnr[0]), counts=dict(false_positives=int(fp[0]), false_negatives=int(fn[0]),
                                                          out=int(test_out.size), **{"in": int(test_in.size)}))
