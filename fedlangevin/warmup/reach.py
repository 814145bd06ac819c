"""How far one K = 1 round could move: the step K = 1's acceptance rule takes at the chains' iterates (issue 27).

A fixed K > 1 with ``step_size="auto"`` sets eta by the curvature rule on every *client's* energy
(local steps must be stable on each, and no acceptance statistic measures a round of K local
steps: :mod:`~fedlangevin.warmup.acceptance`). Where the clients are much stiffer than the
whole posterior, that eta can be so far below the step K = 1's acceptance rule takes that a
round of K local steps moves K eta of Langevin time, less than one K = 1 round: K > 1 then costs
rounds instead of saving them, and a run of the usual length has not mixed (eight schools, K = 10:
K eta = 0.0145 against K = 1's eta = 0.0702, bulk ESS 100 against 748, sds 19 % short;
docs/validation.md). No comparison of laws sees that (the companions share the sampler's
under-exploration), so the check of a fixed K also compares the time per round.

:func:`one_step_eta` is the eta at which the chains' mean MALA acceptance of **one K = 1 Langevin
step** from their iterates (the statistic of :mod:`~fedlangevin.warmup.acceptance`, the
same target) falls to the target, found by bisection in log eta with the proposal's normals fixed
(common random numbers make the mean acceptance a smooth function of eta, so the bisection
converges to a crossing). It reads the clients' energies and gradients at the iterates and at the
proposals (d + 1 floats per client and chain per evaluation, counted by the caller), as the
acceptance rule does in warm-up; a problem without an energy gives None.
"""

from __future__ import annotations

import math

import torch

from fedlangevin.federation.preconditioning import is_identity, placed
from fedlangevin.warmup.acceptance import energy_and_gradient, energy_function, log_acceptance, mean_acceptance

__all__ = ["CEILING", "HALVINGS", "one_step_eta"]

#: bisection steps in log eta (the bracket's ratio shrinks by 2 each: 2^-24 of its log width)
HALVINGS = 24
#: the check of a fixed K searches eta in [K eta, CEILING K eta]
CEILING = 100.0


def one_step_eta(problem, theta: torch.Tensor, preconditioner, target: float, temperature: float, seed: int,
                 low: float, high: float) -> tuple[float | None, int]:
    """(eta, evaluations): the largest eta in [``low``, ``high``] found by bisection in log eta where
    the chains' mean MALA acceptance of one Langevin step theta -> theta - eta M grad U + sqrt(2 eta tau)
    M^(1/2) xi from ``theta`` (R, d), the normals xi drawn once from ``seed``, is at least ``target``
    (``high`` where it is there; 0.0 where not even ``low`` is accepted; None without an energy), and
    the number of (U, grad U) evaluations made (each d + 1 floats per client and chain)."""
    x = theta.detach().to(dtype=torch.float64)
    work = problem.to(device=x.device, dtype=torch.float64)
    energy = energy_function(work)
    if energy is None:
        return None, 0
    pre = None if is_identity(preconditioner) else placed(preconditioner, x.device, torch.float64)
    gen = torch.Generator(device=x.device).manual_seed(int(seed))
    xi = torch.randn(x.shape, generator=gen, dtype=torch.float64, device=x.device)
    noise = xi if pre is None else pre.noise(xi)
    u, g = energy_and_gradient(work, energy, x)
    drift = g if pre is None else pre.drift(g)

    def accepted(eta: float) -> bool:
        y = x - eta * drift + math.sqrt(2.0 * eta * temperature) * noise
        u_new, g_new = energy_and_gradient(work, energy, y)
        return mean_acceptance(log_acceptance(x, y, u, u_new, g, g_new, eta, pre, temperature)) >= target

    evaluations = 1
    if accepted(high):
        return float(high), evaluations + 1
    evaluations += 1
    if not accepted(low):
        return 0.0, evaluations + 1
    evaluations += 1
    best, lo, hi = float(low), math.log(low), math.log(high)
    for _ in range(HALVINGS):
        mid = 0.5 * (lo + hi)
        if accepted(math.exp(mid)):
            best, lo = math.exp(mid), mid
        else:
            hi = mid
        evaluations += 1
    return best, evaluations
