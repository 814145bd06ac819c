"""Companion chains beside the sampler's: the check of a fixed K > 1, and ``local_steps="auto"``'s measurement (issue 27).

Both compare the stationary law of the broadcast iterate at K local steps with its law at K = 1,
from chains that run *beside* the sampler's on their own generator (seeded from the run's seed),
so that the sampler's chains draw exactly the numbers they draw without them. The companions are
FA-LD with the sampler's problem, temperature, correlation, participation, minibatches and M,
built by the package's engine (:func:`~fedlangevin.fald.core.engine.assemble`, a pure
``(init, step)`` kernel over their own state), started at the sampler's iterates.

**A fixed K's check** (``check_local_bias=True``, the default) runs one group of R companion
chains (R = the sampler's chains) from the rounds where M and eta are frozen (the end of an
adaptive warm-up; from the first round where nothing adapts), with **one local step of K eta**
per round: a round of the sampler moves K eta of Langevin time, and so does a companion round,
so the two groups decorrelate about equally fast per round (a K = 1 chain at eta would need K
times the rounds: the power problem of an interleaved measurement). The companions are **coupled**
to the sampler's chains (:func:`couples`): companion r's step adds the noise of sampler chain r's
round, (1 / sqrt(K)) sum_k xi_k per client (:class:`~fedlangevin.fald.core.noise.NoiseTally`: a
standard normal again, so their law is exactly K = 1's at K eta), and takes the round's
participation; the estimator pairs chain r with companion r (a jackknife over the R pairs), so the
Monte Carlo error of their *difference* sets the bounds (5-7 times narrower on a Gaussian). The price: the companions'
law has the discretisation bias of a step K eta, so K eta must be a step K = 1 can take,
``K eta lambda_max(M H) <= STABLE`` at the chains' iterates (H the global energy's Hessian, power
iteration on Hessian-vector products, as the curvature step rule), else no companion runs and the
record says why. Coupled, a second group runs two K = 1 steps of K eta / 2 per round (the halves
of the round's noise) and the verdict tests the sampler's means against their extrapolation to
step 0, 2 m(K eta / 2) - m(K eta) (:mod:`~fedlangevin.fald.warmup.extrapolation`: the posterior's
mean to second order, so the companions' own step no longer counts as the sampler's bias). Only
the *means* are tested: one Langevin step of h inflates a Gaussian's variance by
1 / (1 - h lambda / 2), so the companions' sds are wide whatever K does; the sd ratios are recorded.

**"auto"** (:mod:`~fedlangevin.fald.warmup.local_steps` starts it in the second half of its
warm-up, M and eta_1 frozen) runs the sampler's chains at K = 1 and one group of R companions
per candidate K of the ladder, each running **K local steps of eta_1** per round: the law "auto"
would sample at that K. Both groups use the same step per local step, so means *and* sd ratios
are tested (:func:`~fedlangevin.fald.warmup.local_bias.exceeds` / ``within`` with ``sd=True``).
The groups start one after another (:func:`update`): the smallest candidate with the
measurement; the next one once the newest has :data:`MIN_KEPT` kept rounds and is not biased on
evidence, while a burn-in and :data:`MIN_KEPT` kept rounds still fit in the measurement; every
:data:`LOOK` kept rounds each running group is tested, at confidence 1 - (1 - c) / L for the L
looks the measurement has room for (Bonferroni over the looks: repeated looks do not raise the
chance of a false stop above 1 - c), and a group biased on evidence stops with every larger one
(and no larger K starts): a larger K passing after a smaller one failed would
not be chosen. So the gradient work is that of the Ks running (at most the sum of the
candidates' K per chain and round; where K = 2 is biased, 2 per round for a few hundred rounds).

**Burn-in** (never kept): the first :data:`PILOT` rounds give the decay time tau_e of the
sampler's chains and the first group (:func:`~fedlangevin.fald.warmup.local_bias.decay_rounds`,
the larger; a transient only lengthens it: conservative); a group's first B = max(PILOT,
ceil(tau_e ln(1 / TRANSIENT))) rounds after its start are discarded (a round of K steps contracts
at least as fast as a round of one: the module docstring of ``local_bias``), which leaves at most
TRANSIENT of the start's offset. The sums of every group's kept iterates and squares then
accumulate round by round (:mod:`~fedlangevin.fald.warmup.local_bias`' estimator: standard
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

from fedlangevin.fald.core.engine import assemble
from fedlangevin.fald.core.kernel import FALDState
from fedlangevin.fald.core.schedules import step_sizes
from fedlangevin.fald.warmup.curvature import curvature_at
from fedlangevin.fald.warmup.extrapolation import extrapolated
from fedlangevin.fald.warmup.local_bias import (
    TRANSIENT, BiasPlan, BiasState, bias_final, choose_local_steps, decay_rounds, exceeds,
)
from fedlangevin.fald.warmup.local_steps import (
    CONFIDENCE, STABLE, TOLERANCE, AutoLocalSteps, LocalStepBias, Measurement, eligible, stability,
)
from fedlangevin.fald.warmup.session import Changes

__all__ = ["LOOK", "MIN_KEPT", "PILOT", "Companions", "build", "choice", "couples", "due", "measure", "observe", "record",
           "restore", "seed_of", "start", "start_auto", "update", "verdict"]

#: rounds whose iterates give the decay time (never kept)
PILOT = 50
#: kept rounds (per chain and group) before a verdict (and before "auto"'s next group starts)
MIN_KEPT = 50
#: "auto" tests every running group each LOOK kept rounds past MIN_KEPT (a biased one stops)
LOOK = 25
#: the pilot keeps at most this many numbers (rounds x 2 groups x chains x d): fewer chains beyond
PILOT_NUMBERS = 1 << 22


@dataclass(frozen=True)
class Companions:
    """The companions in progress (checkpointed with the sampler).

    local_steps : K of every group started, in order; step_size : eta (the sampler's); stability :
    the check's (K eta lambda_max(M H); "auto": eta lambda_max(M H_c)); theta : (G, R, d) the
    groups' iterates; generator : their generator's state; rule : "auto"'s
    :class:`~fedlangevin.fald.warmup.local_steps.AutoLocalSteps` (None: a fixed K's check, whose one
    group runs one step of K eta); pending : candidates not started yet; budget : "auto"'s
    measuring rounds; started : the round (of ``done``) after which each group started; status :
    per group "running", "biased" (stopped on evidence), "stopped" (a smaller K was biased) or
    "diverged"; done : rounds run; pilot : the first rounds' iterates (P, 2, R', d); decay, burn_in
    once known; shift (d,) the sums are taken about; sums, squares : (1 + G, R, d) float64 of the
    kept iterates (the sampler's chains first, then the groups); kept : their kept rounds; coupled :
    a fixed K's companions take the sampler's round noise and participation (:func:`couples`)."""

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
    coupled: bool = False

    def record(self) -> dict:
        opt = lambda t: None if t is None else t.detach().cpu().clone()  # noqa: E731
        return {"local_steps": list(self.local_steps), "step_size": self.step_size, "stability": self.stability,
                "theta": opt(self.theta), "generator": self.generator.clone(),
                "rule": None if self.rule is None else self.rule.record(), "pending": list(self.pending),
                "budget": self.budget, "started": list(self.started), "status": list(self.status),
                "done": self.done, "pilot": opt(self.pilot), "decay": self.decay, "burn_in": self.burn_in,
                "shift": opt(self.shift), "sums": opt(self.sums), "squares": opt(self.squares),
                "kept": list(self.kept), "coupled": self.coupled}

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
                   f64(rec["squares"]), ints(rec["kept"]), bool(rec.get("coupled", False)))

    def sub_rounds(self, g: int) -> list[list[float]]:
        """The local step sizes of group ``g``'s rounds in one of the sampler's: K of eta ("auto"); a
        fixed K's first group one step of K eta, its second (coupled companions) two K = 1 rounds of
        K eta / 2 (:mod:`~fedlangevin.fald.warmup.extrapolation`)."""
        k = self.local_steps[g]
        if self.rule is not None:
            return [[self.step_size] * k]
        return [[k * self.step_size]] if g == 0 else [[k * self.step_size / 2]] * 2

    @property
    def extrapolates(self) -> bool:
        """A fixed K's check with the two coupled groups of the extrapolation to step 0."""
        return self.rule is None and len(self.local_steps) == 2

    @property
    def running(self) -> tuple[int, ...]:
        return tuple(g for g, s in enumerate(self.status) if s == "running")


def due(sampler) -> bool:
    """Whether a fixed K's companions start now: a fixed K > 1 with ``check_local_bias``, measurable
    (:func:`~fedlangevin.fald.warmup.local_steps.eligible`), not started or refused before, with
    M and eta frozen (no adaptive warm-up in progress)."""
    config = sampler.config
    return (config.check_local_bias and config.auto_local_steps is None and sampler.local_steps > 1
            and sampler.companions is None and sampler.local_step_bias is None and sampler.adapter is None
            and not eligible(config))


def build(sampler):
    """The companions' kernel: the sampler's FA-LD (problem, temperature, correlation, participation,
    minibatches, precisions), M given per round; built once per sampler."""
    return assemble(sampler._kernel_problem, sampler.temperature, sampler.correlation, sampler.participation,
                    sampler.batch_size, dtype=sampler.dtype, device=sampler.device, noise_dtype=sampler.noise_dtype)


def couples(sampler) -> bool:
    """Whether a fixed K's companions can take the sampler's round noise (one process draws every
    client's normals: no per-client streams, no transport with ``exact=False``)."""
    return sampler.streams != "per_client" and getattr(sampler.transport, "exact", True)


def seed_of(seed: int) -> int:
    """The companions' generator seed from the run's seed (a stream apart from the sampler's)."""
    return (int(seed) * 1_000_033 + 7_919) % 2**63


def _frozen_eta(sampler) -> float:
    return float(step_sizes(sampler.schedule, sampler.state.step, 1)[0])


def start(sampler) -> Changes:
    """Start a fixed K's companions at the sampler's iterates (M and eta frozen): the phase, or where
    K eta is not a stable K = 1 step, the record saying so."""
    k, eta = sampler.local_steps, _frozen_eta(sampler)
    theta = sampler.state.theta.detach()
    try:
        s = k * eta * curvature_at(sampler._kernel_problem, theta, sampler.preconditioner, seed_of(sampler.seed) + 1,
                                   per_client=False)
    except ValueError:
        s = math.inf
    if not s <= STABLE:
        note = (f"K eta lambda_max(M H) = {s:.3g} > {STABLE:g}: one step of K eta = {k * eta:.3g}, the companions' "
                "K = 1 reference at the same Langevin time per round, is not a stable step; no companion ran")
        return Changes(local_bias=LocalStepBias(False, k, False, note, TOLERANCE, CONFIDENCE, stability=s))
    own = torch.Generator(device=sampler.device).manual_seed(seed_of(sampler.seed))
    if not couples(sampler):  # one group, its own noise: measured against K = 1 at K eta
        return Changes(companions=Companions((k,), eta, s, theta.clone()[None], own.get_state()))
    # coupled: a second group at two steps of K eta / 2, for the extrapolation to step 0
    return Changes(companions=Companions((k, k), eta, s, theta.clone()[None].repeat(2, 1, 1), own.get_state(),
                                         started=(0, 0), status=("running", "running"), kept=(0, 0, 0), coupled=True))


def start_auto(sampler, rule: AutoLocalSteps, budget: int) -> Changes:
    """Start "auto"'s measurement of ``budget`` rounds at the sampler's iterates (M and eta_1 frozen):
    the first candidate's group, or where K > 1 local steps are not stable at eta_1 on some client
    (eta lambda_max(M H_c) > STABLE), the record saying so (K = 1, the measurement ends)."""
    eta = _frozen_eta(sampler)
    theta = sampler.state.theta.detach()
    try:
        s = stability(sampler.problem, theta, sampler.preconditioner, eta, sampler.seed)
    except ValueError:
        s = math.inf
    if not s <= STABLE:
        note = (f"eta lambda_max(M H_c) = {s:.3g} > {STABLE:g} on some client: K > 1 local steps are not stable at "
                "this step size, K = 1 is kept")
        return Changes(local_steps=1, measurement=None, local_bias=LocalStepBias(
            True, 1, False, note, rule.tolerance, rule.confidence, stability=s))
    own = torch.Generator(device=sampler.device).manual_seed(seed_of(sampler.seed) + 2)
    first, *rest = rule.ladder[1:]
    return Changes(companions=Companions((first,), eta, s, theta.clone()[None], own.get_state(), rule=rule,
                                         pending=tuple(rest), budget=int(budget)))


def _ended(phase: Companions, note: str) -> Changes:
    """The companions end without a verdict (a fixed K's: no warning; "auto": K = 1)."""
    if phase.rule is not None:
        return Changes(companions=None, measurement=None, local_steps=1, local_bias=LocalStepBias(
            True, 1, False, note, phase.rule.tolerance, phase.rule.confidence, decay=phase.decay,
            stability=phase.stability, rounds=phase.done, companions=True))
    return Changes(companions=None, local_bias=LocalStepBias(
        False, phase.local_steps[0], False, note, TOLERANCE, CONFIDENCE, decay=phase.decay,
        stability=phase.stability, rounds=phase.done))


def _stop(phase: Companions, g: int, why: str) -> Companions:
    """Group ``g`` stops (``why``: "biased" or "diverged"), every later group and candidate with it."""
    status = tuple(s if i < g or s != "running" else (why if i == g else "stopped")
                   for i, s in enumerate(phase.status))
    return replace(phase, status=status, pending=())


def update(phase: Companions, kernel, theta: torch.Tensor, preconditioner, uploads_of, num_clients: int,
           coupling: tuple | None = None) -> Changes:
    """After a round of the sampler whose broadcast iterates are ``theta`` (R, d): one round of every
    running group (from their own generator), the burn-in or the sums, "auto"'s tests and next
    group, and the floats the round sent (``uploads_of(weights)``: uploads per chain; d floats
    each, N d down, per group). ``coupling``: (the round's :class:`~fedlangevin.fald.core.noise.NoiseTally`,
    its participation weights), which a coupled fixed K's companions take instead of their own draws."""
    if theta.shape != phase.theta.shape[1:]:
        return _ended(phase, "chains were dropped (on_divergence='drop'): the groups are no longer paired")
    gen = torch.Generator(device=phase.theta.device)
    gen.set_state(phase.generator)
    d, rows, up, running = theta.shape[1], list(phase.theta.unbind(0)), 0.0, phase.running
    coupled = phase.coupled and phase.rule is None
    if coupled and coupling is None:
        raise ValueError("coupling: coupled companions need the round's noise tally and weights")
    syncs = 0
    for g in running:
        rounds = phase.sub_rounds(g)
        for i, etas in enumerate(rounds):
            shared = {}
            if coupled:  # the round's noise (whole, or its halves) and its participation (the first sync)
                tally, weights = coupling
                shared = dict(normals=tally.normals() if len(rounds) == 1 else tally.normals(i, gen),
                              weights=weights if i == 0 else None)
            state = FALDState(theta=rows[g], step=0, round=0, correction=None)
            new, info = kernel.step(state, etas, gen, preconditioner=preconditioner, **shared)
            up += float(uploads_of(info.weights))
            rows[g], syncs = new.theta, syncs + 1
    floats = dict(floats_down=float(syncs * num_clients * d), floats_up=up * d)
    phase = replace(phase, theta=torch.stack(rows), generator=gen.get_state(), done=phase.done + 1)
    for g in running:
        if not bool(torch.isfinite(rows[g]).all()):
            if phase.rule is None:
                return _ended(phase, f"the companions became non-finite in their round {phase.done} (one step of "
                                     f"K eta = {phase.local_steps[0] * phase.step_size:.3g})")._replace(**floats)
            phase = _stop(phase, g, "diverged")
            break
    phase, note = observe(phase, torch.cat([theta.detach()[None], phase.theta]))
    return (Changes(companions=phase, **floats) if note is None else _ended(phase, note)._replace(**floats))


def observe(phase: Companions, x: torch.Tensor) -> tuple[Companions, str | None]:
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
    return _kept(phase, x), None


def _kept(phase: Companions, x: torch.Tensor) -> Companions:
    """Add the round's iterates ``x`` (1 + G, R, d) to the sums of every class past its burn-in;
    "auto": its tests and its next group."""
    starts = (0,) + phase.started
    live = [c for c in range(x.shape[0]) if (c == 0 or phase.status[c - 1] == "running")
            and phase.done - starts[c] > phase.burn_in]
    if not live:
        return phase
    shift = x[0].mean(0) if phase.shift is None else phase.shift
    sums = torch.zeros_like(x) if phase.sums is None else phase.sums.clone()
    squares = torch.zeros_like(x) if phase.squares is None else phase.squares.clone()
    y = x[live] - shift
    sums[live] += y
    squares[live] += y * y
    kept = tuple(k + (c in live) for c, k in enumerate(phase.kept))
    phase = replace(phase, shift=shift, sums=sums, squares=squares, kept=kept)
    return phase if phase.rule is None else _looked(phase, x[0])


def _looked(phase: Companions, theta: torch.Tensor) -> Companions:
    """"auto": every running group at a look is tested (biased on evidence: it stops, with every larger
    K); the next candidate starts at the sampler's iterates ``theta`` once the newest group has
    :data:`MIN_KEPT` kept rounds, is running, and a burn-in and MIN_KEPT rounds still fit."""
    rule = phase.rule
    # a group is looked at up to `looks` times: each look's test is at 1 - (1 - confidence) / looks
    # (Bonferroni over the looks), so that stopping at any look is a false stop at most 1 - confidence
    for g in phase.running:
        n = phase.kept[g + 1]
        if n >= MIN_KEPT and (n - MIN_KEPT) % LOOK == 0:
            looks = max(1, 1 + (phase.budget - phase.burn_in - MIN_KEPT) // LOOK)
            (estimate,) = _estimates(phase, (g,))
            if exceeds(estimate, rule.tolerance, 1.0 - (1.0 - rule.confidence) / looks, sd=True):
                phase = _stop(phase, g, "biased")
                break
    newest = len(phase.local_steps) - 1
    if (phase.pending and phase.status[newest] == "running" and phase.kept[newest + 1] >= MIN_KEPT
            and phase.budget - phase.done >= phase.burn_in + MIN_KEPT + 1):
        zero = torch.zeros_like(phase.sums[:1])
        phase = replace(phase, local_steps=phase.local_steps + phase.pending[:1], pending=phase.pending[1:],
                        theta=torch.cat([phase.theta, theta.to(phase.theta)[None]]),
                        started=phase.started + (phase.done,), status=phase.status + ("running",),
                        sums=torch.cat([phase.sums, zero]), squares=torch.cat([phase.squares, zero]),
                        kept=phase.kept + (0,))
    return phase


def _estimates(phase: Companions, groups) -> tuple:
    """The :class:`~fedlangevin.fald.warmup.local_bias.BiasEstimate` of ``groups`` against the
    sampler's K = 1 chains ("auto"), in order (their K increasing)."""
    classes = [0] + [g + 1 for g in groups]
    plan = BiasPlan(tuple(phase.local_steps[g] for g in groups), phase.burn_in, max(1, phase.kept[0]), 1)
    state = BiasState(plan, phase.done, phase.shift, phase.sums[classes], phase.squares[classes],
                      tuple(phase.kept[c] for c in classes))
    return bias_final(state)


def idle(phase: Companions) -> bool:
    """"auto" has nothing left to measure: no group running and no candidate to start."""
    return not phase.running and not phase.pending


def choice(phase: Companions) -> Changes:
    """"auto"'s decision at the measurement's end: the estimates of every group with
    :data:`MIN_KEPT` kept rounds that did not diverge, :func:`~fedlangevin.fald.warmup.local_bias.choose_local_steps`'
    K and the record (K = 1 where nothing was measured, saying why)."""
    rule = phase.rule
    groups = [g for g, s in enumerate(phase.status) if s != "diverged" and phase.kept[g + 1] >= MIN_KEPT]
    notes = [f"K = {phase.local_steps[g]} {s}" for g, s in enumerate(phase.status) if s not in ("running",)]
    notes += [f"K = {phase.local_steps[g]} kept only {phase.kept[g + 1]} rounds (< {MIN_KEPT})"
              for g in range(len(phase.status)) if g not in groups and phase.status[g] != "diverged"]
    if phase.pending:
        notes.append(f"K = {list(phase.pending)} not started (no room for a burn-in and {MIN_KEPT} kept rounds)")
    note = "; ".join(notes)
    if not groups or phase.kept[0] < MIN_KEPT:
        why = (f"{phase.kept[0]} K = 1 rounds kept after {'the pilot' if phase.burn_in is None else phase.burn_in}"
               f" (the verdict needs {MIN_KEPT}); a longer warm-up lets it measure") if not groups else note
        return _ended(phase, why)
    try:
        estimates = _estimates(phase, groups)
    except ValueError as exc:
        return _ended(phase, str(exc))
    chosen = choose_local_steps(estimates, rule.tolerance, rule.confidence, rule.ladder)
    return Changes(companions=None, measurement=None, local_steps=chosen.local_steps, local_bias=LocalStepBias(
        True, chosen.local_steps, True, note, rule.tolerance, rule.confidence, estimates=estimates, choice=chosen,
        decay=phase.decay, stability=phase.stability, rounds=phase.done, companions=True))


def measure(phase: Measurement, sampler) -> Changes:
    """After a round of "auto"'s measurement ``phase`` (``sampler``'s companions, if any, have seen
    it): the phase's new state; at the warm-up's first half's end the companions' start
    (:func:`start_auto`, M and eta_1 frozen); at the measurement's end, or once no group is left to
    run, the K of the rounds ahead and the record (:func:`choice`). Reads the sampler only."""
    phase = replace(phase, done=phase.done + 1)
    if phase.phase == "wait":
        if phase.done < phase.wait:
            return Changes(measurement=phase)
        begun = start_auto(sampler, phase.rule, phase.budget)
        return begun if begun.local_bias is not None else begun._replace(measurement=replace(phase, phase="measure"))
    group = sampler.companions
    if group is None:  # ended (the record is there)
        return Changes(measurement=None)
    if phase.done >= phase.wait + phase.budget or idle(group):
        return choice(group)
    return Changes(measurement=phase)


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
    common = dict(decay=phase.decay, stability=phase.stability, rounds=phase.done, companions=True)
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
