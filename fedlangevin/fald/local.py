"""The reference local step of FA-LD (Deng et al., eq. 10), for every chain and client at once.

    beta^c_{k+1} = theta^c_k - eta_k grad f~^c(theta^c_k) + sqrt(2 eta_k tau rho^2) xi_shared_k
                   + sqrt(2 eta_k tau (1 - rho^2) / p_c) xi^c_k

The one plain implementation of eq. 10: the runner's general kernel
(:class:`fedlangevin.fald.steppers.GradientStepper`) is this function, and the affine fast
paths are tested equal to it.
"""

from __future__ import annotations

import torch

from fedlangevin.federation.noise import NoiseScales, NoiseTally, add_noise_
from fedlangevin.problems.base import FederatedProblem

__all__ = ["local_step"]


def local_step(
    theta: torch.Tensor,
    problem: FederatedProblem,
    eta: float,
    scales: NoiseScales,
    generator: torch.Generator | None,
    batch_size: int | None = None,
    *,
    clients: torch.Tensor | None = None,
    preconditioner=None,
    correction: torch.Tensor | None = None,
    shared_generator: torch.Generator | None = None,
    tally: NoiseTally | None = None,
    normals: tuple | None = None,
) -> torch.Tensor:
    """One local SGLD step (eq. 10) for every chain and client; updates ``theta`` (R, n, d) in place.

    This is the reference form of eq. 10 (every fast kernel of :mod:`fedlangevin.fald.steppers`
    is tested equal to it). Random stream: the minibatch draws of ``problem.grad``, the
    shared normals (from ``shared_generator``, default ``generator``), the private normals
    of all N clients. ``clients``: indices of the clients ``theta`` holds (``problem`` is then
    restricted to them, see ``FederatedProblem.clients``); ``correction``: a drift-correction
    term added to the gradient; ``preconditioner``: M = A A^T, the step becomes
    theta - eta M grad + A noise (see :mod:`fedlangevin.federation.extensions`); ``tally``,
    ``normals``: the step's standard normals added to a tally, or given instead of drawn
    (:func:`~fedlangevin.federation.noise.add_noise_`).
    """
    grad = problem.grad(theta, batch_size=batch_size, generator=generator)
    if correction is not None:
        grad = grad + correction
    transform = None
    if preconditioner is not None:
        grad, transform = preconditioner.drift(grad), preconditioner.noise
    theta.add_(grad, alpha=-eta)
    return add_noise_(theta, scales, eta, generator, clients=clients, transform=transform,
                      shared_generator=shared_generator, tally=tally, normals=normals)
