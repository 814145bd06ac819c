"""Preconditioned FA-LD: a fixed M = A A^T, clients step in z with theta = theta_0 + A z.

Langevin dynamics on g(z) = f(theta_0 + A z) has gradient A^T grad f and unit-metric noise;
read in theta, each local step of eq. 10 becomes

    beta^c <- beta^c - eta M grad f~^c(beta^c) + A (sqrt(2 eta tau rho^2) xi_shared
                                                   + sqrt(2 eta tau (1 - rho^2) / p_c) xi^c),

and because theta -> z is affine, the server's weighted average of the clients' z is the z of
the weighted average of their theta. So the preconditioned sampler *is* FA-LD (Deng et al.,
Alg. 1, eq. 10 with eq. 14's noise) run on the energies g^c(z) = f^c(theta_0 + A z): the
paper's analysis, the exact moments of :mod:`fedlangevin.experiments.exact` (through
:func:`transformed_quadratic`) and the W2 checks carry over, with the smoothness and convexity
constants of the preconditioned Hessians A^T H_c A. Its stationary law in theta is still
pi ∝ exp(-f / tau) (M constant, symmetric positive definite).

Two forms, both :class:`~fedlangevin.fald.extensions.Preconditioner`:

- dense, :class:`~fedlangevin.fald.extensions.FactorPreconditioner` with A the Cholesky factor
  of M (broadcast: the d (d + 1) / 2 entries of A);
- :class:`DiagonalPreconditioner`, M = diag(m), A = diag(sqrt(m)) (broadcast: d numbers).

:func:`as_preconditioner` makes one from a matrix or a vector; M = I gives
:class:`~fedlangevin.fald.extensions.IdentityPreconditioner`, which the kernel treats as no
preconditioner at all (the plain round, bit for bit).
"""

from __future__ import annotations

from typing import Any

import torch

from fedlangevin.fald.extensions import FactorPreconditioner, IdentityPreconditioner

__all__ = [
    "DiagonalPreconditioner", "as_preconditioner", "broadcast_floats", "preconditioner_matrix",
    "preconditioner_record", "preconditioner_from_record", "spectral_norm", "transformed_quadratic",
]


class DiagonalPreconditioner:
    """M = diag(m), A = diag(sqrt(m)), m > 0 (d,): a per-coordinate scale (for large d)."""

    def __init__(self, diagonal: Any) -> None:
        m = torch.as_tensor(diagonal, dtype=torch.float64)
        if m.dim() != 1 or m.numel() < 1 or not torch.isfinite(m).all() or bool((m <= 0).any()):
            raise ValueError(f"diagonal must be a finite vector (d,) of positive numbers; got {_describe(m)}")
        self.diagonal = m
        self.root = m.sqrt()

    @property
    def dim(self) -> int:
        """d, the dimension this preconditioner is for."""
        return int(self.diagonal.numel())

    def to(self, device=None, dtype=None) -> "DiagonalPreconditioner":
        new = object.__new__(DiagonalPreconditioner)
        new.diagonal = self.diagonal.to(device=device, dtype=dtype)
        new.root = self.root.to(device=device, dtype=dtype)
        return new

    def drift(self, grad: torch.Tensor) -> torch.Tensor:
        return grad * self.diagonal

    def noise(self, xi: torch.Tensor) -> torch.Tensor:
        return xi * self.root

    def __repr__(self) -> str:
        return f"DiagonalPreconditioner(d={self.diagonal.numel()})"


def _describe(t: torch.Tensor) -> str:
    if t.dim() != 1:
        return f"shape {tuple(t.shape)}"
    bad = "non-finite entries" if not torch.isfinite(t).all() else f"min {float(t.min()):.3g}"
    return f"d = {t.numel()}, {bad}"


def as_preconditioner(matrix: Any, dim: int | None = None):
    """A preconditioner for M: a (d, d) symmetric positive-definite matrix (dense, A = chol(M))
    or a (d,) positive vector (diagonal). M = I (exactly) gives the identity, i.e. the plain
    kernel. A preconditioner object (identity, factor, diagonal) is returned as it is, its d
    checked. ``dim``: the problem's d, checked. ``ValueError`` naming ``matrix`` (or
    ``preconditioner``) otherwise."""
    if isinstance(matrix, (IdentityPreconditioner, FactorPreconditioner, DiagonalPreconditioner)):
        own = getattr(matrix, "dim", None)
        if dim is not None and own is not None and own != dim:
            raise ValueError(f"preconditioner: {matrix!r} is for d = {own}; the problem has d = {dim}")
        return matrix
    try:
        m = torch.as_tensor(matrix, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError("preconditioner must be None, a (d, d) symmetric positive-definite matrix M, a (d,) vector "
                         "of positive numbers (M diagonal), or an IdentityPreconditioner, FactorPreconditioner or "
                         f"DiagonalPreconditioner; got {type(matrix).__name__} {matrix!r:.80}") from None
    d = m.shape[0] if m.dim() >= 1 else None
    if m.dim() not in (1, 2) or (m.dim() == 2 and m.shape[0] != m.shape[1]) or (dim is not None and d != dim):
        want = "(d,) or (d, d)" if dim is None else f"({dim},) or ({dim}, {dim})"
        raise ValueError(f"matrix must have shape {want}; got {tuple(m.shape)}")
    if not torch.isfinite(m).all():
        raise ValueError("matrix must be finite")
    eye = torch.ones(d, dtype=torch.float64) if m.dim() == 1 else torch.eye(d, dtype=torch.float64)
    if torch.equal(m, eye):
        return IdentityPreconditioner()
    if m.dim() == 1:
        return DiagonalPreconditioner(m)
    if not torch.allclose(m, m.T, rtol=1e-10, atol=1e-12 * float(m.abs().max())):
        raise ValueError("matrix must be symmetric")
    factor, info = torch.linalg.cholesky_ex(0.5 * (m + m.T))  # rounding-level asymmetry averaged out
    if int(info) != 0:
        raise ValueError("matrix must be positive definite (its Cholesky factorisation failed)")
    return FactorPreconditioner(factor)


def preconditioner_matrix(pre, dim: int) -> torch.Tensor:
    """M (d, d) float64 of a preconditioner (``None`` or the identity: I)."""
    if pre is None or isinstance(pre, IdentityPreconditioner):
        return torch.eye(dim, dtype=torch.float64)
    if isinstance(pre, DiagonalPreconditioner):
        return torch.diag(pre.diagonal.double().cpu())
    if isinstance(pre, FactorPreconditioner):
        return pre.matrix.double().cpu()
    raise ValueError(f"preconditioner must be an identity, factor or diagonal preconditioner; got {pre!r}")


def spectral_norm(pre, dim: int) -> float:
    """lambda_max(M): a client's update in z moves theta by at most sqrt(lambda_max(M)) times
    its size, so gradient sensitivities scale by sqrt of this (see :mod:`fedlangevin.privacy`)."""
    if pre is None or isinstance(pre, IdentityPreconditioner):
        return 1.0
    if isinstance(pre, DiagonalPreconditioner):
        return float(pre.diagonal.max())
    return float(torch.linalg.eigvalsh(preconditioner_matrix(pre, dim)).max())


def broadcast_floats(pre, dim: int) -> int:
    """Numbers the server sends each client when it installs ``pre``: the d (d + 1) / 2 entries
    of the triangular factor (dense), d (diagonal), 0 (identity)."""
    if pre is None or isinstance(pre, IdentityPreconditioner):
        return 0
    if isinstance(pre, DiagonalPreconditioner):
        return dim
    return dim * (dim + 1) // 2


def preconditioner_record(pre) -> dict:
    """A plain record (for checkpoints): {"kind": ..., "values": list}."""
    if pre is None or isinstance(pre, IdentityPreconditioner):
        return {"kind": "identity"}
    if isinstance(pre, DiagonalPreconditioner):
        return {"kind": "diagonal", "values": pre.diagonal.double().cpu().tolist()}
    return {"kind": "factor", "values": pre.factor.double().cpu().tolist()}


def preconditioner_from_record(record: dict):
    kind = record.get("kind")
    if kind == "identity":
        return IdentityPreconditioner()
    if kind == "diagonal":
        return DiagonalPreconditioner(record["values"])
    if kind == "factor":
        return FactorPreconditioner(record["values"])
    raise ValueError(f"preconditioner record has an unknown kind {kind!r}")


def transformed_quadratic(problem, pre, origin: Any = None):
    """The quadratic problem in z, theta = theta_0 + A z: hessians A^T A_c A and shifts
    A^T (b_c - A_c theta_0) (``origin`` theta_0, default 0). The preconditioned kernel on
    ``problem`` is the plain kernel on this problem (read through theta = theta_0 + A z), so
    the exact moments of :mod:`fedlangevin.experiments.exact` apply to it."""
    from fedlangevin.problems.gaussian import QuadraticProblem

    form = problem.quadratic()
    if form is None:
        raise ValueError("problem must have affine gradients (a QuadraticProblem)")
    d = problem.dim
    a_mat = _factor(pre, d)
    h = form.hessian.double().cpu()
    b = form.shift.double().cpu()
    theta0 = torch.zeros(d, dtype=torch.float64) if origin is None else torch.as_tensor(origin, dtype=torch.float64)
    h_full = h if h.dim() == 3 else h.expand(problem.num_clients, d, d)
    shifts = (b - torch.einsum("nij,j->ni", h_full, theta0)) @ a_mat
    hz = a_mat.T @ h @ a_mat
    return QuadraticProblem(0.5 * (hz + hz.transpose(-1, -2)), shifts, problem.weights)


def _factor(pre, dim: int) -> torch.Tensor:
    if pre is None or isinstance(pre, IdentityPreconditioner):
        return torch.eye(dim, dtype=torch.float64)
    if isinstance(pre, DiagonalPreconditioner):
        return torch.diag(pre.root.double().cpu())
    return pre.factor.double().cpu()
