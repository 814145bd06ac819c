"""``local_steps="auto"``'s companion groups: start, looks, next candidate, the choice (issue 27).

:mod:`~fedlangevin.warmup.local_steps` gives "auto" the second half of its warm-up; with M and
eta_1 frozen, the sampler's chains run at K = 1 and, beside them, one *candidate* group of R
chains per K of the ladder runs K local steps of eta_1 a round (the law "auto" would sample at that
K), started one after another at the sampler's iterates. The rounds themselves, the pilot, the
burn-in and the sums are :mod:`~fedlangevin.warmup.companions`'; this module decides.

**Twins.** Where one K = 1 step of K eta_1 is stable (K eta_1 lambda_max(M H) <= STABLE, H the
global energy's Hessian at the chains' iterates), a candidate runs with two *twin* groups coupled
to it (:class:`~fedlangevin.federation.noise.NoiseTally`): one K = 1 step of K eta_1 with the sum of
the candidate's round noise, two of K eta_1 / 2 with its halves. Their means and variances,
extrapolated to K = 1 at eta_1 (:func:`~fedlangevin.warmup.extrapolation.extrapolated` with
``toward`` = 1 / K), are the reference the candidate is tested against, in their extrapolated sds:
the three chains r move together, so the bounds are those of a difference (on the posteriordb
regressions 10-20 times narrower than against the sampler's independent K = 1 chains). A
candidate without twins (K eta_1 not a stable step) is tested against the sampler's K = 1 chains
(:func:`~fedlangevin.warmup.local_bias.bias_final`). A twinned candidate costs K + 3
gradients per chain and client a round and four synchronisations of R d floats.

**Order and looks.** The smallest candidate starts with the measurement; the next once the newest
has :data:`~fedlangevin.warmup.companions.MIN_KEPT` kept rounds and is not biased on evidence,
while a burn-in and MIN_KEPT kept rounds still fit. Every :data:`~fedlangevin.warmup.companions.LOOK`
kept rounds each running candidate is tested at confidence 1 - (1 - c) / L for the L looks the
measurement has room for (Bonferroni over the looks); one biased on evidence stops with every
larger K (a larger K passing after a smaller one failed would not be chosen). At the end,
:func:`~fedlangevin.warmup.local_bias.choose_local_steps` takes the largest K within the
tolerance with every K below it (means and sd ratios).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from fedlangevin.warmup.companions import (
    CANDIDATE, HALVES, LOOK, MIN_KEPT, WHOLE, Companions, ended, frozen_eta, seed_of, stop,
)
from fedlangevin.warmup.curvature import curvature_at
from fedlangevin.warmup.extrapolation import extrapolated
from fedlangevin.warmup.local_bias import BiasPlan, BiasState, bias_final, choose_local_steps, exceeds
from fedlangevin.warmup.local_steps import STABLE, AutoLocalSteps, LocalStepBias, Measurement, stability
from fedlangevin.warmup.session import Changes

__all__ = ["choice", "estimates", "idle", "look", "measure", "start"]


def _members(k: int, reach: float | None) -> tuple[int, ...]:
    """The roles of candidate K's groups: with its twins where one step of K eta is stable."""
    return (CANDIDATE, WHOLE, HALVES) if reach is not None and k * reach <= STABLE else (CANDIDATE,)


def start(sampler, rule: AutoLocalSteps, budget: int) -> Changes:
    """Start "auto"'s measurement of ``budget`` rounds at the sampler's iterates (M and eta_1 frozen):
    the first candidate's groups, or where K > 1 local steps are not stable at eta_1 on some client
    (eta lambda_max(M H_c) > STABLE), the record saying so (K = 1, the measurement ends)."""
    eta = frozen_eta(sampler)
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
    try:
        reach = eta * curvature_at(sampler._kernel_problem, theta, sampler.preconditioner, seed_of(sampler.seed) + 3,
                                   per_client=False)
    except ValueError:
        reach = None
    own = torch.Generator(device=sampler.device).manual_seed(seed_of(sampler.seed) + 2)
    first, *rest = rule.ladder[1:]
    roles = _members(first, reach)
    g = len(roles)
    return Changes(companions=Companions((first,) * g, eta, s, theta.clone()[None].repeat(g, 1, 1), own.get_state(),
                                         rule=rule, pending=tuple(rest), budget=int(budget), started=(0,) * g,
                                         status=("running",) * g, kept=(0,) * (g + 1), roles=roles, reach=reach))


def look(phase: Companions, theta: torch.Tensor) -> Companions:
    """After a round's sums: every running candidate at a look is tested (biased on evidence: it
    stops, with every larger K); the next candidate starts at the sampler's iterates ``theta`` once
    the newest has :data:`MIN_KEPT` kept rounds, is running, and a burn-in and MIN_KEPT rounds fit."""
    rule = phase.rule
    # a candidate is looked at up to `looks` times: each look's test is at 1 - (1 - confidence) / looks
    # (Bonferroni over the looks), so that stopping at any look is a false stop at most 1 - confidence
    for g in phase.running:
        n = phase.kept[g + 1]
        if phase.role(g) == CANDIDATE and n >= MIN_KEPT and (n - MIN_KEPT) % LOOK == 0:
            looks = max(1, 1 + (phase.budget - phase.burn_in - MIN_KEPT) // LOOK)
            (estimate,) = estimates(phase, (g,))
            if exceeds(estimate, rule.tolerance, 1.0 - (1.0 - rule.confidence) / looks, sd=True):
                phase = stop(phase, g, "biased")
                break
    newest = phase.candidates[-1]
    if (phase.pending and phase.status[newest] == "running" and phase.kept[newest + 1] >= MIN_KEPT
            and phase.budget - phase.done >= phase.burn_in + MIN_KEPT + 1):
        k = phase.pending[0]
        roles = _members(k, phase.reach)
        g = len(roles)
        zero = torch.zeros_like(phase.sums[:1]).repeat(g, 1, 1)
        before = tuple(phase.role(j) for j in range(len(phase.status)))
        phase = replace(phase, local_steps=phase.local_steps + (k,) * g, pending=phase.pending[1:],
                        theta=torch.cat([phase.theta, theta.to(phase.theta)[None].repeat(g, 1, 1)]),
                        started=phase.started + (phase.done,) * g, status=phase.status + ("running",) * g,
                        sums=torch.cat([phase.sums, zero]), squares=torch.cat([phase.squares, zero]),
                        kept=phase.kept + (0,) * g, roles=before + roles)
    return phase


def estimates(phase: Companions, groups) -> tuple:
    """The :class:`~fedlangevin.warmup.local_bias.BiasEstimate` of the candidates ``groups``, in
    order (their K increasing): a twinned one against its twins' extrapolation to K = 1 at eta_1, the
    others against the sampler's K = 1 chains."""
    out = []
    for g in groups:
        k = phase.local_steps[g]
        if phase.twinned(g):
            classes = [g + 1, g + 2, g + 3]
            plan = BiasPlan((k,), phase.burn_in, max(1, phase.kept[g + 2]), 1)
            state = BiasState(plan, phase.done, phase.shift, phase.sums[classes], phase.squares[classes],
                              tuple(phase.kept[c] for c in classes))
            out.append(extrapolated(state, toward=1.0 / k))
        else:
            classes = [0, g + 1]
            plan = BiasPlan((k,), phase.burn_in, max(1, phase.kept[0]), 1)
            state = BiasState(plan, phase.done, phase.shift, phase.sums[classes], phase.squares[classes],
                              tuple(phase.kept[c] for c in classes))
            out += bias_final(state)
    return tuple(out)


def idle(phase: Companions) -> bool:
    """"auto" has nothing left to measure: no group running and no candidate to start."""
    return not phase.running and not phase.pending


def choice(phase: Companions) -> Changes:
    """"auto"'s decision at the measurement's end: the estimates of every candidate with
    :data:`MIN_KEPT` kept rounds that did not diverge, :func:`~fedlangevin.warmup.local_bias.choose_local_steps`'
    K and the record (K = 1 where nothing was measured, saying why)."""
    rule, status = phase.rule, phase.status
    candidates = phase.candidates
    groups = [g for g in candidates if status[g] != "diverged" and phase.kept[g + 1] >= MIN_KEPT]
    notes = [f"K = {phase.local_steps[g]} {status[g]}" for g in candidates if status[g] != "running"]
    notes += [f"K = {phase.local_steps[g]} kept only {phase.kept[g + 1]} rounds (< {MIN_KEPT})"
              for g in candidates if g not in groups and status[g] != "diverged"]
    notes += [f"K = {phase.local_steps[g]} without twins (K eta lambda_max(M H) > {STABLE:g})"
              for g in candidates if not phase.twinned(g) and phase.reach is not None]
    if phase.pending:
        notes.append(f"K = {list(phase.pending)} not started (no room for a burn-in and {MIN_KEPT} kept rounds)")
    note = "; ".join(notes)
    if not groups or phase.kept[0] < MIN_KEPT:
        why = (f"{phase.kept[0]} K = 1 rounds kept after {'the pilot' if phase.burn_in is None else phase.burn_in}"
               f" (the verdict needs {MIN_KEPT}); a longer warm-up lets it measure") if not groups else note
        return ended(phase, why)
    try:
        found = estimates(phase, groups)
    except ValueError as exc:
        return ended(phase, str(exc))
    chosen = choose_local_steps(found, rule.tolerance, rule.confidence, rule.ladder)
    return Changes(companions=None, measurement=None, local_steps=chosen.local_steps, local_bias=LocalStepBias(
        True, chosen.local_steps, True, note, rule.tolerance, rule.confidence, estimates=found, choice=chosen,
        decay=phase.decay, stability=phase.stability, rounds=phase.done, companions=True))


def measure(phase: Measurement, sampler, begin=None, convert=None) -> Changes:
    """After a round of "auto"'s measurement ``phase`` (``sampler``'s companions, if any, have seen
    it): the phase's new state; at the warm-up's first half's end the companions' start
    (:func:`start`, M and eta_1 frozen); at the measurement's end, or once no group is left to run,
    the K of the rounds ahead and the record (:func:`choice`). Reads the sampler only. FA-HMC's
    measurement (:mod:`fedlangevin.fahmc.auto`) passes its own ``begin`` (``start``'s place, same
    arguments) and ``convert`` (FA-LD's :class:`~fedlangevin.warmup.session.Changes` into its own)."""
    begin = start if begin is None else begin
    convert = (lambda changes: changes) if convert is None else convert
    phase = replace(phase, done=phase.done + 1)
    if phase.phase == "wait":
        if phase.done < phase.wait:
            return convert(Changes(measurement=phase))
        begun = begin(sampler, phase.rule, phase.budget)
        return begun if begun.local_bias is not None else begun._replace(measurement=replace(phase, phase="measure"))
    group = sampler.companions
    if group is None:  # ended (the record is there)
        return convert(Changes(measurement=None))
    if phase.done >= phase.wait + phase.budget or idle(group):
        return convert(choice(group))
    return convert(Changes(measurement=phase))
