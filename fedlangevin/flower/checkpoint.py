"""Server-side checkpoints and saved traces of a Flower FA-LD run.

The server is the only party that holds the run's state (the global iterate, the draws,
the counters): it writes them atomically (a temporary file, then ``os.replace``) every
``checkpoint_every`` rounds. A server restarted with the same settings and checkpoint path
continues from the last checkpointed round; with the per-round streams of
:mod:`fedlangevin.fald.streams` the continued run draws exactly what the uninterrupted
run would have (clients keep no state between rounds).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlangevin.fald.schedules import as_schedule
from fedlangevin.fald.settings import Settings
from fedlangevin.fald.trace import StepSizes
from fedlangevin.flower.trace import Federation, FlowerCommunication, FlowerTrace

__all__ = ["save_checkpoint", "load_checkpoint", "save_trace", "load_trace"]

KIND = "fedlangevin-flower-checkpoint"


def _atomic_save(obj: Any, path: str | os.PathLike) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _identity(run, fed) -> dict:
    return {"seed": int(run.seed), "chains": int(run.chains), "local_steps": int(run.local_steps),
            "dim": int(fed.dim), "client_sizes": fed.client_sizes.tolist()}


def save_checkpoint(path, run, fed, state: dict) -> None:
    """Write the server's state after round ``state["round"]``."""
    record = {"kind": KIND, "identity": _identity(run, fed), **state,
              "draws": [t.clone() for t in state["draws"]], "dropouts": dict(state["dropouts"])}
    _atomic_save(record, path)


def load_checkpoint(path, run, fed) -> dict | None:
    """The state saved at ``path`` (None if there is no file); ValueError if it belongs to
    another run (seed, chains, K, d or the clients' sizes differ)."""
    if not Path(path).exists():
        return None
    record = torch.load(path, weights_only=False)
    if not isinstance(record, dict) or record.get("kind") != KIND:
        raise ValueError(f"checkpoint: {str(path)!r} is not a checkpoint of a Flower FA-LD server")
    if record["identity"] != _identity(run, fed):
        raise ValueError(f"checkpoint: {str(path)!r} belongs to another run ({record['identity']}); "
                         f"this one is {_identity(run, fed)}")
    if record["round"] > run.rounds:
        raise ValueError(f"checkpoint: {str(path)!r} is at round {record['round']}, past rounds = {run.rounds}")
    state = {k: v for k, v in record.items() if k not in ("kind", "identity")}
    return state


def save_trace(trace, path) -> None:
    """Save a Flower run's trace (samples, draw rounds, communication, settings, federation)."""
    comm = trace.communication
    _atomic_save({
        "samples": trace.samples, "draw_rounds": np.asarray(trace.draw_rounds), "settings": trace.settings.record(),
        "communication": {"rounds": comm.rounds, "uploads": comm.uploads, "floats_up": comm.floats_up,
                          "floats_down": comm.floats_down, "bytes_up": comm.bytes_up, "bytes_down": comm.bytes_down},
        "node_ids": list(trace.problem.node_ids), "client_sizes": trace.problem.client_sizes,
        "dropouts": trace.dropouts, "seconds_per_round": trace.seconds_per_round, "ledger": dict(trace.ledger),
    }, path)


def load_trace(path, step_size) -> Any:
    """A :class:`~fedlangevin.flower.server.FlowerTrace` from :func:`save_trace`'s file
    (``step_size``: the run's, to rebuild ``trace.step_sizes``)."""

    saved = torch.load(path, weights_only=False)
    settings = Settings.from_record(saved["settings"])
    sizes = saved["client_sizes"]
    fed = Federation(tuple(saved["node_ids"]), sizes, sizes.double() / int(sizes.sum()), settings.dim)
    rounds = saved["communication"]["rounds"]
    draw_rounds = np.asarray(saved["draw_rounds"], dtype=np.int64)
    return FlowerTrace(samples=saved["samples"], draw_rounds=draw_rounds, draw_steps=draw_rounds * settings.local_steps,
                       step_sizes=StepSizes(as_schedule(step_size), 0, rounds * settings.local_steps),
                       communication=FlowerCommunication(**saved["communication"]), settings=settings, problem=fed,
                       ledger=saved["ledger"], dropouts=saved["dropouts"], seconds_per_round=saved["seconds_per_round"])
