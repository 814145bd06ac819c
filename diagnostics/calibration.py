"""Calibration of probabilistic classifiers: ECE, MCE, RMS calibration error, Brier, NLL,
reliability diagrams, and the Bayesian posterior predictive (numpy only; no torch import).

Inputs are predicted probabilities ``probs`` of shape (n, C) (rows on the simplex) and
integer labels ``labels`` of shape (n,) in {0, ..., C-1}; numpy arrays, sequences and torch
tensors (on any device) are accepted. Every function validates its input before computing
and raises ``ValueError`` naming the argument (``probs``, ``labels``, ``n_bins``, ...).

Conventions
-----------
*Top-label calibration* (Guo, Pleiss, Sun, Weinberger — *On Calibration of Modern Neural
Networks*, ICML 2017, Sec. 2): the confidence of sample i is conf_i = max_c p_ic, the
prediction is argmax_c p_ic (ties go to the lowest class index, as ``numpy.argmax``), and
the sample is correct when the prediction equals its label. With M equal-width bins
B_m = {i : conf_i in ((m-1)/M, m/M]} (closed on the right; a confidence of exactly 0, only
possible in the class-wise variant, goes to the first bin),

    acc(B_m)  = (1/|B_m|) sum_{i in B_m} 1[correct_i]
    conf(B_m) = (1/|B_m|) sum_{i in B_m} conf_i
    ECE = sum_m (|B_m| / n) |acc(B_m) - conf(B_m)|                       (Guo et al., eq. 3)
    MCE = max_{m : B_m non-empty} |acc(B_m) - conf(B_m)|                 (Guo et al., eq. 5)
    RMSCE = sqrt( sum_m (|B_m| / n) (acc(B_m) - conf(B_m))^2 )

Bin edges are the correctly rounded numbers m/M, so a confidence written as 0.2, 0.4, ...
lands in the bin it closes, e.g. 0.4 in (0.2, 0.4] for M = 5.

``binning="quantile"`` uses equal-mass bins instead (adaptive binning, Nixon et al.,
*Measuring Calibration in Deep Learning*, 2019): samples sorted by confidence (stable sort)
are cut into M groups whose sizes differ by at most one; when n < M some bins are empty
and contribute nothing.

``classwise=True`` gives the class-wise variant (Kull et al., *Beyond temperature scaling*,
NeurIPS 2019): for every class c the scores p_ic of all samples are binned against the
events 1[y_i = c]; ECE and RMSCE average the per-class values over classes, MCE takes the
maximum over classes.

*Brier score* (Brier 1950, multi-class form): mean_i sum_c (p_ic - 1[y_i = c])^2, in
[0, 2]. For two classes it is exactly twice the binary score mean_i (p_i1 - y_i)^2 in
[0, 1] returned by ``sklearn.metrics.brier_score_loss(y, p[:, 1])``; scikit-learn's
multi-class ``brier_score_loss(y, p, scale_by_half=False)`` uses our convention.

*NLL*: -mean_i log p_{i, y_i} in nats, with p_{i, y_i} clipped from below at ``eps`` so a
zero probability on the true class costs -log(eps) (36.04 nats for float64 eps) instead
of infinity. scikit-learn's ``log_loss`` clips to [eps, 1 - eps] with the same eps.

*Posterior predictive* (Bayesian model average): p(y | x, D) = E_theta[p(y | x, theta)],
the mean of the per-draw *probabilities* (not of per-draw metrics, and not of logits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from diagnostics._arrays import as_numpy
from diagnostics._validation import check_bool, check_fits, check_int, check_real

__all__ = [
    "CalibrationBins",
    "PosteriorPredictive",
    "brier",
    "calibration_bins",
    "ece",
    "mce",
    "nll",
    "posterior_predictive",
    "reliability_diagram",
    "rms_calibration_error",
]

#: default tolerance on |sum_c p_ic - 1|: loose enough for float32 softmax outputs, tight
#: enough to reject logits or unnormalised scores.
SUM_TOL = 1e-5

_BINNINGS = ("uniform", "quantile")


# ---------------------------------------------------------------------------------------------
# validation


def _check_probs(probs: Any, *, name: str = "probs", sum_tol: float = SUM_TOL) -> np.ndarray:
    """(n, C) float64 array of probability rows, or ValueError naming ``name``."""
    p = as_numpy(probs, name)
    if p.ndim != 2:
        raise ValueError(f"{name} must have shape (n, C) (one row of class probabilities per sample); got shape {p.shape}")
    n, c = p.shape
    if n == 0:
        raise ValueError(f"{name} is empty: it must hold at least one sample (n >= 1); got shape {p.shape}")
    if c < 2:
        raise ValueError(f"{name} must have at least 2 classes (C >= 2); got shape {p.shape}")
    if not np.all(np.isfinite(p)):
        bad = int(np.sum(~np.isfinite(p)))
        raise ValueError(f"{name} must be finite probabilities in [0, 1]; found {bad} NaN/inf value(s)")
    lo, hi = float(p.min()), float(p.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(f"{name} must lie in [0, 1]; got values in [{lo:.6g}, {hi:.6g}] (pass probabilities, not logits)")
    dev = np.abs(p.sum(axis=1) - 1.0)
    worst = int(np.argmax(dev))
    if dev[worst] > sum_tol:
        raise ValueError(
            f"{name} rows must sum to 1 (within {sum_tol:g}); row {worst} sums to {p[worst].sum():.9g}"
        )
    return p


def _check_labels(labels: Any, n: int, num_classes: int, *, name: str = "labels") -> np.ndarray:
    """(n,) int64 array of class indices in [0, num_classes - 1], or ValueError."""
    if hasattr(labels, "detach") and hasattr(labels, "cpu"):
        labels = labels.detach().cpu().numpy()
    try:
        y = np.asarray(labels)
    except (TypeError, ValueError) as exc:  # pragma: no cover - numpy accepts almost anything
        raise ValueError(f"{name} must be an array of integer class labels") from exc
    if y.ndim != 1:
        raise ValueError(f"{name} must have shape (n,); got shape {y.shape}")
    if y.size == 0:
        raise ValueError(f"{name} is empty: it must hold at least one label")
    if y.shape[0] != n:
        raise ValueError(f"{name} must have one label per row of probs: got {y.shape[0]} labels for {n} rows")
    if y.dtype == bool or not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
        raise ValueError(f"{name} must hold integer class labels in [0, {num_classes - 1}]; got dtype {y.dtype}")
    if np.issubdtype(y.dtype, np.floating):
        if not np.all(np.isfinite(y)):
            raise ValueError(f"{name} must hold integer class labels; found NaN/inf")
        if not np.all(y == np.round(y)):
            raise ValueError(f"{name} must hold integer class labels; found non-integer values")
    y = y.astype(np.int64)
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi > num_classes - 1:
        raise ValueError(
            f"{name} must be class indices in [0, {num_classes - 1}] (probs has {num_classes} columns); "
            f"got values in [{lo}, {hi}]"
        )
    return y


def _check_pair(probs: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    p = _check_probs(probs)
    y = _check_labels(labels, p.shape[0], p.shape[1])
    return p, y


#: bytes per bin of the binning's work arrays (edges, indices, counts, sums, means: float64)
_BYTES_PER_BIN = 8 * 8


def _check_n_bins(n_bins: Any) -> int:
    n_bins = check_int("n_bins", n_bins, 1)
    check_fits("n_bins", n_bins * _BYTES_PER_BIN, f"binning into {n_bins} bins", "use fewer bins")
    return n_bins


def _check_binning(binning: Any) -> str:
    if binning not in _BINNINGS:
        raise ValueError(f"binning must be one of {_BINNINGS}; got {binning!r}")
    return binning


# ---------------------------------------------------------------------------------------------
# binning


@dataclass(frozen=True)
class CalibrationBins:
    """Per-bin statistics of a calibration measurement (one row per bin).

    ``edges`` (M + 1,): bin boundaries (for ``"quantile"`` binning: the smallest confidence
    of each bin, then the largest confidence overall; empty bins repeat an edge);
    ``counts`` (M,): number of samples per bin; ``confidence`` (M,): mean confidence per
    bin; ``accuracy`` (M,): fraction correct (or, class-wise, fraction of positives) per
    bin. Empty bins have NaN confidence and accuracy and weight zero.
    """

    edges: np.ndarray
    counts: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    @property
    def weights(self) -> np.ndarray:
        """|B_m| / n."""
        return self.counts / self.counts.sum()

    @property
    def gaps(self) -> np.ndarray:
        """acc(B_m) - conf(B_m) (NaN for empty bins)."""
        return self.accuracy - self.confidence

    @property
    def ece(self) -> float:
        nz = self.counts > 0
        return float(np.sum(self.weights[nz] * np.abs(self.gaps[nz])))

    @property
    def mce(self) -> float:
        nz = self.counts > 0
        return float(np.max(np.abs(self.gaps[nz])))

    @property
    def rmsce(self) -> float:
        nz = self.counts > 0
        return float(np.sqrt(np.sum(self.weights[nz] * self.gaps[nz] ** 2)))


def _uniform_bin_index(scores: np.ndarray, n_bins: int) -> np.ndarray:
    """Index m - 1 of the bin ((m-1)/M, m/M] holding each score; 0 goes to the first bin."""
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins  # correctly rounded m/M
    idx = np.searchsorted(edges, scores, side="left") - 1
    return np.clip(idx, 0, n_bins - 1)


def _bin_stats(scores: np.ndarray, hits: np.ndarray, n_bins: int, binning: str) -> CalibrationBins:
    if binning == "uniform":
        idx = _uniform_bin_index(scores, n_bins)
        edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    else:
        order = np.argsort(scores, kind="stable")
        idx = np.empty(scores.size, dtype=np.int64)
        sizes = np.full(n_bins, scores.size // n_bins)
        sizes[: scores.size % n_bins] += 1
        idx[order] = np.repeat(np.arange(n_bins), sizes)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        sorted_scores = scores[order]
        edges = np.empty(n_bins + 1)
        edges[:-1] = sorted_scores[np.minimum(starts, scores.size - 1)]
        edges[-1] = sorted_scores[-1]
    counts = np.bincount(idx, minlength=n_bins).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.bincount(idx, weights=scores, minlength=n_bins) / counts
        acc = np.bincount(idx, weights=hits.astype(np.float64), minlength=n_bins) / counts
    conf[counts == 0] = np.nan
    acc[counts == 0] = np.nan
    return CalibrationBins(edges=edges, counts=counts, confidence=conf, accuracy=acc)


def calibration_bins(
    probs: Any, labels: Any, n_bins: int = 15, *, binning: str = "uniform", classwise: bool = False
) -> CalibrationBins | list[CalibrationBins]:
    """Per-bin confidence, accuracy and counts (see the module docstring for the bins).

    Top-label (default): one :class:`CalibrationBins`. ``classwise=True``: a list with one
    :class:`CalibrationBins` per class c (scores p_ic, events 1[y_i = c]).
    """
    p, y = _check_pair(probs, labels)
    n_bins = _check_n_bins(n_bins)
    binning = _check_binning(binning)
    classwise = check_bool("classwise", classwise)
    if classwise:
        return [_bin_stats(p[:, c], y == c, n_bins, binning) for c in range(p.shape[1])]
    pred = np.argmax(p, axis=1)
    conf = p[np.arange(p.shape[0]), pred]
    return _bin_stats(conf, pred == y, n_bins, binning)


def ece(probs: Any, labels: Any, n_bins: int = 15, *, binning: str = "uniform", classwise: bool = False) -> float:
    """Expected calibration error (Guo et al. 2017, eq. 3), in [0, 1].

    Parameters
    ----------
    probs : (n, C) predicted class probabilities (rows sum to 1).
    labels : (n,) integer labels in [0, C - 1].
    n_bins : M >= 1 bins; equal-width bins ((m-1)/M, m/M] closed on the right by default.
    binning : ``"uniform"`` (equal width, Guo et al.) or ``"quantile"`` (equal mass).
    classwise : average over classes of the per-class ECE of p_ic against 1[y_i = c]
        (Kull et al. 2019) instead of the top-label ECE.
    """
    bins = calibration_bins(probs, labels, n_bins, binning=binning, classwise=classwise)
    if classwise:
        return float(np.mean([b.ece for b in bins]))
    return bins.ece


def mce(probs: Any, labels: Any, n_bins: int = 15, *, binning: str = "uniform", classwise: bool = False) -> float:
    """Maximum calibration error (Guo et al. 2017, eq. 5): the largest |acc - conf| over
    non-empty bins (class-wise: over all classes and bins). Same arguments as :func:`ece`."""
    bins = calibration_bins(probs, labels, n_bins, binning=binning, classwise=classwise)
    if classwise:
        return float(np.max([b.mce for b in bins]))
    return bins.mce


def rms_calibration_error(
    probs: Any, labels: Any, n_bins: int = 15, *, binning: str = "uniform", classwise: bool = False
) -> float:
    """Root-mean-square calibration error sqrt(sum_m |B_m|/n (acc - conf)^2) (the l2 analogue
    of ECE; class-wise: sqrt of the class average of the squared per-class values).
    Same arguments as :func:`ece`."""
    bins = calibration_bins(probs, labels, n_bins, binning=binning, classwise=classwise)
    if classwise:
        return float(np.sqrt(np.mean([b.rmsce**2 for b in bins])))
    return bins.rmsce


def brier(probs: Any, labels: Any) -> float:
    """Multi-class Brier score mean_i sum_c (p_ic - 1[y_i = c])^2, in [0, 2].

    0 for a perfect confident classifier; 2 when every sample puts probability 1 on a wrong
    class; 1 - 1/C for the uniform prediction. For C = 2 it is twice the binary score
    (see the module docstring for scikit-learn's conventions).
    """
    p, y = _check_pair(probs, labels)
    sq = np.sum(p * p, axis=1) - 2.0 * p[np.arange(p.shape[0]), y] + 1.0
    return float(np.mean(sq))


def nll(probs: Any, labels: Any, *, eps: float | None = None) -> float:
    """Mean negative log-likelihood -mean_i log p_{i, y_i} in nats.

    ``eps`` (default: float64 machine epsilon, 2.2e-16) is the lower clip on the true-class
    probability, so one zero probability costs -log(eps) = 36.04 nats, not infinity. Pass
    ``eps=0`` to disable clipping (a zero probability then gives ``inf``).
    """
    p, y = _check_pair(probs, labels)
    if eps is None:
        eps = float(np.finfo(np.float64).eps)
    eps = check_real("eps", eps, low=0.0, high=1.0, high_open=True)
    pt = p[np.arange(p.shape[0]), y]
    with np.errstate(divide="ignore"):
        return float(-np.mean(np.log(np.maximum(pt, eps))))


# ---------------------------------------------------------------------------------------------
# posterior predictive


def posterior_predictive(prob_draws: Any) -> np.ndarray:
    """Bayesian model average of per-draw class probabilities.

    ``prob_draws`` has shape (..., n, C): every leading axis indexes posterior draws (e.g.
    (S, n, C), or (chains, draws, n, C)). Returns the (n, C) mean of the probabilities over
    all draws, float64. For draws that arrive one at a time (or do not fit in memory) use
    :class:`PosteriorPredictive`.
    """
    a = as_numpy(prob_draws, "prob_draws")
    if a.ndim < 3:
        raise ValueError(f"prob_draws must have shape (S, n, C) (or (..., n, C)) with draws first; got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"prob_draws is empty; got shape {a.shape}")
    flat = a.reshape(-1, *a.shape[-2:])
    _check_probs(flat.reshape(-1, a.shape[-1]), name="prob_draws")
    return flat.mean(axis=0)


class PosteriorPredictive:
    """Running Bayesian model average: feed draws one at a time or in batches.

    >>> pp = PosteriorPredictive()
    >>> for theta in draws[::thin]:          # thinning is just a stride on what you feed
    ...     pp.update(softmax(logits(theta, X)))
    >>> ece(pp.probs, y)

    ``update`` accepts one draw (n, C) or a batch (s, n, C). The mean is accumulated in
    float64 as a running mean (mean += (batch_sum - s * mean) / count), so memory is O(n C)
    whatever the number of draws, and the result equals :func:`posterior_predictive` of all
    draws fed (to round-off).
    """

    def __init__(self) -> None:
        self._mean: np.ndarray | None = None
        self.count = 0

    def update(self, probs: Any) -> "PosteriorPredictive":
        a = as_numpy(probs, "probs")
        if a.ndim == 2:
            a = a[None]
        if a.ndim != 3:
            raise ValueError(f"probs must have shape (n, C) for one draw or (s, n, C) for a batch; got shape {a.shape}")
        if a.shape[0] == 0:
            raise ValueError("probs is an empty batch (s = 0)")
        _check_probs(a.reshape(-1, a.shape[-1]), name="probs")
        if self._mean is None:
            self._mean = np.zeros(a.shape[1:], dtype=np.float64)
        elif a.shape[1:] != self._mean.shape:
            raise ValueError(f"probs must have shape (n, C) = {self._mean.shape} like the first draw; got {a.shape[1:]}")
        s = a.shape[0]
        self.count += s
        self._mean += (a.sum(axis=0) - s * self._mean) / self.count
        return self

    @property
    def probs(self) -> np.ndarray:
        """The (n, C) posterior predictive so far."""
        if self._mean is None:
            raise ValueError("no draws yet: call update(probs) at least once")
        return self._mean.copy()


# ---------------------------------------------------------------------------------------------
# reliability diagram


def reliability_diagram(
    probs: Any,
    labels: Any,
    n_bins: int = 15,
    *,
    binning: str = "uniform",
    title: str | None = None,
    path: Any = None,
    figsize: tuple[float, float] = (5.0, 6.0),
    axes: Any = None,
):
    """Reliability diagram (Guo et al. 2017, Fig. 1): accuracy per confidence bin.

    Top panel: one bar per non-empty bin at its accuracy, the bin's mean confidence as a
    black line and the gap between them hatched (orange: over-confidence, acc < conf; green:
    under-confidence), the diagonal of perfect calibration, and the sample count above each
    bin. Bottom panel:
    histogram of the confidences (sample counts per bin, log scale) with the mean confidence
    and accuracy. The title gives ECE, MCE and n. Returns the matplotlib ``Figure``; with
    ``path`` it is also saved there (PNG by extension). ``axes``: an optional pair (top,
    bottom) of existing Axes to draw into (e.g. to put two models side by side).
    """
    bins = calibration_bins(probs, labels, n_bins, binning=binning)
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend needed

    p, y = _check_pair(probs, labels)
    pred = np.argmax(p, axis=1)
    conf_all = p[np.arange(p.shape[0]), pred]
    acc_all = float(np.mean(pred == y))

    if axes is None:
        fig = Figure(figsize=figsize, layout="constrained")
        ax, axh = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    else:
        try:
            ax, axh = axes
        except (TypeError, ValueError) as exc:
            raise ValueError("axes must be a pair (top, bottom) of matplotlib Axes") from exc
        fig = ax.figure
    left, right = bins.edges[:-1], bins.edges[1:]
    width = right - left
    nz = bins.counts > 0
    ax.bar(left[nz], bins.accuracy[nz], width=width[nz], align="edge", color="#4c72b0",
           edgecolor="black", linewidth=0.6, label="accuracy")
    over = nz & (bins.accuracy < bins.confidence)
    under = nz & (bins.accuracy >= bins.confidence)
    ax.bar(left[over], (bins.confidence - bins.accuracy)[over], bottom=bins.accuracy[over], width=width[over],
           align="edge", color="#dd8452", alpha=0.45, hatch="//", edgecolor="#c44e52", linewidth=0.6,
           label="gap (over-confident)")
    ax.bar(left[under], (bins.accuracy - bins.confidence)[under], bottom=bins.confidence[under],
           width=width[under], align="edge", color="#8fd19e", alpha=0.75, hatch="\\\\", edgecolor="#2d7a3e",
           linewidth=0.6, label="gap (under-confident)")
    ax.hlines(bins.confidence[nz], left[nz], right[nz], colors="black", linewidth=1.2, label="mean confidence in bin")
    ax.plot([0, 1], [0, 1], "k--", linewidth=1.0, label="perfect calibration")
    tops = np.maximum(bins.accuracy, bins.confidence)
    for xl, w, top, c in zip(left[nz], width[nz], tops[nz], bins.counts[nz]):
        ax.text(xl + w / 2, top + 0.01, str(int(c)), ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("accuracy in bin")
    ax.legend(loc="upper left", fontsize=7)
    kind = "equal-width" if binning == "uniform" else "equal-mass"
    head = f"ECE = {bins.ece:.4f}, MCE = {bins.mce:.4f} ({bins.counts.size} {kind} bins, n = {bins.n})"
    ax.set_title(head if title is None else f"{title}\n{head}", fontsize=9)

    axh.bar(left[nz], bins.counts[nz], width=width[nz], align="edge", color="#55a868", edgecolor="black", linewidth=0.6)
    axh.axvline(float(conf_all.mean()), color="#c44e52", linestyle="-", linewidth=1.2,
                label=f"mean confidence {conf_all.mean():.3f}")
    axh.axvline(acc_all, color="#4c72b0", linestyle="--", linewidth=1.2, label=f"accuracy {acc_all:.3f}")
    axh.set_yscale("log")
    axh.set_xlim(0, 1)
    axh.set_xlabel("confidence (top-class probability)")
    axh.set_ylabel("samples (log)")
    axh.legend(loc="upper left", fontsize=7)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
