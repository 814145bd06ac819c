"""FA-HMC's ``local_steps="auto"``: K chosen in warm-up against the sampler's K = 1 chains (issue 27).

The twin of FA-LD's (:mod:`fedlangevin.warmup.local_steps` plans it, :mod:`~fedlangevin.warmup.auto_groups`
decides), with FA-HMC's groups. ``FAHMC(problem, local_steps="auto")`` gives the second half of its
warm-up, W_b = W // 2 rounds (at least :data:`~fedlangevin.warmup.local_steps.MIN_ROUNDS`), to the
measurement; the first W - W_b rounds run as before (``step_size="auto"`` adapts M, h and the friction
there, at K = 1: :mod:`fedlangevin.fahmc.warmup`). With M, h and gamma frozen, the sampler's chains go
on at K = 1 (the reference: a K = 1 round is one centralised BAOAB or OBABO step) and beside them one
*candidate* group of R chains per K of the ladder runs FA-HMC with K local steps of the same h a round
(the law the run would sample at that K), started one after another at the sampler's (theta, v), on
their own generator (the sampler's chains draw the numbers they draw without them).

**What is compared.** Both run at h, so their laws differ by K alone: per coordinate (E_K - E_1) /
sd_1 and sd_K / sd_1 of the broadcast theta, from two groups of R independent chains (jackknife
standard errors over chains; :func:`~fedlangevin.warmup.local_bias.bias_final`). Why no coupled
twins, as FA-LD's candidates have: a twin is a K = 1 chain moving the candidate's time per round, one
step of K h, and BAOAB's h is already near its stability limit (h omega < 2; the warm-up's h* = 0.48
with M the posterior covariance), so K h is not a step; a K = 1 FA-HMC chain mixes fast per round
(ESS per chain-round 0.05-0.15 on the validation posteriors, docs/fahmc.md), which gives the
independent comparison its power. The pilot, burn-in, looks (a candidate biased on evidence stops with
every larger K), order and choice (the largest K within the tolerance with every K below it, means and
sd ratios) are FA-LD's (:mod:`~fedlangevin.warmup.companions`,
:mod:`~fedlangevin.warmup.auto_groups`).

**Stability.** K > 1 is tried only where every client's local steps are stable at h: h
sqrt(lambda_max(M H_c)) < :data:`~fedlangevin.fahmc.local_bias.STABLE` at the chains' iterates (H_c
client c's energy's Hessian, power iteration on Hessian-vector products); else K = 1 is kept and the
record says why. A candidate that diverges stops with every larger K.

**Cost.** A candidate K costs K gradients per chain and client a round and sends 2 R d floats up
and down per client (theta and v; counted as set-up floats in the ledger and the trace's totals);
rounds are unchanged. What it needs: two or more chains, one process, and a step size constant over
the warm-up's end (``"auto"`` or a number): :func:`~fedlangevin.fahmc.local_bias.unmeasurable`, checked
before any work.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

import torch

from fedlangevin.fahmc.kernel import FAHMCKernel, FAHMCState
from fedlangevin.fahmc.local_bias import STABLE, HMCCompanions, HMCLocalStepBias
from fedlangevin.fahmc.warmup import Changes
from fedlangevin.warmup import auto_groups
from fedlangevin.warmup.companions import CANDIDATE, ended, frozen_eta, observe, seed_of, stop
from fedlangevin.warmup.curvature import curvature_at
from fedlangevin.warmup.local_steps import AutoLocalSteps, LocalStepBias

__all__ = ["converted", "measure", "start", "update"]


def converted(changes) -> Changes:
    """FA-LD's :class:`~fedlangevin.warmup.session.Changes` from the shared measurement (its
    phase, companions, K and record) as FA-HMC's, the record as an :class:`HMCLocalStepBias`."""
    bias = changes.local_bias
    if bias is not None and not isinstance(bias, HMCLocalStepBias):
        bias = HMCLocalStepBias(**{f.name: getattr(bias, f.name) for f in fields(LocalStepBias)})
    return Changes(floats_down=changes.floats_down, floats_up=changes.floats_up, companions=changes.companions,
                   measurement=changes.measurement, local_steps=changes.local_steps, local_bias=bias)


def start(sampler, rule: AutoLocalSteps, budget: int) -> Changes:
    """Start the measurement of ``budget`` rounds at the sampler's (theta, v) (M, h and gamma frozen):
    the first candidate's group, or where K > 1 local steps are not stable at h on some client, the
    record saying so (K = 1, the measurement ends)."""
    h = frozen_eta(sampler)
    theta = sampler.state.theta.detach()
    try:
        curvature = curvature_at(sampler.problem, theta, sampler.preconditioner, seed_of(sampler.seed) + 5,
                                 per_client=True)
        s = h * math.sqrt(max(curvature, 0.0))
    except ValueError:
        s = math.inf
    if not s < STABLE:
        note = (f"h sqrt(lambda_max(M H_c)) = {s:.3g} >= {STABLE:g} on some client: K > 1 local steps are not stable "
                f"at h = {h:.3g}, K = 1 is kept")
        return Changes(local_steps=1, measurement=None, local_bias=HMCLocalStepBias(
            True, 1, False, note, rule.tolerance, rule.confidence, stability=s))
    own = torch.Generator(device=sampler.device).manual_seed(seed_of(sampler.seed) + 2)
    first, *rest = rule.ladder[1:]
    return Changes(companions=HMCCompanions(
        (first,), h, s, theta.clone()[None], own.get_state(), rule=rule, pending=tuple(rest), budget=int(budget),
        started=(0,), status=("running",), kept=(0, 0), roles=(CANDIDATE,),
        momentum=sampler.state.momentum.detach().clone()[None]))


def update(phase: HMCCompanions, kernel: FAHMCKernel, theta: torch.Tensor, momentum: torch.Tensor, preconditioner,
           friction: float, uploads_of, num_clients: int) -> Changes:
    """After a round of the sampler whose broadcast (theta, v) are ``theta``, ``momentum`` (R, d): one
    round of every running candidate (K local steps of h, M ``preconditioner``, gamma ``friction``, from
    their own generator), the pilot, the burn-in or the sums, the looks and the next candidate (started at
    (theta, v)), and the floats the round sent (2 d per upload, 2 N d down per group)."""
    if theta.shape != phase.theta.shape[1:]:
        return converted(ended(phase, "chains were dropped (on_divergence='drop'): the groups are no longer paired"))
    gen = torch.Generator(device=phase.theta.device)
    gen.set_state(phase.generator)
    rows, velocities, up, running = list(phase.theta.unbind(0)), list(phase.momentum.unbind(0)), 0.0, phase.running
    for g in running:
        state = FAHMCState(theta=rows[g], momentum=velocities[g], step=0, round=0)
        new, info = kernel.step(state, [phase.step_size] * phase.local_steps[g], gen, preconditioner=preconditioner,
                                friction=friction)
        up += float(uploads_of(info.weights))
        rows[g], velocities[g] = new.theta, new.momentum
    d = theta.shape[1]
    floats = dict(floats_down=float(2 * len(running) * num_clients * d), floats_up=2.0 * up * d)
    phase = replace(phase, theta=torch.stack(rows), momentum=torch.stack(velocities), generator=gen.get_state(),
                    done=phase.done + 1)
    for g in running:
        if not (bool(torch.isfinite(rows[g]).all()) and bool(torch.isfinite(velocities[g]).all())):
            phase = stop(phase, g, "diverged")
            break
    phase, note = observe(phase, torch.cat([theta.detach()[None], phase.theta]), auto_groups.look)
    extra = phase.theta.shape[0] - phase.momentum.shape[0]
    if extra:  # the look started the next candidate at the sampler's (theta, v)
        v = momentum.detach().to(phase.momentum)[None].repeat(extra, 1, 1)
        phase = replace(phase, momentum=torch.cat([phase.momentum, v]))
    if note is not None:
        return converted(ended(phase, note))._replace(**floats)
    return Changes(companions=phase, **floats)


def measure(phase, sampler) -> Changes:
    """After a round of the measurement ``phase`` (:class:`~fedlangevin.warmup.local_steps.Measurement`;
    the candidates have seen it): FA-LD's :func:`~fedlangevin.warmup.auto_groups.measure` with
    FA-HMC's :func:`start`."""
    return auto_groups.measure(phase, sampler, begin=start, convert=converted)
