"""A budget in, a plan out: the releases of a private run composed, and the largest step size
that keeps all of them within a target (epsilon, delta).

A private run releases more than its sampling rounds: the start (a noisy federated MAP search,
:mod:`fedlangevin.privacy.start`), the clip chosen from a private quantile of the gradient norms
(released with the start's rounds), and every round of every chain (R chains on the same data are
R runs, composed: four chains cost more epsilon than one). Each is described here by what the
accountant needs, a :class:`Release` (noise multiplier per release, batch fraction, client
inclusion probability, releases per round, rounds, copies), so that any sampler whose releases
are Gaussian mechanisms of that form plugs into the same plan:

- :func:`compose_epsilon`: the epsilon of several releases composed (the privacy-loss
  distributions of each, :mod:`fedlangevin.privacy.pld`, composed on one pessimistic grid; or the
  sum of their RDP curves where that gives less: both are upper bounds of the same model);
- :func:`noise_for_epsilon`: the smallest noise multiplier of one release within an epsilon;
- :func:`largest_within`: the largest value of a parameter (FA-LD: the step size eta) such that
  the fixed releases and the one it sets stay within the target;
- :func:`combined_noise_multiplier`: the noise multiplier of a clipped gradient sum released
  together with the noisy count of unclipped records (Andrew et al. 2021, adaptive clipping).

The accountant's model is :mod:`fedlangevin.privacy.accountant`'s (substitution of one record,
fixed-size batches, client sampling mixed with an atom at loss 0, adaptive composition).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence


from fedlangevin._validation import check_int, check_real
from fedlangevin.privacy.budget import geometric_bisect
from fedlangevin.privacy.levels import Z_RANGE, NoiseOutOfRange, _check_delta, _Levels
from fedlangevin.privacy.pld import _epsilon_for_delta, _tight_pmf, _truncation
from fedlangevin.privacy.rdp import _rdp_curve, _rdp_to_epsilon

__all__ = ["Release", "combined_noise_multiplier", "compose_epsilon", "gradient_noise_multiplier",
           "largest_within", "noise_for_epsilon"]


@dataclass(frozen=True)
class Release:
    """One Gaussian mechanism a run repeats: ``rounds`` rounds (of each of ``copies`` chains), each
    of ``local_steps`` releases of noise multiplier ``noise_multiplier`` (noise std over the
    sensitivity) on a batch fraction ``batch_fraction`` (fixed-size batches without replacement;
    1: every record), a client taking part in a round with probability ``inclusion``.
    ``name`` says what it is ("start", "sampling", ...)."""

    name: str
    noise_multiplier: float
    rounds: int
    local_steps: int = 1
    batch_fraction: float = 1.0
    inclusion: float = 1.0
    copies: int = 1

    def __post_init__(self) -> None:
        z = check_real("noise_multiplier", self.noise_multiplier, low=Z_RANGE[0], high=Z_RANGE[1])
        object.__setattr__(self, "noise_multiplier", z)
        object.__setattr__(self, "rounds", check_int("rounds", self.rounds, 1))
        object.__setattr__(self, "local_steps", check_int("local_steps", self.local_steps, 1))
        object.__setattr__(self, "batch_fraction", check_real("batch_fraction", self.batch_fraction, low=0.0,
                                                              high=1.0, low_open=True))
        object.__setattr__(self, "inclusion", check_real("inclusion", self.inclusion, low=0.0, high=1.0,
                                                         low_open=True))
        object.__setattr__(self, "copies", check_int("copies", self.copies, 1))

    def levels(self) -> _Levels:
        """The accountant's form: every round of every copy at one noise multiplier."""
        return _Levels((self.noise_multiplier,), (self.rounds * self.copies,), self.batch_fraction,
                       self.local_steps, self.inclusion)

    def record(self) -> tuple:
        """Plain values (a run's settings carry them): (name, z, rounds, K, gamma, q, copies)."""
        return (self.name, self.noise_multiplier, self.rounds, self.local_steps, self.batch_fraction,
                self.inclusion, self.copies)

    @classmethod
    def from_record(cls, rec: Sequence) -> "Release":
        name, z, rounds, k, gamma, q, copies = rec
        return cls(str(name), float(z), int(rounds), int(k), float(gamma), float(q), int(copies))


def combined_noise_multiplier(gradient_noise: float, count_noise: float) -> float:
    """z of a clipped gradient sum of noise multiplier ``gradient_noise`` (noise std over its
    sensitivity 2C) released with the count of unclipped records plus N(0, ``count_noise``^2).

    Substituting one record moves the gradient sum by at most 2C and the count by at most 1 (its
    indicator ||g|| <= C flips), at the same time in the worst case; in units of each noise's
    std the joint vector moves by at most sqrt(z_g^-2 + sigma_b^-2): one Gaussian mechanism of
    noise multiplier (z_g^-2 + sigma_b^-2)^(-1/2). (Andrew et al. 2021, Thm 1, have
    (z^-2 + (2 sigma_b)^-2)^(-1/2) under addition / removal, where the count's sensitivity is
    1/2 after centring; under substitution it is 1.)"""
    zg = check_real("gradient_noise", gradient_noise, low=0.0, low_open=True)
    sb = check_real("count_noise", count_noise, low=0.0, low_open=True)
    return 1.0 / math.sqrt(zg ** -2 + sb ** -2)


def gradient_noise_multiplier(noise_multiplier: float, count_noise: float) -> float:
    """The gradient's z_g such that, released with the noisy count, the pair has noise multiplier
    ``noise_multiplier``: z_g = (z^-2 - sigma_b^-2)^(-1/2) (:func:`combined_noise_multiplier`'s
    inverse; Andrew et al.'s sigma_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) under substitution).
    ``count_noise`` must exceed z."""
    z = check_real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    sb = check_real("count_noise", count_noise, low=0.0, low_open=True)
    if sb <= z:
        raise ValueError(f"count_noise must exceed the noise multiplier {z:.4g} (the count alone would spend the "
                         f"whole release); got {sb:.4g}")
    return 1.0 / math.sqrt(z ** -2 - sb ** -2)


def _grid(levels: list[_Levels]) -> float | None:
    """One pessimistic grid step for every release: the coarsest of their automatic steps (a
    coarser pessimistic grid is still an upper bound), None when one of them has no grid."""
    from fedlangevin.privacy.accountant import _bounded_grid

    steps = [_bounded_grid(lv) for lv in levels]
    if any(d is None for d in steps):
        return None
    return max(steps)


def _dense(pmf):
    return pmf.to_dense_pmf() if hasattr(pmf, "to_dense_pmf") else pmf


def compose_epsilon(releases: Sequence, delta: float) -> float:
    """Epsilon at ``delta`` of every release composed (adaptive composition): the privacy-loss
    distribution's, or the RDP curves' where smaller (both upper bounds under the accountant's
    model). ``releases``: :class:`Release` records or the accountant's levels."""
    delta = _check_delta(delta)
    levels = [r.levels() if isinstance(r, Release) else r for r in releases]
    if not levels:
        raise ValueError("releases: give at least one release to account for")
    rdp = _rdp_to_epsilon(sum(_rdp_curve(lv) for lv in levels), delta)
    d = _grid(levels)
    if d is None:
        return rdp
    tail = min(_truncation(lv, delta) for lv in levels) / len(levels)
    total = None
    for lv in levels:
        pmf = _dense(_tight_pmf(lv, d, tail))
        total = pmf if total is None else _dense(total.compose(pmf, tail))
    return float(min(rdp, _epsilon_for_delta(total, delta)))


def noise_for_epsilon(epsilon: float, delta: float, make: Callable[[float], Release], rtol: float = 1e-3,
                      fixed: Sequence = ()) -> float:
    """The smallest noise multiplier z (to relative ``rtol``, rounded up) whose release ``make(z)``
    spends at most ``epsilon`` at ``delta``, alone or composed with the releases ``fixed``; a
    ValueError when even z = 1e4 spends more."""
    epsilon = check_real("epsilon", epsilon, low=0.0, low_open=True)
    fixed = list(fixed)
    ok = lambda z: compose_epsilon(fixed + [make(z)], delta) <= epsilon  # noqa: E731
    lo, hi = Z_RANGE
    if not ok(hi):
        raise ValueError(f"epsilon = {epsilon:g} at delta = {delta:g} is below what a release of noise multiplier "
                         f"{hi:g} spends; ask for a larger epsilon")
    if ok(lo):
        return lo
    return geometric_bisect(ok, lo, hi, rtol, largest=False)


def largest_within(epsilon: float, delta: float, fixed: Sequence[Release], make: Callable[[float], Release],
                   upper: float, rtol: float = 1e-3) -> tuple[float, float]:
    """(x, epsilon spent): the largest x in (0, ``upper``] (to relative ``rtol``, rounded down) such
    that ``fixed`` and ``make(x)`` composed spend at most ``epsilon`` at ``delta``; the release's
    privacy loss must grow with x (FA-LD's with its step size). ``upper`` itself when it fits. A
    ValueError, with the numbers, when the fixed releases alone exceed the budget or no x does."""
    epsilon = check_real("epsilon", epsilon, low=0.0, low_open=True)
    upper = check_real("upper", upper, low=0.0, low_open=True)
    fixed = list(fixed)

    def spent(x: float) -> float:
        try:
            rel = make(x)
        except NoiseOutOfRange as exc:
            return 0.0 if exc.side == "high" else math.inf
        except ValueError:  # a noise multiplier outside the accountant's range (Release checks it)
            return math.inf
        return compose_epsilon(fixed + [rel], delta)

    if fixed:
        base = compose_epsilon(fixed, delta)
        if base >= epsilon:
            raise ValueError(f"the releases before sampling ({', '.join(r.name for r in fixed)}) already spend "
                             f"epsilon = {base:.4g} of the {epsilon:g} asked for; give a larger epsilon or spend less "
                             "on them")
    top = spent(upper)
    if top <= epsilon:
        return upper, top
    hi, lo = upper, None
    x = upper
    while lo is None:
        x /= 4.0
        if x < upper * 1e-30:
            raise ValueError(f"no step size down to {x:.3g} keeps the run within epsilon = {epsilon:g} at delta = "
                             f"{delta:g}")
        e = spent(x)
        if e <= epsilon:
            lo, best = x, e
        else:
            hi = x
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        e = spent(mid)
        if e <= epsilon:
            lo, best = mid, e
        else:
            hi = mid
    return lo, best
