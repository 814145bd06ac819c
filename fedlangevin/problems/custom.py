"""A federated problem from a plain torch energy written for one parameter vector and one batch.

The user gives ``client_energy(theta, batch)``: the negative log-likelihood of the rows in
``batch`` (a sum over rows, not a mean) at one parameter vector theta of shape (d,), and
optionally ``prior(theta)``, the negative log prior U_0 (up to a constant). With p_c = n_c / n
the client energy is (Deng et al., eq. 7)

    f^c(theta) = (1/p_c) * client_energy(theta, D_c) + prior(theta),

so that sum_c p_c f^c = sum_c ell^c + U_0 is the negative log posterior. With minibatches of
b rows drawn uniformly with replacement the likelihood term is scaled by (1/p_c)(n_c/b), an
unbiased estimate. Gradients: ``torch.func.grad`` of f^c, ``vmap`` over clients (data stacked)
and over chains; clients of different sizes are grouped by size (one vectorised call per
distinct n_c) because ``client_energy`` sees whole batches and cannot mask padding. With
``rowwise=True`` (an energy that is a sum of per-row terms, as every i.i.d. likelihood is) the
clients are padded to the largest and the energy is evaluated row by row (vmap over rows, each
row a batch of one) with the padding masked out: one vectorised call for all clients.

``client_energy`` must be a function torch.func can transform: torch operations on its
arguments, no ``.item()``, no Python branching on tensor values, no in-place updates of its
inputs. Where vmap cannot run it, the problem warns and falls back to a loop (one autograd
call per chain and client), with the same numbers.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from fedlangevin._validation import check_bool, check_int
from fedlangevin.problems._autodiff import AutodiffProblem, ClientData, _flatten, _unflatten
from fedlangevin.problems.base import check_count_fits

__all__ = ["CustomProblem"]


def _as_prior(prior: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
    if prior is None:
        return None
    if isinstance(prior, torch.distributions.Distribution):
        dist = prior

        def energy(theta: torch.Tensor) -> torch.Tensor:
            return -dist.log_prob(theta).sum()

        return energy
    if callable(prior):
        return prior
    raise ValueError(
        f"prior must be None (flat), a callable theta -> negative log prior, or a torch Distribution; got {type(prior).__name__}"
    )


class CustomProblem(AutodiffProblem):
    """Federated problem from a user energy ``client_energy(theta, batch)``.

    Parameters
    ----------
    client_energy : callable (theta (d,), batch) -> scalar tensor, the negative
        log-likelihood of the batch's rows (summed over rows), computed from theta with torch
        operations (an energy that does not depend on theta is a ``ValueError``). ``batch`` has the structure
        of one client's dataset (tensor, tuple/list or dict of tensors, rows on axis 0).
    client_data : one dataset per client, e.g. ``[(X_1, y_1), (X_2, y_2), ...]``.
    prior : the negative log prior U_0(theta) as a callable, or a torch Distribution over
        theta (its ``-log_prob(theta).sum()``), or None for a flat prior.
    dim : d, the length of theta (or give ``param_shapes`` or ``init``).
    param_shapes : optional ordered dict name -> shape splitting theta into named blocks
        (e.g. an MLP's weight matrices); ``constrain`` and ``trace.to_arviz()`` use it.
    var_names : optional names of theta's d coordinates (default from ``param_shapes``,
        else ``theta[i]``).
    init : initial theta (d,) (default zeros); energy and gradient are checked finite there.
        Pass the same to ``FALD(init=...)``; it is kept as :attr:`initial_params`.
    weights : p_c (default n_c / n).
    vectorize, chunk_size : as in :class:`~fedlangevin.problems.PyroProblem`.
    rowwise : ``client_energy`` is a sum over the batch's rows of a per-row term (so that
        ``client_energy(theta, batch)`` equals the sum of ``client_energy(theta, row)`` over
        one-row batches). Clients of different sizes then take one vectorised call instead of
        one per distinct size (``docs/models.md``: up to N times faster for N sizes); the
        gradients agree with ``rowwise=False`` to rounding. Default False. Record-level
        privacy (per-example gradients, ``fedlangevin.privacy.RecordLevel``) needs it.
    """

    def __init__(
        self,
        client_energy: Callable[[torch.Tensor, Any], torch.Tensor],
        client_data: Sequence[Any],
        *,
        prior: Any = None,
        dim: int | None = None,
        param_shapes: Mapping[str, Sequence[int]] | None = None,
        var_names: Sequence[str] | None = None,
        init: Any = None,
        weights: Sequence[float] | torch.Tensor | None = None,
        vectorize: bool | None = None,
        chunk_size: int | None = None,
        rowwise: bool = False,
    ) -> None:
        self._can_mask = check_bool("rowwise", rowwise)  # padded clients in one call, the padding masked row by row
        if not callable(client_energy):
            raise ValueError(f"client_energy must be a callable (theta, batch) -> scalar; got {type(client_energy).__name__}")
        self.client_energy = client_energy
        self.prior = _as_prior(prior)
        self.param_shapes = self._check_shapes(param_shapes)
        init_t = None
        if init is not None:
            init_t = torch.as_tensor(np.asarray(init, dtype=np.float64) if not isinstance(init, torch.Tensor) else init)
            init_t = init_t.detach().cpu().double()
            if init_t.dim() != 1:
                raise ValueError(f"init must be a vector of shape (d,); got shape {tuple(init_t.shape)}")
            if not torch.isfinite(init_t).all():
                raise ValueError("init must be finite")
        sizes = {}
        if dim is not None:
            sizes["dim"] = check_int("dim", dim, 1)
        if self.param_shapes is not None:
            sizes["param_shapes"] = sum(math.prod(s) for s in self.param_shapes.values())
        if init_t is not None:
            sizes["init"] = int(init_t.numel())
        if not sizes:
            raise ValueError("give the parameter dimension: dim=, param_shapes= or init=")
        if len(set(sizes.values())) != 1:
            raise ValueError(f"dim, param_shapes and init disagree on the parameter dimension: {sizes}")
        d = next(iter(sizes.values()))
        data = ClientData.from_clients(client_data)
        # theta, its gradient and one copy per client (the probe's (1, N, d)), float64, before any allocation
        check_count_fits("dim" if "dim" in sizes else "param_shapes (their total size d)", d, 1,
                         8 * (data.num_clients + 2), f"an entry of theta for each of {data.num_clients} clients")
        self._setup(data, d, weights, vectorize, chunk_size)
        if var_names is not None:
            var_names = [str(v) for v in var_names]
            if len(var_names) != d:
                raise ValueError(f"var_names must have {d} names; got {len(var_names)}")
        elif self.param_shapes is not None:
            var_names = [
                name if not shape else f"{name}[{','.join(map(str, idx))}]"
                for name, shape in self.param_shapes.items()
                for idx in (np.ndindex(*shape) if shape else [()])
            ]
        self.var_names = var_names
        self.initial_params = init_t if init_t is not None else torch.zeros(d, dtype=torch.float64)
        self._probe(self.initial_params)
        self._check_depends_on_theta(self.initial_params)

    @staticmethod
    def _check_shapes(param_shapes) -> dict[str, tuple[int, ...]] | None:
        if param_shapes is None:
            return None
        if not isinstance(param_shapes, Mapping) or not param_shapes:
            raise ValueError("param_shapes must be a non-empty dict name -> shape")
        out = {}
        for name, shape in param_shapes.items():
            shape = (shape,) if isinstance(shape, (int, np.integer)) or getattr(shape, "ndim", None) == 0 else shape
            if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
                raise ValueError(f"param_shapes[{name!r}] must be a tuple of positive ints; got {shape!r}")
            # positive int64 sizes (not bools; numpy and 0-d integers too)
            out[str(name)] = tuple(check_int(f"param_shapes[{name!r}]", s, 1, 2**63 - 1) for s in shape)
        return out

    def _check_depends_on_theta(self, theta0: torch.Tensor) -> None:
        """``client_energy`` must be a function of theta: autograd must reach theta from its value
        on client 0's data (a constant, the data alone or a detached theta would make FA-LD
        sample the prior, or a flat target, whatever the data). Once, at construction."""
        theta = theta0.to(self.dtype).clone().requires_grad_(True)
        with torch.enable_grad():
            e = self.client_energy(theta, self.data.client(0))
        if not (isinstance(e, torch.Tensor) and e.requires_grad):
            raise ValueError(
                "client_energy(theta, batch) does not depend on theta (autograd finds no path from theta to its "
                f"value {e!r} on client 0's data: a constant, the data alone, or theta cut off by .detach(), .item() "
                "or numpy); the sampler would ignore the data. Return the batch's negative log-likelihood computed "
                "from theta with torch operations"
            )

    def _energy(self, theta, data, mask, scale):
        # mask (n_max,): only with rowwise=True (_can_mask), where clients of different sizes are padded
        e = scale * (self.client_energy(theta, data) if mask is None else self._rowwise(theta, data, mask))
        if self.prior is not None:
            e = e + self.prior(theta)
        if not isinstance(e, torch.Tensor) or e.dim() != 0:
            raise ValueError(
                "client_energy(theta, batch) (+ prior(theta)) must return a scalar tensor (the batch's negative "
                f"log-likelihood summed over rows); got {type(e).__name__} of shape {tuple(getattr(e, 'shape', ()))}"
            )
        return e

    def _rowwise(self, theta, data, mask):
        """sum_i mask_i client_energy(theta, row i) over the padded rows (copies of the client's own
        rows, see ClientData, so their energies and gradients are finite) times 0 for padding."""
        leaves, spec = _flatten(data, "data")

        def one_row(*row):
            return self.client_energy(theta, _unflatten([r.unsqueeze(0) for r in row], spec))

        rows = torch.func.vmap(one_row)(*leaves)
        return (rows * mask.to(rows.dtype)).sum()

    # -- the private gradient (FederatedProblem.private_grad) -------------------------------------
    def _nll_sum(self, theta, data, mask):
        return self.client_energy(theta, data) if mask is None else self._rowwise(theta, data, mask)

    def _prior_energy(self, theta, data):
        return self.prior(theta)

    def prior_grad(self, theta):
        """grad U_0(theta[r, c]) of ``prior`` (zeros for a flat prior), shape (R, N, d)."""
        self._check_theta(theta)
        return torch.zeros_like(theta) if self.prior is None else super().prior_grad(theta)

    def _privacy_refusal(self, adjacency):
        if adjacency == "record" and not self._can_mask:
            return ("was built with rowwise=False: client_energy(theta, batch) is not declared a sum of per-row "
                    "terms, so a record's gradient is not defined. Pass rowwise=True if client_energy(theta, batch) "
                    "equals the sum of client_energy(theta, row) over one-row batches, or use "
                    "fedlangevin.privacy.ClientLevel")
        return super()._privacy_refusal(adjacency)

    def constrain(self, samples: Any) -> dict[str, np.ndarray] | None:
        """Draws (..., d) split into the named blocks of ``param_shapes`` (None without it)."""
        if self.param_shapes is None:
            return None
        x = np.asarray(samples.detach().cpu() if isinstance(samples, torch.Tensor) else samples, dtype=np.float64)
        if x.shape[-1:] != (self.dim,):
            raise ValueError(f"samples must have shape (..., d) with d = {self.dim}; got {x.shape}")
        out, start = {}, 0
        for name, shape in self.param_shapes.items():
            size = math.prod(shape)
            out[name] = x[..., start : start + size].reshape(*x.shape[:-1], *shape)
            start += size
        return out

    def _explain_nonfinite(self, theta0, client):
        data = self.data.client(client)
        t = theta0.to(self.dtype)
        with torch.no_grad():
            lik = float(self.client_energy(t, data))
            prior = float(self.prior(t)) if self.prior is not None else 0.0
        return f"client_energy(theta0, client {client}'s data) = {lik}, prior(theta0) = {prior}"

    def __repr__(self) -> str:
        name = getattr(self.client_energy, "__name__", type(self.client_energy).__name__)
        return f"CustomProblem(client_energy={name}, num_clients={self.num_clients}, n={int(self.client_sizes.sum())}, d={self.dim})"
