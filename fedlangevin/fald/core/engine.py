"""FA-LD as a pure kernel: ``build(problem, ...) -> Kernel(init, step)``.

In the shape of BlackJAX's kernels and ``posteriors``' transforms: :func:`build` fixes the
problem and the settings once; ``init(theta0)`` returns the state, ``step(state, step_sizes,
generator)`` runs one communication round (Deng et al., Alg. 1 / Alg. 4: broadcast, K =
len(step_sizes) local steps of eq. 10, synchronisation) and returns the new state and a
:class:`RoundInfo`. Step sizes are an argument of every call (any schedule is a sequence of
numbers), randomness comes from the generator passed in, and the input state is never
modified.

Extension points (their contracts: :mod:`fedlangevin.fald.contracts`, checked here before any
work; the built-in implementations: :mod:`fedlangevin.fald.core.extensions`), each an explicit
argument whose default leaves the round bit-identical to the plain kernel:

- ``preconditioner``: M = A A^T, clients step in z with theta = theta_0 + A z;
- ``correction``: a drift correction added to every client's gradient, with its own state
  (``state.correction``);
- ``transport``: the synchronisation; a process holds the clients ``transport.clients`` and
  the partial weighted sums are all-reduced. A transport with ``bind(N)`` is first given the
  problem's N (it splits the clients itself, e.g. :class:`fedlangevin.distributed.ProcessGroup`);
  one with ``exact = False`` gives, through ``private_stream(generator)``, each round's
  generator of its clients' private noise and minibatches, drawn for its clients only;
- ``upload``: the upload codec applied to the local states before the average.

:func:`client_round` is the client side of a round for one client (what a federated-learning
client, e.g. a Flower client, runs): K local steps of that client's problem from a broadcast
theta, with its own shared-noise and private-noise generators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import torch

from fedlangevin._validation import check_device, check_dtype, check_real, check_step_sizes, refuse_complex
from fedlangevin.fald.contracts import (
    CORRECTION_SETTINGS, DRIFT_CORRECTION, TRANSPORT, UPLOAD_CODEC, check_conforms,
)
from fedlangevin.fald.core.extensions import PRECONDITIONERS, LocalTransport
from fedlangevin.fald.core.kernel import FALDState, UploadCodec, aggregate
from fedlangevin.fald.core.local import local_step
from fedlangevin.fald.core.noise import noise_scales
from fedlangevin.fald.core.participation import Full, Participation, as_participation
from fedlangevin.fald.core.preconditioning import BUILT, RoundPreconditioner, as_preconditioner, is_identity
from fedlangevin.fald.core.steppers import AffineStepper, SmallAffineStepper, make_stepper
from fedlangevin.problems.base import FederatedProblem, check_client_indices, check_problem, check_weights

__all__ = ["Kernel", "RoundInfo", "assemble", "build", "check_gradient", "client_round", "initial_theta"]


@dataclass(frozen=True)
class RoundInfo:
    """What a round reports besides the state: the aggregation weights, (N,) shared by the
    chains or (R, N) per chain (over all N clients, whichever a process holds)."""

    weights: torch.Tensor


class Kernel(NamedTuple):
    """``init(theta0) -> state``; ``step(state, step_sizes, generator, on_step=None, *, preconditioner=...)
    -> (state, info)``.

    ``preconditioner``: this round's M, an argument like the step sizes (default: the one given
    to :func:`build`; ``None``: I), so a runner that adapts M in warm-up keeps one kernel. A new M
    object is placed on the state's device and dtype and checked once, when first given.

    ``on_step(i, beta)``, if given, sees the held clients' states (R, n, d) after local step
    i (a view valid during the call). ``tally`` (a :class:`~fedlangevin.fald.core.noise.NoiseTally`)
    gets the round's standard normals (the round is bit-identical); ``normals`` (one local step)
    are used instead of drawing and ``weights`` instead of the participation's draw: a chain
    coupled to another's round (:mod:`fedlangevin.fald.warmup.companions`). ``autograd_free``: the
    rounds never differentiate (the affine kernels), so a runner may run them under
    ``torch.inference_mode`` (it skips autograd's bookkeeping in every tensor operation: ~13% of a
    round at N = 1).

    :attr:`rounds`, where the step has one, runs several rounds in one call (see there).
    """

    init: Callable[[torch.Tensor], FALDState]
    step: Callable[..., tuple[FALDState, RoundInfo]]
    autograd_free: bool = False

    @property
    def rounds(self) -> Callable[..., tuple[FALDState, torch.Tensor]] | None:
        """``rounds(state, step_sizes_list, generator) -> (state, thetas)``: ``len(step_sizes_list)``
        consecutive rounds of :attr:`step` in one call, without a Python round-trip per round:
        the same operations, so the same bits, as calling ``step`` round by round with that
        generator; ``thetas`` (M, R, d) holds every round's synchronised parameters (a view of
        the kernel's buffer, valid until the next call) and ``state`` is the last round's (its
        own tensor). Only where the rounds need no per-round information: the small affine
        kernel with full participation and no extension (``None`` otherwise, and for a step
        replaced with ``Kernel._replace(step=...)``: the attribute belongs to the step). It takes
        ``preconditioner=None`` (rounds without M) and refuses any other."""
        return getattr(self.step, "rounds", None)


def build(
    problem: FederatedProblem,
    temperature: float = 1.0,
    correlation: float = 0.0,
    participation: Participation | str | None = None,
    batch_size: int | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    noise_dtype: torch.dtype | None = torch.float32,
    kernel: str = "auto",
    preconditioner=None,
    correction=None,
    transport=None,
    upload: UploadCodec | None = None,
) -> Kernel:
    """Build the FA-LD round kernel for ``problem`` (see the module docstring).

    temperature : tau > 0; correlation : rho in [0, 1] (eq. 14); participation : Full (default),
    SchemeI(S) or SchemeII(S); batch_size : minibatch size per client and step (None: full
    gradients); dtype, device : of the state; noise_dtype : of the standard normals (see
    :mod:`fedlangevin.fald.core.noise`); kernel : "auto", "small", "dense" or "gradient" (the round
    kernel of :mod:`fedlangevin.fald.core.steppers`, used when no extension is active).
    preconditioner, correction, transport, upload : the extension points
    (:mod:`fedlangevin.fald.core.extensions`); ``None`` is the plain round.

    Arguments are validated here (``ValueError`` naming the argument), among them the
    problem's gradient (:func:`check_gradient`: one evaluation) and the preconditioner (its d
    and the shapes of ``drift`` and ``noise``), once; ``init(theta0)`` checks ``theta0`` (shape
    (R, d) with R >= 1, finite, not requiring grad) and ``step`` its ``step_sizes`` (a non-empty
    sequence of finite numbers > 0). The kernel itself is :func:`assemble`'s, from the checked
    arguments (what a runner whose configuration is checked already, :class:`fedlangevin.FALD`,
    calls directly).
    """
    check_problem(problem)
    temperature = check_real("temperature", temperature, low=0.0, low_open=True)
    correlation = check_real("correlation", correlation, low=0.0, high=1.0)
    rule = as_participation(participation)
    rule.validate(check_weights(problem.weights, problem.num_clients))
    batch_size = problem.check_batch_size(batch_size)
    dtype = check_dtype("dtype", dtype)
    noise_dtype = None if noise_dtype is None else check_dtype("noise_dtype", noise_dtype)
    device = check_device("device", device)
    if transport is not None:
        check_conforms(transport, TRANSPORT, "transport")
    if upload is not None:
        check_conforms(upload, UPLOAD_CODEC, "upload")
    if correction is not None and callable(getattr(correction, "build", None)):  # a settings record
        check_conforms(correction, CORRECTION_SETTINGS, "correction")
        correction = correction.build(problem, dtype=dtype, device=device, upload=upload)
    if correction is not None:
        check_conforms(correction, DRIFT_CORRECTION, "correction")
    built = assemble(problem, temperature, correlation, rule, batch_size, dtype=dtype, device=device,
                     noise_dtype=noise_dtype, kernel=kernel, preconditioner=preconditioner, correction=correction,
                     transport=transport, upload=upload)
    raw = built.step

    def step(state: FALDState, step_sizes: Sequence[float], generator: torch.Generator | None, on_step=None,
             **arguments):
        return raw(state, check_step_sizes("step_sizes", step_sizes), generator, on_step, **arguments)

    if getattr(raw, "rounds", None) is not None:
        step.rounds = raw.rounds
    return built._replace(step=step)


def assemble(
    problem: FederatedProblem,
    temperature: float,
    correlation: float,
    rule: Participation,
    batch_size: int | None,
    *,
    dtype: torch.dtype,
    device: torch.device,
    noise_dtype: torch.dtype | None,
    kernel: str = "auto",
    preconditioner=None,
    correction=None,
    transport=None,
    upload: UploadCodec | None = None,
) -> Kernel:
    """:func:`build`'s kernel from arguments checked already (a runner's checked configuration:
    :class:`fedlangevin.fald.runner.config.Config`): no argument is validated again and ``step``
    takes its step sizes as they come (the runner's schedule has checked them). ``correction`` is a
    built one (the kernel side). The problem's gradient is still probed once
    (:func:`check_gradient`) and a preconditioner is checked where it is placed."""
    weights = check_weights(problem.weights, problem.num_clients)
    transport = LocalTransport() if transport is None else transport

    def convert(given):
        """M given to build or step: None for I, else the preconditioner object of the contract."""
        if given is not None and not (hasattr(given, "drift") or hasattr(given, "noise")):
            raise ValueError(f"preconditioner must be {PRECONDITIONERS}; got {type(given).__name__} {given!r:.80}")
        return None if is_identity(given) else as_preconditioner(given, problem.dim, "preconditioner")

    current = RoundPreconditioner(preconditioner, convert, problem.dim, dtype, device)  # M round by round
    if callable(getattr(transport, "bind", None)):  # a transport that splits the clients itself (distributed)
        transport.bind(problem.num_clients)
    held = None if transport.clients is None else check_client_indices(transport.clients, problem.num_clients)
    p = weights.to(device=device, dtype=dtype)
    # exact=False transports: the held clients' private noise and minibatches come from the
    # transport's per-process stream (drawn for the held clients only); participation and the
    # shared noise stay on the common generator
    own_stream = None if held is None or getattr(transport, "exact", True) else transport.private_stream
    noise_weights = rule.noise_weights(weights)  # p (full participation, noise="paper") or E[w_c^2] / p_c
    scale_weights = noise_weights if own_stream is None else noise_weights.index_select(0, held)
    scales = noise_scales(scale_weights, temperature, correlation, device=device, dtype=dtype, noise_dtype=noise_dtype)
    work = problem.to(device=device, dtype=dtype)
    if correction is not None and held is not None:
        raise ValueError("correction: drift corrections run in one process (not with a transport that splits the clients)")
    # the fast round kernels serve every round run without a preconditioner (one given to build or
    # to step: M is a step argument like the step sizes, so a runner that adapts M keeps its kernel)
    fast = held is None and correction is None
    stepper = make_stepper(work, dtype, device, batch_size, kernel) if fast else None
    if held is not None:
        work = work.clients(held.tolist())
        held = held.to(device)
    check_gradient(work, dtype, device, batch_size, problem)

    def init(theta0: torch.Tensor) -> FALDState:
        theta = initial_theta(theta0, problem.dim, dtype, device)
        cstate = None if correction is None else correction.init(theta)
        return FALDState(theta=theta, step=0, round=0, correction=cstate)

    def step(state: FALDState, step_sizes: Sequence[float], generator: torch.Generator | None, on_step=None, *,
             preconditioner=BUILT, tally=None, normals=None, weights=None):
        pre = current(preconditioner)
        theta = state.theta
        r, d = theta.shape
        if (tally is not None or normals is not None) and own_stream is not None:
            raise ValueError("tally, normals: need every client's private normals, which a transport with "
                             "exact=False does not draw in one process")
        if normals is not None and len(step_sizes) != 1:
            raise ValueError(f"normals: given for one local step; got {len(step_sizes)} step sizes")
        if stepper is not None and pre is None and normals is None:
            beta = stepper.local_steps(theta, step_sizes, scales, generator, on_step, tally=tally)
        else:
            beta = theta.unsqueeze(1).expand(r, work.num_clients, d).clone()  # broadcast
            own = None if own_stream is None else own_stream(generator)
            for i, eta in enumerate(step_sizes):
                term = None if correction is None else correction.term(state.correction, beta)
                if own is None:
                    local_step(beta, work, float(eta), scales, generator, batch_size, clients=held,
                               preconditioner=pre, correction=term, tally=tally, normals=normals)
                else:
                    local_step(beta, work, float(eta), scales, own, batch_size, preconditioner=pre,
                               correction=term, shared_generator=generator)
                if on_step is not None:
                    on_step(i, beta)
        w = rule.weights(p, r, generator) if weights is None else weights
        if held is None:
            new_theta = transport.reduce(aggregate(beta, theta, w, generator, upload))
        else:
            new_theta = transport.reduce(aggregate(beta, theta, w.index_select(-1, held), generator, upload))
        cstate = (state.correction if correction is None
                  else correction.update(state.correction, theta, new_theta, beta, w, generator))
        new = FALDState(theta=new_theta, step=state.step + len(step_sizes), round=state.round + 1, correction=cstate)
        return new, RoundInfo(weights=w)

    if (isinstance(stepper, SmallAffineStepper) and type(rule) is Full and upload is None
            and type(transport) is LocalTransport and current.built is None):
        def rounds(state: FALDState, step_sizes_list: Sequence[Sequence[float]], generator: torch.Generator | None, *,
                   preconditioner=BUILT):
            if current(preconditioner) is not None:
                raise ValueError("rounds: runs rounds without a preconditioner only; call step round by round")
            thetas = stepper.rounds(state.theta, step_sizes_list, scales, generator, p)
            steps = state.step + sum(map(len, step_sizes_list))
            new = FALDState(theta=thetas[-1].clone(), step=steps, round=state.round + len(step_sizes_list),
                            correction=state.correction)
            return new, thetas

        step.rounds = rounds
    return Kernel(init, step, isinstance(stepper, AffineStepper))



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


def client_round(
    problem: FederatedProblem,
    theta: torch.Tensor,
    step_sizes: Sequence[float],
    *,
    weight: float,
    temperature: float = 1.0,
    correlation: float = 0.0,
    shared_generator: torch.Generator | None,
    private_generator: torch.Generator | None,
    batch_size: int | None = None,
    noise_dtype: torch.dtype | None = torch.float32,
    noise_weight: float | None = None,
) -> torch.Tensor:
    """The K local steps of ONE client from the broadcast theta (R, d); returns its beta (R, d).

    ``problem``: that client's problem, one client (e.g. ``full.clients([c])``); ``weight``:
    its p_c in the federation (sets its private noise scale sqrt(2 tau (1 - rho^2) / p_c));
    ``noise_weight``: q_c in its place in the noise scale (the participation rule's
    :meth:`~fedlangevin.fald.core.participation.Participation.noise_weights`; None: p_c).
    The shared normals come from ``shared_generator`` (every client must draw the same ones:
    seed it identically on every client), the private normals and minibatches from
    ``private_generator`` (the client's own). With one generator for both and N = 1 this is
    exactly :func:`build`'s round before its synchronisation. A server then averages the
    clients' results with the participation weights.
    """
    if problem.num_clients != 1:
        raise ValueError(f"problem must hold one client (use problem.clients([c])); got {problem.num_clients}")
    weight = check_real("weight", weight, low=0.0, high=1.0, low_open=True)
    if noise_weight is not None:
        weight = check_real("noise_weight", noise_weight, low=0.0, low_open=True)
    r, d = theta.shape
    scales = noise_scales(torch.tensor([float(weight)], dtype=torch.float64), temperature, correlation,
                          device=theta.device, dtype=theta.dtype, noise_dtype=noise_dtype)
    beta = theta.unsqueeze(1).clone()
    for eta in step_sizes:
        local_step(beta, problem, float(eta), scales, private_generator, batch_size, shared_generator=shared_generator)
    return beta[:, 0]
