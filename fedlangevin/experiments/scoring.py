"""Scores of predictive probabilities for the classification studies: accuracy, Brier score,
ECE and NLL (:mod:`diagnostics`), of the Bayesian model average (BMA) after every kept
sample, of single parameter vectors, and paired-bootstrap differences between two predictors
on the same test points. Used by :mod:`~fedlangevin.experiments.classification` and
:mod:`~fedlangevin.experiments.comparison`.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "METRICS", "bma_curves", "final_validation", "metric_function", "paired_bootstrap", "point_scores",
    "predict_probs", "scores",
]

#: test statistics (accuracy: higher is better; the others: lower is better)
METRICS = ("accuracy", "brier", "ece", "nll")


def scores(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> dict[str, float]:
    """Accuracy, Brier score, ECE (``n_bins`` equal-width bins) and NLL of class probabilities
    (n, C) against integer labels (n,)."""
    return {m: metric_function(m, n_bins)(probs, labels) for m in METRICS}


def metric_function(metric: str, n_bins: int):
    """The scoring function ``(probs, labels) -> float`` of one of :data:`METRICS`."""
    import diagnostics

    if metric == "accuracy":
        return lambda p, y: float(np.mean(np.argmax(p, axis=1) == y))
    if metric == "ece":
        return lambda p, y: diagnostics.ece(p, y, n_bins)
    if metric in ("brier", "nll"):
        return getattr(diagnostics, metric)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")


def predict_probs(problem, theta: torch.Tensor, X: torch.Tensor) -> np.ndarray:
    """Per-draw class probabilities (..., n, C) as float64 numpy."""
    return problem.predict_proba(theta.double(), X.double()).numpy()


def bma_curves(problem, samples: torch.Tensor, draw_rounds: np.ndarray, warmup: int, X, y, n_bins: int):
    """BMA scores after every kept sample, per chain: {mode: {metric: (chains, D)}}."""
    from diagnostics import PosteriorPredictive

    chains, draws = samples.shape[:2]
    labels = y.numpy()
    out = {mode: {m: np.full((chains, draws), np.nan) for m in METRICS} for mode in ("all", "after_warmup")}
    for r in range(chains):
        probs = predict_probs(problem, samples[r], X)  # (D, n, C)
        bma = {"all": PosteriorPredictive(), "after_warmup": PosteriorPredictive()}
        for j in range(draws):
            for mode, pp in bma.items():
                if mode == "after_warmup" and draw_rounds[j] <= warmup:
                    continue
                pp.update(probs[j])
                for m, v in scores(pp.probs, labels, n_bins).items():
                    out[mode][m][r, j] = v
    return out


def final_validation(problem, samples, draw_rounds, warmup, X, y, n_bins) -> dict[str, np.ndarray]:
    from diagnostics import posterior_predictive

    keep = draw_rounds > warmup
    labels = y.numpy()
    per_chain = [scores(posterior_predictive(predict_probs(problem, samples[r, keep], X)), labels, n_bins)
                 for r in range(samples.shape[0])]
    return {m: np.array([s[m] for s in per_chain]) for m in METRICS}


def point_scores(problem, samples, draw_rounds, warmup, X, y, n_bins) -> dict[str, dict[str, np.ndarray]]:
    """Per-chain test scores of single parameter vectors: the last sample, the posterior-mean
    plug-in, and a single sample's predictive averaged over the after-warm-up samples."""
    keep = draw_rounds > warmup
    labels = y.numpy()
    out = {}
    for name, theta in (("last_draw", samples[:, -1]), ("posterior_mean", samples[:, keep].mean(1))):
        per_chain = [scores(predict_probs(problem, theta[r], X), labels, n_bins) for r in range(samples.shape[0])]
        out[name] = {m: np.array([s[m] for s in per_chain]) for m in METRICS}
    single = np.zeros((samples.shape[0], len(METRICS)))
    for r in range(samples.shape[0]):
        probs = predict_probs(problem, samples[r, keep], X)
        single[r] = np.mean([[scores(p, labels, n_bins)[m] for m in METRICS] for p in probs], axis=0)
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
    score = metric_function(metric, n_bins)
    full = score(probs_a, labels) - score(probs_b, labels)
    diffs = np.empty(repeats)
    for i in range(repeats):
        idx = rng.integers(0, n, n)
        diffs[i] = score(probs_a[idx], labels[idx]) - score(probs_b[idx], labels[idx])
    lo, hi = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    return float(full), float(lo), float(hi)
