"""The local-step phase of FA-LD's warm-up: ``local_steps="auto"`` (issue 27); the record of both checks.

:mod:`~fedlangevin.warmup.local_bias` measures how far K local steps move the stationary law
of the broadcast iterate from K = 1's; this module runs that measurement inside a run's warm-up,
in the ``(init, update, final)`` shape of :mod:`~fedlangevin.warmup.session`: :func:`init`
plans it at the start of a run, :func:`update` takes each round's broadcast iterates and returns
a :class:`~fedlangevin.warmup.session.Changes` value (the K of the rounds ahead, the
finished record, the phase's new state) that ``FALD._apply`` applies in one place; its final
steps the measurement's last steps (the pilot's end plans it, the plan's end decides). Nothing
here assigns to the sampler. A fixed K > 1 is checked after the warm-up by companion chains
(:mod:`~fedlangevin.warmup.companions`); its record is this module's :class:`LocalStepBias`.

**Where in the warm-up.** ``"auto"`` gives the second half of its warm-up, W_b = W // 2 rounds
(at least :data:`MIN_ROUNDS`), to the measurement; the first W - W_b rounds run as before (an
adaptive warm-up adapts M and eta_1 there at K = 1, where the acceptance rule applies with full
participation). With M and eta_1 frozen, the sampler's chains go on at K = 1 (the reference) and
beside them companion groups of R chains each run K local steps of eta_1 per round, one group
per candidate K of the ladder, started one after another
(:mod:`~fedlangevin.warmup.companions`: their pilot, burn-in, sums, tests and order; their
own generator, so the sampler's chains draw the numbers they draw without them).

**The decision.** At the warm-up's end (or once every group has stopped) the run goes on with
:func:`~fedlangevin.warmup.local_bias.choose_local_steps`' K (the largest K of the ladder
that, with every K below it, is within the tolerance at the confidence: means and sd ratios),
each local step eta_1, as every K = 1 round before it. K > 1 is only tried where every client's
local steps are stable at eta_1: eta lambda_max(M H_c) <= :data:`STABLE` at the chains' iterates
(power iteration on the clients' Hessian-vector products, as the curvature step rule; the module
docstring of ``local_bias`` assumes it).

What a measurement needs (both checks) (:func:`eligible`; ``"auto"`` refuses the rest before any work): two or
more chains (the standard errors are the jackknife over chains; every participation rule draws
per chain, so the chains stay independent), a step size constant over the warm-up's end
(``"auto"`` or a number), one process with exact uploads and no drift correction, and a run that
is not private (the privacy accounting takes K steps in every round). It reads the broadcast
iterates only; the stability check of ``"auto"`` reads the clients' curvature, as
``step_size="auto"`` does.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fedlangevin._validation import check_local_steps, check_real
from fedlangevin.federation.schedules import AdaptedSteps, Constant, step_sizes
from fedlangevin.warmup.curvature import curvature_at
from fedlangevin.warmup.local_bias import (
    DEFAULT_LADDER, BiasEstimate, BiasPlan, LocalStepsChoice, check_ladder, margins,
)
from fedlangevin.warmup.reach import CEILING
from fedlangevin.warmup.session import Changes

__all__ = ["MIN_ROUNDS", "STABLE", "AutoLocalSteps", "LocalStepBias", "Measurement", "as_local_steps",
           "default_warmup", "due", "eligible", "init", "record", "restore", "round_bound", "round_etas", "stability",
           "warn"]

#: the measuring part of a warm-up (its second half) has at least this many rounds: the companions'
#: pilot (50), burn-in (>= 50) and kept rounds before a verdict (50)
MIN_ROUNDS = 150
#: "auto" tries K > 1 only where eta lambda_max(M H_c) <= STABLE on every client
STABLE = 1.0
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
        try:
            check_local_steps(ladder[-1])  # the largest K's step sizes fit in memory
        except ValueError as exc:
            raise ValueError(f"ladder: its largest K = {ladder[-1]} cannot run: {exc}") from None
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
    """Why a sampler of this :class:`~fedlangevin.fald.config.Config` cannot measure the
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
    K is checked by companions: :func:`fedlangevin.warmup.companions.due`)."""
    return sampler.auto_local_steps is not None and sampler.local_step_bias is None


def default_warmup(sampler, rounds, warmup):
    """A run's warm-up where ``"auto"`` has still to choose and none is given: ``rounds // 2``, as an
    adaptive warm-up's (a fixed K keeps the warm-up it has: none is added)."""
    if (warmup is None and sampler.auto_local_steps is not None and sampler.local_step_bias is None
            and isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 2):
        return rounds // 2
    return warmup


def round_bound(sampler) -> int:
    """The most local steps a round of ``sampler`` may take from now on (its schedule is checked
    that far): the ladder's largest K while ``"auto"`` has not chosen, else K."""
    rule = sampler.auto_local_steps
    return rule.ladder[-1] if rule is not None and sampler.local_step_bias is None else sampler.local_steps


# -- the record ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LocalStepBias:
    """What the warm-up measured (``trace.local_step_bias``, the ArviZ export's attributes).

    auto : ``local_steps="auto"`` (else a fixed K checked); local_steps : the K the run goes on
    with (the chosen one, or the K given); measured : whether a measurement was made, ``note`` says
    why not (or why K > 1 was not tried); tolerance, confidence : of the verdicts; estimates : one
    :class:`~fedlangevin.warmup.local_bias.BiasEstimate` per K measured against K = 1;
    choice : ``"auto"``'s :class:`~fedlangevin.warmup.local_bias.LocalStepsChoice` (its evidence);
    exceeds : a fixed K's verdict (biased beyond the tolerance on evidence: the warning);
    decay : the pilot's tau_e (rounds); stability : ``"auto"``'s eta lambda_max(M H_c) (the
    companions': K eta lambda_max(M H)); plan : the plan run; rounds : the measurement's rounds
    (the companions' rounds); companions : measured by companion chains (a fixed K's verdict tests
    the mean shifts only: :mod:`~fedlangevin.warmup.companions`); round : the sampler's round
    when the record was made (the accountant refuses the runs whose rounds ran companions);
    extrapolated : a fixed K measured against the posterior's means, extrapolated to step 0 from two
    coupled K = 1 companion groups (:mod:`~fedlangevin.warmup.extrapolation`); step_size : a
    fixed K's eta; one_step : the step K = 1's acceptance rule takes at the chains' iterates (at least
    K eta where it is K eta or more; 0.0 below; None: not computed, :mod:`~fedlangevin.warmup.reach`):
    where it is K eta or more, a round of K local steps moves no further than one K = 1 round
    (:attr:`slower`, warned)."""

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
    round: int | None = None
    extrapolated: bool = False
    step_size: float | None = None
    one_step: float | None = None
    #: "auto" with a stability above this did not try K > 1 (its answer K = 1 is not a failure)
    stable_limit: ClassVar[float] = STABLE

    @property
    def slower(self) -> bool:
        """A fixed K whose round moves no more Langevin time (K eta) than one K = 1 step of the acceptance
        rule's eta would: K > 1 costs rounds here."""
        return (not self.auto and self.one_step is not None and self.step_size is not None
                and self.one_step >= self.local_steps * self.step_size)

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
                "companions": self.companions, "round": self.round, "extrapolated": self.extrapolated,
                "step_size": self.step_size, "one_step": self.one_step}

    @classmethod
    def from_record(cls, rec: dict) -> "LocalStepBias":
        opt = lambda v: None if v is None else float(v)  # noqa: E731
        return cls(bool(rec["auto"]), int(rec["local_steps"]), bool(rec["measured"]), str(rec["note"]),
                   float(rec["tolerance"]), float(rec["confidence"]),
                   tuple(BiasEstimate.from_record(e) for e in rec["estimates"]),
                   None if rec["choice"] is None else LocalStepsChoice.from_record(rec["choice"]),
                   bool(rec["exceeds"]), opt(rec["decay"]), opt(rec["stability"]),
                   None if rec["plan"] is None else BiasPlan.from_record(rec["plan"]), int(rec["rounds"]),
                   bool(rec.get("companions", False)), None if rec.get("round") is None else int(rec["round"]),
                   bool(rec.get("extrapolated", False)), opt(rec.get("step_size")), opt(rec.get("one_step")))

    def summary(self) -> str:
        """One line per K measured: worst point estimate, verdict."""
        head = (f"local_steps={'auto' if self.auto else self.local_steps}: K = {self.local_steps}"
                f" (tolerance {self.tolerance:g} sd at {self.confidence:.0%})")
        reach = []
        if self.one_step is not None and self.step_size is not None:  # a fixed K's time per round
            k_eta = self.local_steps * self.step_size
            one = f"{self.one_step:.3g}" if self.one_step > 0 else "less than K eta"
            reach = [f"  a round moves K eta = {k_eta:.3g}; one K = 1 step of the acceptance rule {one}"
                     + (" (K > 1 costs rounds)" if self.slower else "")]
        if not self.measured:
            return "\n".join([f"{head}; not measured: {self.note}"] + reach)
        lines = [head + (f"; {self.note}" if self.note else "")]
        for e in self.estimates:
            lines.append(f"  K = {e.local_steps}: worst |mean shift| or |sd ratio - 1| {e.worst:.3g} "
                         f"({e.chains} chains, {e.kept[0]} + {e.kept[1]} kept rounds per chain)")
        return "\n".join(lines + reach)

    def warning(self, names=None) -> str | None:
        """The ``UserWarning``'s text, or None: a fixed K biased beyond the tolerance on evidence, or
        ``"auto"`` that could not measure. ``names``: the coordinates' names."""
        if self.auto:
            if self.measured or self.stability is not None and not self.stability <= self.stable_limit:
                return None  # measured, or K > 1 not stable: K = 1 is the answer, not a failure
            return (f"local_steps='auto': the local-step bias was not measured ({self.note}); the run goes on with "
                    "K = 1. A longer warm-up (run(rounds, warmup=...)) or more chains let it measure")
        slow = self._slower_text()
        if not self.exceeds:
            return slow
        (est,) = self.estimates
        kind, i, dev, margin = max(margins(est, self.confidence, sd=not self.companions), key=lambda m: m[2] - m[3])
        name = names[i] if names is not None and i < len(names) else f"theta[{i}]"
        what = (f"its mean moves by {est.mean_shift[i]:+.2g} K = 1 posterior sds" if kind == "mean"
                else f"its sd is {est.sd_ratio[i]:.3g} times K = 1's")
        where = "against K = 1 companion chains" if self.companions else "in warm-up"
        cost = "1/K more gradient work, twice the floats per round"
        if self.extrapolated:
            where = "against the posterior's means (K = 1 companion chains at two steps, extrapolated to step 0)"
            cost = "3/K more gradient work, four times the floats per round"
        return (f"local_steps={self.local_steps}: the local-step bias measured {where} is {dev:.2g} posterior sd on "
                f"{name} ({what}; at least {dev - margin:.2g} at {self.confidence:.0%} confidence), above the "
                f"tolerance {self.tolerance:g}: K = {self.local_steps} samples another law than K = 1 on this model "
                "and split. Use a smaller K, local_steps='auto' (the largest K of a ladder within the tolerance, "
                "measured in warm-up), or the corrected recipe correction='control_variates', correlation=1.0 (no "
                "privacy: rho = 1 shares one noise vector between the clients and the control variates release "
                "noiseless gradients). The evidence is trace.local_step_bias; check_local_bias=False turns the "
                f"check (and its companion chains: {cost}) off" + ("" if slow is None else ". Also: " + slow))

    def _slower_text(self) -> str | None:
        """The warning's text where a round of K local steps moves no further than one K = 1 round (else None)."""
        if not self.slower:
            return None
        k, eta = self.local_steps, self.step_size
        reach = f"{self.one_step:.3g}" + (" or more" if self.one_step >= CEILING * k * eta * (1 - 1e-9) else "")
        return (f"local_steps={k}: a round of K = {k} local steps of eta = {eta:.3g} (small enough for the local "
                f"steps to be stable on every client) moves K eta = {k * eta:.3g} of Langevin time, no more than one "
                f"K = 1 round would: K = 1's acceptance rule takes eta = {reach} at the chains' iterates. K > 1 costs "
                "rounds here instead of saving them, and a run of the usual length may not have mixed (check its "
                "ESS): use local_steps=1 or local_steps='auto'. The evidence is trace.local_step_bias "
                "(one_step); check_local_bias=False turns the check off")


def _not_measured(rule: AutoLocalSteps | None, k: int, note: str, **more) -> LocalStepBias:
    tolerance, confidence = (TOLERANCE, CONFIDENCE) if rule is None else (rule.tolerance, rule.confidence)
    return LocalStepBias(rule is not None, k, False, note, tolerance, confidence, **more)


# -- the phase -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measurement:
    """``"auto"``'s measurement in progress (checkpointed with the sampler): ``rule``, ``start`` the K
    of the rounds before it (1), ``wait`` the rounds of the warm-up's first half, ``budget`` the
    measuring rounds W_b, ``done`` the rounds observed, ``phase`` ("wait", then "measure": the
    companion groups of :mod:`~fedlangevin.warmup.companions` run beside the sampler's;
    :func:`~fedlangevin.warmup.auto_groups.measure` moves it on)."""

    rule: AutoLocalSteps | None
    start: int
    wait: int
    budget: int
    done: int = 0
    phase: str = "wait"

    def record(self) -> dict:
        return {"rule": None if self.rule is None else self.rule.record(), "start": self.start, "wait": self.wait,
                "budget": self.budget, "done": self.done, "phase": self.phase}

    @classmethod
    def from_record(cls, rec: dict) -> "Measurement | None":
        if rec["phase"] not in ("wait", "measure"):
            return None  # a checkpoint of the interleaved measurement (before companions): measured afresh
        return cls(None if rec["rule"] is None else AutoLocalSteps.from_record(rec["rule"]), int(rec["start"]),
                   int(rec["wait"]), int(rec["budget"]), int(rec["done"]), str(rec["phase"]))


def init(sampler, warmup: int) -> tuple[int, Changes]:
    """Plan the measurement of ``sampler``'s run with a warm-up of ``warmup`` rounds: (the rounds
    left to an adaptive warm-up, the changes: the phase started, or where it cannot be, the record
    saying why and the K the run goes on with). Only where :func:`due`. (FA-HMC converts the changes
    into its own: :func:`fedlangevin.fahmc.auto.converted`.)"""
    rule, k = sampler.auto_local_steps, sampler.local_steps
    measuring = warmup // 2
    if measuring < MIN_ROUNDS:
        note = (f"a warm-up of {warmup} rounds is too short: the measurement takes its second half, at least "
                f"{MIN_ROUNDS} rounds (a warm-up of {2 * MIN_ROUNDS} or more)")
        return warmup, Changes(local_steps=k, local_bias=_not_measured(rule, k, note))
    wait = warmup - measuring
    return wait, Changes(measurement=Measurement(rule, k, wait, measuring))


def round_etas(sampler):
    """The step sizes of the measurement's rounds, one round at a time while ``sampler.measurement``
    is not None: K = 1 (the sampler's chains are the reference; eta from the frozen schedule)."""
    while sampler.measurement is not None:
        yield step_sizes(sampler.schedule, sampler.state.step, sampler.measurement.start)


def stability(problem, theta: torch.Tensor, preconditioner: Any, eta: float, seed: int) -> float:
    """eta lambda_max(M H_c), the largest over the clients and the chains' iterates ``theta``
    (power iteration on the clients' Hessian-vector products, seeded from ``seed``)."""
    return float(eta) * curvature_at(problem, theta, preconditioner, (int(seed) * 1_000_003 + 104_729) % 2**63,
                                     per_client=True)


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
    rule = sampler.auto_local_steps
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
