"""FA-HMC's check of a fixed K > 1 against K = 1 companion chains (issue 27, items 2 and 3).

FA-HMC with K > 1 local steps on heterogeneous clients samples another law than K = 1 (whose
round is exactly one centralised BAOAB or OBABO step: :mod:`fedlangevin.fahmc.kernel`), by an
amount that depends on the model and the split (docs/fahmc.md: 0.21 sd at K = 10 on the paper
stand-in). A run with a fixed ``local_steps`` K > 1 and ``check_local_bias=True`` (the default)
measures it, as FA-LD's companions do (:mod:`fedlangevin.warmup.companions`, the twin of
this module), and warns at the end of a run where it exceeds 0.1 posterior sd on evidence.

**The companions.** R chains (R = the sampler's ``chains``) of FA-HMC at **K = 1 with the same h**,
friction, splitting, M, problem, temperature, correlation, participation and minibatches, built
by :func:`fedlangevin.fahmc.kernel.assemble` (a pure ``(init, step)`` kernel over their own
:class:`~fedlangevin.fahmc.kernel.FAHMCState`, momentum included), drawing from their own generator
seeded from the run's seed (the sampler's chains draw exactly the numbers they draw with the
check off), started at the sampler's (theta, v) once h, M and gamma are frozen (the end of an
adaptive warm-up; the first round where nothing adapts, which is every K > 1 run: FA-HMC's
warm-up needs K = 1). Why the same h, where FA-LD's companions take one step of K eta: BAOAB's h
is already near its stability limit (h omega_max < 2 on a Gaussian mode of frequency omega; the
warm-up's h* = 0.48 with M the posterior covariance), so K h is not a stable step; and a K = 1
FA-HMC chain mixes fast per round anyway (ESS per chain-round 0.05-0.15 on the validation
posteriors, docs/fahmc.md), so K = 1 at h has power within a few hundred rounds. The companions
run only where h sqrt(lambda_max(M H)) < :data:`STABLE` at the sampler's iterates (H the global
energy's Hessian; power iteration on gradient differences, as FA-LD's curvature step rule),
else the record says why.

**What is compared.** Both groups run at the same h, so their laws differ by K alone: the means
*and* the sds are tested (FA-LD's companions test the means only, their step K eta inflating their
sds by itself). Per coordinate, (E_K - E_1) / sd_1 and sd_K / sd_1 of the broadcast theta
(:func:`~fedlangevin.warmup.local_bias.bias_final`: two groups of R independent chains,
jackknife standard errors over chains), and the verdict
:func:`~fedlangevin.warmup.local_bias.exceeds` over the 2 d tests (Bonferroni, Student's t with
R - 1 degrees of freedom) at 95 % with the tolerance 0.1 sd. On a Gaussian the K = 1 law's theta
marginal is exact for BAOAB at any stable h (:mod:`fedlangevin.fahmc.exact`): the reference is
then the posterior itself.

**Burn-in and the verdict** are the twin's: a :data:`~fedlangevin.warmup.companions.PILOT`-round
pilot gives both groups' decay time tau_e, B = max(PILOT, ceil(tau_e ln(1 / TRANSIENT))) rounds are
dropped, the kept iterates' sums accumulate, and at the end of every ``run()`` with at least
:data:`~fedlangevin.warmup.companions.MIN_KEPT` kept rounds the verdict is made from all kept
so far (the companions go on in the sampler's next runs). **Cost**: a companion takes one
gradient per client and round, 1/K of a sampler chain's K, and sends as many floats as a sampler
chain: 2 d up (theta and v) and 2 d down per client and round (counted as set-up floats in the
trace's and ledger's communication totals); rounds are unchanged. No check (and a note in the
record) with one chain, a transport, or a step size that varies with the step; Flower's runner
(:mod:`fedlangevin.flower.runner`) is a separate runner without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, NamedTuple

import torch

from fedlangevin.fahmc.kernel import FAHMCKernel, FAHMCState, assemble
from fedlangevin.fahmc.warmup import Changes
from fedlangevin.federation.schedules import AdaptedSteps, Constant, step_sizes
from fedlangevin.warmup.companions import Companions, observe, seed_of
from fedlangevin.warmup.companions import verdict as companion_verdict
from fedlangevin.warmup.curvature import curvature_at
from fedlangevin.warmup.local_bias import margins
from fedlangevin.warmup.local_steps import CONFIDENCE, TOLERANCE, AutoLocalSteps, LocalStepBias, Measurement

__all__ = ["STABLE", "HMCCompanions", "HMCLocalStepBias", "Restored", "build", "due", "record", "restore",
           "start", "unmeasurable", "update", "verdict"]

#: the companions run where h sqrt(lambda_max(M H)) < STABLE: BAOAB's and OBABO's stability limit on a
#: Gaussian mode of frequency omega is h omega < 2
STABLE = 2.0
@dataclass(frozen=True)
class HMCLocalStepBias(LocalStepBias):
    """FA-LD's :class:`~fedlangevin.warmup.local_steps.LocalStepBias` record (the same fields and
    ``record()``), with FA-HMC's verdict (means and sd ratios: both groups run at h) and remedies, and
    FA-HMC's stability limit (``"auto"``'s ``stability`` is h sqrt(lambda_max(M H_c)))."""

    stable_limit: ClassVar[float] = STABLE

    def warning(self, names=None) -> str | None:
        """The ``UserWarning``'s text where the measured bias exceeds the tolerance on evidence (``"auto"``:
        where it could not measure), else None."""
        if self.auto:
            return super().warning(names)
        if not self.exceeds:
            return None
        (est,) = self.estimates
        kind, i, dev, margin = max(margins(est, self.confidence, sd=True), key=lambda m: m[2] - m[3])
        name = names[i] if names is not None and i < len(names) else f"theta[{i}]"
        what = (f"its mean moves by {est.mean_shift[i]:+.2g} K = 1 posterior sds" if kind == "mean"
                else f"its sd is {est.sd_ratio[i]:.3g} times K = 1's")
        return (f"FA-HMC local_steps={self.local_steps}: the local-step bias measured against K = 1 companion chains "
                f"(FA-HMC at the same h) is {dev:.2g} posterior sd on {name} ({what}; at least {dev - margin:.2g} "
                f"at {self.confidence:.0%} confidence), above the tolerance {self.tolerance:g}: "
                f"K = {self.local_steps} samples another law than K = 1 on this model and split. Use a smaller K, or "
                "K = 1 with FA-HMC's warm-up (step_size='auto': M, h and the friction adapted; a K = 1 round is "
                "one centralised step). The evidence is trace.local_step_bias; check_local_bias=False turns the "
                "check (and its companion chains: 1/K more gradient work, twice the floats per round) off")


@dataclass(frozen=True)
class HMCCompanions(Companions):
    """FA-LD's :class:`~fedlangevin.warmup.companions.Companions` (``step_size`` is h, the
    sampler's and the companions'; ``stability`` h sqrt(lambda_max(M H)), "auto"'s h sqrt(lambda_max(M
    H_c))) with the groups' velocities ``momentum`` (G, R, d)."""

    momentum: torch.Tensor | None = None

    def record(self) -> dict:
        return {**super().record(), "momentum": self.momentum.detach().cpu().clone()}

    @classmethod
    def from_record(cls, rec: dict, device, dtype) -> "HMCCompanions":
        base = Companions.from_record(rec, device, dtype)
        values = {f.name: getattr(base, f.name) for f in fields(Companions)}
        momentum = torch.as_tensor(rec["momentum"]).to(device=device, dtype=dtype).clone()
        # a fixed K's checkpoint before "auto" stored its one group's velocities as (R, d)
        return cls(**values, momentum=momentum[None] if momentum.dim() == 2 else momentum)


def _not_measured(k: int, note: str, **more) -> HMCLocalStepBias:
    return HMCLocalStepBias(False, k, False, note, TOLERANCE, CONFIDENCE, companions=True, **more)


def unmeasurable(chains: int, transport, schedule) -> str:
    """Why FA-HMC with ``chains``, ``transport`` and ``schedule`` cannot compare K local steps with K = 1
    ("" when it can): a fixed K's check (a note) and ``local_steps="auto"`` (refused before any work)
    alike. ``"auto"``'s adaptive warm-up is an :class:`~fedlangevin.federation.schedules.AdaptedSteps`."""
    if chains < 2:
        return (f"chains={chains}: the comparison needs independent chains (at least 2; 32 or more give useful "
                "standard errors)")
    if transport is not None:
        return "a transport (the companion or candidate chains run in one process)"
    if not isinstance(schedule, (Constant, AdaptedSteps)):
        return "a step size that varies with the step (K = 1 and K are compared at one h: 'auto' or a number)"
    return ""


def due(sampler) -> bool:
    """Whether the check starts now: ``check_local_bias`` with a fixed K > 1, not started, refused or
    measured before, with h, M and gamma frozen (no adaptive warm-up in progress or to come)."""
    return (sampler.check_local_bias and sampler.auto_local_steps is None and sampler.local_steps > 1
            and sampler.companions is None
            and sampler.local_step_bias is None and sampler.adapter is None
            and (sampler.adapted or not (sampler.adapt_step or sampler.adapt_matrix)))


def build(sampler) -> FAHMCKernel:
    """The companions' kernel: the sampler's FA-HMC (problem, temperature, correlation, participation,
    minibatches, splitting, control variates), M and gamma given per round; built once per sampler."""
    return assemble(getattr(sampler, "centred", None) or sampler.problem, temperature=sampler.temperature, correlation=sampler.correlation,
                    rule=sampler.participation, batch_size=sampler.batch_size, friction=sampler.friction,
                    splitting=sampler.splitting, dtype=sampler.dtype, device=sampler.device,
                    noise_dtype=sampler.noise_dtype, preconditioner=sampler.preconditioner)


def start(sampler) -> Changes:
    """Start the companions at the sampler's (theta, v) (h, M and gamma frozen): the phase, or where the
    check cannot run, the record saying why."""
    k = sampler.local_steps
    why = unmeasurable(len(sampler.active), sampler.transport, sampler.schedule)
    if why:
        return Changes(local_bias=_not_measured(k, f"not checked: {why}"))
    h = float(step_sizes(sampler.schedule, sampler.state.step, 1)[0])
    theta = sampler.state.theta.detach()
    try:
        s = h * math.sqrt(curvature_at(sampler.problem, theta, sampler.preconditioner, seed_of(sampler.seed) + 1,
                                       per_client=False))
    except ValueError:
        s = math.inf
    if not s < STABLE:
        note = (f"h sqrt(lambda_max(M H)) = {s:.3g} >= {STABLE:g}: h = {h:.3g} is not a stable K = 1 step at the "
                "chains' iterates; no companion ran")
        return Changes(local_bias=_not_measured(k, note, stability=s))
    own = torch.Generator(device=sampler.device).manual_seed(seed_of(sampler.seed))
    phase = HMCCompanions((k,), h, s, theta.clone()[None], own.get_state(),
                          momentum=sampler.state.momentum.detach().clone()[None])
    return Changes(companions=phase)


def _ended(phase: HMCCompanions, note: str, **floats) -> Changes:
    return Changes(companions=None, local_bias=_not_measured(phase.local_steps[0], note, decay=phase.decay,
                                                             stability=phase.stability, rounds=phase.done), **floats)


def update(phase: HMCCompanions, kernel: FAHMCKernel, theta: torch.Tensor, preconditioner: Any, friction: float,
           uploads_of, num_clients: int) -> Changes:
    """After a round of the sampler whose broadcast iterates are ``theta`` (R, d): one companion round
    (K = 1 at h, M ``preconditioner`` and gamma ``friction``, from their own generator), the pilot, the
    burn-in or the sums, and the floats the round sent (``uploads_of(weights)``: uploads per chain;
    2 d floats each, 2 N d down)."""
    if theta.shape != phase.theta.shape[1:]:
        return _ended(phase, "chains were dropped (on_divergence='drop'): the two groups are no longer paired")
    gen = torch.Generator(device=phase.theta.device)
    gen.set_state(phase.generator)
    state = FAHMCState(theta=phase.theta[0], momentum=phase.momentum[0], step=0, round=0)
    new, info = kernel.step(state, [phase.step_size], gen, preconditioner=preconditioner, friction=friction)
    d = theta.shape[1]
    floats = dict(floats_down=float(2 * num_clients * d), floats_up=2.0 * float(uploads_of(info.weights)) * d)
    if not (bool(torch.isfinite(new.theta).all()) and bool(torch.isfinite(new.momentum).all())):
        return _ended(phase, f"the companions became non-finite in their round {phase.done + 1} (K = 1 at "
                             f"h = {phase.step_size:.3g})", **floats)
    phase = replace(phase, theta=new.theta[None], momentum=new.momentum[None], generator=gen.get_state(),
                    done=phase.done + 1)
    # FA-LD's pilot, burn-in and sums (the sampler's chains first, then the companions)
    phase, note = observe(phase, torch.stack([theta.detach(), new.theta]))
    return Changes(companions=phase, **floats) if note is None else _ended(phase, note, **floats)


def verdict(phase: HMCCompanions) -> HMCLocalStepBias:
    """The record from everything kept so far (a run's end): FA-LD's verdict
    (:func:`fedlangevin.warmup.companions.verdict`) testing the means and the sd ratios (both
    groups run at h)."""
    return companion_verdict(phase, sd=True, make=HMCLocalStepBias,
                             reference=f"K = 1 FA-HMC companion chains at the same h = {phase.step_size:.4g}")


def record(sampler) -> dict:
    """The local-step checkpoint entries: the flag, the companions (or "auto"'s candidates) in progress,
    the record, and "auto"'s rule, measurement in progress and (round, step) since which every round ran K."""
    rule, measurement = sampler.auto_local_steps, sampler.measurement
    return {"check": bool(sampler.check_local_bias),
            "companions": None if sampler.companions is None else sampler.companions.record(),
            "result": None if sampler.local_step_bias is None else sampler.local_step_bias.record(),
            "rule": None if rule is None else rule.record(),
            "measurement": None if measurement is None else measurement.record(), "anchor": list(sampler.anchor)}


class Restored(NamedTuple):
    """:func:`restore`'s entries (a checkpoint written before them: the check off, nothing in progress)."""

    check: bool = False
    companions: HMCCompanions | None = None
    result: HMCLocalStepBias | None = None
    rule: AutoLocalSteps | None = None
    measurement: Measurement | None = None
    anchor: tuple[int, int] = (0, 0)


def restore(rec: dict | None, device, dtype) -> Restored:
    """The entries of :func:`record` from a checkpoint (one written before the check: off, none, none;
    that run continues as it was)."""
    if rec is None:
        return Restored()
    companions = None if rec["companions"] is None else HMCCompanions.from_record(rec["companions"], device, dtype)
    result = None if rec["result"] is None else HMCLocalStepBias.from_record(rec["result"])
    rule = None if rec.get("rule") is None else AutoLocalSteps.from_record(rec["rule"])
    measurement = None if rec.get("measurement") is None else Measurement.from_record(rec["measurement"])
    anchor = tuple(int(v) for v in rec.get("anchor", (0, 0)))
    return Restored(bool(rec["check"]), companions, result, rule, measurement, anchor)
