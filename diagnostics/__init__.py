"""Diagnostics for posterior samples from any sampler (numpy/scipy only; no torch import).

- Wasserstein: :func:`gaussian_w2`, :func:`empirical_gaussian_w2`, :func:`w2_floor`.
"""

from diagnostics.wasserstein import (
    W2Floor,
    empirical_gaussian_w2,
    fitted_gaussian,
    gaussian_w2,
    w2_floor,
)

__all__ = [
    "W2Floor",
    "empirical_gaussian_w2",
    "fitted_gaussian",
    "gaussian_w2",
    "w2_floor",
]
