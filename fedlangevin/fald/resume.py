"""FA-LD's checkpoint record (its entries beside the runner's) and :meth:`fedlangevin.FALD.resume`,
on the shared readers of :mod:`fedlangevin.runner.resume`."""

from __future__ import annotations

from typing import Any

from fedlangevin._validation import check_bool, check_path
from fedlangevin.corrections import drift
from fedlangevin.fald.kernel import FALDState
from fedlangevin.fald.config import check_private
from fedlangevin.federation.participation import as_participation
from fedlangevin.federation.preconditioning import preconditioner_from_record, preconditioner_record
from fedlangevin.runner.io import checkpoint as ckpt
from fedlangevin.runner.io.records import RECORD_KIND, RECORD_VERSION
from fedlangevin.runner.resume import (
    encoded_or_none, load_record, main_path, mechanism, pending_run, reading, resume_device, resume_generator,
    resume_participation, resume_problem, resume_schedule, resume_state, schedule_differs,
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
    with reading(used, values=True):
        private = mechanism(settings)
    if private is not None:
        keep_private(private, record, step_size, participation)
    with reading(used):  # what the record's checks cannot see is still a CheckpointError naming the file
        problem = resume_problem(record, used, problem)
        schedule = resume_schedule(record, step_size, problem)
        rule = resume_participation(record, participation)
        saved_device, new_device = resume_device(settings, device)
    unfinished = record["run"] is not None and not record["run"]["finished"]
    if private is not None and step_size is not None and unfinished and schedule_differs(record, schedule):
        raise ValueError(
            f"step_size: the checkpoint holds an unfinished private run ({private}), whose privacy accounting reads "
            "the step sizes of all its rounds from one schedule, those before the checkpoint included; a new step "
            "size would account them at its values, not those they ran with. Resume without step_size (or with "
            "the run's own), or finish the run and change the step size for a later one")
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
    if private is None and isinstance(stored["adaptation"], dict) and "across" in stored["adaptation"]:
        raise ckpt.CheckpointError(f"checkpoint {str(used)!r}: its settings say the run was not private, but its "
                                   "warm-up adaptation is a private run's: the privacy record was altered")
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


def keep_private(private: Any, record: dict, step_size: Any, participation: Any) -> None:
    """Refuse, before any work, what a resume of the private checkpoint ``record`` (mechanism
    ``private``) is given that would weaken it or make its accounting wrong: a step size computed
    from the data without noise (as building a private run refuses it), and a participation rule
    other than the run's (the accounting applies the sampler's rule to every round it released)."""
    check_private(step_size, None, None)
    if participation is not None and repr(as_participation(participation)) != record["participation_repr"]:
        raise ValueError(f"participation: the checkpoint is of a private run ({private}) with "
                         f"{record['participation_repr']}; its privacy accounting applies one rule to every round "
                         "the sampler released, so a resume keeps it: give the same rule, or none")
