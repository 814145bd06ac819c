"""Federated splits: which data points each client holds.

Every split comes in two forms:

- ``*_partition(...)`` returns a list of ``N`` index tensors (int64, one per client, disjoint,
  together covering every point) — the form :class:`~fedlangevin.problems.LogisticRegression`
  and the studies use;
- ``split_*(X, y, ...)`` returns a list of ``N`` ``(X_c, y_c)`` pairs — the form of the
  compressed-communication optimizers (:mod:`fedlangevin.compression`).

Splits:

- **iid** (:func:`iid_partition`): a uniformly random partition into N (near-)equal parts
  (Deng et al., Sec. 7.2 use N = 10; LFL, Sec. 4).
- **label skew** (:func:`label_skew_partition`): every client holds exactly
  ``classes_per_client`` classes (pathological non-iid, McMahan et al. 2017 use two); the
  points of a class are shared equally among the clients holding it. With one class per
  client and N a multiple of C this is LFL's non-iid split (:func:`split_by_class`).
- **Dirichlet** (:func:`dirichlet_partition`): the share of each class on each client is drawn
  from Dirichlet(alpha) (Hsu et al. 2019); small alpha is very skewed, alpha -> inf is iid.

Randomness comes from a ``torch.Generator`` (or an int seed); the same generator state gives
the same split.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from fedlangevin._validation import check_fits, check_index_parts, check_int, check_real, check_tensor

__all__ = [
    "iid_partition",
    "label_skew_partition",
    "dirichlet_partition",
    "make_partition",
    "stratified_holdout",
    "class_counts",
    "apply_partition",
    "split_iid",
    "split_by_class",
    "split_label_skew",
    "split_dirichlet",
    "SPLITS",
]

#: names accepted by :func:`make_partition` (and the studies' ``--split`` option)
SPLITS = ("iid", "label_skew", "dirichlet")


def _generator(generator: torch.Generator | int | None) -> torch.Generator | None:
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    seed = check_int("generator", generator, 0)
    return torch.Generator().manual_seed(seed)


def _labels(y) -> torch.Tensor:
    y = check_tensor("y", y, keep_dtype=True)
    if y.dim() != 1 or y.numel() == 0:
        raise ValueError(f"y must be a non-empty 1-d tensor of integer class labels; got shape {tuple(y.shape)}")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(f"y must hold integer class labels; got dtype {y.dtype}")
    if (y < 0).any():
        raise ValueError("y must hold non-negative integer class labels")
    return y.long()


# -- index partitions -----------------------------------------------------------------------


def iid_partition(num_points: int, num_clients: int, generator: torch.Generator | int | None = None) -> list[torch.Tensor]:
    """A uniformly random partition of ``range(num_points)`` into ``num_clients`` parts whose
    sizes differ by at most one."""
    num_points = check_int("num_points", num_points, 1)
    num_clients = check_int("num_clients", num_clients, 1, num_points)
    check_fits("num_points", 16 * num_points, "cpu", f"a permutation of {num_points} indices", "use fewer points")
    idx = torch.randperm(num_points, generator=_generator(generator))
    return list(torch.tensor_split(idx, num_clients))


def label_skew_partition(
    y, num_clients: int, classes_per_client: int = 1, generator: torch.Generator | int | None = None
) -> list[torch.Tensor]:
    """Every client holds exactly ``classes_per_client`` distinct classes.

    The N * s class slots (s = ``classes_per_client``) are spread over the C classes present
    in ``y`` as evenly as possible (each class is held by floor(Ns/C) or ceil(Ns/C) clients;
    which classes get the extra holder is random), each class's points are shuffled and cut
    into equal parts, one per holder, and the parts are dealt so that no client gets the same
    class twice; finally the client order is shuffled. Requires s <= C and N s >= C (every
    class is held by someone).
    """
    y = _labels(y)
    g = _generator(generator)
    classes = torch.unique(y)
    n_classes = len(classes)
    num_clients = check_int("num_clients", num_clients, 1)
    s = check_int("classes_per_client", classes_per_client, 1, n_classes)
    slots = num_clients * s
    if slots < n_classes:
        raise ValueError(
            f"num_clients * classes_per_client must be >= the number of classes ({n_classes}) so that every "
            f"class is held by some client; got {num_clients} * {s} = {slots}"
        )
    holders = torch.full((n_classes,), slots // n_classes, dtype=torch.int64)
    extra = slots % n_classes
    if extra:
        holders[torch.randperm(n_classes, generator=g)[:extra]] += 1
    chunks: list[torch.Tensor] = []  # class-major: all parts of class 0, then class 1, ...
    for c, h in zip(classes, holders.tolist()):
        idx = torch.nonzero(y == c).squeeze(1)
        if len(idx) < h:
            raise ValueError(
                f"class {int(c)} has {len(idx)} points but would be shared by {h} clients; "
                "use fewer clients or fewer classes_per_client"
            )
        idx = idx[torch.randperm(len(idx), generator=g)]
        chunks.extend(torch.tensor_split(idx, h))
    # Client i takes chunks i, i + N, i + 2N, ...: a class's chunks are contiguous and number at
    # most N, so two chunks N apart never share a class.
    clients = [torch.cat([chunks[i + j * num_clients] for j in range(s)]) for i in range(num_clients)]
    order = torch.randperm(num_clients, generator=g).tolist()
    return [clients[i] for i in order]


def dirichlet_partition(
    y,
    num_clients: int,
    alpha: float,
    generator: torch.Generator | int | None = None,
    min_size: int = 1,
    max_tries: int = 100,
) -> list[torch.Tensor]:
    """Per-class client shares q_c ~ Dirichlet(alpha 1_N) (Hsu et al., 2019).

    Each class's shuffled points are cut at the cumulative shares. Draws are repeated (up to
    ``max_tries``) until every client holds at least ``min_size`` points; a ``ValueError``
    suggests a larger alpha if that never happens.
    """
    y = _labels(y)
    g = _generator(generator)
    num_clients = check_int("num_clients", num_clients, 1, len(y))
    alpha = check_real("alpha", alpha, low=0.0, low_open=True)
    min_size = check_int("min_size", min_size, 0, len(y) // num_clients)
    max_tries = check_int("max_tries", max_tries, 1)
    classes = torch.unique(y)
    seed = int(torch.randint(0, 2**62, (1,), generator=g))
    rng = np.random.default_rng(seed)
    by_class = [torch.nonzero(y == c).squeeze(1) for c in classes]
    for _ in range(max_tries):
        parts: list[list[torch.Tensor]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = idx[torch.from_numpy(rng.permutation(len(idx)))]
            shares = rng.dirichlet(np.full(num_clients, alpha))
            cuts = np.round(np.cumsum(shares)[:-1] * len(idx)).astype(np.int64)
            for c, piece in enumerate(np.split(np.arange(len(idx)), cuts)):
                parts[c].append(idx[torch.from_numpy(piece)])
        out = [torch.cat(p) if p else torch.empty(0, dtype=torch.int64) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out
    raise ValueError(
        f"dirichlet_partition: no draw in {max_tries} tries gave every client >= min_size={min_size} points "
        f"(alpha={alpha:g}, {num_clients} clients, {len(y)} points); use a larger alpha or fewer clients"
    )


def make_partition(
    kind: str,
    y,
    num_clients: int,
    generator: torch.Generator | int | None = None,
    *,
    classes_per_client: int = 2,
    alpha: float = 0.5,
    min_size: int = 1,
) -> list[torch.Tensor]:
    """Dispatch by name: ``"iid"``, ``"label_skew"`` (``classes_per_client``) or
    ``"dirichlet"`` (``alpha``, ``min_size``)."""
    if kind == "iid":
        return iid_partition(len(_labels(y)), num_clients, generator)
    if kind == "label_skew":
        return label_skew_partition(y, num_clients, classes_per_client, generator)
    if kind == "dirichlet":
        return dirichlet_partition(y, num_clients, alpha, generator, min_size=min_size)
    raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {kind!r}")


def stratified_holdout(y, fraction: float, generator: torch.Generator | int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (kept, held_out): round(fraction * n_k) random points of every class k are held
    out (a stratified test or validation split); both index tensors are sorted."""
    y = _labels(y)
    fraction = check_real("fraction", fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    g = _generator(generator)
    keep, hold = [], []
    for c in torch.unique(y):
        idx = torch.nonzero(y == c).squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=g)]
        m = int(round(fraction * len(idx)))
        hold.append(idx[:m])
        keep.append(idx[m:])
    kept, held = torch.cat(keep).sort().values, torch.cat(hold).sort().values
    if len(kept) == 0 or len(held) == 0:
        raise ValueError(f"fraction={fraction:g} leaves an empty part for {len(y)} points; choose another fraction")
    return kept, held


def class_counts(y, parts: Sequence[torch.Tensor], num_classes: int | None = None) -> torch.Tensor:
    """(N, C) int64 table: how many points of each class every client holds."""
    y = _labels(y)
    c = int(y.max()) + 1 if num_classes is None else check_int("num_classes", num_classes, int(y.max()) + 1)
    parts = check_index_parts("parts", parts, len(y))
    return torch.stack([torch.bincount(y[p], minlength=c) for p in parts])


def apply_partition(X, y, parts: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-client ``(X[idx], y[idx])`` pairs; every part must hold at least one index (a client
    without data is a ValueError naming the part)."""
    X, y = check_tensor("X", X, keep_dtype=True), check_tensor("y", y, keep_dtype=True)
    if X.dim() < 1 or y.dim() != 1 or X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y must have the same number of rows; got shapes {tuple(X.shape)} and {tuple(y.shape)}")
    parts = check_index_parts("parts", parts, y.shape[0])
    if not parts:
        raise ValueError("parts must hold at least one part (one index tensor per client); got none")
    empty = [c for c, p in enumerate(parts) if p.numel() == 0]
    if empty:
        raise ValueError(f"parts[{empty[0]}] is empty: every client needs at least one data point "
                         f"({len(empty)} of {len(parts)} parts are empty)")
    return [(X[p], y[p]) for p in parts]


# -- (X, y) pair forms ------------------------------------------------------------------------


def split_iid(
    X: torch.Tensor, y: torch.Tensor, num_devices: int, generator: torch.Generator | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """LFL's iid split (Sec. 4): a random partition into M (near-)equal disjoint subsets."""
    num_devices = check_int("num_devices", num_devices, minimum=1, maximum=len(y))
    return apply_partition(X, y, iid_partition(len(y), num_devices, generator))


def split_by_class(
    X: torch.Tensor, y: torch.Tensor, num_devices: int, generator: torch.Generator | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """LFL's non-iid split (Sec. 4): the points of each class are cut into M / C disjoint
    random subsets and every device gets one subset, so every device holds a single class.
    ``num_devices`` must be a multiple of the number of classes C (the special case of
    :func:`label_skew_partition` with one class per client)."""
    C = len(torch.unique(torch.as_tensor(y)))
    num_devices = check_int("num_devices", num_devices, minimum=C)
    if num_devices % C:
        raise ValueError(f"num_devices must be a multiple of the number of classes ({C}); got {num_devices}")
    return apply_partition(X, y, label_skew_partition(y, num_devices, 1, generator))


def split_label_skew(
    X, y, num_clients: int, classes_per_client: int = 1, generator: torch.Generator | int | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`label_skew_partition` as ``(X_c, y_c)`` pairs."""
    return apply_partition(X, y, label_skew_partition(y, num_clients, classes_per_client, generator))


def split_dirichlet(
    X, y, num_clients: int, alpha: float, generator: torch.Generator | int | None = None, min_size: int = 1
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`dirichlet_partition` as ``(X_c, y_c)`` pairs."""
    return apply_partition(X, y, dirichlet_partition(y, num_clients, alpha, generator, min_size=min_size))
