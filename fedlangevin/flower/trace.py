"""What a Flower FA-LD run returns: the trace, its communication in bytes, the server's view
of the federation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from fedlangevin.fald.results.trace import Communication, Trace

__all__ = ["Federation", "FlowerCommunication", "FlowerTrace"]


@dataclass(frozen=True)
class Federation:
    """What the server knows of the federation: the nodes (ordered by client index), n_c, p_c, d.

    Stands in for the problem on the trace (``trace.problem``): ``weights`` and
    ``client_sizes`` are what privacy accounting reads; there is no exact posterior.
    """

    node_ids: tuple[int, ...]
    client_sizes: torch.Tensor
    weights: torch.Tensor
    dim: int
    var_names: Any = None

    @property
    def num_clients(self) -> int:
        return len(self.node_ids)

    def posterior(self, temperature: float = 1.0):
        return None

    def constrain(self, samples):
        return None


@dataclass(frozen=True)
class FlowerCommunication(Communication):
    """:class:`~fedlangevin.fald.results.trace.Communication` plus the bytes Flower carried (message
    contents, serialised): ``bytes_down`` server to clients, ``bytes_up`` clients to server,
    for all R chains together (one message carries every chain)."""

    bytes_up: int = 0
    bytes_down: int = 0


@dataclass
class FlowerTrace(Trace):
    """A :class:`~fedlangevin.fald.results.trace.Trace` of a Flower run; ``dropouts``: {round: [client
    indices dropped or refused in that round]}; ``seconds_per_round``: wall time per round."""

    dropouts: dict[int, list[int]] = field(default_factory=dict)
    seconds_per_round: float = float("nan")
