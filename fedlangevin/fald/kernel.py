"""FA-LD as pure functions: one local step, one communication round.

Deng et al., *On Convergence of Federated Averaging Langevin Dynamics*, Alg. 1 / Alg. 4:

    local step (eq. 10):   beta^c_{k+1} = theta^c_k - eta_k grad f~^c(theta^c_k)
                                          + sqrt(2 eta_k tau rho^2) xi_shared_k
                                          + sqrt(2 eta_k tau (1 - rho^2) / p_c) xi^c_k
    synchronise (k+1 mod K = 0): theta_{k+1} = sum_c w_c beta^c_{k+1}, broadcast to all clients.

The state between rounds is the synchronised global parameter per chain, (R, d); inside a
round every chain and client is updated at once on an (R, N, d) working buffer (no Python
loop over chains or clients). :func:`local_step` is the plain reference form; the runner
passes a round kernel from :mod:`fedlangevin.fald.steppers` (preallocated buffers, and for
problems with affine gradients, e.g. the Gaussian simulation, a fast path
theta <- theta (I - eta A_c) + eta b_c + noise that never touches data).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from fedlangevin.fald.local import local_step
from fedlangevin.federation.noise import NoiseScales
from fedlangevin.federation.participation import Participation
from fedlangevin.fald.steppers import Stepper, make_stepper
from fedlangevin.federation.rounds import UploadCodec, aggregate, round_threads
from fedlangevin.problems.base import FederatedProblem

__all__ = ["FALDState", "UploadCodec", "aggregate", "local_step", "fald_round", "init_state", "make_stepper"]

@dataclass(frozen=True)
class FALDState:
    """Global parameters after the last synchronisation, (R, d), and the counters.

    ``correction``: the state of a drift correction (:class:`~fedlangevin.federation.extensions.DriftCorrection`),
    ``None`` without one.
    """

    theta: torch.Tensor
    step: int = 0
    round: int = 0
    correction: dict | None = None


def init_state(initial: torch.Tensor) -> FALDState:
    return FALDState(theta=initial, step=0, round=0)


def fald_round(
    state: FALDState,
    problem: FederatedProblem,
    etas: Sequence[float],
    scales: NoiseScales,
    participation: Participation,
    p: torch.Tensor,
    generator: torch.Generator | None,
    batch_size: int | None = None,
    stepper: Stepper | None = None,
    on_step: Callable[[int, torch.Tensor], None] | None = None,
    *,
    upload: UploadCodec | None = None,
) -> tuple[FALDState, torch.Tensor]:
    """One communication round: broadcast, K = len(etas) local steps, synchronise.

    Returns the new state and the aggregation weights used (N,) or (R, N). ``p`` holds the
    client weights on the run's device and dtype. The input state is not modified.
    ``stepper``: a round kernel from :func:`make_stepper` built for this problem and
    ``batch_size`` (reused across rounds); without one, the K steps run through
    :func:`local_step`. Small rounds run with one CPU thread (:func:`round_threads`).
    ``on_step(i, beta)``, if given, sees the client states (R, N, d) after local step i of
    the round (a view valid during the call; the runner replays a diverged round with it to
    find the first bad step). Without it the kernels run unchanged.
    ``upload``: an optional :data:`UploadCodec` applied to the local states after the
    participation draw and before the server average (e.g. quantized uploads); ``None``
    (default) averages the exact states.
    """
    r, d = state.theta.shape
    n = problem.num_clients
    if stepper is not None and batch_size != stepper.batch_size:
        raise ValueError(f"batch_size={batch_size!r} differs from the stepper's ({stepper.batch_size!r}): "
                         "build the stepper with make_stepper(problem, dtype, device, batch_size=...)")
    with round_threads(r * n * d, state.theta.device):
        if stepper is not None:
            beta = stepper.local_steps(state.theta, etas, scales, generator, on_step)
        else:
            beta = state.theta.unsqueeze(1).expand(r, n, d).clone()  # broadcast
            for i, eta in enumerate(etas):
                local_step(beta, problem, eta, scales, generator, batch_size)
                if on_step is not None:
                    on_step(i, beta)
        w = participation.weights(p, r, generator)
        new_theta = aggregate(beta, state.theta, w, generator, upload)
    return replace(state, theta=new_theta, step=state.step + len(etas), round=state.round + 1), w
