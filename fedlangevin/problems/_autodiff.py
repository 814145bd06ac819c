"""Shared machinery of the autodiff problems (:class:`CustomProblem`, :class:`PyroProblem`).

A subclass supplies one scalar function, the client energy for one parameter vector and one
client's rows,

    energy(theta (d,), data, mask, scale) = scale * ell(theta; data, mask) + U_0(theta),

with ell the negative log-likelihood of the rows (``mask`` (n,) zeroes padded rows, or is
``None``) and U_0 the prior energy (the prior share of every client). This module turns it
into the protocol's ``grad(theta (R, N, d))`` with ``torch.func``: ``grad`` of the energy,
``vmap`` over clients (their data stacked on a leading axis) and ``vmap`` over chains, so a
local step of all R x N chain-client pairs is a single call (no Python loop over chains or
clients).

Data layout: a client's dataset is a tensor, a tuple/list of tensors, or a dict of tensors,
all with the rows on axis 0 (n_c rows). Clients are stacked on a new axis 0, padded to the
largest n_c with copies of their own rows (so every padded value is a valid data point);
padded rows are masked out where the subclass can mask, else clients of equal size are
grouped (one vectorised call per distinct size).

The private gradient (:meth:`FederatedProblem.private_grad`) needs the likelihood and the
prior apart: a subclass also gives ``_nll_sum(theta, data, mask)`` (ell of the rows) and
``_prior_energy(theta, data)`` (U_0); per-example gradients are ``grad`` of ``_nll_sum`` on
one-row batches, ``vmap``-ed over rows, clients and chains.

Full-batch energy (scale = 1/p_c):         f^c = (1/p_c) ell^c(theta) + U_0(theta).
Minibatch energy (b rows drawn uniformly with replacement, scale = (1/p_c)(n_c/b)):
E[f~^c] = f^c, so the gradient estimate is unbiased.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from fedlangevin.problems._client_data import (  # noqa: F401  (minibatch_indices: import path kept for callers)
    ClientData,
    _flatten,
    _unflatten,
    minibatch_indices,
)
from fedlangevin.problems.base import FederatedProblem, check_weights

__all__ = ["ClientData", "AutodiffProblem"]


# -- the problem -----------------------------------------------------------------------------


@dataclass
class _Group:
    clients: torch.Tensor  # (G,) int64
    data: Any  # leaves (G, n, ...)
    mask: torch.Tensor | None  # (G, n) or None
    scale: torch.Tensor  # (G,)
    everyone: bool


class AutodiffProblem(FederatedProblem):
    """A federated problem whose client energies are differentiated by ``torch.func``.

    Subclasses implement :meth:`_energy` (see the module docstring) and set
    ``_can_mask`` (whether :meth:`_energy` honours a row mask, which lets clients of
    different sizes share one vectorised call).
    """

    _can_mask: bool = False

    def _setup(
        self,
        data: ClientData,
        dim: int,
        weights: Any,
        vectorize: bool | None,
        chunk_size: int | None,
    ) -> None:
        self.data = data.to(dtype=torch.float64)
        self.dtype, self.device = torch.float64, torch.device("cpu")
        self.num_clients = data.num_clients
        self.dim = dim
        self.client_sizes = data.sizes.clone()
        if weights is None:
            weights = data.sizes.double() / data.sizes.sum()
        self.weights = check_weights(weights, self.num_clients)
        if vectorize not in (None, True, False):
            raise ValueError(f"vectorize must be None (try, fall back with a warning), True or False; got {vectorize!r}")
        if chunk_size is not None:
            from fedlangevin._validation import check_int

            chunk_size = check_int("chunk_size", chunk_size, 1)
        self.chunk_size = chunk_size
        self._vectorize_request = vectorize
        self.vectorized = vectorize is not False
        self._fns: dict[str, Callable] = {}
        self._groups = None

    # -- to be provided ---------------------------------------------------------------------
    def _energy(self, theta: torch.Tensor, data: Any, mask: torch.Tensor | None, scale: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- groups of clients for full-batch gradients --------------------------------------------
    def _full_groups(self) -> list[_Group]:
        if self._groups is None:
            sizes = self.data.sizes
            p = self.weights.to(device=self.device, dtype=self.dtype)
            n_max = int(sizes.max())
            everyone = torch.arange(self.num_clients)
            if bool((sizes == n_max).all()):
                groups = [_Group(everyone, self.data.stacked(everyone, n_max), None, 1.0 / p, True)]
            elif self._can_mask:
                dev = self.device
                mask = (torch.arange(n_max)[None, :] < sizes[:, None]).to(device=dev)
                groups = [_Group(everyone, self.data.stacked(everyone, n_max), mask, 1.0 / p, True)]
            else:
                groups = []
                for n_c in torch.unique(sizes).tolist():
                    members = (sizes == n_c).nonzero().flatten()
                    groups.append(_Group(members, self.data.stacked(members, n_c), None, 1.0 / p[members.to(p.device)], False))
            self._groups = groups
        return self._groups

    # -- gradients --------------------------------------------------------------------------
    #: a subclass whose energy is ``scale * _nll_sum + U_0`` with U_0's gradient in closed form
    #: (:meth:`_closed_prior_grad`) sets this: the vectorised gradients then differentiate the likelihood
    #: only and add the prior's gradient (a sixth of a small network's minibatch gradient,
    #: benchmarks/bench_cost.py)
    _separable_prior = False

    def _closed_prior_grad(self, theta: torch.Tensor) -> torch.Tensor:
        """grad U_0 (..., d) at theta (..., d), for ``_separable_prior`` subclasses."""
        raise NotImplementedError

    def _with_prior(self, g: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        return g.add_(self._closed_prior_grad(theta)) if self._separable_prior else g

    def _fn(self, kind: str) -> Callable:
        """Vectorised gradient functions, built once per instance."""
        if kind not in self._fns:
            if self._separable_prior:
                g = torch.func.grad(lambda t, x, m, s: s * self._nll_sum(t, x, m))
            else:
                g = torch.func.grad(self._energy)
            if kind == "full":  # theta (R, G, d); data, mask, scale per client, shared by chains
                per_client = torch.func.vmap(g, in_dims=(0, 0, 0, 0))
                fn = torch.func.vmap(per_client, in_dims=(0, None, None, None), chunk_size=self.chunk_size)
            elif kind == "full_nomask":
                per_client = torch.func.vmap(lambda t, x, s: g(t, x, None, s), in_dims=(0, 0, 0))
                fn = torch.func.vmap(per_client, in_dims=(0, None, None), chunk_size=self.chunk_size)
            elif kind == "batch":  # theta (R, N, d), batch (R, N, b, ...), scale (N,)
                per_client = torch.func.vmap(lambda t, x, s: g(t, x, None, s), in_dims=(0, 0, 0))
                fn = torch.func.vmap(per_client, in_dims=(0, 0, None), chunk_size=self.chunk_size)
            else:  # pragma: no cover
                raise KeyError(kind)
            self._fns[kind] = fn
        return self._fns[kind]

    def _loop_grad(self, theta: torch.Tensor, data: Any, mask, scale, per_chain_data: bool) -> torch.Tensor:
        """Reference path: one autograd call per chain and client (used when vmap cannot run)."""
        out = torch.empty_like(theta)
        r, g, _ = theta.shape
        leaves_spec = _flatten(data, "data")
        leaves, spec = leaves_spec
        for i in range(r):
            for c in range(g):
                sel = [leaf[i, c] if per_chain_data else leaf[c] for leaf in leaves]
                t = theta[i, c].detach().clone().requires_grad_(True)
                with torch.enable_grad():
                    e = self._energy(t, _unflatten(sel, spec), None if mask is None else mask[c], scale[c])
                    (out[i, c],) = torch.autograd.grad(e, t)
        return out

    def _check_theta(self, theta: torch.Tensor) -> None:
        if theta.dim() != 3 or theta.shape[1] != self.num_clients or theta.shape[2] != self.dim:
            raise ValueError(
                f"theta must have shape (chains, num_clients, dim) = (R, {self.num_clients}, {self.dim}); got {tuple(theta.shape)}"
            )

    def grad(self, theta, *, batch_size=None, generator=None):
        self._check_theta(theta)
        if batch_size is None:
            out = None
            for grp in self._full_groups():
                th = theta if grp.everyone else theta[:, grp.clients.to(theta.device)]
                if self.vectorized:
                    if grp.mask is None:
                        g = self._fn("full_nomask")(th, grp.data, grp.scale)
                    else:
                        g = self._fn("full")(th, grp.data, grp.mask, grp.scale)
                    g = self._with_prior(g, th)
                else:
                    g = self._loop_grad(th, grp.data, grp.mask, grp.scale, per_chain_data=False)
                if grp.everyone:
                    return g
                if out is None:
                    out = torch.empty_like(theta)
                out[:, grp.clients.to(theta.device)] = g
            return out
        b = self.check_batch_size(batch_size)
        idx = minibatch_indices(self.client_sizes, theta.shape[0], b, generator, theta.device, theta.dtype)
        batch = self.data.gather(idx)
        p = self.weights.to(device=theta.device, dtype=theta.dtype)
        scale = self.client_sizes.to(device=theta.device, dtype=theta.dtype) / (p * b)
        if self.vectorized:
            return self._with_prior(self._fn("batch")(theta, batch, scale), theta)
        return self._loop_grad(theta, batch, None, scale, per_chain_data=True)

    def client_hvp(self, theta: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor | None:
        """Hessian-vector products H_c(theta) v (B, N, d) of the full-data energies at ``theta`` (B, N, d)
        along ``vectors`` (B, N, d), by ``torch.func.jvp`` of the vectorised gradient (forward over
        reverse), for the curvature estimates (:func:`fedlangevin.warmup.curvature.gradient_difference`).
        None, and central differences there, where the gradients run the per-chain autograd loop
        (``vectorized`` False) or the energy has an operation without a forward-mode derivative (not
        tried again)."""
        if not self.vectorized or getattr(self, "_no_jvp", False):
            return None
        try:
            _, hv = torch.func.jvp(lambda t: self.grad(t), (theta,), (vectors,))
        except (RuntimeError, NotImplementedError):
            self._no_jvp = True
            return None
        return hv

    def energy(self, theta: torch.Tensor) -> torch.Tensor:
        """Client energies f^c(theta[r, c]) (full batch), shape (R, N); theta (R, N, d)."""
        self._check_theta(theta)
        out = torch.empty(theta.shape[:2], dtype=theta.dtype, device=theta.device)
        with torch.no_grad():
            for grp in self._full_groups():
                idx = grp.clients.to(theta.device)
                th = theta[:, idx]
                if self.vectorized:
                    f = torch.func.vmap(
                        torch.func.vmap(self._energy, in_dims=(0, 0, 0 if grp.mask is not None else None, 0)),
                        in_dims=(0, None, None, None),
                    )(th, grp.data, grp.mask, grp.scale)
                else:
                    leaves, spec = _flatten(grp.data, "data")
                    f = torch.stack([
                        torch.stack([
                            self._energy(th[i, c], _unflatten([leaf[c] for leaf in leaves], spec),
                                         None if grp.mask is None else grp.mask[c], grp.scale[c])
                            for c in range(th.shape[1])
                        ])
                        for i in range(th.shape[0])
                    ])
                out[:, idx] = f
        return out

    def global_energy(self, theta: torch.Tensor) -> torch.Tensor:
        """f(theta) = sum_c p_c f^c(theta) (the negative log posterior up to a constant); theta (..., d)."""
        flat = theta.reshape(-1, self.dim)
        per = self.energy(flat[:, None, :].expand(-1, self.num_clients, -1))
        p = self.weights.to(device=per.device, dtype=per.dtype)
        return (per @ p).reshape(theta.shape[:-1])

    # -- the private gradient (FederatedProblem.private_grad) -----------------------------------
    # A subclass gives the likelihood and the prior apart: _nll_sum(theta, data, mask), the
    # negative log-likelihood of a batch's rows (summed; ``mask`` as in _energy), and
    # _prior_energy(theta, data), U_0 (``data``: one row of the client, for models that need
    # data to run). Per-example gradients are torch.func.grad of _nll_sum on one-row batches,
    # vmapped over the rows, the clients and the chains (one call); where vmap cannot run the
    # energy, one autograd call per (chain, client, row), with the same numbers.
    def _nll_sum(self, theta: torch.Tensor, data: Any, mask: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _prior_energy(self, theta: torch.Tensor, data: Any) -> torch.Tensor:
        raise NotImplementedError

    def _row_nll(self, theta: torch.Tensor, row: Any) -> torch.Tensor:
        """l(theta; x): the energy of one row (leaves without the row axis) as a one-row batch."""
        leaves, spec = _flatten(row, "data")
        return self._nll_sum(theta, _unflatten([x.unsqueeze(0) for x in leaves], spec), None)

    def _private_fn(self, kind: str) -> Callable:
        """Vectorised private-gradient functions, built once per instance (kept with _fn's)."""
        key = f"private:{kind}"
        if key not in self._fns:
            chains = dict(chunk_size=self.chunk_size)
            if kind == "per_example":  # theta (R, N, d), rows (R, N, B, ...) -> (R, N, B, d)
                per_row = torch.func.vmap(torch.func.grad(self._row_nll), in_dims=(None, 0))
                fn = torch.func.vmap(torch.func.vmap(per_row), **chains)
            elif kind == "batch":  # theta (R, N, d), batch (R, N, b, ...) -> (R, N, d)
                g = torch.func.grad(lambda t, x: self._nll_sum(t, x, None))
                fn = torch.func.vmap(torch.func.vmap(g), **chains)
            elif kind == "full":  # theta (R, G, d), data (G, n, ...) and mask (G, n) shared by the chains
                per_client = torch.func.vmap(torch.func.grad(self._nll_sum))
                fn = torch.func.vmap(per_client, in_dims=(0, None, None), **chains)
            elif kind == "full_nomask":
                per_client = torch.func.vmap(torch.func.grad(lambda t, x: self._nll_sum(t, x, None)))
                fn = torch.func.vmap(per_client, in_dims=(0, None), **chains)
            elif kind == "prior":  # theta (R, N, d), one row per client (N, 1, ...)
                per_client = torch.func.vmap(torch.func.grad(self._prior_energy))
                fn = torch.func.vmap(per_client, in_dims=(0, None), **chains)
            else:  # pragma: no cover
                raise KeyError(kind)
            self._fns[key] = fn
        return self._fns[key]

    @staticmethod
    def _each(energy: Callable, theta: torch.Tensor, pick: Callable) -> torch.Tensor:
        """grad of energy(theta[i, c], pick(i, c)) by autograd, one call per (i, c): the path
        where vmap cannot run the energy."""
        out = torch.empty_like(theta)
        for i in range(theta.shape[0]):
            for c in range(theta.shape[1]):
                t = theta[i, c].detach().clone().requires_grad_(True)
                with torch.enable_grad():
                    (g,) = torch.autograd.grad(energy(t, pick(i, c)), t, allow_unused=True)
                out[i, c] = 0.0 if g is None else g
        return out

    def _per_example_grads(self, theta, rows):
        batch = self.data.gather(rows)
        if self.vectorized:
            return self._private_fn("per_example")(theta, batch)
        r, n, b = rows.shape
        leaves, spec = _flatten(batch, "data")
        wide = theta.unsqueeze(2).expand(r, n, b, self.dim).reshape(r, n * b, self.dim)
        out = self._each(self._row_nll, wide,
                         lambda i, k: _unflatten([leaf[i, k // b, k % b] for leaf in leaves], spec))
        return out.reshape(r, n, b, self.dim)

    def _nll_grad(self, theta, rows, clip):
        if clip is not None:  # per example: FederatedProblem's chunked sum of the clipped gradients
            return super()._nll_grad(theta, rows, clip)
        if rows is not None:
            batch = self.data.gather(rows)
            if self.vectorized:
                return self._private_fn("batch")(theta, batch)
            leaves, spec = _flatten(batch, "data")
            return self._each(lambda t, x: self._nll_sum(t, x, None), theta,
                              lambda i, c: _unflatten([leaf[i, c] for leaf in leaves], spec))
        out = torch.empty_like(theta)
        for grp in self._full_groups():
            idx = grp.clients.to(theta.device)
            th = theta if grp.everyone else theta.index_select(1, idx)
            if self.vectorized:
                g = (self._private_fn("full_nomask")(th, grp.data) if grp.mask is None
                     else self._private_fn("full")(th, grp.data, grp.mask))
            else:
                leaves, spec = _flatten(grp.data, "data")
                g = self._each(lambda t, x: self._nll_sum(t, x[0], x[1]), th,
                               lambda i, c: (_unflatten([leaf[c] for leaf in leaves], spec),
                                             None if grp.mask is None else grp.mask[c]))
            out[:, idx] = g
        return out

    def prior_grad(self, theta):
        """grad U_0(theta[r, c]), (R, N, d): the prior share, by torch.func (the model run on
        one row of each client where it needs data to run; U_0 must not depend on the data)."""
        self._check_theta(theta)
        first = self.data.stacked(torch.arange(self.num_clients), 1)  # (N, 1, ...)
        if self.vectorized:
            return self._private_fn("prior")(theta, first)
        leaves, spec = _flatten(first, "data")
        return self._each(self._prior_energy, theta, lambda i, c: _unflatten([leaf[c] for leaf in leaves], spec))

    # -- start-up checks ----------------------------------------------------------------------
    def _probe(self, theta0: torch.Tensor) -> None:
        """Evaluate energies and gradients at theta0 (d,) on every client; decide vmap vs loop.

        Raises ValueError when an energy or gradient is not finite there (with
        :meth:`_explain_nonfinite`'s details).
        """
        theta = theta0.to(self.dtype)[None, None, :].expand(1, self.num_clients, self.dim).contiguous()
        try:  # once, concretely (no vmap): errors in the user's code are reported as such
            p0 = float(self.weights[0])
            self._energy(theta0.to(self.dtype), self.data.client(0), None, torch.tensor(1.0 / p0, dtype=self.dtype))
        except ValueError:
            raise
        except Exception as exc:
            raise ValueError(
                f"{type(self).__name__}: evaluating the energy on client 0's data at the initial point failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if self._vectorize_request is not False:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    grad = self.grad(theta)
                    energy = self.energy(theta)
            except ValueError:
                raise
            except Exception as exc:  # vmap could not run this function
                if self._vectorize_request:
                    raise ValueError(
                        f"vectorize=True but torch.func.vmap cannot run this energy: {type(exc).__name__}: {exc}"
                    ) from exc
                warnings.warn(
                    f"{type(self).__name__}: torch.func.vmap cannot run this energy ({type(exc).__name__}: {exc}); "
                    "falling back to one autograd call per chain and client (correct, but slower). "
                    "Pass vectorize=False to silence this warning.",
                    RuntimeWarning,
                    stacklevel=3,
                )
                self.vectorized = False
        if not self.vectorized:
            try:
                grad = self.grad(theta)
                energy = self.energy(theta)
            except ValueError:
                raise
            except Exception as exc:
                raise ValueError(
                    f"{type(self).__name__}: evaluating the energy at the initial point failed: {type(exc).__name__}: {exc}"
                ) from exc
        bad_e = ~torch.isfinite(energy[0])
        bad_g = ~torch.isfinite(grad[0]).all(dim=-1)
        if bool(bad_e.any()) or bool(bad_g.any()):
            clients = (bad_e | bad_g).nonzero().flatten().tolist()
            what = "log-density" if bool(bad_e.any()) else "gradient of the log-density"
            detail = self._explain_nonfinite(theta0, clients[0])
            raise ValueError(
                f"{type(self).__name__}: the {what} is not finite at the initial point on client(s) "
                f"{clients[:10]}{' ...' if len(clients) > 10 else ''}: {detail}"
            )

    def _explain_nonfinite(self, theta0: torch.Tensor, client: int) -> str:
        return f"energy f^c = {float(self.energy(theta0[None, None, :].expand(1, self.num_clients, -1))[0, client])}"

    def to(self, device=None, dtype=None):
        new = copy.copy(self)
        new.data = self.data.to(device=device, dtype=dtype)
        new.dtype = self.dtype if dtype is None else dtype
        new.device = self.device if device is None else torch.device(device)
        new._fns = {}
        new._groups = None
        for name in self._tensor_attrs():
            t = getattr(self, name, None)
            if t is not None:
                setattr(new, name, t.to(device=device, dtype=dtype if t.is_floating_point() else None))
        return new

    def share(self, weight: float) -> "AutodiffProblem":
        """This one-client problem as client c of a larger federation in which its weight is
        p_c = ``weight``: f^c = (1/p_c) ell^c + U_0 (eq. 2's split). A node of a federated
        deployment builds its problem from its own data alone (weight 1) and learns
        p_c = n_c / n from the server (:mod:`fedlangevin.flower`). The result's weights are
        (p_c,), which do not sum to 1: it is one client of the federation, for
        :func:`fedlangevin.fald.engine.client_round`, not a problem to sample alone."""
        if self.num_clients != 1:
            raise ValueError(f"share: the problem must hold one client; it holds {self.num_clients}")
        from fedlangevin._validation import check_real

        weight = check_real("weight", weight, low=0.0, high=1.0, low_open=True)  # the client's p_c
        new = copy.copy(self)
        new.weights = torch.tensor([weight], dtype=torch.float64)
        new._fns = {}
        new._groups = None
        return new

    def _tensor_attrs(self) -> tuple[str, ...]:
        return ()
