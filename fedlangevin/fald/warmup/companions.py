"""Companion chains: the check of a fixed K > 1 against K = 1, run beside the sampler (issue 27).

A run with a fixed ``local_steps`` K > 1 and ``check_local_bias=True`` (the default) measures the
bias of its K against K = 1 *after* its warm-up, with R companion chains (R = the sampler's
chains) that run beside the sampler's from the rounds where M and eta are frozen (the end of an
adaptive warm-up; from the first round where nothing adapts). The warm-up adapts M and eta over
its whole length, exactly as with ``check_local_bias=False``, and the sampler's chains draw
exactly the same numbers: the companions have their own generator, seeded from the run's seed.

**The companions.** FA-LD with the sampler's problem, temperature, correlation, participation,
minibatches and M, built by the package's engine (:func:`~fedlangevin.fald.core.engine.assemble`,
a pure ``(init, step)`` kernel over their own state), with **one local step of K eta** per
round, started at the sampler's iterates. A round of the sampler moves K eta of Langevin time,
and so does a companion round: the two groups decorrelate about equally fast per round, so a
round of both gives the K = 1 reference as much information as the K chains (a K = 1 chain at
eta would need K times the rounds: the power problem of the interleaved measurement, whose
K = 1 chains decorrelated in 40-60 rounds at K = 10's eta). The price: the companions' law has
the discretisation bias of a step K eta, so K eta must be a step K = 1 can take:
``K eta lambda_max(M H) <= STABLE`` at the chains' iterates (H the global energy's Hessian,
power iteration on Hessian-vector products, as the curvature step rule), else no companion
runs and the record says why. Where M is the adapted posterior covariance, K eta is about the
eta the acceptance rule would give K = 1, whose bias it bounds.

**What is compared.** The stationary *means* of the broadcast iterate, (E_K - E_1) / sd_1 per
coordinate, in companion sds (:mod:`~fedlangevin.fald.warmup.local_bias`' estimator on two groups
of R independent chains: standard errors from the chain means across chains, the Bonferroni
verdict :func:`~fedlangevin.fald.warmup.local_bias.exceeds` over the d means). The sd ratios are
measured and recorded but not tested: one Langevin step of h inflates a Gaussian's variance by
1 / (1 - h lambda / 2) (lambda the curvature in M's units), so at K eta lambda = 0.5 the
companions' sds are 15 % wide whatever K does (kidiq at the default warm-up's eta), while their
means stay exact on a Gaussian.

**Burn-in** (never kept, both groups): the first :data:`PILOT` rounds give the decay time tau_e
of both groups (:func:`~fedlangevin.fald.warmup.local_bias.decay_rounds`, the larger; a transient
only lengthens it: conservative); rounds up to B = max(PILOT, ceil(tau_e ln(1 / TRANSIENT))) are
discarded, which leaves at most TRANSIENT of the start's offset (the companions start in the K
chains' law). The sums of both groups' kept iterates and squares then accumulate round by round;
at the end of every ``run()`` with at least :data:`MIN_KEPT` kept rounds the verdict is made
(and warned) from everything kept so far. The companions cost one gradient per client and chain a
round, 1/K of the sampler's K (a K = 10 run does 10 % more gradient work), and send as many floats
as the sampler's chains: R d more up and down per client and round (counted in the ledger's set-up floats: the trace's communication
totals include them; rounds are unchanged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from fedlangevin.fald.core.engine import assemble
from fedlangevin.fald.core.kernel import FALDState
from fedlangevin.fald.core.preconditioning import is_identity, placed
from fedlangevin.fald.core.schedules import step_sizes
from fedlangevin.fald.warmup.curvature import max_curvature
from fedlangevin.fald.warmup.local_bias import TRANSIENT, BiasPlan, BiasState, bias_final, decay_rounds, exceeds
from fedlangevin.fald.warmup.local_steps import CONFIDENCE, STABLE, TOLERANCE, LocalStepBias, eligible
from fedlangevin.fald.warmup.session import Changes

__all__ = ["MIN_KEPT", "PILOT", "Companions", "build", "due", "record", "restore", "start", "update", "verdict"]

#: rounds whose iterates give the decay time (never kept)
PILOT = 50
#: kept rounds (per chain and group) before a verdict
MIN_KEPT = 50
#: the pilot keeps at most this many numbers (rounds x 2 groups x chains x d): fewer chains beyond
PILOT_NUMBERS = 1 << 22


@dataclass(frozen=True)
class Companions:
    """The companions in progress (checkpointed with the sampler): ``local_steps`` K, ``step_size``
    eta (the sampler's; a companion step is K eta), ``stability`` K eta lambda_max(M H),
    ``theta`` (R, d) their iterates, ``generator`` their generator's state, ``done`` the rounds
    run, ``pilot`` the first rounds' iterates (P, 2, R', d), ``decay`` tau_e and ``burn_in`` B once
    known, ``shift`` (d,) the sums are taken about, ``sums`` and ``squares`` (2, R, d) float64 of
    the kept iterates (companions first, then the sampler's chains) and ``kept`` their rounds."""

    local_steps: int
    step_size: float
    stability: float
    theta: torch.Tensor
    generator: torch.Tensor
    done: int = 0
    pilot: torch.Tensor | None = None
    decay: float | None = None
    burn_in: int | None = None
    shift: torch.Tensor | None = None
    sums: torch.Tensor | None = None
    squares: torch.Tensor | None = None
    kept: int = 0

    def record(self) -> dict:
        opt = lambda t: None if t is None else t.detach().cpu().clone()  # noqa: E731
        return {"local_steps": self.local_steps, "step_size": self.step_size, "stability": self.stability,
                "theta": opt(self.theta), "generator": self.generator.clone(), "done": self.done,
                "pilot": opt(self.pilot), "decay": self.decay, "burn_in": self.burn_in, "shift": opt(self.shift),
                "sums": opt(self.sums), "squares": opt(self.squares), "kept": self.kept}

    @classmethod
    def from_record(cls, rec: dict, device, dtype) -> "Companions":
        f64 = lambda t: None if t is None else torch.as_tensor(t, dtype=torch.float64).clone()  # noqa: E731
        return cls(int(rec["local_steps"]), float(rec["step_size"]), float(rec["stability"]),
                   torch.as_tensor(rec["theta"]).to(device=device, dtype=dtype).clone(),
                   torch.as_tensor(rec["generator"], dtype=torch.uint8).clone(), int(rec["done"]), f64(rec["pilot"]),
                   None if rec["decay"] is None else float(rec["decay"]),
                   None if rec["burn_in"] is None else int(rec["burn_in"]), f64(rec["shift"]), f64(rec["sums"]),
                   f64(rec["squares"]), int(rec["kept"]))


def due(sampler) -> bool:
    """Whether companions start now: a fixed K > 1 with ``check_local_bias``, measurable
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


def _seed(seed: int) -> int:
    return (int(seed) * 1_000_033 + 7_919) % 2**63


def start(sampler) -> Changes:
    """Start the companions at the sampler's iterates (M and eta frozen): the phase, or where K eta
    is not a stable K = 1 step, the record saying so."""
    k = sampler.local_steps
    eta = float(step_sizes(sampler.schedule, sampler.state.step, 1)[0])
    theta = sampler.state.theta.detach()
    x = theta.to(dtype=torch.float64)
    pre = None if is_identity(sampler.preconditioner) else placed(sampler.preconditioner, x.device, torch.float64)
    work = sampler._kernel_problem.to(device=x.device, dtype=torch.float64)
    gen = torch.Generator().manual_seed(_seed(sampler.seed) + 1)
    try:
        s = k * eta * max_curvature(work, x, pre, per_client=False, generator=gen)
    except ValueError:
        s = math.inf
    if not s <= STABLE:
        note = (f"K eta lambda_max(M H) = {s:.3g} > {STABLE:g}: one step of K eta = {k * eta:.3g}, the companions' "
                "K = 1 reference at the same Langevin time per round, is not a stable step; no companion ran")
        return Changes(local_bias=LocalStepBias(False, k, False, note, TOLERANCE, CONFIDENCE, stability=s))
    own = torch.Generator(device=sampler.device).manual_seed(_seed(sampler.seed))
    return Changes(companions=Companions(k, eta, s, theta.clone(), own.get_state()))


def _ended(phase: Companions, note: str) -> Changes:
    return Changes(companions=None, local_bias=LocalStepBias(
        False, phase.local_steps, False, note, TOLERANCE, CONFIDENCE, decay=phase.decay, stability=phase.stability,
        rounds=phase.done))


def update(phase: Companions, kernel, theta: torch.Tensor, preconditioner, uploads_of, num_clients: int) -> Changes:
    """After a round of the sampler whose broadcast iterates are ``theta`` (R, d): one companion round
    (one step of K eta from their own generator), the burn-in or the sums, and the floats the round
    sent (``uploads_of(weights)``: uploads per chain; d floats each, N d down)."""
    gen = torch.Generator(device=phase.theta.device)
    gen.set_state(phase.generator)
    state = FALDState(theta=phase.theta, step=0, round=0, correction=None)
    new, info = kernel.step(state, [phase.local_steps * phase.step_size], gen, preconditioner=preconditioner)
    d = theta.shape[1]
    floats = dict(floats_down=float(num_clients * d), floats_up=float(uploads_of(info.weights)) * d)
    if not bool(torch.isfinite(new.theta).all()):
        return _ended(phase, f"the companions became non-finite in their round {phase.done + 1} (one step of "
                             f"K eta = {phase.local_steps * phase.step_size:.3g})")._replace(**floats)
    if theta.shape != phase.theta.shape:
        return _ended(phase, "chains were dropped (on_divergence='drop'): the two groups are no longer paired")
    pair = torch.stack([new.theta, theta.detach()]).to(device="cpu", dtype=torch.float64)  # (2, R, d)
    phase = replace(phase, theta=new.theta, generator=gen.get_state(), done=phase.done + 1)
    if phase.burn_in is None:
        keep = max(2, min(pair.shape[1], PILOT_NUMBERS // max(1, 2 * PILOT * d)))
        row = pair[None, :, :keep]
        pilot = row if phase.pilot is None else torch.cat([phase.pilot, row])
        phase = replace(phase, pilot=pilot)
        if phase.done == PILOT:
            try:
                decay = max(decay_rounds(pilot[:, 0]), decay_rounds(pilot[:, 1]))
            except ValueError as exc:
                return _ended(phase, f"the pilot's iterates: {exc}")._replace(**floats)
            burn_in = max(PILOT, math.ceil(decay * math.log(1.0 / TRANSIENT)))
            phase = replace(phase, pilot=None, decay=decay, burn_in=burn_in)
        return Changes(companions=phase, **floats)
    if phase.done <= phase.burn_in:
        return Changes(companions=phase, **floats)
    shift = pair[1].mean(0) if phase.shift is None else phase.shift
    y = pair - shift
    sums = y.clone() if phase.sums is None else phase.sums + y
    squares = y * y if phase.squares is None else phase.squares + y * y
    return Changes(companions=replace(phase, shift=shift, sums=sums, squares=squares, kept=phase.kept + 1), **floats)


def verdict(phase: Companions) -> LocalStepBias:
    """The record from everything kept so far (a run's end): measured once :data:`MIN_KEPT` rounds
    were kept, with the estimate and whether the mean shift exceeds the tolerance on evidence."""
    k = phase.local_steps
    reference = f"K = 1 companion chains at one step of K eta = {k * phase.step_size:.4g}"
    common = dict(decay=phase.decay, stability=phase.stability, rounds=phase.done)
    if phase.kept < MIN_KEPT:
        burn = f"burn-in {phase.burn_in}" if phase.burn_in is not None else f"a pilot of {PILOT} rounds"
        note = (f"{phase.kept} rounds kept after {burn}; the verdict needs {MIN_KEPT} (run more rounds: the "
                "companions go on in the sampler's next runs)")
        return LocalStepBias(False, k, False, note, TOLERANCE, CONFIDENCE, **common)
    plan = BiasPlan((k,), phase.burn_in, phase.kept, 1)
    state = BiasState(plan, phase.done, phase.shift, phase.sums, phase.squares, (phase.kept, phase.kept))
    try:
        (estimate,) = bias_final(state)
    except ValueError as exc:
        return LocalStepBias(False, k, False, str(exc), TOLERANCE, CONFIDENCE, **common)
    return LocalStepBias(False, k, True, reference, TOLERANCE, CONFIDENCE, estimates=(estimate,),
                         exceeds=exceeds(estimate, TOLERANCE, CONFIDENCE, sd=False), companions=True, **common)


def record(sampler) -> dict | None:
    """The companions' checkpoint entry (None: none running)."""
    return None if sampler.companions is None else sampler.companions.record()


def restore(rec: dict | None, device, dtype) -> Companions | None:
    """The companions from a checkpoint's entry (None: none running, or a checkpoint before them)."""
    return None if rec is None else Companions.from_record(rec, device, dtype)
