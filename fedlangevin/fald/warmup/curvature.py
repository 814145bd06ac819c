"""Curvature from gradients: the central difference every curvature estimate of the package uses.

A problem gives gradients only (any problem's ``grad`` serves, no autodiff needed), so Hessians
and Hessian-vector products are read off central differences of the gradients,

    H_c s ~ (grad f^c(theta + s) - grad f^c(theta - s)) / 2 h,   s = h u,

with error O(h^2) (exact for quadratic energies up to rounding). :func:`gradient_difference`
is the numerator for every client at once; its callers divide by their own 2 h (and weight and
sum over clients, or not, in their own order): the step-size rule's power iteration and the
Laplace start of M (:mod:`fedlangevin.fald.warmup.adaptation`), the client Hessians of the MAP search
(:mod:`fedlangevin.fald.warmup.mode`) and of the drift corrections' surrogates
(:mod:`fedlangevin.fald.corrections.base`).
"""

from __future__ import annotations

import torch

__all__ = ["gradient_difference"]


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
