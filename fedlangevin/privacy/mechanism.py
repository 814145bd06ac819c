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

from fedlangevin._validation import check_real

__all__ = ["ClientLevel", "RecordLevel", "check_privacy"]

#: largest clipping norm accepted: its sensitivity 2C is then a finite float
MAX_CLIP = sys.float_info.max / 2


def _check_clip(value: Any) -> float:
    """C as a float: a finite real number in (0, MAX_CLIP] (so that 2C is finite); a bool, a
    string, NaN, an infinity or a number <= 0 is a ValueError naming ``clip``."""
    return check_real("clip", value, low=0.0, high=MAX_CLIP, low_open=True)


@dataclass(frozen=True)
class RecordLevel:
    """Record-level differential privacy: neighbours differ by one substituted record.

    Parameters
    ----------
    clip : C, a finite real number > 0 (at most about 9e307, so that 2C is finite): every
        per-example gradient of the negative log-likelihood is clipped to L2 norm <= C in
        every local step, before the batch's sum is formed and scaled.

    :attr:`sensitivity` = 2C, the L2 sensitivity of the clipped gradient sum under the
    substitution of one record (see the module docstring for the derivation).
    """

    clip: float
    adjacency: ClassVar[str] = "record"

    def __post_init__(self) -> None:
        object.__setattr__(self, "clip", _check_clip(self.clip))

    @property
    def sensitivity(self) -> float:
        """2C: ||clip_C(g) - clip_C(g')|| <= ||clip_C(g)|| + ||clip_C(g')|| <= 2C for the
        per-example gradients g, g' of the substituted record before and after."""
        return 2.0 * self.clip


@dataclass(frozen=True)
class ClientLevel:
    """Client-level differential privacy: neighbours differ in one client's whole data.

    Parameters
    ----------
    clip : C, a finite real number > 0 (at most about 9e307, so that 2C is finite): each
        client's scaled likelihood-gradient sum (its data term, (1/p_c)(n_c/b) times the
        batch's gradient sum) is clipped to L2 norm <= C in every local step.

    :attr:`sensitivity` = 2C, the L2 sensitivity of the clipped data term under the
    replacement of one client's data (see the module docstring for the derivation).
    """

    clip: float
    adjacency: ClassVar[str] = "client"

    def __post_init__(self) -> None:
        object.__setattr__(self, "clip", _check_clip(self.clip))

    @property
    def sensitivity(self) -> float:
        """2C: the clipped data terms of the two neighbouring datasets both have norm <= C, so
        they differ by at most 2C (triangle inequality)."""
        return 2.0 * self.clip


def check_privacy(value: Any, name: str = "privacy") -> RecordLevel | ClientLevel:
    """``value`` if it is a :class:`RecordLevel` or :class:`ClientLevel` record; otherwise a
    ValueError naming ``name`` and what it accepts (the records validate ``clip`` themselves)."""
    if isinstance(value, (RecordLevel, ClientLevel)):
        return value
    raise ValueError(
        f"{name} must be fedlangevin.privacy.RecordLevel(clip=C) or fedlangevin.privacy.ClientLevel(clip=C) "
        f"with C > 0; got {value!r}"
    )
