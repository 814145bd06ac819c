"""FA-HMC as a transport with remote clients runs it (:class:`~fedlangevin.federation.nodes.NodeKernel`):
a client's K local steps of the splitting (:func:`fedlangevin.fahmc.client.client_round`) from the
broadcast (theta, v); the velocity v (``"momentum"``) is averaged with theta; the options are the
friction gamma (default :data:`~fedlangevin.fahmc.kernel.DEFAULT_FRICTION`) and the splitting
(default ``"BAOAB"``)."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from fedlangevin._validation import check_choice, check_real
from fedlangevin.fahmc.client import client_round
from fedlangevin.fahmc.kernel import DEFAULT_FRICTION, SPLITTINGS, FAHMCState
from fedlangevin.federation.nodes import NodeKernel

__all__ = ["NODE"]


def _client_round(problem, theta, step_sizes, *, arrays: Mapping[str, Any], options: Mapping[str, Any], **common) -> dict:
    beta, v = client_round(problem, theta, arrays["momentum"], step_sizes, friction=float(options["friction"]),
                           splitting=str(options["splitting"]), **common)
    return {"beta": beta, "momentum": v}


def _options(given: Mapping[str, Any]) -> dict:
    unknown = sorted(set(given) - {"friction", "splitting"})
    if unknown:
        raise ValueError(f"{unknown[0]}: not an option of FA-HMC (friction, splitting); got {given[unknown[0]]!r}")
    friction = given.get("friction", DEFAULT_FRICTION)
    if isinstance(friction, str) and friction == "auto":
        raise ValueError("friction='auto' (adapted in a warm-up) is not available here: give friction as a number > 0")
    return {"friction": check_real("friction", friction, low=0.0, low_open=True),
            "splitting": check_choice("splitting", given.get("splitting", "BAOAB"), SPLITTINGS)}


def _state(theta: torch.Tensor, step: int = 0, round: int = 0, *, momentum: torch.Tensor) -> FAHMCState:
    return FAHMCState(theta, momentum, step, round)


def _initial(theta: torch.Tensor) -> dict:
    return {"momentum": torch.zeros_like(theta)}  # the velocity starts at zero, as FAHMC's


#: FA-HMC's node kernel
NODE = NodeKernel(name="fahmc", label="FA-HMC", client_round=_client_round, arrays=("momentum",), options=_options,
                  option_names=("friction", "splitting"), state=_state, initial=_initial)
