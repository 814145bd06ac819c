"""Companion chains beside the sampler's: the check of a fixed K > 1, and ``local_steps="auto"``'s measurement (issue 27).

Both compare the stationary law of the broadcast iterate at K local steps with its law at K = 1,
from chains that run *beside* the sampler's on their own generator (seeded from the run's seed),
so that the sampler's chains draw exactly the numbers they draw without them. The companions are
FA-LD with the sampler's problem, temperature, correlation, participation, minibatches and M,
built by the sampler (FA-LD's :func:`~fedlangevin.fald.engine.assemble`, a pure
``(init, step)`` kernel over their own state, passed to :func:`update` with ``state_of``, the state
of one group's iterates), started at the sampler's iterates.

**A fixed K's check** (``check_local_bias=True``, the default) runs one group of R companion
chains (R = the sampler's chains) from the rounds where M and eta are frozen (the end of an
adaptive warm-up; from the first round where nothing adapts), with **one local step of K eta**
per round: a round of the sampler moves K eta of Langevin time, and so does a companion round,
so the two groups decorrelate about equally fast per round (a K = 1 chain at eta would need K
times the rounds: the power problem of an interleaved measurement). The companions are **coupled**
to the sampler's chains: companion r's step adds the noise of sampler chain r's
round, (1 / sqrt(K)) sum_k xi_k per client (:class:`~fedlangevin.federation.noise.NoiseTally`: a
standard normal again, so their law is exactly K = 1's at K eta), and takes the round's
participation; the estimator pairs chain r with companion r (a jackknife over the R pairs), so the
Monte Carlo error of their *difference* sets the bounds (4-7 times narrower on a Gaussian). The
price: the companions' law has the discretisation bias of a step K eta, so K eta must be a step K = 1 can take,
``K eta lambda_max(M H) <= STABLE`` at the chains' iterates (H the global energy's Hessian, power
iteration on Hessian-vector products, as the curvature step rule), else no companion runs and the
record says why. Coupled, a second group runs two K = 1 steps of K eta / 2 per round (the halves
of the round's noise) and the verdict tests the sampler's means against their extrapolation to
step 0, 2 m(K eta / 2) - m(K eta) (:mod:`~fedlangevin.warmup.extrapolation`: the posterior's
mean to second order, so the companions' own step no longer counts as the sampler's bias). Only
the *means* are tested: one Langevin step of h inflates a Gaussian's variance by
1 / (1 - h lambda / 2), so the companions' sds are wide whatever K does; the sd ratios are recorded.

**"auto"** runs its candidate groups (K local steps of eta_1 each, with coupled twins where one
step of K eta_1 is stable) through :func:`update` too; which start, when they are tested and what
is chosen is :mod:`~fedlangevin.warmup.auto_groups`' (passed in as ``look``).

**Burn-in** (never kept): the first :data:`PILOT` rounds give the decay time tau_e of the
sampler's chains and the first group (:func:`~fedlangevin.warmup.local_bias.decay_rounds`,
the larger; a transient only lengthens it: conservative); a group's first B = max(PILOT,
ceil(tau_e ln(1 / TRANSIENT))) rounds after its start are discarded (a round of K steps contracts
at least as fast as a round of one: the module docstring of ``local_bias``), which leaves at most
TRANSIENT of the start's offset. The sums of every group's kept iterates and squares then
accumulate round by round (:mod:`~fedlangevin.warmup.local_bias`' estimator: standard
errors from the per-chain summaries across chains, paired by chain, Bonferroni over the tests).

**Cost.** A group sends as many floats as the sampler's chains: R d more up and down per client,
group and round (counted in the ledger's set-up floats: the trace's communication totals include
them; rounds are unchanged); a fixed K's second group synchronises twice a round (2 R d). Gradients:
K per chain and client a round for an "auto" group, three for a fixed K's two groups (3/K of the
sampler's K).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from fedlangevin.federation.noise import NoiseTally
from fedlangevin.federation.schedules import step_sizes
from fedlangevin.warmup.acceptance import resolve_target
from fedlangevin.warmup.curvature import curvature_at
from fedlangevin.warmup.extrapolation import extrapolated
from fedlangevin.warmup.local_bias import (
    TRANSIENT, BiasPlan, BiasState, bias_final, decay_rounds, exceeds,
)
from fedlangevin.warmup.local_steps import (
    CONFIDENCE, STABLE, TOLERANCE, AutoLocalSteps, LocalStepBias, eligible,
)
from fedlangevin.warmup.reach import CEILING, one_step_eta
from fedlangevin.warmup.session import Changes

__all__ = ["CANDIDATE", "HALVES", "LOOK", "MIN_KEPT", "PILOT", "WHOLE", "Companions", "build", "due",
           "ended", "frozen_eta", "observe", "record", "restore", "seed_of", "start", "stop", "update", "verdict"]

#: rounds whose iterates give the decay time (never kept)
PILOT = 50
#: kept rounds (per chain and group) before a verdict (and before "auto"'s next group starts)
MIN_KEPT = 50
#: "auto" tests every running group each LOOK kept rounds past MIN_KEPT (a biased one stops)
LOOK = 25
#: a group's role: an "auto" candidate (K local steps of eta, its own noise), a twin at one K = 1
#: step of K eta, a twin at two of K eta / 2 (:attr:`Companions.roles`)
CANDIDATE, WHOLE, HALVES = 0, 1, 2
#: the pilot keeps at most this many numbers (rounds x 2 groups x chains x d): fewer chains beyond
PILOT_NUMBERS = 1 << 22


@dataclass(frozen=True)
class Companions:
    """The companions in progress (checkpointed with the sampler).

    local_steps : K of every group started, in order; step_size : eta (the sampler's); stability :
    the check's (K eta lambda_max(M H); "auto": eta lambda_max(M H_c)); theta : (G, R, d) the
    groups' iterates; generator : their generator's state; rule : "auto"'s
    :class:`~fedlangevin.warmup.local_steps.AutoLocalSteps` (None: a fixed K's check, whose one
    group runs one step of K eta); pending : candidates not started yet; budget : "auto"'s
    measuring rounds; started : the round (of ``done``) after which each group started; status :
    per group "running", "biased" (stopped on evidence), "stopped" (a smaller K was biased) or
    "diverged"; done : rounds run; pilot : the first rounds' iterates (P, 2, R', d); decay, burn_in
    once known; shift (d,) the sums are taken about; sums, squares : (1 + G, R, d) float64 of the
    kept iterates (the sampler's chains first, then the groups); kept : their kept rounds; roles :
    per group, :data:`CANDIDATE` ("auto": K local steps of eta, its own noise), :data:`WHOLE` (one
    K = 1 step of K eta) or :data:`HALVES` (two of K eta / 2), a twin coupled to the candidate
    before it or (a fixed K) to the sampler's chains (None: every group a candidate, "auto", or
    WHOLE, a fixed K: checkpoints before the twins); reach : "auto"'s eta lambda_max(M H) (a
    candidate K gets twins where K reach <= STABLE); one_step : a fixed K's comparison of time per
    round, the step K = 1's acceptance rule takes at the iterates the check started from
    (:mod:`~fedlangevin.warmup.reach`; None: not computed)."""

    local_steps: tuple[int, ...]
    step_size: float
    stability: float
    theta: torch.Tensor
    generator: torch.Tensor
    rule: AutoLocalSteps | None = None
    pending: tuple[int, ...] = ()
    budget: int | None = None
    started: tuple[int, ...] = (0,)
    status: tuple[str, ...] = ("running",)
    done: int = 0
    pilot: torch.Tensor | None = None
    decay: float | None = None
    burn_in: int | None = None
    shift: torch.Tensor | None = None
    sums: torch.Tensor | None = None
    squares: torch.Tensor | None = None
    kept: tuple[int, ...] = (0, 0)
    roles: tuple[int, ...] | None = None
    reach: float | None = None
    one_step: float | None = None

    def record(self) -> dict:
        opt = lambda t: None if t is None else t.detach().cpu().clone()  # noqa: E731
        return {"local_steps": list(self.local_steps), "step_size": self.step_size, "stability": self.stability,
                "theta": opt(self.theta), "generator": self.generator.clone(),
                "rule": None if self.rule is None else self.rule.record(), "pending": list(self.pending),
                "budget": self.budget, "started": list(self.started), "status": list(self.status),
                "done": self.done, "pilot": opt(self.pilot), "decay": self.decay, "burn_in": self.burn_in,
                "shift": opt(self.shift), "sums": opt(self.sums), "squares": opt(self.squares),
                "kept": list(self.kept), "roles": None if self.roles is None else list(self.roles), "reach": self.reach,
                "one_step": self.one_step}

    @classmethod
    def from_record(cls, rec: dict, device, dtype) -> "Companions":
        f64 = lambda t: None if t is None else torch.as_tensor(t, dtype=torch.float64).clone()  # noqa: E731
        opt = lambda v, f: None if v is None else f(v)  # noqa: E731
        ints = lambda v: tuple(int(x) for x in v)  # noqa: E731
        theta = torch.as_tensor(rec["theta"]).to(device=device, dtype=dtype).clone()
        return cls(ints(rec["local_steps"]), float(rec["step_size"]), float(rec["stability"]), theta,
                   torch.as_tensor(rec["generator"], dtype=torch.uint8).clone(),
                   opt(rec["rule"], AutoLocalSteps.from_record), ints(rec["pending"]), opt(rec["budget"], int),
                   ints(rec["started"]), tuple(str(s) for s in rec["status"]), int(rec["done"]), f64(rec["pilot"]),
                   opt(rec["decay"], float), opt(rec["burn_in"], int), f64(rec["shift"]), f64(rec["sums"]),
                   f64(rec["squares"]), ints(rec["kept"]),
                   opt(rec.get("roles"), ints), opt(rec.get("reach"), float), opt(rec.get("one_step"), float))

    def role(self, g: int) -> int:
        """Group ``g``'s :data:`CANDIDATE`, :data:`WHOLE` or :data:`HALVES` (the fields' roles)."""
        if self.roles is not None:
            return self.roles[g]
        return CANDIDATE if self.rule is not None else WHOLE

    def sub_rounds(self, g: int) -> list[list[float]]:
        """The local step sizes of group ``g``'s rounds in one of the sampler's: K of eta (a
        candidate), one K = 1 step of K eta (WHOLE) or two of K eta / 2 (HALVES: two synchronisations;
        :mod:`~fedlangevin.warmup.extrapolation`)."""
        k, role = self.local_steps[g], self.role(g)
        if role == CANDIDATE:
            return [[self.step_size] * k]
        return [[k * self.step_size]] if role == WHOLE else [[k * self.step_size / 2]] * 2

    def owner(self, g: int) -> int | None:
        """The candidate a twin ``g`` is coupled to (None: the sampler's chains, or ``g`` a candidate)."""
        if self.role(g) == CANDIDATE:
            return None
        return next((j for j in range(g - 1, -1, -1) if self.role(j) == CANDIDATE), None)

    def twinned(self, g: int) -> bool:
        """Candidate ``g`` runs with the two twins of the extrapolation after it."""
        return g + 2 < len(self.local_steps) and self.role(g + 1) == WHOLE and self.owner(g + 1) == g

    @property
    def extrapolates(self) -> bool:
        """A fixed K's check with the two groups of the extrapolation to step 0, coupled to the sampler's
        round noise (a checkpoint from before them: one independent group)."""
        return self.rule is None and self.roles is not None and HALVES in self.roles

    @property
    def candidates(self) -> tuple[int, ...]:
        return tuple(g for g in range(len(self.local_steps)) if self.role(g) == CANDIDATE)

    @property
    def running(self) -> tuple[int, ...]:
        return tuple(g for g, s in enumerate(self.status) if s == "running")


def _with(phase: Companions, **changes) -> Companions:
    """``dataclasses.replace(phase, **changes)`` for the round's bookkeeping: the same new object (the
    phase's classes are frozen dataclasses without ``__post_init__``), without running ``__init__``
    over every field (a dozen microseconds a round on the check's path). ``changes`` must name fields."""
    values = phase.__dict__
    unknown = [name for name in changes if name not in values]
    if unknown:
        raise TypeError(f"{type(phase).__name__} has no field(s) {unknown}")
    new = object.__new__(type(phase))
    new.__dict__.update(values)
    new.__dict__.update(changes)
    return new


def due(sampler) -> bool:
    """Whether a fixed K's companions start now: a fixed K > 1 with ``check_local_bias``, measurable
    (:func:`~fedlangevin.warmup.local_steps.eligible`), not started or refused before, with
    M and eta frozen (no adaptive warm-up in progress)."""
    config = sampler.config
    return (config.check_local_bias and config.auto_local_steps is None and sampler.local_steps > 1
            and sampler.companions is None and sampler.local_step_bias is None and sampler.adapter is None
            and not eligible(config))


def seed_of(seed: int) -> int:
    """The companions' generator seed from the run's seed (a stream apart from the sampler's)."""
    return (int(seed) * 1_000_033 + 7_919) % 2**63


def frozen_eta(sampler) -> float:
    return float(step_sizes(sampler.schedule, sampler.state.step, 1)[0])


def _one_step(sampler, theta: torch.Tensor, k: int, eta: float) -> tuple[float | None, float]:
    """(K = 1's acceptance-rule step at the iterates ``theta``, searched in [K eta, CEILING K eta]; the
    floats per chain the clients sent for it): only with ``step_size="auto"`` (whose K > 1 warm-up set eta
    by the clients' curvature) and an energy; else (None, 0)."""
    if not sampler.adapt_step:
        return None, 0.0
    target = resolve_target(sampler.step_rule.target_accept, sampler.problem.dim)
    one, evaluations = one_step_eta(sampler._kernel_problem, theta, sampler.preconditioner, target,
                                    sampler.temperature, seed_of(sampler.seed) + 9, k * eta, CEILING * k * eta)
    return one, float(evaluations * sampler.problem.num_clients * (sampler.problem.dim + 1))


def start(sampler) -> Changes:
    """Start a fixed K's companions at the sampler's iterates (M and eta frozen): the phase, or where
    K eta is not a stable K = 1 step, the record saying so. Both carry the step K = 1's acceptance
    rule would take there (:func:`~fedlangevin.warmup.reach.one_step_eta`, ``step_size="auto"``)."""
    k, eta = sampler.local_steps, frozen_eta(sampler)
    theta = sampler.state.theta.detach()
    one, read = _one_step(sampler, theta, k, eta)
    try:
        s = k * eta * curvature_at(sampler._kernel_problem, theta, sampler.preconditioner, seed_of(sampler.seed) + 1,
                                   per_client=False)
    except ValueError:
        s = math.inf
    if not s <= STABLE:
        note = (f"K eta lambda_max(M H) = {s:.3g} > {STABLE:g}: one step of K eta = {k * eta:.3g}, the companions' "
                "K = 1 reference at the same Langevin time per round, is not a stable step; no companion ran")
        return Changes(floats_up=read, local_bias=LocalStepBias(False, k, False, note, TOLERANCE, CONFIDENCE,
                                                                stability=s, step_size=eta, one_step=one))
    own = torch.Generator(device=sampler.device).manual_seed(seed_of(sampler.seed))
    # one step of K eta and two of K eta / 2, both coupled to the sampler's round noise: a measurable
    # sampler (local_steps.eligible) runs in one process with one stream, which draws every client's normals
    return Changes(companions=Companions((k, k), eta, s, theta.clone()[None].repeat(2, 1, 1), own.get_state(),
                                         started=(0, 0), status=("running", "running"), kept=(0, 0, 0),
                                         roles=(WHOLE, HALVES), one_step=one), floats_up=read)


def ended(phase: Companions, note: str) -> Changes:
    """The companions end without a verdict (a fixed K's: no warning; "auto": K = 1)."""
    if phase.rule is not None:
        return Changes(companions=None, measurement=None, local_steps=1, local_bias=LocalStepBias(
            True, 1, False, note, phase.rule.tolerance, phase.rule.confidence, decay=phase.decay,
            stability=phase.stability, rounds=phase.done, companions=True))
    return Changes(companions=None, local_bias=LocalStepBias(
        False, phase.local_steps[0], False, note, TOLERANCE, CONFIDENCE, decay=phase.decay,
        stability=phase.stability, rounds=phase.done, step_size=phase.step_size, one_step=phase.one_step))


def stop(phase: Companions, g: int, why: str) -> Companions:
    """Group ``g`` stops (``why``: "biased" or "diverged"), every later group and candidate with it."""
    status = tuple(s if i < g or s != "running" else (why if i == g else "stopped")
                   for i, s in enumerate(phase.status))
    return replace(phase, status=status, pending=())


def update(phase: Companions, kernel, theta: torch.Tensor, preconditioner, uploads_of, num_clients: int,
           coupling: tuple | None = None, look=None, *, state_of) -> Changes:
    """After a round of the sampler whose broadcast iterates are ``theta`` (R, d): one round of every
    running group, the burn-in or the sums, "auto"'s ``look`` (its tests and next candidate:
    :func:`fedlangevin.warmup.auto_groups.look`), and the floats the round sent
    (``uploads_of(weights)``: uploads per chain; d floats each, N d down, per synchronisation).
    ``kernel``: the sampler's kernel for the companions; ``state_of(theta)``: its state at one group's
    iterates (R, d), counters at zero.
    ``coupling``: (the round's :class:`~fedlangevin.federation.noise.NoiseTally`, its participation
    weights), which a coupled fixed K's twins take instead of their own draws; an "auto" candidate's
    twins take the candidate's. Everything else from the companions' own generator."""
    if theta.shape != phase.theta.shape[1:]:
        return ended(phase, "chains were dropped (on_divergence='drop'): the groups are no longer paired")
    gen = torch.Generator(device=phase.theta.device)
    gen.set_state(phase.generator)
    d, rows, up, running = theta.shape[1], list(phase.theta.unbind(0)), 0.0, phase.running
    if phase.extrapolates and coupling is None:
        raise ValueError("coupling: coupled companions need the round's noise tally and weights")
    syncs, sources = 0, {None: coupling if phase.extrapolates else None}
    given = getattr(kernel.step, "given", None)  # see fedlangevin.fald.engine.assemble
    for g in running:
        rounds, role = phase.sub_rounds(g), phase.role(g)
        source = None if role == CANDIDATE else sources.get(phase.owner(g))
        for i, etas in enumerate(rounds):
            shared = {}
            if role == CANDIDATE and phase.twinned(g):
                shared["tally"] = NoiseTally(phase.local_steps[g])
            elif source is not None:  # the source's noise (whole, or its halves), its participation (the first sync)
                tally, weights = source
                shared = dict(normals=tally.normals() if role == WHOLE else tally.normals(i, gen),
                              weights=weights if i == 0 else None)
            done = None  # one local step with given normals: the kernel's lean path where it has one
            if given is not None and "normals" in shared:
                done = given(rows[g], etas[0], shared["normals"], shared["weights"], gen, preconditioner=preconditioner)
            if done is None:
                new, info = kernel.step(state_of(rows[g]), etas, gen, preconditioner=preconditioner, **shared)
                done = new.theta, info.weights
            up += float(uploads_of(done[1]))
            rows[g], syncs = done[0], syncs + 1
            if "tally" in shared:
                sources[g] = (shared["tally"], done[1])
    floats = dict(floats_down=float(syncs * num_clients * d), floats_up=up * d)
    stacked = torch.stack(rows)
    # one reduction a round (a sum is finite only where every term is; else the exact test), the groups
    # one by one where not
    finite = math.isfinite(stacked.sum()) or bool(torch.isfinite(stacked).all())
    phase = _with(phase, theta=stacked, generator=gen.get_state(), done=phase.done + 1)
    for g in () if finite else running:
        if not bool(torch.isfinite(rows[g]).all()):
            if phase.rule is None:
                return ended(phase, f"the companions became non-finite in their round {phase.done} (one step of "
                                    f"K eta = {phase.local_steps[0] * phase.step_size:.3g})")._replace(**floats)
            owner = phase.owner(g)
            phase = stop(phase, g if owner is None else owner, "diverged")
            break
    phase, note = observe(phase, torch.cat([theta.detach()[None], phase.theta]), look)
    return (Changes(companions=phase, **floats) if note is None else ended(phase, note)._replace(**floats))


def observe(phase: Companions, x: torch.Tensor, look=None) -> tuple[Companions, str | None]:
    """After a round (``phase.done`` counts it) whose iterates are ``x`` (1 + G, R, d), the sampler's
    chains first: the pilot, the burn-in or the sums ("auto": its tests and next group), and a note
    where the measurement ends (the pilot's iterates give no decay time). Every family's companions
    (FA-LD's here, FA-HMC's :mod:`fedlangevin.fahmc.local_bias`) step their own chains, then call this."""
    x = x.to(device="cpu", dtype=torch.float64)
    d = x.shape[-1]
    if phase.burn_in is None:
        keep = max(2, min(x.shape[1], PILOT_NUMBERS // max(1, 2 * PILOT * d)))
        row = x[None, :2, :keep]
        pilot = row if phase.pilot is None else torch.cat([phase.pilot, row])
        phase = replace(phase, pilot=pilot)
        if phase.done == PILOT:
            try:
                decay = max(decay_rounds(pilot[:, 0]), decay_rounds(pilot[:, 1]))
            except ValueError as exc:
                return phase, f"the pilot's iterates: {exc}"
            burn_in = max(PILOT, math.ceil(decay * math.log(1.0 / TRANSIENT)))
            phase = replace(phase, pilot=None, decay=decay, burn_in=burn_in)
        return phase, None
    return _kept(phase, x, look), None


def _kept(phase: Companions, x: torch.Tensor, look=None) -> Companions:
    """Add the round's iterates ``x`` (1 + G, R, d) to the sums of every class past its burn-in;
    "auto": its tests and its next group."""
    starts = (0,) + phase.started
    live = [c for c in range(x.shape[0]) if (c == 0 or phase.status[c - 1] == "running")
            and phase.done - starts[c] > phase.burn_in]
    if not live:
        return phase
    shift = x[0].mean(0) if phase.shift is None else phase.shift
    if len(live) == x.shape[0] and phase.sums is not None:  # every class (new tensors: the phase stays immutable)
        y = x - shift
        sums, squares = phase.sums + y, torch.addcmul(phase.squares, y, y)
    else:
        sums = torch.zeros_like(x) if phase.sums is None else phase.sums.clone()
        squares = torch.zeros_like(x) if phase.squares is None else phase.squares.clone()
        y = x[live] - shift
        sums[live] += y
        squares[live] += y * y
    kept = tuple(k + (c in live) for c, k in enumerate(phase.kept))
    phase = _with(phase, shift=shift, sums=sums, squares=squares, kept=kept)
    return phase if look is None else look(phase, x[0])


def verdict(phase: Companions, *, sd: bool = False, reference: str | None = None,
            make: type = LocalStepBias) -> LocalStepBias:
    """A fixed K's record from everything kept so far (a run's end): measured once :data:`MIN_KEPT`
    rounds were kept, with the estimate and whether it exceeds the tolerance on evidence. ``sd``:
    test the sd ratios too (FA-HMC's companions run at the sampler's h; FA-LD's at one step of K
    eta, whose own discretisation widens their sds: means only); ``reference``: what the companions
    are, for the record; ``make``: the record's class (FA-HMC's words its warning)."""
    k = phase.local_steps[0]
    if phase.extrapolates:
        reference = reference or (
            f"the extrapolation to step 0 (2 m(h/2) - m(h)) of K = 1 companion chains at one step of K eta = h = "
            f"{k * phase.step_size:.4g} and at two of h/2, coupled to the sampler's rounds (noise, participation)")
    reference = reference or f"K = 1 companion chains at one step of K eta = {k * phase.step_size:.4g}"
    common = dict(decay=phase.decay, stability=phase.stability, rounds=phase.done, companions=True,
                  step_size=phase.step_size, one_step=phase.one_step)
    kept = phase.kept[0]
    if kept < MIN_KEPT:
        burn = f"burn-in {phase.burn_in}" if phase.burn_in is not None else f"a pilot of {PILOT} rounds"
        note = (f"{kept} rounds kept after {burn}; the verdict needs {MIN_KEPT} (run more rounds: the "
                "companions go on in the sampler's next runs)")
        return make(False, k, False, note, TOLERANCE, CONFIDENCE, **common)
    plan = BiasPlan((k,), phase.burn_in, kept, 1)  # the companions are the reference, the sampler's chains K
    try:
        if phase.extrapolates:
            estimate = extrapolated(BiasState(plan, phase.done, phase.shift, phase.sums, phase.squares, phase.kept))
        else:
            state = BiasState(plan, phase.done, phase.shift, phase.sums.flip(0), phase.squares.flip(0), (kept, kept))
            (estimate,) = bias_final(state)
    except ValueError as exc:
        return make(False, k, False, str(exc), TOLERANCE, CONFIDENCE, **common)
    more = {"extrapolated": True} if phase.extrapolates else {}
    return make(False, k, True, reference, TOLERANCE, CONFIDENCE, estimates=(estimate,),
                exceeds=exceeds(estimate, TOLERANCE, CONFIDENCE, sd=sd), **common, **more)


def record(sampler) -> dict | None:
    """The companions' checkpoint entry (None: none running)."""
    return None if sampler.companions is None else sampler.companions.record()


def restore(rec: dict | None, device, dtype) -> Companions | None:
    """The companions from a checkpoint's entry (None: none running, or a checkpoint before them)."""
    return None if rec is None else Companions.from_record(rec, device, dtype)
