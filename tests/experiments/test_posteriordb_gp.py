"""The GP Poisson regression's pieces (experiments/posteriordb_gp.py); its energy against Stan's model
is in test_posteriordb.py (it needs the posterior's data)."""

from __future__ import annotations

import math

import numpy as np
import torch

from fedlangevin.experiments.posteriordb_gp import JITTER, gp_cholesky


def test_gp_cholesky_factors_the_squared_exponential_covariance_with_stans_jitter():
    x = torch.arange(-10.0, 11.0, 2.0, dtype=torch.float64)
    alpha, rho = torch.tensor([3.0, 0.5], dtype=torch.float64), torch.tensor([6.0, 1.5], dtype=torch.float64)
    chol = gp_cholesky(x, alpha, rho)  # batched over (alpha, rho) pairs
    for b in range(2):
        want = np.array([[float(alpha[b]) ** 2 * math.exp(-(float(x[i]) - float(x[j])) ** 2 / (2 * float(rho[b]) ** 2))
                          + JITTER * (i == j) for j in range(11)] for i in range(11)])
        np.testing.assert_allclose((chol[b] @ chol[b].T).numpy(), want, rtol=1e-10, atol=1e-12)
        assert bool((chol[b].triu(1) == 0).all())


def test_a_covariance_that_is_not_positive_definite_gives_nan_not_an_exception():
    """A diverging chain (rho underflowed to 0: 0/0 in the exponent) gets a non-finite factor,
    hence a non-finite energy the sampler's own divergence check reports, instead of a LinAlgError."""
    x = torch.arange(-10.0, 11.0, 2.0, dtype=torch.float64)
    chol = gp_cholesky(x, torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor([0.0, 2.0], dtype=torch.float64))
    assert bool(chol[0].isnan().all()) and bool(chol[1].isfinite().all())
