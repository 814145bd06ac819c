"""What a private run clips: the privacy records ``RecordLevel(clip=C)`` and ``ClientLevel(clip=C)``.

A record says which datasets are neighbours (``adjacency``) and bounds, by clipping, how far
one local step's data term can move when the data change between neighbours; the accountant's
sensitivity is then derived from the clipping norm C (:attr:`RecordLevel.sensitivity`), never
typed by hand.

- **Record level** (``RecordLevel``): neighbouring datasets differ by the substitution of one
  record (one row of one client). Every per-example gradient g_i = grad l(theta; x_i) of the
  negative log-likelihood is clipped to L2 norm at most C before the batch's sum is formed:
  clip_C(g) = g min(1, C / ||g||). Substituting record x_i by x_i' changes the clipped sum by
  clip_C(g_i) - clip_C(g_i'), of norm at most ||clip_C(g_i)|| + ||clip_C(g_i')|| <= 2C (the
  triangle inequality; equality for two opposite gradients of norm >= C). Sensitivity 2C.
- **Client level** (``ClientLevel``): neighbouring datasets differ in one client's whole data
  (the federated-learning convention of DP-FedAvg). The client's scaled likelihood-gradient
  sum s_c = (1/p_c)(n_c/b) sum_i g_i (its whole data term of one local step) is clipped to
  norm at most C; replacing the client's data replaces clip_C(s_c) by clip_C(s_c'), a change
  of norm at most 2C. Sensitivity 2C.

In both cases the prior's gradient is public (it does not depend on the data) and is not
clipped. The problems apply a record with
:meth:`fedlangevin.problems.FederatedProblem.private_grad`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, ClassVar

from fedlangevin._validation import check_int, check_real

__all__ = ["ClientLevel", "RecordLevel", "check_privacy"]

#: largest clipping norm accepted: its sensitivity 2C is then a finite float
MAX_CLIP = sys.float_info.max / 2
#: default rounds of a budget's private start (``start_rounds``)
START_ROUNDS = 50


def _check_clip(value: Any) -> float:
    """C as a float: a finite real number in (0, MAX_CLIP] (so that 2C is finite); a bool, a
    string, NaN, an infinity or a number <= 0 is a ValueError naming ``clip``."""
    return check_real("clip", value, low=0.0, high=MAX_CLIP, low_open=True)


def _check_budget(record) -> None:
    """The clip, or a budget (epsilon with delta), checked; the quantile in (0, 1)."""
    clip, eps, delta = record.clip, record.epsilon, record.delta
    if clip is None and eps is None:
        raise ValueError(f"{type(record).__name__}: give clip=C (a clip you choose) or a budget epsilon=..., "
                         "delta=... (the run then plans its step size, clip and start within it)")
    if clip is not None:
        object.__setattr__(record, "clip", _check_clip(clip))
    if eps is not None or delta is not None:
        if eps is None or delta is None:
            raise ValueError("epsilon and delta: give both (the budget (epsilon, delta)) or neither")
        object.__setattr__(record, "epsilon", check_real("epsilon", eps, low=0.0, low_open=True))
        object.__setattr__(record, "delta", check_real("delta", delta, low=0.0, high=1.0, low_open=True,
                                                       high_open=True))
    object.__setattr__(record, "quantile", check_real("quantile", record.quantile, low=0.0, high=1.0,
                                                      low_open=True, high_open=True))
    object.__setattr__(record, "start_rounds", check_int("start_rounds", record.start_rounds, 1))
    object.__setattr__(record, "spent", tuple(tuple(r) for r in record.spent))


def _sensitivity(record) -> float:
    if record.clip is None:
        raise ValueError(f"{record!r} has no clip yet: a budgeted run chooses it privately when it starts "
                         "(see docs/privacy.md)")
    return 2.0 * record.clip


def _repr(record) -> str:
    parts = [f"clip={record.clip!r}"] if record.clip is not None else []
    if record.epsilon is not None:
        parts += [f"epsilon={record.epsilon!r}", f"delta={record.delta!r}"]
        if record.quantile != 0.9:
            parts.append(f"quantile={record.quantile!r}")
        if record.start_rounds != START_ROUNDS:
            parts.append(f"start_rounds={record.start_rounds!r}")
    return f"{type(record).__name__}({', '.join(parts)})"


class _Mechanism:
    """What both records share: the checks of the clip or the budget, ``budgeted`` and the repr
    (only the fields given)."""

    def __post_init__(self) -> None:
        _check_budget(self)

    @property
    def budgeted(self) -> bool:
        """A budget (epsilon, delta) was given: the run plans itself within it."""
        return self.epsilon is not None

    def __repr__(self) -> str:
        return _repr(self)


@dataclass(frozen=True, repr=False)
class RecordLevel(_Mechanism):
    """Record-level differential privacy: neighbours differ by one substituted record.

    Parameters
    ----------
    clip : C, a finite real number > 0 (at most about 9e307, so that 2C is finite): every
        per-example gradient of the negative log-likelihood is clipped to L2 norm <= C in
        every local step, before the batch's sum is formed and scaled. Optional with a budget.

    epsilon, delta : a budget instead of (or beside) a clip: ``FALD(problem,
        privacy=RecordLevel(epsilon=2, delta=1e-5))`` plans its step size for the rounds and
        chains it runs (every chain released counts), starts from a noisy federated MAP search
        and, without a clip, clips at a private ``quantile`` of the gradient norms tracked in
        that search (:mod:`fedlangevin.privacy.start`); ``trace.privacy(delta=delta)`` then
        reports epsilon <= the budget for everything released (docs/privacy.md).
    quantile : the fraction of gradient norms the private clip leaves unclipped, in (0, 1)
        (default 0.9: a sampler's stationary law moves with every clipped gradient, so the clip
        sits above most norms; the median, Andrew et al.'s choice for training, moved a logistic
        regression's clipped mode by 60% of the mode's norm in the tests). The sampling's noise
        multiplier at the public step does not depend on the clip, so a larger quantile costs
        little epsilon.
    start_rounds : the rounds of the private start (the noisy federated MAP search), >= 1
        (default :data:`START_ROUNDS` = 50). Its share of the budget is the same for any number of
        rounds (a full-batch Gaussian mechanism T times at noise multiplier z costs what it costs
        once at z / sqrt(T)), so more rounds buy more steps, each noisier: on the full
        Fashion-MNIST 200 rounds raised the start's test accuracy from 0.792 to 0.822 at
        epsilon = 8 and from 0.686 to 0.718 at epsilon = 0.5; on the full MNIST they cost 0.3
        points at epsilon = 2 (docs/privacy-utility.md). The start's time grows with its rounds.
    spent : set by the plan: the releases before sampling (the start), as plain records
        (:class:`fedlangevin.privacy.planning.Release`), composed by ``trace.privacy``.

    :attr:`sensitivity` = 2C, the L2 sensitivity of the clipped gradient sum under the
    substitution of one record (see the module docstring for the derivation).
    """

    clip: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    quantile: float = 0.9
    start_rounds: int = START_ROUNDS
    spent: tuple = ()
    adjacency: ClassVar[str] = "record"

    @property
    def sensitivity(self) -> float:
        """2C: ||clip_C(g) - clip_C(g')|| <= ||clip_C(g)|| + ||clip_C(g')|| <= 2C for the
        per-example gradients g, g' of the substituted record before and after."""
        return _sensitivity(self)


@dataclass(frozen=True, repr=False)
class ClientLevel(_Mechanism):
    """Client-level differential privacy: neighbours differ in one client's whole data.

    Parameters
    ----------
    clip : C, a finite real number > 0 (at most about 9e307, so that 2C is finite): each
        client's scaled likelihood-gradient sum (its data term, (1/p_c)(n_c/b) times the
        batch's gradient sum) is clipped to L2 norm <= C in every local step. Optional with a budget.
    epsilon, delta, quantile, start_rounds, spent : as :class:`RecordLevel`'s.

    :attr:`sensitivity` = 2C, the L2 sensitivity of the clipped data term under the
    replacement of one client's data (see the module docstring for the derivation).
    """

    clip: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    quantile: float = 0.9
    start_rounds: int = START_ROUNDS
    spent: tuple = ()
    adjacency: ClassVar[str] = "client"

    @property
    def sensitivity(self) -> float:
        """2C: the clipped data terms of the two neighbouring datasets both have norm <= C, so
        they differ by at most 2C (triangle inequality)."""
        return _sensitivity(self)


def check_privacy(value: Any, name: str = "privacy") -> RecordLevel | ClientLevel:
    """``value`` if it is a :class:`RecordLevel` or :class:`ClientLevel` record; otherwise a
    ValueError naming ``name`` and what it accepts (the records validate ``clip`` themselves)."""
    if isinstance(value, (RecordLevel, ClientLevel)):
        return value
    raise ValueError(
        f"{name} must be fedlangevin.privacy.RecordLevel(clip=C) or fedlangevin.privacy.ClientLevel(clip=C) "
        f"with C > 0; got {value!r}"
    )
