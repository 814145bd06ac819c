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

When (``gradient_noise="auto"``, FA-HMC's default): at the end of ``step_size="auto"``'s warm-up, where
the chains are near the target and h, gamma and M are frozen, when the run has random participation or
minibatches, K = 1 (fixed), one process and no privacy. V is measured once there, at the chains' states
(every client's full gradient per chain, and up to ``ROWS`` per-example gradients per client for up to
``MB_CHAINS`` chains, at most ``PER_EXAMPLE_BYTES`` of them: :mod:`fedlangevin.warmup.setting_noise`), and B is
kept for the rest of the sampler's life.
The clients' gradients (N R d floats) and, with minibatches, each client's noise covariance (d (d + 1) / 2
floats, d above the dense limit) are counted as set-up uploads.

Where the noise is larger than the refresh can give up (c lambda_max(A^T V A) > MAX_FRACTION), B^2 is
floored at 1 - ``MAX_FRACTION``: the part not taken out stays, and the end-of-run check
(:mod:`fedlangevin.fahmc.setting_noise`), which subtracts what was taken out, warns with the numbers.
Why a floor: V is an estimate, and taking out more than it holds would narrow the posterior instead.

Measured (``docs/realistic.md``): FA-HMC on mesquite under schemes I and II (5 of 10 clients), control
variates alone leave sds up to 1.16 and 1.10; with this correction 0.97-1.02 and 1.00-1.05 (16 chains x
1,000 rounds), at the same ESS per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from fedlangevin.federation.participation import Full
from fedlangevin.warmup.adaptation import DENSE_MAX_DIM
from fedlangevin.warmup.setting_noise import preconditioner_diagonal

__all__ = ["MAX_FRACTION", "GradientNoise", "check_choice", "dense", "kick_weight", "measure", "record",
           "refresh_share", "restore", "why_not"]

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
                         top > MAX_FRACTION), floats_up


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
                                       "max_fraction": value.max_fraction, "floored": value.floored}


def restore(stored: dict | None) -> GradientNoise | None:
    """The correction from a checkpoint's entry."""
    if stored is None:
        return None
    return GradientNoise(torch.as_tensor(stored["factor"], dtype=torch.float64),
                         torch.as_tensor(stored["removed"], dtype=torch.float64), float(stored["max_fraction"]),
                         bool(stored["floored"]))
