"""Federated Bayesian multinomial logistic regression (Deng et al., Sec. 7.2).

Model: C classes, features x in R^p (augmented with a constant 1 for the bias, p1 = p + 1),
parameters W in R^{C x p1} stored row-major as theta in R^d, d = C p1 (class-major: the first
p1 entries are class 0's weights with its bias last). The per-point loss is the softmax
cross-entropy l(theta; x, y) = -log softmax(W x)_y, the prior is N(0, sigma^2 I) on every
entry (U_0 = ||theta||^2 / (2 sigma^2)), and with client weights p_c = n_c / n

    f^c(theta) = (1 / p_c) sum_{i in client c} l(theta; x_ci, y_ci) + U_0(theta),

so sum_c p_c f^c = sum_i l_i + U_0 = f, the negative log posterior (base.py). FA-LD at
temperature tau targets exp(-f / tau) (the paper uses tau = 0.05).

Gradient. With S = softmax(W X_b^T) (C x b, one column per point) and Y the one-hot labels
(C x b), grad_W sum_{i in b} l_i = (S - Y) X_b, i.e. the gradient is P^T X_b with
P = (S - Y)^T. A minibatch of b points per client, drawn uniformly with replacement, gives the
unbiased estimate (1 / p_c)(n_c / b) sum_{i in batch} grad l_i + grad U_0
= (n / b) (S - Y) X_b + theta / sigma^2.

Layout (measured on CPU, see ``benchmarks/bench_logistic.py``): client data are stacked once
into a padded (N * n_max, p1) matrix; a minibatch for all chains and clients is one
``index_select`` of that flat view, the logits are one batched matmul W X_b^T
((R, N, C, p1) @ (R, N, p1, b)), and the gradient is one batched matmul (S - Y) X_b.
Keeping the class axis before the batch axis makes both matmuls run on contiguous
operands, several times faster than the textbook X_b^T P on (p1 x C) weights.
"""

from __future__ import annotations

import math
import copy
from typing import Sequence

import torch

from fedlangevin._validation import check_bool, check_index_parts, check_int, check_real, check_tensor
from fedlangevin.problems.base import FederatedProblem, check_client_indices, check_count_fits
from fedlangevin.problems.private import _scaled

__all__ = ["LogisticRegression"]

#: prior_scale sigma accepted: sigma^2 and 1 / sigma^2 are then finite, non-zero float64 numbers
PRIOR_SCALE_RANGE = (1e-150, 1e150)


def _as_features(X, name: str) -> torch.Tensor:
    X = torch.as_tensor(X).detach().cpu()
    if X.dim() != 2 or X.shape[0] < 1:
        raise ValueError(f"{name} must have shape (n_c, p) with n_c >= 1; got {tuple(X.shape)}")
    if not (X.is_floating_point() or X.dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)):
        raise ValueError(f"{name} must be numeric; got dtype {X.dtype}")
    X = X.to(torch.float64)
    if not torch.isfinite(X).all():
        raise ValueError(f"{name} must be finite")
    return X


def _as_labels(y, n: int, name: str) -> torch.Tensor:
    y = torch.as_tensor(y).detach().cpu()
    if y.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) (one label per row of X); got {tuple(y.shape)}")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer class labels; got dtype {y.dtype}")
    return y.long()


class LogisticRegression(FederatedProblem):
    """Multinomial logistic regression with a Gaussian prior over N clients.

    Parameters
    ----------
    clients : a sequence of N pairs ``(X_c (n_c, p), y_c (n_c,))``, integer labels in
        [0, num_classes). Use :meth:`from_partition` to build it from one data set and a
        split of :mod:`fedlangevin.data.splits`.
    num_classes : C (default: 1 + the largest label).
    prior_scale : sigma > 0 of the N(0, sigma^2 I) prior on every weight and bias.
    bias : include a per-class intercept (default ``True``).

    ``grad(theta)`` follows :class:`~fedlangevin.problems.base.FederatedProblem`;
    :meth:`predict_proba` gives class probabilities for a batch of parameter draws, the input
    of a Bayesian model average (``diagnostics.posterior_predictive``).
    """

    def __init__(
        self,
        clients: Sequence[tuple[torch.Tensor, torch.Tensor]],
        num_classes: int | None = None,
        prior_scale: float = 1.0,
        bias: bool = True,
    ) -> None:
        if isinstance(clients, (torch.Tensor, str, bytes)) or not isinstance(clients, Sequence) or len(clients) == 0:
            raise ValueError("clients must be a non-empty sequence of (X_c, y_c) pairs, one per client")
        self.prior_scale = check_real("prior_scale", prior_scale, low=0.0, low_open=True)
        if not PRIOR_SCALE_RANGE[0] <= self.prior_scale <= PRIOR_SCALE_RANGE[1]:
            raise ValueError(
                f"prior_scale must be in [{PRIOR_SCALE_RANGE[0]:g}, {PRIOR_SCALE_RANGE[1]:g}] (sigma^2 and the prior "
                f"precision 1 / sigma^2 must be finite, non-zero floats); got {self.prior_scale:g}"
            )
        bias = check_bool("bias", bias)  # np.bool_ and 0-d bool arrays too
        xs, ys = [], []
        for c, pair in enumerate(clients):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"clients[{c}] must be an (X, y) pair")
            X = _as_features(pair[0], f"clients[{c}] X")
            xs.append(X)
            ys.append(_as_labels(pair[1], X.shape[0], f"clients[{c}] y"))
        p = xs[0].shape[1]
        for c, X in enumerate(xs):
            if X.shape[1] != p:
                raise ValueError(f"clients[{c}] X has {X.shape[1]} features; clients[0] has {p}")
        y_all = torch.cat(ys)
        if (y_all < 0).any():
            raise ValueError("labels must be >= 0")
        top = int(y_all.max()) + 1
        if num_classes is None:
            num_classes = max(top, 2)
        p1 = p + 1 if bias else p
        n_max = max(len(y) for y in ys)
        # per class and chain: its p1 weights on every client and its logits over the clients' padded rows
        self.num_classes = check_count_fits("num_classes", num_classes, max(top, 2), 8 * len(xs) * (p1 + n_max),
                                            f"a class's weights and logits on {len(xs)} clients (float64)")
        self.num_features = p
        self.bias = bias

        sizes = torch.tensor([len(y) for y in ys], dtype=torch.int64)
        n_clients, n_max = len(xs), int(sizes.max())
        feats = torch.zeros(n_clients, n_max, p1, dtype=torch.float64)
        labels = torch.zeros(n_clients, n_max, dtype=torch.int64)
        for c, (X, y) in enumerate(zip(xs, ys)):
            feats[c, : len(y), :p] = X
            if bias:
                feats[c, : len(y), p] = 1.0
            labels[c, : len(y)] = y
        self.num_clients = n_clients
        self.dim = self.num_classes * p1
        self.client_sizes = sizes
        self.weights = sizes.double() / sizes.sum()
        #: stacked client features (N, n_max, p1) incl. the bias column; padding rows are zero
        self.features = feats
        #: stacked labels (N, n_max); padding entries are 0 and masked out
        self.labels = labels
        self.mask = (torch.arange(n_max)[None, :] < sizes[:, None]).to(torch.float64)
        self._client_scale = (1.0 / self.weights)[:, None, None]  # 1 / p_c, for full gradients
        self.var_names = None
        self._num_data = int(sizes.sum())
        #: minibatch draws are made for all ``_draw_clients`` clients of the federation and the
        #: columns ``_held`` kept (a restriction to some clients, see :meth:`clients`)
        self._draw_clients, self._held = n_clients, None

    @classmethod
    def from_partition(
        cls,
        X,
        y,
        parts: Sequence[torch.Tensor],
        num_classes: int | None = None,
        prior_scale: float = 1.0,
        bias: bool = True,
    ) -> "LogisticRegression":
        """Build from one data set (X (n, p), y (n,)) and a list of per-client index tensors
        (:func:`fedlangevin.data.splits.iid_partition` and friends)."""
        X, y = check_tensor("X", X, keep_dtype=True), check_tensor("y", y, keep_dtype=True)
        if X.dim() < 1 or y.dim() != 1 or X.shape[0] != y.shape[0]:
            raise ValueError(f"X and y must have the same number of rows; got shapes {tuple(X.shape)} and {tuple(y.shape)}")
        parts = check_index_parts("parts", parts, y.shape[0])
        if num_classes is None and not y.is_floating_point():
            num_classes = int(y.max()) + 1 if y.numel() else None
        return cls([(X[idx], y[idx]) for idx in parts], num_classes=num_classes, prior_scale=prior_scale, bias=bias)

    # -- sizes and layout ---------------------------------------------------------------------
    @property
    def num_data(self) -> int:
        """n, the federation's number of data points (also of a restriction to some clients)."""
        return self._num_data

    @property
    def prior_precision(self) -> float:
        return 1.0 / self.prior_scale**2

    @property
    def _p1(self) -> int:
        return self.num_features + (1 if self.bias else 0)

    def unpack(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Weights (..., C, p) and biases (..., C) (``None`` without bias) from theta (..., d)."""
        w = theta.reshape(*theta.shape[:-1], self.num_classes, self._p1)
        if not self.bias:
            return w, None
        return w[..., : self.num_features], w[..., self.num_features]

    def pack(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """theta (..., d) from weights (..., C, p) and biases (..., C); inverse of :meth:`unpack`."""
        if self.bias:
            if bias is None:
                raise ValueError("bias is required: this problem has a per-class intercept")
            weight = torch.cat([weight, bias.unsqueeze(-1)], dim=-1)
        return weight.reshape(*weight.shape[:-2], self.dim)

    def parameter_names(self) -> list[str]:
        names = []
        for k in range(self.num_classes):
            names.extend(f"w[{k},{j}]" for j in range(self.num_features))
            if self.bias:
                names.append(f"b[{k}]")
        return names

    # -- the math -----------------------------------------------------------------------------
    def grad(self, theta, *, batch_size=None, generator=None):
        r, n_clients, d = theta.shape
        if n_clients != self.num_clients or d != self.dim:
            raise ValueError(f"theta must have shape (R, {self.num_clients}, {self.dim}); got {tuple(theta.shape)}")
        c, p1 = self.num_classes, self._p1
        w = theta.view(r, n_clients, c, p1)
        if batch_size is None:
            s = self._full_residuals(w)  # (N, R, C, n_max), masked
            g = self._full_product(s)  # (R, N, C, p1)
            g.mul_(self._client_scale)
            g.add_(w, alpha=self.prior_precision)
            return g.reshape(r, n_clients, d)
        b = batch_size
        sizes = self.client_sizes
        n_max = self.features.shape[1]
        u = torch.rand(r, self._draw_clients, b, generator=generator, device=theta.device, dtype=torch.float64)
        if self._held is not None:
            u = u.index_select(1, self._held)
        idx = (u * sizes[None, :, None]).long().minimum(sizes[None, :, None] - 1)
        flat = (idx + (torch.arange(n_clients, device=theta.device) * n_max)[None, :, None]).reshape(-1)
        xb = self.features.view(-1, p1).index_select(0, flat).view(r, n_clients, b, p1)
        yb = self.labels.view(-1).index_select(0, flat).view(r, n_clients, b)
        scale = self.num_data / b  # (1 / p_c)(n_c / b) = n / b for every client
        s = torch.softmax(torch.matmul(w, xb.transpose(-1, -2)), dim=-2)  # (R, N, C, b)
        s.scatter_add_(-2, yb.unsqueeze(-2), torch.full_like(s[..., :1, :], -1.0))  # S - Y
        g = torch.matmul(s, xb)  # (R, N, C, p1): the gradient (S - Y) X_b
        g.mul_(scale)
        g.add_(w, alpha=self.prior_precision)
        return g.view(r, n_clients, d)

    # -- the full-data path: chains folded into the class axis --------------------------------
    # All chains share the clients' features, so the weights of the B chains are stacked along
    # the class axis ((N, B C, p1)) and each client's logits and gradient are one matmul
    # against its (n_max, p1) features: no per-chain copy of the features (a broadcast batched
    # matmul over (B, N) would expand and copy them B times), extra memory O(B N C n_max) for the
    # logits. The sums differ from the per-chain matmul's in the last ulp only.
    def _full_logits(self, w: torch.Tensor) -> torch.Tensor:
        """Logits (N, B, C, n_max) of every client's data for the weights w (B, N, C, p1)."""
        b, n, c, p1 = w.shape
        x = self.features.to(w)
        folded = w.transpose(0, 1).reshape(n, b * c, p1)
        return torch.matmul(folded, x.transpose(-1, -2)).view(n, b, c, x.shape[1])

    def _full_labels(self, like: torch.Tensor) -> torch.Tensor:
        """The labels as an index (N, B, 1, n_max) along the class axis of ``like`` (N, B, C, n_max)."""
        n, b, _, m = like.shape
        return self.labels.to(like.device)[:, None, None, :].expand(n, b, 1, m)

    def _full_residuals(self, w: torch.Tensor) -> torch.Tensor:
        """S - Y (N, B, C, n_max) on every client's data, padding columns zeroed."""
        s = torch.softmax(self._full_logits(w), dim=-2)
        s.scatter_add_(-2, self._full_labels(s), torch.full_like(s[..., :1, :], -1.0))
        s.mul_(self.mask.to(s)[:, None, None, :])
        return s

    def _full_product(self, s: torch.Tensor) -> torch.Tensor:
        """(S - Y) X per chain and client, (B, N, C, p1), from S - Y (N, B, C, n_max)."""
        n, b, c, m = s.shape
        x = self.features.to(s)
        return torch.matmul(s.reshape(n, b * c, m), x).view(n, b, c, x.shape[-1]).transpose(0, 1)

    # -- the private gradient (FederatedProblem.private_grad) ---------------------------------
    # Per example, grad l(theta; x, y) = (s - e_y) x^T (C x p1), whose Frobenius norm is
    # ||s - e_y|| ||x||: clipping scales the column of S - Y of each example by
    # min(1, C / (||s - e_y|| ||x||)) before the one batched matmul (S - Y) X_b, so that a
    # clipped gradient costs about what an unclipped one does (benchmarks/bench_clip.py).
    def _rows(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (R, N, B, p1) and labels (R, N, B) of the rows (R, N, B) of each client."""
        r, n, b = rows.shape
        p1, n_max = self._p1, self.features.shape[1]
        flat = (rows + (torch.arange(n, device=rows.device) * n_max)[None, :, None]).reshape(-1)
        flat = flat.to(self.features.device)
        return (self.features.view(-1, p1).index_select(0, flat).view(r, n, b, p1),
                self.labels.view(-1).index_select(0, flat.to(self.labels.device)).view(r, n, b))

    def _residuals(self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """S - Y (R, N, C, B): softmax probabilities minus one-hot labels, one column per example."""
        r, n, _ = theta.shape
        w = theta.reshape(r, n, self.num_classes, self._p1)
        s = torch.softmax(torch.matmul(w, xb.transpose(-1, -2)), dim=-2)
        s.scatter_add_(-2, yb.unsqueeze(-2), torch.full_like(s[..., :1, :], -1.0))
        return s

    def _per_example_grads(self, theta, rows):
        xb, yb = self._rows(rows)
        s = self._residuals(theta, xb, yb)
        return torch.einsum("rncb,rnbp->rnbcp", s, xb).reshape(*rows.shape, self.dim)

    def _nll_grad(self, theta, rows, clip):
        r, n, _ = theta.shape
        if rows is None:
            s = self._full_residuals(theta.reshape(r, n, self.num_classes, self._p1))  # (N, R, C, n_max)
            if clip is not None:
                # as the minibatch path below: the factor min(1, C / (||s|| ||x||)) from x / max|x_j| (safe for
                # any finite record); s is (N, R, C, n_max) here, the features (N, n_max, p1)
                top, unit = _scaled(self.features.to(s))
                per_x = (clip / top.squeeze(-1)) / torch.linalg.vector_norm(unit, dim=-1)  # (N, n_max)
                s.mul_((per_x[:, None, :] / (s * s).sum(-2).sqrt_()).clamp_(max=1.0).unsqueeze(-2))
            return self._full_product(s).reshape(r, n, self.dim)
        xb, yb = self._rows(rows)
        s = self._residuals(theta, xb, yb)
        if clip is not None:
            # ||s - e_y|| as a sum of squares (entries in [-1, 1]; vector_norm over the class axis is ~20x slower);
            # ||x|| as m ||x / m||, m = max |x_j| (safe_norm: squares of a record's features can overflow); the
            # factor min(1, C / (||s|| ||x||)) as ((C / m) / ||x / m||) / ||s||, finite for every finite record
            top, unit = _scaled(xb)
            per_x = (clip / top.squeeze(-1)) / torch.linalg.vector_norm(unit, dim=-1)  # (R, N, B) or (1, N, B)
            s.mul_((per_x / (s * s).sum(-2).sqrt_()).clamp_(max=1.0).unsqueeze(-2))
        return torch.matmul(s, xb).reshape(r, n, self.dim)

    def _full_gradient_norms(self, theta: torch.Tensor) -> torch.Tensor:
        """||grad l(theta[0, c]; x_ci)|| = ||s - e_y|| ||x|| for every row of every client, (N, n_max)
        (padding entries are +inf), from one chain's theta (1, N, d): the per-example norms without
        the per-example gradients (the private clip's quantile, :mod:`fedlangevin.privacy.start`)."""
        s = self._full_residuals(theta.reshape(1, self.num_clients, self.num_classes, self._p1))[:, 0]  # (N, C, n)
        top, unit = _scaled(self.features.to(s))
        norms = (s * s).sum(-2).sqrt() * top.squeeze(-1) * torch.linalg.vector_norm(unit, dim=-1)
        return norms.masked_fill(self.mask.to(s.device) <= 0, math.inf)

    def prior_grad(self, theta):
        """grad U_0 = theta / sigma^2."""
        self._check_private_theta(theta)
        return theta * self.prior_precision

    def _draw_layout(self):
        return dict(width=self.features.shape[1], draw_clients=self._draw_clients, held=self._held)

    def logits(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Logits (..., n, C) of inputs X (n, p) for parameter draws theta (..., d)."""
        X = torch.as_tensor(X, dtype=theta.dtype, device=theta.device)
        if X.dim() != 2 or X.shape[1] != self.num_features:
            raise ValueError(f"X must have shape (n, {self.num_features}); got {tuple(X.shape)}")
        weight, bias = self.unpack(theta)
        out = torch.matmul(X, weight.transpose(-1, -2))
        if bias is not None:
            out = out + bias.unsqueeze(-2)
        return out

    def predict_proba(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Class probabilities (..., n, C) for every parameter draw in theta (..., d).

        Averaging over the draw axes gives the Bayesian model average (posterior predictive).
        """
        return torch.softmax(self.logits(theta, X), dim=-1)

    def nll(self, theta: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of all training data, sum_i l(theta; x_i, y_i), theta (..., d)."""
        theta = torch.as_tensor(theta)
        return self._client_nll(theta.unsqueeze(-2)).sum(-1)

    def _client_nll(self, theta: torch.Tensor) -> torch.Tensor:
        """sum_{i in client c} l(theta[..., c, :]; x_ci, y_ci) for theta (..., N or 1, d) -> (..., N)."""
        lead, n = theta.shape[:-2], self.num_clients
        w = theta.expand(*lead, n, self.dim).reshape(-1, n, self.num_classes, self._p1)  # (B, N, C, p1)
        logp = torch.log_softmax(self._full_logits(w), dim=-2)  # (N, B, C, n_max), no per-draw copy of the data
        picked = logp.gather(-2, self._full_labels(logp)).squeeze(-2)  # (N, B, n_max)
        return -(picked * self.mask.to(theta)[:, None, :]).sum(-1).transpose(0, 1).reshape(*lead, n)

    def energy(self, theta: torch.Tensor) -> torch.Tensor:
        """Global energy f(theta) = NLL + ||theta||^2 / (2 sigma^2) (negative log posterior + const)."""
        theta = torch.as_tensor(theta)
        return self.nll(theta) + 0.5 * self.prior_precision * (theta * theta).sum(-1)

    def client_energy(self, theta: torch.Tensor) -> torch.Tensor:
        """f^c(theta[..., c, :]) for theta (..., N, d): (1/p_c) NLL_c + U_0, shape (..., N)."""
        theta = torch.as_tensor(theta)
        if theta.shape[-2:] != (self.num_clients, self.dim):
            raise ValueError(f"theta must have shape (..., {self.num_clients}, {self.dim}); got {tuple(theta.shape)}")
        ell = self._client_nll(theta)
        return ell / self.weights.to(theta) + 0.5 * self.prior_precision * (theta * theta).sum(-1)

    def client_hvp(self, theta: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
        """Hessian-vector products H_c(theta) v of every client's full-data energy f^c, (B, N, d),
        at points ``theta`` (B, N, d) along ``vectors`` (B, N, d): the exact derivative of
        :meth:`grad`'s full-data path, (1/p_c) (dS) X + v / sigma^2 with dS = S o (dZ - sum_k S dZ)
        and dZ the logits of v (two logit products and one gradient product, no finite difference;
        the curvature estimates of :mod:`fedlangevin.warmup.curvature` use it in place of central
        gradient differences)."""
        if theta.shape != vectors.shape or theta.dim() != 3 or theta.shape[1:] != (self.num_clients, self.dim):
            raise ValueError(f"theta and vectors must both have shape (B, {self.num_clients}, {self.dim}); got "
                             f"{tuple(theta.shape)} and {tuple(vectors.shape)}")
        b, n, d = theta.shape
        c, p1 = self.num_classes, self._p1
        s = torch.softmax(self._full_logits(theta.reshape(b, n, c, p1)), dim=-2)  # (N, B, C, n_max)
        dz = self._full_logits(vectors.reshape(b, n, c, p1))
        dz.sub_((s * dz).sum(-2, keepdim=True)).mul_(s)  # dS = S o (dZ - <S, dZ>)
        dz.mul_(self.mask.to(dz)[:, None, None, :])
        hv = self._full_product(dz)  # (B, N, C, p1)
        hv.mul_(self._client_scale.to(hv))
        hv.add_(vectors.reshape(b, n, c, p1), alpha=self.prior_precision)
        return hv.reshape(b, n, d)

    def client_hessian_diagonal(self, theta: torch.Tensor) -> torch.Tensor:
        """The diagonals (N, d) of the client Hessians of f^c at one point theta (d,):
        (1/p_c) sum_i s_ik (1 - s_ik) x_ij^2 + 1 / sigma^2 for weight (k, j), with s_i = softmax."""
        theta = torch.as_tensor(theta)
        w = theta.reshape(self.num_classes, self._p1).to(self.features)
        s = torch.softmax(torch.matmul(w, self.features.transpose(-1, -2)), dim=-2)  # (N, C, n_max)
        v = s * (1 - s) * self.mask.unsqueeze(1)
        diag = torch.matmul(v, self.features * self.features) / self.weights[:, None, None]  # (N, C, p1)
        return (diag + self.prior_precision).reshape(self.num_clients, self.dim).to(theta)

    def mode(self, init: torch.Tensor | None = None, max_iter: int = 1000, tol: float = 1e-8) -> torch.Tensor:
        """The MAP estimate argmin_theta f(theta) (the posterior mode at any temperature), by
        full-batch L-BFGS in float64 on the pooled data; a centralised reference point
        estimate. Stops when the largest gradient entry is below ``tol`` times (1 + n)."""
        max_iter = check_int("max_iter", max_iter, 1)
        tol = check_real("tol", tol, low=0.0, low_open=True)
        work = self.to(device="cpu", dtype=torch.float64)
        theta = torch.zeros(self.dim, dtype=torch.float64) if init is None else torch.as_tensor(init, dtype=torch.float64).clone()
        if theta.shape != (self.dim,):
            raise ValueError(f"init must have shape ({self.dim},); got {tuple(theta.shape)}")
        theta.requires_grad_(True)
        opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=max_iter, tolerance_grad=tol * (1 + self.num_data),
                                tolerance_change=0.0, history_size=20, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            value = work.energy(theta)
            value.backward()
            return value

        opt.step(closure)
        return theta.detach()

    @property
    def smoothness(self) -> float:
        """An upper bound on L (Assumption 5.1): max_c lambda_max(X_c^T X_c) / (2 p_c) + 1/sigma^2.

        The Hessian of the softmax cross-entropy of one point is (diag(s) - s s^T) ⊗ x x^T and
        lambda_max(diag(s) - s s^T) <= 1/2; the bound is attained only for a probability
        vector split evenly between two classes.
        """
        x = self.features.double().cpu()
        top = torch.linalg.eigvalsh(x.transpose(-1, -2) @ x)[:, -1]
        return float((0.5 * top / self.weights).max()) + self.prior_precision

    @property
    def convexity(self) -> float:
        """m = 1/sigma^2 (Assumption 5.2; the likelihood is convex but not strongly convex)."""
        return self.prior_precision

    def clients(self, indices):
        """The clients ``indices`` only: their data, their p_c and 1/p_c, the federation's n
        (see :meth:`FederatedProblem.clients`). Minibatch indices are drawn for every client
        of the federation and the held clients' kept, so samples do not depend on the split;
        the gradients are computed for the held clients alone."""
        idx = check_client_indices(indices, self.num_clients)
        new = copy.copy(self)
        dev = self.features.device
        new.num_clients = int(idx.numel())
        new.features = self.features.index_select(0, idx.to(dev))
        new.labels = self.labels.index_select(0, idx.to(self.labels.device))
        new.mask = self.mask.index_select(0, idx.to(self.mask.device))
        new._client_scale = self._client_scale.index_select(0, idx.to(self._client_scale.device))
        new.client_sizes = self.client_sizes.index_select(0, idx.to(self.client_sizes.device))
        new.weights = self.weights.index_select(0, idx)
        held = idx if self._held is None else self._held.index_select(0, idx.to(self._held.device))
        new._held = held.to(dev)
        return new

    def to(self, device=None, dtype=None):
        new = copy.copy(self)
        if self._held is not None:
            new._held = self._held.to(device=device)
        for name in ("features", "mask", "_client_scale"):
            t = getattr(self, name)
            setattr(new, name, t.to(device=device, dtype=dtype))
        new.labels = self.labels.to(device=device)
        new.client_sizes = self.client_sizes.to(device=device)
        new.weights = self.weights  # float64 on CPU (validation, bookkeeping)
        return new

    def __repr__(self) -> str:
        return (
            f"LogisticRegression(clients={self.num_clients}, n={self.num_data}, features={self.num_features}, "
            f"classes={self.num_classes}, d={self.dim}, prior_scale={self.prior_scale:g}, bias={self.bias})"
        )
