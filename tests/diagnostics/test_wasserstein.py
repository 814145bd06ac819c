"""Exact Gaussian W2 against closed forms (to 1e-10) and the fitted-Gaussian measure."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from diagnostics import empirical_gaussian_w2, fitted_gaussian, gaussian_w2, w2_floor


def test_one_dimensional_closed_form():
    # W2(N(m1, s1^2), N(m2, s2^2)) = sqrt((m1 - m2)^2 + (s1 - s2)^2)
    w = gaussian_w2([1.5], [[4.0]], [-0.5], [[0.25]])
    assert w == pytest.approx(np.sqrt(2.0**2 + 1.5**2), abs=1e-10)


def test_commuting_diagonal_covariances():
    a, b = np.array([1.0, 4.0, 9.0]), np.array([4.0, 1.0, 0.25])
    m1, m2 = np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 0.0])
    expected = np.sqrt(np.sum((m1 - m2) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))
    assert gaussian_w2(m1, np.diag(a), m2, np.diag(b)) == pytest.approx(expected, abs=1e-10)


def test_singular_rank_one_covariances():
    # C1 = v v^T, C2 = u u^T: W2^2 = |v|^2 + |u|^2 - 2 |v . u|
    v, u = np.array([1.0, 2.0, 0.0]), np.array([0.5, -1.0, 3.0])
    expected = np.sqrt(v @ v + u @ u - 2 * abs(v @ u))
    w = gaussian_w2(np.zeros(3), np.outer(v, v), np.zeros(3), np.outer(u, u))
    assert w == pytest.approx(expected, abs=1e-10)


def test_dimension_50_commuting_in_a_rotated_basis_and_scipy_sqrtm():
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((50, 50)))
    a, b = rng.uniform(0.2, 3.0, 50), rng.uniform(0.2, 3.0, 50)
    c1, c2 = q @ np.diag(a) @ q.T, q @ np.diag(b) @ q.T
    m1, m2 = rng.standard_normal(50), rng.standard_normal(50)
    expected = np.sqrt(np.sum((m1 - m2) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))
    assert gaussian_w2(m1, c1, m2, c2) == pytest.approx(expected, abs=1e-10)
    # non-commuting pair against scipy's independent matrix square root
    z = rng.standard_normal((50, 60))
    c3 = z @ z.T / 60
    s1 = scipy.linalg.sqrtm(c1)
    cross = np.trace(scipy.linalg.sqrtm(s1 @ c3 @ s1)).real
    ref = np.sqrt(np.sum((m1 - m2) ** 2) + np.trace(c1) + np.trace(c3) - 2 * cross)
    assert gaussian_w2(m1, c1, m2, c3) == pytest.approx(ref, abs=1e-10)


def test_identical_inputs_give_zero_not_nan():
    rng = np.random.default_rng(1)
    z = rng.standard_normal((5, 5))
    c = z @ z.T
    c[0] *= 1e-17  # near-singular, asymmetric round-off
    c[:, 0] *= 1e-17
    m = rng.standard_normal(5)
    assert gaussian_w2(m, c, m, c) == 0.0
    assert gaussian_w2(m, np.zeros((5, 5)), m, np.zeros((5, 5))) == 0.0


def test_near_singular_never_nan():
    c = np.array([[1.0, 1.0], [1.0, 1.0 + 1e-16]])  # PSD up to round-off
    w = gaussian_w2([0.0, 0.0], c, [1e-9, 0.0], c * (1 + 1e-15))
    assert np.isfinite(w) and w >= 0


def test_batched_over_leading_dimensions():
    rng = np.random.default_rng(2)
    means = rng.standard_normal((4, 3, 2))
    z = rng.standard_normal((4, 3, 2, 2))
    covs = z @ np.swapaxes(z, -1, -2) + 0.1 * np.eye(2)
    batched = gaussian_w2(means, covs, np.zeros(2), np.eye(2))
    assert batched.shape == (4, 3)
    for i in range(4):
        for j in range(3):
            assert batched[i, j] == pytest.approx(gaussian_w2(means[i, j], covs[i, j], np.zeros(2), np.eye(2)), abs=1e-12)


def test_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    w = gaussian_w2(torch.zeros(2), torch.eye(2), torch.ones(2), 4 * torch.eye(2))
    assert w == pytest.approx(np.sqrt(2 + 2), abs=1e-10)


def test_fitted_gaussian_uses_ddof_one():
    x = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]])
    m, c = fitted_gaussian(x)
    np.testing.assert_allclose(m, [2 / 3, 2 / 3])
    np.testing.assert_allclose(c, np.cov(x, rowvar=False, ddof=1))
    assert empirical_gaussian_w2(x, m, c) == 0.0


def test_floor_matches_asymptotic_scale():
    """For n exact draws of N(0, I_d) the fitted W2 is O(sqrt(d / n)); the mean W2^2 is about
    d/n (mean error) + d(d+1)/(4n) (covariance error, W2^2 ≈ ||S - I||_F^2 / 4 for S ≈ I)."""
    d, n = 2, 400
    floor = w2_floor(np.zeros(d), np.eye(d), n, repeats=2000, seed=0)
    approx = np.sqrt(d / n + d * (d + 1) / (4 * n))
    assert 0.7 * approx < floor.mean < 1.1 * approx
    assert floor.q05 < floor.mean < floor.q95


@pytest.mark.parametrize(
    "args,name",
    [
        (([0.0], [[1.0, 0.0]], [0.0], [[1.0]]), "cov1"),
        (([0.0, 0.0], np.eye(2), [0.0], [[1.0]]), "mean1 and mean2"),
        (([np.nan], [[1.0]], [0.0], [[1.0]]), "finite"),
    ],
)
def test_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        gaussian_w2(*args)
