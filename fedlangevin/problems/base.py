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
from fedlangevin.problems.private import check_rows, clip_norms, rows_without_replacement, summed_per_example

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

    Private runs use :meth:`private_grad` (clipped gradients, minibatches without replacement);
    a problem supports it by implementing :meth:`prior_grad` and ``_per_example_grads(theta,
    rows)`` (per-example gradients: record and client level) or ``_nll_grad`` (the likelihood's
    gradient alone: client level only); :meth:`check_privacy` says what is missing.
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
        holds only some clients; see :class:`fedlangevin.federation.extensions.Transport`).

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

    # -- privacy (fedlangevin.privacy.RecordLevel / ClientLevel; docs/privacy.md) ---------------
    def private_grad(
        self,
        theta: torch.Tensor,
        privacy: Any,
        *,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """grad f^c at theta[r, c] (shape (R, N, d)) with its data term clipped as ``privacy`` says.

        The data term is s_c = (1/p_c)(n_c/b) sum_{i in B} g_i with g_i = grad l(theta; x_ci) the
        per-example gradients of the negative log-likelihood (full batch, ``batch_size=None``:
        every row, scale 1/p_c); the returned value is the clipped data term + grad U_0(theta),
        the prior's gradient, which is public and never clipped.

        - ``RecordLevel(clip=C)``: every g_i is clipped to clip_C(g_i) = g_i min(1, C/||g_i||)
          before the sum. Substituting one record of client c moves sum_i clip_C(g_i) by at most
          ``privacy.sensitivity`` = 2C, hence the returned gradient by at most (1/p_c)(n_c/b) 2C
          (2C / p_c in full batch).
        - ``ClientLevel(clip=C)``: the scaled data term s_c itself is clipped to norm <= C, so
          replacing client c's whole data moves the returned gradient by at most 2C.

        With ``batch_size=b`` each client's minibatch is b distinct rows drawn uniformly
        without replacement (:meth:`private_rows`, with ``generator``), independently per chain,
        client and call: the sampling the accountant assumes. A problem whose negative
        log-likelihood is not a sum of per-row terms refuses ``RecordLevel`` (:meth:`check_privacy`,
        a ValueError saying why, before any work). ``grad`` is unchanged by all of this.
        """
        privacy = self.check_privacy(privacy)
        self._check_private_theta(theta)
        b = self.check_batch_size(batch_size)
        p = self.weights.to(device=theta.device, dtype=theta.dtype)
        if b is None:
            rows, scale = None, 1.0 / p
        else:
            rows = self._draw_rows(theta.shape[0], b, generator, theta.device)
            scale = self.client_sizes.to(device=theta.device, dtype=theta.dtype) / (p * b)
        record = privacy.adjacency == "record"
        data = self._nll_grad(theta, rows, privacy.clip if record else None) * scale[:, None]
        if not record:
            data = clip_norms(data, privacy.clip)
        return data + self.prior_grad(theta)

    def check_privacy(self, privacy: Any) -> Any:
        """``privacy`` if it is a :class:`~fedlangevin.privacy.RecordLevel` or
        :class:`~fedlangevin.privacy.ClientLevel` record this problem can apply; else a
        ValueError naming ``privacy`` and saying why (for instance record-level privacy on a
        model whose energy is not a sum of per-row terms). Cheap: call it before any work."""
        from fedlangevin.privacy.mechanism import check_privacy

        privacy = check_privacy(privacy)
        reason = self._privacy_refusal(privacy.adjacency)
        if reason is not None:
            what = ("record-level privacy clips per-example gradients, so it needs a negative log-likelihood that is "
                    "a sum of per-row terms" if privacy.adjacency == "record" else
                    "client-level privacy clips each client's likelihood gradient, so it needs the likelihood apart "
                    "from the prior")
            raise ValueError(f"privacy={privacy!r}: {what}; {type(self).__name__} {reason}")
        return privacy

    def per_example_grads(self, theta: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The per-example gradients grad l(theta[r, c]; x_{c, rows[r, c, i]}) of the negative
        log-likelihood, shape (R, N, B, d), unscaled and unclipped; theta (R, N, d), ``rows``
        (R, N, B) integer row indices of each client, in [0, n_c). Vectorised over chains,
        clients and rows (closed form or ``torch.func``)."""
        self._check_private_theta(theta)
        if self._privacy_refusal("record") is not None:
            raise ValueError(f"per_example_grads: {type(self).__name__} {self._privacy_refusal('record')}")
        rows = check_rows(rows, theta.shape[0], self.client_sizes)
        return self._per_example_grads(theta, rows.to(theta.device))

    def prior_grad(self, theta: torch.Tensor) -> torch.Tensor:
        """grad U_0(theta[r, c]), the prior share's gradient (public: no data), shape (R, N, d)."""
        raise NotImplementedError

    def private_rows(self, chains: int, batch_size: int, *, generator: torch.Generator | None = None,
                     device: torch.device | str | None = None) -> torch.Tensor:
        """Row indices (R, N, b) of a private minibatch: b distinct rows of each client, drawn
        uniformly without replacement, independently per chain and client (one call: one step)."""
        chains = check_int("chains", chains, 1)
        b = self.check_batch_size(batch_size)
        if b is None:
            raise ValueError("batch_size must be an integer >= 1 for a minibatch; got None")
        return self._draw_rows(chains, b, generator, self.client_sizes.device if device is None else device)

    def _draw_rows(self, chains: int, b: int, generator, device) -> torch.Tensor:
        """:meth:`private_rows` without its checks (the caller made them)."""
        return rows_without_replacement(self.client_sizes, chains, b, generator, device, **self._draw_layout())

    def _draw_layout(self) -> dict:
        """Keyword arguments of :func:`~fedlangevin.problems.private.rows_without_replacement`
        beyond the sizes (a problem restricted to some clients draws for the whole federation)."""
        return {}

    # extension points of the private gradient (a problem implements what it can):
    def _per_example_grads(self, theta: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Per-example NLL gradients (R, N, B, d) at the valid rows (R, N, B); no checks."""
        raise NotImplementedError

    def _nll_grad(self, theta: torch.Tensor, rows: torch.Tensor | None, clip: float | None) -> torch.Tensor:
        """sum_i clip_C(g_i) over the rows (R, N, b) of each client, or over all its rows for
        ``rows=None``, unscaled, (R, N, d); ``clip=None``: the plain sum. Default: from
        :meth:`_per_example_grads` in chunks of rows (bounded memory)."""
        return summed_per_example(self._per_example_grads, theta, self.client_sizes, rows, clip)

    def _privacy_refusal(self, adjacency: str) -> str | None:
        """Why this problem cannot apply privacy of this ``adjacency`` ("record" / "client"), or None."""
        cls = type(self)
        if cls.prior_grad is FederatedProblem.prior_grad:
            return "does not implement prior_grad() (the prior's gradient, kept apart from the likelihood's)"
        rowwise = cls._per_example_grads is not FederatedProblem._per_example_grads
        if adjacency == "record" and (not rowwise or self.client_sizes is None):
            return "does not implement per-example gradients (_per_example_grads) over per-client data rows"
        if not rowwise and cls._nll_grad is FederatedProblem._nll_grad:
            return "does not implement the likelihood's gradient alone (_nll_grad)"
        return None

    def _check_private_theta(self, theta: torch.Tensor) -> None:
        if not isinstance(theta, torch.Tensor) or theta.dim() != 3 or tuple(theta.shape[1:]) != (self.num_clients, self.dim):
            shape = tuple(theta.shape) if isinstance(theta, torch.Tensor) else type(theta).__name__
            raise ValueError(f"theta must be a tensor of shape (R, {self.num_clients}, {self.dim}); got {shape}")


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

    def _full(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The held clients' states placed in a full (R, N, ...) tensor, and the held indices."""
        idx = self.indices.to(theta.device)
        full = theta[:, :1].expand(theta.shape[0], self.problem.num_clients, *theta.shape[2:]).clone()
        full.index_copy_(1, idx, theta)
        return full, idx

    # the private gradient: the full problem's (its draws for every client, the held ones kept)
    def check_privacy(self, privacy):
        return self.problem.check_privacy(privacy)

    def private_grad(self, theta, privacy, *, batch_size=None, generator=None):
        self._check_private_theta(theta)
        full, idx = self._full(theta)
        return self.problem.private_grad(full, privacy, batch_size=batch_size, generator=generator).index_select(1, idx)

    def private_rows(self, chains, batch_size, *, generator=None, device=None):
        rows = self.problem.private_rows(chains, batch_size, generator=generator, device=device)
        return rows.index_select(1, self.indices.to(rows.device))

    def per_example_grads(self, theta, rows):
        self._check_private_theta(theta)
        rows = check_rows(rows, theta.shape[0], self.client_sizes).to(theta.device)
        full, idx = self._full(theta)
        full_rows = rows.new_zeros(rows.shape[0], self.problem.num_clients, rows.shape[2])  # row 0 exists everywhere
        full_rows.index_copy_(1, idx, rows)
        return self.problem.per_example_grads(full, full_rows).index_select(1, idx)

    def prior_grad(self, theta):
        self._check_private_theta(theta)
        full, idx = self._full(theta)
        return self.problem.prior_grad(full).index_select(1, idx)

    def _privacy_refusal(self, adjacency):
        return self.problem._privacy_refusal(adjacency)

    def to(self, device=None, dtype=None):
        return ClientSubset(self.problem.to(device=device, dtype=dtype), self.indices.tolist())

    def __repr__(self) -> str:
        return f"ClientSubset({self.problem!r}, clients={self.indices.tolist()})"
