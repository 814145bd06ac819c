"""Where FA-HMC's gradient-noise correction (:mod:`fedlangevin.fahmc.gradient_noise`) meets the warm-up of
``step_size="auto"``: measured where the underdamped phase sets the friction, followed through that phase's
steps and averaged over them, h kept where the refresh can hold the noise.

Why in the warm-up already: its underdamped phase reads its statistic off the noiseless round
(:mod:`fedlangevin.fahmc.warmup`, GHOST), so h no longer shrinks for the noise the correction takes out; the
chains it runs, and the covariance its window turns into M, should then be those of the corrected law, not
the wider one of an uncorrected round.

Why an average: V at the chains' states is a heavy-tailed estimate where the noise grows away from the
bulk (a funnel, a GP, a few records with large gradients): on eight_schools under scheme I and diamonds'
centred minibatches, single measurements 300 and 200 rounds apart differed 13-fold and 2-fold, and the
correction of the larger one narrowed an sd to 0.76 and 0.87 of the posterior's. So from each friction set
on (the phase's start, its window's end: the chains' law, and with it V, may have changed there) V is
measured every :data:`EVERY` rounds and at the warm-up's end and averaged; B and the step limit follow
the average.

Where: at d <= ``DENSE_MAX_DIM`` (dense V), where it was measured on the posteriordb set. Above, the earlier
rule stays (the statistic counts the noise, V measured once at the warm-up's end, B floored where it is too
large): on the full MNIST (d = 7,850, minibatches of 200 of a client's 6,000 records, control variates) the
step limit held h at 0.0071 against the noiseless 0.109, the minibatch noise being about 12 times what the
refresh can give up there, and chains from zero did not reach the posterior in 400 rounds (accuracy 0.917,
ECE 0.032, R-hat of the test log predictive 1.79, against 0.9235, 0.0153 and 1.43 with the earlier rule;
``docs/gradient-noise.md``).

:func:`during` and :func:`at_end` return the correction (None: none) and the floats its measurement uploaded
(``FAHMC._apply`` keeps the one and counts the other as set-up uploads); where h must come down to the
step limit they set it themselves, on the sampler's schedule from the current step on (and on the
adapter, whose dual averaging it then bounds).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from fedlangevin.fahmc import gradient_noise as hgn
from fedlangevin.fahmc import setting_noise as hnoise

__all__ = ["EVERY", "at_end", "during", "in_warmup"]


#: rounds between two measurements of V in the warm-up's underdamped phase (module docstring)
EVERY = 10


def in_warmup(sampler) -> bool:
    """Whether the correction runs in the warm-up's underdamped phase, with the noiseless statistic and the
    step limit: where it runs at all (:func:`_runs`) and V is dense (d <= ``DENSE_MAX_DIM``; module
    docstring: above, the earlier rule). The warm-up keeps the answer (``HMCAdapter.ghost``)."""
    return _runs(sampler) and hgn.dense(sampler.problem.dim)


def _runs(sampler) -> bool:
    """Whether the correction runs for ``sampler`` (:func:`~fedlangevin.fahmc.gradient_noise.why_not`)."""
    return bool(sampler.gradient_noise) and not hgn.why_not(sampler)


def during(sampler, friction_set: bool) -> tuple:
    """A round of the warm-up's underdamped phase has set a new h (or, ``friction_set``, begun the phase or
    ended its window): V measured afresh where the friction was set, and added to the average every
    :data:`EVERY` rounds; B recomputed for the new h; h capped at
    :func:`~fedlangevin.fahmc.gradient_noise.step_limit` (also the adapter's cap from then on:
    :attr:`~fedlangevin.fahmc.warmup.HMCAdapter.limit`)."""
    current = sampler.noise_correction
    if not sampler.adapter.ghost or (not friction_set and current is None):
        return current, 0.0
    if not friction_set and sampler.adapter.done % EVERY:
        return hgn.remeasure(sampler, current), 0.0
    value, floats = _measured(sampler, None if friction_set else current)
    h = float(sampler.schedule(sampler.state.step))
    lam = value.max_fraction / hgn.refresh_share(h, sampler.friction, sampler.temperature)
    sampler.adapter.limit = hgn.step_limit(lam, sampler.friction, sampler.temperature)
    if h <= sampler.adapter.limit:
        return value, floats
    sampler.adapter.step_size = sampler.adapter.limit
    sampler.schedule.set(sampler.state.step, sampler.adapter.limit)
    return hgn.remeasure(sampler, value), floats


def at_end(sampler) -> tuple:
    """The warm-up has ended (h, gamma and M frozen): V measured at the chains' states and added to the
    phase's average, B for the frozen step; where the noise is more than the refresh holds, h lowered to
    :func:`~fedlangevin.fahmc.gradient_noise.feasible_step` and B recomputed there (None: no correction)."""
    if not _runs(sampler):
        return None, 0.0
    value, floats = _measured(sampler, sampler.noise_correction)
    if not value.floored or not hgn.dense(sampler.problem.dim):
        return value, floats
    h = hgn.feasible_step(float(sampler.schedule(sampler.state.step)), sampler.friction, sampler.temperature,
                          value.max_fraction)
    sampler.schedule.set(sampler.state.step, h)
    return hgn.remeasure(sampler, value), floats


def _measured(sampler, pool) -> tuple:
    """V measured at the chains' states, averaged with ``pool``'s (None: alone), as the correction for the
    current h, gamma and M, and the floats the measurement uploaded."""
    part, mb = hnoise.measured_noise(sampler, hgn.dense(sampler.problem.dim))
    v, count = (part + mb).to(torch.float64), 1
    if pool is not None and pool.noise is not None:
        v, count = (pool.noise * pool.count + v) / (pool.count + 1), pool.count + 1
    value, floats = hgn.measure(sampler, (torch.zeros_like(v), v))
    return replace(value, count=count), floats
