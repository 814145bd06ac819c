"""On-disk sample store and bounded memory: the store holds what memory would, memory stays flat."""

from __future__ import annotations

import importlib.util
import json
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.runner.io.store import SampleStore, StoreError, open_store

ROOT = Path(__file__).resolve().parents[3]


def _problem(d: int = 2):
    cov = None if d == 2 else torch.eye(d) * 2.0
    return fl.problems.GaussianSimulation(num_clients=4, samples_per_client=5, cov=cov, seed=0)


def _mapped_file(address: int) -> str:
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        start, end = (int(x, 16) for x in parts[0].split("-"))
        if start <= address < end:
            return parts[-1] if len(parts) >= 6 else ""
    return ""


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_store_run_equals_memory_run_and_is_memory_mapped(dtype, tmp_path):
    kw = dict(step_size=1e-3, local_steps=2, chains=5, seed=3, dtype=dtype, participation=fl.SchemeI(2))
    memory = fl.FALD(_problem(), **kw).run(60, warmup=5, thin=4)
    disk = fl.FALD(_problem(), **kw).run(60, warmup=5, thin=4, store=tmp_path / "s")
    assert torch.equal(disk.samples, memory.samples) and disk.samples.dtype == dtype
    np.testing.assert_array_equal(disk.draw_rounds, memory.draw_rounds)
    np.testing.assert_array_equal(disk.draw_steps, memory.draw_steps)
    assert disk.store == str(tmp_path / "s") and memory.store is None
    if Path("/proc/self/maps").exists():  # the samples are the store file, mapped, not a copy in memory
        assert _mapped_file(disk.samples.data_ptr()).endswith(str(tmp_path / "s" / "samples.bin"))
    # the documented format, read with numpy alone
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["draws"] == memory.num_draws and meta["chains"] == 5 and meta["dim"] == 2
    raw = np.fromfile(tmp_path / "s" / "samples.bin", dtype=meta["dtype"]).reshape(meta["draws"], meta["chains"], meta["dim"])
    np.testing.assert_array_equal(raw.transpose(1, 0, 2), memory.samples.numpy())
    np.testing.assert_array_equal(np.fromfile(tmp_path / "s" / "draw_rounds.bin", dtype="<i8"), memory.draw_rounds)


def test_store_blocks_are_written_as_the_run_goes(tmp_path, monkeypatch):
    """Draws reach the file in blocks during the run, not at its end."""
    import fedlangevin.runner.runs as S

    monkeypatch.setattr(S, "STORE_BLOCK_BYTES", 5 * 3 * 2 * 8)  # 5 draws of 3 chains x d = 2
    sizes = []
    real_write = SampleStore.write

    def spy(self, block, rounds):
        sizes.append(block.shape[0])
        return real_write(self, block, rounds)

    monkeypatch.setattr(SampleStore, "write", spy)
    trace = fl.FALD(_problem(), step_size=1e-3, chains=3, seed=0).run(23, store=tmp_path / "s")
    assert sizes == [5, 5, 5, 5, 3] and trace.num_draws == 23


def test_store_refuses_a_used_directory_before_any_work(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "other.txt").write_text("x")
    sampler = fl.FALD(_problem(), step_size=1e-3, seed=0)
    with pytest.raises(ValueError, match="store"):
        sampler.run(5, store=tmp_path / "s")
    with pytest.raises(ValueError, match="store"):
        sampler.run(5, store=tmp_path / "s" / "other.txt")
    with pytest.raises(ValueError, match="keep_samples"):
        sampler.run(5, store=tmp_path / "new", keep_samples=False)
    assert sampler.state.round == 0 and not (tmp_path / "new").exists()


def test_reading_a_store_after_a_crash(tmp_path):
    store = SampleStore.create(tmp_path / "s", [0, 1], 3, np.float64)
    block = np.arange(4 * 2 * 3, dtype=np.float64).reshape(4, 2, 3)
    store.write(block, np.arange(1, 5))
    store.sync()
    store.write(block[:2] + 100, np.arange(5, 7))  # written but never committed: the process died here
    store._files[0].flush()
    store._files[1].flush()
    reader = open_store(tmp_path / "s")
    assert reader.draws == 4
    np.testing.assert_array_equal(reader.samples(), block.transpose(1, 0, 2))
    # the storage lost the tail of a committed write: refused, naming the file (never fewer draws silently)
    with open(tmp_path / "s" / "samples.bin", "r+b") as f:
        f.truncate(3 * 2 * 3 * 8 + 5)
    with pytest.raises(StoreError, match="meta.json records 4 committed draws but samples.bin holds 3 complete"):
        open_store(tmp_path / "s")
    with pytest.raises(StoreError, match="not a sample store"):
        open_store(tmp_path)


def test_streaming_stats_equal_the_batch_computations(tmp_path):
    """Running moments and per-draw W2 equal numpy/diagnostics on the same draws (no draws kept)."""
    problem = _problem()
    kw = dict(step_size=2e-3, local_steps=3, chains=40, seed=2, participation=fl.SchemeII(3))
    full = fl.FALD(problem, **kw).run(50, warmup=4, thin=2)
    stats = fl.FALD(problem, **kw).run(50, warmup=4, thin=2, keep_samples=False, target="posterior")
    assert stats.num_draws == 0 and stats.stats.draws == full.num_draws
    pooled = full.numpy().reshape(-1, 2)
    # float64 sums in another order: agreement to ~1e-13 relative
    np.testing.assert_allclose(stats.stats.mean, pooled.mean(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(stats.stats.cov, np.cov(pooled, rowvar=False, ddof=1), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(stats.stats.w2, full.w2(), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(stats.stats.w2_rounds, full.draw_rounds)
    from diagnostics import gaussian_w2

    mean, cov = full.posterior()
    assert stats.stats.w2_pooled() == pytest.approx(gaussian_w2(pooled.mean(0), np.cov(pooled, rowvar=False), mean, cov), rel=1e-9)


def test_peak_python_memory_of_a_store_run_does_not_grow_with_rounds(tmp_path):
    """tracemalloc: the peak of Python-level allocations (numpy included) during a run with
    the on-disk store is the same for 150 and 1,500 rounds, within 64 KiB; the longer run
    keeps 1,350 more draws of 40 chains x d = 20 (8.6 MB, were they kept in memory). The K = 2
    run's local-step check is off: its companions' state is of constant size, but their one-off
    steps (the pilot's decay time, a run's verdict) fall in one run or the other and would move
    that run's peak by more than the store's budget."""
    problem = _problem(d=20)
    sampler = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=40, seed=0, check_local_bias=False)
    sampler.run(50, store=tmp_path / "warm", stats=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: avoid thread contention on a shared machine
    tracemalloc.start()
    try:
        peaks = []
        for i, rounds in enumerate((150, 1500)):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            sampler.run(rounds, store=tmp_path / f"s{i}", stats=True)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()
        torch.set_num_threads(threads)
    assert peaks[1] - peaks[0] < 64 * 1024, peaks


def test_peak_process_memory_is_flat_with_the_store_and_grows_without():
    """Peak resident memory of a fresh process (torch's allocations included, which
    tracemalloc does not see), measured by the long-run benchmark's own probe: a 4,000-round
    run with the store grows it by < 8 MB more than a 400-round one; the same run keeping its
    draws in memory (100 chains x d = 20 x 8 bytes = 16 KB per draw, 64 MB in all) grows it by
    > 40 MB more, so the measurement can see growth."""
    spec = importlib.util.spec_from_file_location("bench_long_runs", ROOT / "benchmarks" / "bench_long_runs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    short, long, memory = (bench.memory_growth(rounds, 100, 20, mode, timeout=300)
                           for rounds, mode in ((400, "store"), (4000, "store"), (4000, "memory")))
    assert long - short < 8, (short, long)
    assert memory - long > 40, (long, memory)


def test_dropped_chains_keep_their_column_as_nan(tmp_path):
    from tests.runner.test_divergence import band_problem

    problem, init = band_problem()
    with pytest.warns(RuntimeWarning, match="dropped"):
        trace = fl.FALD(problem, step_size=0.1, temperature=1e-30, chains=len(init), init=init, seed=0).run(
            30, store=tmp_path / "s", on_divergence="drop")
    store = open_store(tmp_path / "s")
    raw = store.samples()
    assert raw.shape[0] == len(init) and store.dropped == trace.dropped
    for chain, (rnd, _) in trace.dropped.items():
        assert np.isfinite(raw[chain, : rnd - 1]).all() and np.isnan(raw[chain, rnd - 1 :]).all()
    assert np.isfinite(trace.samples.numpy()).all()


@pytest.mark.parametrize("name, offset", [("samples.bin", 0), ("samples.bin", -1), ("draw_rounds.bin", 3)])
def test_open_store_verifies_the_crc_of_every_committed_byte(tmp_path, name, offset):
    """One flipped bit anywhere in a finished store is an error naming the file, not altered values."""
    fl.FALD(_problem(), step_size=1e-3, chains=3, seed=0).run(30, store=tmp_path / "s", progress=False)
    clean = open_store(tmp_path / "s").samples().copy()
    path = tmp_path / "s" / name
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(data)
    with pytest.raises(StoreError, match=rf"{name} does not match its CRC-32 over the 30 committed draws"):
        open_store(tmp_path / "s")
    unchecked = open_store(tmp_path / "s", verify=False)  # the documented escape hatch reads it anyway
    if name == "samples.bin":
        assert not np.array_equal(unchecked.samples(), clean)
    with pytest.raises(ValueError, match="verify"):
        open_store(tmp_path / "s", verify="yes")


# -- special files: refused before they are opened (issue 31, item 5) ----------------------------
@pytest.mark.parametrize("name", ["meta.json", "samples.bin", "draw_rounds.bin"])
@pytest.mark.parametrize("kind, what", [("fifo", "FIFO"), ("dev-zero", "character device"),
                                        ("loop", "symbolic link loop")])
def test_special_store_files_are_refused_naming_the_file(name, kind, what, tmp_path, deadline):
    """A FIFO would block the open, /dev/zero never end, a link loop be a raw error: each is a
    StoreError naming the file, for the reader and for a resumed run alike."""
    from tests.runner.io.test_checkpoint import _special

    store = SampleStore.create(tmp_path / "s", [0, 1], 2, np.float64)
    store.write(np.zeros((3, 2, 2)), np.arange(1, 4))
    store.sync()
    store.close()
    (tmp_path / "s" / name).unlink()
    _special(kind, tmp_path / "s" / name)
    for opener in (open_store, lambda p: SampleStore.open(p, writable=True)):
        with pytest.raises(StoreError, match=rf"sample store '.*s': {name} '.*{name}' is .*{what}"):
            opener(tmp_path / "s")


def test_an_oversized_meta_json_is_refused_before_it_is_read(tmp_path):
    from fedlangevin.runner.io.store import META_MAX_BYTES

    SampleStore.create(tmp_path / "s", [0], 2, np.float64).close()
    os.truncate(tmp_path / "s" / "meta.json", 4 * META_MAX_BYTES)  # sparse: no disk blocks
    with pytest.raises(StoreError, match=r"meta.json '.*' is 1 GiB .*more than the 0.25 GiB"):
        open_store(tmp_path / "s")


# -- the committed count must match the files; a damaged meta.json is named (issue 31, item 3) -----
def _ten_draws(tmp_path):
    store = SampleStore.create(tmp_path / "st", [0, 1, 2], 2, np.float64)
    store.write(np.arange(10 * 3 * 2, dtype=np.float64).reshape(10, 3, 2), np.arange(1, 11))
    store.sync()
    store.close()
    return tmp_path / "st"


@pytest.mark.parametrize("name, size, holds", [
    ("samples.bin", 240, 5), ("samples.bin", 0, 0), ("draw_rounds.bin", 79, 9), ("draw_rounds.bin", 0, 0),
])
def test_files_shorter_than_the_committed_draws_are_a_store_error_naming_the_file(name, size, holds, tmp_path):
    """Half of samples.bin cut away used to give 5 draws silently (an empty file 0 draws; a short
    draw_rounds.bin 0): now the reader refuses, naming the file and both counts."""
    path = _ten_draws(tmp_path)
    with open(path / name, "r+b") as f:
        f.truncate(size)
    for verify in (True, False):
        with pytest.raises(StoreError, match=rf"meta.json records 10 committed draws but {name} holds {holds} complete"):
            open_store(path, verify=verify)


def test_uncommitted_bytes_after_the_committed_draws_are_still_ignored(tmp_path):
    """A write cut short by a kill leaves bytes after the committed draws: readers see the committed ones."""
    path = _ten_draws(tmp_path)
    with open(path / "samples.bin", "ab") as f:
        f.write(b"\x01" * 50)
    assert open_store(path).samples().shape == (3, 10, 2)


def _edit_meta(path, change):
    meta_path = path / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(change(meta)))


BAD_META = {
    "a list": (lambda m: [m], r"meta.json must hold a JSON object; got list"),
    "null": (lambda m: None, r"meta.json must hold a JSON object; got NoneType"),
    "draws 'x'": (lambda m: dict(m, draws="x"), r"meta.json: draws must be an integer >= 0; got 'x'"),
    "draws -1": (lambda m: dict(m, draws=-1), r"meta.json: draws must be an integer >= 0; got -1"),
    "draws 1.5": (lambda m: dict(m, draws=1.5), r"meta.json: draws must be an integer >= 0; got 1.5"),
    "draws 10**6": (lambda m: dict(m, draws=10**6), r"meta.json records 1000000 committed draws but samples.bin holds 10"),
    "dropped 'x'": (lambda m: dict(m, dropped="x"), r"meta.json: dropped must be"),
    "dropped bad pair": (lambda m: dict(m, dropped={"0": [1]}), r"meta.json: dropped must be"),
    "no chains": (lambda m: {k: v for k, v in m.items() if k != "chains"}, r"meta.json lacks 'chains'"),
    "chains true": (lambda m: dict(m, chains=True), r"meta.json: chains must be an integer >= 1; got True"),
    "dim 0": (lambda m: dict(m, dim=0), r"meta.json: dim must be an integer >= 1; got 0"),
    "dtype": (lambda m: dict(m, dtype="object"), r"meta.json: dtype must be one of"),
    "chain ids": (lambda m: dict(m, chain_ids=[0, 1]), r"meta.json: chain_ids must be a list of 3 integers"),
    "var names": (lambda m: dict(m, var_names=[1, 2]), r"meta.json: var_names must be null or a list of 2 strings"),
    "crc32": (lambda m: dict(m, crc32={"samples": "x"}), r"meta.json: crc32 must be"),
}


@pytest.mark.parametrize("case", sorted(BAD_META))
def test_a_damaged_meta_json_is_a_store_error_naming_it(case, tmp_path):
    path = _ten_draws(tmp_path)
    change, message = BAD_META[case]
    _edit_meta(path, change)
    with pytest.raises(StoreError, match=rf"sample store '.*st': {message}"):
        open_store(path)
    if case != "draws 10**6":  # a resumed run checks its own count against the files (SampleStore.truncate)
        with pytest.raises(StoreError, match="meta.json"):
            SampleStore.open(path, writable=True)


_HOLDER = """
import sys, time
import fedlangevin as fl

def hold(self, run, rounds, bar):  # run A has made its store and holds it; it commits nothing yet
    print("running", flush=True)
    time.sleep(120)

fl.FALD._advance = hold
problem = fl.problems.GaussianSimulation(num_clients=4, samples_per_client=5, seed=0)
fl.FALD(problem, 1e-3, seed=0).run(50, store=sys.argv[1], checkpoint=sys.argv[2], progress=False)
"""


def test_a_store_a_live_run_holds_is_never_cleared_and_an_abandoned_one_is_recovered(tmp_path):
    """Run A (another process) writes ``shared`` with checkpoint a.ckpt and has committed no draws yet;
    run B with the same store and checkpoint b.ckpt used to take A's store for a killed run's leftovers
    and clear it. The store's own lock refuses B; once A is dead (kill -9) the store is recovered."""
    import signal
    import subprocess
    import sys

    shared = tmp_path / "shared"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(shared), str(tmp_path / "a.ckpt")],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "running"
        before = {p.name: p.stat().st_ino for p in shared.iterdir()}
        sampler = fl.FALD(_problem(), 1e-3, seed=1)
        with pytest.raises(ValueError, match=r"store .*shared' is in use by another run"):
            sampler.run(5, store=shared, checkpoint=tmp_path / "b.ckpt", progress=False)
        assert holder.poll() is None  # A is still running, its store untouched
        assert {p.name: p.stat().st_ino for p in shared.iterdir()} == before
        assert open_store(shared).draws == 0 and not (tmp_path / "b.ckpt").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    # A died before its first checkpoint: the system released its lock, and B starts afresh in the store
    trace = fl.FALD(_problem(), 1e-3, seed=1).run(5, store=shared, checkpoint=tmp_path / "b.ckpt", progress=False)
    assert open_store(shared).draws == 5 and torch.equal(trace.samples, fl.FALD(_problem(), 1e-3, seed=1).run(5).samples)


def test_a_store_is_written_by_one_run_at_a_time_and_read_by_any(tmp_path):
    """The store's lock is the store's own: a second writer in the same process is refused too (a copy of the
    checkpoint resumes into the same store), readers never are, and closing the writer lets the lock go."""
    import shutil

    path = tmp_path / "run.ckpt"
    fl.FALD(_problem(), 1e-3, chains=2, seed=0).run(20, store=tmp_path / "s", checkpoint=path, checkpoint_every=10)
    prev = path.with_name(path.name + ".prev")  # round 10 of 20: an unfinished run writing the store
    shutil.copy(prev, tmp_path / "copy.ckpt")
    first = fl.FALD.resume(prev)
    with pytest.raises(ValueError, match=r"store .*s' is in use by another run"):
        fl.FALD.resume(tmp_path / "copy.ckpt")
    assert open_store(tmp_path / "s").draws == 10  # reading is never locked
    trace = first.run()
    assert trace.num_draws == 20 and open_store(tmp_path / "s").draws == 20
    store = SampleStore.create(tmp_path / "t", [0, 1], 2, np.float64)
    with pytest.raises(ValueError, match=r"store .*t' is in use by another run"):
        SampleStore.open(tmp_path / "t", writable=True)
    store.close()
    SampleStore.open(tmp_path / "t", writable=True).close()
