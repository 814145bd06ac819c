"""FA-LD as a pure kernel: ``build(problem, ...) -> Kernel(init, step)``.

In the shape of BlackJAX's kernels and ``posteriors``' transforms: :func:`build` fixes the
problem and the settings once; ``init(theta0)`` returns the state, ``step(state, step_sizes,
generator)`` runs one communication round (Deng et al., Alg. 1 / Alg. 4: broadcast, K =
len(step_sizes) local steps of eq. 10, synchronisation) and returns the new state and a
:class:`RoundInfo`. Step sizes are an argument of every call (any schedule is a sequence of
numbers), randomness comes from the generator passed in, and the input state is never
modified.

Extension points (their contracts: :mod:`fedlangevin.federation.contracts`, checked here before any
work; the built-in implementations: :mod:`fedlangevin.federation.extensions`), each an explicit
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

from typing import Callable, NamedTuple, Sequence

import torch

from fedlangevin._validation import check_device, check_dtype, check_real, check_step_sizes
from fedlangevin.federation.contracts import (
    CORRECTION_SETTINGS, DRIFT_CORRECTION, TRANSPORT, UPLOAD_CODEC, check_conforms,
)
from fedlangevin.federation.extensions import PRECONDITIONERS, LocalTransport
from fedlangevin.fald.kernel import FALDState
from fedlangevin.fald.local import local_step
from fedlangevin.federation.noise import client_noise_weight, noise_scales
from fedlangevin.federation.participation import Full, Participation, as_participation, synchronize
from fedlangevin.federation.preconditioning import BUILT, RoundPreconditioner, as_preconditioner, is_identity
from fedlangevin.federation.rounds import RoundInfo, UploadCodec, aggregate, check_gradient, initial_theta
from fedlangevin.fald.steppers import AffineStepper, SmallAffineStepper, make_stepper
from fedlangevin.problems.base import FederatedProblem, check_client_indices, check_problem, check_weights

__all__ = ["Kernel", "RoundInfo", "assemble", "build", "check_gradient", "client_round", "initial_theta"]


class Kernel(NamedTuple):
    """``init(theta0) -> state``; ``step(state, step_sizes, generator, on_step=None, *, preconditioner=...)
    -> (state, info)``.

    ``preconditioner``: this round's M, an argument like the step sizes (default: the one given
    to :func:`build`; ``None``: I), so a runner that adapts M in warm-up keeps one kernel. A new M
    object is placed on the state's device and dtype and checked once, when first given.

    ``on_step(i, beta)``, if given, sees the held clients' states (R, n, d) after local step
    i (a view valid during the call). ``tally`` (a :class:`~fedlangevin.federation.noise.NoiseTally`)
    gets the round's standard normals (the round is bit-identical); ``normals`` (one local step)
    are used instead of drawing and ``weights`` instead of the participation's draw: a chain
    coupled to another's round (:mod:`fedlangevin.warmup.companions`). ``autograd_free``: the
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
        ``preconditioner=None`` (rounds without M) and refuses any other, and ``tallies`` (one
        :class:`~fedlangevin.federation.noise.NoiseTally` per round, as :attr:`step`'s ``tally``);
        its ``weights`` are every round's synchronisation weights (:attr:`step`'s ``RoundInfo.weights``)."""
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
    :mod:`fedlangevin.federation.noise`); kernel : "auto", "small", "dense" or "gradient" (the round
    kernel of :mod:`fedlangevin.fald.steppers`, used when no extension is active).
    preconditioner, correction, transport, upload : the extension points
    (:mod:`fedlangevin.federation.extensions`); ``None`` is the plain round.

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

    for name in ("rounds", "given"):
        if getattr(raw, name, None) is not None:
            setattr(step, name, getattr(raw, name))
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
    :class:`fedlangevin.fald.config.Config`): no argument is validated again and ``step``
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
        if stepper is not None and pre is None:
            beta = stepper.local_steps(theta, step_sizes, scales, generator, on_step, tally=tally, normals=normals)
        else:
            beta = theta.unsqueeze(1).expand(r, work.num_clients, d).clone()  # broadcast
            own = None if own_stream is None else own_stream(generator)
            grads = work  # a correction may centre the minibatch gradients (control variates: SGLD-CV)
            if batch_size is not None and callable(getattr(correction, "minibatch_problem", None)):
                grads = correction.minibatch_problem(work, state.correction)
            for i, eta in enumerate(step_sizes):
                term = None if correction is None else correction.term(state.correction, beta)
                if own is None:
                    local_step(beta, grads, float(eta), scales, generator, batch_size, clients=held,
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
                   preconditioner=BUILT, tallies=None):
            if current(preconditioner) is not None:
                raise ValueError("rounds: runs rounds without a preconditioner only; call step round by round")
            if tallies is not None and len(tallies) != len(step_sizes_list):
                raise ValueError(f"tallies: one per round ({len(step_sizes_list)}); got {len(tallies)}")
            thetas = stepper.rounds(state.theta, step_sizes_list, scales, generator, p, tallies)
            steps = state.step + sum(map(len, step_sizes_list))
            new = FALDState(theta=thetas[-1].clone(), step=steps, round=state.round + len(step_sizes_list),
                            correction=state.correction)
            return new, thetas

        rounds.weights = p  # every round's synchronisation weights (RoundInfo.weights of step's rounds)
        step.rounds = rounds
    if isinstance(stepper, SmallAffineStepper) and upload is None and type(transport) is LocalTransport:
        def given(theta: torch.Tensor, eta: float, normals: tuple, weights: torch.Tensor | None,
                  generator: torch.Generator | None, *, preconditioner=BUILT):
            """(synchronised parameters (R, d), participation weights) of :attr:`step`'s round of one local
            step of ``eta`` from ``theta`` (R, d) with the given ``normals`` and ``weights`` (None: the
            participation's draw from ``generator``): the same operations, so the same bits, without the
            state and the round's record (a coupled companion chain's step,
            :mod:`fedlangevin.warmup.companions`). None, with nothing done, where M is not I (then call
            :attr:`step`)."""
            if current(preconditioner) is not None:
                return None
            beta = stepper.local_steps(theta, (eta,), scales, None, normals=normals)
            w = rule.weights(p, theta.shape[0], generator) if weights is None else weights
            return synchronize(beta, w), w

        step.given = given
    return Kernel(init, step, isinstance(stepper, AffineStepper))



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
    :meth:`~fedlangevin.federation.participation.Participation.noise_weights`; None: p_c).
    The shared normals come from ``shared_generator`` (every client must draw the same ones:
    seed it identically on every client), the private normals and minibatches from
    ``private_generator`` (the client's own). With one generator for both and N = 1 this is
    exactly :func:`build`'s round before its synchronisation. A server then averages the
    clients' results with the participation weights.
    """
    if problem.num_clients != 1:
        raise ValueError(f"problem must hold one client (use problem.clients([c])); got {problem.num_clients}")
    weight = client_noise_weight(weight, noise_weight)
    r, d = theta.shape
    scales = noise_scales(torch.tensor([float(weight)], dtype=torch.float64), temperature, correlation,
                          device=theta.device, dtype=theta.dtype, noise_dtype=noise_dtype)
    beta = theta.unsqueeze(1).clone()
    for eta in step_sizes:
        local_step(beta, problem, float(eta), scales, private_generator, batch_size, shared_generator=shared_generator)
    return beta[:, 0]
