"""FA-LD's checkpoint record (its entries beside the runner's) and :meth:`fedlangevin.FALD.resume`,
on the shared readers of :mod:`fedlangevin.runner.resume`."""

from __future__ import annotations

from typing import Any

from fedlangevin._validation import check_bool, check_path
from fedlangevin.corrections import drift
from fedlangevin.fald.kernel import FALDState
from fedlangevin.federation.preconditioning import preconditioner_from_record, preconditioner_record
from fedlangevin.runner.io import checkpoint as ckpt
from fedlangevin.runner.io.records import RECORD_KIND, RECORD_VERSION
from fedlangevin.runner.resume import (
    encoded_or_none, load_record, main_path, mechanism, pending_run, reading, resume_device, resume_generator,
    resume_participation, resume_problem, resume_schedule, resume_state,
)
from fedlangevin.runner.results.ledger import Ledger
from fedlangevin.warmup import companions, local_steps, session

__all__ = ["fald_record", "resume_sampler"]


def fald_record(sampler: Any) -> dict:
    """FA-LD's own entries of its checkpoint record (:mod:`fedlangevin.runner.io.records`)."""
    return {
        "kind": RECORD_KIND,
        "version": RECORD_VERSION,
        "participation": encoded_or_none(sampler.participation),
        "participation_repr": repr(sampler.participation),
        "preconditioner": None if sampler.preconditioner is None
        else ckpt.encode(preconditioner_record(sampler.preconditioner)),
        "adapted": bool(sampler.adapted),
        "adaptation": None if sampler.adapter is None else ckpt.encode(sampler.adapter.record()),
        "correction": ckpt.encode(drift.record(sampler.correction, sampler.state.correction)),
        "local_bias": ckpt.encode({**local_steps.record(sampler), "companions": companions.record(sampler)}),
    }


def resume_sampler(cls, path, *, problem=None, step_size=None, participation=None, device=None, fallback=False,
                   transport=None, correction=None, preconditioner=None):
    """``cls.resume(path, ...)`` (:meth:`fedlangevin.FALD.resume`, which documents the arguments): the
    sampler rebuilt from the checkpoint's settings, then its state, stream, ledger, correction,
    preconditioner and adaptation, and the unfinished run, put back."""
    path, fallback = check_path("path", path), check_bool("fallback", fallback)
    record, used, settings = load_record(path, fallback)  # its entries' structure is checked there
    with reading(used):  # what the record's checks cannot see is still a CheckpointError naming the file
        problem = resume_problem(record, used, problem)
        schedule = resume_schedule(record, step_size, problem)
        rule = resume_participation(record, participation)
        saved_device, new_device = resume_device(settings, device)
    with reading(used):  # a ValueError here is about the correction given (or missing), not the file
        stored_correction = (ckpt.decode(record.get("correction")) or {}).get("settings")
        correction = drift.correction_from_record(stored_correction, correction)
    with reading(used, values=True):  # local_steps="auto"'s rule and the check (a checkpoint without them: off)
        stored_steps = ckpt.decode(record.get("local_bias"))
        auto = None if stored_steps is None or stored_steps["rule"] is None else (
            local_steps.AutoLocalSteps.from_record(stored_steps["rule"]))
        check = False if stored_steps is None else bool(stored_steps["check"])
    with reading(used, values=True):  # the arguments given are checked: a ValueError here is the file's
        sampler = cls(
            problem, step_size=schedule, local_steps=settings["local_steps"] if auto is None else auto,
            temperature=settings["temperature"], check_local_bias=check,
            correlation=settings["correlation"], participation=rule, chains=settings["chains"],
            batch_size=settings["batch_size"], device=new_device, dtype=settings["dtype"], seed=settings["seed"],
            noise_dtype=settings["noise_dtype"], streams=settings.get("streams", "single"), transport=transport,
            adapt=bool(settings.get("adapt", False)), correction=correction, privacy=mechanism(settings),
        )
        saved, sampler.active = resume_state(record, used, problem.dim, sampler.device, sampler.dtype)
        sampler.state = FALDState(theta=saved.theta, step=saved.step, round=saved.round)
        resume_generator(sampler.generator, record, saved_device, new_device, sampler.seed)
        sampler.ledger = Ledger.from_record(ckpt.decode(record["ledger"]))
        cstate = drift.restored(ckpt.decode(record.get("correction")), sampler.device, sampler.dtype)
        sampler._apply(session.Changes(correction=cstate))
    with reading(used):
        stored = {k: ckpt.decode(record.get(k)) for k in ("preconditioner", "adapted", "adaptation")}
    for entry in (stored["preconditioner"], (stored["adaptation"] or {}).get("preconditioner")):
        if isinstance(entry, dict) and entry.get("kind") == "user":  # the user's own class: given again, and checked
            preconditioner_from_record(entry, preconditioner)
    with reading(used, values=True):
        (sampler.preconditioner, sampler.adapted, sampler.preconditioner_norm,
         sampler.adapter) = session.restore(problem, stored, settings, preconditioner, privacy=sampler.privacy)
        k, anchor, sampler.measurement, sampler.local_step_bias = local_steps.restore(stored_steps)
        sampler.companions = companions.restore((stored_steps or {}).get("companions"), sampler.device, sampler.dtype)
        sampler.local_steps = sampler.local_steps if k is None else k
        sampler.anchor = (0, 0) if anchor is None else anchor
    main = main_path(used)
    sampler._writer.resumed(record, main)
    sampler._pending = pending_run(sampler, record["run"], main, used, transport)
    return sampler
