"""The built-in implementations of the FA-LD round's extension points (:func:`fedlangevin.fald.engine.build`).

The contracts themselves (what a class of your own must implement, and the conformance check)
are declared in :mod:`fedlangevin.fald.contracts`. Each extension has a default that leaves the
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
the fourth hook; see :data:`fedlangevin.fald.kernel.UploadCodec`.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import torch

from fedlangevin.fald.contracts import DriftCorrection, Preconditioner, Transport

__all__ = [
    "DriftCorrection", "FactorPreconditioner", "IdentityPreconditioner", "InProcessGroup", "LocalTransport",
    "Preconditioner", "Transport",
]


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
        self.factor = a
        self.matrix = a @ a.T

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
    like ``torch.distributed.all_reduce``; ``timeout`` seconds bound the wait.
    """

    def __init__(self, groups: Sequence[Sequence[int]], timeout: float = 60.0) -> None:
        self.groups = [list(map(int, g)) for g in groups]
        if len(self.groups) < 1 or any(len(g) == 0 for g in self.groups):
            raise ValueError(f"groups must be a non-empty list of non-empty client lists; got {groups!r}")
        flat = [c for g in self.groups for c in g]
        if len(set(flat)) != len(flat):
            raise ValueError(f"groups must not share clients; got {groups!r}")
        self._barrier = threading.Barrier(len(self.groups), timeout=timeout)
        self._partials: list = [None] * len(self.groups)
        self._total = None
        self.transports = [_GroupTransport(self, rank) for rank in range(len(self.groups))]

    def _reduce(self, rank: int, partial: torch.Tensor) -> torch.Tensor:
        self._partials[rank] = partial
        if self._barrier.wait() == 0:
            total = self._partials[0].clone()
            for p in self._partials[1:]:
                total.add_(p)
            self._total = total
        self._barrier.wait()
        total = self._total.clone()
        self._barrier.wait()  # everyone has read the total before the next round overwrites it
        return total


class _GroupTransport:
    def __init__(self, group: InProcessGroup, rank: int) -> None:
        self.group, self.rank = group, rank
        self.clients = group.groups[rank]

    def reduce(self, partial: torch.Tensor) -> torch.Tensor:
        return self.group._reduce(self.rank, partial)

    def __repr__(self) -> str:
        return f"InProcessGroup transport (rank {self.rank}, clients {self.clients})"
