"""One run of the FA-LD runner: its arguments, its plan (rounds, warm-up, thinning), its progress
and where its draws go (memory, an on-disk store, or nowhere).

A draw is kept at round j = 1, 2, ... of a run when j > warmup and (j - warmup) is a multiple
of thin. Draw sinks share one small interface (``add``, ``reserve``, ``sync``, ``view``,
``record``, ``close``); a sink's buffers are allocated once per run, and a kept draw is one
copy into them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlangevin._paths import check_output_dir
from fedlangevin.fald.io import checkpoint as ckpt
from fedlangevin._validation import (
    check_bool,
    check_checkpoint_path,
    check_choice,
    check_int,
    check_memory_draws,
    check_optional_bool,
    check_path,
    check_target,
)
from fedlangevin.fald.core.schedules import check_schedule
from fedlangevin.fald.io.store import SampleStore
from fedlangevin.fald.results.streaming import StreamingStats
from fedlangevin.fald.results.trace import Communication
from fedlangevin.problems.base import FederatedProblem

__all__ = ["DiskDraws", "MemoryDraws", "NoDraws", "Run", "RunArguments", "continue_arguments", "progress_bar",
           "run_arguments"]

#: On-disk stores receive draws in blocks of about this many bytes (fewer disk writes).
STORE_BLOCK_BYTES = 4 << 20


class RunArguments:
    """The normalised arguments of one ``FALD.run`` call."""

    __slots__ = (
        "rounds", "warmup", "thin", "progress", "store", "keep_samples", "stats", "target",
        "checkpoint", "checkpoint_every", "on_divergence",
    )

    def __init__(self, **values: Any) -> None:
        for key in self.__slots__:
            setattr(self, key, values[key])


def run_arguments(
    rounds: Any,
    warmup: Any,
    thin: Any,
    progress: Any,
    store: Any,
    keep_samples: Any,
    stats: Any,
    target: Any,
    checkpoint: Any,
    checkpoint_every: Any,
    on_divergence: Any,
    *,
    problem: Any,
    temperature: float,
) -> RunArguments:
    """Validate the arguments of ``FALD.run`` before any work starts (see its docstring)."""
    if rounds is None:
        raise ValueError("rounds must be an integer >= 1 (the number of communication rounds to run)")
    rounds = check_int("rounds", rounds, 1)
    warmup = check_int("warmup", 0 if warmup is None else warmup, 0, rounds - 1)
    thin = check_int("thin", 1 if thin is None else thin, 1)
    progress = check_optional_bool("progress", progress)
    keep_samples = check_bool("keep_samples", True if keep_samples is None else keep_samples)
    if store is not None:
        store = check_path("store", store)
        if store.exists() and not store.is_dir():
            raise ValueError(f"store must be a directory path; {str(store)!r} is a file")
        check_output_dir("store", store)  # under a file, under /proc, or in a folder we cannot write: say so now
        if store.is_dir() and any(store.iterdir()) and not leftover_store(store, checkpoint):
            raise ValueError(
                f"store directory {str(store)!r} is not empty; give a new directory (a store holds the draws "
                "of one run; continue an interrupted run with FALD.resume(checkpoint))"
            )
        if not keep_samples:
            raise ValueError("store was given with keep_samples=False; a store is where kept samples go")
    target = check_target(target, problem, temperature, problem.dim)
    stats = check_optional_bool("stats", stats)
    if stats is None:
        stats = target is not None
    elif target is not None and not stats:
        raise ValueError("target was given with stats=False; the W2 to a target is a streaming statistic (stats=True)")
    if checkpoint is not None:
        checkpoint = ckpt.check_target(check_checkpoint_path(checkpoint, store))
    if checkpoint_every is not None:
        checkpoint_every = check_int("checkpoint_every", checkpoint_every, 1)
        if checkpoint is None:
            raise ValueError("checkpoint_every was given without checkpoint=path")
    on_divergence = check_choice("on_divergence", "raise" if on_divergence is None else on_divergence, ("raise", "drop"))
    return RunArguments(
        rounds=rounds, warmup=warmup, thin=thin, progress=progress, store=store, keep_samples=keep_samples,
        stats=stats, target=target, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
        on_divergence=on_divergence,
    )


def leftover_store(store: Path, checkpoint: Any) -> bool:
    """Whether ``store`` holds only what a run killed before its first checkpoint left: a sample
    store with no committed draws (draws are committed at checkpoints), or the empty data files of
    a store whose creation was killed before its ``meta.json`` (:meth:`SampleStore.created_partly`),
    for a ``checkpoint`` path that does not exist yet. Rerunning that run (the resume recipe of docs/long-runs.md,
    after a kill at any moment) then starts afresh in the same folder instead of stopping at
    "not empty". A run still writing the store holds the checkpoint's lock, so
    :meth:`Run.start` re-checks under the lock before it clears the folder."""
    if not isinstance(checkpoint, (str, os.PathLike)) or Path(checkpoint).exists():
        return False
    if not (Path(store) / "meta.json").is_file():  # a store killed in its creation, before meta.json
        return SampleStore.created_partly(store)
    try:
        old = SampleStore.open(store)
    except ValueError:  # not a store, or a damaged one: never cleared
        return False
    names = {p.name for p in Path(store).iterdir()}
    return old.draws == 0 and names <= SampleStore.FILES


class MemoryDraws:
    kind = "memory"

    def __init__(self, chains: int, capacity: int, dim: int, device, dtype) -> None:
        self.buf = torch.empty(chains, capacity, dim, device=device, dtype=dtype)
        self.rounds = np.empty(capacity, dtype=np.int64)
        self.count = 0

    def reserve(self, capacity: int) -> None:
        if capacity > self.buf.shape[1]:
            buf = torch.empty(self.buf.shape[0], capacity, self.buf.shape[2], device=self.buf.device, dtype=self.buf.dtype)
            buf[:, : self.count] = self.buf[:, : self.count]
            rounds = np.empty(capacity, dtype=np.int64)
            rounds[: self.count] = self.rounds[: self.count]
            self.buf, self.rounds = buf, rounds

    def add(self, row: torch.Tensor, round: int) -> None:
        self.buf.select(1, self.count).copy_(row)  # a view and one copy: several times cheaper than buf[:, i] = row
        self.rounds[self.count] = round
        self.count += 1

    def add_rows(self, rows: torch.Tensor, rounds) -> None:  # rows (b, chains, d)
        b = rows.shape[0]
        self.buf[:, self.count: self.count + b].copy_(rows.transpose(0, 1))
        self.rounds[self.count: self.count + b] = rounds
        self.count += b

    def sync(self, dropped: dict) -> None:
        pass

    def view(self) -> tuple[torch.Tensor, np.ndarray]:
        return self.buf[:, : self.count].detach().cpu(), self.rounds[: self.count].copy()

    def record(self, checkpoint: Path | None = None) -> dict:
        return {"kind": "memory", "samples": self.buf[:, : self.count].detach().cpu().clone(),
                "rounds": torch.from_numpy(self.rounds[: self.count].copy())}

    def close(self, dropped: dict | None = None) -> None:
        pass


class DiskDraws:
    kind = "disk"

    def __init__(self, store: SampleStore, device, dtype) -> None:
        self.store = store
        per_draw = store.chains * store.dim * torch.tensor([], dtype=dtype).element_size()
        block = int(max(1, min(4096, STORE_BLOCK_BYTES // max(per_draw, 1))))
        self.block = torch.empty(block, store.chains, store.dim, device=device, dtype=dtype)
        self.block_rounds = np.empty(block, dtype=np.int64)
        self.waiting = 0

    @property
    def count(self) -> int:
        return self.store.draws + self.waiting

    def reserve(self, capacity: int) -> None:
        pass

    def add(self, row: torch.Tensor, round: int) -> None:
        self.block.select(0, self.waiting).copy_(row)
        self.block_rounds[self.waiting] = round
        self.waiting += 1
        if self.waiting == self.block.shape[0]:
            self._write()

    def _write(self) -> None:
        if self.waiting:
            self.store.write(self.block[: self.waiting].cpu().numpy(), self.block_rounds[: self.waiting])
            self.waiting = 0

    def sync(self, dropped: dict) -> None:
        self._write()
        self.store.sync(dropped)

    def view(self) -> tuple[torch.Tensor, np.ndarray]:
        self._write()
        return torch.from_numpy(self.store.samples()), np.asarray(self.store.draw_rounds())

    def record(self, checkpoint: Path | None = None) -> dict:
        path = self.store.path.resolve()
        rel = None if checkpoint is None else os.path.relpath(path, Path(checkpoint).resolve().parent)
        return {"kind": "disk", "path": str(path), "relative": rel, "draws": self.store.draws,
                "crc32": dict(self.store.meta["crc32"])}

    def close(self, dropped: dict | None = None) -> None:
        try:
            self._write()
            self.store.sync(dropped)
        finally:
            self.store.close()


class NoDraws:
    kind = "none"
    count = 0

    def __init__(self, chains: int, dim: int, dtype) -> None:
        self.shape = (chains, 0, dim)
        self.dtype = dtype

    def reserve(self, capacity: int) -> None:
        pass

    def add(self, row, round) -> None:
        pass

    def sync(self, dropped: dict) -> None:
        pass

    def view(self):
        return torch.zeros(self.shape, dtype=self.dtype), np.zeros(0, dtype=np.int64)

    def record(self, checkpoint: Path | None = None) -> dict:
        return {"kind": "none"}

    def close(self, dropped: dict | None = None) -> None:
        pass


class Run:
    """One run in progress: its plan (rounds, warm-up, thinning), progress and draws.

    A draw is kept at round j = 1, 2, ... of the run when j > warmup and (j - warmup) is a
    multiple of thin. The draws' chain axis holds the chains running at the start of the run
    (``chain_ids``); ``alive`` are the positions among them still running.
    """

    def __init__(self) -> None:
        self.finished = False
        self.lock: ckpt.CheckpointLock | None = None

    def hold_lock(self) -> None:
        """Lock the run's checkpoint path (if any) for this process until :meth:`close`."""
        if self.checkpoint is not None and self.lock is None:
            self.lock = ckpt.CheckpointLock(self.checkpoint)

    @staticmethod
    def count_draws(rounds: int, warmup: int, thin: int) -> int:
        return max(0, (rounds - warmup) // thin)

    def keeps(self, j: int) -> bool:
        return j > self.warmup and (j - self.warmup) % self.thin == 0

    def first_kept(self, done: int) -> int:
        """The first round j > ``done`` whose draw is kept."""
        after = max(done + 1 - self.warmup, 1)
        return self.warmup + self.thin * -(-after // self.thin)

    @classmethod
    def start(cls, sampler, args: RunArguments) -> "Run":
        run = cls()
        run.rounds, run.done = args.rounds, 0
        run.warmup, run.thin = args.warmup, args.thin
        run.start_round, run.start_step = sampler.state.round, sampler.state.step
        run.keep_samples, run.on_divergence = args.keep_samples, args.on_divergence
        run.checkpoint, run.checkpoint_every = args.checkpoint, args.checkpoint_every
        run.hold_lock()  # before the store is made: a second run on this checkpoint stops here
        run.chain_ids = sampler.active.copy()
        run.alive = np.arange(len(run.chain_ids), dtype=np.int64)
        run.dropped, run.uploads = {}, 0.0
        run.setup_floats = 0.0  # preconditioners broadcast during this run (floats, all clients)
        run.setup_floats_up = 0.0  # the warm-up's acceptance rule: energies and gradients sent up (per chain)
        r, d = len(run.chain_ids), sampler.problem.dim
        if not args.keep_samples:
            run.draws = NoDraws(r, d, sampler.dtype)
        elif args.store is not None:
            if leftover_store(args.store, args.checkpoint):  # checked by run_arguments; the lock is ours now
                SampleStore.discard(args.store)
            store = SampleStore.create(args.store, run.chain_ids, d, torch.empty(0, dtype=sampler.dtype).numpy().dtype,
                                       sampler.problem.parameter_names(), settings=sampler.settings.record())
            run.draws = DiskDraws(store, sampler.device, sampler.dtype)
        else:
            run.draws = MemoryDraws(r, cls.count_draws(args.rounds, args.warmup, args.thin), d, sampler.device,
                                     sampler.dtype)
        run.stats = StreamingStats(d, args.target, sampler.device) if args.stats else None
        return run

    def extend(self, rounds: int) -> None:
        self.rounds = rounds
        self.draws.reserve(self.count_draws(rounds, self.warmup, self.thin))

    def sync(self) -> None:
        self.draws.sync(self.dropped)
        if self.stats is not None:
            self.stats.flush()

    def close(self) -> None:
        try:
            self.draws.close(self.dropped)
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None

    def add(self, theta: torch.Tensor, round: int) -> None:
        if self.stats is not None:
            self.stats.update(theta, round)
        if self.draws.kind == "none":
            return
        if len(self.alive) == len(self.chain_ids):
            row = theta
        else:
            row = torch.full((len(self.chain_ids), theta.shape[1]), float("nan"), device=theta.device, dtype=theta.dtype)
            row[torch.as_tensor(self.alive, device=theta.device)] = theta
        self.draws.add(row, round)

    def add_rows(self, thetas: torch.Tensor, rounds) -> None:
        """Several kept draws at once: ``thetas`` (b, chains alive, d), made at ``rounds``; the same
        as :meth:`add` draw by draw (one copy into a memory buffer instead of b)."""
        if self.stats is None and self.draws.kind == "memory" and len(self.alive) == len(self.chain_ids):
            self.draws.add_rows(thetas, rounds)
            return
        for theta, round in zip(thetas, rounds):
            self.add(theta, round)

    def describe(self) -> dict:
        return {
            "rounds": self.rounds, "done": self.done, "warmup": self.warmup, "thin": self.thin,
            "start_round": self.start_round, "start_step": self.start_step, "keep_samples": self.keep_samples,
            "on_divergence": self.on_divergence, "checkpoint_every": self.checkpoint_every,
            "chain_ids": torch.as_tensor(self.chain_ids, dtype=torch.int64),
            "alive": torch.as_tensor(self.alive, dtype=torch.int64),
            "dropped": [[int(c), int(r), int(s)] for c, (r, s) in self.dropped.items()],
            "uploads": float(self.uploads),
            "setup_floats": float(getattr(self, "setup_floats", 0.0)),
            "setup_floats_up": float(getattr(self, "setup_floats_up", 0.0)),
            "draws": self.draws.record(self.checkpoint),
            "stats": None if self.stats is None else self.stats.state_dict(),
            "target": None if self.stats is None or self.stats.target is None
            else [torch.from_numpy(self.stats.target[0]), torch.from_numpy(self.stats.target[1])],
            "finished": bool(self.finished),
        }

    @classmethod
    def from_record(cls, sampler, rec: dict, checkpoint: Path) -> "Run":
        run = cls()
        for key in ("rounds", "done", "warmup", "thin", "start_round", "start_step"):
            setattr(run, key, int(rec[key]))
        run.keep_samples, run.on_divergence = bool(rec["keep_samples"]), str(rec["on_divergence"])
        run.checkpoint_every = None if rec["checkpoint_every"] is None else int(rec["checkpoint_every"])
        run.checkpoint = checkpoint
        run.hold_lock()  # before the store is cut back: never under a run still writing it
        run.chain_ids = rec["chain_ids"].numpy().astype(np.int64)
        run.alive = rec["alive"].numpy().astype(np.int64)
        run.dropped = {int(c): (int(r), int(s)) for c, r, s in rec["dropped"]}
        run.uploads = float(rec["uploads"])
        run.setup_floats = float(rec.get("setup_floats", 0.0))
        run.setup_floats_up = float(rec.get("setup_floats_up", 0.0))
        r, d = len(run.chain_ids), sampler.problem.dim
        draws = rec["draws"]
        if draws["kind"] == "memory":
            mem = MemoryDraws(r, cls.count_draws(run.rounds, run.warmup, run.thin), d, sampler.device, sampler.dtype)
            n = draws["samples"].shape[1]
            mem.buf[:, :n] = draws["samples"].to(device=sampler.device, dtype=sampler.dtype)
            mem.rounds[:n] = draws["rounds"].numpy()
            mem.count = n
            run.draws = mem
        elif draws["kind"] == "disk":
            path = Path(draws["path"])
            if draws.get("relative"):  # the store beside the checkpoint wins: a run folder copied or moved
                beside = checkpoint.resolve().parent / draws["relative"]  # resumes into its own store, never the original's
                if beside.exists() or not path.exists():
                    path = beside
            store = SampleStore.open(path, writable=True)
            store.truncate(int(draws["draws"]), draws["crc32"])
            run.draws = DiskDraws(store, sampler.device, sampler.dtype)
        else:
            run.draws = NoDraws(r, d, sampler.dtype)
        run.stats = None
        if rec["stats"] is not None:
            target = None if rec["target"] is None else (rec["target"][0].numpy(), rec["target"][1].numpy())
            run.stats = StreamingStats(d, target, sampler.device)
            run.stats.load_state_dict(rec["stats"])
        run.finished = False
        return run


def progress_bar(total: int, progress: bool | None):
    """A tqdm bar on stderr for ``total`` rounds (default: only on a TTY and for >= 50 rounds), or None."""
    if progress is None:
        progress = sys.stderr.isatty() and total >= 50
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="FA-LD", unit="round", mininterval=0.5, leave=False)


def continue_arguments(run: Run, rounds, warmup, thin, store, keep_samples, stats, target, checkpoint, checkpoint_every,
                       on_divergence, *, schedule, step: int, local_steps: int, dim: int, dtype, device) -> Run:
    """Check the arguments of a call that continues the unfinished run from a checkpoint."""
    hint = (f"this sampler continues the unfinished run of its checkpoint (round {run.done} of {run.rounds}); "
            "call run() to finish it or run(rounds=r) to run r more rounds of it, or call "
            "discard_unfinished() first to start a new run")
    keep_samples = check_optional_bool("keep_samples", keep_samples)
    stats = check_optional_bool("stats", stats)
    if on_divergence is not None:
        on_divergence = check_choice("on_divergence", on_divergence, ("raise", "drop"))
    same = {
        "warmup": (warmup, run.warmup), "thin": (thin, run.thin), "keep_samples": (keep_samples, run.keep_samples),
        "stats": (stats, run.stats is not None), "on_divergence": (on_divergence, run.on_divergence),
    }
    for name, (given, actual) in same.items():
        if given is not None and given != actual:
            raise ValueError(f"{name}={given!r} differs from the run being continued ({name}={actual!r}); {hint}")
    if store is not None:
        path = Path(store).resolve()
        if run.draws.kind != "disk" or path != run.draws.store.path.resolve():
            raise ValueError(f"store={str(store)!r} differs from the run being continued; {hint}")
    if target is not None:
        raise ValueError(f"target cannot be changed when continuing a run (it keeps its own); {hint}")
    if checkpoint is not None:
        checkpoint = ckpt.check_target(
            check_checkpoint_path(checkpoint, run.draws.store.path if run.draws.kind == "disk" else None))
    if checkpoint_every is not None:
        checkpoint_every = check_int("checkpoint_every", checkpoint_every, 1)
    if rounds is not None:
        rounds = check_int("rounds", rounds, 1)
        if run.draws.kind == "memory":
            check_memory_draws(run.count_draws(run.done + rounds, run.warmup, run.thin), len(run.chain_ids),
                               dim, dtype, device)
        check_schedule(schedule, step, rounds * local_steps)
    else:
        check_schedule(schedule, step, (run.rounds - run.done) * local_steps)
    # every argument is valid: now change the plan
    if rounds is not None:
        run.extend(run.done + rounds)
    if checkpoint is not None and checkpoint != run.checkpoint:
        lock = ckpt.CheckpointLock(checkpoint)  # the new path is locked (or refused) before the old is let go
        if run.lock is not None:
            run.lock.release()
        run.checkpoint, run.lock = checkpoint, lock
    if checkpoint_every is not None:
        run.checkpoint_every = checkpoint_every
    run.hold_lock()
    return run


def communication(problem: FederatedProblem, rounds: int, uploads: float, setup_floats: float = 0.0,
                  setup_floats_up: float = 0.0, per_round: tuple[float, float] = (0.0, 0.0)) -> Communication:
    """Per-chain communication of ``rounds`` rounds with ``uploads`` client uploads: d floats per
    upload, a broadcast of d floats to each of the N clients per round, plus ``setup_floats``
    sent down once for the run (preconditioners: M is shared by the chains; the mode search of
    init="map", a drift correction's set-up) and ``setup_floats_up`` sent up for it (the mode search's
    gradients and Hessians); ``per_round``: a drift correction's extra floats per upload and per round down."""
    n, d = problem.num_clients, problem.dim
    up, down = per_round
    return Communication(rounds, uploads, uploads * (d + up) + float(setup_floats_up),
                         float(rounds * (n * d + down)) + float(setup_floats))
