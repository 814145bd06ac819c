"""Server-side checkpoints and saved traces of a Flower FA-LD run.

The server is the only party that holds the run's state (the global iterate, the draws,
the counters): it writes them every ``checkpoint_every`` rounds. A server restarted with the
same settings and checkpoint path continues from the last checkpointed round; with the
per-round streams of :mod:`fedlangevin.fald.core.streams` the continued run draws exactly what the
uninterrupted run would have (clients keep no state between rounds).

Checkpoints and traces are files of the package's one checkpoint format
(:mod:`fedlangevin.fald.io.checkpoint`, shared with :class:`fedlangevin.FALD`): written atomically
(a temporary file, fsync, rename), with their length and a SHA-256, and read back as tensors
and plain values only (``torch.load(weights_only=True)``: no pickled code runs). Special files
(a FIFO, a device, a link loop) are refused before they are opened, and a file with a valid
checksum but wrong entries is a :class:`~fedlangevin.fald.io.checkpoint.CheckpointError` naming
the entry. Files written by earlier versions with a bare ``torch.save`` are not read (loading
them could run code).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from fedlangevin.fald.io import checkpoint as ckpt
from fedlangevin.fald.core.schedules import as_schedule
from fedlangevin.fald.results.settings import Settings
from fedlangevin.fald.results.trace import StepSizes
from fedlangevin.flower.trace import Federation, FlowerCommunication, FlowerTrace

__all__ = ["save_checkpoint", "load_checkpoint", "save_trace", "load_trace"]

KIND = "fedlangevin-flower-checkpoint"
TRACE_KIND = "fedlangevin-flower-trace"
_COMMUNICATION = ("rounds", "uploads", "floats_up", "floats_down", "bytes_up", "bytes_down")


def _identity(run, fed) -> dict:
    return {"seed": int(run.seed), "chains": int(run.chains), "local_steps": int(run.local_steps),
            "dim": int(fed.dim), "client_sizes": [int(n) for n in fed.client_sizes.tolist()]}


def _read(path, kind: str, what: str) -> tuple[dict, ckpt.Entries]:
    """The record of kind ``kind`` at ``path`` (checked file, see the module docstring)."""
    try:
        record, used = ckpt.read_file(path)
    except ckpt.CheckpointError as exc:
        if "wrong file signature" in str(exc):
            raise ckpt.CheckpointError(
                f"{exc}: {what} files are written in fedlangevin's checkpoint format; a file of an earlier version "
                "(a bare torch.save) is not read, since loading it could run code") from None
        raise
    if record.get("kind") != kind:
        raise ckpt.CheckpointError(f"checkpoint: {str(path)!r} is not a {what} file (kind {record.get('kind')!r:.60})")
    return record, ckpt.Entries(used)


def _dropouts_record(dropouts: dict) -> list:
    return [[int(j), [int(c) for c in clients]] for j, clients in dropouts.items()]


def _dropouts(e: ckpt.Entries, value: Any) -> dict[int, list[int]]:
    found = {}
    for entry in e.list("dropouts", value):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and isinstance(entry[1], list)
                and all(isinstance(c, int) and not isinstance(c, bool) for c in entry[1])):
            e.fail(f"dropouts must hold [round, [clients]] pairs of integers; got {entry!r:.60}")
        found[entry[0]] = list(entry[1])
    return found


def save_checkpoint(path, run, fed, state: dict) -> None:
    """Write the server's state after round ``state["round"]`` (atomically, with its checksum)."""
    theta = state["theta"].detach().cpu().clone()
    draws = torch.stack([t.detach().cpu() for t in state["draws"]]) if state["draws"] else \
        torch.empty(0, *theta.shape, dtype=theta.dtype)
    record = {"kind": KIND, "identity": _identity(run, fed), "round": int(state["round"]), "theta": theta,
              "draws": draws, "draw_rounds": [int(j) for j in state["draw_rounds"]], "uploads": float(state["uploads"]),
              "bytes_up": int(state["bytes_up"]), "bytes_down": int(state["bytes_down"]),
              "dropouts": _dropouts_record(state["dropouts"]), "seconds": float(state["seconds"])}
    ckpt.write_file(path, record, keep_previous=False)


def load_checkpoint(path, run, fed) -> dict | None:
    """The state saved at ``path`` (None if there is no file); ValueError if it belongs to
    another run (seed, chains, K, d or the clients' sizes differ);
    :class:`~fedlangevin.fald.io.checkpoint.CheckpointError` if the file is not a Flower
    server's checkpoint, is damaged or holds wrong entries."""
    if not os.path.lexists(path):  # (a link loop is reported by the reader, not taken for no file)
        return None
    record, e = _read(path, KIND, "Flower FA-LD server checkpoint")
    e.dict("the record", record, ("identity", "round", "theta", "draws", "draw_rounds", "uploads", "bytes_up",
                                  "bytes_down", "dropouts", "seconds"))
    identity = e.dict("identity", record["identity"], ("seed", "chains", "local_steps", "dim", "client_sizes"))
    if identity != _identity(run, fed):
        raise ValueError(f"checkpoint: {str(path)!r} belongs to another run ({identity}); "
                         f"this one is {_identity(run, fed)}")
    rnd = e.int("round", record["round"])
    if rnd > run.rounds:
        raise ValueError(f"checkpoint: {str(path)!r} is at round {rnd}, past rounds = {run.rounds}")
    shape = (int(run.chains), int(fed.dim))
    theta = e.tensor("theta", record["theta"], 2, "float")
    draws = e.tensor("draws", record["draws"], 3, "float")
    if tuple(theta.shape) != shape or tuple(draws.shape[1:]) != shape:
        e.fail(f"theta has shape {tuple(theta.shape)} and the draws {tuple(draws.shape)}; this run's iterate is {shape}")
    draw_rounds = [e.int("draw_rounds entry", j, 1, rnd) for j in e.list("draw_rounds", record["draw_rounds"])]
    if len(draw_rounds) != draws.shape[0]:
        e.fail(f"{draws.shape[0]} draws but {len(draw_rounds)} draw rounds")
    return {"round": rnd, "theta": theta, "draws": list(draws.unbind(0)), "draw_rounds": draw_rounds,
            "uploads": e.real("uploads", record["uploads"], low=0.0),
            "bytes_up": e.int("bytes_up", record["bytes_up"]), "bytes_down": e.int("bytes_down", record["bytes_down"]),
            "dropouts": _dropouts(e, record["dropouts"]), "seconds": e.real("seconds", record["seconds"], low=0.0)}


def save_trace(trace, path) -> None:
    """Save a Flower run's trace (samples, draw rounds, communication, settings, federation)."""
    comm = trace.communication
    ckpt.write_file(path, {
        "kind": TRACE_KIND, "samples": trace.samples.detach().cpu(),
        "draw_rounds": torch.from_numpy(np.asarray(trace.draw_rounds, dtype=np.int64).copy()),
        "settings": trace.settings.record(),
        "communication": {name: getattr(comm, name) for name in _COMMUNICATION},
        "node_ids": [int(i) for i in trace.problem.node_ids],
        "client_sizes": torch.as_tensor(trace.problem.client_sizes).cpu(),
        "dropouts": _dropouts_record(trace.dropouts), "seconds_per_round": float(trace.seconds_per_round),
        "ledger": dict(trace.ledger),
    }, keep_previous=False)


def load_trace(path, step_size) -> Any:
    """A :class:`~fedlangevin.flower.server.FlowerTrace` from :func:`save_trace`'s file
    (``step_size``: the run's, to rebuild ``trace.step_sizes``); a file that is not one is a
    :class:`~fedlangevin.fald.io.checkpoint.CheckpointError`."""
    saved, e = _read(path, TRACE_KIND, "Flower FA-LD trace")
    e.dict("the record", saved, ("samples", "draw_rounds", "settings", "communication", "node_ids", "client_sizes",
                                 "dropouts", "seconds_per_round", "ledger"))
    samples = e.tensor("samples", saved["samples"], 3, "float")
    draw_rounds = e.tensor("draw_rounds", saved["draw_rounds"], 1, "int").numpy().astype(np.int64)
    if draw_rounds.shape[0] != samples.shape[1]:
        e.fail(f"{samples.shape[1]} draws but {draw_rounds.shape[0]} draw rounds")
    try:
        settings = Settings.from_record(e.dict("settings", saved["settings"]))
    except TypeError as exc:
        e.fail(f"settings: {exc}")
    e.int("settings['local_steps']", settings.local_steps, 1)
    e.int("settings['dim']", settings.dim, 1)
    comm = e.dict("communication", saved["communication"], _COMMUNICATION)
    rounds = e.int("communication['rounds']", comm["rounds"])
    for name in _COMMUNICATION[1:]:
        e.real(f"communication[{name!r}]", comm[name], low=0.0)
    node_ids = [e.int("node_ids entry", i, None) for i in e.list("node_ids", saved["node_ids"])]
    sizes = e.tensor("client_sizes", saved["client_sizes"], 1, "int")
    if sizes.numel() != len(node_ids) or not node_ids or bool((sizes <= 0).any()):
        e.fail(f"client_sizes must hold one size >= 1 per node ({len(node_ids)} nodes); got {sizes.tolist()!r:.60}")
    ledger = e.dict("ledger", saved["ledger"])
    seconds = saved["seconds_per_round"]
    if not isinstance(seconds, float):
        e.fail(f"seconds_per_round must be a number; got {type(seconds).__name__}")
    fed = Federation(tuple(node_ids), sizes, sizes.double() / int(sizes.sum()), settings.dim)
    communication = FlowerCommunication(**{name: comm[name] for name in _COMMUNICATION})
    return FlowerTrace(samples=samples, draw_rounds=draw_rounds, draw_steps=draw_rounds * settings.local_steps,
                       step_sizes=StepSizes(as_schedule(step_size), 0, rounds * settings.local_steps),
                       communication=communication, settings=settings, problem=fed, ledger=ledger,
                       dropouts=_dropouts(e, saved["dropouts"]), seconds_per_round=seconds)
