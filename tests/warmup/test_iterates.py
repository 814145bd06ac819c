"""The private warm-up's step rule (fedlangevin.warmup.iterates) against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from fedlangevin.warmup.adaptation import MIN_WARMUP, PRIVATE_WINDOWS, SAFETY, private_windows
from fedlangevin.warmup.iterates import Scatter, public_curvature, step_from_spread
from fedlangevin.privacy import ClientLevel, RecordLevel


def _spd(d, seed, condition=50.0):
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return (q * torch.logspace(0, np.log10(condition), d, dtype=torch.float64)) @ q.T


def test_the_step_is_safety_over_the_largest_generalised_eigenvalue():
    """eq. (1): SAFETY / (tau lambda_max(M S^{-1})), lambda from scipy's generalised eigensolver."""
    spread, matrix = _spd(4, 0), _spd(4, 1)
    lam = scipy.linalg.eigh(matrix.numpy(), spread.numpy(), eigvals_only=True).max()
    assert step_from_spread(spread, matrix, 2.0, SAFETY) == pytest.approx(SAFETY / (2.0 * lam), rel=1e-10)
    # M = S / lambda_max(S) (a private run's normalised M): the step is SAFETY lambda_max(S) / tau
    top = float(torch.linalg.eigvalsh(spread).max())
    assert step_from_spread(spread, spread / top, 1.0, SAFETY) == pytest.approx(SAFETY * top, rel=1e-10)
    # diagonal spreads and M
    var = torch.tensor([0.5, 2.0, 0.1], dtype=torch.float64)
    m = torch.diag(torch.tensor([1.0, 0.5, 0.05], dtype=torch.float64))
    assert step_from_spread(var, m, 1.0, SAFETY) == pytest.approx(SAFETY / 2.0, rel=1e-12)


def test_for_a_gaussian_the_step_times_the_preconditioned_hessian_is_safety():
    """Sigma = tau H^{-1}: with S = Sigma, eta lambda_max(M H) = SAFETY for any M."""
    h, tau = _spd(3, 2), 0.7
    sigma = tau * torch.linalg.inv(h)
    m = _spd(3, 3, condition=5.0)
    eta = step_from_spread(sigma, m, tau, SAFETY)
    assert eta * float(torch.linalg.eigvals(m @ h).real.max()) == pytest.approx(SAFETY, rel=1e-9)


def test_a_spread_that_gives_no_step_is_a_value_error():  # chains that did not move along a coordinate
    with pytest.raises(ValueError, match="step_size"):
        step_from_spread(torch.tensor([1.0, 0.0], dtype=torch.float64), torch.eye(2, dtype=torch.float64),
                         1.0, SAFETY)


@pytest.mark.parametrize("dense", [True, False])
def test_scatter_batches_give_the_covariance_of_all_draws(dense):
    g = torch.Generator().manual_seed(4)
    batches = [torch.randn(5, 3, generator=g, dtype=torch.float64) * 3 + 1 for _ in range(7)]
    acc = Scatter.empty(3, dense)
    for b in batches:
        acc = acc.add(b)
    full = np.cov(torch.cat(batches).numpy().T)
    want = full if dense else np.diag(full)
    assert acc.count == 35
    np.testing.assert_allclose(acc.covariance().numpy(), want, rtol=1e-12, atol=1e-12)
    again = Scatter.from_record(acc.record())
    assert again.count == acc.count and torch.equal(again.m2, acc.m2) and torch.equal(again.mean, acc.mean)


def test_the_public_guess_reads_only_the_clip_weights_and_sizes():
    sizes = torch.tensor([10.0, 30.0])
    weights = sizes / sizes.sum()
    # record level: max_c n_c C^2 / p_c = 40 C^2 here (n_c / p_c = n for every client)
    assert public_curvature(RecordLevel(clip=2.0), weights, sizes) == pytest.approx(40 * 4.0)
    # client level: max_c p_c C^2
    assert public_curvature(ClientLevel(clip=2.0), weights, sizes) == pytest.approx(0.75 * 4.0)
    with pytest.raises(ValueError, match="client_sizes"):
        public_curvature(RecordLevel(clip=1.0), weights, None)


@pytest.mark.parametrize("warmup", [MIN_WARMUP, 100, 1000, 1001])
def test_private_windows_cover_the_warm_up_with_equal_slow_windows(warmup):
    windows = private_windows(warmup)
    assert windows[0].start == 0 and windows[-1].end == warmup
    assert all(a.end == b.start for a, b in zip(windows, windows[1:]))
    slow = [w.end - w.start for w in windows if w.slow]
    assert len(slow) == PRIVATE_WINDOWS and max(slow) - min(slow) <= 1
    assert not windows[-1].slow and windows[-1].end - windows[-1].start <= 0.1 * warmup


def test_a_short_private_warm_up_keeps_its_public_step():
    assert [(w.start, w.end, w.slow) for w in private_windows(MIN_WARMUP - 1)] == [(0, MIN_WARMUP - 1, False)]
    assert private_windows(0) == []
