"""2-Wasserstein distances between Gaussians, and the fitted-Gaussian W2 of samples.

The paper's Sec. 7.1 measure (Deng et al., *On Convergence of Federated Averaging Langevin
Dynamics*): at each round the R replicate chains give a set of draws; their mean u_k and
unbiased covariance Sigma_k (ddof = 1) define a Gaussian whose W2 to the exact Gaussian
posterior is reported. For two Gaussians the distance has a closed form (Givens & Shortt,
1984; Dowson & Landau, 1982):

    W2^2 = ||m1 - m2||^2 + tr(C1) + tr(C2) - 2 tr( (C1^{1/2} C2 C1^{1/2})^{1/2} ).

Only numpy/scipy are used so that any sampler's output can be measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from diagnostics._arrays import as_numpy
from diagnostics._validation import check_fits, check_int

#: relative tolerance of the covariance checks: |C - C^T| <= TOL max|C| entrywise and every
#: eigenvalue >= -TOL max|C| (round-off of float32 covariances is about 1e-7 max|C|).
COV_TOL = 1e-6

__all__ = ["gaussian_w2", "empirical_gaussian_w2", "fitted_gaussian", "w2_floor", "W2Floor"]


def _psd_sqrt(c: np.ndarray) -> np.ndarray:
    """Symmetric PSD square root (batched). Eigenvalues below zero from round-off -> 0."""
    c = 0.5 * (c + np.swapaxes(c, -1, -2))
    w, v = np.linalg.eigh(c)
    w = np.clip(w, 0.0, None)
    return (v * np.sqrt(w)[..., None, :]) @ np.swapaxes(v, -1, -2)


def _check_gaussian(mean: np.ndarray, cov: np.ndarray, which: str) -> None:
    if mean.ndim < 1:
        raise ValueError(f"mean{which} must have at least one dimension (..., d); got a scalar")
    d = mean.shape[-1]
    if cov.ndim < 2 or cov.shape[-2:] != (d, d):
        raise ValueError(
            f"cov{which} must have shape (..., {d}, {d}) to match mean{which} of shape {mean.shape}; "
            f"got {cov.shape}"
        )
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
        raise ValueError(f"mean{which} and cov{which} must be finite (no NaN or inf)")
    size = np.max(np.abs(cov), axis=(-2, -1), keepdims=True) if cov.size else np.zeros(cov.shape[:-2] + (1, 1))
    if np.any(np.abs(cov - np.swapaxes(cov, -1, -2)) > COV_TOL * size):
        raise ValueError(f"cov{which} must be symmetric (within {COV_TOL:g} of its largest entry)")
    scaled = cov / np.where(size > 0, _pow2(size), 1.0)
    if cov.size and float(np.min(np.linalg.eigvalsh(0.5 * (scaled + np.swapaxes(scaled, -1, -2))))) < -COV_TOL:
        raise ValueError(
            f"cov{which} must be positive semi-definite (eigenvalues >= -{COV_TOL:g} times its largest entry)"
        )


def _pow2(x: np.ndarray) -> np.ndarray:
    """A power of two in (|x| / 2, |x|] (1 where x is 0): dividing by it is exact, so scaled
    arithmetic gives the same bits as unscaled arithmetic wherever the latter does not overflow."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    _, exponent = np.frexp(np.where(x > 0, x, 1.0))
    return np.ldexp(1.0, exponent - 1)


def gaussian_w2(mean1: Any, cov1: Any, mean2: Any, cov2: Any) -> np.ndarray | float:
    """Exact 2-Wasserstein distance (not squared) between N(mean1, cov1) and N(mean2, cov2).

    Parameters
    ----------
    mean1, mean2 : array-like, shape (..., d)
    cov1, cov2 : array-like, shape (..., d, d), symmetric positive semi-definite. Singular
        and near-singular matrices are fine: tiny negative eigenvalues produced by
        round-off are set to zero before square roots, so the result is never NaN. A matrix
        that is not symmetric, or has an eigenvalue below -1e-6 times its largest entry
        (:data:`COV_TOL`), is a ``ValueError``.

    The computation runs on means and covariances divided by a common power of two (s and
    s^2, s about the largest |mean| or sqrt|cov| entry) and multiplies the distance by s, so
    huge or tiny inputs neither overflow nor underflow; the bits are those of the unscaled
    formula wherever it does not overflow.

    Leading dimensions broadcast (e.g. one W2 per communication round). Numpy arrays and
    torch tensors are accepted. Returns a float for unbatched input, else an array.

    Where the two Gaussians are bitwise identical the distance is exactly 0 (the closed form
    would otherwise return the square root of a round-off residue, about 1e-8).
    """
    m1, c1 = as_numpy(mean1, "mean1"), as_numpy(cov1, "cov1")
    m2, c2 = as_numpy(mean2, "mean2"), as_numpy(cov2, "cov2")
    _check_gaussian(m1, c1, "1")
    _check_gaussian(m2, c2, "2")
    if m1.shape[-1] != m2.shape[-1]:
        raise ValueError(f"mean1 and mean2 must have the same dimension d; got {m1.shape[-1]} and {m2.shape[-1]}")
    scale = _pow2(np.maximum(
        np.maximum(np.max(np.abs(m1), axis=-1), np.max(np.abs(m2), axis=-1)),
        np.sqrt(np.maximum(np.max(np.abs(c1), axis=(-2, -1)), np.max(np.abs(c2), axis=(-2, -1)))),
    ))
    return _scaled_w2(m1, c1, m2, c2, scale)


def _scaled_w2(m1, c1, m2, c2, scale):
    same = np.all(m1 == m2, axis=-1) & np.all(c1 == c2, axis=(-2, -1))
    m1, m2 = m1 / scale[..., None], m2 / scale[..., None]
    sc = scale[..., None, None]
    c1, c2 = c1 / sc / sc, c2 / sc / sc
    s1 = _psd_sqrt(c1)
    inner = s1 @ c2 @ s1
    inner = 0.5 * (inner + np.swapaxes(inner, -1, -2))
    ev = np.clip(np.linalg.eigvalsh(inner), 0.0, None)
    cross = np.sqrt(ev).sum(axis=-1)
    tr1 = np.trace(c1, axis1=-2, axis2=-1)
    tr2 = np.trace(c2, axis1=-2, axis2=-1)
    diff = m1 - m2
    w2sq = np.sum(diff * diff, axis=-1) + tr1 + tr2 - 2.0 * cross
    w2 = np.sqrt(np.clip(w2sq, 0.0, None)) * scale
    w2 = np.where(same, 0.0, w2)
    return float(w2) if np.ndim(w2) == 0 else w2


def fitted_gaussian(samples: Any) -> tuple[np.ndarray, np.ndarray]:
    """Mean and unbiased (ddof = 1) covariance over the second-to-last axis.

    ``samples`` has shape (..., n, d): e.g. (rounds, R, d) gives one fit per round.
    """
    x = as_numpy(samples, "samples")
    if x.ndim < 2:
        raise ValueError(f"samples must have shape (..., n, d); got shape {x.shape}")
    n = x.shape[-2]
    if n < 2:
        raise ValueError(f"samples need at least 2 draws along axis -2 to fit a covariance; got {n}")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples contain NaN or inf")
    mean = x.mean(axis=-2)
    centred = x - mean[..., None, :]
    cov = np.swapaxes(centred, -1, -2) @ centred / (n - 1)
    return mean, cov


def empirical_gaussian_w2(samples: Any, mean: Any, cov: Any) -> np.ndarray | float:
    """W2 between the Gaussian fitted to ``samples`` and N(mean, cov) (paper Sec. 7.1).

    ``samples`` has shape (..., n, d); the fit uses the sample mean and the ddof = 1
    covariance over the n draws. Even exact draws give a positive value: compare with
    :func:`w2_floor` to separate sampler bias from Monte Carlo noise.
    """
    m_hat, c_hat = fitted_gaussian(samples)
    return gaussian_w2(m_hat, c_hat, mean, cov)


@dataclass(frozen=True)
class W2Floor:
    """Distribution of the fitted-Gaussian W2 for ``n`` exact draws from the target."""

    n: int
    mean: float
    std: float
    q05: float
    q95: float
    repeats: int


def w2_floor(mean: Any, cov: Any, n: int, repeats: int = 400, seed: int = 0) -> W2Floor:
    """Finite-sample floor of :func:`empirical_gaussian_w2` for ``n`` exact draws.

    Draws ``repeats`` independent sets of ``n`` exact samples from N(mean, cov), fits a
    Gaussian to each and returns the mean, standard deviation and 5%/95% quantiles of the
    resulting W2. A sampler whose measured W2 sits inside this band is indistinguishable
    from exact sampling with ``n`` replicates. Seeded (``seed``: an integer >= 0), so the band
    is reproducible.
    """
    m, c = as_numpy(mean, "mean"), as_numpy(cov, "cov")
    _check_gaussian(m, c, "")
    if m.ndim != 1:
        raise ValueError(f"mean must have shape (d,); got {m.shape}")
    n = check_int("n", n, 2)
    repeats = check_int("repeats", repeats, 2)
    seed = check_int("seed", seed, 0)
    check_fits("n", 3 * repeats * n * m.shape[0] * 8, f"{repeats} repeats of {n} draws of d = {m.shape[0]}",
               "use a smaller n or fewer repeats")
    rng = np.random.default_rng(seed)
    root = _psd_sqrt(c)
    z = rng.standard_normal((int(repeats), int(n), m.shape[0]))
    draws = m + z @ root
    w = np.asarray(empirical_gaussian_w2(draws, m, c))
    return W2Floor(
        n=int(n),
        mean=float(w.mean()),
        std=float(w.std(ddof=1)),
        q05=float(np.quantile(w, 0.05)),
        q95=float(np.quantile(w, 0.95)),
        repeats=int(repeats),
    )
