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
from fedlangevin.federation.participation import Full
from fedlangevin.warmup.adaptation import DENSE_MAX_DIM
from fedlangevin.warmup.mode import global_energy
from fedlangevin.warmup.session import Changes

__all__ = ["AUTO", "CORRECTIONS", "as_correction", "auto_choice", "check_private", "resolve", "build", "correction_from_record", "init", "keep_chains",
           "per_round_floats", "record", "restored"]

#: the names ``FALD(..., correction=...)`` accepts, and their settings records
CORRECTIONS = {"control_variates": ControlVariates, "conducive": Conducive, "qlsd++": QLSDPlusPlus}


#: the default of ``correction=``: control variates where the run's setting needs them (:func:`auto_choice`)
AUTO = "auto"


def auto_choice(problem, *, private: bool, participation: Any, batch_size: int | None, local_steps: Any,
                one_process: bool, init: Any = None) -> tuple[Any, str]:
    """What ``correction="auto"`` runs, and why: :class:`ControlVariates` (``docs/realistic.md``) where the
    run's setting adds gradient noise that they remove, else None. Control variates when all hold:

    - a random setting: a participation rule other than :class:`~fedlangevin.federation.participation.Full`,
      or minibatch gradients (``batch_size``); with every client and full batches there is no noise to take out;
    - the rule's calibrated noise (``noise="paper"`` reproduces the paper's scheme as it ran, Fig. 2);
    - not private (the reference gradients are released without noise);
    - one process holding every client (no transport, ``streams="single"``);
    - a fixed K = 1: a fixed K > 1 is checked against K = 1 companions of the sampler's own rounds and
      ``local_steps="auto"`` measures them, neither of which runs a correction;
    - a reference point the run can find: ``init="map"``'s mode, d <= ``DENSE_MAX_DIM`` (the Newton
      search) or the problem's energy (the L-BFGS search).

    Returns (the settings record or None, the reason in words)."""
    if batch_size is None and isinstance(participation, Full):
        return None, "every client and full-batch gradients: no client-sampling or minibatch noise"
    if not isinstance(participation, Full) and getattr(participation, "noise", "calibrated") == "paper":
        return None, "the participation rule's noise='paper' (the paper's scheme as it ran)"
    if private:
        return None, "a private run (the reference gradients would leave the clients without noise)"
    if not one_process:
        return None, "a transport or streams='per_client' (corrections run in one process)"
    if isinstance(local_steps, str) or int(local_steps) != 1:
        return None, f"local_steps={local_steps!r} (its check compares the sampler's own uncorrected rounds)"
    searchable = (isinstance(init, str) and init == "map") or problem.dim <= DENSE_MAX_DIM
    if not searchable and global_energy(problem) is None:
        return None, f"no energy for the reference search at d = {problem.dim} (give correction=ControlVariates(reference=...))"
    return ControlVariates(), "random participation or minibatches: control variates take out their noise"


def resolve(correction: Any, problem, **setting: Any) -> Any:
    """``correction`` as a settings record or None: ``"auto"`` through :func:`auto_choice` (``setting``: its
    keywords), anything else through :func:`as_correction`."""
    if isinstance(correction, str) and correction == AUTO:
        return auto_choice(problem, **setting)[0]
    return as_correction(correction)


def check_private(correction: Any) -> None:
    """A private run takes no drift correction (``None`` or ``"auto"``, which resolves to none there):
    ``ValueError`` otherwise, before any work."""
    if correction is not None and not (isinstance(correction, str) and correction == AUTO):
        raise ValueError("privacy: a drift correction releases noiseless data-dependent quantities (reference "
                         "gradients, surrogates, memories); run without correction= (its default 'auto' runs none "
                         "in a private run)")


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
        f"correction must be None, 'auto', one of {', '.join(repr(c) for c in CORRECTIONS)}, ControlVariates(...), "
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
