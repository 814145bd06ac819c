"""FA-HMC's gradient-noise correction: the refresh injects less noise by what the noisy force adds.

SGHMC's B-hat (Chen, Fox and Guestrin 2014, "Stochastic Gradient Hamiltonian Monte Carlo", Sec. 3.2,
the friction term C - B-hat) for FA-HMC's round. Under random participation or minibatch gradients the
averaged force of a round is grad f plus a noise eps of covariance V = V_part + V_mb
(:func:`fedlangevin.warmup.setting_noise.drift_noise`, with the run's control variates applied: they leave
the part of the noise that grows away from their reference). At K = 1 a local step (BAOAB, the kernel's
``B(h) A(h/2) O A(h/2)``) kicks once with it, so per step

    kick noise   reaches (theta, v) as  (-(h^2 (1 + a) / 2) M eps,  -a h M eps),
    refresh noise                  as  ((h / 2) A xi,                 A xi),     Cov(A xi) = tau (1 - a^2) M,

a = exp(-gamma h). The kick's noise widens the stationary law like a refresh noise of covariance
k(a) h^2 M V M with k(a) = ((1 + a) / 2)^2 (the two rows' geometric middle; exact to O(h^2) on a
Gaussian: against the kernel's exact discrete law the corrected sd ratios are 1.000-1.005 at h = 0.1,
1.002-1.004 at h = 0.2, 1.007-1.021 at h = 0.3; ``tests/fahmc/test_gradient_noise.py``). So the refresh
draws A B xi instead of A xi, with

    B^2 = I - c A^T V A,    c = k(a) h^2 / (tau (1 - a^2)),                                      (1)

and the sum of the two noises is the refresh's own: the long-run law is the full-gradient sampler's.
Above the dense limit (d > ``DENSE_MAX_DIM``) V and M are taken diagonal and B is the vector
sqrt(1 - c m_j V_jj): O(d).

When (``gradient_noise="auto"``, FA-HMC's default): when the run has random participation or minibatches,
K = 1 (fixed), one process and no privacy, from the underdamped phase of ``step_size="auto"``'s warm-up on
(at d <= ``DENSE_MAX_DIM``: :mod:`fedlangevin.fahmc.warmup_noise`, V measured where that phase sets the
friction, B recomputed for each new h by :func:`remeasure`, h held at :func:`step_limit`; the warm-up's
statistic then reads the noiseless round, :mod:`fedlangevin.fahmc.warmup`'s GHOST), and at the warm-up's
end, where the chains are near the target and h, gamma and M freeze: V measured there at the chains'
states (every client's full gradient per chain, and up to ``ROWS`` per-example gradients per client for up
to ``MB_CHAINS`` chains, at most ``PER_EXAMPLE_BYTES`` of them: :mod:`fedlangevin.warmup.setting_noise`),
averaged with the phase's, gives the B kept for the rest of the sampler's life. Each measurement's
clients' gradients (N R d floats) and, with minibatches, each client's noise covariance (d (d + 1) / 2
floats, d above the dense limit) are counted as set-up uploads.

Where the noise is larger than the refresh can give up (c lambda_max(A^T V A) > MAX_FRACTION), B^2 would
be floored at 1 - ``MAX_FRACTION`` and the part not taken out would stay; so at d <= ``DENSE_MAX_DIM`` the
sampler lowers h instead, to :func:`feasible_step` (c falls with h), at the warm-up's end: the right law at
fewer effective draws per round. Above, B^2 is floored (:mod:`fedlangevin.fahmc.warmup_noise` says why).
Why a floor at all: V is an estimate, and taking out more than it holds would narrow the posterior instead.
The end-of-run check (:mod:`fedlangevin.fahmc.setting_noise`) subtracts what was taken out and warns with
what is left.

Measured (``docs/realistic.md``, ``docs/gradient-noise.md``): FA-HMC on mesquite under schemes I and II (5 of
10 clients), control variates alone leave sds up to 1.16 and 1.10; with this correction 0.97-1.02 and
1.00-1.05 (16 chains x 1,000 rounds), at the same ESS per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from fedlangevin.federation.participation import Full
from fedlangevin.warmup.adaptation import DENSE_MAX_DIM
from fedlangevin.warmup.setting_noise import preconditioner_diagonal

__all__ = ["MAX_FRACTION", "GradientNoise", "check_choice", "dense", "feasible_step", "kick_weight", "measure",
           "record", "refresh_share", "remeasure", "restore", "step_limit", "why_not"]

#: the largest share of the refresh's variance the correction takes out, per direction (module docstring)
MAX_FRACTION = 0.8
@dataclass(frozen=True)
class GradientNoise:
    """The correction in use: ``factor`` B ((d, d), or (d,) above the dense limit), ``removed`` the noise
    covariance it takes out in V's units (what the end-of-run check subtracts), ``max_fraction`` c
    lambda_max(A^T V A) of (1) before the floor, ``floored`` whether the floor bound it."""

    factor: torch.Tensor
    removed: torch.Tensor
    max_fraction: float
    floored: bool
    noise: torch.Tensor | None = None  #: the measured V = V_part + V_mb it was computed from (:func:`remeasure`)
    count: int = 1  #: the measurements ``noise`` averages (:mod:`fedlangevin.fahmc.warmup_noise`)


def check_choice(value: Any) -> bool:
    """``gradient_noise``: "auto" (True) or None (False); ``ValueError`` naming it otherwise."""
    if value is None:
        return False
    if isinstance(value, str) and value == "auto":
        return True
    raise ValueError(f"gradient_noise must be 'auto' (take the measured gradient noise out of the refresh, "
                     f"fedlangevin.fahmc.gradient_noise) or None; got {value!r}")


def kick_weight(h: float, friction: float) -> float:
    """k(a) = ((1 + a) / 2)^2, a = exp(-gamma h): the kick noise's weight as refresh noise (module docstring)."""
    return (0.5 * (1.0 + math.exp(-friction * h))) ** 2


def refresh_share(h: float, friction: float, temperature: float) -> float:
    """c of (1): k(a) h^2 / (tau (1 - a^2)), the share of the refresh's covariance that the force's
    noise V (times M) takes per unit of V."""
    return kick_weight(h, friction) * h * h / (temperature * -math.expm1(-2.0 * friction * h))


def feasible_step(h: float, friction: float, temperature: float, max_fraction: float) -> float:
    """The largest h' <= h at which the noise measured at h fits the refresh: c(h') lambda <= MAX_FRACTION,
    lambda = max_fraction / c(h) the largest eigenvalue of A^T V A (V does not depend on h; c of (1) grows
    with h, so bisection); h itself where it fits already."""
    if max_fraction <= MAX_FRACTION:
        return h
    return step_limit(max_fraction / refresh_share(h, friction, temperature), friction, temperature, h)


def step_limit(lam: float, friction: float, temperature: float, upper: float = math.inf) -> float:
    """The h (at most ``upper``) at which c(h) lam = MAX_FRACTION: the largest step whose refresh holds a
    force noise whose A^T V A has largest eigenvalue ``lam`` (inf where lam <= 0)."""
    if not lam > 0:
        return upper
    high = 1.0
    while lam * refresh_share(high, friction, temperature) <= MAX_FRACTION and high < upper:
        high *= 2.0
    high = min(high, upper)
    if lam * refresh_share(high, friction, temperature) <= MAX_FRACTION:
        return high
    low = 0.0
    for _ in range(60):  # c is continuous and increasing: 60 halvings reach float precision
        mid = 0.5 * (low + high)
        if lam * refresh_share(mid, friction, temperature) <= MAX_FRACTION:
            low = mid
        else:
            high = mid
    return low


def why_not(sampler) -> str:
    """Why the correction is not measured for ``sampler`` now ("" where it is: module docstring)."""
    if isinstance(sampler.participation, Full) and sampler.batch_size is None:
        return "full participation with full-batch gradients has no gradient noise"
    if sampler.privacy is not None:
        return "a private run reads no noiseless gradient"
    if sampler.transport is not None:
        return "a transport's clients are not all in this process"
    if sampler.auto_local_steps is not None or sampler.local_steps != 1:
        return "K = 1 only (with K > 1 the local trajectories move the kicks apart)"
    if sampler.batch_size is not None and sampler.problem._privacy_refusal("record") is not None:
        return "the minibatch noise needs the problem's per-example gradients (_per_example_grads)"
    return ""


def measure(sampler, noise: tuple[torch.Tensor, torch.Tensor]) -> tuple[GradientNoise, float]:
    """The correction (1) for ``sampler``'s frozen h, gamma, tau and M from the measured ``noise`` =
    (V_part, V_mb) ((d, d) at d <= ``DENSE_MAX_DIM``, else diagonals), and the set-up floats it uploads."""
    d, n, r = sampler.problem.dim, sampler.problem.num_clients, sampler.state.theta.shape[0]
    v = (noise[0] + noise[1]).to(torch.float64)
    h = float(sampler.schedule(sampler.state.step))
    gamma, tau = float(sampler.friction), float(sampler.temperature)
    c = refresh_share(h, gamma, tau)
    if v.dim() == 1:
        m = torch.as_tensor(preconditioner_diagonal(sampler.preconditioner, d), dtype=torch.float64)
        share = c * m * v.clamp(min=0.0)
        kept = (1.0 - share).clamp(min=1.0 - MAX_FRACTION)
        removed = (1.0 - kept) / (c * m)
        factor, top = kept.sqrt(), float(share.max())
    else:
        a = _noise_root(sampler.preconditioner, d)
        inner = c * (a.T @ v @ a)
        lam, q = torch.linalg.eigh(0.5 * (inner + inner.T))
        kept = (1.0 - lam.clamp(min=0.0)).clamp(min=1.0 - MAX_FRACTION)
        factor = (q * kept.sqrt()) @ q.T
        a_inv = torch.linalg.inv(a)
        removed = a_inv.T @ ((q * (1.0 - kept)) @ q.T) @ a_inv / c
        top = float(lam.max())
    per_client = (d * (d + 1) / 2 if v.dim() == 2 else d) if sampler.batch_size is not None else 0.0
    floats_up = float(n * r * d + n * per_client)
    return GradientNoise(factor, 0.5 * (removed + removed.T) if removed.dim() == 2 else removed, top,
                         top > MAX_FRACTION, v), floats_up


def remeasure(sampler, value: GradientNoise) -> GradientNoise:
    """``value``'s correction for ``sampler``'s current h, gamma and M, from the noise it was measured with
    (no new measurement: nothing is uploaded)."""
    return replace(measure(sampler, (torch.zeros_like(value.noise), value.noise))[0], count=value.count)


def _noise_root(preconditioner, d: int) -> torch.Tensor:
    """A (d, d) float64 with A xi the preconditioner's noise map (M = A A^T; I without one)."""
    if preconditioner is None:
        return torch.eye(d, dtype=torch.float64)
    factor = getattr(preconditioner, "factor", None)
    if factor is not None:  # the built-in preconditioners' A
        return torch.as_tensor(factor).to(device="cpu", dtype=torch.float64)
    return preconditioner.noise(torch.eye(d, dtype=torch.float64)).to(device="cpu", dtype=torch.float64).T


def dense(d: int) -> bool:
    """V is measured dense at d <= ``DENSE_MAX_DIM``, as its diagonal above."""
    return d <= DENSE_MAX_DIM


def record(value: GradientNoise | None) -> dict | None:
    """The checkpoint's entry (None: no correction in use)."""
    return None if value is None else {"factor": value.factor, "removed": value.removed,
                                       "max_fraction": value.max_fraction, "floored": value.floored,
                                       "noise": value.noise, "count": value.count}


def restore(stored: dict | None) -> GradientNoise | None:
    """The correction from a checkpoint's entry."""
    if stored is None:
        return None
    return GradientNoise(torch.as_tensor(stored["factor"], dtype=torch.float64),
                         torch.as_tensor(stored["removed"], dtype=torch.float64), float(stored["max_fraction"]),
                         bool(stored["floored"]),
                         None if stored.get("noise") is None else torch.as_tensor(stored["noise"], dtype=torch.float64),
                         int(stored.get("count", 1)))
