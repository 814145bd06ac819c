"""FA-HMC's drift correction: VR-FALD*'s control variates, built into the problem its kernel runs on.

``FAHMC(..., correction=...)`` takes ``None``, ``"auto"`` (the default), ``"control_variates"`` or a
:class:`~fedlangevin.corrections.control_variates.ControlVariates` record. Control variates add to client
c's gradient the constant c_c = grad f(theta*) - grad f^c(theta*) (and centre its minibatches at theta*),
so every kick of every leapfrog step sees the corrected force: the kernel runs on
:class:`~fedlangevin.problems.CentredClients` (``docs/realistic.md``). The constants sum to zero under
the client weights, so the global energy and gradient the warm-up reads are the problem's own.
``"auto"`` resolves as FA-LD's (:func:`fedlangevin.corrections.drift.auto_choice`): control variates
under random participation or minibatches at K = 1 in one process, not in a private run.
The corrections that carry per-round state (conducive gradients, QLSD++'s memories) are FA-LD's.
"""

from __future__ import annotations

from typing import Any

from fedlangevin.corrections import drift
from fedlangevin.corrections.base import SetupCost
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.problems.centred import CentredClients

__all__ = ["centre", "record", "resolve", "restore"]


def resolve(correction: Any, problem, *, privacy: Any, participation: Any, batch_size: int | None, local_steps: Any,
            transport: Any, init: Any) -> ControlVariates | None:
    """The run's control variates, or None; ``ValueError`` (before any work) for a correction FA-HMC
    does not run, for one in a private run and for one with a transport."""
    if privacy is not None:
        drift.check_private(correction)
    chosen = drift.resolve(correction, problem, private=privacy is not None, participation=participation,
                           batch_size=batch_size, local_steps=local_steps, one_process=transport is None, init=init)
    if chosen is None:
        return None
    if not isinstance(chosen, ControlVariates):
        raise ValueError(f"correction: FA-HMC runs control variates ('control_variates' or ControlVariates(...)), a "
                         f"constant per client added to the force of every kick; {chosen!r} carries per-round state "
                         "that is FA-LD's only (FALD(..., correction=...))")
    if transport is not None:
        raise ValueError("correction: control variates run in one process (not with a transport)")
    return chosen


def centre(setting: ControlVariates, problem, map_result: Any = None) -> tuple[CentredClients, SetupCost]:
    """The kernel's problem with the control variates and the set-up's rounds and floats (the mode of
    ``init="map"``, ``map_result``, serves as theta* when none is given: no second search)."""
    return setting.centre(problem, None if map_result is None else map_result.theta)


def record(setting: ControlVariates | None, centred: CentredClients | None) -> dict | None:
    """The checkpoint's entry: theta*, the strength and the minibatch flag (None without a correction)."""
    return None if setting is None else {"search_rounds": setting.search_rounds, **centred.record()}


def restore(stored: dict | None, problem) -> tuple[ControlVariates | None, CentredClients | None]:
    """The settings and the kernel's problem from a checkpoint's entry (the stored theta*: no search)."""
    if stored is None:
        return None, None
    fields = dict(stored)
    setting = ControlVariates(reference=fields["reference"], strength=fields["strength"],
                              search_rounds=fields["search_rounds"], minibatches=fields["minibatches"])
    return setting, CentredClients(problem, fields["reference"], strength=setting.strength,
                                   minibatches=setting.minibatches)
