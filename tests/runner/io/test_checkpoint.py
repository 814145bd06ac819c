"""Checkpoint and resume: bit-for-bit continuation, SIGKILL mid-run, damaged files, what must be passed again.

Every comparison here is exact (``torch.equal``): a resumed run must make the same draws as
an uninterrupted one with the same seed on the same device, since the checkpoint holds the
generator state, the step counter and everything else a round depends on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.runner.io.checkpoint import CheckpointError, checkpoint_info
from fedlangevin.runner.io.store import StoreError
from fedlangevin.problems import QuadraticProblem
from tests.stops import dies_in_round
from tests.targets import OpaqueProblem, small_problem_arrays

ROOT = Path(__file__).resolve().parents[3]


def _problem(**kw):
    args = dict(num_clients=6, samples_per_client=5, alpha=2.0, seed=3)
    args.update(kw)
    return fl.problems.GaussianSimulation(**args)


CONFIGS = {
    "full": dict(),
    "schemeI-minibatch-rho": dict(participation=fl.SchemeI(4), batch_size=2, correlation=0.4),
    "schemeII-K3": dict(participation=fl.SchemeII(3), local_steps=3),
    "schemeI-paper-noise": dict(participation=fl.SchemeI(4, noise="paper"), correlation=0.4),
    "float32-paper-decay": dict(dtype=torch.float32, step_size="paper", local_steps=2),
    "float64-noise": dict(noise_dtype=torch.float64, correlation=1.0, local_steps=2),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_run_checkpoint_resume_run_equals_one_uninterrupted_run(name, tmp_path):
    """The issue's statement: run(20, checkpoint) then resume(...).run(20) ends on run(40)'s last draw."""
    kw = dict(step_size=1e-3, chains=5, seed=11)
    kw.update(CONFIGS[name])
    problem = _problem()
    whole = fl.FALD(problem, **kw).run(rounds=40)
    first = fl.FALD(problem, **kw).run(rounds=20, checkpoint=tmp_path / "run.ckpt")
    resumed = fl.FALD.resume(tmp_path / "run.ckpt")
    assert resumed.unfinished is None and resumed.state.round == 20
    second = resumed.run(rounds=20)
    assert torch.equal(second.samples[:, -1], whole.samples[:, -1])
    assert torch.equal(torch.cat([first.samples, second.samples], 1), whole.samples)
    np.testing.assert_array_equal(second.draw_rounds, np.arange(21, 41))
    assert second.ledger["steps"] == whole.ledger["steps"] and second.ledger["eta_sum"] == whole.ledger["eta_sum"]
    once = fl.FALD(problem, **kw)
    once.run(40)
    # totals of two runs of 20 rounds: the same counts, summed in another order (float rounding)
    assert resumed.communication.rounds == once.communication.rounds == 40
    assert resumed.communication.uploads == pytest.approx(once.communication.uploads, rel=1e-12)
    assert resumed.ledger["uploads"] == once.ledger["uploads"]  # the ledger sums round by round: exact


def test_user_problem_and_function_step_size_must_be_passed_again(tmp_path):
    h, b, p = small_problem_arrays()
    problem = OpaqueProblem(QuadraticProblem(h, b, p))
    schedule = lambda k: 0.01 / (1 + k) ** 0.3  # noqa: E731 - a user's function, not storable
    kw = dict(step_size=schedule, local_steps=2, chains=4, seed=5)
    whole = fl.FALD(problem, **kw).run(30)
    fl.FALD(problem, **kw).run(10, checkpoint=tmp_path / "c")
    assert not (tmp_path / "c.problem").exists()  # nothing of a user's class is written
    with pytest.raises(ValueError, match="problem="):
        fl.FALD.resume(tmp_path / "c")
    with pytest.raises(ValueError, match="step_size="):
        fl.FALD.resume(tmp_path / "c", problem=problem)
    resumed = fl.FALD.resume(tmp_path / "c", problem=problem, step_size=schedule)
    assert torch.equal(resumed.run(20).samples, whole.samples[:, 10:])
    # a different problem is refused; a different step size is allowed, with a warning
    other = OpaqueProblem(QuadraticProblem(h[:2], b[:2], [0.5, 0.5]))
    with pytest.raises(ValueError, match="does not match"):
        fl.FALD.resume(tmp_path / "c", problem=other, step_size=schedule)
    with pytest.warns(UserWarning, match="step_size differs"):
        fl.FALD.resume(tmp_path / "c", problem=problem, step_size=1e-3)


def test_builtin_problem_is_rebuilt_from_the_checkpoint(tmp_path):
    problem = _problem()
    fl.FALD(problem, step_size=1e-3, chains=2, seed=0).run(3, checkpoint=tmp_path / "c")
    rebuilt = fl.FALD.resume(tmp_path / "c").problem
    assert type(rebuilt) is type(problem) and rebuilt is not problem
    for name in ("hessians", "shifts", "weights", "data", "client_sizes"):
        assert torch.equal(getattr(rebuilt, name), getattr(problem, name))
    info = checkpoint_info(tmp_path / "c")
    assert info["round"] == 3 and info["step"] == 3 and info["run"]["finished"]


def _worker(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    return script


def _spawn(script: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=str(script.parent),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# The run every subprocess does (and the test repeats in-process without interruption).
RUN_SETUP = """
import fedlangevin as fl
problem = fl.problems.GaussianSimulation(num_clients=6, samples_per_client=5, alpha=2.0, seed=3)
sampler = fl.FALD(problem, step_size=1e-3, local_steps=2, participation=fl.SchemeI(4), batch_size=2,
                  correlation=0.3, chains=4, seed=21)
RUN = dict(rounds=300, warmup=7, thin=3, stats=True, target="posterior")
"""


def _uninterrupted(**extra):
    namespace: dict = {}
    exec(RUN_SETUP, namespace)
    return namespace["sampler"].run(**namespace["RUN"], **extra)


def _assert_same_run(trace, reference):
    assert torch.equal(trace.samples, reference.samples)
    np.testing.assert_array_equal(trace.draw_rounds, reference.draw_rounds)
    assert trace.communication == reference.communication
    assert trace.ledger == reference.ledger
    assert trace.stats.count == reference.stats.count
    # block boundaries of the batched W2 differ after a resume: equal up to float64 rounding
    np.testing.assert_allclose(trace.stats.w2, reference.stats.w2, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(trace.stats.mean, reference.stats.mean, rtol=1e-12, atol=1e-15)


def test_sigkill_from_outside_mid_run_then_resume_gives_the_uninterrupted_samples(tmp_path):
    """A subprocess killed with SIGKILL mid-run, then resumed here: identical samples.

    The worker's rounds are slowed to about 5 ms so that the kill lands mid-run; the test
    waits for a checkpoint past round 40, kills, and checks the run was really cut short.
    """
    script = _worker(tmp_path, RUN_SETUP + """
import time
_round = sampler._kernel.step
def slow_round(*a, **k):
    time.sleep(0.005)
    return _round(*a, **k)
sampler._kernel = sampler._kernel._replace(step=slow_round)
sampler.run(**RUN, store="store", checkpoint="run.ckpt", checkpoint_every=10)
print("finished")
""")
    proc = _spawn(script)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if checkpoint_info(tmp_path / "run.ckpt")["round"] >= 40:
                    break
            except CheckpointError:
                pass
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        time.sleep(0.037)  # land between checkpoints
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    done = checkpoint_info(tmp_path / "run.ckpt")["run"]["done"]
    assert 40 <= done < 300, "the kill did not land mid-run"

    resumed = fl.FALD.resume(tmp_path / "run.ckpt")
    assert resumed.unfinished["done"] == done
    trace = resumed.run()
    _assert_same_run(trace, _uninterrupted())
    assert trace.store is not None and Path(trace.store).resolve() == (tmp_path / "store").resolve()


# Kill points inside the process: mid-round, and at each step of an atomic checkpoint write.
KILLS = {
    "mid-round": "sampler._kernel = sampler._kernel._replace(step=killing(sampler._kernel.step, 95))",  # round 95; last checkpoint at 90
    "at-a-rename": "C.os.replace = killing(C.os.replace, 9)",  # a checkpoint's temporary file is complete
    "at-keeping-prev": "C.os.link = killing(C.os.link, 5)",  # before the current checkpoint becomes .prev
}


@pytest.mark.parametrize(
    "where,store",
    [("mid-round", False), ("mid-round", True), ("at-a-rename", False), ("at-keeping-prev", True)],
)
def test_self_sigkill_at_any_point_leaves_a_resumable_checkpoint(where, store, tmp_path):
    script = _worker(tmp_path, RUN_SETUP + """
import os, signal
import fedlangevin.fald.sampler as S
import fedlangevin.runner.io.checkpoint as C
def killing(fn, n):
    calls = [0]
    def wrapper(*a, **k):
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return fn(*a, **k)
    return wrapper
""" + KILLS[where] + """
extra = dict(store="store") if STORE else {}
sampler.run(**RUN, **extra, checkpoint="run.ckpt", checkpoint_every=10)
print("finished")
""".replace("STORE", str(store)))
    proc = _spawn(script)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, (out, err)
    assert "finished" not in out
    trace = fl.FALD.resume(tmp_path / "run.ckpt").run()
    _assert_same_run(trace, _uninterrupted())


def _checkpointed(tmp_path, rounds=30, every=10):
    problem = _problem()
    kw = dict(step_size=1e-3, chains=3, seed=4, participation=fl.SchemeII(2))
    fl.FALD(problem, **kw).run(rounds, checkpoint=tmp_path / "c", checkpoint_every=every)
    return problem, kw


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_damaged_checkpoint_gives_a_clear_error_and_the_previous_one_is_usable(damage, tmp_path):
    problem, kw = _checkpointed(tmp_path)  # checkpoints at rounds 10, 20 and the final one at 30
    path = tmp_path / "c"
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
        message = "truncated"
    elif damage == "flip":
        pos = len(data) - 100
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0x10]) + data[pos + 1 :])
        message = "corrupted"
    elif damage == "empty":
        path.write_bytes(b"")
        message = "truncated"
    else:
        path.write_bytes(b"PK\x03\x04 not a checkpoint at all" * 10)
        message = "not a fedlangevin checkpoint"
    with pytest.raises(CheckpointError, match=message) as info:
        fl.FALD.resume(path)
    assert "c.prev" in str(info.value) and "round 20" in str(info.value) and "fallback=True" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.warns(UserWarning, match="previous checkpoint"):
        assert fl.FALD.resume(path, fallback=True).state.round == 20
    # the previous checkpoint (round 20) continues exactly like the original run did
    whole = fl.FALD(problem, **kw).run(30)
    prev = fl.FALD.resume(tmp_path / "c.prev")
    assert prev.state.round == 20 and prev.unfinished["done"] == 20
    assert torch.equal(prev.run().samples, whole.samples)  # finishes the 30-round run
    # ... writing its checkpoints to c again, without keeping the damaged file as c.prev
    assert checkpoint_info(path)["round"] == 30 and checkpoint_info(tmp_path / "c.prev")["round"] == 20


def test_both_checkpoints_damaged_or_missing(tmp_path):
    _checkpointed(tmp_path)
    for name in ("c", "c.prev"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(CheckpointError, match="previous checkpoint is unusable too"):
        fl.FALD.resume(tmp_path / "c", fallback=True)
    with pytest.raises(CheckpointError, match="no checkpoint file"):
        fl.FALD.resume(tmp_path / "missing")


def test_a_failing_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    """A full disk: the write fails with OSError, the old checkpoint stays, the draws are kept."""
    import fedlangevin.runner.io.checkpoint as C

    problem, kw = _problem(), dict(step_size=1e-3, chains=2, seed=0)
    sampler = fl.FALD(problem, **kw)
    real, real_write = C.os.fsync, C.write_file
    writes = [0]

    def counting_write(*args, **kwargs):
        writes[0] += 1
        return real_write(*args, **kwargs)

    def full_disk(fd):
        if writes[0] >= 3:  # written: the problem file, the checkpoint at round 10; then the disk is full
            raise OSError(28, "No space left on device")
        return real(fd)

    monkeypatch.setattr(C, "write_file", counting_write)
    monkeypatch.setattr(C.os, "fsync", full_disk)
    with pytest.raises(OSError, match="previous checkpoint, if any, is intact"):
        sampler.run(30, checkpoint=tmp_path / "c", checkpoint_every=10)
    monkeypatch.setattr(C.os, "fsync", real)
    assert not (tmp_path / "c.tmp").exists()
    assert checkpoint_info(tmp_path / "c")["round"] == 10
    assert sampler.state.round == 20 and sampler.interrupted_trace.num_draws == 20
    whole = fl.FALD(problem, **kw).run(30)
    assert torch.equal(sampler.interrupted_trace.samples, whole.samples[:, :20])
    assert torch.equal(sampler.run(10).samples, whole.samples[:, 20:])  # the sampler itself is consistent


def test_continuing_an_unfinished_run(tmp_path):
    problem = _problem()
    kw = dict(step_size=1e-3, chains=3, seed=8)
    ref = fl.FALD(problem, **kw).run(25, warmup=4, thin=2)
    fl.FALD(problem, **kw).run(20, warmup=4, thin=2, checkpoint=tmp_path / "c", checkpoint_every=6)
    # the checkpoint at round 18 of the 20-round run, as if the process had died at round 19
    resumed = fl.FALD.resume(tmp_path / "c.prev")
    assert resumed.unfinished == {"rounds": 20, "done": 18, "warmup": 4, "thin": 2, "draws": 7, "store": None}
    for bad in (dict(thin=3), dict(warmup=0), dict(keep_samples=False), dict(on_divergence="drop"),
                dict(keep_samples=1), dict(on_divergence="ignore"), dict(rounds=7, progress="yes")):
        with pytest.raises(ValueError, match=next(iter(bad)) if "progress" not in bad else "progress"):
            resumed.run(**bad)
    assert resumed.unfinished["rounds"] == 20  # a rejected call leaves the plan unchanged
    trace = resumed.run(rounds=7)  # 7 more rounds of the same run: rounds 19..25
    assert torch.equal(trace.samples, ref.samples)
    np.testing.assert_array_equal(trace.draw_rounds, ref.draw_rounds)
    assert resumed.unfinished is None
    again = fl.FALD.resume(tmp_path / "c.prev")
    again.discard_unfinished()
    assert again.run(2).num_draws == 2


def test_store_changed_after_the_checkpoint_is_detected(tmp_path):
    problem = _problem()
    kw = dict(step_size=1e-3, chains=3, seed=8)
    fl.FALD(problem, **kw).run(20, store=tmp_path / "s", checkpoint=tmp_path / "c", checkpoint_every=5)
    samples = tmp_path / "s" / "samples.bin"
    data = bytearray(samples.read_bytes())
    data[10] ^= 1
    samples.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="do not match the checkpoint"):
        fl.FALD.resume(tmp_path / "c.prev")
    samples.write_bytes(bytes(data[:100]))
    with pytest.raises(StoreError, match="truncated"):
        fl.FALD.resume(tmp_path / "c.prev")


def test_checkpoint_file_loads_without_pickled_code(tmp_path):
    """The payload is plain tensors and values: torch.load(weights_only=True) reads it."""
    import io

    from fedlangevin.runner.io.checkpoint import _HEADER

    _checkpointed(tmp_path, rounds=5, every=5)
    data = (tmp_path / "c").read_bytes()
    record = torch.load(io.BytesIO(data[_HEADER.size :]), weights_only=True)
    assert record["kind"] == "fedlangevin.FALD" and record["round"] == 5
    assert isinstance(record["generator"], torch.Tensor) and record["generator"].dtype == torch.uint8


def test_interrupted_in_process_the_sampler_stays_consistent(monkeypatch):
    """Ctrl-C mid-round: the sampler stays at the last completed round (random stream
    included), the draws so far are in interrupted_trace, and later runs continue exactly."""
    problem, kw = _problem(), dict(step_size=1e-3, chains=3, seed=6, participation=fl.SchemeI(3), batch_size=2)
    whole = fl.FALD(problem, **kw).run(20)
    sampler = fl.FALD(problem, **kw)
    kernel = sampler._kernel
    real, calls = kernel.step, [0]

    def interrupt_in_round_8(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 8:
            torch.randn(5, generator=sampler.generator)  # the interrupted round had already drawn noise
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sampler, "_kernel", kernel._replace(step=interrupt_in_round_8))
    with pytest.raises(KeyboardInterrupt):
        sampler.run(20)
    monkeypatch.setattr(sampler, "_kernel", kernel)
    assert sampler.state.round == 7 and sampler.unfinished is None
    assert torch.equal(sampler.interrupted_trace.samples, whole.samples[:, :7])
    assert torch.equal(sampler.run(13).samples, whole.samples[:, 7:])


def test_default_checkpoints_follow_the_clock(tmp_path, monkeypatch):
    import fedlangevin.runner.io.checkpoint as C
    import fedlangevin.runner.loop as S

    writes = []
    real = C.write_file
    monkeypatch.setattr(C, "write_file", lambda path, *a, **k: (writes.append(Path(path).name), real(path, *a, **k)))
    fl.FALD(_problem(), step_size=1e-3, seed=0).run(5, checkpoint=tmp_path / "a")
    assert writes == ["a.problem", "a"]  # well under 60 s: only the final checkpoint
    writes.clear()
    monkeypatch.setattr(S, "CHECKPOINT_SECONDS", 0.0)
    fl.FALD(_problem(), step_size=1e-3, seed=0).run(5, checkpoint=tmp_path / "b")
    assert writes == ["b.problem"] + ["b"] * 5  # after rounds 1-4, and the final one


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("store", [False, True])
def test_cuda_resume_is_bit_for_bit(store, tmp_path):
    problem = _problem()
    kw = dict(step_size=1e-3, local_steps=2, chains=64, seed=3, device="cuda", participation=fl.SchemeI(3),
              batch_size=2, correlation=0.5)
    extra = {"store": tmp_path / "s"} if store else {}
    whole = fl.FALD(problem, **kw).run(30, thin=2, target="posterior")
    fl.FALD(problem, **kw).run(30, thin=2, target="posterior", checkpoint=tmp_path / "c", checkpoint_every=10, **extra)
    resumed = fl.FALD.resume(tmp_path / "c.prev")  # round 20 of 30
    assert resumed.device.type == "cuda" and resumed.unfinished["done"] == 20
    trace = resumed.run()
    assert torch.equal(trace.samples, whole.samples)
    np.testing.assert_allclose(trace.stats.w2, whole.stats.w2, rtol=1e-12)


def test_a_moved_run_folder_still_resumes(tmp_path):
    problem = _problem()
    kw = dict(step_size=1e-3, chains=3, seed=8)
    whole = fl.FALD(problem, **kw).run(20)
    (tmp_path / "a").mkdir()
    fl.FALD(problem, **kw).run(20, store=tmp_path / "a" / "s", checkpoint=tmp_path / "a" / "c", checkpoint_every=5)
    (tmp_path / "a").rename(tmp_path / "b")
    trace = fl.FALD.resume(tmp_path / "b" / "c.prev").run()
    assert torch.equal(trace.samples, whole.samples)
    assert Path(trace.store).resolve() == (tmp_path / "b" / "s").resolve()


# -- checkpoint and store paths (bad-input sweep, findings 13-14) ------------------------------------------
def _gauss():
    return fl.problems.GaussianSimulation(num_clients=4, samples_per_client=5, seed=0)


def test_an_unrelated_existing_file_is_never_overwritten(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(ValueError, match=r"checkpoint .*notes.txt' exists and is not a fedlangevin checkpoint"):
        fl.FALD(_gauss(), 1e-3, seed=0).run(5, checkpoint=notes, progress=False)
    assert notes.read_text() == "my notes"
    # a fedlangevin checkpoint at the path is overwritten as before
    fl.FALD(_gauss(), 1e-3, seed=0).run(5, checkpoint=tmp_path / "run.ckpt", progress=False)
    fl.FALD(_gauss(), 1e-3, seed=1).run(5, checkpoint=tmp_path / "run.ckpt", progress=False)
    assert checkpoint_info(tmp_path / "run.ckpt")["settings"]["seed"] == 1


def test_a_checkpoint_path_in_use_is_refused_and_a_killed_holder_leaves_no_stale_lock(tmp_path):
    path = tmp_path / "run.ckpt"
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from fedlangevin.runner.io.checkpoint import CheckpointLock
        lock = CheckpointLock(Path({str(path)!r}))
        print("locked", flush=True)
        time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "locked"
        sampler = fl.FALD(_gauss(), 1e-3, seed=0)
        with pytest.raises(ValueError, match=r"checkpoint .*run.ckpt' is in use by another run"):
            sampler.run(5, checkpoint=path, store=tmp_path / "s", progress=False)
        assert not (tmp_path / "s").exists() and not path.exists()  # refused before any work
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    # the operating system released the flock of the killed holder: the run goes ahead
    fl.FALD(_gauss(), 1e-3, seed=0).run(5, checkpoint=path, progress=False)
    assert path.is_file()


def test_unwritable_checkpoint_folder_and_bad_store_places_fail_up_front(tmp_path, monkeypatch):
    import fedlangevin._paths as paths

    (tmp_path / "afile").write_text("x")
    sampler = fl.FALD(_gauss(), 1e-3, seed=0)
    with pytest.raises(ValueError, match=r"^store '.*afile/s': .*afile' is a file"):
        sampler.run(5, store=tmp_path / "afile" / "s", progress=False)
    with pytest.raises(ValueError, match=r"^store '/proc/fedlangevin-store' is under /proc"):
        sampler.run(5, store="/proc/fedlangevin-store", progress=False)
    locked = tmp_path / "ro"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(paths.os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
    with pytest.raises(ValueError, match=r"^checkpoint '.*ro/run.ckpt': folder .* is not writable"):
        sampler.run(5, checkpoint=locked / "run.ckpt", progress=False)
    assert sampler.state.round == 0  # no round ran


def test_a_copied_run_folder_resumes_into_its_own_store(tmp_path):
    import shutil

    original = tmp_path / "orig"
    original.mkdir()
    sampler = fl.FALD(_gauss(), 1e-3, chains=3, seed=0)
    with pytest.raises(KeyboardInterrupt):
        _interrupt(sampler, original)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    before = {p.name: p.read_bytes() for p in (original / "samples").iterdir()}
    trace = fl.FALD.resume(copy / "run.ckpt").run()
    assert Path(trace.store).resolve() == (copy / "samples").resolve()
    assert {p.name: p.read_bytes() for p in (original / "samples").iterdir()} == before  # untouched
    whole = fl.FALD(_gauss(), 1e-3, chains=3, seed=0).run(40, progress=False)
    assert torch.equal(trace.samples, whole.samples)


def _interrupt(sampler, folder):
    """Run 40 rounds with checkpoints every 10 and stop with Ctrl-C in round 25."""
    kernel = sampler._kernel
    sampler._kernel = kernel._replace(step=dies_in_round(kernel.step, 25))
    try:
        sampler.run(40, store=folder / "samples", checkpoint=folder / "run.ckpt", checkpoint_every=10, progress=False)
    finally:
        sampler._kernel = kernel


# -- special files: refused before they are opened (issue 31, item 5) ----------------------------
def _special(kind: str, path: Path) -> Path:
    """Make ``path`` a FIFO, a link to /dev/zero, or a symbolic-link loop (path -> loop -> path)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        os.symlink("/dev/zero", path)
    else:
        os.symlink(path.with_name(path.name + ".loop"), path)
        os.symlink(path, path.with_name(path.name + ".loop"))
    return path


SPECIAL = {"fifo": "FIFO", "dev-zero": "character device", "loop": "symbolic link loop"}


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_special_files_are_refused_before_they_are_opened(kind, tmp_path, deadline):
    """A FIFO used to block forever, /dev/zero to exhaust memory, a link loop to be a raw RuntimeError."""
    path = _special(kind, tmp_path / "c")
    for read in (fl.FALD.resume, checkpoint_info):
        with pytest.raises(CheckpointError, match=rf"checkpoint '.*c' is .*{SPECIAL[kind]}"):
            read(path)
    with pytest.raises(ValueError, match=r"checkpoint '.*c' "):  # as a target for writing: before any work
        fl.FALD(_problem(), 1e-3).run(2, checkpoint=path)


def test_dev_zero_itself_is_refused(deadline):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(CheckpointError, match=r"'/dev/zero' is a character device, not a regular file"):
        fl.FALD.resume("/dev/zero")


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_special_prev_and_problem_files_are_refused(kind, tmp_path, deadline):
    _checkpointed(tmp_path, rounds=10, every=5)
    problem_file = tmp_path / "c.problem"
    problem_file.unlink()
    _special(kind, problem_file)
    with pytest.raises(CheckpointError, match=rf"c.problem' is .*{SPECIAL[kind]}"):
        fl.FALD.resume(tmp_path / "c")
    (tmp_path / "c").write_bytes(b"damaged")
    (tmp_path / "c.prev").unlink()
    _special(kind, tmp_path / "c.prev")
    with pytest.raises(CheckpointError, match=rf"previous checkpoint is unusable too: .*c.prev' is .*{SPECIAL[kind]}"):
        fl.FALD.resume(tmp_path / "c", fallback=True)


def test_a_checkpoint_larger_than_memory_is_refused_before_it_is_read(tmp_path):
    """A (sparse) file claiming more bytes than this machine's memory is refused by its size."""
    from fedlangevin._validation import cpu_memory_bytes
    from fedlangevin.runner.io.checkpoint import _HEADER, MAGIC

    total = cpu_memory_bytes()
    if total is None:
        pytest.skip("this system does not report its memory")
    path = tmp_path / "c"
    with open(path, "wb") as f:
        f.write(_HEADER.pack(MAGIC, 1, total, bytes(32)))
        f.truncate(_HEADER.size + total + 1)  # no disk blocks: the file is sparse
    with pytest.raises(CheckpointError, match=r"checkpoint '.*c' is .* GiB .*more than the .* GiB"):
        fl.FALD.resume(path)


# -- object entries: an explicit allow-list, nothing imported by name (issue 31, item 2) ---------
def _rewrap(path: Path, change) -> None:
    """Apply ``change(record)`` to the checkpoint at ``path`` and write it back with a valid checksum."""
    from fedlangevin.runner.io.checkpoint import read_file, write_file

    record, _ = read_file(path)
    change(record)
    write_file(path, record, keep_previous=False)


@pytest.mark.parametrize("module, qualname", [
    ("fedlangevin.__main__", "main"), ("fedlangevin.distributed.__main__", "main"),
    ("fedlangevin.runner.results.settings", "Settings"), ("os", "system"),
])
@pytest.mark.parametrize("entry", ["schedule", "problem"])
def test_a_checkpoint_naming_any_other_class_imports_nothing(module, qualname, entry, tmp_path, capsys):
    """A valid checksum over an object entry naming fedlangevin.__main__ used to import it: the CLI
    printed its help and raised SystemExit. Only the allow-listed classes are rebuilt."""
    _checkpointed(tmp_path, rounds=5, every=5)
    legacy = {"__kind__": "object", "module": module, "qualname": qualname, "state": {}}
    new = {"__kind__": "object", "class": f"{module}.{qualname}", "state": {}}
    for bad in (legacy, new, dict(new, **{"class": qualname})):
        if entry == "schedule":
            _rewrap(tmp_path / "c", lambda r: r.__setitem__("schedule", bad))
        else:
            _rewrap(tmp_path / "c.problem", lambda r: r.__setitem__("problem", bad))
        before = set(sys.modules)
        with pytest.raises(CheckpointError, match=r"names class .*which is not one a checkpoint stores"):
            fl.FALD.resume(tmp_path / "c")
        assert set(sys.modules) == before  # nothing was imported
        assert capsys.readouterr().out == ""


def test_stored_objects_are_rebuilt_through_their_checks(tmp_path):
    """An allow-listed settings record is rebuilt by its constructor: a schedule with eta = -5 or
    a record with unknown attributes is a CheckpointError, not a sampler with a negative step."""
    _checkpointed(tmp_path, rounds=5, every=5)
    for state, message in (({"eta": -5.0}, r"stored Constant is invalid: step_size must be"),
                           ({"eta": 1e-3, "x": 1}, r"stored Constant has the attributes \['eta', 'x'\]"),
                           ({}, r"stored Constant has the attributes \[\]"),
                           ({"__class__": 1}, r"no valid attribute record"),
                           ("eta", r"no valid attribute record")):
        _rewrap(tmp_path / "c", lambda r: r.__setitem__(
            "schedule", {"__kind__": "object", "class": "Constant", "state": state}))
        with pytest.raises(CheckpointError, match=message):
            fl.FALD.resume(tmp_path / "c")
    _rewrap(tmp_path / "c", lambda r: r.__setitem__(
        "schedule", {"__kind__": "object", "class": "Constant", "state": {"eta": 2e-3}}))
    assert fl.FALD.resume(tmp_path / "c").schedule(0) == 2e-3


# -- the format version is checksummed; wrong contents are named (issue 31, item 4) ----------------
def _flip_version(path: Path, version: int) -> None:
    data = bytearray(path.read_bytes())
    data[16] = version
    path.write_bytes(bytes(data))


def test_the_format_version_byte_is_covered_by_the_checksum(tmp_path):
    """Byte 16 (the format version) was outside the SHA-256: changing it went unnoticed."""
    import shutil

    from fedlangevin.runner.io.checkpoint import VERSION

    _checkpointed(tmp_path, rounds=5, every=5)
    path = tmp_path / "c"
    assert path.read_bytes()[16] == VERSION == 2
    _flip_version(path, 1)
    with pytest.raises(CheckpointError, match="corrupted: its SHA-256 checksum does not match"):
        checkpoint_info(path)
    _flip_version(path, 0)
    with pytest.raises(CheckpointError, match="corrupted: format version 0 does not exist"):
        checkpoint_info(path)
    _flip_version(path, 2)
    assert checkpoint_info(path)["round"] == 5
    # a version-1 file (checksum of the payload alone) is still read, and its version byte is guarded too
    data = Path(__file__).resolve().parents[2] / "fald" / "data"
    for name in ("v1_run.ckpt", "v1_run.ckpt.problem"):
        shutil.copy(data / name, tmp_path / name)
    old = tmp_path / "v1_run.ckpt"
    assert old.read_bytes()[16] == 1 and checkpoint_info(old)["round"] > 0
    _flip_version(old, 2)
    with pytest.raises(CheckpointError, match="corrupted: its SHA-256 checksum does not match"):
        checkpoint_info(old)
    _flip_version(old, 0)
    with pytest.raises(CheckpointError, match="format version 0 does not exist"):
        fl.FALD.resume(old)


def test_a_rule_stored_before_its_noise_was_a_setting_resumes_with_the_papers_noise():
    """Participation rules gained ``noise`` ("calibrated" by default); a checkpoint written before ran
    eq. 10's noise and stores the rule without it: it decodes to noise="paper" (tests/fald/test_golden.py
    resumes such a file bit for bit). A rule stored with its noise keeps it."""
    from fedlangevin.runner.io.checkpoint import decode, encode

    old = {"__kind__": "object", "class": "SchemeI", "state": {"num_sampled": 3}}
    assert decode(old) == fl.SchemeI(3, noise="paper")
    old_ii = {"__kind__": "object", "class": "SchemeII", "state": {"num_sampled": 2, "allow_unbalanced": False}}
    assert decode(old_ii) == fl.SchemeII(2, noise="paper")
    for rule in (fl.SchemeI(3), fl.SchemeI(3, noise="paper"), fl.SchemeII(2), fl.Full()):
        assert decode(encode(rule)) == rule



def _encoded(entry, change):
    """A change of the record's entry ``entry`` (a dictionary stored encoded: the settings, the ledger)."""
    from fedlangevin.runner.io.checkpoint import decode, encode

    def apply(record):
        value = decode(record[entry])
        change(value)
        record[entry] = encode(value)
    return apply


def _settings(change):
    return _encoded("settings", change)


def _ledger(change):
    return _encoded("ledger", change)


def _run(change):
    return lambda record: change(record["run"])


BAD_CONTENTS = {
    "no round": (lambda r: r.pop("round"), r"the record lacks the entries 'round'"),
    "no settings": (lambda r: r.pop("settings"), r"the record lacks the entries 'settings'"),
    "round -5": (lambda r: r.__setitem__("round", -5), r"round must be an integer in \[0, \d+\]; got -5"),
    "round 'x'": (lambda r: r.__setitem__("round", "x"), r"round must be an integer; got str 'x'"),
    "round 2.0": (lambda r: r.__setitem__("round", 2.0), r"round must be an integer; got float"),
    "step None": (lambda r: r.__setitem__("step", None), r"step must be an integer; got NoneType"),
    "version 'x'": (lambda r: r.__setitem__("version", "x"), r"version must be an integer; got str"),
    "settings a string": (lambda r: r.__setitem__("settings", "x"), r"settings must be a dictionary; got str"),
    "settings without chains": (_settings(lambda s: s.pop("chains")), r"settings lacks the entries 'chains'"),
    "chains '2'": (_settings(lambda s: s.__setitem__("chains", "2")), r"settings\['chains'\] must be an integer; got str"),
    "chains 0": (_settings(lambda s: s.__setitem__("chains", 0)), r"settings\['chains'\] must be an integer >= 1"),
    "temperature nan": (_settings(lambda s: s.__setitem__("temperature", float("nan"))),
                        r"settings\['temperature'\] must be a finite real number > 0"),
    "dtype int8": (_settings(lambda s: s.__setitem__("dtype", "int8")), r"settings\['dtype'\] must be one of"),
    "theta a list": (lambda r: r.__setitem__("theta", [0.0]), r"theta must be a tensor; got list"),
    "theta's shape": (lambda r: r.__setitem__("theta", torch.zeros(3, 7, dtype=torch.float64)),
                      r"theta has shape \(3, 7\); with 3 active chains and d = 2 it must be \(3, 2\)"),
    "theta nan": (lambda r: r["theta"].__setitem__((1, 0), float("nan")),
                  r"theta holds non-finite values \(chain row 1\); a run checkpoints only finite parameters"),
    "round 10**30": (lambda r: r.__setitem__("round", 10**30), r"round must be an integer in \[0, "),
    "step 10**30": (lambda r: r.__setitem__("step", 10**30), r"step must be an integer in \[0, "),
    "generator float": (lambda r: r.__setitem__("generator", torch.zeros(3)), r"generator must be a tensor of uint8"),
    "ledger 'x'": (lambda r: r.__setitem__("ledger", "x"), r"ledger must be a dictionary; got str"),
    "problem file '../x'": (lambda r: r["problem"].__setitem__("file", "../x"),
                            r"problem\['file'\] must be a file name beside the checkpoint"),
    "problem None": (lambda r: r.__setitem__("problem", None), r"problem must be a dictionary; got NoneType"),
    "run 'x'": (lambda r: r.__setitem__("run", "x"), r"run must be a dictionary; got str"),
    "run done > rounds": (_run(lambda run: run.__setitem__("done", 99)), r"run\['done'\] = 99 is more than"),
    "run without thin": (_run(lambda run: run.pop("thin")), r"run lacks the entries 'thin'"),
    "run draws kind": (_run(lambda run: run.__setitem__("draws", {"kind": "cloud"})),
                       r"run\['draws'\]\['kind'\] must be one of 'memory', 'disk', 'none'; got 'cloud'"),
    "schedule probe": (lambda r: r.__setitem__("schedule_probe", [[0, "x"]]),
                       r"schedule_probe step size must be a real number; got str"),
    # the record of what the sampler released (privacy accounting reads it) and its chains must hold together
    "ledger steps -3": (_ledger(lambda led: led.__setitem__("steps", -3)), r"ledger\['steps'\] must be an integer >= 0"),
    "ledger uploads -1": (_ledger(lambda led: led.__setitem__("uploads", -1.0)),
                          r"ledger\['uploads'\] must be a finite real number >= 0"),
    "ledger without steps": (_ledger(lambda led: led.pop("steps")), r"ledger lacks the entries 'steps'"),
    "ledger rewound": (_ledger(lambda led: led.update(steps=0, rounds=0, eta_sum=0.0)),
                       r"the ledger counts 0 local steps and 0 rounds, but the state is at step 5, round 5"),
    "ledger eta_max 0": (_ledger(lambda led: led.__setitem__("eta_max", 0.0)),
                          r"the ledger.s 5 local steps, 5 rounds and largest step size 0 contradict each other"),
    "chains below theta's": (_settings(lambda s: s.__setitem__("chains", 2)),
                             r"active must hold distinct chain indices in \[0, 2\)"),
    "active repeated": (lambda r: r.__setitem__("active", torch.tensor([0, 0, 1])),
                        r"active must hold distinct chain indices in \[0, 3\)"),
    "privacy without adjacency": (_settings(lambda s: s.update(privacy="RecordLevel(clip=1.0)")),
                                  r"settings\['adjacency'\] must be 'record', 'client' or ''"),
    "privacy's clip changed": (_settings(lambda s: s.update(privacy="RecordLevel(clip=1.0)", adjacency="record",
                                                            clip=1e9)),
                               r"settings\['privacy'\] = 'RecordLevel\(clip=1.0\)' contradicts"),
    "clip without privacy": (_settings(lambda s: s.update(adjacency="record", clip=-1.0)),
                             r"settings\['clip'\] must be a finite real number > 0"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONTENTS))
def test_a_valid_checksum_over_wrong_contents_is_a_checkpoint_error_naming_the_entry(case, tmp_path):
    """These gave KeyError 'round' / 'settings', 'invalid literal for int()', TypeError or
    AttributeError, and round = -5 was accepted."""
    change, message = BAD_CONTENTS[case]
    _checkpointed(tmp_path, rounds=5, every=5)
    _rewrap(tmp_path / "c", change)
    for read in (fl.FALD.resume, checkpoint_info):
        with pytest.raises(CheckpointError, match=rf"checkpoint '.*c' is not a valid record: {message}"):
            read(tmp_path / "c")


@pytest.mark.parametrize("change, message", [
    (lambda r: r.__setitem__("generator", torch.zeros(3, dtype=torch.uint8)), r"RuntimeError"),
    (lambda r: r.__setitem__("correction", {"settings": {"strength": 1.0}, "state": None}), r"correction"),
    (lambda r: r.__setitem__("preconditioner", {"kind": "nope"}), r"cannot be rebuilt: .*unknown kind 'nope'"),
    (_settings(lambda s: s.__setitem__("noise_dtype", "float32") or s.__setitem__("streams", "sideways")),
     r"cannot be rebuilt: streams must be"),
])
def test_what_the_record_checks_cannot_see_is_still_a_checkpoint_error(change, message, tmp_path):
    _checkpointed(tmp_path, rounds=5, every=5)
    _rewrap(tmp_path / "c", change)
    with pytest.raises(CheckpointError, match=rf"checkpoint '.*c'.*{message}"):
        fl.FALD.resume(tmp_path / "c")


def test_a_correction_kind_the_package_does_not_know_is_asked_for_not_imported(tmp_path):
    """A correction kind that is not built in is a user's own class: nothing is imported from the file,
    the correction must be given again (tests/federation/test_contracts.py runs one end to end)."""
    _checkpointed(tmp_path, rounds=5, every=5)
    _rewrap(tmp_path / "c", lambda r: r.__setitem__("correction", {"settings": {"kind": "nope"}, "state": None}))
    with pytest.raises(ValueError, match=r"correction: the checkpoint ran with a drift correction of your own "
                                         r"\('nope'\); give it again"):
        fl.FALD.resume(tmp_path / "c")
