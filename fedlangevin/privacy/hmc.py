"""FA-HMC's mechanism as the accountants see it: each local step is FA-LD's Gaussian mechanism at an
equivalent step size (``docs/fahmc.md``, "Private FA-HMC", eqs. P1-P3).

A private FA-HMC run (``FAHMC(..., privacy=..., splitting="OBABO")``) takes, on client c, the local
step B(h/2) O B(h/2) A(h) of :mod:`fedlangevin.fahmc.kernel` on the clipped gradient
G = clip(data term) + grad U_0 (:class:`fedlangevin.problems.clipped.Clipped`), M = I here
(a preconditioner scales the sensitivity as for FA-LD):

    u' = a u - (1 + a) (h / 2) G(x) + sqrt(tau (1 - a^2)) (rho xi + sqrt((1 - rho^2) / q_c) xi^c),
    x' = x + h u',                                                    a = exp(-gamma h).     (P1)

Given the step's input (x, u) (released, conservatively, as FA-LD's accountant releases every local
iterate), x' is a bijective, data-free function of u', so the step releases u' alone. Between
neighbours only the clipped data term changes, by a vector D of norm at most Delta_eff (FA-LD's:
Delta_l / (gamma_b p_c) at record level with batch fraction gamma_b, 2C at client level), so u'
is a Gaussian mechanism whose mean moves by (1 + a)(h / 2) D against the private noise
sqrt(tau (1 - a^2) (1 - rho^2) / q_c) per coordinate:

    z = sqrt(tau (1 - a^2) (1 - rho^2) / q_c) / ((1 + a) (h / 2) Delta_eff).                 (P2)

FA-LD's step of size eta is the same mechanism with mean shift eta D and noise
sqrt(2 eta tau (1 - rho^2) / q_c): z_LD = sqrt(2 tau (1 - rho^2) / (q_c eta)) / Delta_eff. The two
agree when

    eta_eq(h, gamma) = h^2 (1 + a) / (2 (1 - a)) = h^2 / (2 tanh(gamma h / 2)),               (P3)

so a private FA-HMC run is accounted by FA-LD's accountant (record or client level, subsampling,
client sampling, composition over every local step and chain) with every local step's eta replaced
by eta_eq (:func:`equivalent_step_size`). eta_eq increases with h (its derivative is
h (sinh(gamma h) - gamma h) / sinh^2(gamma h / 2) / 2 > 0), so the largest h gives the largest eta_eq
(what the accountant's bound on earlier rounds uses). Infinite friction (a = 0) gives h^2 / 2, FA-LD's
own step (the kernel's OBABO limit); small friction, eta_eq ~ h / gamma: little momentum noise per
step, little privacy.

BAOAB is not private under this threat model: its upload (x', u') gives
x' - (h / 2) u' = x + (h / 2)(u - h G(x)) without noise, the clipped gradient itself, so
private runs need ``splitting="OBABO"``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedlangevin._validation import check_real

__all__ = ["equivalent_step_size"]


def equivalent_step_size(step_size: Any, friction: float) -> Any:
    """eta_eq = h^2 / (2 tanh(gamma h / 2)) (eq. P3): the FA-LD step size whose Gaussian mechanism is
    one OBABO step of FA-HMC at step size h and friction gamma. ``step_size``: h > 0, a number or an
    array (every entry > 0, finite); ``friction``: gamma > 0 (finite). Returns a float or an array."""
    gamma = check_real("friction", friction, low=0.0, low_open=True)
    if np.ndim(step_size) == 0:
        h = check_real("step_size", step_size, low=0.0, low_open=True)
        return h * h / (2.0 * math.tanh(0.5 * gamma * h))
    h = np.asarray(step_size, dtype=np.float64)
    if not np.all(np.isfinite(h)) or np.any(h <= 0):
        raise ValueError("step_size must be finite and > 0 at every step")
    return h * h / (2.0 * np.tanh(0.5 * gamma * h))
