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

from dataclasses import dataclass, fields, replace
from typing import Callable, Sequence

import torch

from fedlangevin.fald.local import local_step
from fedlangevin.federation.noise import NoiseScales
from fedlangevin.federation.participation import Participation, synchronize
from fedlangevin.fald.steppers import Stepper, make_stepper, round_threads
from fedlangevin.problems.base import FederatedProblem

__all__ = ["FALDState", "UploadCodec", "aggregate", "local_step", "fald_round", "init_state", "make_stepper", "released"]

#: An upload codec: ``codec(beta, theta, generator) -> beta_received``. It gets the clients'
#: local states beta (R, N, d) after the round's local steps and the broadcast global
#: parameters theta (R, d), and returns what the server receives, (R, N, d); the server
#: averages that instead of beta. Example: :class:`fedlangevin.compression.QuantizedUpdateUpload`.
UploadCodec = Callable[[torch.Tensor, torch.Tensor, "torch.Generator | None"], torch.Tensor]


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


def released(state):
    """``state`` (any kernel's frozen dataclass state) with its tensor fields usable outside
    ``torch.inference_mode``: a copy of each that the rounds made in it, ``state`` itself when
    none was."""
    made = {f.name: v.clone() for f in fields(state)
            if isinstance(v := getattr(state, f.name), torch.Tensor) and v.is_inference()}
    return replace(state, **made) if made else state


def init_state(initial: torch.Tensor) -> FALDState:
    return FALDState(theta=initial, step=0, round=0)


def aggregate(
    beta: torch.Tensor,
    theta: torch.Tensor,
    w: torch.Tensor,
    generator: torch.Generator | None,
    upload: UploadCodec | None = None,
) -> torch.Tensor:
    """The server side of a round: the upload codec (if any) on the local states beta
    (R, n, d), then the weighted sum over clients sum_c w_rc beta_rc (R, d)."""
    if upload is not None:
        received = upload(beta, theta, generator)
        if (not isinstance(received, torch.Tensor) or received.shape != beta.shape
                or received.dtype != beta.dtype or received.device != beta.device):
            got = (f"a tensor of shape {tuple(received.shape)}, {received.dtype} on {received.device}"
                   if isinstance(received, torch.Tensor) else type(received).__name__)
            raise ValueError(f"upload codec must return a tensor like the local states (shape "
                             f"{tuple(beta.shape)}, {beta.dtype} on {beta.device}); got {got}")
        beta = received
    return synchronize(beta, w)


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
