"""What every sampler's round shares, whatever its kernel: the report of a round
(:class:`RoundInfo`), the checks of a kernel's initial state (:func:`initial_theta`) and of the
problem's gradient (:func:`check_gradient`), the server side of a synchronisation (an upload codec,
then the weighted sum: :func:`aggregate`), a state released from ``torch.inference_mode``
(:func:`released`) and the thread count of small rounds (:func:`round_threads`).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Callable, Iterator

import torch

from fedlangevin._validation import refuse_complex
from fedlangevin.federation.participation import synchronize
from fedlangevin.problems.base import FederatedProblem

__all__ = ["RoundInfo", "SINGLE_THREAD_NUMEL", "UploadCodec", "aggregate", "check_gradient", "initial_theta", "released",
           "round_threads"]

#: An upload codec: ``codec(beta, theta, generator) -> beta_received``. It gets the clients'
#: local states beta (R, N, d) after the round's local steps and the broadcast global
#: parameters theta (R, d), and returns what the server receives, (R, N, d); the server
#: averages that instead of beta. Example: :class:`fedlangevin.compression.QuantizedUpdateUpload`.
UploadCodec = Callable[[torch.Tensor, torch.Tensor, "torch.Generator | None"], torch.Tensor]


#: Rounds whose working state (R N d numbers) is at most this size run with one intra-op
#: CPU thread. Each operation of such a step touches at most a few MB, so a second thread
#: gains little, while on a busy machine an OpenMP parallel region waits for a descheduled
#: thread: measured on a shared 2-core machine, a 45k-element copy took 3.6 ms with two
#: threads against 29 us with one. The previous setting is restored after the round.
SINGLE_THREAD_NUMEL = 1 << 18


@dataclass(frozen=True)
class RoundInfo:
    """What a round reports besides the state: the aggregation weights, (N,) shared by the
    chains or (R, N) per chain (over all N clients, whichever a process holds)."""

    weights: torch.Tensor


def initial_theta(theta0, dim: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A kernel's initial global parameters: ``theta0`` of shape (R, d) with R >= 1, finite, not
    requiring grad (the state is plain data), as a new tensor in ``dtype`` on ``device``
    (``ValueError`` naming ``theta0`` otherwise)."""
    if getattr(theta0, "requires_grad", False):
        raise ValueError("theta0 must not require grad (the kernel's state is plain data); pass theta0.detach()")
    refuse_complex("theta0", theta0)
    try:
        theta = torch.as_tensor(theta0, dtype=dtype, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"theta0 must be an array of numbers of shape (R, d = {dim}); got "
                         f"{type(theta0).__name__}") from None
    if theta.dim() != 2 or theta.shape[1] != dim:
        raise ValueError(f"theta0 must have shape (R, d = {dim}); got {tuple(theta.shape)}")
    if theta.shape[0] == 0:
        raise ValueError(f"theta0 must hold at least one chain (R >= 1); got shape {tuple(theta.shape)}")
    if not bool(torch.isfinite(theta).all()):
        raise ValueError("theta0 must be finite")
    return theta.clone()


def check_gradient(work: FederatedProblem, dtype: torch.dtype, device: torch.device, batch_size: int | None = None,
                   problem: FederatedProblem | None = None) -> None:
    """The gradient of ``work`` (the kernel's copy of ``problem`` on ``device`` in ``dtype``) at one
    probe point must have the shape of its theta (R, n, d), the state's dtype and its device: a
    gradient of another shape would be broadcast into the samples and one of another dtype
    added silently. Evaluated once, when a kernel is built, at ``problem.initial_params``
    (where the problem has one, e.g. :class:`~fedlangevin.problems.CustomProblem`) or zeros,
    with its own generator (the run's random stream is untouched). ``ValueError`` naming the
    problem's ``grad``. A gradient that raises at the probe point is left to the run (which
    reports it where it happens), so that a problem defined away from the probe point is not
    refused. Not evaluated for a problem with ``no_probe`` set (:class:`~fedlangevin.problems.clipped.Clipped`:
    a private run reads data only in its noisy steps; its gradient is the package's ``private_grad``)."""
    problem = work if problem is None else problem
    if getattr(work, "no_probe", False):  # a private run's problem: a probe would read data outside the noisy steps
        return
    n, d = work.num_clients, work.dim
    theta = torch.zeros(1, n, d, dtype=dtype, device=device)
    start = getattr(problem, "initial_params", None)
    if isinstance(start, torch.Tensor) and start.shape == (d,):
        theta.copy_(start.to(device=device, dtype=dtype))
    generator = None if batch_size is None else torch.Generator(device=device).manual_seed(0)
    try:
        grad = work.grad(theta, batch_size=batch_size, generator=generator)
    except Exception:  # noqa: BLE001 - see the docstring: not this check's to report
        return
    if (isinstance(grad, torch.Tensor) and grad.shape == theta.shape and grad.dtype == dtype
            and grad.device == theta.device):
        return
    got = (f"shape {tuple(grad.shape)}, {grad.dtype} on device {grad.device}" if isinstance(grad, torch.Tensor)
           else f"{type(grad).__name__}")
    raise ValueError(
        f"problem.grad ({type(problem).__name__}.grad) must return a tensor of shape {tuple(theta.shape)}, {dtype} "
        f"on {theta.device} (like its theta: one gradient per chain, client and coordinate, in the state's dtype "
        f"on its device); got {got}. Check the problem's grad() and to(device, dtype)"
    )


def released(state):
    """``state`` (any kernel's frozen dataclass state) with its tensor fields usable outside
    ``torch.inference_mode``: a copy of each that the rounds made in it, ``state`` itself when
    none was."""
    made = {f.name: v.clone() for f in fields(state)
            if isinstance(v := getattr(state, f.name), torch.Tensor) and v.is_inference()}
    return replace(state, **made) if made else state


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


@contextmanager
def round_threads(numel: int, device: torch.device | str | None = None) -> Iterator[None]:
    """Run a round with one intra-op CPU thread when its state has <= :data:`SINGLE_THREAD_NUMEL`
    numbers (see there for the measurement); otherwise leave the thread count alone."""
    threads = torch.get_num_threads()
    if threads == 1 or numel > SINGLE_THREAD_NUMEL or torch.device(device or "cpu").type != "cpu":
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
