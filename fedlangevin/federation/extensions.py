"""The built-in implementations of the FA-LD round's extension points (:func:`fedlangevin.fald.engine.build`).

The contracts themselves (what a class of your own must implement, and the conformance check)
are declared in :mod:`fedlangevin.federation.contracts`. Each extension has a default that leaves the
round exactly as it is (the default kernel is bit-identical to a kernel built without it):

- :class:`Preconditioner` — a constant preconditioner M = A A^T. Clients step in
  coordinates z with theta = theta_0 + A z; Langevin dynamics on g(z) = f(theta_0 + A z)
  (gradient A^T grad f, unit noise) read in theta is

      theta <- theta - eta M grad f~^c(theta) + A (eq. 10's noise),

  whose stationary law is still pi ∝ exp(-f / tau) (M constant, symmetric positive
  definite). Default: :class:`IdentityPreconditioner` (A = I).
- :class:`DriftCorrection` — a term added to each client's gradient at every local step
  (control variates against client drift, ``docs/drift.md``), with its own state carried in
  the kernel's state between rounds (a dict of tensors, which checkpoints store as they
  are). Default: none.
- :class:`Transport` — the synchronisation theta_new = sum_c w_rc beta_rc, the only
  cross-client operation. A transport names the clients this process holds and sums the
  processes' partial weighted sums (an all-reduce). Default: :class:`LocalTransport`, one
  process holding every client. :class:`InProcessGroup` splits the clients into groups
  run by threads of one process (a test double of a distributed run).

The upload codec (``upload(beta, theta, generator) -> beta'``, e.g. quantised uploads) is
the fourth hook; see :data:`fedlangevin.federation.rounds.UploadCodec`.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import torch

from fedlangevin._validation import check_real
from fedlangevin.federation.contracts import DriftCorrection, Preconditioner, Transport

__all__ = [
    "DriftCorrection", "FactorPreconditioner", "IdentityPreconditioner", "InProcessGroup", "LocalTransport",
    "Preconditioner", "RankFailure", "Transport",
]


class RankFailure(RuntimeError):
    """A rank of the process group stopped (or hung) during a distributed run (FA-LD or FA-HMC), or a group
    of an :class:`InProcessGroup` did not reach the synchronisation; re-exported by
    :mod:`fedlangevin.distributed`."""

    def __init__(self, message: str, ranks: Sequence[int] = ()) -> None:
        super().__init__(message)
        #: the ranks found stopped (empty when none could be named)
        self.ranks = tuple(ranks)


class IdentityPreconditioner:
    """A = I: the plain FA-LD step (the default). The kernel keeps its fast paths with it."""

    def drift(self, grad: torch.Tensor) -> torch.Tensor:
        return grad

    def noise(self, xi: torch.Tensor) -> torch.Tensor:
        return xi

    def broadcast_floats(self, dim: int) -> int:
        return 0

    def record(self) -> dict:
        return {"kind": "identity"}

    def __repr__(self) -> str:
        return "IdentityPreconditioner()"


class FactorPreconditioner:
    """M = A A^T from a given factor A (d, d), e.g. a Cholesky factor of an estimated
    posterior covariance (clients then step in whitened coordinates z, theta = theta_0 + A z)."""

    def __init__(self, factor: Any) -> None:
        a = torch.as_tensor(factor, dtype=torch.float64)
        if a.dim() != 2 or a.shape[0] != a.shape[1] or not torch.isfinite(a).all():
            raise ValueError(f"factor must be a finite square (d, d) matrix; got shape {tuple(a.shape)}")
        if float(torch.linalg.svdvals(a).min()) <= 0:
            raise ValueError("factor must be invertible (M = A A^T positive definite)")
        # row-major, as a checkpoint's factor is read back: A A^T of a transposed view rounds
        # differently in the last bit, and a resumed run must step with the very same M
        self.factor = a.contiguous()
        self.matrix = self.factor @ self.factor.T

    def to(self, device=None, dtype=None) -> "FactorPreconditioner":
        new = object.__new__(FactorPreconditioner)
        new.factor = self.factor.to(device=device, dtype=dtype)
        new.matrix = self.matrix.to(device=device, dtype=dtype)
        return new

    def drift(self, grad: torch.Tensor) -> torch.Tensor:
        return grad @ self.matrix  # M symmetric

    def noise(self, xi: torch.Tensor) -> torch.Tensor:
        return xi @ self.factor.T

    def broadcast_floats(self, dim: int) -> int:
        """The d (d + 1) / 2 entries of a triangular factor."""
        return dim * (dim + 1) // 2

    def record(self) -> dict:
        return {"kind": "factor", "values": self.factor.double().cpu().tolist()}

    def __repr__(self) -> str:
        return f"FactorPreconditioner(d={self.factor.shape[0]})"


#: the values ``build(preconditioner=...)`` accepts, for its error message
PRECONDITIONERS = ("None, IdentityPreconditioner(), FactorPreconditioner(A), DiagonalPreconditioner(m) "
                   "(fedlangevin.federation.preconditioning) or an object implementing the preconditioner contract "
                   "(drift(grad), noise(xi), matrix: fedlangevin.federation.contracts.PRECONDITIONER)")


def check_preconditioner(pre: Any, dim: int, dtype: torch.dtype, device: torch.device) -> None:
    """``pre`` (already moved to ``device`` and ``dtype``, its M checked against d by
    :func:`~fedlangevin.federation.preconditioning.as_preconditioner`): ``drift`` and ``noise`` must map
    a (1, 1, d) tensor to one of the same shape, dtype and device (``ValueError`` naming
    ``preconditioner``). Once, when a kernel is built."""
    probe = torch.zeros(1, 1, dim, dtype=dtype, device=device)
    for method in ("drift", "noise"):
        want = f"a tensor of shape {tuple(probe.shape)}, {dtype} on {probe.device} (like its input)"
        try:
            out = getattr(pre, method)(probe)
        except Exception as exc:  # noqa: BLE001 - any failure on the probe is reported by name
            raise ValueError(f"preconditioner: its {method}() must return {want}; it failed with "
                             f"{type(exc).__name__}: {exc}") from exc
        if (not isinstance(out, torch.Tensor) or out.shape != probe.shape or out.dtype != dtype
                or out.device != probe.device):
            got = (f"shape {tuple(out.shape)}, {out.dtype} on {out.device}" if isinstance(out, torch.Tensor)
                   else type(out).__name__)
            raise ValueError(f"preconditioner: its {method}() must return {want}; got {got}")


class LocalTransport:
    """One process holding every client: the weighted sum is the synchronisation (default)."""

    clients = None

    def reduce(self, partial: torch.Tensor) -> torch.Tensor:
        return partial

    def __repr__(self) -> str:
        return "LocalTransport()"


class InProcessGroup:
    """Clients split into groups, each run by its own thread with its own kernel, in one process.

    ``InProcessGroup([[0, 1], [2, 3, 4]]).transports`` gives one transport per group; a
    kernel built with each and run in its own thread (same seed) gives the samples of one
    kernel holding every client, up to the order of the summation over clients (the
    partial sums are added in group order). ``reduce`` waits for every group (a barrier),
    like ``torch.distributed.all_reduce``; ``timeout`` (seconds > 0, default 60) bounds the
    wait: a group whose peers do not reach the same round's synchronisation in time raises
    :class:`fedlangevin.distributed.RankFailure` naming them (e.g. one group run alone,
    without threads for the others), and the group is then broken for good.
    """

    def __init__(self, groups: Sequence[Sequence[int]], timeout: float = 60.0) -> None:
        self.groups = [list(map(int, g)) for g in groups]
        if len(self.groups) < 1 or any(len(g) == 0 for g in self.groups):
            raise ValueError(f"groups must be a non-empty list of non-empty client lists; got {groups!r}")
        flat = [c for g in self.groups for c in g]
        if len(set(flat)) != len(flat):
            raise ValueError(f"groups must not share clients; got {groups!r}")
        self.timeout = check_real("timeout", timeout, low=0.0, low_open=True)
        self._barrier = threading.Barrier(len(self.groups), timeout=self.timeout)
        self._partials: list = [None] * len(self.groups)
        self._rounds = [0] * len(self.groups)  # synchronisations each group has entered
        self._total = None
        self.transports = [_GroupTransport(self, rank) for rank in range(len(self.groups))]

    def _reduce(self, rank: int, partial: torch.Tensor) -> torch.Tensor:
        self._rounds[rank] += 1
        self._partials[rank] = partial
        try:
            if self._barrier.wait() == 0:
                total = self._partials[0].clone()
                for p in self._partials[1:]:
                    total.add_(p)
                self._total = total
            self._barrier.wait()
            total = self._total.clone()
            self._barrier.wait()  # everyone has read the total before the next round overwrites it
        except threading.BrokenBarrierError:
            raise self._failure(rank) from None
        return total

    def _failure(self, rank: int):
        """The error of a broken barrier: names the groups that had not reached this round."""
        mine = self._rounds[rank]
        missing = [r for r in range(len(self.groups)) if self._rounds[r] < mine]
        where = f"InProcessGroup: rank {rank} (clients {self.groups[rank]}) in round {mine}"
        if not missing:
            return RankFailure(f"{where}: the group's barrier is broken (a group timed out or failed earlier; "
                               "an InProcessGroup cannot be reused after that: make a new one)")
        names = ", ".join(f"rank {r} (clients {self.groups[r]}, in round {self._rounds[r]})" for r in missing)
        return RankFailure(f"{where} waited {self.timeout:g} s (timeout) for {names}, which did not reach the "
                           "synchronisation: run every group's kernel in its own thread (see InProcessGroup)",
                           ranks=missing)


class _GroupTransport:
    def __init__(self, group: InProcessGroup, rank: int) -> None:
        self.group, self.rank = group, rank
        self.clients = group.groups[rank]

    def reduce(self, partial: torch.Tensor) -> torch.Tensor:
        return self.group._reduce(self.rank, partial)

    def __repr__(self) -> str:
        return f"InProcessGroup transport (rank {self.rank}, clients {self.clients})"
