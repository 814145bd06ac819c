"""Where FA-HMC's gradient-noise correction (:mod:`fedlangevin.fahmc.gradient_noise`) meets the warm-up of
``step_size="auto"``: measured where the underdamped phase sets the friction, followed through that phase's
steps, and measured for good at its end, h kept where the refresh can hold the noise.

Why in the warm-up already: its underdamped phase reads its statistic off the noiseless round
(:mod:`fedlangevin.fahmc.warmup`, GHOST), so h no longer shrinks for the noise the correction takes out; the
chains it runs, and the covariance its window turns into M, should then be those of the corrected law, not
the wider one of an uncorrected round (eight_schools under scheme I: a window read at the wider law set M
two thirds larger and h 40 % smaller than with every client).

Each function returns what the sampler applies (``FAHMC._apply``): the correction (None: none), the floats
it uploaded (counted as set-up uploads) and h from the current step on (None: unchanged).
"""

from __future__ import annotations

from fedlangevin.fahmc import gradient_noise as hgn
from fedlangevin.fahmc import setting_noise as hnoise

__all__ = ["at_end", "during"]


def during(sampler, friction_set: bool) -> tuple:
    """A round of the warm-up's underdamped phase has set a new h (or, ``friction_set``, begun the phase or
    ended its window): V measured at the chains where the friction was set, B recomputed for the new h from
    the last V otherwise, and h capped at :func:`~fedlangevin.fahmc.gradient_noise.step_limit` (also the
    adapter's cap from then on: :attr:`~fedlangevin.fahmc.warmup.HMCAdapter.limit`)."""
    current = sampler.noise_correction
    if not sampler.gradient_noise or hgn.why_not(sampler) or (not friction_set and current is None):
        return current, 0.0, None
    h = float(sampler.schedule(sampler.state.step))
    if not friction_set:
        return hgn.remeasure(sampler, current), 0.0, None
    value, floats = hgn.measure(sampler, hnoise.measured_noise(sampler, hgn.dense(sampler.problem.dim)))
    lam = value.max_fraction / hgn.refresh_share(h, sampler.friction, sampler.temperature)
    sampler.adapter.limit = hgn.step_limit(lam, sampler.friction, sampler.temperature)
    if h <= sampler.adapter.limit:
        return value, floats, None
    sampler.adapter.step_size = sampler.adapter.limit
    sampler.schedule.set(sampler.state.step, sampler.adapter.limit)
    return hgn.remeasure(sampler, value), floats, sampler.adapter.limit


def at_end(sampler) -> tuple:
    """The warm-up has ended (h, gamma and M frozen): V measured at the chains' states, B for the frozen
    step; where the noise is more than the refresh holds, h lowered to
    :func:`~fedlangevin.fahmc.gradient_noise.feasible_step` and B recomputed there (None: no correction)."""
    if not sampler.gradient_noise or hgn.why_not(sampler):
        return None, 0.0, None
    noise = hnoise.measured_noise(sampler, hgn.dense(sampler.problem.dim))
    value, floats = hgn.measure(sampler, noise)
    if not value.floored:
        return value, floats, None
    h = hgn.feasible_step(float(sampler.schedule(sampler.state.step)), sampler.friction, sampler.temperature,
                          value.max_fraction)
    sampler.schedule.set(sampler.state.step, h)
    return hgn.remeasure(sampler, value), floats, h
