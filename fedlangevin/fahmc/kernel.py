"""FA-HMC as a pure kernel: ``build(problem, ...) -> FAHMCKernel`` with ``init`` and ``step``.

Federated averaging of underdamped (kinetic) Langevin dynamics, after Liang, Zhang, Deng, Song and
Lin, "Bayesian Federated Learning with Hamiltonian Monte Carlo: Algorithm and Theory" (arXiv
2407.06935, 2024). The splittings and what the server averages are stated here; they are this
package's scheme (written without the paper at hand), built so that K = 1 is exactly the
centralised integrator and infinite friction is exactly FA-LD (below).

The dynamics
------------
With friction gamma > 0, temperature tau and a constant preconditioner M = A A^T (the matrix
that multiplies the force, FA-LD's ``preconditioner``, so the same M serves both samplers; in
HMC's terms the *inverse* mass matrix, Stan's ``inv_metric``: the posterior covariance is the
natural choice),

    d theta = v dt,    d v = -M grad f(theta) dt - gamma v dt + sqrt(2 gamma tau) A dW,        (1)

leaves pi(theta, v) ∝ exp(-f(theta) / tau) N(v; 0, tau M) invariant. ``v`` is the velocity in
theta's units (the momentum p = M^{-1} v); the state calls it ``momentum``.

A local step of client c (step size h, a = exp(-gamma h))
----------------------------------------------------------
Every step is one operator sequence of (1) on the client's energy f^c (``problem.grad``), with

    B(s): v <- v - s M grad f~^c(theta)        (kick; f~^c: a minibatch estimate with batch_size)
    A(s): theta <- theta + s v                 (drift)
    O:    v <- a v + sqrt(tau (1 - a^2)) A (rho xi_k + sqrt((1 - rho^2) / p_c) xi^c_k)      (2)

where xi_k (shared by every client, per chain and step) and xi^c_k (private) are standard
normals: the momentum refresh's noise is FA-LD's eq. 14 noise (shared with correlation rho, the
private part scaled by 1/sqrt(p_c)), so the p-weighted average of the clients' refresh noises
is sqrt(tau (1 - a^2)) A xi with xi standard normal (the variance of (2) averaged is tau
(1 - a^2) M: rho^2 + (1 - rho^2) sum_c p_c^2 / p_c = 1), as eq. 15 for FA-LD. Under partial
participation the refresh's private noise is calibrated as FA-LD's (the rule's ``noise``,
:mod:`fedlangevin.federation.participation`): 1 / p_c becomes p_c / E[w_c^2], so that the averaged
refresh keeps E[sum_c w_c^2 (1 - rho^2) / q_c] = 1 - rho^2 (``noise="paper"``: 1 / p_c, which
scheme I inflates by N / S + 1 - 1 / S).

- ``splitting="BAOAB"`` (default; Leimkuhler & Matthews 2013): the step B(h/2) A(h/2) O A(h/2)
  B(h/2) ends with a half kick at the new position, and the next step opens with a half kick at
  the same position with the same gradient (first same as last). The kernel runs the two
  together at the start of the next step, so a local step is

      B(h) A(h/2) O A(h/2)           (one gradient, at the step's starting position)

  The positions are BAOAB's; the stored velocity is BAOAB's before its closing half kick (the
  velocity after O and the last drift). On a Gaussian target centralised BAOAB's theta
  marginal is exact at any stable h (M-whitened: h < 2).
- ``splitting="OBABO"`` (Bussi & Parrinello 2007): O(h/2) B(h/2) A(h) B(h/2) O(h/2); the
  closing and opening half refreshes of consecutive steps compose to one O with a = exp(-gamma h),
  and the step is run from the kick:

      B(h/2) O B(h/2) A(h)           (one gradient: both kicks are at the same position)

  With gamma -> infinity (a = 0) the velocity is fresh noise at every step and the step is
  theta <- theta - (h^2 / 2) M grad f~^c + h sqrt(tau) A (...): exactly FA-LD's eq. 10 with
  eta = h^2 / 2 (the noise variance h^2 tau = 2 eta tau), so OBABO FA-HMC *is* FA-LD in that
  limit: its exact law round for round (:mod:`fedlangevin.fahmc.exact`), and with one seed its
  draws, since the kernel draws the same numbers in the same order as FA-LD's. BAOAB's limit is the
  federated Leimkuhler-Matthews scheme theta <- theta - eta M grad + sqrt(eta tau / 2) A
  (n_{k-1} + n_k), whose law differs from FA-LD's at O(eta).

Each client evaluates **one gradient per local step** (K per round), as FA-LD. With a step-size
schedule each step uses its own h in the sequences above (for a constant h they are exactly
BAOAB and OBABO).

M and gamma are **step arguments** like the step sizes (``step(..., preconditioner=M,
friction=gamma)``; default: the ones given to :func:`build`), so the warm-up that adapts them
(:mod:`fedlangevin.fahmc.warmup`) never rebuilds the kernel. ``friction=math.inf`` (a step
argument only, never a sampler's friction) is the **overdamped step**: OBABO's sequence at
a = 0, for either splitting, i.e. FA-LD's eq. 10 with eta = h^2 / 2 (the velocity carried in is
discarded by the refresh; the one carried out is the refresh's noise plus half a kick). The
warm-up runs it while it adapts M: BAOAB's own infinite-friction limit (below) has correlated
moves that the warm-up's acceptance statistic does not measure.

A round (what the server averages, and why)
-------------------------------------------
Broadcast (theta, v) of every chain; each client runs K = len(step_sizes) local steps from it;
the server forms theta' = sum_c w_c theta_c and v' = sum_c w_c v_c with the participation
rule's weights (:mod:`fedlangevin.federation.participation`: w = p for full participation,
schemes I and II as FA-LD). Both are averaged: (i) the first step of a round kicks at the common
broadcast theta, where sum_c p_c grad f^c = grad f, and every later operator of that step is
linear in (theta_c, v_c) given it, so with K = 1 and full gradients a round is *exactly* one
step of the centralised integrator on f (in law: the averaged noise is the centralised one), for
any heterogeneity; (ii) the velocity carried across rounds is what makes the dynamics underdamped
(a momentum redrawn every round would turn K = 1 into a random-walk sampler). Communication per
client and round: 2 d floats up (theta_c, v_c) and 2 d down, twice FA-LD's.

The momentum starts at **zero** (``init(theta0)`` has no random stream); the refresh O brings it
to N(0, tau M) within a few 1 / gamma time units.

All chains and clients are updated at once on (R, N, d) buffers: no Python loop over chains or
clients; randomness comes from the generator passed in, in a fixed order per step (minibatch
draws, the shared normals, the private normals of all N clients), then the round's participation
draw; ``step`` never modifies its input state.

Distributed (``transport=``, :data:`fedlangevin.federation.contracts.TRANSPORT`, e.g.
:class:`fedlangevin.distributed.ProcessGroup`): a process holds the clients ``transport.clients``
and runs only their local steps; its partial sums sum_{c held} w_c theta_c and sum_{c held} w_c v_c
are stacked, (2, R, d), and summed over processes by one ``transport.reduce`` (one all-reduce a
round for both). With ``exact = True`` every process draws every random number as one process does
(minibatches and private normals of all N clients, participation) and keeps its clients' slice, so
the samples do not depend on the split (up to the order of the floating-point summation); with
``exact = False`` the held clients' private normals and minibatches come from
``transport.private_stream(generator)`` (drawn once per round from the common generator before
the local steps), the shared normals and the participation from the common generator: the same
law, fewer draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from fedlangevin._validation import check_choice, check_device, check_dtype, check_real, check_step_sizes
from fedlangevin.federation.rounds import RoundInfo, check_gradient, initial_theta
from fedlangevin.federation.noise import add_noise_, noise_scales
from fedlangevin.federation.participation import Full, Participation, SchemeI, SchemeII, as_participation, synchronize
from fedlangevin.federation.preconditioning import (
    BUILT, RoundPreconditioner, as_preconditioner, is_identity, preconditioner_matrix, preconditioner_record,
)
from fedlangevin.federation.contracts import TRANSPORT, check_conforms
from fedlangevin.problems.base import FederatedProblem, check_client_indices, check_problem, check_weights

__all__ = ["DEFAULT_FRICTION", "FAHMCKernel", "FAHMCState", "OVERDAMPED", "SPLITTINGS", "as_fahmc_preconditioner", "assemble", "build",
           "checked_arguments", "exact_round", "local_steps_"]

#: gamma with a numeric step size and ``friction="auto"`` (with M the posterior covariance: the friction rule's
#: value is about 0.7, :mod:`fedlangevin.fahmc.warmup`)
DEFAULT_FRICTION = 1.0
#: the splittings of a local step (module docstring)
SPLITTINGS = ("BAOAB", "OBABO")
#: ``step(..., friction=OVERDAMPED)``: the overdamped step, FA-LD's with eta = h^2 / 2 (module docstring)
OVERDAMPED = math.inf


@dataclass(frozen=True)
class FAHMCState:
    """Global parameters and velocities after the last synchronisation, and the counters.

    theta : (R, d); momentum : (R, d), the velocity v = M p of (1) in theta's units (for BAOAB,
    before the closing half kick: see the module docstring); step : local steps so far; round :
    rounds so far.
    """

    theta: torch.Tensor
    momentum: torch.Tensor
    step: int = 0
    round: int = 0


class FAHMCKernel:
    """The FA-HMC round kernel (:data:`fedlangevin.federation.contracts.KERNEL`): ``init(theta0) -> state``,
    ``step(state, step_sizes, generator) -> (state, RoundInfo)``, and what the runner reads
    (``name``, ``settings()``, ``record()``, ``uploads(info)``). Made by :func:`build`."""

    name = "FA-HMC"
    autograd_free = False

    def __init__(self, problem: FederatedProblem, work: FederatedProblem, *, temperature: float, correlation: float,
                 rule: Participation, batch_size: int | None, friction: float, splitting: str,
                 pre: RoundPreconditioner, dtype: torch.dtype, device: torch.device, noise_dtype: torch.dtype | None,
                 check_step_sizes: bool, transport: Any = None, held: torch.Tensor | None = None) -> None:
        self.problem, self._work = problem, work
        self.temperature, self.correlation, self.participation = temperature, correlation, rule
        self.batch_size, self.friction, self.splitting = batch_size, friction, splitting
        self._current = pre  # M round by round (given to step, or the built one)
        self.preconditioner = pre.built  # the default M of step (None: M = I)
        self.dtype, self.device, self.noise_dtype = dtype, device, noise_dtype
        self._check_step_sizes = check_step_sizes
        weights = check_weights(problem.weights, problem.num_clients)
        self._p = weights.to(device=device, dtype=dtype)
        # a distributed run (module docstring): the held clients (None: all), and with exact = False the
        # transport's per-process stream of their private noise and minibatches (scales of the held only)
        self._transport, self._held = transport, held
        self._own_stream = None if held is None or getattr(transport, "exact", True) else transport.private_stream
        noise_weights = rule.noise_weights(weights)  # p, or E[w_c^2] / p_c under the calibrated rule (module docstring)
        scale_weights = noise_weights if self._own_stream is None else noise_weights.index_select(0, held.cpu())
        self._scales = noise_scales(scale_weights, temperature, correlation, device=device, dtype=dtype,
                                    noise_dtype=noise_dtype)

    # -- the kernel ---------------------------------------------------------------------------------
    def init(self, theta0: torch.Tensor) -> FAHMCState:
        """The state at ``theta0`` (R, d) with zero momentum."""
        theta = initial_theta(theta0, self.problem.dim, self.dtype, self.device)
        return FAHMCState(theta=theta, momentum=torch.zeros_like(theta), step=0, round=0)

    def step(self, state: FAHMCState, step_sizes: Sequence[float], generator: torch.Generator | None, *,
             preconditioner: Any = BUILT, friction: Any = BUILT, noise_factor: torch.Tensor | None = None):
        """One communication round: broadcast (theta, v), K = len(step_sizes) local steps of the
        splitting on every client, the weighted average of (theta_c, v_c) (module docstring).

        preconditioner : this round's M (a (d, d) or (d,) array or a preconditioner object; None: I),
            placed and checked once per new object; friction : this round's gamma > 0, or
            :data:`OVERDAMPED` for the overdamped step. Default: the ones given to :func:`build`.
            noise_factor : B, (d, d) or (d,), applied to the refresh's standard normals before A (the
            refresh's noise becomes A B xi): the gradient-noise correction of
            :mod:`fedlangevin.fahmc.gradient_noise` (None: B = I)."""
        if self._check_step_sizes:
            step_sizes = check_step_sizes("step_sizes", step_sizes)
        pre = self._current(preconditioner)
        gamma = self.friction if friction is BUILT else _step_friction(friction)
        overdamped = gamma == OVERDAMPED
        theta, v = state.theta, state.momentum
        r, d = theta.shape
        n = self._work.num_clients                        # N, or the clients this process holds
        x = theta.unsqueeze(1).expand(r, n, d).clone()   # the clients' positions (R, n, d)
        u = v.unsqueeze(1).expand(r, n, d).clone()       # and velocities
        # exact = False: the held clients' private numbers from the transport's stream of this round
        own = None if self._own_stream is None else self._own_stream(generator)
        private = generator if own is None else own
        local_steps_(x, u, step_sizes, splitting="OBABO" if overdamped else self.splitting,  # overdamped: O is a fresh draw
                     force=lambda x: self._force(x, private, pre),
                     refresh=lambda u, h: self._refresh(u, h, gamma, pre, generator, own, noise_factor))
        w = self.participation.weights(self._p, r, generator)
        if self._transport is None:
            theta, v = synchronize(x, w), synchronize(u, w)
        else:  # the held clients' partial sums of theta and v, summed over processes in one reduce
            held = w if self._held is None else w.index_select(-1, self._held)
            total = self._transport.reduce(torch.stack((synchronize(x, held), synchronize(u, held))))
            theta, v = total[0].clone(), total[1].clone()
        new = FAHMCState(theta=theta, momentum=v, step=state.step + len(step_sizes), round=state.round + 1)
        return new, RoundInfo(weights=w)

    def _force(self, x: torch.Tensor, generator: torch.Generator | None, pre: Any) -> torch.Tensor:
        grad = self._work.grad(x, batch_size=self.batch_size, generator=generator)
        return -(grad if pre is None else pre.drift(grad))

    def _refresh(self, u: torch.Tensor, h: float, gamma: float, pre: Any, generator: torch.Generator | None,
                 own: torch.Generator | None = None, factor: torch.Tensor | None = None) -> None:
        """O of (2), in place: v <- a v + sqrt(tau (1 - a^2)) A (shared + private noise). FA-LD's
        noise for a step of size eta adds sqrt(2 eta tau) (...) (:mod:`fedlangevin.federation.noise`):
        eta = (1 - a^2) / 2 gives this one (a = 0 for the overdamped step: fresh noise). ``own``: the
        held clients' private stream (``exact = False``; the shared normals stay on ``generator``);
        ``factor``: B of :meth:`step` (the noise A B xi)."""
        u.mul_(math.exp(-gamma * h))
        one_minus_a2 = -math.expm1(-2.0 * gamma * h)
        transform = None if pre is None else pre.noise
        if factor is not None:
            transform = _with_factor(factor.to(device=u.device, dtype=u.dtype), transform)
        if own is None:
            add_noise_(u, self._scales, 0.5 * one_minus_a2, generator, clients=self._held, transform=transform)
        else:
            add_noise_(u, self._scales, 0.5 * one_minus_a2, own, transform=transform, shared_generator=generator)

    # -- what the runner reads ----------------------------------------------------------------------
    def uploads(self, info: RoundInfo) -> float:
        """Clients that uploaded in the round (mean over chains)."""
        return self.participation.uploads(info.weights)

    def settings(self) -> dict:
        """The Settings fields this family sets (:class:`fedlangevin.runner.results.settings.Settings`)."""
        rule = self.participation
        return dict(temperature=self.temperature, correlation=self.correlation, participation=repr(rule),
                    scheme=rule.scheme, num_sampled=getattr(rule, "num_sampled", None), batch_size=self.batch_size,
                    participation_noise=str(getattr(rule, "noise", "calibrated")),
                    noise_dtype=str(self.noise_dtype or self.dtype).replace("torch.", ""),
                    preconditioner="none" if self.preconditioner is None else repr(self.preconditioner),
                    sampler=self.name, splitting=self.splitting, friction=float(self.friction))

    def record(self) -> dict:
        """Plain values that a checkpoint stores and a resume compares: the family's settings that
        :class:`~fedlangevin.runner.results.settings.Settings` does not hold."""
        rule = self.participation
        stored = rule if type(rule) in (Full, SchemeI, SchemeII) else repr(rule)
        pre = None if self.preconditioner is None else preconditioner_record(self.preconditioner)
        return {"splitting": self.splitting, "friction": self.friction, "temperature": self.temperature,
                "correlation": self.correlation, "participation": stored, "batch_size": self.batch_size,
                "preconditioner": pre, "noise_dtype": None if self.noise_dtype is None else str(self.noise_dtype)}

    @property
    def preconditioner_matrix(self) -> torch.Tensor:
        """The built M (d, d), float64 on the CPU (I without a preconditioner)."""
        return preconditioner_matrix(self.preconditioner, self.problem.dim)


def as_fahmc_preconditioner(preconditioner: Any, dim: int) -> Any:
    """The preconditioner object of ``preconditioner``
    (:func:`fedlangevin.federation.preconditioning.as_preconditioner`: a (d, d) matrix, a (d,) vector or
    an object of the contract), ``None`` for None or M = I; ``ValueError`` naming ``preconditioner``
    otherwise."""
    if preconditioner is None:
        return None
    try:
        pre = as_preconditioner(preconditioner, dim, "preconditioner")
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith("preconditioner") else f"preconditioner: {message}") from None
    return None if is_identity(pre) else pre


def _with_factor(factor: torch.Tensor, transform: Callable | None) -> Callable:
    """The noise map xi -> A B xi for B = ``factor`` ((d, d) or (d,)) and A = ``transform`` (None: I)."""
    def scaled(xi: torch.Tensor) -> torch.Tensor:
        xi = xi.to(factor.dtype)
        return xi * factor if factor.dim() == 1 else xi @ factor.T

    return scaled if transform is None else (lambda xi: transform(scaled(xi)))


def _step_friction(friction: Any) -> float:
    """A step's gamma: a number > 0, or :data:`OVERDAMPED` (``ValueError`` naming ``friction``)."""
    if isinstance(friction, float) and friction == OVERDAMPED:
        return OVERDAMPED
    return check_real("friction", friction, low=0.0, low_open=True)


def local_steps_(x: torch.Tensor, u: torch.Tensor, step_sizes: Sequence[float], *, splitting: str,
                 force: Callable[[torch.Tensor], torch.Tensor],
                 refresh: Callable[[torch.Tensor, float], None]) -> None:
    """The K = len(step_sizes) local steps of :mod:`fedlangevin.fahmc.kernel`'s splitting on the
    positions ``x`` and velocities ``u`` (R, n, d), in place. ``force(x)`` is -M grad f~^c at x
    (the step's one gradient, drawn first); ``refresh(u, h)`` is the O step of eq. (2) in place."""
    for h in step_sizes:
        h = float(h)
        f = force(x)
        if splitting == "BAOAB":        # B(h) A(h/2) O A(h/2)
            u.add_(f, alpha=h)
            x.add_(u, alpha=0.5 * h)
            refresh(u, h)
            x.add_(u, alpha=0.5 * h)
        else:                           # OBABO: B(h/2) O B(h/2) A(h)
            u.add_(f, alpha=0.5 * h)
            refresh(u, h)
            u.add_(f, alpha=0.5 * h)
            x.add_(u, alpha=h)



def exact_round(x: torch.Tensor, v: torch.Tensor, grad: torch.Tensor, h: float, gamma: float, tau: float, pre: Any,
                splitting: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(theta', v') of one K = 1 round of ``splitting`` from (x, v) (R, d) with the exact force -M ``grad``
    (grad f at x) and a refresh drawn from ``generator``: what the round would be without the force's noise
    (the warm-up's noiseless statistic, :mod:`fedlangevin.fahmc.warmup`, GHOST). ``pre``: M (None: I)."""
    force = -(grad if pre is None else pre.drift(grad))

    def refresh(u: torch.Tensor, step: float) -> None:
        xi = torch.randn(u.shape, generator=generator, dtype=u.dtype)
        u.mul_(math.exp(-gamma * step)).add_(xi if pre is None else pre.noise(xi),
                                             alpha=math.sqrt(tau * -math.expm1(-2.0 * gamma * step)))

    x1, v1 = x.clone(), v.clone()
    local_steps_(x1, v1, [h], splitting=splitting, force=lambda _: force, refresh=refresh)
    return x1, v1


def build(
    problem: FederatedProblem,
    temperature: float = 1.0,
    correlation: float = 0.0,
    participation: Participation | str | None = None,
    batch_size: int | None = None,
    friction: float = 1.0,
    *,
    preconditioner: Any = None,
    splitting: str = "BAOAB",
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    noise_dtype: torch.dtype | None = torch.float32,
    transport: Any = None,
) -> FAHMCKernel:
    """Build the FA-HMC round kernel for ``problem`` (see the module docstring).

    temperature : tau > 0; correlation : rho in [0, 1] of the momentum refresh's noise across
    clients; participation : Full (default), SchemeI(S) or SchemeII(S); batch_size : minibatch
    size per client and step (None: full gradients); friction : gamma > 0; preconditioner : M, a
    (d, d) symmetric positive-definite matrix or a (d,) positive vector (diagonal), or a
    preconditioner object (:data:`fedlangevin.federation.contracts.PRECONDITIONER`); None: I. It
    multiplies the force (the inverse mass matrix in HMC's terms: pass the posterior covariance).
    M and gamma are ``step``'s defaults (``step`` takes either as an argument). splitting :
    ``"BAOAB"`` or ``"OBABO"``; dtype, device : of the state; noise_dtype : of the standard
    normals (:mod:`fedlangevin.federation.noise`); transport : a distributed run's synchronisation
    (:data:`fedlangevin.federation.contracts.TRANSPORT`, module docstring; None: one process, every client).

    Every argument is checked here (:func:`checked_arguments`: ``ValueError`` naming it), then the
    kernel is :func:`assemble`'s, whose ``step`` checks each round's step sizes.
    """
    check_problem(problem)
    if transport is not None:
        check_conforms(transport, TRANSPORT, "transport")
    return assemble(problem, **checked_arguments(problem, temperature, correlation, participation, batch_size, friction,
                                                 splitting=splitting, dtype=dtype, device=device,
                                                 noise_dtype=noise_dtype),
                    preconditioner=preconditioner, check_step_sizes=True, transport=transport)


def checked_arguments(problem: FederatedProblem, temperature: Any, correlation: Any, participation: Any,
                      batch_size: Any, friction: Any, *, splitting: Any, dtype: Any, device: Any,
                      noise_dtype: Any) -> dict:
    """:func:`assemble`'s arguments besides the problem and M, checked (``ValueError`` naming the
    argument): what :func:`build` and a resume (values read from a checkpoint) check."""
    temperature = check_real("temperature", temperature, low=0.0, low_open=True)
    correlation = check_real("correlation", correlation, low=0.0, high=1.0)
    friction = check_real("friction", friction, low=0.0, low_open=True)
    splitting = check_choice("splitting", splitting, SPLITTINGS)
    rule = as_participation(participation)
    rule.validate(check_weights(problem.weights, problem.num_clients))
    batch_size = problem.check_batch_size(batch_size)
    dtype = check_dtype("dtype", dtype)
    noise_dtype = None if noise_dtype is None else check_dtype("noise_dtype", noise_dtype)
    device = check_device("device", device)
    return dict(temperature=temperature, correlation=correlation, rule=rule, batch_size=batch_size,
                friction=friction, splitting=splitting, dtype=dtype, device=device, noise_dtype=noise_dtype)


def assemble(problem: FederatedProblem, *, temperature: float, correlation: float, rule: Participation,
             batch_size: int | None, friction: float, splitting: str, dtype: torch.dtype, device: torch.device,
             noise_dtype: torch.dtype | None, preconditioner: Any = None,
             check_step_sizes: bool = False, transport: Any = None) -> FAHMCKernel:
    """The kernel from checked arguments (:func:`checked_arguments`, or the sampler's own checks):
    none is checked again; M is converted, placed and checked, and the problem's gradient probed
    once (:func:`fedlangevin.federation.rounds.check_gradient`). ``check_step_sizes``: ``step``
    checks each round's step sizes (off for the runner :class:`fedlangevin.FAHMC`, whose schedule is
    checked). ``transport``: checked against the contract by the caller; one with ``bind(N)`` is
    given the problem's N here, and the kernel then holds its ``clients`` (module docstring)."""
    pre = RoundPreconditioner(preconditioner, lambda given: as_fahmc_preconditioner(given, problem.dim), problem.dim,
                              dtype, device)
    if transport is not None and callable(getattr(transport, "bind", None)):  # it splits the clients itself
        transport.bind(problem.num_clients)
    clients = None if transport is None else transport.clients
    held = None if clients is None else check_client_indices(clients, problem.num_clients)
    work = problem.to(device=device, dtype=dtype)
    if held is not None:
        work, held = work.clients(held.tolist()), held.to(device)
    check_gradient(work, dtype, device, batch_size, problem)
    return FAHMCKernel(problem, work, temperature=temperature, correlation=correlation, rule=rule,
                       batch_size=batch_size, friction=friction, splitting=splitting, pre=pre, dtype=dtype,
                       device=device, noise_dtype=noise_dtype, check_step_sizes=check_step_sizes, transport=transport,
                       held=held)
