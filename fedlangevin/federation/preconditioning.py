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

Two built-in forms, both implementing the preconditioner contract
(:data:`fedlangevin.federation.contracts.PRECONDITIONER`; a class of your own that implements it runs
too):

- dense, :class:`~fedlangevin.federation.extensions.FactorPreconditioner` with A the Cholesky factor
  of M (broadcast: the d (d + 1) / 2 entries of A);
- :class:`DiagonalPreconditioner`, M = diag(m), A = diag(sqrt(m)) (broadcast: d numbers).

:func:`as_preconditioner` makes one from a matrix or a vector; M = I gives
:class:`~fedlangevin.federation.extensions.IdentityPreconditioner`, which the kernel treats as no
preconditioner at all (the plain round, bit for bit).
"""

from __future__ import annotations

from typing import Any

import torch

from fedlangevin.federation.contracts import PRECONDITIONER, check_conforms
from fedlangevin.federation.extensions import FactorPreconditioner, IdentityPreconditioner, check_preconditioner

__all__ = [
    "BUILT", "DiagonalPreconditioner", "RoundPreconditioner", "as_preconditioner", "broadcast_floats", "is_identity", "placed", "preconditioner_matrix",
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

    def to(self, device=None, dtype=None) -> "DiagonalPreconditioner":
        new = object.__new__(DiagonalPreconditioner)
        new.diagonal = self.diagonal.to(device=device, dtype=dtype)
        new.root = self.root.to(device=device, dtype=dtype)
        return new

    def drift(self, grad: torch.Tensor) -> torch.Tensor:
        return grad * self.diagonal

    def noise(self, xi: torch.Tensor) -> torch.Tensor:
        return xi * self.root

    @property
    def matrix(self) -> torch.Tensor:
        """M = diag(m) (d, d)."""
        return torch.diag(self.diagonal)

    @property
    def factor(self) -> torch.Tensor:
        """A = diag(sqrt(m)) (d, d)."""
        return torch.diag(self.root)

    def broadcast_floats(self, dim: int) -> int:
        """The d entries of m."""
        return dim

    def spectral_norm(self) -> float:
        return float(self.diagonal.max())

    def record(self) -> dict:
        return {"kind": "diagonal", "values": self.diagonal.double().cpu().tolist()}

    def __repr__(self) -> str:
        return f"DiagonalPreconditioner(d={self.diagonal.numel()})"


def _describe(t: torch.Tensor) -> str:
    if t.dim() != 1:
        return f"shape {tuple(t.shape)}"
    bad = "non-finite entries" if not torch.isfinite(t).all() else f"min {float(t.min()):.3g}"
    return f"d = {t.numel()}, {bad}"


def is_identity(pre) -> bool:
    """``pre`` is no preconditioner at all: ``None`` or :class:`IdentityPreconditioner` (the kernel then
    keeps its fast paths, and the round is the plain one bit for bit)."""
    return pre is None or isinstance(pre, IdentityPreconditioner)


def as_preconditioner(matrix: Any, dim: int | None = None, name: str = "matrix"):
    """A preconditioner for M: a (d, d) symmetric positive-definite matrix (dense, A = chol(M))
    or a (d,) positive vector (diagonal), or an object implementing the preconditioner contract
    (:data:`~fedlangevin.federation.contracts.PRECONDITIONER`: ``drift``, ``noise``, ``matrix``; the built-in
    ones and a class of your own are returned as they are, after checking that M is (d, d)). M = I
    (exactly) gives the identity, i.e. the plain kernel. ``dim``: the problem's d, checked.
    ``ValueError`` naming ``name`` otherwise."""
    if isinstance(matrix, IdentityPreconditioner):
        return matrix
    if isinstance(matrix, DiagonalPreconditioner):  # its own: d from the diagonal, no dense diag(m) (O(d))
        size = matrix.diagonal.numel()
        if dim is not None and size != dim:
            raise ValueError(f"{name}: {matrix!r} is for d = {size}; the problem has d = {dim}")
        return matrix
    if hasattr(matrix, "drift") or hasattr(matrix, "noise"):  # an object: it must implement the contract
        check_conforms(matrix, PRECONDITIONER, name)
        if dim is not None:
            shape = tuple(preconditioner_matrix(matrix, dim).shape)
            if shape != (dim, dim):
                raise ValueError(f"{name}: {matrix!r} is for d = {shape[0] if shape else 0}; the problem has d = {dim} "
                                 f"(its M has shape {shape}, it must be ({dim}, {dim}))")
        return matrix
    try:
        m = torch.as_tensor(matrix, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be None, a (d, d) symmetric positive-definite matrix M, a (d,) vector of "
                         "positive numbers (M diagonal), an IdentityPreconditioner, FactorPreconditioner or "
                         "DiagonalPreconditioner, or an object implementing the preconditioner contract (drift, "
                         f"noise, matrix); got {type(matrix).__name__} {matrix!r:.80}") from None
    d = m.shape[0] if m.dim() >= 1 else None
    if m.dim() not in (1, 2) or (m.dim() == 2 and m.shape[0] != m.shape[1]) or (dim is not None and d != dim):
        want = "(d,) or (d, d)" if dim is None else f"({dim},) or ({dim}, {dim})"
        raise ValueError(f"{name} must have shape {want}; got {tuple(m.shape)}")
    if not torch.isfinite(m).all():
        raise ValueError(f"{name} must be finite")
    eye = torch.ones(d, dtype=torch.float64) if m.dim() == 1 else torch.eye(d, dtype=torch.float64)
    if torch.equal(m, eye):
        return IdentityPreconditioner()
    if m.dim() == 1:
        return DiagonalPreconditioner(m)
    if not torch.allclose(m, m.T, rtol=1e-10, atol=1e-12 * float(m.abs().max())):
        raise ValueError(f"{name} must be symmetric")
    factor, info = torch.linalg.cholesky_ex(0.5 * (m + m.T))  # rounding-level asymmetry averaged out
    if int(info) != 0:
        raise ValueError(f"{name} must be positive definite (its Cholesky factorisation failed)")
    return FactorPreconditioner(factor)


def placed(pre, device, dtype):
    """``pre`` on ``device`` in ``dtype`` (its optional ``to``; one without it is used as it is)."""
    return pre.to(device=device, dtype=dtype) if callable(getattr(pre, "to", None)) else pre


#: a kernel ``step``'s default for an argument (M; FA-HMC's friction): what the kernel was built with
BUILT = object()


class RoundPreconditioner:
    """A kernel's M round by round, M being a ``step`` argument like the step sizes (FA-LD's and
    FA-HMC's kernels). :meth:`resolve` makes a given M the kernel's: ``convert(given)`` gives the
    preconditioner object, or None for I (a ``ValueError`` naming ``preconditioner`` for anything
    else), which is placed on the state's ``device`` in ``dtype`` with its ``drift`` and ``noise``
    checked (:func:`~fedlangevin.federation.extensions.check_preconditioner`). :attr:`built` is the M
    given when the kernel was built, a step's default (:data:`BUILT`). A runner passes the same
    object round after round, so a given M is resolved once per new object (a one-entry cache)."""

    def __init__(self, given: Any, convert, dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self.convert, self.dim, self.dtype, self.device = convert, dim, dtype, device
        self.built = self.resolve(given)
        self._last = (None, None)  # the M last given to a step, and its resolved form (None: I)

    def resolve(self, given: Any) -> Any:
        pre = self.convert(given)
        if pre is None:
            return None
        pre = placed(pre, self.device, self.dtype)
        check_preconditioner(pre, self.dim, self.dtype, self.device)
        return pre

    def __call__(self, given: Any = BUILT) -> Any:
        """The resolved M of a round: the built one, or ``given``'s."""
        if given is BUILT:
            return self.built
        if given is not self._last[0]:
            self._last = (given, self.resolve(given))
        return self._last[1]


def _member(pre, name: str):
    value = getattr(pre, name)
    return value() if callable(value) else value


def preconditioner_matrix(pre, dim: int) -> torch.Tensor:
    """M (d, d) float64 on the CPU of a preconditioner (``None`` or the identity: I)."""
    if is_identity(pre):
        return torch.eye(dim, dtype=torch.float64)
    return torch.as_tensor(_member(pre, "matrix")).detach().to(device="cpu", dtype=torch.float64)


def spectral_norm(pre, dim: int) -> float:
    """lambda_max(M): a client's update in z moves theta by at most sqrt(lambda_max(M)) times
    its size, so gradient sensitivities scale by sqrt of this (see :mod:`fedlangevin.privacy`)."""
    if is_identity(pre):
        return 1.0
    if callable(getattr(pre, "spectral_norm", None)):
        return float(pre.spectral_norm())
    return float(torch.linalg.eigvalsh(preconditioner_matrix(pre, dim)).max())


def broadcast_floats(pre, dim: int) -> int:
    """Numbers the server sends each client when it installs ``pre``: the preconditioner's own
    ``broadcast_floats(dim)`` (a triangular factor's d (d + 1) / 2 without one), 0 for the identity."""
    if is_identity(pre):
        return 0
    own = getattr(pre, "broadcast_floats", None)
    return int(own(dim)) if callable(own) else dim * (dim + 1) // 2


def preconditioner_record(pre) -> dict:
    """A plain record (for checkpoints): {"kind": ..., "values": list}. A preconditioner of a class
    of your own is stored as {"kind": "user", "class": its name, "matrix": M}: it is not rebuilt from
    the checkpoint (no code is loaded from a file) but given again to ``FALD.resume(preconditioner=)``
    and checked against M."""
    if is_identity(pre):
        return {"kind": "identity"}
    if isinstance(pre, (FactorPreconditioner, DiagonalPreconditioner)):
        return pre.record()
    return {"kind": "user", "class": type(pre).__qualname__,
            "matrix": preconditioner_matrix(pre, 0).tolist()}


def preconditioner_from_record(record: dict, given=None):
    """The preconditioner a checkpoint stored (:func:`preconditioner_record`); a ``"user"`` record
    needs the same preconditioner ``given`` (checked: same class name, same M)."""
    kind = record.get("kind")
    if kind == "identity":
        return IdentityPreconditioner()
    if kind == "diagonal":
        return DiagonalPreconditioner(record["values"])
    if kind == "factor":
        return FactorPreconditioner(record["values"])
    if kind == "user":
        if given is None:
            raise ValueError(f"preconditioner: the checkpoint ran with a preconditioner of your own class "
                             f"{record.get('class')!r}; give it again: FALD.resume(path, preconditioner=...)")
        if preconditioner_record(given) != record:
            raise ValueError(f"preconditioner: the given {type(given).__qualname__} differs from the checkpoint's "
                             f"{record.get('class')!r} (class name or M)")
        return given
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
    if is_identity(pre):
        return torch.eye(dim, dtype=torch.float64)
    if hasattr(pre, "factor"):
        return torch.as_tensor(_member(pre, "factor")).detach().to(device="cpu", dtype=torch.float64)
    return torch.linalg.cholesky(preconditioner_matrix(pre, dim))
