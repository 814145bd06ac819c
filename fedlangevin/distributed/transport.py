"""The FA-LD synchronisation over a ``torch.distributed`` process group.

FA-LD's only cross-client operation is the synchronisation (Deng et al., Alg. 1, line
"theta_{k+1} = sum_c w_c beta^c_{k+1}"): with the clients split over W processes, process
q holds the clients C_q and computes the partial sum s_q = sum_{c in C_q} w_rc beta_rc, (R, d);
one ``all_reduce`` (SUM) gives every process theta_new = sum_q s_q. :class:`ProcessGroup` is
that transport (see :class:`fedlangevin.federation.extensions.Transport`): it names the clients of
this rank (a ``torch.tensor_split`` of 0..N-1 into W contiguous blocks) and sums the partial
sums. SUM, never AVG: AVG exists only on NCCL, and the weights w_rc already sum to one. FA-HMC
(:mod:`fedlangevin.fahmc.kernel`) reduces its partial sums of theta and v stacked, (2, R, d), in one call.

Randomness. With ``exact=True`` (default) every rank draws the round's random numbers
(participation, shared and private noise, minibatch indices) exactly as one process would
and uses its clients' slice, so the samples do not depend on W (equal up to the order of
the floating-point summation over clients). With ``exact=False`` the numbers that all ranks
must agree on (participation, the shared noise) still come from the common generator, but
each rank draws only its own clients' private noise and minibatches from its own stream,
seeded for every round from (one draw of the common generator, rank): the same law, less
work, and nothing to checkpoint (a resumed run at the same W continues the same streams).

Failures. A rank that dies (killed, out of memory, an exception) breaks the collective of
the others: gloo reports "Connection reset by peer" at once, and a rank that hangs makes
the others' ``all_reduce`` time out after ``timeout`` seconds. Either way every surviving
rank raises :class:`RankFailure` naming the rank(s) that stopped, found from heartbeats
that each rank writes to the group's key-value store from a background thread.
"""

from __future__ import annotations

import datetime
import math
import os
import socket
import threading
import time

import torch

from fedlangevin.federation.extensions import RankFailure

__all__ = ["ProcessGroup", "RankFailure", "split_clients"]

_MASK64 = (1 << 64) - 1


def split_clients(num_clients: int, world_size: int) -> list[list[int]]:
    """The client indices 0..N-1 split into ``world_size`` contiguous blocks by
    ``torch.tensor_split`` (sizes differ by at most one; the first N mod W blocks are larger)."""
    if not isinstance(num_clients, int) or isinstance(num_clients, bool) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1; got {num_clients!r}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or not 1 <= world_size <= num_clients:
        raise ValueError(f"world_size must be an integer in [1, num_clients = {num_clients}] (every rank "
                         f"holds at least one client); got {world_size!r}")
    return [block.tolist() for block in torch.tensor_split(torch.arange(num_clients), world_size)]


def _mix(seed: int, rank: int) -> int:
    """splitmix64 of (seed, rank): well-separated 63-bit seeds for the per-rank streams."""
    z = (seed + (rank + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


class ProcessGroup:
    """Transport of a distributed run (FA-LD or FA-HMC): this rank's clients and the all-reduce of the
    partial weighted sums over an initialised ``torch.distributed`` process group.

    Create it in every rank after ``torch.distributed.init_process_group`` (or
    :func:`fedlangevin.distributed.init`) and pass it to the sampler:
    ``FALD(problem, ..., transport=ProcessGroup())``; every rank runs the same code with the
    same seed. Rank 0 keeps the trace's draws, the checkpoint and the on-disk store.

    exact : True (default): samples equal to the single-process run's (up to summation
        order); False: per-rank private noise and minibatch streams, the same law (see the
        module docstring).
    timeout : seconds one round's all-reduce may wait for the other ranks (> 0), after
        which :class:`RankFailure` is raised. Set it above the slowest rank's round time.
    heartbeat : seconds between this rank's heartbeats (> 0, below ``timeout``); a rank
        whose heartbeat has not advanced for 3 heartbeats after a failure is named stopped.
    group : the ``torch.distributed`` group (default: the world group).
    """

    def __init__(self, exact: bool = True, timeout: float = 120.0, heartbeat: float = 1.0, group=None) -> None:
        import torch.distributed as dist

        if not isinstance(exact, bool):
            raise ValueError(f"exact must be True or False; got {exact!r}")
        if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
                and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a number of seconds > 0; got {timeout!r}")
        if not (isinstance(heartbeat, (int, float)) and not isinstance(heartbeat, bool)
                and 0 < heartbeat < timeout):
            raise ValueError(f"heartbeat must be a number of seconds in (0, timeout = {timeout}); got {heartbeat!r}")
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("ProcessGroup needs an initialised torch.distributed process group: call "
                             "fedlangevin.distributed.init(...) or torch.distributed.init_process_group(...) first")
        self._dist = dist
        self.group = group
        self.exact = exact
        self.timeout = float(timeout)
        self.heartbeat = float(heartbeat)
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))
        self._clients: list[int] | None = None
        self.num_clients: int | None = None
        self.round = 0
        self._own: torch.Generator | None = None
        self._store = _default_store()
        self._beats = _Heartbeat(self._store, self.rank, self.heartbeat) if self._store is not None else None

    # -- the Transport protocol -------------------------------------------------------------
    def bind(self, num_clients: int) -> "ProcessGroup":
        """Hold this rank's block of ``split_clients(num_clients, world_size)``; returns self.
        The sampler calls it with the problem's N."""
        blocks = split_clients(num_clients, self.world_size)
        self._clients, self.num_clients = blocks[self.rank], num_clients
        return self

    @property
    def clients(self) -> list[int]:
        """The client indices this rank holds (after :meth:`bind`)."""
        if self._clients is None:
            raise ValueError("ProcessGroup: call bind(num_clients) before use (the sampler does it when given "
                             "transport=ProcessGroup())")
        return self._clients

    @property
    def writes(self) -> bool:
        """Whether this rank writes the run's outputs (trace draws, checkpoint, store): rank 0."""
        return self.rank == 0

    def reduce(self, partial: torch.Tensor) -> torch.Tensor:
        """sum over ranks of ``partial`` (R, d), in place (``all_reduce`` SUM); every rank gets it.

        Raises :class:`RankFailure` naming the stopped rank(s) when a rank has died or the
        others waited ``timeout`` seconds.
        """
        dist = self._dist
        self.round += 1
        if self._beats is not None:
            self._beats.round = self.round
        if self.world_size == 1:
            return partial
        total = partial.contiguous()
        try:
            work = dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
            if self.backend == "gloo":
                work.wait(datetime.timedelta(seconds=self.timeout))
            else:  # NCCL: bounded by the group's own timeout (set by fedlangevin.distributed.init)
                work.wait()
        except Exception as exc:  # noqa: BLE001 - every backend error becomes a RankFailure
            raise self.failure(exc) from exc
        return total

    def private_stream(self, generator: torch.Generator) -> torch.Generator:
        """This round's generator of this rank's private noise and minibatches (``exact=False``):
        seeded from one 62-bit draw of the common ``generator`` (every rank draws it) and the rank."""
        seed = int(torch.randint(0, 1 << 62, (1,), generator=generator, device=generator.device))
        if self._own is None or self._own.device != generator.device:
            self._own = torch.Generator(device=generator.device)
        return self._own.manual_seed(_mix(seed, self.rank))

    # -- failures ---------------------------------------------------------------------------
    def failure(self, exc: BaseException | None = None) -> RankFailure:
        """The error to raise after a collective failed: names the ranks whose heartbeat stopped."""
        cause = "" if exc is None else f" ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        where = f"rank {self.rank}/{self.world_size}, round {self.round}"
        if self._beats is None:
            return RankFailure(f"distributed run: the all-reduce failed at {where}; another rank stopped or timed "
                               f"out after {self.timeout:g} s (no key-value store to name it){cause}")
        try:
            stopped, info = self._beats.stopped(self.world_size)
        except Exception as store_exc:  # noqa: BLE001 - the store's host has gone too
            return RankFailure(f"distributed run: the all-reduce failed at {where} and the rendezvous store is "
                               f"unreachable ({type(store_exc).__name__}): rank 0, which hosts a tcp:// store, has "
                               f"probably stopped{cause}", ranks=(0,) if self.rank != 0 else ())
        if stopped:
            names = ", ".join(f"rank {r} ({info[r]})" for r in stopped)
            return RankFailure(f"distributed run: {names} stopped; {where} cannot continue{cause}. "
                               f"The last checkpoint written by rank 0 is usable: resume with the same W.",
                               ranks=stopped)
        slow = ", ".join(f"rank {r} ({info[r]})" for r in range(self.world_size) if r != self.rank)
        return RankFailure(f"distributed run: the all-reduce at {where} failed or timed out after "
                           f"{self.timeout:g} s while every rank is alive ({slow}): a rank is hung or far "
                           f"slower than the others, or the ranks run different code{cause}", ranks=())

    def close(self) -> None:
        """Stop the heartbeat thread (the process group itself is the caller's)."""
        if self._beats is not None:
            self._beats.stop()

    def __repr__(self) -> str:
        return (f"ProcessGroup(exact={self.exact}, rank={self.rank}, world_size={self.world_size}, "
                f"backend={self.backend!r}, timeout={self.timeout:g})")


def _default_store():
    """The key-value store of the default group (torch.distributed's rendezvous store), or None."""
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - no store (e.g. a custom backend): failures are reported unnamed
        return None


class _Heartbeat:
    """A daemon thread that writes ``fedlangevin/hb/<rank>`` = "<count> <round> <pid> <host>"
    to the store every ``interval`` seconds."""

    def __init__(self, store, rank: int, interval: float) -> None:
        self.store, self.rank, self.interval = store, rank, interval
        self.round = 0
        self._count = 0
        self._stop = threading.Event()
        self._who = f"pid {os.getpid()} on {socket.gethostname()}"
        self._beat()
        self._thread = threading.Thread(target=self._loop, name=f"fedlangevin-heartbeat-{rank}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        self._count += 1
        self.store.set(f"fedlangevin/hb/{self.rank}", f"{self._count} {self.round} {self._who}")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - the store is gone: the collective reports the failure
                return

    def _read(self, world_size: int) -> dict[int, tuple[int, int, str]]:
        out = {}
        for r in range(world_size):
            key = f"fedlangevin/hb/{r}"
            if self.store.check([key]):
                count, rnd, who = self.store.get(key).decode().split(" ", 2)
                out[r] = (int(count), int(rnd), who)
        return out

    def _noticed(self, world_size: int) -> dict[int, str]:
        out = {}
        for r in range(world_size):
            key = f"fedlangevin/noticed/{r}"
            if self.store.check([key]):
                out[r] = self.store.get(key).decode()
        return out

    def stopped(self, world_size: int) -> tuple[list[int], dict[int, str]]:
        """Ranks whose heartbeat does not advance over 3 intervals, and a description of every rank.

        A surviving rank writes ``fedlangevin/noticed/<rank>`` before it looks: a survivor may
        finish its own look and exit (its heartbeat stops) while another is still looking, and
        it must not then be named as a cause. The store's host (rank 0 of a tcp:// store) waits,
        bounded, for every other survivor to finish looking before it returns and may exit,
        which would take the store down under them.
        """
        self.store.set(f"fedlangevin/noticed/{self.rank}", f"round {self.round}")
        before = self._read(world_size)
        time.sleep(3 * self.interval)
        after = self._read(world_size)
        noticed = self._noticed(world_size)
        stopped, info = [], {}
        for r in range(world_size):
            if r == self.rank:
                info[r] = f"this rank, {self._who}"
                continue
            if r not in after:
                stopped.append(r)
                info[r] = "never started"
                continue
            count, rnd, who = after[r]
            if r in noticed:
                info[r] = f"{who}, saw the failure in {noticed[r]}"
            elif r in before and before[r][0] == count:
                stopped.append(r)
                info[r] = f"{who}, last seen in round {rnd}"
            else:
                info[r] = f"{who}, alive in round {rnd}"
        self.store.set(f"fedlangevin/looked/{self.rank}", "1")
        if self.rank == 0:
            survivors = [f"fedlangevin/looked/{r}" for r in range(1, world_size) if r not in stopped]
            deadline = time.monotonic() + 6 * self.interval
            while survivors and time.monotonic() < deadline:
                survivors = [key for key in survivors if not self.store.check([key])]
                time.sleep(self.interval / 10)
        return stopped, info

    def stop(self) -> None:
        self._stop.set()
