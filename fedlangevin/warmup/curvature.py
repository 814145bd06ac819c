"""Curvature from gradients: the central difference every curvature estimate of the package uses.

A problem gives gradients (any problem's ``grad`` serves, no autodiff needed), so Hessians
and Hessian-vector products are read off central differences of the gradients, unless the problem
gives exact Hessian-vector products itself (``client_hvp``: logistic regression analytically, the
autodiff problems by ``torch.func``), which :func:`gradient_difference` then uses,

    H_c s ~ (grad f^c(theta + s) - grad f^c(theta - s)) / 2 h,   s = h u,

with error O(h^2) (exact for quadratic energies up to rounding). :func:`gradient_difference`
is the numerator for every client at once; its callers divide by their own 2 h (and weight and
sum over clients, or not, in their own order): the step-size rule's power iteration and the
Laplace start of M (:mod:`fedlangevin.warmup.adaptation`), the client Hessians of the MAP search
(:mod:`fedlangevin.warmup.mode`) and of the drift corrections' surrogates
(:mod:`fedlangevin.corrections.base`).

Above the dense limit (d > :data:`~fedlangevin.warmup.adaptation.DENSE_MAX_DIM`) no default path
forms a d x d matrix: :func:`extreme_curvatures` gives the extreme eigenvalues of the chains' mean
preconditioned Hessian by Lanczos on Hessian-vector products (2 gradient calls per product, for all
chains and clients at once), O(d) memory per chain and client.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedlangevin.federation.preconditioning import is_identity, placed

__all__ = ["LANCZOS_ITERATIONS", "POWER_ITERATIONS", "client_hessian_diagonals", "curvature_at", "diagonal_of", "extreme_curvatures",
           "gradient_difference", "max_curvature", "mean_hessian"]

#: power-iteration sweeps per step-size estimate
POWER_ITERATIONS = 20
#: Lanczos steps (Hessian-vector products) of :func:`extreme_curvatures`
LANCZOS_ITERATIONS = 40
#: displaced points per ``grad`` call in :func:`mean_hessian` (its memory is that of one call)
HESSIAN_CHUNK = 512


def gradient_difference(problem, points: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """grad f^c(points + steps) - grad f^c(points - steps) for every client c, (B, N, d).

    ``points``: (B, 1, d) or (B, N, d), where each client's gradient is taken; ``steps``: the
    displacements s, broadcastable to ``points`` ((B, 1, d): the same for every client, (B, N, d):
    one per client). Both evaluations are batched in one ``grad`` call each, on contiguous
    (B, N, d) tensors. A problem with Hessian-vector products of its own, ``client_hvp(points, vectors)``
    ((B, N, d) each; :meth:`LogisticRegression.client_hvp <fedlangevin.problems.LogisticRegression.client_hvp>`,
    the autodiff problems' ``torch.func`` products), gives the difference's limit 2 H_c(points) s instead:
    exact, no step h to choose (its ``None``: central differences after all).
    """
    full = (max(points.shape[0], steps.shape[0]), problem.num_clients, problem.dim)
    hvp = getattr(problem, "client_hvp", None)
    if hvp is not None:  # the difference's limit, 2 H_c(points) s, exactly (the callers divide by 2 h)
        exact = hvp(points.expand(full).contiguous(), steps.expand(full).contiguous())
        if exact is not None:  # None: no exact product for this problem after all (central differences)
            return 2.0 * exact
    plus, minus = points + steps, points - steps
    return problem.grad(plus.expand(full).contiguous()) - problem.grad(minus.expand(full).contiguous())


def max_curvature(problem, theta: torch.Tensor, pre=None, *, per_client: bool, iterations: int = POWER_ITERATIONS,
                  generator: torch.Generator | None = None) -> float:
    """lambda_max of M H at the iterates ``theta`` (R, d), maximised over chains (and clients
    when ``per_client``), by power iteration u <- M H u with H u from central gradient
    differences (H u ~ (grad(theta + h u) - grad(theta - h u)) / 2h). ``problem`` in float64."""
    r, d = theta.shape
    n = problem.num_clients
    weights = problem.weights.to(device=theta.device, dtype=theta.dtype)
    shape = (r, n, d) if per_client else (r, 1, d)
    u = torch.randn(shape, generator=generator, dtype=theta.dtype, device="cpu").to(theta.device)
    u = u / torch.linalg.vector_norm(u, dim=-1, keepdim=True)
    scale = 1e-5 * (1.0 + torch.linalg.vector_norm(theta, dim=-1))[:, None, None]
    lam = torch.zeros(shape[:2], dtype=theta.dtype, device=theta.device)
    for _ in range(iterations):
        hu = gradient_difference(problem, theta[:, None, :], scale * u) / (2 * scale)
        if not per_client:
            hu = (weights[None, :, None] * hu).sum(1, keepdim=True)
        mhu = hu if pre is None else pre.drift(hu)
        norm = torch.linalg.vector_norm(mhu, dim=-1)
        lam = norm
        u = mhu / norm.clamp_min(torch.finfo(theta.dtype).tiny)[..., None]
    value = float(lam.max())
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"step_size='auto': the curvature estimate at the current iterates is {value!r} (non-finite "
                         "gradients or a flat energy); give a number as step_size")
    return value


def curvature_at(problem, theta: torch.Tensor, preconditioner: Any, seed: int, *, per_client: bool) -> float:
    """:func:`max_curvature` at the chains' iterates ``theta`` (R, d), in float64 on their device:
    ``preconditioner`` M (identity or None: I) placed there, the problem converted, the power
    iteration's start drawn from a generator seeded with ``seed`` (the local-step checks' stability)."""
    x = theta.detach().to(dtype=torch.float64)
    pre = None if is_identity(preconditioner) else placed(preconditioner, x.device, torch.float64)
    work = problem.to(device=x.device, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    return max_curvature(work, x, pre, per_client=per_client, generator=gen)


def mean_hessian(problem, theta: torch.Tensor) -> torch.Tensor:
    """The global Hessian sum_c p_c H_c averaged over the iterates ``theta`` (R, d), (d, d), from
    central gradient differences along the d coordinate axes (2 d gradient calls per chain,
    batched HESSIAN_CHUNK displaced points at a time); ``problem`` in float64. A dense-limit tool:
    the callers above the limit use :func:`extreme_curvatures`."""
    r, d = theta.shape
    weights = problem.weights.to(device=theta.device, dtype=theta.dtype)
    h = 1e-5 * (1.0 + theta.abs())  # (R, d) per-coordinate step
    eye = torch.eye(d, dtype=theta.dtype, device=theta.device)
    step = (h[:, :, None] * eye).reshape(r * d, 1, d)  # row (chain, j) moves coordinate j
    base = theta[:, None, :].expand(r, d, d).reshape(r * d, 1, d)
    diff = torch.cat([(gradient_difference(problem, base[i:i + HESSIAN_CHUNK], step[i:i + HESSIAN_CHUNK])
                       * weights[None, :, None]).sum(1) for i in range(0, r * d, HESSIAN_CHUNK)]).reshape(r, d, d)
    hess = (diff / (2 * h[:, :, None])).mean(0)
    return 0.5 * (hess + hess.T)


def client_hessian_diagonals(problem, theta: torch.Tensor) -> torch.Tensor:
    """The diagonals (N, d) of the client Hessians of f^c at one point theta (d,): the problem's own
    ``client_hessian_diagonal(theta)`` when it has one (logistic regression, analytic), else central
    differences of the gradients coordinate by coordinate (2 d gradient evaluations, in blocks of at
    most 2^24 numbers: memory bounded, no (N, d, d) array)."""
    own = getattr(problem, "client_hessian_diagonal", None)
    if own is not None:
        return own(theta)
    n, d = problem.num_clients, problem.dim
    out = torch.empty(n, d, dtype=theta.dtype, device=theta.device)
    block = max(1, min(d, (1 << 24) // max(1, n * d)))
    for start in range(0, d, block):
        idx = torch.arange(start, min(d, start + block), device=theta.device)
        h = 1e-5 * (1.0 + theta[idx].abs())
        step = torch.zeros(len(idx), d, dtype=theta.dtype, device=theta.device)
        step[torch.arange(len(idx)), idx] = h
        diff = gradient_difference(problem, theta[None, None, :], step[:, None, :]) / (2 * h[:, None, None])  # (j, N, d)
        out[:, idx] = diff[torch.arange(len(idx)), :, idx].T
    return out


def diagonal_of(pre, dim: int) -> torch.Tensor | None:
    """M's diagonal (d,) float64 when M is the identity (``None`` too) or diagonal, else None (no
    d x d matrix is formed)."""
    if is_identity(pre):
        return torch.ones(dim, dtype=torch.float64)
    values = getattr(pre, "diagonal", None)
    if isinstance(values, torch.Tensor) and values.dim() == 1 and values.numel() == dim:
        return values.detach().to(device="cpu", dtype=torch.float64)
    return None


def extreme_curvatures(problem, theta: torch.Tensor, diagonal: torch.Tensor | None = None, *,
                       iterations: int = LANCZOS_ITERATIONS,
                       generator: torch.Generator | None = None) -> tuple[float, float]:
    """(lambda_min, lambda_max) of M H_bar, H_bar = the chains' mean global Hessian
    mean_r sum_c p_c H_c(theta_r) at the iterates ``theta`` (R, d), M = diag(``diagonal``) (None: I).

    Lanczos (with full reorthogonalisation) on the symmetric A H_bar A, A = M^(1/2), whose spectrum is
    M H_bar's: ``iterations`` products H_bar v, each from central gradient differences at all chains
    and clients at once (2 ``grad`` calls of R x N points), so memory O(iterations d + R N d) and no
    d x d matrix. The extremes are those of the Krylov space's Ritz values: lambda_max from below and
    lambda_min from above, exact once the space holds every distinct eigenvalue (a matrix with at most
    ``iterations`` of them) and converging fastest for well separated extremes. ``problem`` in float64."""
    r, d = theta.shape
    weights = problem.weights.to(device=theta.device, dtype=theta.dtype)
    root = (torch.ones(d, dtype=theta.dtype) if diagonal is None else diagonal.to(theta.dtype)).sqrt().to(theta.device)
    scale = 1e-5 * (1.0 + torch.linalg.vector_norm(theta, dim=-1))[:, None, None]  # (R, 1, 1)

    def product(u: torch.Tensor) -> torch.Tensor:  # A H_bar A u
        hu = gradient_difference(problem, theta[:, None, :], scale * (root * u)) / (2 * scale)  # (R, N, d)
        return root * (weights[None, :, None] * hu).sum(1).mean(0)

    q = torch.randn(d, generator=generator, dtype=theta.dtype).to(theta.device)
    q = q / torch.linalg.vector_norm(q)
    basis, alphas, betas = [q], [], []
    for j in range(min(iterations, d)):
        w = product(basis[-1])
        alphas.append(float(w @ basis[-1]))
        stack = torch.stack(basis)
        for _ in range(2):  # full reorthogonalisation, twice (Kahan-Parlett)
            w = w - stack.T @ (stack @ w)
        beta = float(torch.linalg.vector_norm(w))
        if not math.isfinite(beta) or j == min(iterations, d) - 1 or beta <= 1e-12 * max(abs(a) for a in alphas):
            break
        betas.append(beta)
        basis.append(w / beta)
    tri = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if betas:
        off = torch.tensor(betas, dtype=torch.float64)
        tri = tri + torch.diag(off, 1) + torch.diag(off, -1)
    if not bool(torch.isfinite(tri).all()):
        return math.nan, math.nan
    ritz = torch.linalg.eigvalsh(tri)
    return float(ritz[0]), float(ritz[-1])
