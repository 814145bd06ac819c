"""Curvature from gradients: the central difference every curvature estimate of the package uses.

A problem gives gradients only (any problem's ``grad`` serves, no autodiff needed), so Hessians
and Hessian-vector products are read off central differences of the gradients,

    H_c s ~ (grad f^c(theta + s) - grad f^c(theta - s)) / 2 h,   s = h u,

with error O(h^2) (exact for quadratic energies up to rounding). :func:`gradient_difference`
is the numerator for every client at once; its callers divide by their own 2 h (and weight and
sum over clients, or not, in their own order): the step-size rule's power iteration and the
Laplace start of M (:mod:`fedlangevin.warmup.adaptation`), the client Hessians of the MAP search
(:mod:`fedlangevin.warmup.mode`) and of the drift corrections' surrogates
(:mod:`fedlangevin.corrections.base`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedlangevin.federation.preconditioning import is_identity, placed

__all__ = ["POWER_ITERATIONS", "curvature_at", "gradient_difference", "max_curvature", "mean_hessian"]

#: power-iteration sweeps per step-size estimate
POWER_ITERATIONS = 20


def gradient_difference(problem, points: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """grad f^c(points + steps) - grad f^c(points - steps) for every client c, (B, N, d).

    ``points``: (B, 1, d) or (B, N, d), where each client's gradient is taken; ``steps``: the
    displacements s, broadcastable to ``points`` ((B, 1, d): the same for every client, (B, N, d):
    one per client). Both evaluations are batched in one ``grad`` call each, on contiguous
    (B, N, d) tensors.
    """
    plus, minus = points + steps, points - steps
    full = (plus.shape[0], problem.num_clients, problem.dim)
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
    batched); ``problem`` in float64."""
    r, d = theta.shape
    weights = problem.weights.to(device=theta.device, dtype=theta.dtype)
    h = 1e-5 * (1.0 + theta.abs())  # (R, d) per-coordinate step
    eye = torch.eye(d, dtype=theta.dtype, device=theta.device)
    step = h[:, :, None] * eye  # (R, d, d): row j moves coordinate j
    base = theta[:, None, :].expand(r, d, d)
    diff = gradient_difference(problem, base.reshape(r * d, 1, d), step.reshape(r * d, 1, d))
    diff = (diff * weights[None, :, None]).sum(1).reshape(r, d, d)
    hess = (diff / (2 * h[:, :, None])).mean(0)
    return 0.5 * (hess + hess.T)
