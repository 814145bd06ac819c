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

**Client level** (:func:`client_account`, a run with ``privacy=ClientLevel(clip=C)``): item 1
becomes "neighbours differ in one client's whole data", and the run clips each client's scaled
data term to norm C in every local step, so a step's mean moves by at most eta Delta with
Delta = 2C; item 3 becomes a Gaussian mechanism *without* subsampling (every row may differ:
gamma = 1) of noise multiplier z_c = sqrt(2 tau (1 - rho^2) / (p_c eta)) / Delta, smallest for
the largest weight p_max (:func:`~fedlangevin.privacy.levels.client_noise_multiplier` derives it
from eq. 10). Items 2 and 4-7 are unchanged: client sampling amplifies as at record level.

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

Modules: :mod:`~fedlangevin.privacy.levels` (the mechanism's noise multipliers, grouped by
step size), :mod:`~fedlangevin.privacy.pld` (the privacy-loss distributions),
:mod:`~fedlangevin.privacy.rdp` (the RDP cross-check); this one sizes the loss grid and
composes the three numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from fedlangevin.privacy.levels import (  # noqa: F401  (re-exported: the accountant's model, one module)
    _MAX_LEVELS_CHECKS,
    Z_RANGE,
    NoiseOutOfRange,
    _check_delta,
    client_levels,
    _coarsen,
    _Levels,
    record_levels,
    _levels_from,
    client_noise_multiplier,
    noise_multiplier,
)
from fedlangevin.privacy.pld import (  # noqa: F401  (re-exported: the PMFs, tested through this module)
    _auto_discretization,
    _delta_curve,
    _discretization,
    _epsilon_for_delta,
    _lower_pmfs,
    _optimistic_step_pmf,
    _pair_losses,
    _pmf_moments,
    _step_pmf,
    _step_upper,
    _tight_pmf,
    _truncation,
)
from fedlangevin.privacy.rdp import RDP_ORDERS, _rdp_from_levels  # noqa: F401  (re-exported)

__all__ = [
    "Accounting",
    "account",
    "client_account",
    "client_noise_multiplier",
    "lower_bound_epsilon",
    "noise_multiplier",
    "rdp_epsilon",
    "tight_epsilon",
    "MAX_GRID_POINTS",
    "NoiseOutOfRange",
    "Z_RANGE",
]

_MAX_AUTO_STEP = 1.0  # coarsest automatic PLD grid step (nats); beyond it RDP answers alone
_MOMENT_POINTS = 2**16  # grid points per step for the moments of the grid-size estimate
#: largest privacy-loss grid of the tight accountant (points of the composed PMF): about 64 MiB
#: per FFT array and a few seconds; an automatic grid is coarsened to stay below it (read here,
#: at call time, by the grid-size functions below)
MAX_GRID_POINTS = 2**22


# -- the size of the loss grid -------------------------------------------------------------------------
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


# -- public functions ---------------------------------------------------------------------------------
_DOC_ARGS = """
    Mechanism arguments (as :func:`fedlangevin.privacy.paper_bound`): ``eta`` (a number, or one
    value per local step), ``tau``, ``rho`` in [0, 1), ``gamma``, ``sensitivity``, ``p_min``,
    ``num_clients``, ``num_sampled``, ``local_steps``, ``iterations``, ``scheme`` ("I"/"II").
    ``inclusion_probability`` overrides the client inclusion probability q of the scheme (for
    instance 1 - (1 - max_c p_c)^S for scheme I drawing clients with probabilities p_c).
    ``step_size_ratio``: grid ratio for grouping varying step sizes (see the module docstring).
"""


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


def client_account(*, eta, tau=1.0, rho=0.0, sensitivity, p_max, num_clients, num_sampled, local_steps, iterations,
                   scheme="II", delta, discretization=None, inclusion_probability=None, step_size_ratio=1.05,
                   rdp: bool = True) -> Accounting:
    """Tight epsilon, RDP cross-check and lower bound at **client level** (:class:`Accounting`).

    Neighbours differ in one client's whole data; each local step is a Gaussian mechanism of
    noise multiplier z = sqrt(2 tau (1 - rho^2) / (p_max eta)) / sensitivity
    (:func:`~fedlangevin.privacy.levels.client_noise_multiplier` derives it from the kernel;
    ``sensitivity`` = 2C for ``ClientLevel(clip=C)``), with no minibatch amplification
    (gamma = 1), K steps a round, the round mixed with client sampling and the rounds composed
    exactly as at record level (items 4-6 of the module docstring). ``p_max``: the largest
    client weight (the worst client: least private noise), in [1/N, 1]. The other arguments
    as :func:`account` (no ``gamma``, no ``p_min``).
    """
    delta = _check_delta(delta)
    args = (eta, tau, rho, sensitivity, p_max, num_clients, num_sampled, local_steps, iterations, scheme,
            inclusion_probability, step_size_ratio)
    return _account_levels(client_levels(*args, "up"), client_levels(*args, "down"), delta, discretization, rdp)
