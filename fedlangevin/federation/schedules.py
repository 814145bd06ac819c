"""Step-size schedules eta_k, indexed by the global local-step counter k = 0, 1, 2, ...

Every schedule is a callable k -> eta_k; the engine evaluates the whole run's step sizes
before it starts, so an invalid value (<= 0, NaN, too short a sequence) fails early with a
``ValueError`` naming ``step_size``.

- :class:`Constant`: eta_k = eta (Thm 5.4 / 5.7).
- :class:`PaperDecay`: eta_k = 1 / (2L + m k / 12) (Thm 5.8, Deng et al.), W2 = O(k^{-1/2}).
- :class:`Polynomial`: eta_k = a (b + k)^{-gamma}, the classical SGLD schedule (Welling & Teh 2011).
- :class:`Sequence`: an explicit list; ``callable`` objects are wrapped as they are.
"""

from __future__ import annotations

import bisect

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence as SequenceT

import numpy as np

from fedlangevin._validation import check_real, check_step_sizes

__all__ = ["AdaptedSteps", "Constant", "PaperDecay", "Polynomial", "Sequence", "as_schedule", "check_schedule", "round_step_sizes", "step_sizes"]


@dataclass(frozen=True)
class Constant:
    eta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", check_real("step_size", self.eta, low=0.0, low_open=True))

    def __call__(self, k: int) -> float:
        return self.eta


@dataclass(frozen=True)
class PaperDecay:
    """eta_k = 1 / (2L + m k / 12) (Thm 5.8); L = smoothness, m = strong convexity."""

    smoothness: float
    convexity: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "smoothness", check_real("smoothness", self.smoothness, low=0.0, low_open=True))
        object.__setattr__(self, "convexity", check_real("convexity", self.convexity, low=0.0))

    def __call__(self, k: int) -> float:
        return 1.0 / (2.0 * self.smoothness + self.convexity * k / 12.0)


@dataclass(frozen=True)
class Polynomial:
    """eta_k = a (b + k)^(-gamma) with a > 0, b > 0, gamma in [0, 1]."""

    a: float
    b: float = 1.0
    gamma: float = 0.55

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", check_real("a", self.a, low=0.0, low_open=True))
        object.__setattr__(self, "b", check_real("b", self.b, low=0.0, low_open=True))
        object.__setattr__(self, "gamma", check_real("gamma", self.gamma, low=0.0, high=1.0))

    def __call__(self, k: int) -> float:
        return self.a * (self.b + k) ** (-self.gamma)


@dataclass(frozen=True)
class Sequence:
    """eta_k = values[k]: one step size per local step, each finite and > 0."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", check_step_sizes("step_size", self.values))

    def __call__(self, k: int) -> float:
        if k >= len(self.values):
            raise ValueError(
                f"step_size: the sequence has {len(self.values)} values but step {k} was requested; "
                "give at least one value per local step of the run"
            )
        return self.values[k]


def as_schedule(step_size, problem=None) -> Callable[[int], float]:
    """Turn ``step_size`` into a schedule.

    Accepts a positive number, ``"paper"`` (Thm 5.8's decay, using the problem's smoothness
    L and convexity m), a sequence of numbers, or a callable k -> eta_k.
    """
    if isinstance(step_size, str):
        if step_size.lower() in ("paper", "decay", "thm5.8"):
            L = getattr(problem, "smoothness", None)
            m = getattr(problem, "convexity", None)
            if L is None or m is None:
                raise ValueError(
                    "step_size='paper' needs a problem with known smoothness L and convexity m; "
                    "use PaperDecay(smoothness=L, convexity=m) or a number"
                )
            return PaperDecay(L, m)
        raise ValueError(f"step_size must be a positive number, 'paper', a sequence or a callable; got {step_size!r}")
    if isinstance(step_size, (Constant, PaperDecay, Polynomial, Sequence)) or callable(step_size):
        return step_size
    if isinstance(step_size, (int, float, np.floating, np.integer)) and not isinstance(step_size, bool):
        return Constant(step_size)  # Constant checks the value (finite, > 0, also beyond float range)
    if getattr(step_size, "ndim", None) == 0:  # a 0-d numpy array or torch tensor is a number
        return Constant(step_size)
    if isinstance(step_size, (SequenceT, np.ndarray)) or hasattr(step_size, "tolist"):
        return Sequence(step_size)
    raise ValueError(f"step_size must be a positive number, 'paper', a sequence or a callable; got {step_size!r}")


def step_sizes(schedule: Callable[[int], float], start: int, count: int) -> list[float]:
    """eta_k for k in [start, start + count), validated (finite, > 0) by the package's one
    real-number check: a callable returning a bool or a numeric string is refused."""
    out = []
    for k in range(start, start + count):
        eta = schedule(k)
        if type(eta) is not float:  # the common case needs no check beyond the one below
            eta = check_real(f"step_size at step {k}", eta, low=0.0, low_open=True)
        if not (math.isfinite(eta) and eta > 0):
            raise ValueError(f"step_size at step {k} must be finite and > 0; got {eta!r}")
        out.append(eta)
    return out


def check_schedule(schedule: Any, start: int, count: int) -> None:
    """Every eta_k for k in [start, start + count) is finite and > 0 (ValueError naming step_size).

    Checked before a run starts without keeping the values: built-in schedules are checked
    at their end points (they are monotone), a sequence by its length (its values are
    checked when it is built), and any other callable value by value.
    """
    if count <= 0:
        return
    if isinstance(schedule, (Constant, PaperDecay, Polynomial)):
        step_sizes(schedule, start, 1)
        step_sizes(schedule, start + count - 1, 1)
        return
    if isinstance(schedule, Sequence):  # its values were checked when it was built
        if start + count > len(schedule.values):
            schedule(start + count - 1)  # raises the sequence's own message
        return
    block = 4096
    for first in range(start, start + count, block):
        step_sizes(schedule, first, min(block, start + count - first))


def round_step_sizes(schedule: Callable[[int], float], start: int, local_steps: int, rounds: int,
                     block: int = 256) -> Iterator[list[float]]:
    """The step sizes of ``rounds`` rounds of ``local_steps`` steps from step ``start``, one list
    per round. A :class:`Constant` schedule yields one list again and again; any other is
    evaluated ``block`` rounds at a time (the runner's loop then does no per-step Python)."""
    if isinstance(schedule, Constant):
        etas = [float(schedule.eta)] * local_steps
        for _ in range(rounds):
            yield etas
        return
    k = start
    for first in range(0, rounds, block):
        n = min(block, rounds - first)
        values = [float(schedule(s)) for s in range(k, k + n * local_steps)]
        k += n * local_steps
        for i in range(n):
            yield values[i * local_steps: (i + 1) * local_steps]


class AdaptedSteps:
    """The step sizes of ``step_size="auto"``: piecewise constant in the local-step counter k,
    eta_k = values[i] for starts[i] <= k < starts[i + 1] (the last value for ever after), so a
    pure function of k once warm-up has fixed it (the trace's step sizes and the privacy
    accounting read it like any schedule). ``symbol``: the step's name in the repr (FA-HMC's h sets
    its own; a class attribute, so FA-LD's instances and checkpoints are unchanged)."""

    symbol = "eta"

    def __init__(self, starts=(), values=()) -> None:
        self.starts = [int(k) for k in starts]
        self.values = [float(v) for v in values]

    def set(self, k: int, eta: float) -> None:
        """eta from local step k on (later breakpoints are dropped)."""
        while self.starts and self.starts[-1] >= k:
            self.starts.pop()
            self.values.pop()
        if not self.values or self.values[-1] != eta:
            self.starts.append(int(k))
            self.values.append(float(eta))

    def __call__(self, k: int) -> float:
        if not self.values:
            raise ValueError("step_size='auto': no step size has been estimated yet (run the sampler first)")
        i = bisect.bisect_right(self.starts, int(k)) - 1
        return self.values[max(i, 0)]

    def __repr__(self) -> str:
        if not self.values:
            return "auto"
        return f"auto({self.symbol}={self.values[-1]:.6g} from step {self.starts[-1]}, {len(self.values)} values)"
