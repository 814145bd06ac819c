"""A fixed K's check against the posterior itself: Richardson's extrapolation of two K = 1 step sizes (issue 27).

The check of :mod:`~fedlangevin.warmup.companions` compares the sampler's K local steps of eta
with K = 1 companion chains at one step of K eta, and so measures E_K - E_{K eta}: the local steps'
bias *plus* the difference of the companions' own discretisation from the sampler's. The
acceptance asks about E_K - E_pi (the posterior's). A K = 1 chain at step h samples a law whose
means are

    m(h) = m_pi + c h + O(h^2)                                   (ULA's first-order bias)

(Talay and Tubaro 1990; for a Gaussian c = 0: its means are exact at any step). Two companion
groups, one step of h_1 = K eta and two steps of h_2 = K eta / 2 per round, both coupled to the
sampler's round (:class:`~fedlangevin.federation.noise.NoiseTally`: the halves of its Brownian path),
give Richardson's extrapolation to h = 0,

    m_0 = 2 m(h_2) - m(h_1) = m_pi + O(h^2),

and the check tests (E_K - m_0) / sd, in the sds extrapolated alike (2 v(h_2) - v(h_1): a step
inflates a Gaussian's variance by 1 / (1 - h lambda / 2) = 1 + h lambda / 2 + O(h^2)).
``local_steps="auto"`` extrapolates its candidates' twins to K = 1 at its eta_1 instead
(``toward`` = 1 / K): the issue's bias is against K = 1, whose own step is not the candidate's
to answer for. Assumptions: the first-order expansion holds at h_1 (h_1 lambda_max(M H) <= 1,
the companions' stability condition), and the sampler's own error is what a fixed K should be
judged by, K = 1's discretisation at eta included (it is part of what the acceptance measures).
A fixed K's check tests the means only (the sd ratio is recorded); "auto" tests both. Standard
errors: a jackknife over the R triples (a chain and its two coupled companions, which move
together), as :func:`~fedlangevin.warmup.local_bias.bias_final`'s over pairs.
"""

from __future__ import annotations

from fedlangevin.warmup.local_bias import BiasEstimate, BiasState, chain_moments, jackknife

__all__ = ["extrapolated"]


def extrapolated(state: BiasState, toward: float = 0.0) -> BiasEstimate:
    """The target's mean error and sd ratio against K = 1 extrapolated to the step ``toward`` h_1,
    from ``state``'s three classes of sums (R, d) each: the target (the sampler's chains, or an
    "auto" candidate), the one-step group (h_1) and the two-step group (h_2 = h_1 / 2).

    m(toward h_1) = (1 + a) m(h_2) - a m(h_1) with a = 1 - 2 toward (``toward`` = 0: Richardson's
    2 m(h_2) - m(h_1), the posterior's; 1 / K: K = 1 at eta, the law "auto" compares with), and the
    variances alike; the mean error is in the extrapolated sds, the sd ratio against them. A
    ValueError names ``state`` where a class kept nothing or an extrapolated variance is not
    positive."""
    if len(state.counts) != 3 or min(state.counts) < 1:
        raise ValueError(f"state: the target's chains and two companion groups with kept rounds are needed; "
                         f"got kept rounds {tuple(state.counts)}")
    (mean_k, var_k), (mean_1, var_1), (mean_2, var_2) = (
        chain_moments(state.sums[i], state.squares[i], state.counts[i]) for i in range(3))
    a = 1.0 - 2.0 * float(toward)
    var = (1.0 + a) * var_2 - a * var_1
    if not bool((var > 0).all()):
        raise ValueError("state: an extrapolated variance of the companions is not positive (a coordinate that does "
                         "not move, or steps beyond the expansion); no error in sd units")
    sd = var.sqrt()
    shift, shift_se = jackknife((mean_k - ((1.0 + a) * mean_2 - a * mean_1)) / sd)
    ratio, ratio_se = jackknife(var_k.clamp(min=0.0).sqrt() / sd)
    k = state.plan.candidates[0]
    return BiasEstimate(k, tuple(shift.tolist()), tuple(shift_se.tolist()), tuple(ratio.tolist()),
                        tuple(ratio_se.tolist()), int(state.sums.shape[1]), (state.counts[1], state.counts[0]),
                        state.round)
