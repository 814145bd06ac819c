"""The RDP cross-check of the tight accountant: the Wang-Balle-Kasiviswanathan (2019) bound for
the fixed-size subsampled Gaussian under substitution (``dp-accounting``'s implementation),
composed over the K local steps, mixed with client sampling exactly in RDP and composed over
the rounds (see :mod:`fedlangevin.privacy.accountant`'s docstring). A valid but looser upper
bound than the privacy-loss distribution's.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from fedlangevin.privacy.levels import _coarsen, _Levels
from fedlangevin.privacy.pld import _dp

__all__ = ["MAX_RDP_LEVELS", "RDP_ORDERS"]

#: noise levels the RDP cross-check computes: dp-accounting's bound for fixed-size sampling costs about
#: a second per level (O(alpha^2) work per integer order up to 256), so the rounds of more step sizes
#: (an adapted run has one per round) are grouped into this many, z rounded down (more loss: the RDP
#: epsilon stays an upper bound, a little looser than with every level)
MAX_RDP_LEVELS = 4

#: RDP orders of the cross-check (fractional orders use the WBK interpolation, Cor. 10).
RDP_ORDERS = tuple([1.0 + x / 10.0 for x in range(1, 40)] + [5.0 + x / 2.0 for x in range(0, 22)]
                   + list(range(16, 65, 2)) + [80, 96, 128, 160, 192, 256])


@functools.lru_cache(maxsize=256)
def _rdp_step(gamma: float, z: float, orders: tuple) -> tuple:
    """RDP of one fixed-size subsampled Gaussian step under substitution (WBK 2019, Thm 27)."""
    *_, rdp = _dp()
    return tuple(float(x) for x in rdp._compute_rdp_sample_wor_gaussian(gamma, z, list(orders)))  # noqa: SLF001


def _rdp_curve(levels: _Levels, orders=RDP_ORDERS, max_levels: int = MAX_RDP_LEVELS) -> np.ndarray:
    """The RDP curve (one value per order) of ``levels``: K steps a round, mixed with client
    sampling, composed over the rounds (curves of several mechanisms add up)."""
    levels = _coarsen(levels, max_levels, conservative=True)
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
    return total


def _rdp_to_epsilon(total: np.ndarray, delta: float, orders=RDP_ORDERS) -> float:
    *_, rdp = _dp()
    eps, _ = rdp.compute_epsilon(list(np.asarray(orders, dtype=np.float64)), list(total), delta)
    return float(eps)


def _rdp_from_levels(levels: _Levels, delta: float, orders=RDP_ORDERS, max_levels: int = MAX_RDP_LEVELS) -> float:
    return _rdp_to_epsilon(_rdp_curve(levels, orders, max_levels), delta, orders)
