"""The FA-LD mechanism as the accountants see it: the noise multiplier of one local step and the
rounds grouped by it (the model is listed in :mod:`fedlangevin.privacy.accountant`'s docstring).

One local step of client c is a subsampled Gaussian mechanism of noise multiplier
z = (gamma / Delta_l) sqrt(2 p_c tau (1 - rho^2) / eta) (the worst client has p_c = p_min);
the run is T/K rounds of K such steps. With varying step sizes the rounds are grouped by their
step size rounded to a geometric grid (:func:`_levels`), and the checks keep at most
``_MAX_LEVELS_CHECKS`` groups (:func:`_coarsen`), rounded so that bounds stay bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlangevin._validation import check_real
from fedlangevin.privacy.paper import _check_common, inclusion_probability

__all__ = ["NoiseOutOfRange", "Z_RANGE", "noise_multiplier"]

_MAX_LEVELS_CHECKS = 12  # step-size levels kept by the RDP cross-check and the lower bound
#: noise multipliers z the accountants accept: below, epsilon exceeds ~1e7 (no privacy worth
#: counting, and the loss grid cannot be built); above, epsilon is below ~1e-7
Z_RANGE = (1e-4, 1e4)


class NoiseOutOfRange(ValueError):
    """The settings give a noise multiplier z outside :data:`Z_RANGE` (``side``: "low" or "high")."""

    def __init__(self, message: str, side: str) -> None:
        super().__init__(message)
        self.side = side


def noise_multiplier(*, eta: float, tau: float = 1.0, rho: float = 0.0, gamma: float, sensitivity: float,
                     p_min: float) -> float:
    """z = (gamma / Delta_l) sqrt(2 p_min tau (1 - rho^2) / eta): private noise std over a step's sensitivity."""
    eta = check_real("eta", eta, low=0.0, low_open=True)
    tau, rho, gamma, sensitivity, p_min, *_ = _check_common(tau, rho, gamma, sensitivity, p_min, 1, 1, 1, 1, "II")
    return gamma / sensitivity * math.sqrt(2.0 * p_min * tau * (1.0 - rho * rho) / eta)


@dataclass(frozen=True)
class _Levels:
    """Rounds grouped by noise multiplier: rounds[i] rounds with every step at z[i]."""

    z: tuple[float, ...]
    rounds: tuple[int, ...]
    gamma: float
    local_steps: int
    q: float

    def scaled(self, factor: int) -> "_Levels":
        return _Levels(self.z, tuple(r * factor for r in self.rounds), self.gamma, self.local_steps, self.q)


def _step_sizes(eta: Any, iterations: int) -> np.ndarray:
    if np.ndim(eta) == 0:
        return np.full(1, check_real("eta", eta, low=0.0, low_open=True))
    arr = np.asarray(eta, dtype=np.float64)
    if arr.ndim != 1 or arr.size != iterations:
        raise ValueError(f"eta must be a number or one step size per local step ({iterations} values); got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError("eta must be finite and > 0 at every step")
    return arr


def _levels(eta, tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme,
            inclusion, step_size_ratio, direction="up") -> _Levels:
    tau, rho, gamma, sensitivity, p_min, n, s, k, t, scheme = _check_common(
        tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme)
    if inclusion is None:
        q = inclusion_probability(scheme, n, s)
    else:
        q = check_real("inclusion_probability", inclusion, low=0.0, high=1.0, low_open=True)
    etas = _step_sizes(eta, t)
    rounds = t // k
    log_scale = (math.log(gamma) - math.log(sensitivity)
                 + 0.5 * (math.log(2.0 * p_min) + math.log(tau) + math.log1p(-rho * rho)))
    _check_noise(log_scale - 0.5 * math.log(float(etas.max())), log_scale - 0.5 * math.log(float(etas.min())))
    scale = math.exp(log_scale)
    if etas.size == 1:
        return _Levels((scale / math.sqrt(etas[0]),), (rounds,), gamma, k, q)
    ratio = check_real("step_size_ratio", step_size_ratio, low=1.0, low_open=True)
    per_round = etas.reshape(rounds, k)
    per_round = per_round.max(1) if direction == "up" else per_round.min(1)
    top = float(per_round.max())
    steps = np.log(top / per_round) / math.log(ratio)
    j = np.floor(steps + 1e-9) if direction == "up" else np.ceil(steps - 1e-9)
    uniq, counts = np.unique(j.astype(np.int64), return_counts=True)
    z = tuple(scale / math.sqrt(top * ratio ** (-float(u))) for u in uniq)
    return _Levels(z, tuple(int(c) for c in counts), gamma, k, q)


def _check_noise(log_z_min: float, log_z_max: float) -> None:
    """z = (gamma / Delta_l) sqrt(2 p_min tau (1 - rho^2) / eta) within :data:`Z_RANGE` (logs: no overflow)."""
    lo, hi = Z_RANGE
    formula = "the noise multiplier z = (gamma / sensitivity) sqrt(2 p_min tau (1 - rho^2) / eta)"
    if log_z_min < math.log(lo):
        raise NoiseOutOfRange(
            f"eta, gamma, sensitivity: {formula} is {_exp_text(log_z_min)}, below {lo:g}: epsilon would exceed ~1e7 "
            "(no privacy); use a smaller eta, a larger gamma or tau, or a smaller sensitivity", "low")
    if log_z_max > math.log(hi):
        raise NoiseOutOfRange(
            f"eta, gamma, sensitivity: {formula} is {_exp_text(log_z_max)}, above {hi:g}: epsilon would be below "
            "~1e-7; use a larger eta, a smaller gamma, or a larger sensitivity", "high")


def _exp_text(log_x: float) -> str:
    return f"{math.exp(log_x):.3g}" if abs(log_x) < 700 else f"about 1e{log_x / math.log(10):.0f}"


def _coarsen(levels: _Levels, max_levels: int, conservative: bool) -> _Levels:
    """At most ``max_levels`` noise multipliers: z rounded on a geometric grid over [z_min, z_max],
    down (less noise: an upper bound stays one) or up (a lower bound stays one)."""
    if len(levels.z) <= max_levels:
        return levels
    z = np.asarray(levels.z)
    lo, hi = float(z.min()), float(z.max())
    grid = np.geomspace(lo, hi, max_levels)
    idx = np.clip(np.searchsorted(grid, z * (1 - 1e-12), side="left"), 0, max_levels - 1)  # grid[idx] >= z
    if conservative:
        idx = np.where(grid[idx] > z * (1 + 1e-12), idx - 1, idx)  # grid[idx] <= z
    counts: dict[int, int] = {}
    for i, r in zip(idx.tolist(), levels.rounds):
        counts[i] = counts.get(i, 0) + r
    keys = sorted(counts)
    return _Levels(tuple(float(grid[i]) for i in keys), tuple(counts[i] for i in keys), levels.gamma,
                   levels.local_steps, levels.q)


def _check_delta(delta) -> float:
    return check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)


def _levels_from(kw: dict, direction: str = "up") -> _Levels:
    return _levels(kw["eta"], kw.get("tau", 1.0), kw.get("rho", 0.0), kw["gamma"], kw["sensitivity"], kw["p_min"],
                   kw["num_clients"], kw["num_sampled"], kw["local_steps"], kw["iterations"], kw.get("scheme", "II"),
                   kw.get("inclusion_probability"), kw.get("step_size_ratio", 1.05), direction)
