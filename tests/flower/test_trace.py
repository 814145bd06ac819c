"""The trace of a Flower run and its saved file (fedlangevin.flower.trace), without Flower.

A saved trace is a file of the package's checkpoint format (fedlangevin.runner.io.checkpoint):
read as plain values only, with a checksum, refused when damaged or holding wrong entries.
The planted-pickle tests are in tests/test_no_code_execution.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedlangevin.runner.io.checkpoint import MAGIC, CheckpointError, read_file, write_file
from fedlangevin.flower.trace import FlowerTrace, load_trace, save_trace
from tests.flower.test_runner import ETA, _run, _serve


def _a_trace() -> FlowerTrace:
    trace, _ = _serve(_run(rounds=5, warmup=1, thin=2), fail={(3, 2): "node 102: no reply"})
    return trace


@pytest.mark.filterwarnings("ignore:round 3")
def test_trace_round_trip_in_the_package_format(tmp_path):
    trace = _a_trace()
    assert trace.dropouts == {3: [2]} and trace.samples.shape[1] == 2
    path = tmp_path / "trace.pt"
    save_trace(trace, path)
    assert path.read_bytes()[:16] == MAGIC
    back = load_trace(path, step_size=ETA)
    assert torch.equal(back.samples, trace.samples)
    np.testing.assert_array_equal(back.draw_rounds, trace.draw_rounds)
    np.testing.assert_array_equal(back.draw_steps, trace.draw_steps)
    assert back.settings == trace.settings and back.communication == trace.communication
    assert back.node_ids == trace.node_ids and torch.equal(back.problem.client_sizes, trace.problem.client_sizes)
    assert torch.equal(back.problem.weights, trace.problem.weights)
    assert back.ledger == trace.ledger and back.dropouts == trace.dropouts
    assert math.isclose(back.seconds_per_round, trace.seconds_per_round)
    assert np.array_equal(np.asarray(back.step_sizes), np.asarray(trace.step_sizes))


def _rewrap(path, change):
    record, _ = read_file(path)
    change(record)
    write_file(path, record, keep_previous=False)


@pytest.mark.filterwarnings("ignore:round 3")
@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop("settings"), r"the record lacks the entries 'settings'"),
    (lambda r: r.__setitem__("settings", {"dim": 3}), r"settings: .*missing"),
    (lambda r: r.__setitem__("samples", torch.zeros(4, 5, 2)), r"5 draws but 2 draw rounds"),
    (lambda r: r.__setitem__("client_sizes", torch.tensor([1, 2])), r"client_sizes must hold one size >= 1 per node"),
    (lambda r: r.__setitem__("dropouts", {3: [1]}), r"dropouts must be a list"),
    (lambda r: r.__setitem__("kind", "fedlangevin.Runner"), r"is not a Flower FA-LD trace file"),
])
def test_a_trace_with_wrong_entries_is_a_checkpoint_error(change, message, tmp_path):
    path = tmp_path / "trace.pt"
    save_trace(_a_trace(), path)
    _rewrap(path, change)
    with pytest.raises(CheckpointError, match=message):
        load_trace(path, step_size=ETA)


def test_a_trace_file_of_the_earlier_bare_torch_save_format_is_not_read(tmp_path):
    """Earlier versions wrote torch.save pickles: refused by their signature, never unpickled."""
    path = tmp_path / "trace.pt"
    torch.save({"kind": "fedlangevin-flower-trace", "samples": torch.zeros(1, 1, 1)}, path)
    with pytest.raises(CheckpointError, match="wrong file signature.*is not read, since loading it could run code"):
        load_trace(path, ETA)


def test_a_damaged_server_checkpoint_points_to_its_intact_previous_file_the_servers_way(tmp_path):
    """A Flower server reads only its own checkpoint path: the hint is to copy the intact
    ``.prev`` over it, not ``FALD.resume(..., fallback=True)``, which a server has no use for."""
    from fedlangevin.flower.trace import read_record

    path = tmp_path / "server.ckpt"
    write_file(path, {"kind": "x", "round": 3})
    write_file(path, {"kind": "x", "round": 4})      # the first is kept as server.ckpt.prev
    path.write_bytes(path.read_bytes()[:-5])          # damaged
    with pytest.raises(CheckpointError) as info:
        read_record(path, "Flower FA-LD server checkpoint")
    message = str(info.value)
    assert "(round 3) is intact: to continue from it, copy it over" in message and "fallback" not in message
    with pytest.raises(CheckpointError, match=r"FALD.resume\(.*fallback=True\)"):
        read_file(path)                               # FA-LD's own hint is unchanged
