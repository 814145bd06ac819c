"""The Flower server's checkpoints and saved traces (fedlangevin.flower.checkpoint), without Flower.

They are files of the package's checkpoint format (fedlangevin.fald.io.checkpoint): read as plain
values only, with a checksum, refused when damaged, special or holding wrong entries. The
planted-pickle tests of every file type are in tests/test_no_code_execution.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedlangevin.fald.io.checkpoint import CheckpointError, read_file, write_file
from fedlangevin.flower.checkpoint import load_checkpoint, load_trace, save_checkpoint, save_trace
from fedlangevin.flower.server import FlowerRun, _trace
from fedlangevin.flower.trace import Federation

R, D = 2, 3


def _setup(rounds: int = 6):
    run = FlowerRun(rounds=rounds, step_size=1e-3, num_nodes=3, local_steps=2, chains=R, seed=5,
                    participation=None, checkpoint="unused")
    sizes = torch.tensor([4, 5, 6])
    fed = Federation((11, 12, 13), sizes, sizes.double() / 15, D)
    g = torch.Generator().manual_seed(0)
    state = {"round": 4, "theta": torch.randn(R, D, generator=g, dtype=torch.float64),
             "draws": [torch.randn(R, D, generator=g, dtype=torch.float64) for _ in range(3)], "draw_rounds": [2, 3, 4],
             "uploads": 7.5, "bytes_up": 1000, "bytes_down": 2000, "dropouts": {3: [1], 4: [0, 2]}, "seconds": 0.25}
    return run, fed, state


def test_checkpoint_round_trip_in_the_package_format(tmp_path):
    run, fed, state = _setup()
    path = tmp_path / "server.ckpt"
    assert load_checkpoint(path, run, fed) is None  # no file yet: a fresh start
    save_checkpoint(path, run, fed, state)
    assert path.read_bytes()[:16] == b"FEDLANGEVIN-CKPT" and not (tmp_path / "server.ckpt.tmp").exists()
    back = load_checkpoint(path, run, fed)
    assert back.keys() == state.keys()
    assert torch.equal(back["theta"], state["theta"]) and all(torch.equal(a, b) for a, b in zip(back["draws"], state["draws"]))
    assert len(back["draws"]) == 3 and back["draw_rounds"] == [2, 3, 4] and back["dropouts"] == {3: [1], 4: [0, 2]}
    assert (back["round"], back["uploads"], back["bytes_up"], back["bytes_down"], back["seconds"]) == (4, 7.5, 1000, 2000, 0.25)
    state["draws"], state["draw_rounds"] = [], []  # before the first kept draw
    save_checkpoint(path, run, fed, state)
    assert load_checkpoint(path, run, fed)["draws"] == []


def test_checkpoint_of_another_run_or_past_the_end_is_refused(tmp_path):
    run, fed, state = _setup()
    path = tmp_path / "server.ckpt"
    save_checkpoint(path, run, fed, state)
    other = FlowerRun(rounds=6, step_size=1e-3, num_nodes=3, local_steps=2, chains=R, seed=6)
    with pytest.raises(ValueError, match="belongs to another run"):
        load_checkpoint(path, other, fed)
    shorter = FlowerRun(rounds=3, step_size=1e-3, num_nodes=3, local_steps=2, chains=R, seed=5)
    with pytest.raises(ValueError, match="is at round 4, past rounds = 3"):
        load_checkpoint(path, shorter, fed)


def _rewrap(path, change):
    record, _ = read_file(path)
    change(record)
    write_file(path, record, keep_previous=False)


@pytest.mark.parametrize("change, message", [
    (lambda r: r.__setitem__("round", -5), r"round must be an integer >= 0; got -5"),
    (lambda r: r.pop("theta"), r"the record lacks the entries 'theta'"),
    (lambda r: r.__setitem__("theta", torch.zeros(R, D + 1, dtype=torch.float64)), r"theta has shape \(2, 4\)"),
    (lambda r: r.__setitem__("draw_rounds", [2, 3]), r"3 draws but 2 draw rounds"),
    (lambda r: r.__setitem__("dropouts", {3: [1]}), r"dropouts must be a list"),
    (lambda r: r.__setitem__("identity", "x"), r"identity must be a dictionary"),
    (lambda r: r.__setitem__("kind", "fedlangevin.FALD"), r"is not a Flower FA-LD server checkpoint file"),
])
def test_a_valid_checksum_over_wrong_entries_is_a_checkpoint_error(change, message, tmp_path):
    run, fed, state = _setup()
    path = tmp_path / "server.ckpt"
    save_checkpoint(path, run, fed, state)
    _rewrap(path, change)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path, run, fed)


def test_a_damaged_or_special_checkpoint_is_refused(tmp_path, deadline):
    import os

    run, fed, state = _setup()
    path = tmp_path / "server.ckpt"
    save_checkpoint(path, run, fed, state)
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(path, run, fed)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(CheckpointError, match="FIFO"):
        load_checkpoint(path, run, fed)


def _a_trace():
    run, fed, state = _setup()
    from fedlangevin.fald.core.schedules import as_schedule

    state = dict(state, round=6)
    return _trace(run, fed, state, as_schedule(run.step_size))


def test_trace_round_trip_in_the_package_format(tmp_path):
    trace = _a_trace()
    path = tmp_path / "trace.pt"
    save_trace(trace, path)
    assert path.read_bytes()[:16] == b"FEDLANGEVIN-CKPT"
    back = load_trace(path, step_size=1e-3)
    assert torch.equal(back.samples, trace.samples) and back.samples.shape == (R, 3, D)
    np.testing.assert_array_equal(back.draw_rounds, trace.draw_rounds)
    np.testing.assert_array_equal(back.draw_steps, trace.draw_steps)
    assert back.settings == trace.settings and back.communication == trace.communication
    assert back.problem.node_ids == trace.problem.node_ids and torch.equal(back.problem.client_sizes, trace.problem.client_sizes)
    assert back.ledger == trace.ledger and back.dropouts == trace.dropouts
    assert math.isclose(back.seconds_per_round, trace.seconds_per_round)
    assert np.array_equal(np.asarray(back.step_sizes), np.asarray(trace.step_sizes))


@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop("settings"), r"the record lacks the entries 'settings'"),
    (lambda r: r.__setitem__("settings", {"dim": 3}), r"settings: .*missing"),
    (lambda r: r.__setitem__("samples", torch.zeros(R, 5, D)), r"5 draws but 3 draw rounds"),
    (lambda r: r.__setitem__("client_sizes", torch.tensor([1, 2])), r"client_sizes must hold one size >= 1 per node"),
    (lambda r: r.__setitem__("kind", "fedlangevin-flower-checkpoint"), r"is not a Flower FA-LD trace file"),
])
def test_a_trace_with_wrong_entries_is_a_checkpoint_error(change, message, tmp_path):
    path = tmp_path / "trace.pt"
    save_trace(_a_trace(), path)
    _rewrap(path, change)
    with pytest.raises(CheckpointError, match=message):
        load_trace(path, step_size=1e-3)


def test_a_file_of_the_earlier_bare_torch_save_format_is_not_read(tmp_path):
    """Earlier versions wrote torch.save pickles: refused by their signature, never unpickled."""
    run, fed, state = _setup()
    path = tmp_path / "server.ckpt"
    torch.save({"kind": "fedlangevin-flower-checkpoint", **state}, path)
    for load in (lambda: load_checkpoint(path, run, fed), lambda: load_trace(path, 1e-3)):
        with pytest.raises(CheckpointError, match="wrong file signature.*is not read, since loading it could run code"):
            load()
