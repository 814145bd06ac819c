"""A start near the mode: a federated damped-Newton search for the MAP of sum_c p_c f^c.

``FALD(..., init="map")`` starts every chain at the MAP found here, then warm-up adapts from
there (with a dense M, the Laplace start of :mod:`fedlangevin.warmup.adaptation` is then the
inverse Hessian at the mode). What runs, per round of communication:

1. the server broadcasts theta (d floats to each of the N clients);
2. each client returns its gradient g_c = grad f^c(theta) and its Hessian H_c (dense, the
   d (d + 1) / 2 entries of the symmetric matrix, for d <= ``DENSE_MAX_DIM``; its diagonal
   beyond), both computed locally by central gradient differences (no autodiff needed);
3. the server forms g = sum_c p_c g_c, H = sum_c p_c H_c and proposes the Levenberg-Marquardt
   step theta - (H + mu D)^{-1} g (D = diag(|H|), mu = 0 while H is positive definite).

When the problem exposes its energy, clients also send f^c (one number) and the step is cut
back (step length 1, 1/4, 1/16, ...; one round each) until the energy falls enough (Armijo);
otherwise a step is accepted when the next round's gradient norm is smaller. A rejected step
makes mu grow tenfold (the direction turns towards the scaled gradient). The search stops when
the undamped Newton decrement sqrt(g^T H^{-1} g) (the distance to the mode in posterior
standard deviations, for a near-Gaussian posterior) is below ``tol``, or after ``max_rounds``
rounds. Every round and float is counted in the result (and in
the sampler's communication record).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedlangevin.warmup.acceptance import energy_function
from fedlangevin.warmup.adaptation import DENSE_MAX_DIM
from fedlangevin.warmup.curvature import client_hessian_diagonals, gradient_difference

__all__ = ["MapResult", "client_derivatives", "find_map", "global_energy", "resolve_init"]


@dataclass(frozen=True)
class MapResult:
    """The mode found, and what finding it cost: ``rounds`` of communication, ``floats_up`` and
    ``floats_down`` summed over all clients; ``decrement``: the final Newton decrement."""

    theta: torch.Tensor
    rounds: int
    floats_up: float
    floats_down: float
    converged: bool
    decrement: float


def client_derivatives(problem, theta: torch.Tensor, dense: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client gradients (N, d) and Hessians (N, d, d) or diagonals (N, d) at theta (d,)."""
    n, d = problem.num_clients, problem.dim
    grad = problem.grad(theta.expand(1, n, d).clone())[0]
    if not dense:  # no (N, d, d) array: the problem's own diagonals, or blocks of central differences
        return grad, client_hessian_diagonals(problem, theta)
    h = 1e-5 * (1.0 + theta.abs())  # (d,)
    step = torch.diag(h)  # row j moves coordinate j
    diff = gradient_difference(problem, theta[None, None, :], step[:, None, :]) / (2 * h[:, None, None])  # (d_j, N, d)
    hess = diff.permute(1, 0, 2)  # (N, j, i): d grad_i / d theta_j
    return grad, 0.5 * (hess + hess.transpose(1, 2))


def global_energy(problem):
    """theta (d,) -> f(theta) = sum_c p_c f^c(theta) (a float) when the problem exposes its energy
    (``global_energy`` of autodiff problems, ``energy`` of quadratic and logistic problems); else None."""
    fn = energy_function(problem)
    return None if fn is None else lambda theta: float(fn(theta[None])[0])


def find_map(problem, theta0=None, *, max_rounds: int = 200, tol: float = 1e-6) -> MapResult:
    """The MAP of ``problem`` (see the module docstring); ``theta0`` (d,) default zeros."""
    from fedlangevin._validation import check_int, check_real

    max_rounds = check_int("max_rounds", max_rounds, 1)
    tol = check_real("tol", tol, low=0.0, low_open=True)
    work = problem.to(dtype=torch.float64)
    n, d = work.num_clients, work.dim
    dense = d <= DENSE_MAX_DIM
    p = work.weights.to(torch.float64)
    theta = torch.zeros(d, dtype=torch.float64) if theta0 is None else torch.as_tensor(theta0, dtype=torch.float64).clone()
    if theta.shape != (d,) or not torch.isfinite(theta).all():
        raise ValueError(f"theta0 must be a finite vector of shape ({d},); got {tuple(theta.shape)}")
    energy = global_energy(work)
    up_per_round = n * (d + (d * (d + 1) // 2 if dense else d) + (1 if energy is not None else 0))
    rounds, mu, decrement, converged = 0, 0.0, math.inf, False

    def query(x):
        nonlocal rounds
        rounds += 1
        g_c, h_c = client_derivatives(work, x, dense)
        f = energy(x) if energy is not None else None  # the clients' f^c, summed with p_c by the server
        return p @ g_c, torch.einsum("n,n...->...", p, h_c), f

    g, hess, f = query(theta)
    while rounds < max_rounds and mu < 1e12:
        if not (torch.isfinite(g).all() and torch.isfinite(hess).all()):
            raise ValueError("init='map': non-finite gradients during the mode search; give init as an array")
        scale = hess.diagonal().abs() if dense else hess.abs()
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        if dense:
            chol, info = torch.linalg.cholesky_ex(hess + mu * torch.diag(scale))
            if int(info) != 0:
                mu = max(10 * mu, 1e-3)
                continue
            delta = torch.cholesky_solve(g[:, None], chol)[:, 0]
        else:
            denom = hess + mu * scale
            if bool((denom <= 0).any()):
                mu = max(10 * mu, 1e-3)
                continue
            delta = g / denom
        decrement = float(torch.sqrt(torch.clamp(g @ delta, min=0.0)))
        if decrement < tol and mu == 0.0:
            converged = True
            break
        alpha = 1.0
        while rounds < max_rounds:
            g_new, h_new, f_new = query(theta - alpha * delta)
            finite = bool(torch.isfinite(g_new).all()) and (f_new is None or math.isfinite(f_new))
            if energy is not None:  # Armijo on the energy
                ok = finite and f_new <= f - 1e-4 * alpha * float(g @ delta)
            else:  # no energy: the gradient norm must fall
                ok = finite and float(g_new.norm()) < float(g.norm())
            if ok or energy is None or alpha < 1e-4:
                break
            alpha *= 0.25
        if ok:
            theta, g, hess, f = theta - alpha * delta, g_new, h_new, f_new
            mu = mu / 10 if mu > 1e-3 else 0.0
        else:
            mu = max(10 * mu, 1e-3)
    return MapResult(theta=theta, rounds=rounds, floats_up=float(rounds * up_per_round),
                     floats_down=float(rounds * n * d), converged=converged, decrement=decrement)


def resolve_init(init, problem):
    """A sampler's ``init`` and the mode search behind it: ``"map"`` -> (the MAP, its
    :class:`MapResult`); anything else -> (init, None), checked by the sampler."""
    if not isinstance(init, str):
        return init, None
    if init != "map":
        raise ValueError(f"init must be an array of shape (d,) or (R, d), None (zeros) or 'map'; got {init!r}")
    result = find_map(problem)
    return result.theta, result
