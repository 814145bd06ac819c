"""Flat-parameter classifiers, stacked federated data, test metrics and run histories shared by
the compressed-communication optimizers (:mod:`~fedlangevin.compression.lfl`,
:mod:`~fedlangevin.compression.dzofl`).

Every optimizer here moves a flat parameter vector theta in R^d (the object the quantizers of
LFL App. A act on). A model maps a batch of parameter vectors theta of shape (..., d) and
inputs X of shape (..., n, p) to logits (..., n, C) with ordinary broadcasting, so the M
devices of a round are evaluated in one call: theta (M, d) with X (M, b, p) gives (M, b, C).

Client data are stacked once into padded tensors (:class:`StackedClients`) so a local step of
all devices is one batched forward/backward pass, with no Python loop over devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch

from diagnostics.calibration import brier, ece
from fedlangevin._validation import check_int, check_real
from fedlangevin.data.splits import split_by_class, split_iid  # the federated splits live in fedlangevin.data

__all__ = [
    "FlatModel",
    "MultinomialLogistic",
    "MLP",
    "StackedClients",
    "per_device_loss",
    "classification_metrics",
    "History",
    "gaussian_mixture",
    "split_by_class",
    "split_iid",
]


class FlatModel(Protocol):
    """A classifier with a flat parameter vector (see the module docstring)."""

    dim: int
    num_features: int
    num_classes: int

    def init(self, generator: torch.Generator | None = None, *, device=None, dtype=torch.float32) -> torch.Tensor: ...

    def logits(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor: ...


def _batch_shape(theta: torch.Tensor) -> tuple[int, ...]:
    return tuple(theta.shape[:-1])


@dataclass(frozen=True)
class MultinomialLogistic:
    """Softmax regression: logits = X W + b, theta = (W (p x C) row-major, b (C)); d = pC + C."""

    num_features: int
    num_classes: int

    def __post_init__(self) -> None:
        check_int("num_features", self.num_features, minimum=1)
        check_int("num_classes", self.num_classes, minimum=2)

    @property
    def dim(self) -> int:
        return self.num_features * self.num_classes + self.num_classes

    def init(self, generator: torch.Generator | None = None, *, device=None, dtype=torch.float32) -> torch.Tensor:
        """theta(0) = 0 (the loss is convex; any start works)."""
        return torch.zeros(self.dim, device=device, dtype=dtype)

    def logits(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        p, c = self.num_features, self.num_classes
        bs = _batch_shape(theta)
        W = theta[..., : p * c].reshape(*bs, p, c)
        b = theta[..., p * c :].reshape(*bs, 1, c)
        return X @ W + b


@dataclass(frozen=True)
class MLP:
    """One-hidden-layer ReLU network; theta = (W1 (p x h), b1 (h), W2 (h x C), b2 (C)).

    d = (p + 1) h + (h + 1) C; 20 inputs, h = 64, 10 classes gives d = 1994.
    """

    num_features: int
    hidden: int
    num_classes: int

    def __post_init__(self) -> None:
        check_int("num_features", self.num_features, minimum=1)
        check_int("hidden", self.hidden, minimum=1)
        check_int("num_classes", self.num_classes, minimum=2)

    @property
    def dim(self) -> int:
        return (self.num_features + 1) * self.hidden + (self.hidden + 1) * self.num_classes

    def init(self, generator: torch.Generator | None = None, *, device=None, dtype=torch.float32) -> torch.Tensor:
        """PyTorch's default Linear init: weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
        p, h, c = self.num_features, self.hidden, self.num_classes
        gen_device = generator.device if generator is not None else device
        parts = []
        for fan_in, n in ((p, p * h), (p, h), (h, h * c), (h, c)):
            bound = 1.0 / math.sqrt(fan_in)
            u = torch.rand(n, generator=generator, device=gen_device, dtype=dtype)
            parts.append((2.0 * u - 1.0) * bound)
        return torch.cat(parts).to(device=device)

    def logits(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        p, h, c = self.num_features, self.hidden, self.num_classes
        bs = _batch_shape(theta)
        i = 0
        W1 = theta[..., i : i + p * h].reshape(*bs, p, h)
        i += p * h
        b1 = theta[..., i : i + h].reshape(*bs, 1, h)
        i += h
        W2 = theta[..., i : i + h * c].reshape(*bs, h, c)
        i += h * c
        b2 = theta[..., i : i + c].reshape(*bs, 1, c)
        return torch.relu(X @ W1 + b1) @ W2 + b2


@dataclass(frozen=True)
class StackedClients:
    """M clients' data padded to a common length: X (M, n_max, p), y (M, n_max), sizes n_m.

    ``weights`` are B_m / B (LFL's aggregation weights, Sec. 1).
    """

    X: torch.Tensor
    y: torch.Tensor
    sizes: torch.Tensor

    @classmethod
    def from_list(
        cls,
        clients: Sequence[tuple[torch.Tensor, torch.Tensor]],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> "StackedClients":
        """Stack a list of per-client (X_m (n_m, p), y_m (n_m,) integer labels)."""
        if not isinstance(clients, Sequence) or len(clients) == 0:
            raise ValueError("clients must be a non-empty sequence of (X, y) pairs")
        p = None
        for m, pair in enumerate(clients):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"clients[{m}] must be an (X, y) pair")
            X, y = pair
            X = torch.as_tensor(X)
            y = torch.as_tensor(y)
            if X.dim() != 2 or X.shape[0] < 1:
                raise ValueError(f"clients[{m}] X must have shape (n_m, p) with n_m >= 1; got {tuple(X.shape)}")
            if y.shape != (X.shape[0],):
                raise ValueError(f"clients[{m}] y must have shape ({X.shape[0]},); got {tuple(y.shape)}")
            if y.is_floating_point() or (y < 0).any():
                raise ValueError(f"clients[{m}] y must hold non-negative integer class labels")
            if p is None:
                p = X.shape[1]
            elif X.shape[1] != p:
                raise ValueError(f"clients[{m}] X has {X.shape[1]} features; client 0 has {p}")
        sizes = torch.tensor([len(pair[1]) for pair in clients], dtype=torch.int64)
        n_max = int(sizes.max())
        M = len(clients)
        Xs = torch.zeros(M, n_max, p, dtype=dtype)
        ys = torch.zeros(M, n_max, dtype=torch.int64)
        for m, (X, y) in enumerate(clients):
            n = len(y)
            Xs[m, :n] = torch.as_tensor(X, dtype=dtype)
            ys[m, :n] = torch.as_tensor(y, dtype=torch.int64)
        return cls(X=Xs.to(device), y=ys.to(device), sizes=sizes.to(device))

    @property
    def num_clients(self) -> int:
        return int(self.X.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.X.shape[2])

    @property
    def weights(self) -> torch.Tensor:
        s = self.sizes.to(self.X.dtype)
        return s / s.sum()

    @property
    def num_classes_seen(self) -> int:
        mask = torch.arange(self.X.shape[1], device=self.X.device) < self.sizes[:, None]
        return int(self.y[mask].max()) + 1

    def sample_batch(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One minibatch per client, drawn uniformly without replacement from its own data.

        Returns X_b (M, b, p), y_b (M, b) and a 0/1 mask (M, b): a client with fewer than b
        points uses all of them (mask 0 on the padding). One batched call, no device loop.
        """
        b = min(batch_size, int(self.X.shape[1]))
        n_max = int(self.X.shape[1])
        if b == n_max and bool((self.sizes == n_max).all()):
            idx = torch.arange(n_max, device=self.X.device).expand(self.num_clients, n_max)
        else:
            keys = torch.rand(self.num_clients, n_max, generator=generator, device=self.X.device)
            pad = torch.arange(n_max, device=self.X.device)[None, :] >= self.sizes[:, None]
            keys = keys.masked_fill(pad, 2.0)
            idx = torch.topk(keys, b, dim=1, largest=False).indices
        Xb = torch.gather(self.X, 1, idx[..., None].expand(-1, -1, self.X.shape[2]))
        yb = torch.gather(self.y, 1, idx)
        mask = (torch.arange(b, device=self.X.device)[None, :] < self.sizes[:, None]).to(self.X.dtype)
        return Xb, yb, mask


def per_device_loss(
    model: FlatModel, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean cross-entropy of each device's batch: theta (..., d), X (..., b, p), y (..., b) -> (...)."""
    logp = torch.log_softmax(model.logits(theta, X), dim=-1)
    shape = logp.shape[:-1]
    nll = -torch.gather(logp, -1, y.expand(shape).unsqueeze(-1)).squeeze(-1)
    if mask is None:
        return nll.mean(dim=-1)
    mask = mask.expand(shape)
    return (nll * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)


def classification_metrics(logits: torch.Tensor, y: torch.Tensor, *, n_bins: int = 15) -> dict[str, float]:
    """Accuracy, NLL (mean negative log-likelihood, nats), Brier score and ECE.

    Brier and ECE are :func:`diagnostics.brier` (mean_i sum_c (p_ic - 1[y_i = c])^2, in
    [0, 2]) and :func:`diagnostics.ece` (top-label ECE of Guo et al. 2017 over ``n_bins``
    equal-width bins ((m-1)/M, m/M]), applied to the softmax probabilities. The NLL is taken
    from the logits with ``log_softmax`` rather than with :func:`diagnostics.nll`: from
    logits it is exact even for confidently wrong predictions, where the probability
    underflows and would need clipping. Accuracy counts argmax(logits) == y. Non-finite
    logits (a model that blew up) give NaN for every metric.
    """
    n_bins = check_int("n_bins", n_bins, minimum=1)
    logits = logits.detach().to(torch.float64)
    logp = torch.log_softmax(logits, dim=-1)
    if not bool(torch.isfinite(logp).all()):
        return {k: float("nan") for k in ("accuracy", "nll", "brier", "ece")}
    pred = logits.argmax(dim=-1)
    correct = (pred == y).to(torch.float64)
    nll = -logp.gather(1, y[:, None]).mean()
    prob = logp.exp().cpu().numpy()
    labels = y.detach().cpu().numpy()
    return {
        "accuracy": float(correct.mean()),
        "nll": float(nll),
        "brier": brier(prob, labels),
        "ece": ece(prob, labels, n_bins=n_bins),
    }


@dataclass
class History:
    """Per-evaluation record of a run: rounds evaluated, test metrics and cumulative bits.

    ``bits_down`` counts every broadcast once (a broadcast reaches all devices at the cost of
    one transmission); ``bits_up`` sums the uploads of all devices. Both are cumulative up to
    and including the recorded round. ``extra`` holds method-specific per-round series
    (e.g. the variance and peak-to-average ratio of LFL's broadcast vector).
    """

    method: str
    rounds: list[int] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    bits_down: list[float] = field(default_factory=list)
    bits_up: list[float] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)
    diverged_at: int | None = None

    def record(self, round_: int, metrics: dict[str, float], bits_down: float, bits_up: float) -> None:
        self.rounds.append(int(round_))
        for k, v in metrics.items():
            self.metrics.setdefault(k, []).append(float(v))
        self.bits_down.append(float(bits_down))
        self.bits_up.append(float(bits_up))

    def final(self, name: str = "accuracy") -> float:
        return self.metrics[name][-1]

    @property
    def bits_total(self) -> list[float]:
        return [a + b for a, b in zip(self.bits_down, self.bits_up)]


# ---------------------------------------------------------------------------------------------
# Small synthetic problem for the LFL reproduction (SPEC-comparison, Sec. A "Experiments").


def gaussian_mixture(
    n_per_class: int,
    *,
    num_classes: int = 10,
    dim: int = 20,
    separation: float = 2.0,
    generator: torch.Generator | None = None,
    means: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Balanced C-class mixture in R^dim: x | y = c ~ N(mu_c, I), mu_c ~ N(0, separation^2 I).

    Returns (X, y, means); pass ``means`` back in to draw a test set from the same mixture.
    """
    n_per_class = check_int("n_per_class", n_per_class, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    dim = check_int("dim", dim, minimum=1)
    separation = check_real("separation", separation, low=0.0, low_open=True)
    if means is None:
        means = separation * torch.randn(num_classes, dim, generator=generator, dtype=torch.float64)
    elif tuple(means.shape) != (num_classes, dim):
        raise ValueError(f"means must have shape ({num_classes}, {dim}); got {tuple(means.shape)}")
    y = torch.arange(num_classes).repeat_interleave(n_per_class)
    X = means.to(torch.float64)[y] + torch.randn(len(y), dim, generator=generator, dtype=torch.float64)
    return X.to(dtype), y, means

