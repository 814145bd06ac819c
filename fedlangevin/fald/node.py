"""FA-LD as a transport with remote clients runs it (:class:`~fedlangevin.federation.nodes.NodeKernel`):
a client's K local steps of eq. 10 (:func:`fedlangevin.fald.engine.client_round`); no array besides
theta, no option."""

from __future__ import annotations

from typing import Any, Mapping

from fedlangevin.fald.engine import client_round
from fedlangevin.federation.nodes import NodeKernel

__all__ = ["NODE"]


def _client_round(problem, theta, step_sizes, *, arrays: Mapping[str, Any], options: Mapping[str, Any], **common) -> dict:
    return {"beta": client_round(problem, theta, step_sizes, **common)}


#: FA-LD's node kernel
NODE = NodeKernel(name="fald", label="FA-LD", client_round=_client_round)
