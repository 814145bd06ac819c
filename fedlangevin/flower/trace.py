"""What a Flower FA-LD run returns and saves: the server's view of the federation (the problem
the runner samples), the trace with its communication in bytes, and the saved trace file.

A saved trace (:func:`save_trace`, what a deployed ServerApp writes for whoever submitted the
run) is a file of the package's one checkpoint format (:mod:`fedlangevin.runner.io.checkpoint`):
written atomically with its length and a SHA-256, read back as tensors and plain values only
(``torch.load(weights_only=True)``: no pickled code runs); a file with a valid checksum but wrong
entries is a :class:`~fedlangevin.runner.io.checkpoint.CheckpointError` naming the entry, and a
file of an earlier version written with a bare ``torch.save`` is not read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedlangevin.federation.schedules import as_schedule
from fedlangevin.runner.io import checkpoint as ckpt
from fedlangevin.runner.results.settings import Settings
from fedlangevin.runner.results.trace import Communication, StepSizes, Trace
from fedlangevin.problems.base import FederatedProblem

__all__ = ["Federation", "FlowerCommunication", "FlowerTrace", "load_trace", "read_record", "save_trace"]

TRACE_KIND = "fedlangevin-flower-trace"
_COMMUNICATION = ("rounds", "uploads", "floats_up", "floats_down", "bytes_up", "bytes_down")


class Federation(FederatedProblem):
    """What the server knows of the federation: N clients (ordered by client index), their sizes
    n_c, the weights p_c = n_c / sum n, the dimension d (from the nodes' answers at the start).

    The problem the runner samples (``trace.problem``) when the data stay on the nodes: it has
    no gradient (the nodes compute theirs), no exact posterior; ``weights`` and
    ``client_sizes`` are what privacy accounting and the batch-size check read. Which Flower
    node holds which client is routing, not part of the problem: ``trace.node_ids``.
    """

    def __init__(self, client_sizes: Any, dim: int) -> None:
        sizes = torch.as_tensor(client_sizes).to(dtype=torch.int64, device="cpu").flatten().clone()
        if sizes.numel() < 1 or bool((sizes < 1).any()):
            raise ValueError(f"client_sizes must hold one size n_c >= 1 per client; got {sizes.tolist()!r:.80}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be an int >= 1; got {dim!r}")
        self.client_sizes = sizes
        self.weights = sizes.double() / int(sizes.sum())
        self.num_clients = int(sizes.numel())
        self.dim = dim

    def grad(self, theta, *, batch_size=None, generator=None):
        raise ValueError("a Federation has no gradients on the server: each Flower node computes its own "
                         "client's (fedlangevin.flower.client_app)")

    def to(self, device=None, dtype=None) -> "Federation":
        return self  # nothing but the sizes, which stay integers on the CPU

    def __repr__(self) -> str:
        return f"Federation(num_clients={self.num_clients}, dim={self.dim}, client_sizes={self.client_sizes.tolist()})"


@dataclass(frozen=True)
class FlowerCommunication(Communication):
    """:class:`~fedlangevin.runner.results.trace.Communication` plus the bytes Flower carried (message
    contents, serialised): ``bytes_down`` server to clients, ``bytes_up`` clients to server,
    for all R chains together (one message carries every chain)."""

    bytes_up: int = 0
    bytes_down: int = 0


@dataclass
class FlowerTrace(Trace):
    """A :class:`~fedlangevin.runner.results.trace.Trace` of a Flower run; ``dropouts``: {round: [client
    indices dropped or refused in that round]}; ``seconds_per_round``: the server's wall time per
    round; ``node_ids``: the Flower node of each client 0..N-1 (of the server's last start)."""

    dropouts: dict[int, list[int]] = field(default_factory=dict)
    seconds_per_round: float = float("nan")
    node_ids: tuple[int, ...] = ()


def dropouts_record(dropouts: dict) -> list:
    """{round: [clients]} as plain values ([[round, [clients]], ...])."""
    return [[int(j), [int(c) for c in clients]] for j, clients in dropouts.items()]


def dropouts_from(e: ckpt.Entries, value: Any) -> dict[int, list[int]]:
    """:func:`dropouts_record`'s inverse, checked (a CheckpointError naming ``dropouts``)."""
    found = {}
    for entry in e.list("dropouts", value):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and isinstance(entry[1], list)
                and all(isinstance(c, int) and not isinstance(c, bool) for c in entry[1])):
            e.fail(f"dropouts must hold [round, [clients]] pairs of integers; got {entry!r:.60}")
        found[entry[0]] = list(entry[1])
    return found


def read_record(path, what: str) -> tuple[dict, ckpt.Entries]:
    """The record at ``path`` (checked file, see the module docstring), with its entry checks; a
    file of an earlier version's bare ``torch.save`` is refused with the reason."""
    try:
        record, used = ckpt.read_file(path, resume_hint="to continue from it, copy it over {path} and start the "
                                                        "server again (a server reads only its own checkpoint path)")
    except ckpt.CheckpointError as exc:
        if "wrong file signature" in str(exc):
            raise ckpt.CheckpointError(
                f"{exc}: {what} files are written in fedlangevin's checkpoint format; a file of an earlier version "
                "(a bare torch.save) is not read, since loading it could run code") from None
        raise
    return record, ckpt.Entries(used)


def save_trace(trace: FlowerTrace, path) -> None:
    """Save a Flower run's trace (samples, draw rounds, communication, settings, federation)."""
    comm = trace.communication
    ckpt.write_file(path, {
        "kind": TRACE_KIND, "samples": trace.samples.detach().cpu(),
        "draw_rounds": torch.from_numpy(np.asarray(trace.draw_rounds, dtype=np.int64).copy()),
        "settings": trace.settings.record(),
        "communication": {name: getattr(comm, name) for name in _COMMUNICATION},
        "node_ids": [int(i) for i in trace.node_ids],
        "client_sizes": torch.as_tensor(trace.problem.client_sizes).cpu(),
        "dropouts": dropouts_record(trace.dropouts), "seconds_per_round": float(trace.seconds_per_round),
        "ledger": dict(trace.ledger),
    }, keep_previous=False)


def load_trace(path, step_size) -> FlowerTrace:
    """A :class:`FlowerTrace` from :func:`save_trace`'s file (``step_size``: the run's, to rebuild
    ``trace.step_sizes``); a file that is not one is a
    :class:`~fedlangevin.runner.io.checkpoint.CheckpointError`."""
    saved, e = read_record(path, "Flower FA-LD trace")
    if saved.get("kind") != TRACE_KIND:
        e.fail(f"{str(path)!r} is not a Flower FA-LD trace file (kind {saved.get('kind')!r:.60})")
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
    communication = FlowerCommunication(**{name: comm[name] for name in _COMMUNICATION})
    return FlowerTrace(samples=samples, draw_rounds=draw_rounds, draw_steps=draw_rounds * settings.local_steps,
                       step_sizes=StepSizes(as_schedule(step_size), 0, rounds * settings.local_steps),
                       communication=communication, settings=settings, problem=Federation(sizes, settings.dim),
                       ledger=ledger, dropouts=dropouts_from(e, saved["dropouts"]), seconds_per_round=seconds,
                       node_ids=tuple(node_ids))
