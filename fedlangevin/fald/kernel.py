"""FA-LD as pure functions: one local step, one communication round.

Deng et al., *On Convergence of Federated Averaging Langevin Dynamics*, Alg. 1 / Alg. 4:

    local step (eq. 10):   beta^c_{k+1} = theta^c_k - eta_k grad f~^c(theta^c_k)
                                          + sqrt(2 eta_k tau rho^2) xi_shared_k
                                          + sqrt(2 eta_k tau (1 - rho^2) / p_c) xi^c_k
    synchronise (k+1 mod K = 0): theta_{k+1} = sum_c w_c beta^c_{k+1}, broadcast to all clients.

The state between rounds is the synchronised global parameter per chain, (R, d); inside a
round every chain and client is updated at once on an (R, N, d) working buffer (no Python
loop over chains or clients). Problems with affine gradients (:class:`QuadraticForm`,
e.g. the Gaussian simulation) take a fast path, theta <- theta (I - eta A) + eta b_c, that
never touches data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from fedlangevin.fald.noise import NoiseScales, add_noise_
from fedlangevin.fald.participation import Participation, synchronize
from fedlangevin.problems.base import FederatedProblem

__all__ = ["FALDState", "local_step", "fald_round", "init_state"]


@dataclass(frozen=True)
class FALDState:
    """Global parameters after the last synchronisation, (R, d), and the counters."""

    theta: torch.Tensor
    step: int = 0
    round: int = 0


def init_state(initial: torch.Tensor) -> FALDState:
    return FALDState(theta=initial, step=0, round=0)


def local_step(
    theta: torch.Tensor,
    problem: FederatedProblem,
    eta: float,
    scales: NoiseScales,
    generator: torch.Generator | None,
    batch_size: int | None = None,
) -> torch.Tensor:
    """One local SGLD step (eq. 10) for every chain and client; updates ``theta`` (R, N, d) in place."""
    grad = problem.grad(theta, batch_size=batch_size, generator=generator)
    theta.add_(grad, alpha=-eta)
    return add_noise_(theta, scales, eta, generator)


class _AffineStepper:
    """Fast path for grad f^c(theta) = A_c theta - b_c: theta <- theta (I - eta A) + eta b."""

    def __init__(self, problem: FederatedProblem, dtype: torch.dtype, device: torch.device) -> None:
        form = problem.quadratic()
        self.hessian = form.hessian.to(device=device, dtype=dtype)
        self.shift = form.shift.to(device=device, dtype=dtype)
        self.shared = form.shared
        self._eta = None

    def _prepare(self, eta: float) -> None:
        if eta != self._eta:
            eye = torch.eye(self.hessian.shape[-1], device=self.hessian.device, dtype=self.hessian.dtype)
            self.transition = eye - eta * self.hessian  # symmetric, so theta @ M = (M theta^T)^T
            self.offset = eta * self.shift
            self._eta = eta

    def step(self, theta, buf, eta, scales, generator):
        self._prepare(eta)
        if self.shared:
            torch.matmul(theta, self.transition, out=buf)
        else:
            buf.copy_(torch.einsum("rnd,nde->rne", theta, self.transition))
        buf.add_(self.offset)
        add_noise_(buf, scales, eta, generator)
        return buf, theta


def fald_round(
    state: FALDState,
    problem: FederatedProblem,
    etas: Sequence[float],
    scales: NoiseScales,
    participation: Participation,
    p: torch.Tensor,
    generator: torch.Generator | None,
    batch_size: int | None = None,
    stepper: _AffineStepper | None = None,
    on_step: Callable[[int, torch.Tensor], None] | None = None,
) -> tuple[FALDState, torch.Tensor]:
    """One communication round: broadcast, K = len(etas) local steps, synchronise.

    Returns the new state and the aggregation weights used (N,) or (R, N). ``p`` holds the
    client weights on the run's device and dtype. The input state is not modified.
    ``on_step(i, theta)``, if given, sees the client states (R, N, d) after local step i of
    the round (the runner replays a diverged round with it to find the first bad step).
    """
    r, d = state.theta.shape
    n = problem.num_clients
    theta = state.theta.unsqueeze(1).expand(r, n, d).clone()  # broadcast
    if stepper is not None and batch_size is None:
        buf = torch.empty_like(theta)
        for i, eta in enumerate(etas):
            theta, buf = stepper.step(theta, buf, eta, scales, generator)
            if on_step is not None:
                on_step(i, theta)
    else:
        for i, eta in enumerate(etas):
            local_step(theta, problem, eta, scales, generator, batch_size)
            if on_step is not None:
                on_step(i, theta)
    w = participation.weights(p, r, generator)
    new_theta = synchronize(theta, w)
    return replace(state, theta=new_theta, step=state.step + len(etas), round=state.round + 1), w
