"""A federated classification problem from a ``torch.nn.Module``: Bayesian neural networks.

The module maps a batch of inputs (b, *input_shape) to class logits (b, C). Its parameters,
flattened in ``named_parameters()`` order, are theta in R^d; the per-row loss is the softmax
cross-entropy l(theta; x, y) = -log softmax(net_theta(x))_y, the prior is N(0, sigma^2 I) on every
parameter (U_0 = ||theta||^2 / (2 sigma^2)), and with client weights p_c = n_c / n

    f^c(theta) = (1 / p_c) sum_{i in client c} l(theta; x_ci, y_ci) + U_0(theta),

so sum_c p_c f^c = sum_i l_i + U_0 = f, the negative log posterior (``base.py``). A sampler at
temperature tau targets exp(-f / tau).

How it is computed: the network is evaluated with ``torch.func.functional_call`` on parameters
sliced out of theta (views, no copy), and every derivative comes from ``torch.func``
(:class:`~fedlangevin.problems._autodiff.AutodiffProblem`): ``grad`` of the energy, ``vmap``-ed
over clients and chains, so a local step of all R x N chain-client pairs is one call whose memory
is O(R N d) plus the activations of the rows it touches; per-example gradients (record-level
privacy) are ``vmap(grad)`` over one-row batches; the whole-client gradient masks the padding of
clients smaller than the largest, so clients of any sizes share one call.
:meth:`NetworkProblem.hvp` gives exact Hessian-vector products (``jvp`` of ``grad``) for callers
that want them; the samplers' own curvature estimates use central differences of ``grad``
(:mod:`fedlangevin.warmup.curvature`), O(d) memory above the dense limit.

The module is run in evaluation mode (dropout off, batch normalisation with its stored
statistics, which are constants here); buffers are kept as they are.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import numpy as np
import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.problems._autodiff import AutodiffProblem
from fedlangevin.problems._client_data import ClientData

__all__ = ["NetworkProblem"]


def _check_module(module: Any) -> list[tuple[str, torch.Size]]:
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"module must be a torch.nn.Module mapping inputs (b, ...) to logits (b, C); got {type(module).__name__}")
    shapes = [(name, p.shape) for name, p in module.named_parameters()]
    if not shapes:
        raise ValueError(f"module {type(module).__name__} has no parameters (named_parameters() is empty): nothing to sample")
    return shapes


class NetworkProblem(AutodiffProblem):
    """Bayesian classification network over N clients (see the module docstring).

    Parameters
    ----------
    module : a ``torch.nn.Module`` mapping a batch of inputs (b, *input_shape) to logits (b, C).
        A copy is kept (float64, evaluation mode); its current parameters are
        :attr:`initial_params`.
    clients : a sequence of N pairs ``(X_c (n_c, *input_shape), y_c (n_c,))``, integer labels in
        [0, C). Use :meth:`from_partition` for one data set and a split of
        :mod:`fedlangevin.data.splits`.
    prior_scale : sigma > 0 of the N(0, sigma^2 I) prior on every parameter.
    vectorize, chunk_size : as in :class:`~fedlangevin.problems.CustomProblem` (``chunk_size``
        bounds how many chains ``vmap`` runs at once).

    ``grad`` follows :class:`~fedlangevin.problems.base.FederatedProblem` (full batch or
    ``batch_size=b`` rows per client, drawn with replacement); :meth:`predict_proba` gives class
    probabilities for a batch of draws, the input of the Bayesian model average
    (``diagnostics.posterior_predictive``).
    """

    _can_mask = True

    def __init__(self, module: torch.nn.Module, clients: Sequence[tuple[Any, Any]], *, prior_scale: float = 1.0,
                 vectorize: bool | None = None, chunk_size: int | None = None) -> None:
        shapes = _check_module(module)
        self.prior_scale = check_real("prior_scale", prior_scale, low=0.0, low_open=True)
        if not 1e-150 <= self.prior_scale <= 1e150:
            raise ValueError(f"prior_scale must be in [1e-150, 1e150] (sigma^2 and 1 / sigma^2 finite, non-zero); "
                             f"got {self.prior_scale:g}")
        if isinstance(clients, (torch.Tensor, np.ndarray, str, bytes)) or not isinstance(clients, Sequence) or not clients:
            raise ValueError("clients must be a non-empty sequence of (X_c, y_c) pairs, one per client")
        pairs = []
        for c, pair in enumerate(clients):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"clients[{c}] must be an (X_c, y_c) pair")
            x, y = torch.as_tensor(pair[0]).detach().cpu(), torch.as_tensor(pair[1]).detach().cpu()
            if x.dim() < 1 or x.shape[0] < 1:
                raise ValueError(f"clients[{c}] X must have shape (n_c, *input_shape) with n_c >= 1; got {tuple(x.shape)}")
            if not (x.is_floating_point() or x.dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)):
                raise ValueError(f"clients[{c}] X must be numeric; got dtype {x.dtype}")
            if y.shape != (x.shape[0],):
                raise ValueError(f"clients[{c}] y must have shape ({x.shape[0]},) (one label per row of X); "
                                 f"got {tuple(y.shape)}")
            if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
                raise ValueError(f"clients[{c}] y must hold integer class labels; got dtype {y.dtype}")
            pairs.append((x.to(torch.float64), y.long()))
        self.module = copy.deepcopy(module).to(torch.float64).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.param_shapes = {name: tuple(shape) for name, shape in shapes}
        self._sizes = [math.prod(s) for s in self.param_shapes.values()]
        d = sum(self._sizes)
        self.initial_params = torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).to(torch.float64)
        with torch.no_grad():
            try:
                out = self.module(pairs[0][0][:1])
            except Exception as exc:
                raise ValueError(f"module could not run on a row of clients[0] X (row shape "
                                 f"{tuple(pairs[0][0].shape[1:])}): {type(exc).__name__}: {exc}") from exc
        if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 1 or out.shape[1] < 2:
            raise ValueError(f"module must return logits of shape (b, C) with C >= 2 classes; on one row it returned "
                             f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
        self.num_classes = int(out.shape[1])
        for c, (x, y) in enumerate(pairs):
            if x.shape[1:] != pairs[0][0].shape[1:]:
                raise ValueError(f"clients[{c}] X has row shape {tuple(x.shape[1:])}; clients[0] has "
                                 f"{tuple(pairs[0][0].shape[1:])}")
            if not torch.isfinite(x).all():
                raise ValueError(f"clients[{c}] X must be finite")
            if y.numel() and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
                raise ValueError(f"clients[{c}] y must hold labels in [0, {self.num_classes - 1}] (the module returns "
                                 f"{self.num_classes} logits); got range [{int(y.min())}, {int(y.max())}]")
        self.input_shape = tuple(pairs[0][0].shape[1:])
        self._setup(ClientData.from_clients(pairs), d, None, vectorize, chunk_size)
        self.var_names = None
        self._probe(self.initial_params)

    @classmethod
    def from_partition(cls, module: torch.nn.Module, X, y, parts: Sequence[torch.Tensor], **kwargs) -> "NetworkProblem":
        """Build from one data set (X (n, ...), y (n,)) and per-client index tensors
        (:func:`fedlangevin.data.make_partition` and friends)."""
        from fedlangevin._validation import check_index_parts

        X, y = torch.as_tensor(X), torch.as_tensor(y)
        if X.dim() < 1 or y.dim() != 1 or X.shape[0] != y.shape[0]:
            raise ValueError(f"X and y must have the same number of rows; got shapes {tuple(X.shape)} and {tuple(y.shape)}")
        parts = check_index_parts("parts", parts, y.shape[0])
        return cls(module, [(X[idx], y[idx]) for idx in parts], **kwargs)

    # -- parameters ---------------------------------------------------------------------------
    @property
    def prior_precision(self) -> float:
        return 1.0 / self.prior_scale**2

    @property
    def num_data(self) -> int:
        return int(self.client_sizes.sum())

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """The module's parameters {name: tensor (..., *shape)} as views of theta (..., d)."""
        # torch.split, not one slice per parameter: the backward of a split is one concatenation, that of
        # each slice a d-sized zero tensor (a network's gradient was 1.3x the hand-written loop's:
        # benchmarks/bench_cost.py)
        parts = torch.split(theta, self._sizes, dim=-1)
        lead = theta.shape[:-1]
        return {name: part.reshape(*lead, *shape) for (name, shape), part in zip(self.param_shapes.items(), parts)}

    def constrain(self, samples: Any) -> dict[str, np.ndarray]:
        """Draws (..., d) split into the module's named parameters."""
        x = torch.as_tensor(np.asarray(samples.detach().cpu() if isinstance(samples, torch.Tensor) else samples,
                                       dtype=np.float64))
        if x.shape[-1:] != (self.dim,):
            raise ValueError(f"samples must have shape (..., d) with d = {self.dim}; got {tuple(x.shape)}")
        return {name: v.numpy() for name, v in self.unflatten(x).items()}

    def init_draws(self, chains: int, seed: int = 0) -> torch.Tensor:
        """``chains`` starting points (R, d): the module's own initialisation (``reset_parameters``
        of its layers) drawn afresh per chain with ``seed``; an ``init=`` for the samplers. A
        network started at zeros has symmetric hidden units, which gradient steps do not separate."""
        chains = check_int("chains", chains, 1)
        net = copy.deepcopy(self.module)
        gen_state = torch.random.get_rng_state()
        out = []
        try:
            torch.manual_seed(check_int("seed", seed, 0))
            for _ in range(chains):
                for layer in net.modules():
                    if hasattr(layer, "reset_parameters"):
                        layer.reset_parameters()
                out.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
        finally:
            torch.random.set_rng_state(gen_state)
        return torch.stack(out).to(torch.float64)

    # -- the energy (AutodiffProblem) -----------------------------------------------------------
    def logits(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Logits (..., n, C) of inputs X (n, *input_shape) for parameter draws theta (..., d)."""
        X = torch.as_tensor(X).to(device=theta.device, dtype=theta.dtype)
        if tuple(X.shape[1:]) != self.input_shape or X.dim() < 1:
            raise ValueError(f"X must have shape (n, {', '.join(map(str, self.input_shape))}); got {tuple(X.shape)}")
        lead = theta.shape[:-1]
        flat = theta.reshape(-1, self.dim)
        run = torch.func.vmap(lambda t: self._forward(t, X))
        return run(flat).reshape(*lead, X.shape[0], self.num_classes)

    def _forward(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(self.module, self.unflatten(theta), (x,))

    def _nll_sum(self, theta, data, mask):
        x, y = data
        logits = self._forward(theta, x)
        if mask is None:  # the fused log-softmax and NLL (its backward: one softmax minus the one-hot labels)
            return torch.nn.functional.cross_entropy(logits, y, reduction="sum")
        nll = torch.nn.functional.cross_entropy(logits, y, reduction="none")
        return (nll * mask.to(nll.dtype)).sum()

    def _prior_energy(self, theta, data):
        return 0.5 * self.prior_precision * (theta * theta).sum()

    def _energy(self, theta, data, mask, scale):
        return scale * self._nll_sum(theta, data, mask) + self._prior_energy(theta, data)

    _separable_prior = True

    def _closed_prior_grad(self, theta):
        return theta * self.prior_precision

    def prior_grad(self, theta):
        """grad U_0 = theta / sigma^2, (R, N, d)."""
        self._check_theta(theta)
        return self._closed_prior_grad(theta)

    # -- predictions and curvature --------------------------------------------------------------
    def predict_proba(self, theta: torch.Tensor, X: torch.Tensor, *, batch: int = 2048) -> torch.Tensor:
        """Class probabilities (..., n, C) for every draw in theta (..., d), ``batch`` inputs at a
        time; averaging over the draw axes gives the Bayesian model average."""
        batch = check_int("batch", batch, 1)
        X = torch.as_tensor(X)
        with torch.no_grad():
            parts = [torch.softmax(self.logits(theta, X[i:i + batch]), dim=-1) for i in range(0, X.shape[0], batch)]
        return torch.cat(parts, dim=-2)

    def nll(self, theta: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of all training data, sum_i l(theta; x_i, y_i), for theta (..., d):
        sum_c p_c (f^c - U_0) from the client energies."""
        theta = torch.as_tensor(theta)
        flat = theta.reshape(-1, self.dim)
        wide = flat[:, None, :].expand(-1, self.num_clients, -1).contiguous()
        prior = 0.5 * self.prior_precision * (flat * flat).sum(-1, keepdim=True)
        ell = (self.energy(wide) - prior) * self.weights.to(flat)
        return ell.sum(-1).reshape(theta.shape[:-1])

    def hvp(self, theta: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Exact client Hessian-vector products H_c(theta[r, c]) v[r, c] of f^c (full batch),
        (R, N, d), by ``torch.func.jvp`` of the gradient: O(d) memory, about two gradients' work."""
        self._check_theta(theta)
        if v.shape != theta.shape:
            raise ValueError(f"v must have the shape of theta {tuple(theta.shape)}; got {tuple(v.shape)}")
        out = torch.empty_like(theta)
        g = torch.func.grad(self._energy)
        for grp in self._full_groups():
            idx = grp.clients.to(theta.device)

            def one(t, u, x, m, s):
                return torch.func.jvp(lambda z: g(z, x, m, s), (t,), (u,))[1]

            per_client = torch.func.vmap(one, in_dims=(0, 0, 0, 0 if grp.mask is not None else None, 0))
            fn = torch.func.vmap(per_client, in_dims=(0, 0, None, None, None), chunk_size=self.chunk_size)
            out[:, idx] = fn(theta.index_select(1, idx), v.index_select(1, idx), grp.data, grp.mask, grp.scale)
        return out

    def client_hvp(self, theta: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
        """The problem contract's exact Hessian-vector products (:meth:`hvp`), which the warm-up's
        curvature estimates (:mod:`fedlangevin.warmup.curvature`) use in place of gradient differences."""
        return self.hvp(theta, vectors)

    def to(self, device=None, dtype=None):
        new = super().to(device=device, dtype=dtype)
        new.module = copy.deepcopy(self.module).to(device=device, dtype=dtype)
        return new

    def __repr__(self) -> str:
        return (f"NetworkProblem(module={type(self.module).__name__}, clients={self.num_clients}, n={self.num_data}, "
                f"classes={self.num_classes}, d={self.dim}, prior_scale={self.prior_scale:g})")
