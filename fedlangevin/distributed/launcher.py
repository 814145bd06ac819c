"""Starting a distributed FA-LD run: process-group initialisation and a local launcher.

- :func:`init` initialises the ``torch.distributed`` process group of this process with the
  timeouts set (under ``torchrun`` it reads the rendezvous from the environment).
- :func:`launch` runs ``fn(rank, world_size, *args)`` in W fresh processes on this machine,
  the group initialised on loopback (a ``file://`` rendezvous in a temporary directory), and
  returns the W results; it is bounded in time and always leaves no process behind.
  :class:`Workers` is the same with the processes' ids exposed (tests check that none
  survives). Both work from a ``torch.multiprocessing.spawn``-style pure-Python program.
"""

from __future__ import annotations

import datetime
import os
import pickle
import shutil
import tempfile
import time
import traceback
from typing import Any, Callable, Sequence

import torch

__all__ = ["Workers", "WorkerError", "init", "launch"]

BACKENDS = ("gloo", "nccl")
#: most processes :class:`Workers` starts on one machine (each is a Python interpreter)
MAX_LOCAL_WORKERS = 1024
#: largest world size of a torch.distributed group (its ranks are 32-bit integers)
MAX_WORLD_SIZE = 2**31 - 1


def init(
    backend: str = "gloo",
    init_method: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    timeout: float = 120.0,
) -> tuple[int, int]:
    """Initialise this process's ``torch.distributed`` group; returns (rank, world_size).

    backend : "gloo" (CPU tensors) or "nccl" (CUDA tensors; the process then uses GPU
        ``LOCAL_RANK`` or ``rank`` mod the visible GPUs).
    init_method : a rendezvous URL (``file:///shared/path``, ``tcp://host:port``); default
        ``env://`` (``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``, as set by ``torchrun``).
    rank, world_size : required with a ``file://`` or ``tcp://`` URL, read from the
        environment with ``env://``.
    timeout : seconds the rendezvous and the group's collectives may wait (> 0).
    """
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    from fedlangevin._validation import check_int, check_real

    timeout = check_real("timeout", timeout, low=0.0, low_open=True)  # seconds
    if init_method is None:
        init_method = "env://"
    if not isinstance(init_method, str) or not init_method.startswith(("env://", "file://", "tcp://")):
        raise ValueError(f"init_method must be an env://, file:// or tcp:// URL; got {init_method!r}")
    if init_method.startswith("env://"):
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            raise ValueError(f"init_method env:// needs the environment variables {missing} (set by torchrun); "
                             "or pass a file:// or tcp:// init_method with rank and world_size")
        rank = int(os.environ["RANK"]) if rank is None else rank
        world_size = int(os.environ["WORLD_SIZE"]) if world_size is None else world_size
    world_size = check_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    rank = check_int("rank", rank, 0, world_size - 1)
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("backend 'nccl' needs CUDA GPUs; none is visible (use backend='gloo')")
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout))
    return rank, world_size


class WorkerError(RuntimeError):
    """A worker of :func:`launch` failed, timed out or was killed; names the rank(s)."""


def _worker(rank: int, world_size: int, directory: str, backend: str, timeout: float, fn, args) -> None:
    """Entry point of a launched process: initialise the group, run fn, write the result."""
    import torch.distributed as dist

    torch.set_num_threads(max(1, int(os.environ.get("FEDLANGEVIN_THREADS", "1"))))
    out = os.path.join(directory, f"result-{rank}.pkl")
    try:
        init(backend, f"file://{os.path.join(directory, 'rendezvous')}", rank, world_size, timeout)
        value = fn(rank, world_size, *args)
        payload = ("ok", value)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent with its traceback
        payload = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    with open(out + ".tmp", "wb") as fh:
        pickle.dump(payload, fh)
    os.replace(out + ".tmp", out)
    if payload[0] == "ok" and dist.is_initialized():
        dist.destroy_process_group()
    os._exit(0 if payload[0] == "ok" else 1)  # no interpreter teardown: a broken group must not hang the exit


class Workers:
    """W processes running ``fn(rank, world_size, *args)`` in an initialised group on this machine.

    ``with Workers(fn, 2, args) as w: results = w.join()``. ``pids`` are the processes' ids;
    leaving the block (or :meth:`close`) kills any process still alive and removes the
    rendezvous directory. ``fn`` must be importable (a module-level function): the processes
    are started fresh (``spawn``), never forked. Environment: each process uses
    ``FEDLANGEVIN_THREADS`` torch threads (default 1). The processes are daemons: they are
    stopped when this process exits, and cannot start processes of their own.
    """

    def __init__(self, fn: Callable, world_size: int, args: Sequence[Any] = (), *, backend: str = "gloo",
                 timeout: float = 120.0, limit: float = 600.0) -> None:
        if not callable(fn):
            raise ValueError(f"fn must be a callable fn(rank, world_size, *args); got {fn!r}")
        from fedlangevin._validation import check_int, check_real

        world_size = check_int("world_size", world_size, 1, MAX_LOCAL_WORKERS)  # processes on this machine
        timeout = check_real("timeout", timeout, low=0.0, low_open=True)  # checked here, not in every process
        limit = check_real("limit", limit, low=0.0, low_open=True)  # seconds: the bound on the whole launch
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
        import torch.multiprocessing as mp

        self.world_size, self.limit = world_size, float(limit)
        #: rank -> failure message, after :meth:`join`
        self.errors: dict[int, str] = {}
        self.directory = tempfile.mkdtemp(prefix="fedlangevin-dist-")
        ctx = mp.get_context("spawn")
        self.processes = [ctx.Process(target=_worker, args=(r, world_size, self.directory, backend, timeout, fn,
                                                             tuple(args)), daemon=True)
                          for r in range(world_size)]
        self._start = time.monotonic()
        for p in self.processes:
            p.start()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def join(self, strict: bool = True) -> list[Any]:
        """Wait (at most ``limit`` seconds from the start) and return the W results, rank order.

        Raises :class:`WorkerError` naming every rank that failed (with its error) or did
        not finish in time; all processes are stopped first. ``strict=False`` returns the
        results instead (``None`` for a failed rank) and keeps the failures in :attr:`errors`
        (rank -> message).
        """
        deadline = self._start + self.limit
        for p in self.processes:
            p.join(max(0.0, deadline - time.monotonic()))
        late = [r for r, p in enumerate(self.processes) if p.is_alive()]
        self.close(remove=False)
        results, errors = [], {}
        for r, p in enumerate(self.processes):
            path = os.path.join(self.directory, f"result-{r}.pkl")
            if r in late:
                errors[r] = f"still running after the {self.limit:g} s limit (killed)"
                results.append(None)
                continue
            if not os.path.exists(path):
                errors[r] = f"died with exit code {p.exitcode} before reporting a result"
                results.append(None)
                continue
            with open(path, "rb") as fh:
                status, value = pickle.load(fh)
            results.append(value if status == "ok" else None)
            if status != "ok":
                errors[r] = value
        shutil.rmtree(self.directory, ignore_errors=True)
        self.errors = errors
        if errors and strict:
            raise WorkerError(f"{len(errors)} of {self.world_size} ranks failed:\n"
                              + "\n".join(f"rank {r}: {m}" for r, m in errors.items()))
        return results

    def close(self, remove: bool = True) -> None:
        """Kill every process still alive (SIGTERM, then SIGKILL) and reap them."""
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        for p in self.processes:
            p.join(5.0)
            if p.is_alive():
                p.kill()
                p.join(5.0)
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def launch(fn: Callable, world_size: int, args: Sequence[Any] = (), *, backend: str = "gloo",
           timeout: float = 120.0, limit: float = 600.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes of one group on this machine
    and return their results (rank order).

    The group is initialised on loopback (``file://`` rendezvous in a fresh temporary
    directory, ``backend`` "gloo" or "nccl") with collectives bounded by ``timeout`` seconds;
    the whole launch is bounded by ``limit`` seconds, after which every process is killed.
    A failing rank raises :class:`WorkerError` naming it; no process outlives the call.
    """
    with Workers(fn, world_size, args, backend=backend, timeout=timeout, limit=limit) as workers:
        return workers.join()
