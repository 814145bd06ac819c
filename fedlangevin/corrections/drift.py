"""The runner's side of the drift corrections: ``FALD(..., correction=...)``.

Maps the argument to a settings record (:class:`~fedlangevin.corrections.control_variates.ControlVariates`,
:class:`~fedlangevin.corrections.conducive.Conducive`, :class:`~fedlangevin.corrections.qlsd.QLSDPlusPlus`),
builds the kernel's side once (:func:`build`), gives the correction's state before the first
round (:func:`init`: the one-off set-up, e.g. a reference-point search, runs there; its rounds
and floats come back as values the runner applies and counts), and stores and restores the
settings and state in checkpoints. Nothing here assigns to the sampler. See
:mod:`fedlangevin.corrections.base` and ``docs/drift.md``.
"""

from __future__ import annotations

from typing import Any

import torch

from fedlangevin.corrections.conducive import Conducive
from fedlangevin.federation.contracts import CORRECTION_SETTINGS, DRIFT_CORRECTION, check_conforms
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.corrections.base import SetupCost
from fedlangevin.corrections.qlsd import QLSDPlusPlus
from fedlangevin.warmup.session import Changes

__all__ = ["CORRECTIONS", "as_correction", "build", "correction_from_record", "init", "keep_chains",
           "per_round_floats", "record", "restored"]

#: the names ``FALD(..., correction=...)`` accepts, and their settings records
CORRECTIONS = {"control_variates": ControlVariates, "conducive": Conducive, "qlsd++": QLSDPlusPlus}


def as_correction(correction: Any):
    """A settings record from ``None``, a name of :data:`CORRECTIONS` (default settings) or a
    record — a built-in one, or an object of your own implementing the correction contract
    (:data:`~fedlangevin.federation.contracts.CORRECTION_SETTINGS`) — returned as it is; ``ValueError``
    otherwise (naming what a record of your own lacks)."""
    if correction is None or isinstance(correction, tuple(CORRECTIONS.values())):
        return correction
    if isinstance(correction, str) and correction in CORRECTIONS:
        return CORRECTIONS[correction]()
    if not isinstance(correction, (str, type)) and callable(getattr(correction, "build", None)):
        check_conforms(correction, CORRECTION_SETTINGS, "correction")
        stored = correction.record()
        if not isinstance(stored, dict) or not isinstance(stored.get("kind"), str) or stored["kind"] in CORRECTIONS:
            raise ValueError(f"correction: record() of {type(correction).__name__} must return a dict whose 'kind' is "
                             f"a string naming it (not one of the built-in {', '.join(CORRECTIONS)}); got {stored!r}")
        return correction
    raise ValueError(
        f"correction must be None, one of {', '.join(repr(c) for c in CORRECTIONS)}, ControlVariates(...), "
        f"Conducive(...), QLSDPlusPlus(...), or an object implementing the correction contract "
        f"(fedlangevin.federation.contracts.CORRECTION_SETTINGS); got {correction!r}"
    )


def correction_from_record(stored: dict | None, given: Any = None):
    """The settings record a checkpoint stored (:func:`record`), or None. A built-in correction is
    rebuilt from its values; one of your own class is never built from a file (no code is loaded
    from a checkpoint): it must be ``given`` again (``FALD.resume(path, correction=...)``) and its
    ``record()`` must equal the stored one."""
    if stored is None:
        if given is not None:
            raise ValueError("correction: the checkpoint's run had no drift correction; do not give one to resume")
        return None
    fields = dict(stored)
    kind = fields.pop("kind", None)
    if not isinstance(kind, str):  # a malformed record (the reader makes this a CheckpointError naming the file)
        raise TypeError(f"the correction's settings record names no kind: {dict(stored)!r}")
    if kind in CORRECTIONS:
        if kind == "control_variates":  # a checkpoint written before minibatches were centred ran them plain
            fields.setdefault("minibatches", False)
        return CORRECTIONS[kind](**fields)
    if given is None:
        raise ValueError(f"correction: the checkpoint ran with a drift correction of your own ({kind!r}); give it "
                         "again: FALD.resume(path, correction=...)")
    given = as_correction(given)
    if given.record() != dict(stored):
        raise ValueError(f"correction: the given correction's record {given.record()!r} differs from the "
                         f"checkpoint's {dict(stored)!r}")
    return given


def build(setting: Any, problem, dtype, device, upload) -> Any:
    """The kernel's side of the correction ``setting`` (a checked settings record, or None), built
    once; None without one or when it is switched off (strength 0, memory rate 0, flat
    surrogates: FA-LD's kernel, fast paths included)."""
    if setting is None or not setting.active:
        return None
    return check_conforms(setting.build(problem, dtype=dtype, device=device, upload=upload), DRIFT_CORRECTION,
                          "correction")


def init(built: Any, theta: torch.Tensor, map_result: Any = None) -> Changes:
    """Before the first round: the correction's state at the global parameters ``theta`` and its
    set-up's rounds and floats, as :class:`~fedlangevin.warmup.session.Changes` the runner
    applies. The mode found by ``init="map"`` (``map_result``) serves as the reference point when
    none was given: the correction does not search again."""
    cstate = built.init(theta) if map_result is None else built.init(theta, mode=map_result.theta)
    cost = getattr(built, "cost", None) or SetupCost()
    return Changes(correction=cstate, floats_down=cost.floats_down, floats_up=cost.floats_up,
                   rounds={"correction_rounds": cost.rounds})


def per_round_floats(setting: Any, built: Any, num_clients: int, dim: int) -> tuple[float, float]:
    """Extra floats of the correction: (per upload, per round down), zero without one."""
    if built is None:
        return 0.0, 0.0
    return setting.per_round_floats(num_clients, dim)


def keep_chains(built: Any, cstate: dict | None, rows: torch.Tensor) -> dict | None:
    """The correction state of the chains ``rows`` (a boolean mask) after others diverged."""
    return None if cstate is None else built.keep(cstate, rows)


def record(setting: Any, cstate: dict | None) -> dict | None:
    """The checkpoint entry: the settings record and the state's tensors (on the CPU)."""
    if setting is None:
        return None
    tensors = None if cstate is None else {k: v.detach().cpu().clone() for k, v in cstate.items()}
    return {"settings": setting.record(), "state": tensors}


def restored(entry: dict | None, device, dtype) -> dict | None:
    """A checkpoint's correction state (:func:`record`) on ``device`` in ``dtype`` (None: none stored)."""
    if entry is None or entry.get("state") is None:
        return None
    return {k: v.to(device=device, dtype=dtype) for k, v in entry["state"].items()}
