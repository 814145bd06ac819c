"""The federated problem protocol: per-client energies and their gradients.

Notation (Deng et al., *On Convergence of Federated Averaging Langevin Dynamics*, Sec. 3–4):
client c holds n_c data points and the weight p_c = n_c / n. Its negative log-likelihood is
ell^c(theta) and the global energy is f(theta) = sum_c ell^c(theta) + U_0(theta), with U_0
the negative log prior. The client energy used by FA-LD is

    f^c(theta) = (1 / p_c) * ell^c(theta) + U_0(theta)        (the "prior share" is U_0),

so that sum_c p_c f^c = f (eq. 7) and the sampler targets pi(theta) ∝ exp(-f(theta) / tau).

A problem provides ``grad(theta)`` for a batch of parameters of shape (R, N, d) — one
parameter vector per chain r and client c — and returns grad f^c(theta[r, c]) with the same
shape, optionally from an unbiased minibatch estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from fedlangevin._validation import check_int, check_tensor, gib, memory_bytes

__all__ = ["ClientSubset", "FederatedProblem", "QuadraticForm", "check_client_indices", "check_count_fits",
           "check_problem", "check_weights"]


def check_count_fits(name: str, value: Any, minimum: int, unit_bytes: int, what: str) -> int:
    """``value`` as an integer >= ``minimum`` whose ``value`` units of ``unit_bytes`` bytes each
    (``what``) fit in this machine's memory; otherwise a ValueError naming ``name`` with the
    range that fits, raised before anything is allocated (a size such as 10**30 would fail
    inside torch, with its C++ frames)."""
    value = check_int(name, value, minimum)
    total = memory_bytes("cpu")
    if total is not None and value * unit_bytes > total:
        most = max(total // unit_bytes, minimum)
        try:
            check_int(name, value, minimum, most)
        except ValueError as exc:
            raise ValueError(f"{exc} ({what}: {unit_bytes} bytes each, and this machine has {gib(total)} of memory)") \
                from None
    return value


@dataclass(frozen=True)
class QuadraticForm:
    """Client gradients that are affine in theta: grad f^c(theta) = A_c theta - b_c.

    ``hessian`` is (d, d) when every client shares the same symmetric A, else (N, d, d);
    ``shift`` is b with shape (N, d). Engines use it for a fast path that never touches data.
    """

    hessian: torch.Tensor
    shift: torch.Tensor

    @property
    def shared(self) -> bool:
        return self.hessian.dim() == 2


def check_weights(weights: torch.Tensor | Sequence[float], num_clients: int | None = None) -> torch.Tensor:
    """Validate client weights p_c: positive, finite, summing to 1 (to 1e-9)."""
    w = check_tensor("weights", weights)
    if w.dim() != 1 or w.numel() == 0:
        raise ValueError(f"weights must be a non-empty 1-d sequence of client weights p_c; got shape {tuple(w.shape)}")
    if num_clients is not None and w.numel() != num_clients:
        raise ValueError(f"weights must have one entry per client ({num_clients}); got {w.numel()}")
    if not torch.isfinite(w).all() or (w <= 0).any():
        raise ValueError("weights must be finite and > 0 for every client")
    total = float(w.sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"weights must sum to 1 (within 1e-9); got sum {total:.12g}")
    return w


def check_problem(problem: Any, name: str = "problem") -> "FederatedProblem":
    """``problem`` is a usable :class:`FederatedProblem`: a subclass instance that sets
    ``num_clients``, ``dim`` and ``weights`` and implements :meth:`~FederatedProblem.grad` and
    :meth:`~FederatedProblem.to` (the base class itself is abstract). Raises ``ValueError``
    naming what is missing, before any work."""
    if not isinstance(problem, FederatedProblem):
        raise ValueError(f"{name} must be a fedlangevin FederatedProblem; got {type(problem).__name__}")
    missing = [a for a in ("num_clients", "dim", "weights") if not hasattr(problem, a)]
    missing += [f"{m}()" for m in ("grad", "to") if getattr(type(problem), m) is getattr(FederatedProblem, m)]
    if missing:
        raise ValueError(
            f"{name}: {type(problem).__name__} is not a complete FederatedProblem (it lacks {', '.join(missing)}); "
            "FederatedProblem is the abstract base: use a problem of fedlangevin.problems or a subclass that sets "
            "num_clients, dim and weights and implements grad() and to()"
        )
    return problem


class FederatedProblem:
    """Base class for federated problems (see the module docstring for the math).

    Subclasses set ``num_clients``, ``dim`` and ``weights`` (a float64 CPU tensor p_c) and
    implement :meth:`grad` and :meth:`to`. Optional capabilities, returned as ``None`` when
    absent: :meth:`quadratic` (affine gradients, enables the fast path), :meth:`posterior`
    (exact Gaussian posterior), :meth:`constrain` (draws in the model's own space, named),
    ``smoothness`` L and ``convexity`` m (Assumptions 5.1–5.2), ``client_sizes`` n_c
    (needed for minibatches).
    """

    num_clients: int
    dim: int
    weights: torch.Tensor
    client_sizes: torch.Tensor | None = None
    var_names: Sequence[str] | None = None

    # -- required ------------------------------------------------------------------------
    def grad(
        self,
        theta: torch.Tensor,
        *,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """grad f^c at theta[r, c] for every chain r and client c; theta has shape (R, N, d).

        With ``batch_size`` the gradient is an unbiased minibatch estimate drawn with
        ``generator``: (1/p_c) (n_c / b) sum_{i in batch} grad l(theta; x_ci) + grad U_0.
        """
        raise NotImplementedError

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "FederatedProblem":
        """A copy whose tensors live on ``device`` in ``dtype`` (the engine calls this once)."""
        raise NotImplementedError

    # -- optional ------------------------------------------------------------------------
    def quadratic(self) -> QuadraticForm | None:
        return None

    def posterior(self, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def constrain(self, samples) -> dict | None:
        """Draws of theta, shape (..., d), in the model's own space: {name: array (..., *shape)}.

        For problems that sample in a transformed space (e.g. log of a positive scale) or
        whose theta packs named blocks; ``Trace.to_arviz`` shows these names. None: theta as is.
        """
        return None

    @property
    def smoothness(self) -> float | None:
        return None

    @property
    def convexity(self) -> float | None:
        return None

    # -- helpers -------------------------------------------------------------------------
    def check_batch_size(self, batch_size: int | None) -> int | None:
        """Validate a minibatch size against the smallest client's data size."""
        if batch_size is None:
            return None
        if self.client_sizes is None:
            raise ValueError("batch_size is not supported by this problem (it has no per-client data); use batch_size=None")
        smallest = int(self.client_sizes.min())
        return check_int("batch_size", batch_size, 1, smallest)

    def clients(self, indices: Sequence[int]) -> "FederatedProblem":
        """The problem restricted to the clients ``indices`` (a process of a distributed run
        holds only some clients; see :class:`fedlangevin.fald.core.extensions.Transport`).

        The result's ``grad`` takes theta of shape (R, len(indices), d) and returns the
        gradients of those clients' f^c, unchanged (f^c keeps its 1/p_c of the whole
        federation); its ``weights`` are those clients' p_c (they do not sum to 1), and its
        minibatch draws are exactly the full problem's for the held clients (the numbers of
        every client are drawn and the held ones kept), so samples do not depend on how the
        clients are split. This default wraps the whole problem (it computes every client's
        gradient and keeps the held ones); problems override it with a true restriction.
        """
        return ClientSubset(self, indices)

    def parameter_names(self) -> list[str]:
        if self.var_names is not None:
            return list(self.var_names)
        return [f"theta[{i}]" for i in range(self.dim)]


def check_client_indices(indices: Sequence[int], num_clients: int) -> torch.Tensor:
    """Distinct client indices in [0, N - 1], as an int64 tensor (ValueError naming ``indices``)."""
    try:
        idx = torch.as_tensor(list(indices), dtype=torch.int64)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"indices must be a sequence of client indices; got {indices!r}") from exc
    if idx.dim() != 1 or idx.numel() == 0:
        raise ValueError(f"indices must be a non-empty 1-d sequence of client indices; got {indices!r}")
    if int(idx.min()) < 0 or int(idx.max()) >= num_clients or idx.unique().numel() != idx.numel():
        raise ValueError(f"indices must be distinct client indices in [0, {num_clients - 1}]; got {idx.tolist()}")
    return idx


class ClientSubset(FederatedProblem):
    """A problem restricted to some of its clients by wrapping it (see :meth:`FederatedProblem.clients`).

    ``grad`` places the held clients' states in a full (R, N, d) tensor (the other clients
    get a copy of the first held client's state, so their discarded gradients are finite),
    calls the full problem's ``grad`` — which draws every client's minibatch numbers — and
    keeps the held clients' gradients.
    """

    def __init__(self, problem: FederatedProblem, indices: Sequence[int]) -> None:
        self.problem = problem
        self.indices = check_client_indices(indices, problem.num_clients)
        self.num_clients, self.dim = int(self.indices.numel()), problem.dim
        self.weights = problem.weights.index_select(0, self.indices)
        sizes = problem.client_sizes
        self.client_sizes = None if sizes is None else sizes.index_select(0, self.indices.to(sizes.device))
        self.var_names = problem.var_names

    def grad(self, theta, *, batch_size=None, generator=None):
        r, n, d = theta.shape
        if n != self.num_clients or d != self.dim:
            raise ValueError(f"theta must have shape (R, {self.num_clients}, {self.dim}); got {tuple(theta.shape)}")
        idx = self.indices.to(theta.device)
        full = theta[:, :1].expand(r, self.problem.num_clients, d).clone()
        full.index_copy_(1, idx, theta)
        return self.problem.grad(full, batch_size=batch_size, generator=generator).index_select(1, idx)

    def to(self, device=None, dtype=None):
        return ClientSubset(self.problem.to(device=device, dtype=dtype), self.indices.tolist())

    def __repr__(self) -> str:
        return f"ClientSubset({self.problem!r}, clients={self.indices.tolist()})"
