"""A fixed K's check against the posterior itself: Richardson's extrapolation of two K = 1 step sizes (issue 27).

The check of :mod:`~fedlangevin.fald.warmup.companions` compares the sampler's K local steps of eta
with K = 1 companion chains at one step of K eta, and so measures E_K - E_{K eta}: the local steps'
bias *plus* the difference of the companions' own discretisation from the sampler's. The
acceptance asks about E_K - E_pi (the posterior's). A K = 1 chain at step h samples a law whose
means are

    m(h) = m_pi + c h + O(h^2)                                   (ULA's first-order bias)

(Talay and Tubaro 1990; for a Gaussian c = 0: its means are exact at any step). Two companion
groups, one step of h_1 = K eta and two steps of h_2 = K eta / 2 per round, both coupled to the
sampler's round (:class:`~fedlangevin.fald.core.noise.NoiseTally`: the halves of its Brownian path),
give Richardson's extrapolation to h = 0,

    m_0 = 2 m(h_2) - m(h_1) = m_pi + O(h^2),

and the check tests (E_K - m_0) / sd, in the sds of the h_2 group (the nearer to the posterior's:
a step inflates a Gaussian's variance by 1 / (1 - h lambda / 2)). Assumptions: the first-order
expansion holds at h_1 (h_1 lambda_max(M H) <= 1, the companions' stability condition), and the
sampler's own error is what the run should be judged by, K = 1's discretisation at eta included (it
is part of what the acceptance measures). The sd ratio against the h_2 group is recorded, not
tested. Standard errors: a jackknife over the R triples (a sampler chain and its two companions,
which move together), as :func:`~fedlangevin.fald.warmup.local_bias.bias_final`'s over pairs.
"""

from __future__ import annotations

import torch

from fedlangevin.fald.warmup.local_bias import BiasEstimate, BiasState, _jackknife, _moments

__all__ = ["extrapolated"]


def extrapolated(state: BiasState) -> BiasEstimate:
    """The sampler's mean error against the extrapolated K = 1 law at step 0, from ``state``'s three
    classes of sums (R, d) each: the sampler's chains (K), the one-step group (h_1), the two-step
    group (h_2 = h_1 / 2). A ValueError names ``state`` where a class kept nothing or a coordinate of
    the h_2 group does not move."""
    if len(state.counts) != 3 or min(state.counts) < 1:
        raise ValueError(f"state: the sampler's chains and two companion groups with kept rounds are needed; "
                         f"got kept rounds {tuple(state.counts)}")
    (mean_k, var_k), (mean_1, _), (mean_2, var_2) = (
        _moments(state.sums[i], state.squares[i], state.counts[i]) for i in range(3))
    if not bool((var_2 > 0).all()):
        raise ValueError("state: a coordinate does not move in the companions' rounds (zero spread); no error in "
                         "sd units")
    sd = var_2.sqrt()
    shift, shift_se = _jackknife((mean_k - (2.0 * mean_2 - mean_1)) / sd)
    ratio, ratio_se = _jackknife(var_k.clamp(min=0.0).sqrt() / sd)
    k = state.plan.candidates[0]
    return BiasEstimate(k, tuple(shift.tolist()), tuple(shift_se.tolist()), tuple(ratio.tolist()),
                        tuple(ratio_se.tolist()), int(state.sums.shape[1]), (state.counts[1], state.counts[0]),
                        state.round)
