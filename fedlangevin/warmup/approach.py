"""The approach: the first warm-up rounds, moving the chains from a data-independent start to the bulk.

From the default start (zeros) the chains of a posterior like posteriordb's diamonds start
thousands of posterior sds from the mode. Stan's windows assume the chains reach the typical
set within the 75-round init buffer; when they do not, the first slow windows estimate M from
chains still travelling (a covariance of the path, not of the posterior) and the step that
dual averaging tunes for a MALA acceptance is of order 1 / distance (far from the mode the
reverse move is improbable), so the chains crawl. The approach replaces the start of warm-up
with a different rule until the chains have arrived:

- **M** is the Laplace matrix where the chains are, |H|^-1 at their mean Hessian (absolute
  eigenvalues: far from the mode H may be indefinite), re-estimated every :data:`PIECE` rounds.
  The clients compute their Hessians at the broadcast iterates and return them with the
  round's gradient (d (d + 1) / 2 floats per client, counted): no extra round.
- **eta** is a damped Newton-Langevin step: at most :data:`STEP` (with M = H^-1 on a Gaussian
  the ULA step contracts the distance to the mode by 1 - eta per round), grown by :data:`GROW`
  after a round that lowered the chains' mean energy. Far from the mode the drift dominates the
  noise and the energy falls. A round that raised it by more than d tau, more than a step's noise
  adds (or made an energy non-finite), took a step
  the local quadratic model did not justify (diamonds: a Newton step in log sigma from where
  sigma is far too large overshoots into sigma -> 0, energies of 1e27): it is **rejected**, the
  chains go back to where the round started (warm-up draws are discarded, so nothing is
  biased) and eta halves.
- **Stragglers.** A chain can be thrown far out where the energy is flat (a noise draw along a
  direction whose curvature the Laplace M underestimates): it lowers no mean energy and adds
  little to the statistic. At the arrival, and at the end of every init-buffer piece after it,
  a chain whose energy exceeds the chains' median by more than :func:`straggler_excess`
  restarts at the place of another chain (warm-up draws are discarded, so nothing is biased).
- **Arrival.** In the typical set the gradient g and the Hessian satisfy E[g g^T] = tau E[H]
  (integration by parts), so the Newton statistic s = mean over chains of g^T M g / (d tau) is 1
  for M = E[H]^-1 (for ULA's stationary law at step eta on a Gaussian, 1 / (1 - eta / 2), 1.33 at
  eta = 0.5), while a chain r sds from the mode contributes about r^2 / d. The approach ends at
  the first round with s <= :data:`ARRIVED`, or after :data:`SHARE` of the warm-up (then the
  sampler warns). Stan's windows are then laid out over the rest of the warm-up. Chains that
  start in the bulk (``init="map"``, draws: s <= ARRIVED at the start) have no approach and run
  exactly as without one.

The statistic needs no energy; the guard does, and both need the clients' exact gradients and
Hessians: a private run has no approach (its warm-up reads the broadcast iterates only).
Functions are pure over the frozen :class:`Approach`: :func:`approach_init`,
:func:`approach_update`, :func:`arrived`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace

import torch

__all__ = ["ARRIVED", "GROW", "PIECE", "SHARE", "STEP", "STRAGGLER_QUANTILE", "Approach", "approach_init",
           "approach_update", "arrived", "newton_statistic", "straggler_excess"]

#: the largest approach step (eta with M = |H|^-1)
STEP = 0.5
#: the step's growth after a round that lowered the mean energy
GROW = 1.5
#: rounds between Laplace re-estimates of M
PIECE = 10
#: the Newton statistic at which the chains have arrived (1 in the typical set, 1.33 at eta = STEP)
ARRIVED = 2.0
#: the approach takes at most this share of the warm-up
SHARE = 0.5
#: a straggler's energy lies beyond this quantile of the typical set's (Gaussian) energy law
STRAGGLER_QUANTILE = 1e-4


@dataclass(frozen=True)
class Approach:
    """``step``: eta of the next round; ``energy``: the chains' mean energy where they are (inf:
    unknown); ``statistic``: the Newton statistic there; ``rounds``: rounds approached;
    ``rejected``: the last round was (its chains went back)."""

    step: float
    energy: float = math.inf
    statistic: float = math.inf
    rounds: int = 0
    rejected: bool = False

    def record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, rec: dict) -> "Approach":
        return cls(float(rec["step"]), float(rec["energy"]), float(rec["statistic"]), int(rec["rounds"]),
                   bool(rec["rejected"]))


def approach_init(step: float, energies: torch.Tensor | None = None, statistic: float = math.inf) -> Approach:
    """The approach from a first step ``step`` (capped at :data:`STEP`), the chains' ``energies`` (R,)
    and Newton ``statistic`` at the start (None, inf: unknown; the first round is then not judged)."""
    if not (math.isfinite(step) and step > 0):
        raise ValueError(f"step: the approach's first step must be a positive finite number; got {step!r}")
    return Approach(min(STEP, float(step)), math.inf if energies is None else _mean(energies), float(statistic))


def _mean(energies: torch.Tensor) -> float:
    return float(energies.mean()) if bool(torch.isfinite(energies).all()) else math.inf


def newton_statistic(grad: torch.Tensor, matrix: torch.Tensor, temperature: float = 1.0) -> float:
    """mean over chains of g^T M g / (d tau), ``grad`` (R, d) the gradients of the global energy,
    ``matrix`` M as (d, d) or its diagonal (d,); inf where a gradient is not finite."""
    d = grad.shape[-1]
    if not bool(torch.isfinite(grad).all()):
        return math.inf
    quad = (grad * (grad @ matrix if matrix.dim() == 2 else grad * matrix)).sum(-1)
    return float(quad.mean()) / (d * temperature)


def approach_update(state: Approach, energies: torch.Tensor, statistic: float, tolerance: float = 0.0) -> Approach:
    """After a round whose chains have ``energies`` (R,) and Newton ``statistic``: rejected (the step
    halves; energy and statistic stay those of where the chains go back to) if the mean energy rose
    by more than ``tolerance`` or is not finite, else accepted (the step grows by GROW, up to STEP).
    The Adapter's tolerance is d tau: a step's noise raises the energy by eta d tau on average on a
    Gaussian with M = H^-1 (at most d tau / 2 at eta = STEP), so near the bulk, where the drift no
    longer lowers the energy by more, rounds are not rejected for their noise."""
    energy = _mean(energies)
    if not math.isfinite(energy) or (math.isfinite(state.energy) and energy > state.energy + tolerance):
        return replace(state, step=state.step / 2, rounds=state.rounds + 1, rejected=True)
    return Approach(min(STEP, GROW * state.step), energy, float(statistic), state.rounds + 1, False)


def arrived(state: Approach, warmup: int) -> bool:
    """The chains are in the bulk (statistic <= ARRIVED), or the approach has used its share."""
    return state.statistic <= ARRIVED or state.rounds >= max(1, int(SHARE * warmup))


@functools.lru_cache(maxsize=None)
def _gamma_spread(dim: int) -> float:
    from scipy.stats import gamma

    return float(gamma.isf(STRAGGLER_QUANTILE, dim / 2) - gamma.median(dim / 2))


def straggler_excess(dim: int, temperature: float = 1.0) -> float:
    """How far above the chains' median energy a chain counts as a straggler: on a d-dimensional
    Gaussian posterior the energy above its minimum is tau Gamma(d / 2, 1), so this is tau times
    its upper STRAGGLER_QUANTILE quantile minus its median (d = 1: 7.3, d = 10: 13.1, d = 26: 18.2). A
    chain in the typical set is taken for a straggler with probability about STRAGGLER_QUANTILE."""
    return temperature * _gamma_spread(int(dim))
