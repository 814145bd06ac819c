"""The FA-LD mechanism as the accountants see it: the noise multiplier of one local step and the
rounds grouped by it (the model is listed in :mod:`fedlangevin.privacy.accountant`'s docstring).

Record level (:func:`noise_multiplier`, :func:`record_levels`): one local step of client c is a
subsampled Gaussian mechanism of noise multiplier z = (gamma / Delta_l) sqrt(2 p_c tau (1 - rho^2) / eta)
(the worst client has p_c = p_min). Client level (:func:`client_noise_multiplier`,
:func:`client_levels`): a Gaussian mechanism without subsampling (gamma = 1) of noise multiplier
z_c = sqrt(2 tau (1 - rho^2) / (p_c eta)) / Delta (the worst client has p_c = p_max; derivation in
:func:`client_noise_multiplier`). The run is T/K rounds of K such steps. With varying step sizes
the rounds are grouped by their step size rounded to a geometric grid (:func:`_grouped`), and the
checks keep at most ``_MAX_LEVELS_CHECKS`` groups (:func:`_coarsen`), rounded so that bounds stay
bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlangevin._validation import check_int, check_real
from fedlangevin.privacy.paper import MAX_CLIENTS, _check_common, inclusion_probability

__all__ = ["NoiseOutOfRange", "Z_RANGE", "client_levels", "client_noise_multiplier", "noise_multiplier", "record_levels"]

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


def record_levels(eta, tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme,
            inclusion, step_size_ratio, direction="up") -> _Levels:
    """Record level: z = (gamma / Delta_l) sqrt(2 p_min tau (1 - rho^2) / eta) per round."""
    tau, rho, gamma, sensitivity, p_min, n, s, k, t, scheme = _check_common(
        tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme)
    log_scale = (math.log(gamma) - math.log(sensitivity)
                 + 0.5 * (math.log(2.0 * p_min) + math.log(tau) + math.log1p(-rho * rho)))
    formula = "the noise multiplier z = (gamma / sensitivity) sqrt(2 p_min tau (1 - rho^2) / eta)"
    return _grouped(eta, log_scale, gamma, k, t, _inclusion(scheme, n, s, inclusion), step_size_ratio, direction,
                    formula, "eta, gamma, sensitivity")


def client_noise_multiplier(*, eta: float, tau: float = 1.0, rho: float = 0.0, sensitivity: float,
                            p_max: float) -> float:
    """z_c = sqrt(2 tau (1 - rho^2) / (p_c eta)) / Delta at p_c = p_max: the client-level noise multiplier.

    Derivation (client-level adjacency, :class:`fedlangevin.privacy.ClientLevel`; neighbours
    differ in one client's whole data). A private run's local step of client c (eq. 10, run on
    :class:`fedlangevin.problems.clipped.Clipped`) is

        beta <- beta - eta [clip_C(s_c(beta)) + grad U_0(beta)] + sqrt(2 eta tau rho^2) xi_shared
                     + sqrt(2 eta tau (1 - rho^2) / p_c) xi^c,

    with s_c = (1/p_c)(n_c/b) sum_{i in B} grad l(beta; x_ci) the client's scaled data term
    (:meth:`~fedlangevin.problems.FederatedProblem.private_grad`), the prior's gradient public
    and the shared noise public (eq. 14; :mod:`fedlangevin.federation.noise`). Given beta, the
    public terms are fixed, and replacing client c's data moves the step's mean by
    eta (clip_C(s_c) - clip_C(s_c')), of norm at most eta Delta with Delta = 2C
    (``ClientLevel.sensitivity``), against the private noise's standard deviation
    sigma_c = sqrt(2 eta tau (1 - rho^2) / p_c) per coordinate: a Gaussian mechanism of noise
    multiplier

        z_c = sigma_c / (eta Delta) = sqrt(2 tau (1 - rho^2) / (p_c eta)) / Delta.

    There is no amplification by the minibatch: the whole client changes, so every row of the
    batch may differ (gamma = 1 in the accountant, whatever the batch size). The noise grows as
    p_c shrinks (eq. 10's private noise is sqrt(1/p_c) larger), so the worst client is the one
    with the **largest** weight p_max (record level has the smallest p_c, where the 1/p_c of the
    gradient scaling outgrows the noise). It is the record-level formula
    (gamma / Delta_l) sqrt(2 p tau (1 - rho^2) / eta) with gamma = 1, p = p_max and
    Delta_l = Delta p_max.
    """
    eta = check_real("eta", eta, low=0.0, low_open=True)
    tau, rho, _, sensitivity, *_ = _check_common(tau, rho, 1.0, sensitivity, 1.0, 1, 1, 1, 1, "II")
    p_max = check_real("p_max", p_max, low=0.0, high=1.0, low_open=True)
    return math.sqrt(2.0 * tau * (1.0 - rho * rho) / (p_max * eta)) / sensitivity


def client_levels(eta, tau, rho, sensitivity, p_max, num_clients, num_sampled, local_steps, iterations, scheme,
                   inclusion, step_size_ratio, direction="up") -> _Levels:
    """Client level: z = sqrt(2 tau (1 - rho^2) / (p_max eta)) / Delta per round, gamma = 1
    (:func:`client_noise_multiplier`); p_max, the largest client weight, is in [1/N, 1]."""
    n = check_int("num_clients", num_clients, 1, MAX_CLIENTS)
    tau, rho, _, sensitivity, _, n, s, k, t, scheme = _check_common(
        tau, rho, 1.0, sensitivity, 1.0 / n, n, num_sampled, local_steps, iterations, scheme)
    p_max = check_real("p_max", p_max, low=0.0, high=1.0, low_open=True)
    if p_max < (1.0 / n) * (1 - 1e-12):
        raise ValueError(f"p_max must be >= 1/num_clients = {1.0 / n:g} (the largest of {n} weights summing to 1); "
                         f"got {p_max:g}")
    log_scale = 0.5 * (math.log(2.0) + math.log(tau) + math.log1p(-rho * rho) - math.log(p_max)) - math.log(sensitivity)
    formula = "the client-level noise multiplier z = sqrt(2 tau (1 - rho^2) / (p_max eta)) / sensitivity"
    return _grouped(eta, log_scale, 1.0, k, t, _inclusion(scheme, n, s, inclusion), step_size_ratio, direction,
                    formula, "eta, sensitivity")


def _inclusion(scheme: str, n: int, s: int, inclusion) -> float:
    if inclusion is None:
        return inclusion_probability(scheme, n, s)
    return check_real("inclusion_probability", inclusion, low=0.0, high=1.0, low_open=True)


def _grouped(eta, log_scale: float, gamma: float, k: int, t: int, q: float, step_size_ratio, direction: str,
             formula: str, names: str) -> _Levels:
    """Rounds grouped by noise multiplier z = exp(log_scale) / sqrt(eta): one level for a
    constant step size, else by their largest (``direction="up"``; smallest: "down") step size
    on a geometric grid of ratio ``step_size_ratio``."""
    etas = _step_sizes(eta, t)
    ratio = check_real("step_size_ratio", step_size_ratio, low=1.0, low_open=True)  # also where it is unused
    rounds = t // k
    _check_noise(log_scale - 0.5 * math.log(float(etas.max())), log_scale - 0.5 * math.log(float(etas.min())),
                 formula, names)
    scale = math.exp(log_scale)
    if etas.size == 1:
        return _Levels((scale / math.sqrt(etas[0]),), (rounds,), gamma, k, q)
    per_round = etas.reshape(rounds, k)
    per_round = per_round.max(1) if direction == "up" else per_round.min(1)
    top = float(per_round.max())
    steps = np.log(top / per_round) / math.log(ratio)
    j = np.floor(steps + 1e-9) if direction == "up" else np.ceil(steps - 1e-9)
    uniq, counts = np.unique(j.astype(np.int64), return_counts=True)
    z = tuple(scale / math.sqrt(top * ratio ** (-float(u))) for u in uniq)
    return _Levels(z, tuple(int(c) for c in counts), gamma, k, q)


def _check_noise(log_z_min: float, log_z_max: float, formula: str, names: str) -> None:
    """z (given by ``formula``, its arguments ``names``) within :data:`Z_RANGE` (logs: no overflow)."""
    lo, hi = Z_RANGE
    gamma_low, gamma_high = (", a larger gamma", ", a smaller gamma") if "gamma" in names else ("", "")
    if log_z_min < math.log(lo):
        raise NoiseOutOfRange(
            f"{names}: {formula} is {_exp_text(log_z_min)}, below {lo:g}: epsilon would exceed ~1e7 "
            f"(no privacy); use a smaller eta{gamma_low}, a larger tau or a smaller sensitivity", "low")
    if log_z_max > math.log(hi):
        raise NoiseOutOfRange(
            f"{names}: {formula} is {_exp_text(log_z_max)}, above {hi:g}: epsilon would be below "
            f"~1e-7; use a larger eta{gamma_high} or a larger sensitivity", "high")


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
    return record_levels(kw["eta"], kw.get("tau", 1.0), kw.get("rho", 0.0), kw["gamma"], kw["sensitivity"], kw["p_min"],
                   kw["num_clients"], kw["num_sampled"], kw["local_steps"], kw["iterations"], kw.get("scheme", "II"),
                   kw.get("inclusion_probability"), kw.get("step_size_ratio", 1.05), direction)
