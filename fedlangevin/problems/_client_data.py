"""Per-client datasets of the autodiff problems (:class:`~fedlangevin.problems.CustomProblem`,
:class:`~fedlangevin.problems.PyroProblem`), validated and stacked, and their minibatch draws.

A client's dataset is a tensor, a tuple/list of tensors, or a dict of tensors, all with the
rows on axis 0 (n_c rows). Clients are stacked on a new axis 0, padded to the largest n_c with
copies of their own rows (so every padded value is a valid data point).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

__all__ = ["ClientData", "minibatch_indices"]


def _as_leaf(value: Any, where: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        return torch.as_tensor(np.asarray(value))
    raise ValueError(
        f"client_data: {where} must be a tensor or array with the data rows on axis 0; got {type(value).__name__} "
        "(pass fixed non-data arguments to the model with functools.partial)"
    )


def _flatten(dataset: Any, where: str) -> tuple[list[torch.Tensor], Any]:
    """Leaves (tensors) and a spec to rebuild the container: tensor, tuple/list, or dict."""
    if isinstance(dataset, dict):
        keys = list(dataset.keys())
        if not keys or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"client_data: {where} must be a non-empty dict with string keys")
        return [_as_leaf(dataset[k], f"{where}[{k!r}]") for k in keys], ("dict", tuple(keys))
    if isinstance(dataset, (tuple, list)):
        if not dataset:
            raise ValueError(f"client_data: {where} is an empty {type(dataset).__name__}")
        kind = "tuple" if isinstance(dataset, tuple) else "list"
        return [_as_leaf(v, f"{where}[{i}]") for i, v in enumerate(dataset)], (kind, len(dataset))
    return [_as_leaf(dataset, where)], ("tensor", None)


def _unflatten(leaves: Sequence[torch.Tensor], spec: Any) -> Any:
    kind, info = spec
    if kind == "dict":
        return dict(zip(info, leaves))
    if kind == "tuple":
        return tuple(leaves)
    if kind == "list":
        return list(leaves)
    return leaves[0]


@dataclass
class ClientData:
    """Per-client datasets, validated and stacked.

    ``padded``: one tensor per leaf, (N, n_max, ...), rows past n_c are copies of the
    client's own rows (cyclic); ``sizes``: n_c (int64, CPU); ``spec``: the container type.
    """

    padded: list[torch.Tensor]
    sizes: torch.Tensor
    spec: Any

    @classmethod
    def from_clients(cls, client_data: Any) -> "ClientData":
        if isinstance(client_data, (torch.Tensor, np.ndarray)):
            raise ValueError(
                "client_data must be a sequence with one dataset per client (a list of tensors, of "
                "tuples of tensors or of dicts of tensors); for a stacked (N, n, ...) tensor pass list(tensor)"
            )
        try:
            clients = list(client_data)
        except TypeError:
            raise ValueError("client_data must be a sequence with one dataset per client") from None
        if not clients:
            raise ValueError("client_data must hold at least one client's dataset")
        flat = [_flatten(ds, f"client {c}'s dataset") for c, ds in enumerate(clients)]
        spec = flat[0][1]
        sizes = []
        for c, (leaves, sp) in enumerate(flat):
            if sp != spec:
                raise ValueError(
                    f"client_data: every client's dataset must have the same structure; client 0 is {spec}, client {c} is {sp}"
                )
            for j, leaf in enumerate(leaves):
                if leaf.dim() == 0:
                    raise ValueError(f"client_data: leaf {j} of client {c}'s dataset is a scalar; data rows must be on axis 0")
                ref = flat[0][0][j]
                if leaf.shape[1:] != ref.shape[1:] or leaf.dtype != ref.dtype:
                    raise ValueError(
                        f"client_data: leaf {j} of client {c} has row shape {tuple(leaf.shape[1:])} and dtype {leaf.dtype}; "
                        f"client 0 has {tuple(ref.shape[1:])} and {ref.dtype}"
                    )
                if leaf.is_floating_point() and not torch.isfinite(leaf).all():
                    raise ValueError(f"client_data: client {c}'s dataset has non-finite values (leaf {j})")
            n_c = {int(leaf.shape[0]) for leaf in leaves}
            if len(n_c) != 1:
                raise ValueError(f"client_data: the tensors of client {c}'s dataset have different numbers of rows {sorted(n_c)}")
            n_c = n_c.pop()
            if n_c < 1:
                raise ValueError(f"client_data: client {c} has no data rows")
            sizes.append(n_c)
        n_max = max(sizes)
        padded = []
        for j in range(len(flat[0][0])):
            rows = []
            for c, (leaves, _) in enumerate(flat):
                leaf = leaves[j].cpu()
                if leaf.shape[0] < n_max:
                    leaf = leaf[torch.arange(n_max) % leaf.shape[0]]
                rows.append(leaf)
            padded.append(torch.stack(rows))
        return cls(padded, torch.tensor(sizes, dtype=torch.int64), spec)

    @property
    def num_clients(self) -> int:
        return int(self.sizes.numel())

    def client(self, c: int) -> Any:
        """Client c's dataset in its own container, without padding."""
        n = int(self.sizes[c])
        return _unflatten([leaf[c, :n] for leaf in self.padded], self.spec)

    def stacked(self, clients: torch.Tensor, rows: int) -> Any:
        """Datasets of ``clients`` stacked on axis 0, first ``rows`` rows each."""
        return _unflatten([leaf[clients.to(leaf.device), :rows] for leaf in self.padded], self.spec)

    def gather(self, idx: torch.Tensor) -> Any:
        """Rows idx (R, N, b) of every client: leaves of shape (R, N, b, ...)."""
        r, n, b = idx.shape
        out = []
        for leaf in self.padded:
            n_max = leaf.shape[1]
            flat = idx.to(leaf.device) + (torch.arange(n, device=leaf.device) * n_max)[None, :, None]
            rows = leaf.reshape(n * n_max, *leaf.shape[2:]).index_select(0, flat.reshape(-1))
            out.append(rows.reshape(r, n, b, *leaf.shape[2:]))
        return _unflatten(out, self.spec)

    def to(self, device=None, dtype=None) -> "ClientData":
        leaves = [
            leaf.to(device=device, dtype=dtype if (dtype is not None and leaf.is_floating_point()) else None)
            for leaf in self.padded
        ]
        return ClientData(leaves, self.sizes, self.spec)


def minibatch_indices(sizes: torch.Tensor, chains: int, batch_size: int, generator, device, dtype) -> torch.Tensor:
    """Row indices (R, N, b) drawn uniformly with replacement inside each client.

    The same draw as :class:`~fedlangevin.problems.GaussianSimulation` (one uniform per
    index in the state's dtype), so equal seeds give equal minibatches.
    """
    n = sizes.numel()
    sizes = sizes.to(device)
    u = torch.rand(chains, n, batch_size, generator=generator, device=device, dtype=dtype)
    return (u * sizes[None, :, None]).long().clamp_max_(sizes[None, :, None] - 1)
