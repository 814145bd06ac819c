"""Tight numerical privacy accounting of FA-LD (privacy-loss distributions), with an RDP
cross-check and a lower bound.

The mechanism is the one the paper analyses (Deng et al., App. G, proof of Thm G.3), accounted
without the loose steps of the published chain (the e^x - 1 <= 2x step of eq. 57, the
(eps, delta) Gaussian mechanism of eq. 56 and the two advanced compositions).

Model (every assumption the numbers rest on)
--------------------------------------------
1. **Neighbours**: datasets differ by the substitution of one data point of one client c
   (the paper's relation); per-example gradients satisfy Assumption G.1:
   ||grad l(theta; x) - grad l(theta; x')|| <= Delta_l for all theta, x, x'.
2. **What is released**: every upload of a client to the server (the paper's threat model:
   synchronisation and broadcast are post-processing). The injected noise has a shared part
   sqrt(2 eta tau rho^2) xi_dot, broadcast to all clients and treated as **public**, and a
   private part of standard deviation sigma_c = sqrt(2 eta tau (1 - rho^2) / p_c) per
   coordinate, exactly as in the paper's proof.
3. **One local step** of client c uses a batch drawn uniformly **without replacement** of a
   fixed fraction gamma of its n_c points (Assumption G.2) and adds (eta / (gamma p_c)) times
   the batch's gradient sum, whose substitution sensitivity is Delta_l: a Gaussian mechanism
   of noise multiplier z_c = sigma_c gamma p_c / (eta Delta_l)
   = (gamma / Delta_l) sqrt(2 p_c tau (1 - rho^2) / eta); the worst client has p_c = p_min.
   Fixed-size sampling with substitution: conditioned on the other records, the output is
   (1-gamma) N(s, sigma^2) + gamma N(s + u, sigma^2) against (1-gamma) N(s, sigma^2) +
   gamma N(s + v, sigma^2), where s, s+u, s+v are gradient sums of batches differing in one
   record (|u|, |v|, |u - v| <= Delta_l in units of the step's sensitivity). The gradients
   move with theta, so the configuration (u, v) may change from step to step. We use the
   **dominating pair** whose hockey-stick curve is the pointwise maximum of those of the
   "remove" pair ((1-gamma) N(0,z^2) + gamma N(1,z^2), N(0,z^2)) and the "add" pair (its
   reverse) for every order (Zhu, Dong & Wang, AISTATS 2022: a pair dominating each step
   dominates their adaptive composition). That every triangle configuration is dominated by it
   is checked numerically in the tests (2-d integration), not proved here. Composing the
   remove pair alone (as for Poisson sampling) would assume one configuration throughout,
   the pitfall described by Lebeda, Regehr, Kamath & Steinke (2024).
4. **K local steps** are composed as if every local iterate were released (an upper bound
   by post-processing: only the K-th iterate is uploaded). No amplification by iteration
   (it would need convexity and bounded domains the paper does not assume).
5. **Client sampling**: client c uploads in a round with probability q = S/N (scheme II),
   1 - (1 - 1/N)^S (scheme I, uniform draws as in the paper's eq. 64) or 1 (full
   participation, scheme II with S = N). When c does not upload, the round's output does not
   depend on its data, but it depends on *other* clients' models, which the assumptions do not
   bound. The worst case is an output disjoint from c's: the round's pair is
   ((1-q) bottom + q P_K, (1-q) bottom + q Q_K), i.e. the K-step privacy-loss distribution
   mixed with an atom at loss 0 of weight 1-q. (The paper instead amplifies eps_K by
   log(1 + q(e^eps_K - 1)) (Balle et al. 2018, Thm 9), which requires the outputs with and
   without client c to be (eps_K, delta_K)-close; record-level neighbours do not give that.
   Amplification here comes from composition: about q T/K rounds touch client c.)
6. **Rounds** are composed T/K times (adaptive composition of dominating pairs).
7. The noise is an exact Gaussian (floating-point sampling effects are not modelled).

Numerics
--------
- **Tight** (:func:`tight_epsilon`): privacy-loss distributions from ``dp-accounting``
  (the per-step pair built with pessimistic connect-the-dots from the exact hockey-stick
  curve, Doroshenko et al. 2022; FFT composition; pessimistic tail truncation), so the result
  is an upper bound on the model's epsilon up to floating-point error. ``discretization`` is
  the loss grid (default: a thousandth of the range of one step's privacy loss, within
  [1e-7, 1e-3]; the tests check that a 4x finer grid moves epsilon by < 0.1%).
- **RDP cross-check** (:func:`rdp_epsilon`): the Wang-Balle-Kasiviswanathan (2019) RDP bound
  for the fixed-size subsampled Gaussian under substitution (``dp-accounting``'s
  implementation), K-fold composition, the exact RDP of the client mixture
  (1/(a-1)) log(1 - q + q exp((a-1) K eps_step(a))), T/K-fold composition, and
  ``dp-accounting``'s RDP-to-DP conversion. A valid but looser upper bound.
- **Lower bound** (:func:`lower_bound_epsilon`): one fixed configuration (the "remove" or the
  "add" pair in every step, and a disjoint other-client output), realisable by datasets
  satisfying the assumptions, accounted with *optimistic* discretisation (privacy buckets
  rounded down, vectorised here; identical to dp-accounting's optimistic Gaussian PLD, which
  the tests check): no analysis under the assumptions can certify less. Its grid may be
  coarser than the tight one's (any step, at most MAX_GRID_POINTS points): each step's loss
  rounded down by up to a grid step makes it looser, down to 0 (true but empty) for very long
  runs of small per-step losses; epsilon is read at delta plus the error the composition may
  have added (truncated tails, FFT rounding), so it stays a bound at any delta.
- **Work**: compositions are FFT powers (logarithmic in the number of rounds or steps) on a
  grid of at most MAX_GRID_POINTS points, so 10^9 iterations take about a second.

Step sizes: ``eta`` is a constant or one value per local step (length T). Rounds are grouped by
their largest step size rounded *up* to a geometric grid of ratio ``step_size_ratio`` (a
constant step size is exact; the lower bound rounds *down* instead). The RDP cross-check and the
lower bound keep at most 12 levels (noise multipliers rounded down, resp. up, on a geometric
grid), so that both stay bounds while long decaying schedules stay cheap.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fedlangevin._validation import check_int, check_real
from fedlangevin.privacy.paper import _check_common, inclusion_probability

__all__ = [
    "Accounting",
    "account",
    "lower_bound_epsilon",
    "noise_multiplier",
    "rdp_epsilon",
    "tight_epsilon",
    "MAX_GRID_POINTS",
    "NoiseOutOfRange",
    "Z_RANGE",
]

#: RDP orders of the cross-check (fractional orders use the WBK interpolation, Cor. 10).
RDP_ORDERS = tuple([1.0 + x / 10.0 for x in range(1, 40)] + [5.0 + x / 2.0 for x in range(0, 22)]
                   + list(range(16, 65, 2)) + [80, 96, 128, 160, 192, 256])

_MAX_DISCRETIZATION = 1e-3
_MAX_AUTO_STEP = 1.0  # coarsest automatic PLD grid step (nats); beyond it RDP answers alone
_MIN_DISCRETIZATION = 1e-7
_TAIL_TRUNCATION = 1e-15
_MOMENT_POINTS = 2**16  # grid points per step for the moments of the grid-size estimate
_MIN_TRUNCATION = 1e-300  # smallest tail truncation (a normal float; 0 would mean no truncation)
_MAX_LEVELS_CHECKS = 12  # step-size levels kept by the RDP cross-check and the lower bound
#: largest privacy-loss grid of the tight accountant (points of the composed PMF): about 64 MiB
#: per FFT array and a few seconds; an automatic grid is coarsened to stay below it
MAX_GRID_POINTS = 2**22
#: noise multipliers z the accountants accept: below, epsilon exceeds ~1e7 (no privacy worth
#: counting, and the loss grid cannot be built); above, epsilon is below ~1e-7
Z_RANGE = (1e-4, 1e4)


class NoiseOutOfRange(ValueError):
    """The settings give a noise multiplier z outside :data:`Z_RANGE` (``side``: "low" or "high")."""

    def __init__(self, message: str, side: str) -> None:
        super().__init__(message)
        self.side = side


def _dp():
    try:
        from dp_accounting.pld import pld_pmf, privacy_loss_distribution, privacy_loss_mechanism
        from dp_accounting.rdp import rdp_privacy_accountant
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "the tight accountant needs dp-accounting: pip install 'fedlangevin[privacy]'"
        ) from exc
    return pld_pmf, privacy_loss_distribution, privacy_loss_mechanism, rdp_privacy_accountant


def noise_multiplier(*, eta: float, tau: float = 1.0, rho: float = 0.0, gamma: float, sensitivity: float,
                     p_min: float) -> float:
    """z = (gamma / Delta_l) sqrt(2 p_min tau (1 - rho^2) / eta): private noise std over a step's sensitivity."""
    eta = check_real("eta", eta, low=0.0, low_open=True)
    tau, rho, gamma, sensitivity, p_min, *_ = _check_common(tau, rho, gamma, sensitivity, p_min, 1, 1, 1, 1, "II")
    return gamma / sensitivity * math.sqrt(2.0 * p_min * tau * (1.0 - rho * rho) / eta)


# -- the mechanism as the accountant sees it ------------------------------------------------------
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


# -- privacy-loss distributions ---------------------------------------------------------------------
def _pair_losses(z: float, gamma: float, pessimistic: bool = True):
    _, _, plm, _ = _dp()
    kw = dict(sensitivity=1.0, pessimistic_estimate=pessimistic, sampling_prob=gamma)
    remove = plm.GaussianPrivacyLoss(z, adjacency_type=plm.AdjacencyType.REMOVE, **kw)
    add = plm.GaussianPrivacyLoss(z, adjacency_type=plm.AdjacencyType.ADD, **kw)
    return remove, add


def _delta_curve(remove, add, eps: np.ndarray) -> np.ndarray:
    """Hockey-stick curve of the dominating pair: max(remove, add) for eps >= 0, its symmetric
    extension 1 - e^eps + e^eps * max(...)(-eps) for eps < 0."""
    def both(e):
        e = np.asarray(e, dtype=np.float64)
        if e.size == 0:
            return e
        r = np.asarray(remove.get_delta_for_epsilon(list(e)), dtype=np.float64)
        a = np.asarray(add.get_delta_for_epsilon(list(e)), dtype=np.float64)
        return np.maximum(r, a)

    out = np.empty_like(eps)
    pos = eps >= 0
    out[pos] = both(eps[pos])
    neg = ~pos
    out[neg] = -np.expm1(eps[neg]) + np.exp(eps[neg]) * both(-eps[neg])
    return np.clip(out, 0.0, 1.0)


def _step_upper(remove, add) -> float:
    b1, b2 = remove.connect_dots_bounds(), add.connect_dots_bounds()
    return max(abs(b1.epsilon_upper), abs(b1.epsilon_lower), abs(b2.epsilon_upper), abs(b2.epsilon_lower))


def _auto_discretization(levels: _Levels) -> float:
    """About 1000 grid points across the range of one step's privacy loss, within [1e-7, 1e-3]."""
    remove, add = _pair_losses(max(levels.z), levels.gamma)
    return float(min(_MAX_DISCRETIZATION, max(_step_upper(remove, add) / 1000.0, _MIN_DISCRETIZATION)))


def _step_pmf(z: float, gamma: float, d: float):
    """Pessimistic PMF of the per-step dominating pair (connect-the-dots on the exact curve)."""
    pld_pmf, *_ = _dp()
    remove, add = _pair_losses(z, gamma)
    up = max(1, math.ceil(_step_upper(remove, add) / d))
    grid = np.arange(-up, up + 1)
    deltas = _delta_curve(remove, add, grid * d)
    # delta(eps) is non-increasing; rounding in the normal-tail functions (seen with scipy 1.10 on
    # an AMD EPYC, at the 1e-25 level) can break that, and dp-accounting refuses such a curve. The
    # smallest non-increasing curve above the computed one (a running max from the right) only
    # raises deltas, so the PMF stays pessimistic.
    deltas = np.maximum.accumulate(deltas[::-1])[::-1]
    return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(d, -up, up, deltas)


def _mix_with_zero(pmf, q: float, pessimistic: bool):
    """(1 - q) * (atom at loss 0) + q * pmf: the round with client sampling (assumption 5)."""
    if q >= 1.0:
        return pmf
    pld_pmf, *_ = _dp()
    dense = pmf.to_dense_pmf()
    # DensePLDPmf keeps its grid as (_lower_loss, _probs); stable across dp-accounting 0.4-0.6.
    lower, probs = int(dense._lower_loss), np.asarray(dense._probs, dtype=np.float64)  # noqa: SLF001
    loss_probs = {int(lower + i): q * float(p) for i, p in enumerate(probs) if p > 0}
    loss_probs[0] = loss_probs.get(0, 0.0) + (1.0 - q)
    return pld_pmf.create_pmf(loss_probs, dense._discretization, q * dense._infinity_mass, pessimistic)  # noqa: SLF001


def _self_compose(pmf, count: int, tail: float, pessimistic: bool = True, errors: list | None = None):
    """``pmf`` composed ``count`` times, in work logarithmic in ``count``.

    dp-accounting's ``DensePLDPmf.self_compose``, with two changes that bound the work for large
    counts: sparse PMFs go dense first (dp-accounting composes them by a loop over ``count``,
    after computing size**count as an exact integer: it never ends for count ~ 10^9), and the
    Chernoff bounds that size the result also use orders near the optimal one (dp-accounting's
    orders are at least 1/size, too large once count is large: for 10^9 steps its range was 8x
    the true one's, 31 million points, 2.3 GB). Both are exact rewrites: one FFT power, the same
    tail guarantee (each side of the truncated range holds at most ``tail`` / 2).

    Pessimistic: the truncated tails (at most ``tail``) count as infinite loss (dp-accounting).
    Optimistic (a lower bound): they are dropped instead; the FFT wraps them around onto the
    kept range, which can raise delta(eps) by at most ``tail`` (see :func:`_lower_pmfs`).
    ``errors``: a list to which that bound, ``tail`` plus the FFT's rounding, is appended."""
    if count <= 1:
        return pmf
    from dp_accounting.pld import common
    from scipy import fft

    pld_pmf, *_ = _dp()
    dense = pmf.to_dense_pmf()
    probs = np.asarray(dense._probs, dtype=np.float64)  # noqa: SLF001
    m = float(dense._infinity_mass)  # noqa: SLF001
    count = int(count)
    lo, hi = common.compute_self_convolve_bounds(probs, count, tail, _chernoff_orders(probs, count, tail))
    size = hi - lo + 1
    n_fft = fft.next_fast_len(max(size, probs.size))
    out = np.roll(np.real(fft.ifft(fft.fft(probs, n_fft) ** count)), -lo)[:size]
    if errors is not None:
        errors.append(tail + _fft_error(out))
    inf_mass = (1.0 if m >= 1.0 else -math.expm1(count * math.log1p(-m))) if m > 0 else 0.0
    if pessimistic:
        inf_mass += tail
    return pld_pmf.DensePLDPmf(dense._discretization, int(dense._lower_loss) * count + lo, out, inf_mass,  # noqa: SLF001
                               pessimistic)


def _chernoff_orders(probs: np.ndarray, count: int, tail: float) -> np.ndarray:
    """Orders for the Chernoff bounds of a ``count``-fold sum of index draws from ``probs``:
    dp-accounting's (+-1..20 / size) and multiples of the Gaussian optimum
    sqrt(2 log(2 / tail) / (count var)) where they are smaller (large counts)."""
    base = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / probs.size
    mass = float(probs.sum())
    if tail <= 0 or not mass > 0:
        return base
    idx = np.arange(probs.size, dtype=np.float64)
    mean = float(probs @ idx) / mass
    var = float(probs @ (idx - mean) ** 2) / mass
    if not var > 0:
        return base
    best = math.sqrt(2.0 * math.log(2.0 / tail) / (count * var))
    extra = best * np.array([0.25, 0.5, 0.7, 0.85, 1.0, 1.2, 1.4, 2.0, 4.0])
    # only orders below dp-accounting's smallest: larger ones weigh the PMF's ends by e^(order x
    # index), where the FFT's rounding noise (~1e-20, of either sign) would corrupt the bound
    extra = extra[extra < 1.0 / probs.size]
    return np.concatenate((base, extra, -extra))


def _fft_error(pmf) -> float:
    """Estimated l1 error that floating-point rounding of an FFT composition left in ``pmf`` (a
    PMF or its array of probabilities): what it can add to delta(eps), its number of points
    times the larger of its most negative entry (probabilities are >= 0, so that is rounding)
    and 4 ulp of its largest entry."""
    probs = pmf if isinstance(pmf, np.ndarray) else pmf.to_dense_pmf()._probs  # noqa: SLF001
    probs = np.asarray(probs, dtype=np.float64)
    if probs.size == 0:
        return 0.0
    return float(probs.size * max(-min(float(probs.min()), 0.0), 4.0 * np.finfo(np.float64).eps * float(probs.max())))


def _compose(levels: _Levels, round_pmf_for, tail: float = _TAIL_TRUNCATION, pessimistic: bool = True,
             errors: list | None = None) -> Any:
    pld_pmf, *_ = _dp()
    total = None
    for z, rounds in zip(levels.z, levels.rounds):
        part = _self_compose(round_pmf_for(z), rounds, tail, pessimistic, errors)
        if total is None:
            total = part
        else:
            total = pld_pmf.compose_pmfs(total, part, tail)
            if errors is not None:  # linear convolution: truncated tails are not wrapped around
                errors.append(_fft_error(total))
    return total


def _truncation(levels: _Levels, delta: float) -> float:
    """Tail mass truncated per composition: 1e-15, or less so that the truncated mass (moved to
    infinite loss, pessimistically) stays below delta / 1000 even for tiny delta (otherwise the
    accountant would return inf at delta below ~ rounds x 1e-15), and at least 1e-300: a zero
    truncation would make dp-accounting convolve over the full range (count x width points); at
    delta below ~1e-297 the PLD then reports inf and the RDP epsilon answers."""
    return max(min(_TAIL_TRUNCATION, 1e-3 * delta / (sum(levels.rounds) + levels.local_steps + len(levels.z) + 2)),
               _MIN_TRUNCATION)


def _tight_pmf(levels: _Levels, d: float, tail: float = _TAIL_TRUNCATION):
    def round_pmf(z):
        step = _step_pmf(z, levels.gamma, d)
        return _mix_with_zero(_self_compose(step, levels.local_steps, tail), levels.q, True)

    return _compose(levels, round_pmf, tail)


def _grid_points(levels: _Levels, d: float, optimistic: bool = False) -> float:
    """Estimated points of the largest PMF the tight accountant (``optimistic``: the lower
    bound) builds on a grid of step d.

    From the exact mean and variance of one step's (pessimistic, resp. optimistic) privacy loss: a
    K-step round spans about 2 (K |mu| + 20 sqrt(K v)) + one step's width, the composition of all
    rounds 2 (|mean| + 20 sd) + a round's width (20 sd: far beyond the 1e-15 tails that are kept).
    """
    k, q = levels.local_steps, levels.q
    total_mean = total_var = widest = 0.0
    for z, rounds in zip(levels.z, levels.rounds):
        remove, add = _pair_losses(z, levels.gamma)
        step_width = 2.0 * _step_upper(remove, add)
        if step_width / d > MAX_GRID_POINTS:
            return step_width / d
        if optimistic:
            step_width, mu, var = max(_pmf_moments(_optimistic_step_pmf(z, levels.gamma, d, direction))
                                      for direction in ("remove", "add"))
        else:
            # the moments from a grid of at most ~2^16 points per step (a finer one would cost seconds
            # of dp-accounting's per-point Python for an estimate that only needs to be about right)
            _, mu, var = _pmf_moments(_step_pmf(z, levels.gamma, max(d, step_width / _MOMENT_POINTS)))
        round_width = min(k * step_width, 2.0 * (k * abs(mu) + 20.0 * math.sqrt(k * var)) + step_width)
        widest = max(widest, round_width)
        total_mean += rounds * q * k * mu
        total_var += rounds * (q * k * var + q * (1.0 - q) * (k * mu) ** 2)
    total_width = 2.0 * (abs(total_mean) + 20.0 * math.sqrt(total_var)) + widest
    return max(widest, total_width) / d


def _pmf_moments(pmf) -> tuple[float, float, float]:
    """(width of its grid, mean, variance) of a PMF's finite losses."""
    dense = pmf.to_dense_pmf()
    d = float(dense._discretization)  # noqa: SLF001
    probs = np.asarray(dense._probs, dtype=np.float64)  # noqa: SLF001
    loss = (int(dense._lower_loss) + np.arange(probs.size)) * d  # noqa: SLF001
    mass = max(float(probs.sum()), 1e-300)
    mu = float(probs @ loss) / mass
    return probs.size * d, mu, max(float(probs @ (loss * loss)) / mass - mu * mu, 0.0)


def _optimistic_step_pmf(z: float, gamma: float, d: float, direction: str):
    """Optimistic PMF of the fixed 'remove' or 'add' pair (privacy buckets, rounded down).

    Remove: upper (1-g) N(0, z^2) + g N(-1, z^2), lower N(0, z^2), loss
    L(x) = log(1 - g + g exp(-(2x + 1) / (2 z^2))); add: upper N(0, z^2), lower
    (1-g) N(0, z^2) + g N(1, z^2), L(x) = -log(1 - g + g exp((2x - 1) / (2 z^2))) (the conventions
    of dp-accounting's GaussianPrivacyLoss). Both decrease in x, so the upper mass with loss in
    [j d, (j+1) d) is an interval of x; it goes to j d (rounded down). Mass beyond the
    e^-50 tails is rounded down too (the far-right x tail is dropped, the far-left one kept at
    the largest grid loss). Vectorised, so fine grids stay cheap.
    """
    from scipy.stats import norm

    pld_pmf, *_ = _dp()
    t = -norm.ppf(0.5 * math.exp(-50.0))  # tail truncation in units of z, as dp-accounting's
    x_lo, x_hi = -t * z - 1.0, t * z + 1.0
    g = gamma

    def loss(x):
        x = np.asarray(x, dtype=np.float64)
        if direction == "remove":
            return np.logaddexp(math.log1p(-g) if g < 1 else -np.inf, math.log(g) - (2 * x + 1) / (2 * z * z))
        return -np.logaddexp(math.log1p(-g) if g < 1 else -np.inf, math.log(g) + (2 * x - 1) / (2 * z * z))

    def log_expm1_plus_g(u):
        """log(e^u - 1 + g), without overflow for u beyond 709 (NaN where e^u - 1 + g <= 0)."""
        pos = u > 0
        up, un = np.where(pos, u, 0.0), np.where(pos, 0.0, u)
        return np.where(pos, up + np.log1p(-(1.0 - g) * np.exp(-up)), np.log(np.expm1(un) + g))

    def inverse(l):
        with np.errstate(divide="ignore", invalid="ignore"):
            if direction == "remove":
                return -z * z * (log_expm1_plus_g(l) - math.log(g)) - 0.5
            return z * z * (log_expm1_plus_g(-l) - math.log(g)) + 0.5

    def cdf(x):
        if direction == "remove":
            return (1 - g) * norm.cdf(x / z) + g * norm.cdf((x + 1) / z)
        return norm.cdf(x / z)

    lo_j, hi_j = math.floor(float(loss(x_hi)) / d), math.floor(float(loss(x_lo)) / d)
    j = np.arange(lo_j, hi_j + 2)
    xs = np.clip(np.nan_to_num(inverse(j * d), nan=np.inf, posinf=np.inf, neginf=-np.inf), x_lo, x_hi)
    xs[-1] = -np.inf  # everything with loss above the grid: rounded down to its top
    xs[0] = min(xs[0], x_hi)
    c = cdf(xs)
    probs = c[:-1] - c[1:]  # mass with loss in [j d, (j+1) d), x in (x_{j+1}, x_j]
    probs = np.maximum(probs, 0.0)
    return pld_pmf.DensePLDPmf(d, int(lo_j), probs, 0.0, False)


def _lower_pmfs(levels: _Levels, d: float, tail: float = _TAIL_TRUNCATION) -> list:
    """Optimistic PMFs of the fixed 'remove' and fixed 'add' configurations, each with its slack:
    a bound on what the composition may have added to delta(eps) (at most ``tail`` of wrapped-
    around tail mass per self-composition, and the FFT's rounding, see :func:`_fft_error`)."""
    out = []
    for direction in ("remove", "add"):
        errors: list[float] = []

        def round_pmf(z, direction=direction, errors=errors):
            step = _optimistic_step_pmf(z, levels.gamma, d, direction)
            inner = _self_compose(step, levels.local_steps, tail, False, errors)
            return _mix_with_zero(inner, levels.q, False)

        pmf = _compose(levels, round_pmf, tail, False, errors)
        out.append((pmf, math.fsum(errors)))
    return out


def _check_delta(delta) -> float:
    return check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)


def _discretization(levels: _Levels, discretization) -> float:
    if discretization is None:
        return _auto_discretization(levels)
    return check_real("discretization", discretization, low=0.0, high=1.0, low_open=True)


def _epsilon_for_delta(pmf, delta: float) -> float:
    """Smallest epsilon >= 0 with delta(epsilon) = m_inf + sum_{l > eps} p_l (1 - e^(eps - l)) <= delta
    for a PMF on the loss grid l = j d (the hockey-stick divergence of the PLD).

    The same quantity as ``get_epsilon_for_delta`` of dp-accounting, computed in log space
    (log-cumulative-sum-exp of log p_l - l): dp-accounting's running sum of p_l e^-l
    underflows to 0 when the losses reach ~700 and then reports inf for a finite epsilon.
    """
    dense = pmf.to_dense_pmf()
    probs = np.asarray(dense._probs, dtype=np.float64)  # noqa: SLF001
    m_inf = float(dense._infinity_mass)  # noqa: SLF001
    if m_inf > delta:
        return math.inf
    loss = (int(dense._lower_loss) + np.arange(probs.size)) * float(dense._discretization)  # noqa: SLF001
    keep = probs > 0
    probs, loss = probs[keep], loss[keep]
    if probs.size == 0:
        return 0.0
    # suffix sums over l_i for i >= j: U_j = sum p_i, log L_j = log sum p_i e^-l_i
    upper = np.cumsum(probs[::-1])[::-1]
    log_lower = np.logaddexp.accumulate((np.log(probs) - loss)[::-1])[::-1]
    # delta at eps = l_k: U_{k+1} + m - e^(l_k) L_{k+1}  (k = -1: eps below every loss)
    u_next = np.append(upper[1:], 0.0)
    with np.errstate(over="ignore"):
        d_at = u_next + m_inf - np.exp(np.minimum(loss + np.append(log_lower[1:], -np.inf), 700.0))
    over = np.flatnonzero(d_at > delta)
    if over.size == 0:  # delta(l_0) <= delta: epsilon at or below the smallest loss
        j = 0
    else:
        j = int(over[-1]) + 1  # delta(l_{j-1}) > delta >= delta(l_j): epsilon in (l_{j-1}, l_j]
        if j >= probs.size:
            return math.inf  # pragma: no cover - m_inf <= delta makes delta(l_last) <= delta
    eps = math.log(max(upper[j] + m_inf - delta, 1e-300)) - float(log_lower[j])
    return max(eps, 0.0)


def _bounded_grid(levels: _Levels, discretization=None, max_points: int | None = None,
                  max_step: float = _MAX_AUTO_STEP, optimistic: bool = False, start: float | None = None) -> float | None:
    """The grid step: the automatic one coarsened until the PLD has at most MAX_GRID_POINTS
    points (a coarser pessimistic grid is still an upper bound, only less tight), or the user's
    ``discretization`` if it fits (a ValueError naming it otherwise). None when the automatic
    grid would need a step above ``max_step`` (1 nat: then the PLD is skipped and RDP answers;
    the lower bound passes inf, a coarser optimistic grid being still a lower bound).
    ``optimistic``: the size of the lower bound's PLD; ``start``: the automatic grid's first step."""
    max_points = MAX_GRID_POINTS if max_points is None else max_points
    d = _discretization(levels, discretization) if start is None or discretization is not None else start
    for _ in range(60):
        points = _grid_points(levels, d, optimistic)
        if points <= max_points:
            return d
        if discretization is not None:
            raise ValueError(
                f"discretization={d:g} needs about {points:.3g} grid points (more than {max_points}); use "
                f"discretization >= {d * points / max_points:.3g} or None (automatic)"
            )
        d *= max(1.25 * points / max_points, 1.25)
        if d > max_step:
            return None
    return None  # pragma: no cover - each pass divides the estimate by >= 1.25


def _pld_from_levels(levels: _Levels, delta: float, discretization=None,
                     max_points: int | None = None) -> tuple[float, float]:
    """(epsilon of the privacy-loss distribution, grid step used); (inf, nan) without a grid."""
    d = _bounded_grid(levels, discretization, max_points)
    if d is None:
        return math.inf, math.nan
    return _epsilon_for_delta(_tight_pmf(levels, d, _truncation(levels, delta)), delta), d


def _tight_with_method(levels: _Levels, delta: float, discretization=None, rdp: float | None = None,
                       max_points: int | None = None):
    """(epsilon, "pld" or "rdp", grid step): the PLD epsilon, or the RDP one where it is smaller
    (both are upper bounds of the same model; PLD is the tighter one except where its grid or
    tails cost it, e.g. an epsilon beyond the grid, which it reports as inf)."""
    pld, d = _pld_from_levels(levels, delta, discretization, max_points)
    if rdp is None:
        rdp = _rdp_from_levels(levels, delta)
    if rdp < pld:
        return rdp, "rdp", d
    return pld, "pld", d


def _tight_from_levels(levels: _Levels, delta: float, discretization=None) -> float:
    return _tight_with_method(levels, delta, discretization)[0]


def _lower_discretization(levels: _Levels, d: float, epsilon_hint: float) -> float:
    """Optimistic rounding lowers each step's loss by up to the grid step, a bias of at most
    n d_low / 2 in total over n steps that touch the client: d_low = 2% of the tight epsilon
    divided by n keeps it near 1%, within [d / 20, d] (the lower end bounds the array sizes of
    very long runs, whose lower bound is then looser)."""
    n = max(1.0, levels.q * levels.local_steps * sum(levels.rounds))
    target = 0.02 * epsilon_hint / n if math.isfinite(epsilon_hint) and epsilon_hint > 0 else d
    return float(min(d, max(d / 20.0, target)))


def _lower_from_levels(levels: _Levels, delta: float, discretization=None, epsilon_hint: float | None = None,
                       start: float | None = None) -> float:
    """Lower bound; ``epsilon_hint`` (the tight epsilon, computed if not given) sets its grid,
    ``start`` (the tight accountant's grid step) is where the search for a grid begins.

    The grid has at most MAX_GRID_POINTS points, with a step of any size: an optimistic grid
    coarser than 1 nat still gives a lower bound, a looser one (rounding each step's loss down
    costs up to one grid step per step). Where even a step as large as one step's largest privacy
    loss does not fit (every loss would round down to 0 or below; e.g. 10^11 rounds of small
    losses), the lower bound is 0, true but empty. The PLD's epsilon is read at delta plus what
    the composition may have added to delta(eps) (wrapped-around tails and the FFT's rounding),
    so that the result stays a lower bound also at delta near 1e-300."""
    levels = _coarsen(levels, _MAX_LEVELS_CHECKS, conservative=False)
    largest = max(_step_upper(*_pair_losses(z, levels.gamma)) for z in levels.z)
    d = _bounded_grid(levels, discretization, max_step=largest, optimistic=True, start=start)
    if d is None:
        return 0.0
    if epsilon_hint is None:
        epsilon_hint = _tight_from_levels(levels, delta)
    finest = d * _grid_points(levels, d, True) / MAX_GRID_POINTS  # the grid-size bound, as for the tight PLD
    d = max(_lower_discretization(levels, d, epsilon_hint), min(d, finest))
    tail = _truncation(levels, delta)
    eps = 0.0
    for pmf, slack in _lower_pmfs(levels, d, tail):
        at = delta + slack
        if at < 1.0:
            eps = max(eps, _epsilon_for_delta(pmf, at))
    return float(eps)


@functools.lru_cache(maxsize=256)
def _rdp_step(gamma: float, z: float, orders: tuple) -> tuple:
    """RDP of one fixed-size subsampled Gaussian step under substitution (WBK 2019, Thm 27)."""
    *_, rdp = _dp()
    return tuple(float(x) for x in rdp._compute_rdp_sample_wor_gaussian(gamma, z, list(orders)))  # noqa: SLF001


def _rdp_from_levels(levels: _Levels, delta: float, orders=RDP_ORDERS) -> float:
    *_, rdp = _dp()
    levels = _coarsen(levels, _MAX_LEVELS_CHECKS, conservative=True)
    a = np.asarray(orders, dtype=np.float64)
    total = np.zeros_like(a)
    for z, rounds in zip(levels.z, levels.rounds):
        step = np.array(_rdp_step(levels.gamma, z, tuple(float(x) for x in a)))
        inner = levels.local_steps * step
        if levels.q < 1.0:
            with np.errstate(over="ignore", invalid="ignore"):
                mixed = np.logaddexp(math.log1p(-levels.q), math.log(levels.q) + (a - 1.0) * inner) / (a - 1.0)
            inner = np.where(np.isfinite(inner), mixed, np.inf)
        total = total + rounds * inner
    eps, _ = rdp.compute_epsilon(list(a), list(total), delta)
    return float(eps)


# -- public functions ---------------------------------------------------------------------------------
_DOC_ARGS = """
    Mechanism arguments (as :func:`fedlangevin.privacy.paper_bound`): ``eta`` (a number, or one
    value per local step), ``tau``, ``rho`` in [0, 1), ``gamma``, ``sensitivity``, ``p_min``,
    ``num_clients``, ``num_sampled``, ``local_steps``, ``iterations``, ``scheme`` ("I"/"II").
    ``inclusion_probability`` overrides the client inclusion probability q of the scheme (for
    instance 1 - (1 - max_c p_c)^S for scheme I drawing clients with probabilities p_c).
    ``step_size_ratio``: grid ratio for grouping varying step sizes (see the module docstring).
"""


def _levels_from(kw: dict, direction: str = "up") -> _Levels:
    return _levels(kw["eta"], kw.get("tau", 1.0), kw.get("rho", 0.0), kw["gamma"], kw["sensitivity"], kw["p_min"],
                   kw["num_clients"], kw["num_sampled"], kw["local_steps"], kw["iterations"], kw.get("scheme", "II"),
                   kw.get("inclusion_probability"), kw.get("step_size_ratio", 1.05), direction)


def tight_epsilon(*, eta, tau=1.0, rho=0.0, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps,
                  iterations, scheme="II", delta, discretization=None, inclusion_probability=None,
                  step_size_ratio=1.05) -> float:
    """Smallest epsilon (certified up to discretisation, pessimistically) such that FA-LD is
    (epsilon, delta)-DP under the model of the module docstring.

    The privacy-loss-distribution epsilon, or the RDP cross-check's where that is smaller
    (both are upper bounds; :func:`account` says which one was used), so it never exceeds
    :func:`rdp_epsilon` and is finite wherever RDP is. The loss grid has at most
    :data:`MAX_GRID_POINTS` points: the automatic grid is coarsened to stay below (still a
    pessimistic upper bound), an explicit ``discretization`` that needs more is a ValueError.
    """
    levels = _levels_from(locals())
    return _tight_from_levels(levels, _check_delta(delta), discretization)


def rdp_epsilon(*, eta, tau=1.0, rho=0.0, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps,
                iterations, scheme="II", delta, inclusion_probability=None, step_size_ratio=1.05,
                orders: Sequence[float] = RDP_ORDERS) -> float:
    """Epsilon of the same model from Renyi-DP (WBK 2019 subsampling bound): a looser upper bound."""
    levels = _levels_from(locals())
    return _rdp_from_levels(levels, _check_delta(delta), orders)


def lower_bound_epsilon(*, eta, tau=1.0, rho=0.0, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps,
                        iterations, scheme="II", delta, discretization=None, inclusion_probability=None,
                        step_size_ratio=1.05) -> float:
    """Epsilon of one realisable worst configuration, optimistically discretised: a lower bound."""
    levels = _levels_from(locals(), "down")
    return _lower_from_levels(levels, _check_delta(delta), discretization)


for _f in (tight_epsilon, rdp_epsilon, lower_bound_epsilon):
    _f.__doc__ = (_f.__doc__ or "") + _DOC_ARGS


@dataclass(frozen=True)
class Accounting:
    """The three numbers for one setting at one delta, with the model's parameters.

    ``epsilon`` (tight: the PLD epsilon, or the RDP one where smaller), ``rdp_epsilon`` (RDP
    cross-check, upper), ``lower_epsilon`` (lower bound); ``noise_multiplier`` z (the smallest
    over step-size levels), ``q`` (client inclusion), ``gamma``, ``rounds`` (T/K, summed over
    levels), ``discretization`` (the PLD grid step used; NaN when no grid within
    MAX_GRID_POINTS has a step below 1 nat: then ``epsilon`` is the RDP one and the lower bound
    uses a coarser grid of its own), ``method``: ``"pld"`` or ``"rdp"``, which of the two gave
    ``epsilon``.
    """

    delta: float
    epsilon: float
    rdp_epsilon: float
    lower_epsilon: float
    noise_multiplier: float
    q: float
    gamma: float
    local_steps: int
    rounds: int
    discretization: float
    method: str = "pld"


def _account_levels(levels: _Levels, lower_levels: _Levels, delta: float, discretization=None,
                    rdp: bool = True) -> Accounting:
    rdp_eps = _rdp_from_levels(levels, delta)
    tight, method, d = _tight_with_method(levels, delta, discretization, rdp_eps)
    return Accounting(
        delta=delta,
        epsilon=tight,
        rdp_epsilon=rdp_eps if rdp else math.nan,
        lower_epsilon=_lower_from_levels(lower_levels, delta, discretization, tight, d if math.isfinite(d) else None),
        noise_multiplier=min(levels.z),
        q=levels.q,
        gamma=levels.gamma,
        local_steps=levels.local_steps,
        rounds=sum(levels.rounds),
        discretization=d,
        method=method,
    )


def account(*, eta, tau=1.0, rho=0.0, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations,
            scheme="II", delta, discretization=None, inclusion_probability=None, step_size_ratio=1.05,
            rdp: bool = True) -> Accounting:
    """Tight epsilon, RDP cross-check and lower bound of one setting (see :class:`Accounting`)."""
    kw = locals()
    delta = _check_delta(delta)
    return _account_levels(_levels_from(kw), _levels_from(kw, "down"), delta, discretization, rdp)


account.__doc__ += _DOC_ARGS
