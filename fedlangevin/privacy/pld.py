"""Privacy-loss distributions of the FA-LD mechanism (``dp-accounting``'s PMFs): the per-step
dominating pair, its K-step rounds mixed with client sampling, their composition, and epsilon
at a delta. The tight accountant (:mod:`fedlangevin.privacy.accountant`) uses the pessimistic
PMFs (an upper bound), the lower bound the optimistic ones; the model and the numerics are
described in that module's docstring.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedlangevin._validation import check_real
from fedlangevin.privacy.levels import _Levels

__all__: list[str] = []

_MAX_DISCRETIZATION = 1e-3
_MIN_DISCRETIZATION = 1e-7
_TAIL_TRUNCATION = 1e-15
_MIN_TRUNCATION = 1e-300  # smallest tail truncation (a normal float; 0 would mean no truncation)


def _dp():
    try:
        from dp_accounting.pld import pld_pmf, privacy_loss_distribution, privacy_loss_mechanism
        from dp_accounting.rdp import rdp_privacy_accountant
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "the tight accountant needs dp-accounting: pip install 'fedlangevin[privacy]'"
        ) from exc
    return pld_pmf, privacy_loss_distribution, privacy_loss_mechanism, rdp_privacy_accountant


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


def _discretization(levels: _Levels, discretization) -> float:
    if discretization is None:
        return _auto_discretization(levels)
    return check_real("discretization", discretization, low=0.0, high=1.0, low_open=True)


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
