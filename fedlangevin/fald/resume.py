"""Checkpoints of the FA-LD runner: the record a run writes, and reading it back on resume.

A checkpoint holds everything a run needs to continue bit for bit at a round boundary: the
global parameters (R, d), the step and round counters, the single ``torch.Generator``, the
ledger (cumulative counters, the one communication counter), the typed settings record
(:class:`~fedlangevin.fald.settings.Settings`), the schedule, the participation rule, the
problem (beside the checkpoint, ``<path>.problem``) and the unfinished run's plan and draws.
The file format itself is :mod:`fedlangevin.fald.checkpoint`.

Record versions: 1 (settings without the participation scheme, a separate communication
total), 2 (the full settings record; communication derived from the ledger). Both resume.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlangevin._validation import check_device
from fedlangevin.fald import checkpoint as ckpt
from fedlangevin.fald import drift
from fedlangevin.fald.participation import Participation, as_participation
from fedlangevin.fald.preconditioning import preconditioner_record
from fedlangevin.fald.schedules import as_schedule
from fedlangevin.problems.base import FederatedProblem, check_problem

__all__ = ["RECORD_KIND", "RECORD_VERSION", "CheckpointWriter", "encoded_or_none", "load_record", "main_path",
           "resume_device", "resume_participation", "resume_problem", "resume_schedule"]

RECORD_KIND = "fedlangevin.FALD"
RECORD_VERSION = 2


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
        """Write the checkpoint of ``sampler`` (a :class:`~fedlangevin.FALD`) and its ``run``."""
        run.sync()
        path = Path(path)
        record = {
            "kind": RECORD_KIND,
            "version": RECORD_VERSION,
            "versions": {"torch": str(torch.__version__), "numpy": str(np.__version__)},
            "round": int(sampler.state.round),
            "step": int(sampler.state.step),
            "settings": ckpt.encode(sampler.settings.record()),
            "schedule": encoded_or_none(sampler.schedule),
            "schedule_repr": repr(sampler.schedule),
            "schedule_probe": schedule_probe(sampler.schedule, sampler.state.step, sampler.local_steps),
            "participation": encoded_or_none(sampler.participation),
            "participation_repr": repr(sampler.participation),
            "problem": self.problem_record(path),
            "theta": sampler.state.theta.detach().cpu().clone(),
            "active": torch.as_tensor(sampler.active, dtype=torch.int64),
            "generator": sampler.generator.get_state(),
            "ledger": ckpt.encode(dict(sampler.ledger)),
            "preconditioner": None if sampler.preconditioner is None
            else ckpt.encode(preconditioner_record(sampler.preconditioner)),
            "adapted": bool(sampler.adapted),
            "adaptation": None if sampler.adapter is None else ckpt.encode(sampler.adapter.record()),
            "correction": ckpt.encode(drift.record(sampler)),
            "run": run.describe(),
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
    entries have the structure :func:`check_record` describes (a ``CheckpointError`` naming the
    entry otherwise)."""
    record, used = ckpt.read_file(path, fallback=fallback)
    if record.get("kind") != RECORD_KIND:
        raise ckpt.CheckpointError(f"{str(used)!r} is not a checkpoint of an FA-LD sampler")
    version = record.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > RECORD_VERSION:
        raise ckpt.CheckpointError(f"{str(used)!r} was written by a newer fedlangevin (record version {record['version']})")
    return record, used, check_record(record, used)


#: the settings a resumed sampler is built from, and their checks (name -> (check, arguments))
_SETTINGS = {
    "local_steps": ("int", dict(low=1)), "temperature": ("real", dict(low=0.0, low_open=True)),
    "correlation": ("real", dict(low=0.0, high=1.0)), "chains": ("int", dict(low=1)),
    "num_clients": ("int", dict(low=1)), "dim": ("int", dict(low=1)), "seed": ("int", dict(low=0, high=2**64 - 1)),
    "device": ("str", {}), "dtype": ("str", dict(choices=("float32", "float64"))),
    "noise_dtype": ("str", dict(choices=("float32", "float64"))),
}
_RUN_INTS = {"rounds": 1, "done": 0, "warmup": 0, "thin": 1, "start_round": 0, "start_step": 0}


def check_record(record: dict, used: Path) -> dict:
    """Check the entries of an FA-LD checkpoint record (versions 1 and 2); returns its decoded
    settings. What is checked: ``round`` and ``step`` (integers >= 0), ``theta`` (chains x d,
    floating point) and ``active`` (one integer per chain), the random stream, the settings
    (present, of their types and ranges), the problem's description, the stored schedule and
    participation entries, the ledger and the unfinished run's plan and draws. The objects
    themselves are rebuilt (and checked) by :func:`fedlangevin.fald.checkpoint.decode`."""
    e = ckpt.Entries(used)
    keys = ("version", "round", "step", "settings", "schedule", "schedule_repr", "schedule_probe", "participation",
            "participation_repr", "problem", "theta", "active", "generator", "ledger", "run")
    e.dict("the record", record, keys)
    e.int("version", record["version"], 1, RECORD_VERSION)
    e.int("round", record["round"])
    e.int("step", record["step"])
    settings = ckpt.decode(e.dict("settings", record["settings"]))
    e.dict("settings", settings, tuple(_SETTINGS))
    for name, (kind, args) in _SETTINGS.items():
        getattr(e, kind)(f"settings[{name!r}]", settings[name], **args)
    if settings.get("batch_size") is not None:
        e.int("settings['batch_size']", settings["batch_size"], 1)
    if "streams" in settings:
        e.str("settings['streams']", settings["streams"])
    if "adapt" in settings:
        e.bool("settings['adapt']", settings["adapt"])
    theta = e.tensor("theta", record["theta"], 2, "float")
    active = e.tensor("active", record["active"], 1, "int")
    if active.numel() != theta.shape[0] or theta.shape[1] != settings["dim"]:
        e.fail(f"theta has shape {tuple(theta.shape)}; with {active.numel()} active chains and d = {settings['dim']} "
               f"it must be ({active.numel()}, {settings['dim']})")
    e.tensor("generator", record["generator"], 1, "uint8")
    e.dict("ledger", ckpt.decode(record["ledger"]))
    problem = e.dict("problem", record["problem"], ("file", "digest", "class", "num_clients", "dim", "weights"))
    if problem["file"] is not None:
        name = e.str("problem['file']", problem["file"])
        if Path(name).name != name or name in ("", ".", ".."):
            e.fail(f"problem['file'] must be a file name beside the checkpoint; got {name!r:.60}")
    e.str("problem['digest']", problem["digest"])
    e.str("problem['class']", problem["class"])
    e.int("problem['num_clients']", problem["num_clients"], 1)
    e.int("problem['dim']", problem["dim"], 1)
    e.tensor("problem['weights']", problem["weights"], 1, "float")
    for name in ("schedule", "participation"):
        if record[name] is not None:
            e.dict(name, record[name])
        e.str(f"{name}_repr", record[f"{name}_repr"])
    for pair in e.list("schedule_probe", record["schedule_probe"]):
        if not (isinstance(pair, list) and len(pair) == 2):
            e.fail(f"schedule_probe must hold [step, step size] pairs; got {pair!r:.60}")
        e.int("schedule_probe step", pair[0])
        e.real("schedule_probe step size", pair[1])
    for name in ("preconditioner", "adaptation", "correction"):
        if record.get(name) is not None:
            e.dict(name, record[name])
    if "adapted" in record:
        e.bool("adapted", record["adapted"])
    if record["run"] is not None:
        _check_run(e, record["run"])
    return settings


def _check_run(e: ckpt.Entries, run: Any) -> None:
    """The unfinished run's plan, progress and draws (:meth:`fedlangevin.fald.runs.Run.describe`)."""
    keys = (*_RUN_INTS, "keep_samples", "on_divergence", "checkpoint_every", "chain_ids", "alive", "dropped",
            "uploads", "draws", "stats", "target", "finished")
    e.dict("run", run, keys)
    for name, low in _RUN_INTS.items():
        e.int(f"run[{name!r}]", run[name], low)
    if run["done"] > run["rounds"]:
        e.fail(f"run['done'] = {run['done']} is more than run['rounds'] = {run['rounds']}")
    e.bool("run['keep_samples']", run["keep_samples"])
    e.bool("run['finished']", run["finished"])
    e.str("run['on_divergence']", run["on_divergence"])
    if run["checkpoint_every"] is not None:
        e.int("run['checkpoint_every']", run["checkpoint_every"], 1)
    e.tensor("run['chain_ids']", run["chain_ids"], 1, "int")
    e.tensor("run['alive']", run["alive"], 1, "int")
    for entry in e.list("run['dropped']", run["dropped"]):
        if not (isinstance(entry, list) and len(entry) == 3 and all(isinstance(v, int) for v in entry)):
            e.fail(f"run['dropped'] must hold [chain, round, step] triples of integers; got {entry!r:.60}")
    e.real("run['uploads']", run["uploads"], low=0.0)
    if "setup_floats" in run:
        e.real("run['setup_floats']", run["setup_floats"], low=0.0)
    draws = e.dict("run['draws']", run["draws"], ("kind",))
    kind = e.str("run['draws']['kind']", draws["kind"], ("memory", "disk", "none"))
    if kind == "memory":
        e.dict("run['draws']", draws, ("samples", "rounds"))
        samples = e.tensor("run['draws']['samples']", draws["samples"], 3, "float")
        rounds = e.tensor("run['draws']['rounds']", draws["rounds"], 1, "int")
        if samples.shape[1] != rounds.numel():
            e.fail(f"run['draws'] holds {samples.shape[1]} draws but {rounds.numel()} draw rounds")
    elif kind == "disk":
        e.dict("run['draws']", draws, ("path", "relative", "draws", "crc32"))
        e.str("run['draws']['path']", draws["path"])
        if draws["relative"] is not None:
            e.str("run['draws']['relative']", draws["relative"])
        e.int("run['draws']['draws']", draws["draws"])
        crc = e.dict("run['draws']['crc32']", draws["crc32"], ("samples", "draw_rounds"))
        for key in ("samples", "draw_rounds"):
            e.int(f"run['draws']['crc32'][{key!r}]", crc[key], 0, 2**32 - 1)
    if run["stats"] is not None:
        e.dict("run['stats']", run["stats"])
    if run["target"] is not None:
        target = e.list("run['target']", run["target"])
        if len(target) != 2:
            e.fail(f"run['target'] must be [mean, covariance]; got {len(target)} entries")
        e.tensor("run['target'] mean", target[0], 1, "float")
        e.tensor("run['target'] covariance", target[1], 2, "float")


@contextlib.contextmanager
def reading(used: Path, values: bool = False):
    """Rebuilding a sampler from the checked record at ``used``: an error that only a malformed
    record can cause there (``KeyError``, ``TypeError``, ``AttributeError``, ``IndexError``, a
    torch ``RuntimeError``; with ``values``, also a ``ValueError`` of a value it holds) becomes a
    :class:`~fedlangevin.fald.checkpoint.CheckpointError` naming the file and the original error."""
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
    differs = []
    for k, eta in record["schedule_probe"]:
        try:
            if float(schedule(int(k))) != eta:
                differs.append(int(k))
        except (ValueError, TypeError, IndexError):
            differs.append(int(k))
    if differs:
        warnings.warn(
            f"step_size differs from the checkpointed run's at step(s) {differs}: the resumed run uses the new one "
            "(it does not continue the original run bit for bit)", stacklevel=3,
        )
    return schedule


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
    if repr(rule) != record["participation_repr"]:
        warnings.warn(
            f"participation {rule!r} differs from the checkpointed run's ({record['participation_repr']})", stacklevel=3
        )
    return rule


def resume_state(record: dict, used: Path, dim: int, device, dtype):
    """The checkpoint's state (theta, step and round counters) and active chains, checked."""
    from fedlangevin.fald.kernel import FALDState

    active = record["active"].numpy().astype(np.int64)
    theta = record["theta"].to(device=device, dtype=dtype)
    if theta.shape != (len(active), dim):
        raise ckpt.CheckpointError(f"checkpoint {str(used)!r}: parameters of shape {tuple(theta.shape)} do "
                                   f"not match {len(active)} chains x d = {dim}")
    return FALDState(theta=theta, step=int(record["step"]), round=int(record["round"])), active


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
