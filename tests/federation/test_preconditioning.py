"""Preconditioned FA-LD (fald/preconditioning.py): M = I is the plain kernel bit for bit, the two
forms agree, and the exact Gaussian moments of the z-problem are the engine's law."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.experiments.exact import exact_moments
from fedlangevin.fald.engine import build
from fedlangevin.federation.extensions import FactorPreconditioner, IdentityPreconditioner
from fedlangevin.federation.preconditioning import (
    DiagonalPreconditioner, as_preconditioner, broadcast_floats, preconditioner_from_record, preconditioner_matrix,
    preconditioner_record, spectral_norm, transformed_quadratic,
)

from tests.targets import random_quadratic

pytestmark = pytest.mark.usefixtures("one_torch_thread")
F64 = torch.float64


def _quadratic(n=4, d=3, seed=0):
    return random_quadratic(n, d, seed, random_weights=False)


def _spd(d, seed=5):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(d, d, generator=g, dtype=F64)
    return q @ q.T / d + 0.5 * torch.eye(d, dtype=F64)


@pytest.mark.parametrize("identity", [torch.eye(3, dtype=F64), torch.ones(3, dtype=F64)])
def test_identity_matrix_is_the_plain_kernel_bit_for_bit(identity):
    problem = _quadratic()
    pre = as_preconditioner(identity, 3)
    assert isinstance(pre, IdentityPreconditioner)
    theta0 = torch.randn(5, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    for kernel_name in ("small", "dense", "gradient"):
        plain, pc = build(problem, 1.0, 0.4, kernel=kernel_name), build(problem, 1.0, 0.4, kernel=kernel_name, preconditioner=pre)
        a, b = plain.init(theta0), pc.init(theta0)
        ga, gb = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        for _ in range(4):
            a, _ = plain.step(a, [1e-2] * 3, ga)
            b, _ = pc.step(b, [1e-2] * 3, gb)
        assert torch.equal(a.theta, b.theta)


def test_runner_with_identity_preconditioner_is_bit_identical():
    problem = _quadratic()
    a = fl.FALD(problem, step_size=1e-2, local_steps=2, chains=4, seed=9).run(5, progress=False)
    b = fl.FALD(problem, step_size=1e-2, local_steps=2, chains=4, seed=9, preconditioner=torch.eye(3)).run(5, progress=False)
    assert torch.equal(torch.as_tensor(a.samples), torch.as_tensor(b.samples))


def test_diagonal_equals_the_dense_form_of_the_same_matrix():
    problem = _quadratic()
    m = torch.tensor([0.5, 2.0, 3.0], dtype=F64)
    diag, dense = as_preconditioner(m), FactorPreconditioner(torch.diag(m.sqrt()))
    assert isinstance(diag, DiagonalPreconditioner)
    out = []
    for pre in (diag, dense):
        kernel = build(problem, 1.0, 0.3, preconditioner=pre)
        state, g = kernel.init(torch.zeros(6, 3, dtype=F64)), torch.Generator().manual_seed(2)
        for _ in range(5):
            state, _ = kernel.step(state, [1e-2] * 2, g)
        out.append(state.theta)
    torch.testing.assert_close(out[0], out[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k,rho,rounds", [(1, 0.0, 6), (4, 0.5, 2)])
def test_engine_law_is_the_exact_moments_of_the_z_problem(k, rho, rounds):
    """theta = A z with z running plain FA-LD on A^T A_c A, A^T b_c: the engine's R = 20,000 chains
    match A m_z and A S_z A^T after the rounds within 5 Monte Carlo standard errors (mean:
    sqrt(var / R); covariance entries: sqrt((S_ii S_jj + S_ij^2) / R), Gaussian-based)."""
    problem = _quadratic(n=3, d=3, seed=1)
    pre = as_preconditioner(_spd(3))
    r, eta = 20_000, 0.05
    kernel = build(problem, 1.0, rho, preconditioner=pre)
    state, g = kernel.init(torch.zeros(r, 3, dtype=F64)), torch.Generator().manual_seed(4)
    for _ in range(rounds):
        state, _ = kernel.step(state, [eta] * k, g)
    zp = transformed_quadratic(problem, pre)
    a = pre.factor.numpy()
    means, covs = exact_moments(zp, [[eta] * k] * rounds, correlation=rho)
    mean, cov = a @ means[-1], a @ covs[-1] @ a.T
    x = state.theta.numpy()
    v = np.diag(cov)
    assert np.all(np.abs(x.mean(0) - mean) < 5 * np.sqrt(v / r))
    se = np.sqrt((np.outer(v, v) + cov**2) / r)
    assert np.all(np.abs(np.cov(x.T) - cov) < 5 * se)
    # and the preconditioner matters: the plain kernel's law is far from it
    plain_means, plain_covs = exact_moments(problem, [[eta] * k] * rounds, correlation=rho)
    gap = max(np.max(np.abs(plain_means[-1] - mean) / np.sqrt(v / r)), np.max(np.abs(plain_covs[-1] - cov) / se))
    assert gap > 10


def test_stationary_law_is_still_the_posterior():
    """M changes the path, not the target: the z-problem's posterior mapped back is the problem's."""
    problem = _quadratic()
    pre = as_preconditioner(_spd(3))
    mz, sz = transformed_quadratic(problem, pre).posterior()
    a = pre.factor
    m, s = problem.posterior()
    torch.testing.assert_close(a @ mz, m)
    torch.testing.assert_close(a @ sz @ a.T, s)


def test_sizes_norms_and_records():
    m = _spd(4)
    dense, diag = as_preconditioner(m), as_preconditioner(torch.diag(m))
    assert broadcast_floats(dense, 4) == 10 and broadcast_floats(diag, 4) == 4
    assert broadcast_floats(IdentityPreconditioner(), 4) == 0
    assert spectral_norm(dense, 4) == pytest.approx(float(torch.linalg.eigvalsh(m).max()))
    assert spectral_norm(diag, 4) == pytest.approx(float(torch.diag(m).max()))
    for pre in (dense, diag, IdentityPreconditioner()):
        back = preconditioner_from_record(preconditioner_record(pre))
        assert preconditioner_record(back) == preconditioner_record(pre)
        torch.testing.assert_close(preconditioner_matrix(back, 4), preconditioner_matrix(pre, 4), rtol=1e-15, atol=0)


@pytest.mark.parametrize("bad,match", [
    (torch.ones(2, 3), "shape"), (torch.tensor([1.0, -1.0, 1.0]), "positive"),
    (torch.tensor([[1.0, 2.0, 0], [2.0, 1.0, 0], [0, 0, 1.0]]), "positive definite"),
    (torch.tensor([[1.0, 0.5, 0], [0.0, 1.0, 0], [0, 0, 1.0]]), "symmetric"), (torch.eye(2), "shape"),
])
def test_bad_matrices_are_value_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        as_preconditioner(bad, 3)


def test_a_diagonal_preconditioner_is_taken_without_its_dense_matrix(monkeypatch):
    # the samplers hand their adapted diagonal M to the kernel through as_preconditioner: O(d),
    # no dense diag(m) (d = 25,450 would make it 4.8 GiB)
    from fedlangevin.federation.preconditioning import DiagonalPreconditioner, as_preconditioner

    pre = DiagonalPreconditioner(torch.arange(1.0, 6.0))
    monkeypatch.setattr(DiagonalPreconditioner, "matrix", property(lambda self: pytest.fail("dense diag(m) built")))
    assert as_preconditioner(pre, 5) is pre
    with pytest.raises(ValueError, match="is for d = 5; the problem has d = 4"):
        as_preconditioner(pre, 4)
