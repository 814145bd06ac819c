"""The local-step phase of FA-LD's warm-up: ``local_steps="auto"`` (issue 27); the record of both checks.

:mod:`~fedlangevin.fald.warmup.local_bias` measures how far K local steps move the stationary law
of the broadcast iterate from K = 1's; this module runs that measurement inside a run's warm-up,
in the ``(init, update, final)`` shape of :mod:`~fedlangevin.fald.warmup.session`: :func:`init`
plans it at the start of a run, :func:`update` takes each round's broadcast iterates and returns
a :class:`~fedlangevin.fald.warmup.session.Changes` value (the K of the rounds ahead, the
finished record, the phase's new state) that ``FALD._apply`` applies in one place; its final
steps the measurement's last steps (the pilot's end plans it, the plan's end decides). Nothing
here assigns to the sampler. A fixed K > 1 is checked after the warm-up by companion chains
(:mod:`~fedlangevin.fald.warmup.companions`); its record is this module's :class:`LocalStepBias`.

**Where in the warm-up.** ``"auto"`` gives the second half of its warm-up, W_b = W // 2 rounds
(at least :data:`MIN_ROUNDS`), to the measurement; the first W - W_b rounds run as before (an
adaptive warm-up adapts M and eta there at K = 1, where the acceptance rule applies with full
participation). With M and eta frozen, the measurement runs

1. a *pilot* of P = max(:data:`MIN_PILOT`, W_b // 4) rounds at K = 1: the K = 1 chains' e-folding
   time tau_e (:func:`~fedlangevin.fald.warmup.local_bias.decay_rounds`; a transient left from the
   rounds before only lengthens it, which lengthens the burn-in: conservative);
2. the *plan* (:class:`~fedlangevin.fald.warmup.local_bias.BiasPlan`): interleaved K = 1 and
   candidate-K segments with burn-in B = ceil(tau_e ln(1 / TRANSIENT)), as many cycles (at most
   4) and kept rounds as fit in W_b - P - B rounds (:func:`fit_plan`; the largest candidates are
   dropped first where not even one cycle with kept rounds >= B fits);
3. B *settling* rounds at the K the run goes on with, so that the chains have its law (not the
   last segment's) before the first kept draw. The warm-up's remaining rounds, if any, run at
   that K too.

**The decision.** The candidates are the ladder's K > 1; the run goes on with :func:`~fedlangevin.fald.warmup.local_bias.choose_local_steps`' K (the
largest K of the ladder that, with every K below it, is within the tolerance at the confidence).
K > 1 is only tried where every client's local steps are stable at the frozen eta: eta
lambda_max(M H_c) <= :data:`STABLE` at the chains' iterates (power iteration on the clients'
Hessian-vector products, as the curvature step rule; the module docstring of ``local_bias``
assumes it).

What a measurement needs (both checks) (:func:`eligible`; ``"auto"`` refuses the rest before any work): two or
more chains (the standard errors are the jackknife over chains; every participation rule draws
per chain, so the chains stay independent), a step size constant over the warm-up's end
(``"auto"`` or a number), one process with exact uploads and no drift correction, and a run that
is not private (the privacy accounting takes K steps in every round). It reads the broadcast
iterates only; the stability check of ``"auto"`` reads the clients' curvature, as
``step_size="auto"`` does.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from fedlangevin._validation import check_local_steps, check_real
from fedlangevin.fald.core.preconditioning import is_identity, placed
from fedlangevin.fald.core.schedules import AdaptedSteps, Constant, step_sizes
from fedlangevin.fald.warmup.curvature import max_curvature
from fedlangevin.fald.warmup.local_bias import (
    DEFAULT_LADDER, KEPT_PER_BURN_IN, TRANSIENT, BiasEstimate, BiasPlan, BiasState, LocalStepsChoice, bias_final,
    bias_init, bias_update, check_ladder, choose_local_steps, decay_rounds, margins,
)
from fedlangevin.fald.warmup.session import Changes

__all__ = ["MIN_PILOT", "MIN_ROUNDS", "STABLE", "AutoLocalSteps", "LocalStepBias", "Measurement", "as_local_steps",
           "default_warmup", "due", "eligible", "fit_plan", "init", "next_local_steps", "record", "restore",
           "round_bound", "round_etas", "stability", "update", "warn"]

#: the measuring part of a warm-up (its second half) has at least this many rounds
MIN_ROUNDS = 60
#: the pilot's rounds at least (then a quarter of the measuring rounds)
MIN_PILOT = 20
#: "auto" tries K > 1 only where eta lambda_max(M H_c) <= STABLE on every client
STABLE = 1.0
#: the pilot keeps at most this many numbers (rounds x chains x d): fewer chains beyond
PILOT_NUMBERS = 1 << 22
#: a fixed K's check: the tolerance (K = 1 posterior sds) and confidence of the warning
TOLERANCE, CONFIDENCE = 0.1, 0.95


@dataclass(frozen=True)
class AutoLocalSteps:
    """``local_steps=AutoLocalSteps(...)``: K chosen in warm-up (``local_steps="auto"`` is
    ``AutoLocalSteps()``). ``ladder``: the K tried, strictly increasing positive integers starting
    at 1 with at least one K > 1 (default 1, 2, 5, 10, 20, 50); ``tolerance``: the bias allowed, in
    K = 1 posterior sds on the worst coordinate (> 0; default 0.1, the acceptance of
    docs/validation.md); ``confidence``: of the choice, simultaneous over the coordinates (in
    (0, 1); default 0.95). A ValueError names the argument."""

    ladder: tuple[int, ...] = DEFAULT_LADDER
    tolerance: float = 0.1
    confidence: float = 0.95

    def __post_init__(self) -> None:
        ladder = check_ladder(self.ladder)
        if len(ladder) < 2:
            raise ValueError(f"ladder must hold at least one K > 1 besides the reference K = 1; got {list(ladder)}")
        check_local_steps(ladder[-1])  # the largest K's step sizes fit in memory
        object.__setattr__(self, "ladder", ladder)
        object.__setattr__(self, "tolerance", check_real("tolerance", self.tolerance, low=0.0, low_open=True))
        object.__setattr__(self, "confidence", check_real("confidence", self.confidence, low=0.0, high=1.0,
                                                          low_open=True, high_open=True))

    def record(self) -> dict:
        return {"ladder": list(self.ladder), "tolerance": self.tolerance, "confidence": self.confidence}

    @classmethod
    def from_record(cls, rec: dict) -> "AutoLocalSteps":
        return cls(tuple(rec["ladder"]), rec["tolerance"], rec["confidence"])


def as_local_steps(value: Any) -> tuple[int, AutoLocalSteps | None]:
    """``FALD``'s ``local_steps``: (the K the sampler starts with, the rule of ``"auto"`` or None).
    An integer K >= 1 (that fits in memory), ``"auto"`` or an :class:`AutoLocalSteps`; anything
    else (``"fast"``) is a ValueError naming ``local_steps``."""
    if isinstance(value, AutoLocalSteps):
        return 1, value
    if isinstance(value, str):
        if value == "auto":
            return 1, AutoLocalSteps()
        raise ValueError(f"local_steps must be an integer >= 1, 'auto' or AutoLocalSteps(...); got {value!r}")
    return check_local_steps(value), None


def eligible(config) -> str:
    """Why a sampler of this :class:`~fedlangevin.fald.runner.config.Config` cannot measure the
    local-step bias ("" when it can: the module docstring's conditions)."""
    if config.privacy is not None:
        return "a private run (its accounting takes the same K steps in every round)"
    if config.chains < 2:
        return (f"chains={config.chains}: the measurement compares independent chains (at least 2; 32 or more give "
                "useful standard errors)")
    if config.streams != "single" or config.transport is not None or config.upload is not None:
        return "streams='per_client', a transport or an upload codec (the measurement runs in one process, exact)"
    if config.correction is not None:
        return "a drift correction (its rounds are not FA-LD's)"
    if not (config.adapt_step or isinstance(config.schedule, (Constant, AdaptedSteps))):
        return "a step size that varies with the step (K = 1 and K are compared at one eta: 'auto' or a number)"
    return ""


def due(sampler) -> bool:
    """Whether ``sampler``'s next run measures in warm-up: ``"auto"`` until it has chosen (a fixed
    K is checked by companions: :func:`fedlangevin.fald.warmup.companions.due`)."""
    return sampler.config.auto_local_steps is not None and sampler.local_step_bias is None


def default_warmup(sampler, rounds, warmup):
    """A run's warm-up where ``"auto"`` has still to choose and none is given: ``rounds // 2``, as an
    adaptive warm-up's (a fixed K keeps the warm-up it has: none is added)."""
    if (warmup is None and sampler.config.auto_local_steps is not None and sampler.local_step_bias is None
            and isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 2):
        return rounds // 2
    return warmup


def round_bound(sampler) -> int:
    """The most local steps a round of ``sampler`` may take from now on (its schedule is checked
    that far): the ladder's largest K while ``"auto"`` has not chosen, else K."""
    rule = sampler.config.auto_local_steps
    return rule.ladder[-1] if rule is not None and sampler.local_step_bias is None else sampler.local_steps


# -- the record ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LocalStepBias:
    """What the warm-up measured (``trace.local_step_bias``, the ArviZ export's attributes).

    auto : ``local_steps="auto"`` (else a fixed K checked); local_steps : the K the run goes on
    with (the chosen one, or the K given); measured : whether a measurement was made, ``note`` says
    why not (or why K > 1 was not tried); tolerance, confidence : of the verdicts; estimates : one
    :class:`~fedlangevin.fald.warmup.local_bias.BiasEstimate` per K measured against K = 1;
    choice : ``"auto"``'s :class:`~fedlangevin.fald.warmup.local_bias.LocalStepsChoice` (its evidence);
    exceeds : a fixed K's verdict (biased beyond the tolerance on evidence: the warning);
    decay : the pilot's tau_e (rounds); stability : ``"auto"``'s eta lambda_max(M H_c) (the
    companions': K eta lambda_max(M H)); plan : the plan run; rounds : the measurement's rounds
    (pilot and plan; the companions' rounds); companions : measured by companion chains (the
    verdict tests the mean shifts only: :mod:`~fedlangevin.fald.warmup.companions`)."""

    auto: bool
    local_steps: int
    measured: bool
    note: str
    tolerance: float
    confidence: float
    estimates: tuple[BiasEstimate, ...] = ()
    choice: LocalStepsChoice | None = None
    exceeds: bool = False
    decay: float | None = None
    stability: float | None = None
    plan: BiasPlan | None = None
    rounds: int = 0
    companions: bool = False

    @property
    def worst(self) -> float | None:
        """The largest point estimate over the K measured and the coordinates (None: none measured)."""
        return max((e.worst for e in self.estimates), default=None)

    def record(self) -> dict:
        """Plain data (a checkpoint; JSON in the ArviZ attributes)."""
        return {"auto": self.auto, "local_steps": self.local_steps, "measured": self.measured, "note": self.note,
                "tolerance": self.tolerance, "confidence": self.confidence,
                "estimates": [e.record() for e in self.estimates],
                "choice": None if self.choice is None else self.choice.record(), "exceeds": self.exceeds,
                "decay": self.decay, "stability": self.stability,
                "plan": None if self.plan is None else self.plan.record(), "rounds": self.rounds,
                "companions": self.companions}

    @classmethod
    def from_record(cls, rec: dict) -> "LocalStepBias":
        opt = lambda v: None if v is None else float(v)  # noqa: E731
        return cls(bool(rec["auto"]), int(rec["local_steps"]), bool(rec["measured"]), str(rec["note"]),
                   float(rec["tolerance"]), float(rec["confidence"]),
                   tuple(BiasEstimate.from_record(e) for e in rec["estimates"]),
                   None if rec["choice"] is None else LocalStepsChoice.from_record(rec["choice"]),
                   bool(rec["exceeds"]), opt(rec["decay"]), opt(rec["stability"]),
                   None if rec["plan"] is None else BiasPlan.from_record(rec["plan"]), int(rec["rounds"]),
                   bool(rec.get("companions", False)))

    def summary(self) -> str:
        """One line per K measured: worst point estimate, verdict."""
        head = (f"local_steps={'auto' if self.auto else self.local_steps}: K = {self.local_steps}"
                f" (tolerance {self.tolerance:g} sd at {self.confidence:.0%})")
        if not self.measured:
            return f"{head}; not measured: {self.note}"
        lines = [head + (f"; {self.note}" if self.note else "")]
        for e in self.estimates:
            lines.append(f"  K = {e.local_steps}: worst |mean shift| or |sd ratio - 1| {e.worst:.3g} "
                         f"({e.chains} chains, {e.kept[0]} + {e.kept[1]} kept rounds per chain)")
        return "\n".join(lines)

    def warning(self, names=None) -> str | None:
        """The ``UserWarning``'s text, or None: a fixed K biased beyond the tolerance on evidence, or
        ``"auto"`` that could not measure. ``names``: the coordinates' names."""
        if self.auto:
            if self.measured or self.stability is not None and not self.stability <= STABLE:
                return None  # measured, or K > 1 not stable: K = 1 is the answer, not a failure
            return (f"local_steps='auto': the local-step bias was not measured ({self.note}); the run goes on with "
                    "K = 1. A longer warm-up (run(rounds, warmup=...)) or more chains let it measure")
        if not self.exceeds:
            return None
        (est,) = self.estimates
        kind, i, dev, margin = max(margins(est, self.confidence, sd=not self.companions), key=lambda m: m[2] - m[3])
        name = names[i] if names is not None and i < len(names) else f"theta[{i}]"
        what = (f"its mean moves by {est.mean_shift[i]:+.2g} K = 1 posterior sds" if kind == "mean"
                else f"its sd is {est.sd_ratio[i]:.3g} times K = 1's")
        where = "against K = 1 companion chains" if self.companions else "in warm-up"
        return (f"local_steps={self.local_steps}: the local-step bias measured {where} is {dev:.2g} posterior sd on "
                f"{name} ({what}; at least {dev - margin:.2g} at {self.confidence:.0%} confidence), above the "
                f"tolerance {self.tolerance:g}: K = {self.local_steps} samples another law than K = 1 on this model "
                "and split. Use a smaller K, local_steps='auto' (the largest K of a ladder within the tolerance, "
                "measured in warm-up), or the corrected recipe correction='control_variates', correlation=1.0 (no "
                "privacy: rho = 1 shares one noise vector between the clients and the control variates release "
                "noiseless gradients). The evidence is trace.local_step_bias; check_local_bias=False turns the "
                "check (and its companion chains: 1/K more gradient work, twice the floats per round) off")


def _not_measured(rule: AutoLocalSteps | None, k: int, note: str, **more) -> LocalStepBias:
    tolerance, confidence = (TOLERANCE, CONFIDENCE) if rule is None else (rule.tolerance, rule.confidence)
    return LocalStepBias(rule is not None, k, False, note, tolerance, confidence, **more)


# -- the phase -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measurement:
    """A measurement in progress (checkpointed with the sampler): ``rule`` (``"auto"``'s), ``start`` the K of the rounds before the pilot, ``wait`` those rounds, ``budget``
    the measuring rounds W_b, ``pilot`` P, ``done`` the rounds observed, ``phase`` ("wait",
    "pilot", "plan", "settle"), ``thetas`` the pilot's iterates (P', R', d), ``bias`` the plan's
    estimator state, ``decay`` and ``stability`` once known, ``settle`` the settling rounds left
    at ``final``, the K the run goes on with."""

    rule: AutoLocalSteps | None
    start: int
    wait: int
    budget: int
    pilot: int
    done: int = 0
    phase: str = "wait"
    thetas: torch.Tensor | None = None
    bias: BiasState | None = None
    decay: float | None = None
    stability: float | None = None
    settle: int = 0
    final: int = 1

    def record(self) -> dict:
        return {"rule": None if self.rule is None else self.rule.record(), "start": self.start, "wait": self.wait,
                "budget": self.budget, "pilot": self.pilot, "done": self.done, "phase": self.phase,
                "thetas": None if self.thetas is None else self.thetas.clone(),
                "bias": None if self.bias is None else self.bias.record(), "decay": self.decay,
                "stability": self.stability, "settle": self.settle, "final": self.final}

    @classmethod
    def from_record(cls, rec: dict) -> "Measurement":
        thetas = rec["thetas"]
        return cls(None if rec["rule"] is None else AutoLocalSteps.from_record(rec["rule"]), int(rec["start"]),
                   int(rec["wait"]), int(rec["budget"]), int(rec["pilot"]), int(rec["done"]), str(rec["phase"]),
                   None if thetas is None else torch.as_tensor(thetas, dtype=torch.float64).clone(),
                   None if rec["bias"] is None else BiasState.from_record(rec["bias"]),
                   None if rec["decay"] is None else float(rec["decay"]),
                   None if rec["stability"] is None else float(rec["stability"]), int(rec["settle"]), int(rec["final"]))


def init(sampler, warmup: int) -> tuple[int, Changes]:
    """Plan the measurement of ``sampler``'s run with a warm-up of ``warmup`` rounds: (the rounds
    left to an adaptive warm-up, the changes: the phase started, or where it cannot be, the record
    saying why and the K the run goes on with). Only where :func:`due`."""
    config = sampler.config
    rule, k = config.auto_local_steps, sampler.local_steps
    measuring = warmup // 2
    if measuring < MIN_ROUNDS:
        note = (f"a warm-up of {warmup} rounds is too short: the measurement takes its second half, at least "
                f"{MIN_ROUNDS} rounds (a warm-up of {2 * MIN_ROUNDS} or more)")
        return warmup, Changes(local_steps=k, local_bias=_not_measured(rule, k, note))
    pilot = max(MIN_PILOT, measuring // 4)
    wait = warmup - measuring
    phase = Measurement(rule, k, wait, measuring, pilot, phase="wait" if wait > 0 else "pilot")
    return wait, Changes(measurement=phase)


def next_local_steps(phase: Measurement) -> int:
    """K of the next round of the measurement ``phase``."""
    if phase.phase == "wait":
        return phase.start
    if phase.phase == "pilot":
        return 1
    if phase.phase == "plan":
        plan = phase.bias.plan
        return plan.local_steps[plan.where(phase.bias.round)[0]]
    return phase.final


def round_etas(sampler):
    """The step sizes of the measurement's rounds, one round at a time while ``sampler.measurement``
    is not None (its K read after the previous round was observed; eta from the frozen schedule)."""
    while sampler.measurement is not None:
        yield step_sizes(sampler.schedule, sampler.state.step, next_local_steps(sampler.measurement))


def update(phase: Measurement, theta: torch.Tensor, stability_of: Callable[[torch.Tensor], float]) -> Changes:
    """After a round of the measurement ``phase`` (the round :func:`next_local_steps` gave), with its
    broadcast iterates ``theta`` (R, d): the phase's new state and, where it moves on, the K of
    the rounds ahead and the record. ``stability_of(theta)``: eta lambda_max(M H_c) there (called
    once, by ``"auto"``, at the pilot's end)."""
    phase = replace(phase, done=phase.done + 1)
    if phase.phase == "wait":
        return Changes(measurement=replace(phase, phase="wait" if phase.done < phase.wait else "pilot"))
    x = theta.detach().to(device="cpu", dtype=torch.float64)
    if phase.phase == "pilot":
        keep = max(2, min(x.shape[0], PILOT_NUMBERS // max(1, phase.pilot * x.shape[1])))
        row = x[None, :keep]
        phase = replace(phase, thetas=row if phase.thetas is None else torch.cat([phase.thetas, row]))
        done = phase.done == phase.wait + phase.pilot
        return _planned(phase, x, stability_of) if done else Changes(measurement=phase)
    if phase.phase == "plan":
        if x.shape != phase.bias.sums.shape[1:]:  # chains dropped after a divergence: their sums are gone
            return _ended(phase, "chains were dropped during the measurement (on_divergence='drop')")
        phase = replace(phase, bias=bias_update(phase.bias, x))
        return _decided(phase) if phase.bias.round == phase.bias.plan.rounds else Changes(measurement=phase)
    phase = replace(phase, settle=phase.settle - 1)
    return Changes(measurement=phase if phase.settle > 0 else None)


def _ended(phase: Measurement, note: str, **more) -> Changes:
    """The measurement stops without a verdict: K = 1."""
    return Changes(local_steps=1, measurement=None,
                   local_bias=_not_measured(phase.rule, 1, note, decay=phase.decay, stability=phase.stability,
                                            rounds=phase.done - phase.wait, **more))


def _planned(phase: Measurement, x: torch.Tensor, stability_of) -> Changes:
    """The pilot's end: the decay time, the stability of K > 1 ("auto"), the plan that fits."""
    try:
        decay = decay_rounds(phase.thetas)
    except ValueError as exc:
        return _ended(phase, f"the pilot's iterates: {exc}")
    phase = replace(phase, decay=decay, thetas=None)
    burn_in = math.ceil(decay * math.log(1.0 / TRANSIENT))
    candidates = phase.rule.ladder[1:]
    try:
        s = float(stability_of(x))
    except ValueError:
        s = math.inf
    phase = replace(phase, stability=s)
    if not s <= STABLE:
        return _ended(phase, f"eta lambda_max(M H_c) = {s:.3g} > {STABLE:g} on some client: K > 1 local steps are "
                             "not stable at this step size, K = 1 is kept")
    plan = fit_plan(candidates, burn_in, phase.budget - phase.pilot - burn_in)
    if plan is None:
        return _ended(phase, f"the K = 1 chains' decay time is {decay:.3g} rounds (burn-in {burn_in}); "
                             f"{phase.budget} measuring rounds do not fit a plan comparing K = {candidates[0]}")
    phase = replace(phase, phase="plan", bias=bias_init(plan, x.shape[0], x.shape[1]), settle=burn_in)
    return Changes(measurement=phase)


def _decided(phase: Measurement) -> Changes:
    """The plan's end: the estimates, the verdict, the K the run goes on with, the settling rounds."""
    try:
        estimates = bias_final(phase.bias)
    except ValueError as exc:
        return _ended(phase, str(exc))
    plan, rule = phase.bias.plan, phase.rule
    common = dict(estimates=estimates, decay=phase.decay, stability=phase.stability, plan=plan,
                  rounds=phase.pilot + plan.rounds)
    choice = choose_local_steps(estimates, rule.tolerance, rule.confidence, rule.ladder)
    k = choice.local_steps
    note = "" if plan.candidates == rule.ladder[1:] else f"only K <= {plan.candidates[-1]} fitted in the measuring rounds"
    record = LocalStepBias(True, k, True, note, rule.tolerance, rule.confidence, choice=choice, **common)
    settled = replace(phase, phase="settle", bias=None, final=k)
    return Changes(local_steps=k, local_bias=record, measurement=settled if phase.settle > 0 else None)


def fit_plan(candidates, burn_in: int, budget: int) -> BiasPlan | None:
    """The plan comparing ``candidates`` (increasing K >= 2) with K = 1 at ``burn_in`` rounds per
    segment that fits in ``budget`` rounds: the most cycles (4 down to 1) whose kept K = 1 rounds
    per segment, as many as fit, are at least :data:`KEPT_PER_BURN_IN` burn-ins (one cycle: at
    least one burn-in); the largest candidates are dropped until one does. None when none fits."""
    candidates = tuple(candidates)
    while candidates:
        for cycles in range(4, 0, -1):
            kept = _most_kept((1,) + candidates, burn_in, budget // cycles)
            if kept is not None and kept >= (1 if cycles == 1 else KEPT_PER_BURN_IN) * max(1, burn_in):
                return BiasPlan(candidates, burn_in, kept, cycles)
        candidates = candidates[:-1]
    return None


def _most_kept(ks: tuple[int, ...], burn_in: int, rounds: int) -> int | None:
    """The most kept K = 1 rounds of a cycle of segments ``ks`` within ``rounds`` (None: not one)."""
    cost = lambda kept: sum(burn_in + -(-kept // k) for k in ks)  # noqa: E731
    if cost(1) > rounds:
        return None
    low, high = 1, max(1, rounds)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if cost(mid) <= rounds else (low, mid - 1)
    return low


def stability(problem, theta: torch.Tensor, preconditioner: Any, eta: float, seed: int) -> float:
    """eta lambda_max(M H_c), the largest over the clients and the chains' iterates ``theta``
    (power iteration on the clients' Hessian-vector products, seeded from ``seed``)."""
    x = theta.detach().to(dtype=torch.float64)
    pre = None if is_identity(preconditioner) else placed(preconditioner, x.device, torch.float64)
    gen = torch.Generator().manual_seed((int(seed) * 1_000_003 + 104_729) % 2**63)
    work = problem.to(device=x.device, dtype=torch.float64)
    return float(eta) * max_curvature(work, x, pre, per_client=True, generator=gen)


def warn(result: LocalStepBias, names=None) -> None:
    """Issue ``result``'s warning (if any) as a ``UserWarning`` at the user's call."""
    message = result.warning(names)
    if message is not None:
        warnings.warn(message, UserWarning, stacklevel=_user_level())


def _user_level() -> int:
    """The stack level of the first frame outside this package (the user's ``run`` call)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root + os.sep):
        frame, level = frame.f_back, level + 1
    return level


# -- checkpoints -----------------------------------------------------------------------------------
def record(sampler) -> dict:
    """The local-step entries of ``sampler``'s checkpoint: the rule, the check, the K now, the
    (round, step) since which every round ran it, the measurement in progress and the record."""
    rule = sampler.config.auto_local_steps
    return {"rule": None if rule is None else rule.record(), "check": sampler.config.check_local_bias,
            "local_steps": sampler.local_steps, "anchor": list(sampler.anchor),
            "measurement": None if sampler.measurement is None else sampler.measurement.record(),
            "result": None if sampler.local_step_bias is None else sampler.local_step_bias.record()}


def restore(rec: dict | None) -> tuple[int | None, tuple[int, int] | None, Measurement | None, LocalStepBias | None]:
    """(K, anchor, measurement, record) from a checkpoint's entries (all None for a checkpoint
    written before them)."""
    if rec is None:
        return None, None, None, None
    anchor = tuple(int(v) for v in rec["anchor"])
    return (int(rec["local_steps"]), anchor,
            None if rec["measurement"] is None else Measurement.from_record(rec["measurement"]),
            None if rec["result"] is None else LocalStepBias.from_record(rec["result"]))
