"""The client side of an FA-HMC round for ONE client: what a federated client (a Flower node) runs.

:func:`client_round` is FA-HMC's counterpart of :func:`fedlangevin.fald.engine.client_round`:
K local steps of the splitting of :mod:`fedlangevin.fahmc.kernel` (BAOAB: B(h) A(h/2) O A(h/2);
OBABO: B(h/2) O B(h/2) A(h); eq. (2) there) on one client's energy f^c, from the broadcast
(theta, v) of every chain, returning the client's (theta_c, v_c). The randomness layout is
:mod:`fedlangevin.federation.streams`': the momentum refresh's shared normals xi_k come from
``shared_generator`` (seeded from the round seed, the same on every client), the private
normals xi^c_k and the minibatch draws from ``private_generator`` (the client's own); per step
the order is the kernel's: minibatch, shared normals, private normals. A server then averages
theta_c and v_c with the participation weights (the kernel's round, what the paper averages).

With one generator for both streams and N = 1 this is exactly the kernel's round before its
(trivial) average, bit for bit (tested); with N > 1 the kernel draws every client's private
normals from one generator, so a per-client run equals it in law, not in bits.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from fedlangevin._validation import check_choice, check_real
from fedlangevin.fahmc.kernel import SPLITTINGS, as_fahmc_preconditioner, local_steps_
from fedlangevin.federation.noise import add_noise_, client_noise_weight, noise_scales
from fedlangevin.federation.preconditioning import RoundPreconditioner
from fedlangevin.problems.base import FederatedProblem

__all__ = ["client_round"]


def client_round(
    problem: FederatedProblem,
    theta: torch.Tensor,
    momentum: torch.Tensor,
    step_sizes: Sequence[float],
    *,
    weight: float,
    friction: float,
    splitting: str = "BAOAB",
    temperature: float = 1.0,
    correlation: float = 0.0,
    shared_generator: torch.Generator | None,
    private_generator: torch.Generator | None,
    batch_size: int | None = None,
    noise_dtype: torch.dtype | None = torch.float32,
    preconditioner: Any = None,
    noise_weight: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The K local FA-HMC steps of ONE client from the broadcast ``theta`` and ``momentum`` (R, d);
    returns its (theta_c, v_c), each (R, d). The inputs are not modified.

    problem : that client's problem, one client (e.g. ``full.clients([c])``); weight : its p_c in
    (0, 1] in the federation (the private refresh noise's scale sqrt(tau (1 - rho^2) / p_c), eq. (2)
    of :mod:`fedlangevin.fahmc.kernel`); friction : gamma > 0 (finite); splitting : "BAOAB" or
    "OBABO"; temperature : tau > 0; correlation : rho in [0, 1]; shared_generator,
    private_generator : the streams (module docstring); batch_size : minibatch size per step
    (None: full gradients); noise_dtype : of the standard normals; preconditioner : M (None: I),
    as :func:`fedlangevin.fahmc.kernel.build`'s; noise_weight : q_c in place of p_c in the refresh
    noise's scale (the participation rule's ``noise_weights``; None: p_c). ``ValueError`` naming a
    bad argument.
    """
    if not isinstance(problem, FederatedProblem) or problem.num_clients != 1:
        got = problem.num_clients if isinstance(problem, FederatedProblem) else type(problem).__name__
        raise ValueError(f"problem must be a FederatedProblem holding one client (use problem.clients([c])); got {got}")
    weight = client_noise_weight(weight, noise_weight)
    friction = check_real("friction", friction, low=0.0, low_open=True)
    splitting = check_choice("splitting", splitting, SPLITTINGS)
    temperature = check_real("temperature", temperature, low=0.0, low_open=True)
    correlation = check_real("correlation", correlation, low=0.0, high=1.0)
    if (not isinstance(theta, torch.Tensor) or not isinstance(momentum, torch.Tensor) or theta.dim() != 2
            or theta.shape[1] != problem.dim or momentum.shape != theta.shape):
        shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in (theta, momentum)]
        raise ValueError(f"theta and momentum must be tensors of one shape (R, d = {problem.dim}); got {shapes}")
    dtype, device, d = theta.dtype, theta.device, problem.dim
    pre = RoundPreconditioner(preconditioner, lambda given: as_fahmc_preconditioner(given, d), d, dtype, device).built
    scales = noise_scales(torch.tensor([weight], dtype=torch.float64), temperature, correlation, device=device,
                          dtype=dtype, noise_dtype=noise_dtype)
    x = theta.unsqueeze(1).clone()      # (R, 1, d)
    u = momentum.unsqueeze(1).to(dtype).clone()

    def force(x: torch.Tensor) -> torch.Tensor:  # -M grad f~^c: the kernel's FAHMCKernel._force
        grad = problem.grad(x, batch_size=batch_size, generator=private_generator)
        return -(grad if pre is None else pre.drift(grad))

    def refresh(u: torch.Tensor, h: float) -> None:  # O of eq. (2): the kernel's FAHMCKernel._refresh
        u.mul_(math.exp(-friction * h))
        one_minus_a2 = -math.expm1(-2.0 * friction * h)
        add_noise_(u, scales, 0.5 * one_minus_a2, private_generator, shared_generator=shared_generator,
                   transform=None if pre is None else pre.noise)

    local_steps_(x, u, step_sizes, splitting=splitting, force=force, refresh=refresh)
    return x[:, 0], u[:, 0]
