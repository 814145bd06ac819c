"""Checkpoints of the FA-LD runner: the record a run writes, and reading it back on resume.

A checkpoint holds everything a run needs to continue bit for bit at a round boundary: the
global parameters (R, d), the step and round counters, the single ``torch.Generator``, the
ledger (cumulative counters, the one communication counter), the typed settings record
(:class:`~fedlangevin.runner.results.settings.Settings`), the schedule, the participation rule, the
problem (beside the checkpoint, ``<path>.problem``) and the unfinished run's plan and draws.
The file format itself is :mod:`fedlangevin.runner.io.checkpoint`.

Record versions: 1 (settings without the participation scheme, a separate communication
total), 2 (the full settings record; communication derived from the ledger). Both resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from fedlangevin._validation import check_bool, check_device, check_path
from fedlangevin.runner.io import checkpoint as ckpt
from fedlangevin.federation.participation import Participation, as_participation
from fedlangevin.runner.io.records import RECORD_KIND, RECORD_VERSION, RUNNER_KIND, RUNNER_VERSION, check_fald_record, check_runner_record
from fedlangevin.runner.results.ledger import Ledger
from fedlangevin.runner.runs import Run
from fedlangevin.federation.schedules import as_schedule
from fedlangevin.problems.base import FederatedProblem, check_problem

__all__ = ["RECORD_KIND", "RECORD_VERSION", "CheckpointWriter", "Saved", "encoded_or_none", "kernel_record",
           "load_record", "main_path", "mechanism", "pending_run", "reading", "resume_device", "resume_generator",
           "resume_participation", "resume_problem", "resume_runner", "resume_schedule", "resume_state"]



class CheckpointWriter:
    """Writes a sampler's checkpoints; writes its problem once per checkpoint path (``<path>.problem``).

    ``digest``: the problem's data digest (computed once); ``sidecars``: the (problem file,
    digest) pairs already written.
    """

    def __init__(self, problem: FederatedProblem) -> None:
        self.problem = problem
        self.digest: str | None = None
        self.sidecars: set[tuple[str, str]] = set()

    def write(self, path: Path, sampler: Any, run: Any) -> None:
        """Write the checkpoint of ``sampler`` (a :class:`~fedlangevin.runner.base.Runner`: FA-LD's
        or a kernel of your own; its ``_record()`` adds the family's entries) and its ``run``."""
        run.sync()
        path = Path(path)
        record = {
            "versions": {"torch": str(torch.__version__), "numpy": str(np.__version__)},
            "round": int(sampler.state.round),
            "step": int(sampler.state.step),
            "settings": ckpt.encode(sampler.settings.record()),
            "schedule": encoded_or_none(sampler.schedule),
            "schedule_repr": repr(sampler.schedule),
            "schedule_probe": schedule_probe(sampler.schedule, sampler.state.step, sampler.local_steps),
            "problem": self.problem_record(path),
            "theta": sampler.state.theta.detach().cpu().clone(),
            "active": torch.as_tensor(sampler.active, dtype=torch.int64),
            "generator": sampler.generator.get_state(),
            "ledger": ckpt.encode(dict(sampler.ledger)),
            "run": run.describe(),
            **sampler._record(),  # the family's kind, version and own entries
        }
        ckpt.write_file(path, record)

    def resumed(self, record: dict, main: Path) -> None:
        """Take over a checkpoint's problem sidecar (it need not be written again)."""
        if record["problem"]["file"] is not None:
            self.digest = record["problem"]["digest"]
            self.sidecars.add((str(main.with_name(main.name + ckpt.PROBLEM_SUFFIX)), record["problem"]["digest"]))

    def problem_record(self, path: Path) -> dict:
        problem = self.problem
        if self.digest is None:
            self.digest = ckpt.digest(problem)
        sidecar = path.with_name(path.name + ckpt.PROBLEM_SUFFIX)
        stored = True
        if (str(sidecar), self.digest) not in self.sidecars:
            try:
                encoded = ckpt.encode(problem, "problem")
            except ckpt.NotEncodable:
                stored = False
            else:
                ckpt.write_file(sidecar, {"kind": "fedlangevin.problem", "digest": self.digest,
                                          "problem": encoded}, keep_previous=False)
                self.sidecars.add((str(sidecar), self.digest))
        return {
            "file": sidecar.name if stored else None,
            "digest": self.digest,
            "class": f"{type(problem).__module__}.{type(problem).__qualname__}",
            "num_clients": problem.num_clients,
            "dim": problem.dim,
            "weights": torch.as_tensor(problem.weights, dtype=torch.float64).cpu().clone(),
        }


def kernel_record(kernel: Any, state: Any) -> dict:
    """The entries of a kernel of your own (:class:`~fedlangevin.runner.base.Runner`): its
    state's further fields (tensors with a chain axis, or None) and its ``record()``."""
    extra = {}
    for f in dataclasses.fields(state):
        if f.name in ("theta", "step", "round"):
            continue
        value = getattr(state, f.name)
        if value is not None and not isinstance(value, torch.Tensor):
            raise ValueError(f"checkpoint: the kernel state's field {f.name!r} is a {type(value).__name__}; a "
                             "checkpoint stores tensors with a chain axis (or None) only")
        extra[f.name] = None if value is None else value.detach().cpu().clone()
    own = getattr(kernel, "record", None)
    return {"kind": RUNNER_KIND, "version": RUNNER_VERSION, "state": extra,
            "kernel": None if own is None else ckpt.encode(own())}


def resume_runner(cls, path, kernel, *, problem=None, step_size=None, device=None, fallback=False, read=None,
                  transport=None):
    """``Runner.resume(path, kernel, ...)``: the runner rebuilt around ``kernel`` (given again and
    checked against the stored ``record()``), then its state (``kernel.init``'s, with the stored
    tensors), stream, ledger and unfinished run put back. ``read``: the (record, file used) of
    ``path`` where the caller has read it already (the file is then not read a second time).
    ``transport``: a distributed run's (the kernel's): a process that does not write continues an
    unfinished run without its draws or checkpoint (:func:`pending_run`)."""
    path, fallback = check_path("path", path), check_bool("fallback", fallback)
    record, used = ckpt.read_file(path, fallback=fallback) if read is None else read
    settings = check_runner_record(record, used)
    with reading(used):
        problem = resume_problem(record, used, problem)
        schedule = resume_schedule(record, step_size, problem)
        saved_device, new_device = resume_device(settings, device)
        stored_kernel = ckpt.decode(record["kernel"])
    own = getattr(kernel, "record", None)
    given = None if own is None else ckpt.decode(ckpt.encode(own()))
    if given != stored_kernel:
        raise ValueError(f"kernel: its record() {given!r:.200} differs from the checkpoint's {stored_kernel!r:.200}; "
                         "resume with the kernel the run used")
    with reading(used, values=True):
        runner = cls(kernel, problem, schedule, local_steps=settings["local_steps"], chains=settings["chains"],
                     device=new_device, dtype=settings["dtype"], seed=settings["seed"])
        base, runner.active = resume_state(record, used, problem.dim, runner.device, runner.dtype)
    if runner.settings.sampler != settings.get("sampler"):
        raise ValueError(f"kernel: a {runner.settings.sampler!r} kernel cannot resume a checkpoint of "
                         f"{settings.get('sampler')!r}")
    template = kernel.init(base.theta)
    fields = {f.name for f in dataclasses.fields(template)} - {"theta", "step", "round"}
    if set(record["state"]) != fields:
        raise ValueError(f"kernel: its state has the fields {sorted(fields)}; the checkpoint stored "
                         f"{sorted(record['state'])}")
    with reading(used, values=True):
        values = {k: None if v is None else v.to(device=runner.device) for k, v in record["state"].items()}
        runner.state = dataclasses.replace(template, step=base.step, round=base.round, **values)
        resume_generator(runner.generator, record, saved_device, new_device, runner.seed)
        runner.ledger = Ledger.from_record(ckpt.decode(record["ledger"]))
    main = main_path(used)
    runner._writer.resumed(record, main)
    runner._pending = pending_run(runner, record["run"], main, used, transport)
    return runner


def schedule_probe(schedule: Any, step: int, local_steps: int) -> list[list[float]]:
    """A few (k, eta_k) pairs around the current step: a schedule given again on resume is compared on them."""
    probe = []
    for k in sorted({0, max(step - 1, 0), step, step + local_steps - 1}):
        try:
            probe.append([k, float(schedule(k))])
        except (ValueError, TypeError, IndexError):
            pass
    return probe


def load_record(path: Path, fallback: bool) -> tuple[dict, Path, dict]:
    """The checkpoint record at ``path`` (or ``<path>.prev`` with ``fallback``), the file used and
    its settings (a plain dictionary), checked to be an FA-LD record of a known version whose
    entries have the structure :func:`~fedlangevin.runner.io.records.check_fald_record` describes (a
    ``CheckpointError`` naming the entry otherwise)."""
    record, used = ckpt.read_file(path, fallback=fallback)
    return record, used, check_fald_record(record, used)


@contextlib.contextmanager
def reading(used: Path, values: bool = False):
    """Rebuilding a sampler from the checked record at ``used``: an error that only a malformed
    record can cause there (``KeyError``, ``TypeError``, ``AttributeError``, ``IndexError``, a
    torch ``RuntimeError``; with ``values``, also a ``ValueError`` of a value it holds) becomes a
    :class:`~fedlangevin.runner.io.checkpoint.CheckpointError` naming the file and the original error."""
    kinds = (KeyError, TypeError, AttributeError, IndexError, RuntimeError) + ((ValueError,) if values else ())
    try:
        yield
    except ckpt.CheckpointError:
        raise
    except kinds as exc:
        if isinstance(exc, ValueError):
            raise ckpt.CheckpointError(f"checkpoint {str(used)!r}: the run it records cannot be rebuilt: {exc}") from exc
        raise ckpt.CheckpointError(
            f"checkpoint {str(used)!r} is not a valid record: {type(exc).__name__}: {exc}") from exc


def pending_run(sampler: Any, rec_run: dict | None, main: Path, used: Path, transport: Any):
    """The unfinished run of the checkpoint at ``used`` for ``sampler`` (None if it finished):
    rank 0 (a transport that writes, or none) continues its draws and checkpoints at ``main``."""
    if rec_run is None or rec_run["finished"]:
        return None
    writes = getattr(transport, "writes", True)
    rec_run = rec_run if writes else dict(rec_run, draws={"kind": "none"}, keep_samples=False)
    with reading(used):
        return Run.from_record(sampler, rec_run, main if writes else None)


def main_path(used: Path) -> Path:
    """A run resumed from ``<path>.prev`` goes on writing its checkpoints to ``<path>``."""
    return used.with_name(used.name.removesuffix(ckpt.PREV_SUFFIX)) if used.name.endswith(ckpt.PREV_SUFFIX) else used


def resume_device(settings: dict, device: Any) -> tuple[torch.device, torch.device]:
    """(the checkpoint's device, the device to continue on)."""
    saved = torch.device(settings["device"])
    new = saved if device is None else check_device("device", device)
    if device is None and saved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"the checkpoint was written on {saved} but CUDA is not available here; pass device='cpu' "
            "to continue on the CPU (with a new random stream)"
        )
    return saved, new


def encoded_or_none(obj: Any) -> Any:
    try:
        return ckpt.encode(obj)
    except ckpt.NotEncodable:
        return None


def resume_problem(record: dict, used: Path, problem: Any) -> FederatedProblem:
    info = record["problem"]
    if problem is None:
        if info["file"] is None:
            raise ValueError(
                f"the checkpoint's problem ({info['class']}) is not one fedlangevin can store; pass it again: "
                "FALD.resume(path, problem=...)"
            )
        sidecar = used.with_name(info["file"])
        if not sidecar.exists():  # read from <path>.prev: the problem file is named after <path>
            sidecar = used.with_name(used.name.removesuffix(ckpt.PREV_SUFFIX) + ckpt.PROBLEM_SUFFIX)
        side, _ = ckpt.read_file(sidecar)
        if side.get("kind") != "fedlangevin.problem" or "problem" not in side:
            raise ckpt.CheckpointError(f"{str(sidecar)!r} is not the problem file of an FA-LD checkpoint")
        if side.get("digest") != info["digest"]:
            raise ckpt.CheckpointError(
                f"the problem file {str(sidecar)!r} belongs to another run (digest differs); pass the problem: "
                "FALD.resume(path, problem=...)"
            )
        problem = ckpt.decode(side["problem"])
        if not isinstance(problem, FederatedProblem):
            raise ckpt.CheckpointError(f"{str(sidecar)!r} does not hold a federated problem")
        try:
            check_problem(problem)
        except ValueError as exc:
            raise ckpt.CheckpointError(f"{str(sidecar)!r} does not hold a usable problem: {exc}") from None
        return problem
    check_problem(problem)
    name = f"{type(problem).__module__}.{type(problem).__qualname__}"
    weights = torch.as_tensor(problem.weights, dtype=torch.float64).cpu()
    if (name, problem.num_clients, problem.dim) != (info["class"], info["num_clients"], info["dim"]) or not torch.equal(
        weights, info["weights"]
    ):
        raise ValueError(
            f"problem does not match the checkpoint's: got {name} with N={problem.num_clients}, d={problem.dim}; "
            f"the checkpoint sampled {info['class']} with N={info['num_clients']}, d={info['dim']} "
            "(and its client weights must be equal)"
        )
    if ckpt.digest(problem) != info["digest"]:
        warnings.warn(
            "problem: its data differ from the checkpointed run's (digest mismatch); the resumed chains sample the "
            "problem given here", stacklevel=3,
        )
    return problem


def resume_schedule(record: dict, step_size: Any, problem: FederatedProblem):
    stored = record["schedule"]
    if step_size is None:
        if stored is None:
            raise ValueError(
                f"the checkpoint's step size ({record['schedule_repr']}) is a function fedlangevin cannot store; "
                "pass it again: FALD.resume(path, step_size=...)"
            )
        return ckpt.decode(stored)
    schedule = as_schedule(step_size, problem)
    differs = schedule_differs(record, schedule)
    if differs:
        warnings.warn(
            f"step_size differs from the checkpointed run's at step(s) {differs}: the resumed run uses the new one "
            "(it does not continue the original run bit for bit)", stacklevel=3,
        )
    return schedule


def schedule_differs(record: dict, schedule: Any) -> list[int]:
    """The probed steps (``record["schedule_probe"]``) where ``schedule`` differs from the checkpoint's."""
    differs = []
    for k, eta in record["schedule_probe"]:
        try:
            if float(schedule(int(k))) != eta:
                differs.append(int(k))
        except (ValueError, TypeError, IndexError):
            differs.append(int(k))
    return differs


def resume_participation(record: dict, participation: Any) -> Participation:
    stored = record["participation"]
    if participation is None:
        if stored is None:
            raise ValueError(
                f"the checkpoint's participation rule ({record['participation_repr']}) cannot be stored; pass it "
                "again: FALD.resume(path, participation=...)"
            )
        return ckpt.decode(stored)
    rule = as_participation(participation)
    if (rule != ckpt.decode(stored)) if stored is not None else (repr(rule) != record["participation_repr"]):
        warnings.warn(
            f"participation {rule!r} differs from the checkpointed run's ({record['participation_repr']})", stacklevel=3
        )
    return rule


class Saved(NamedTuple):
    """The fields every kernel's state has, as a checkpoint stores them."""

    theta: torch.Tensor
    step: int
    round: int


def resume_state(record: dict, used: Path, dim: int, device, dtype) -> tuple[Saved, np.ndarray]:
    """The checkpoint's state (theta, step and round counters) and active chains, checked; the
    sampler puts them in its own state (its kernel's ``init`` and ``dataclasses.replace``)."""
    active = record["active"].numpy().astype(np.int64)
    theta = record["theta"].to(device=device, dtype=dtype)
    if theta.shape != (len(active), dim):
        raise ckpt.CheckpointError(f"checkpoint {str(used)!r}: parameters of shape {tuple(theta.shape)} do "
                                   f"not match {len(active)} chains x d = {dim}")
    return Saved(theta=theta, step=int(record["step"]), round=int(record["round"])), active


def resume_generator(generator, record: dict, saved_device, new_device, seed: int) -> None:
    """The checkpoint's random stream on the same device type; a new one (seeded from seed and
    round, with a warning) on another."""
    if new_device.type == saved_device.type:
        generator.set_state(record["generator"])
        return
    warnings.warn(
        f"resuming a {saved_device.type} run on {new_device.type}: the random stream cannot carry over, the "
        f"chains continue with a new one (seeded from seed and round)", stacklevel=3,
    )
    generator.manual_seed((seed + 1_000_003 * int(record["round"])) % 2**64)


def mechanism(settings: Any) -> Any:
    """A private run's mechanism from its settings (``adjacency`` and ``clip``; a mapping or a
    :class:`~fedlangevin.runner.results.settings.Settings`); None for a run that clipped nothing."""
    get = settings.get if isinstance(settings, dict) else (lambda k, d=None: getattr(settings, k, d))
    adjacency = get("adjacency", "")
    if not adjacency:
        return None
    from fedlangevin.privacy.mechanism import ClientLevel, RecordLevel

    kinds = {"record": RecordLevel, "client": ClientLevel}
    if adjacency not in kinds:
        raise ValueError(f"settings['adjacency'] must be 'record', 'client' or ''; got {adjacency!r:.40}")
    return kinds[adjacency](clip=get("clip"))
