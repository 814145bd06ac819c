"""A budget in, a private run's plan out, for any sampler whose every local step is FA-LD's Gaussian
mechanism at some step size eta (FA-LD: its own; FA-HMC's OBABO: eta_eq(h, gamma),
:mod:`fedlangevin.privacy.hmc`). The sampler describes its step by a :class:`StepRule` (FA-LD's:
:data:`LANGEVIN`); :mod:`fedlangevin.fald.budget` and :mod:`fedlangevin.fahmc.budget` use it.

When the run starts (its first ``run(rounds=T, warmup=W)``), :func:`plan` spends the budget on
everything that touches the data, in this order:

1. **the start** (``init="map"``, the default of a budgeted run; also when no clip is given): a
   noisy federated MAP search whose rounds also track a private quantile of the gradient norms
   (:func:`fedlangevin.privacy.start.private_start`); it gets ``START_SHARE`` of epsilon, or more
   where the sampling at its public step costs less, or less (to no less than ``MIN_SHARE``) where
   the sampling would otherwise get under ``MIN_RELAXATION`` relaxation times (:func:`_start_noise`).
   Its last clip is the run's clip when none was given.
2. **the sampling**: W + T rounds of K local steps for each of the R chains (every chain is
   released: R chains cost what R runs cost), at the largest constant step size (eta, or FA-HMC's
   h mapped to the accountant's eta_eq) such that the start and the sampling composed stay within
   (epsilon, delta) (:func:`fedlangevin.privacy.planning.largest_within`), and at most the rule's
   public step (FA-LD: SAFETY / lambda_0; lambda_0: the clip's public curvature guess plus the
   prior's curvature, :func:`fedlangevin.warmup.iterates.public_curvature`).

Where the budget cannot buy a useful run it says so with the numbers: a warning when the budget,
not stability, sets the step; a ``ValueError`` when it does and the run's dynamics' time (FA-LD:
eta T K) is below one relaxation time of the stiffest direction (the chains would not leave
their start; on a fixed budget eta T K hardly depends on T, so more rounds do not help).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

import torch

from fedlangevin.privacy.levels import client_levels, record_levels
from fedlangevin.privacy.mechanism import START_ROUNDS  # the private start's default rounds (a budget's start_rounds)
from fedlangevin.privacy.planning import Release, compose_epsilon, largest_within, noise_for_epsilon

__all__ = ["BudgetPlan", "LANGEVIN", "MIN_RELAXATION", "MIN_SHARE", "SAFETY", "START_ROUNDS", "START_SHARE", "StepRule",
           "check_planned", "check_unplanned_init", "plan", "resolved", "run_length"]

#: the start's share of epsilon where the sampling cannot have its public step (spent alone; the sampling
#: gets what the composition leaves), lowered towards MIN_SHARE only as far as needed to leave the sampling
#: MIN_RELAXATION relaxation times of the stiffest direction (the plan refuses a run below that)
START_SHARE = 0.9
MIN_SHARE = 0.3
MIN_RELAXATION = 10.0
#: the sampling's step is at most SAFETY / lambda_0 (the private warm-up's public first step)
SAFETY = 0.1
#: first clip of the private quantile search (it moves geometrically, by up to e^(0.1) a round)
START_CLIP = 1.0


@dataclass(frozen=True)
class StepRule:
    """A sampler's step as the plan sees it: ``to_eta(x)``, the accountant's FA-LD step size of one
    local step at step size x (increasing in x); ``public(lambda_0)``, the largest step stability
    allows; ``rate(lambda_0)``, the slowest decay rate of the stiffest direction's dynamics per unit
    of x (relaxation = x T K rate); ``symbol``, its name in messages; ``friction``: FA-HMC's gamma
    (None: FA-LD). :func:`plan` also takes a function lambda_0 -> StepRule (a rule that depends on
    the public curvature, e.g. FA-HMC's critical friction)."""

    to_eta: object
    public: object
    rate: object
    symbol: str = "eta"
    friction: float | None = None


#: FA-LD: eta itself, at most SAFETY / lambda_0, relaxing at rate lambda_0 per unit of Langevin time
LANGEVIN = StepRule(lambda x: x, lambda lam0: SAFETY / lam0, lambda lam0: lam0)


@dataclass(frozen=True)
class BudgetPlan:
    """What a budgeted run planned: the ``step_size`` (eta; FA-HMC's h), the ``clip``, the private ``start``
    (a :class:`~fedlangevin.privacy.start.PrivateStart`, None without one), the ``releases``
    composed (start, sampling), the ``epsilon`` they spend at ``delta`` (<= ``target_epsilon``),
    the ``public_step`` (FA-LD: SAFETY / lambda_0), the ``rounds`` and ``chains`` released,
    ``relaxation``: the run's time x T K in relaxation times of the stiffest direction (FA-LD:
    eta T K lambda_0), and ``symbol``, the step's name ("eta", "h")."""

    target_epsilon: float
    delta: float
    epsilon: float
    step_size: float
    clip: float
    public_step: float
    rounds: int
    chains: int
    local_steps: int
    relaxation: float
    releases: tuple
    start: object = None
    symbol: str = "eta"
    friction: float | None = None

    def summary(self) -> str:
        lines = [f"budget epsilon = {self.target_epsilon:g} at delta = {self.delta:g}: planned epsilon = "
                 f"{self.epsilon:.4g} for everything released",
                 f"sampling: {self.chains} chain(s) x {self.rounds} rounds x K = {self.local_steps} (every chain is "
                 f"released and counted), {self.symbol} = {self.step_size:.4g} (public step {self.public_step:.4g}), "
                 f"clip = {self.clip:.4g}",
                 f"time {self.symbol} T K = {self.step_size * self.rounds * self.local_steps:.4g}: "
                 f"{self.relaxation:.3g} relaxation times of the stiffest direction"]
        for r in self.releases:
            lines.append(f"release {r.name}: z = {r.noise_multiplier:.4g} x {r.rounds} rounds x {r.copies} "
                         f"cop{'y' if r.copies == 1 else 'ies'}")
        return "\n".join(lines)


def _sampling(problem, privacy_adjacency: str, clip: float, *, rounds: int, chains: int, local_steps: int,
              batch_size, participation, temperature: float, correlation: float):
    """eta -> the accountant's levels of the sampling (as ``trace.privacy`` builds them)."""
    weights = problem.weights.double().cpu()
    n = int(weights.numel())
    scheme = participation.scheme
    s = n if scheme == "full" else int(participation.num_sampled)
    scheme = "II" if scheme == "full" else scheme
    if str(getattr(participation, "noise", "paper")) == "calibrated" and participation.scheme != "full":
        raise ValueError("privacy: a budgeted run plans eq. 10's private noise; give a participation rule with "
                         "noise='paper' or full participation")
    inclusion = None
    p_max = float(weights.max())
    if scheme == "I" and not torch.allclose(weights, torch.full_like(weights, 1.0 / n)):
        inclusion = -math.expm1(s * math.log1p(-p_max)) if p_max < 1 else 1.0
    t = rounds * local_steps
    sensitivity = 2.0 * clip
    if privacy_adjacency == "client":
        def make(eta):
            return client_levels(eta, temperature, correlation, sensitivity, p_max, n, s, local_steps, t, scheme,
                                  inclusion, 1.05).scaled(chains)
    else:
        if batch_size is None:
            gammas = torch.ones(n, dtype=torch.float64)
        else:
            gammas = torch.clamp(float(batch_size) / problem.client_sizes.double().cpu(), max=1.0)
        gamma = float(gammas.max())
        p_eff = float((gammas ** 2 * weights).min() / gamma ** 2)

        def make(eta):
            return record_levels(eta, temperature, correlation, gamma, sensitivity, p_eff, n, s, local_steps, t, scheme,
                           inclusion, 1.05).scaled(chains)
    return make


def _start_noise(problem, privacy, eps: float, delta: float, rule: StepRule = LANGEVIN, **sampling) -> float:
    """The start's noise multiplier: the smaller (the start gets more of epsilon) of

    - the one that leaves the sampling its public step, where that leaves the start at least MIN_SHARE
      of epsilon, and
    - the one that spends START_SHARE of epsilon alone, the share lowered (to no less than MIN_SHARE)
      as far as needed for the sampling's step, solved from what the start leaves, to give
      MIN_RELAXATION relaxation times of the stiffest direction (the plan's own refusal threshold).

    Why the start gets most of a tight budget: a budgeted run's utility is its start's (full MNIST:
    the model averages after 400 rounds are within 0.004 of the start's accuracy, because the sampling's
    time is a hundred-thousandth of a relaxation time in the prior's directions), and the sampling at
    its public step costs a fixed epsilon, which at small epsilon left the start only the old floor of
    0.3 of it. Full MNIST, epsilon = 1: the start's z 52 (test accuracy 0.835, ECE 0.279), against 29
    (0.866, 0.036) with 0.9 (``docs/privacy-utility.md``).

    The sampling's share is counted at most at FA-LD's public step (accountant's eta = SAFETY /
    lambda_0), whatever the sampler: FA-HMC's public h at the critical friction is an eta_eq 2.4
    times that, and reserving it left FA-HMC's start a noisier search than FA-LD's on the same
    budget (full MNIST, epsilon = 2: z = 20.1 against 15.9, test accuracy 0.875 against 0.883);
    its step is then solved from what the start leaves (below its public step, with the warning).

    FA-LD's sampling noise multiplier at a given eta lambda_0 does not depend on the clip C (eta =
    x / (C^2 max_c n_c / p_c) and z is proportional to 1 / (C sqrt(eta))), so the split and the
    relaxation are known before the start chooses C (another rule's are evaluated at C = 1: a guess,
    which only splits the budget; the step solved afterwards keeps the total within it); the prior's
    curvature only lowers that step (more noise), so leaving it out here is conservative."""
    from fedlangevin.warmup.iterates import public_curvature

    unit = type(privacy)(clip=1.0)
    by_eta = _sampling(problem, privacy.adjacency, 1.0, **sampling)
    lam_unit = public_curvature(unit, problem.weights, getattr(problem, "client_sizes", None))
    rule = rule if isinstance(rule, StepRule) else rule(lam_unit)
    at_public = by_eta(min(rule.to_eta(rule.public(lam_unit)), LANGEVIN.public(lam_unit)))
    start = lambda z: Release("start", z, privacy.start_rounds)  # noqa: E731
    make = lambda x: by_eta(rule.to_eta(x))  # noqa: E731
    time = sampling["rounds"] * sampling["local_steps"] * rule.rate(lam_unit)

    def alone(share: float) -> float:
        return noise_for_epsilon(share * eps, delta, start)

    def relaxation(share: float) -> float:
        return largest_within(eps, delta, [start(alone(share))], make, rule.public(lam_unit))[0] * time

    share = START_SHARE
    if relaxation(share) < MIN_RELAXATION:
        low, high = MIN_SHARE, START_SHARE
        if relaxation(low) >= MIN_RELAXATION:  # (else even MIN_SHARE leaves less: the plan refuses the run)
            for _ in range(12):  # bisection to 2^-12 of (START_SHARE - MIN_SHARE): relaxation falls as the share grows
                mid = 0.5 * (low + high)
                low, high = (mid, high) if relaxation(mid) >= MIN_RELAXATION else (low, mid)
        share = low
    z = alone(share)
    if compose_epsilon([start(alone(MIN_SHARE)), at_public], delta) <= eps:
        z = min(z, noise_for_epsilon(eps, delta, start, fixed=[at_public]))
    return z


def plan(problem, privacy, *, rounds: int, chains: int, local_steps: int, batch_size, participation,
         temperature: float, correlation: float, init=None, generator: torch.Generator | None = None,
         rule: StepRule = LANGEVIN) -> BudgetPlan:
    """Spend ``privacy``'s budget (see the module docstring); ``init``: "map" (the private start),
    or the chains' start (d,) of the user's own (the clip search then runs without moving it);
    ``rule``: the sampler's step (:class:`StepRule`; default FA-LD's)."""
    from fedlangevin.privacy.start import prior_curvature, private_start
    from fedlangevin.warmup.iterates import public_curvature

    eps, delta = privacy.epsilon, privacy.delta
    adjacency = privacy.adjacency
    searching = privacy.clip is None or isinstance(init, str)
    fixed, start = [], None
    clip = privacy.clip
    if searching:
        z = _start_noise(problem, privacy, eps, delta, rounds=rounds, chains=chains, local_steps=local_steps,
                         batch_size=batch_size, participation=participation, temperature=temperature,
                         correlation=correlation, rule=rule)
        theta = None if isinstance(init, str) or init is None else torch.as_tensor(init, dtype=torch.float64)
        if theta is not None and theta.dim() == 2:
            theta = theta.mean(0)
        start = private_start(problem, adjacency=adjacency, rounds=privacy.start_rounds, noise_multiplier=z,
                              clip=START_CLIP if clip is None else clip, quantile=privacy.quantile,
                              theta=theta, move=isinstance(init, str), generator=generator,
                              adapt_clip=privacy.clip is None)
        fixed.append(start.release)
        if clip is None:
            clip = start.clip
    record = type(privacy)(clip=clip)
    lam0 = public_curvature(record, problem.weights, getattr(problem, "client_sizes", None)) + prior_curvature(problem)
    rule = rule if isinstance(rule, StepRule) else rule(lam0)
    public = rule.public(lam0)
    by_eta = _sampling(problem, adjacency, clip, rounds=rounds, chains=chains, local_steps=local_steps,
                       batch_size=batch_size, participation=participation, temperature=temperature,
                       correlation=correlation)
    make = lambda x: by_eta(rule.to_eta(x))  # noqa: E731
    eta, spent = largest_within(eps, delta, fixed, make, public)
    relaxation = eta * rounds * local_steps * rule.rate(lam0)
    limited = eta < public * (1 - 1e-3)  # the budget, not stability, sets the step
    sym = rule.symbol
    if limited and relaxation < 1.0:
        raise ValueError(
            f"privacy: epsilon = {eps:g} at delta = {delta:g} buys {chains} chain(s) x {rounds} rounds a step size of "
            f"at most {sym} = {eta:.3g}, {public / eta:.3g} times below the public step {public:.3g}: the run's "
            f"time {sym} T K = {eta * rounds * local_steps:.3g} is {relaxation:.3g} relaxation times of the "
            f"stiffest direction (lambda_0 = {lam0:.3g}), so the chains would not leave their start and the "
            "privacy noise would dwarf the posterior's scale. Give a larger epsilon or fewer chains (each chain "
            "released costs as much as one more run)")
    if limited:
        warnings.warn(
            f"privacy: the budget, not stability, sets the step: {sym} = {eta:.3g} is {public / eta:.3g} times below the "
            f"public step {public:.3g}; {chains} chain(s) x {rounds} rounds get a time {sym} T K of {relaxation:.3g} "
            "relaxation times of the stiffest direction (flatter directions need more); a larger epsilon or fewer "
            "chains buy more", stacklevel=3)
    releases = tuple(fixed) + (Release("sampling", min(make(eta).z), rounds, local_steps, make(eta).gamma,
                                       make(eta).q, chains),)
    return BudgetPlan(eps, delta, spent, eta, clip, public, rounds, chains, local_steps, relaxation, releases, start,
                      sym, rule.friction)


def check_planned(step_size, adapt, init) -> None:
    """What a budgeted run plans itself, refused when given (any sampler): a step size (planned),
    ``adapt=True`` (an adapted M changes the sensitivity after the plan), an ``init`` string other
    than "map" (the private start)."""
    if not (isinstance(step_size, str) and step_size == "auto"):
        raise ValueError(f"privacy: a budgeted run plans its step size within the budget; leave step_size='auto' "
                         f"(got {step_size!r}), or give a clip without a budget and a step size of your own")
    if adapt:
        raise ValueError("privacy: adapt=True would change the preconditioner, hence the sensitivity, after the "
                         "budget was planned; a budgeted run does not adapt (leave adapt unset)")
    if isinstance(init, str) and init != "map":
        raise ValueError(f"init must be an array of shape (d,) or (R, d), None or 'map'; got {init!r}")


def check_unplanned_init(init) -> None:
    """A private run without a budget refuses an ``init`` string (any sampler): the mode search reads the
    data without noise; a budgeted run's ``init="map"`` is the private start."""
    if isinstance(init, str):
        raise ValueError(f"privacy: init={init!r} searches the mode with noiseless gradients and Hessians; give a "
                         "budget (RecordLevel(epsilon=..., delta=...)) for a private start, or start from zeros, prior "
                         "draws or a value of your own")


def run_length(sampler, rounds, warmup) -> tuple[int, torch.Generator]:
    """(rounds released, the plan's generator) of a budgeted sampler's first run (``rounds`` +
    ``warmup``); a ``ValueError`` when its budget was already spent or ``rounds`` is not >= 1."""
    if sampler.budget is not None:
        raise ValueError(f"privacy: this sampler's budget {sampler.privacy!r} was planned for and spent by its first "
                         f"run ({sampler.budget.rounds} rounds of {sampler.budget.chains} chains); build a new sampler "
                         "with a budget of its own")
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"rounds: a budgeted run plans for a number of rounds >= 1; got {rounds!r}")
    total = rounds + (warmup if isinstance(warmup, int) and not isinstance(warmup, bool) else 0)
    return total, torch.Generator().manual_seed(int(sampler.seed) % (2**63))


def resolved(privacy, budget: BudgetPlan):
    """The run's mechanism after planning: the clip chosen and the releases before sampling."""
    return replace(privacy, clip=budget.clip, spent=tuple(r.record() for r in budget.releases[:-1]))
