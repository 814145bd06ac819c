"""The ledger: a sampler's cumulative counters since it was created (across runs and resumes).

The one communication counter of a run (``sampler.communication`` and every trace's
``communication`` are derived from it) and the step-size sums the privacy accounting reads. A
typed record with a fixed set of fields; it also reads and writes as the mapping of earlier
versions (``ledger["rounds"]``, ``ledger.get("setup_floats", 0.0)``, ``dict(ledger)``), which is
how checkpoints store it.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, fields
from typing import Any, Iterator

__all__ = ["Ledger"]


@dataclass(eq=True)
class Ledger(MutableMapping):
    """steps : local steps run; rounds : communication rounds; eta_sum, eta_max : the sum and the
    largest of the local step sizes; uploads : client uploads (one per participating client and
    round); setup_floats, setup_floats_up : floats sent down / up once, outside the rounds (a
    preconditioner's broadcast, the mode search of ``init="map"``, a drift correction's set-up);
    map_rounds : the mode search's rounds; correction_rounds : a drift correction's set-up rounds."""

    steps: int = 0
    rounds: int = 0
    eta_sum: float = 0.0
    eta_max: float = 0.0
    uploads: float = 0.0
    setup_floats: float = 0.0
    setup_floats_up: float = 0.0
    map_rounds: int = 0
    correction_rounds: int = 0

    def __getitem__(self, key: str) -> Any:
        if key not in _NAMES:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in _NAMES:
            raise KeyError(f"the ledger has no counter {key!r} (it has {', '.join(_NAMES)})")
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        raise TypeError("ledger counters cannot be removed")

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)

    @classmethod
    def from_record(cls, values: dict) -> "Ledger":
        """From a checkpoint's dictionary (counters a file of an earlier version lacks start at 0);
        a ``ValueError`` naming a counter this version does not know."""
        unknown = sorted(set(values) - set(_NAMES), key=str)
        if unknown:
            raise ValueError(f"ledger: unknown counter(s) {unknown!r:.100}")
        return cls(**values)


_NAMES = tuple(f.name for f in fields(Ledger))
