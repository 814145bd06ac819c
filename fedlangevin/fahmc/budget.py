"""A budgeted private FA-HMC run: ``FAHMC(problem, privacy=RecordLevel(epsilon=..., delta=...))``.

The plan is :mod:`fedlangevin.privacy.runplan`'s (FA-LD's): the private start and its adaptive clip,
then the largest constant step size h (at the run's friction gamma) such that the start and the sampling (every
round, warm-up included, of every chain released, K local steps each) composed stay within
(epsilon, delta). Each OBABO step is FA-LD's Gaussian mechanism at eta_eq(h, gamma) =
h^2 / (2 tanh(gamma h / 2)) (:mod:`fedlangevin.privacy.hmc`), so the accountant sees eta_eq(h).

Stability: h <= HMC_SAFETY / sqrt(lambda_0), lambda_0 the same public curvature as FA-LD's
(the clip's guess plus the prior's). HMC_SAFETY = sqrt(2 SAFETY) = 0.447 makes h^2 / 2, OBABO's
overdamped limit of eta_eq, FA-LD's public step SAFETY / lambda_0; it is 0.22 of OBABO's
stability limit 2 / sqrt(lambda_0).

Relaxation: the stiffest direction's dynamics x'' + gamma x' + lambda_0 x = 0 decay at the rate
(gamma - sqrt(gamma^2 - 4 lambda_0)) / 2 (gamma / 2 when underdamped); the run's time h T K in
units of that rate's inverse is the plan's ``relaxation`` (below 1 with the budget binding: refused).

Friction: the one given, or (``friction="auto"``, the default) the critical friction
gamma = 2 sqrt(lambda_0) of the stiffest direction, public like lambda_0. Why: on a budget the
accountant fixes eta_eq T K, and h ~ gamma eta_eq while gamma h is small, so the stiffest direction
relaxes by about gamma^2 eta_eq T K / 2 below critical friction (FA-HMC's default 1.0 on a
lambda_0 of thousands: a chain that does not move), 2 lambda_0 eta_eq T K at it (twice FA-LD's
lambda_0 eta T K on the same budget), and lambda_0 eta_eq T K above it; a flat direction of
curvature lambda relaxes by about lambda eta_eq T K at any friction above 2 sqrt(lambda), as FA-LD's.
"""

from __future__ import annotations

import math

from fedlangevin.privacy.hmc import equivalent_step_size
from fedlangevin.privacy.runplan import SAFETY, StepRule, plan

__all__ = ["HMC_SAFETY", "PLACEHOLDER_STEP", "apply", "plan", "planned", "step_rule"]

#: h <= HMC_SAFETY / sqrt(lambda_0): h^2 / 2 = SAFETY / lambda_0, FA-LD's public step
HMC_SAFETY = math.sqrt(2.0 * SAFETY)


def step_rule(friction: float | None):
    """FA-HMC's step (OBABO at friction gamma) as the plan sees it; ``friction`` None: the critical
    friction 2 sqrt(lambda_0) of the stiffest direction (a function lambda_0 -> StepRule)."""
    if friction is None:
        return lambda lam0: step_rule(2.0 * math.sqrt(lam0))
    gamma = float(friction)
    return StepRule(to_eta=lambda h: equivalent_step_size(h, gamma),
                    public=lambda lam0: HMC_SAFETY / math.sqrt(lam0),
                    rate=lambda lam0: 0.5 * (gamma - math.sqrt(_discriminant(gamma, lam0))),
                    symbol="h", friction=gamma)


def _discriminant(gamma: float, lam0: float) -> float:
    """gamma^2 - 4 lambda_0, zero within rounding of gamma^2: at the critical friction 2 sqrt(lambda_0) a
    rounding of +1 ulp would otherwise take sqrt(ulp) ~ 1e-8 relative off the relaxation rate."""
    disc = gamma * gamma - 4.0 * lam0
    return 0.0 if disc <= 1e-12 * gamma * gamma else disc


#: the schedule's step size until the plan sets h (no round runs before the plan)
PLACEHOLDER_STEP = 1e-300


def planned(privacy, step_size) -> bool:
    """A budget whose step size the run plans (step_size left "auto"); a step size given is refused later."""
    return getattr(privacy, "budgeted", False) is True and isinstance(step_size, str) and step_size == "auto"


def apply(sampler, rounds, warmup) -> None:
    """Plan the budget when the sampler's first run starts (``rounds`` + ``warmup`` rounds released),
    then run with it: the clip chosen (the kernel rebuilt on the clipped problem), h constant, the
    chains at the private start (where ``init`` was None or "map")."""
    import dataclasses

    from fedlangevin.fahmc.kernel import assemble
    from fedlangevin.fahmc.private import kernel_problem
    from fedlangevin.privacy.runplan import resolved, run_length
    from fedlangevin.warmup.session import auto_schedule

    total, gen = run_length(sampler, rounds, warmup)
    k = sampler._kernel
    budget = plan(sampler.problem, sampler.privacy, rounds=total, chains=sampler.chains,
                  local_steps=sampler.local_steps, batch_size=k.batch_size, participation=k.participation,
                  temperature=k.temperature, correlation=k.correlation, init=sampler._budget_init, generator=gen,
                  rule=step_rule(sampler.given_friction))
    sampler.friction = budget.friction
    privacy = resolved(sampler.privacy, budget)
    _, schedule = auto_schedule(budget.step_size, sampler.problem)
    sampler.privacy, sampler.budget, sampler.schedule = privacy, budget, schedule
    sampler._kernel = assemble(kernel_problem(sampler.problem, privacy), temperature=k.temperature,
                               correlation=k.correlation, rule=k.participation, batch_size=k.batch_size,
                               friction=budget.friction, splitting=k.splitting, dtype=k.dtype, device=k.device,
                               noise_dtype=k.noise_dtype, preconditioner=sampler.preconditioner)
    if budget.start is not None and isinstance(sampler._budget_init, str):
        theta = budget.start.theta.to(device=sampler.device, dtype=sampler.dtype)
        sampler.state = dataclasses.replace(sampler.state, theta=theta.expand_as(sampler.state.theta).clone())
