"""The runner's side of the drift corrections: ``FALD(..., correction=...)``.

Maps the argument to a settings record (:class:`~fedlangevin.fald.corrections.control_variates.ControlVariates`,
:class:`~fedlangevin.fald.corrections.conducive.Conducive`, :class:`~fedlangevin.fald.corrections.qlsd.QLSDPlusPlus`),
builds the kernel's side once, sets up the correction's state before the first round (the
one-off set-up, e.g. a reference-point search, runs there and is counted in the ledger), and
stores and restores the settings and state in checkpoints. See
:mod:`fedlangevin.fald.corrections.base` and ``docs/drift.md``.
"""

from __future__ import annotations

from typing import Any

import torch

from fedlangevin.fald.corrections.conducive import Conducive
from fedlangevin.fald.contracts import CORRECTION_SETTINGS, DRIFT_CORRECTION, check_conforms
from fedlangevin.fald.corrections.control_variates import ControlVariates
from fedlangevin.fald.corrections.base import SetupCost
from fedlangevin.fald.corrections.qlsd import QLSDPlusPlus

__all__ = ["CORRECTIONS", "as_correction", "configure", "correction_from_record", "ensure_state", "keep_chains",
           "per_round_floats", "record", "restore_state", "settings_fields"]

#: the names ``FALD(..., correction=...)`` accepts, and their settings records
CORRECTIONS = {"control_variates": ControlVariates, "conducive": Conducive, "qlsd++": QLSDPlusPlus}


def as_correction(correction: Any):
    """A settings record from ``None``, a name of :data:`CORRECTIONS` (default settings) or a
    record — a built-in one, or an object of your own implementing the correction contract
    (:data:`~fedlangevin.fald.contracts.CORRECTION_SETTINGS`) — returned as it is; ``ValueError``
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
        f"(fedlangevin.fald.contracts.CORRECTION_SETTINGS); got {correction!r}"
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
        return CORRECTIONS[kind](**fields)
    if given is None:
        raise ValueError(f"correction: the checkpoint ran with a drift correction of your own ({kind!r}); give it "
                         "again: FALD.resume(path, correction=...)")
    given = as_correction(given)
    if given.record() != dict(stored):
        raise ValueError(f"correction: the given correction's record {given.record()!r} differs from the "
                         f"checkpoint's {dict(stored)!r}")
    return given


def configure(sampler, correction: Any) -> None:
    """Set ``sampler.correction`` (the settings record) and ``sampler.built_correction`` (the
    kernel's side), refusing the combinations that are not supported, before any work."""
    setting = as_correction(correction)
    sampler.correction, sampler.built_correction = setting, None
    if setting is None:
        return
    if sampler.transport is not None or sampler.streams != "single":
        raise ValueError("correction: drift corrections run in one process with streams='single' (not with a "
                         "transport or streams='per_client')")
    if isinstance(setting, QLSDPlusPlus) and sampler.upload is not None and not hasattr(sampler.upload, "bits"):
        raise ValueError("correction='qlsd++' with an upload codec needs a quantising codec of the form "
                         "theta + Q(beta - theta) with bits(d) (e.g. QuantizedUpdateUpload)")
    if setting.active:  # switched off (strength 0, memory rate 0, flat surrogates): FA-LD's kernel, fast paths included
        sampler.built_correction = check_conforms(
            setting.build(sampler.problem, dtype=sampler.dtype, device=sampler.device, upload=sampler.upload),
            DRIFT_CORRECTION, "correction")


def ensure_state(sampler) -> None:
    """Before the first round: the correction's state from the current global parameters, and
    its set-up's rounds and floats in the ledger (a resumed sampler has its state already). The
    mode found by ``init="map"`` serves as the reference point when none was given: the
    correction does not search again."""
    built = sampler.built_correction
    if built is None or sampler.state.correction is not None:
        return
    state = sampler.state
    found = getattr(sampler, "map_result", None)
    cstate = built.init(state.theta) if found is None else built.init(state.theta, mode=found.theta)
    sampler.state = type(state)(theta=state.theta, step=state.step, round=state.round, correction=cstate)
    led, cost = sampler.ledger, getattr(built, "cost", None) or SetupCost()
    led["correction_rounds"] = led.get("correction_rounds", 0) + cost.rounds
    led["setup_floats"] = led.get("setup_floats", 0.0) + cost.floats_down
    led["setup_floats_up"] = led.get("setup_floats_up", 0.0) + cost.floats_up


def settings_fields(sampler) -> dict:
    """The :class:`~fedlangevin.fald.results.settings.Settings` fields of the correction: its repr and
    what it releases besides FA-LD's uploads ("" without one or switched off)."""
    if sampler.correction is None:
        return {"correction": "none", "correction_releases": ""}
    releases = "" if sampler.built_correction is None else sampler.correction.releases
    return {"correction": repr(sampler.correction), "correction_releases": releases}


def per_round_floats(sampler) -> tuple[float, float]:
    """Extra floats of the correction: (per upload, per round down), zero without one."""
    if sampler.built_correction is None:
        return 0.0, 0.0
    return sampler.correction.per_round_floats(sampler.problem.num_clients, sampler.problem.dim)


def keep_chains(sampler, cstate: dict | None, rows: torch.Tensor) -> dict | None:
    """The correction state of the chains ``rows`` (a boolean mask) after others diverged."""
    return None if cstate is None else sampler.built_correction.keep(cstate, rows)


def record(sampler) -> dict | None:
    """The checkpoint entry: the settings record and the state's tensors (on the CPU)."""
    if sampler.correction is None:
        return None
    cstate = sampler.state.correction
    tensors = None if cstate is None else {k: v.detach().cpu().clone() for k, v in cstate.items()}
    stored = sampler.correction.record()
    return {"settings": stored, "state": tensors}


def restore_state(sampler, entry: dict | None) -> None:
    """Put a checkpoint's correction state (:func:`record`) into a resumed sampler."""
    if entry is None or entry.get("state") is None:
        return
    cstate = {k: v.to(device=sampler.device, dtype=sampler.dtype) for k, v in entry["state"].items()}
    state = sampler.state
    sampler.state = type(state)(theta=state.theta, step=state.step, round=state.round, correction=cstate)
