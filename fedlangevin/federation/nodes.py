"""The contract between a sampler family and a transport whose clients run apart (Flower nodes).

A transport that carries rounds to remote clients needs three things of a sampler, and takes
them from a :class:`NodeKernel` it is given, never from the sampler's package:

- ``client_round``: one client's K local steps from the broadcast state, on its own streams
  (:mod:`fedlangevin.federation.streams`);
- ``arrays``: the state's arrays besides theta that the server broadcasts and averages with the
  participation weights (FA-HMC's velocity ``"momentum"``; none for FA-LD);
- ``options`` and ``state``: the family's own settings, checked with their defaults, and the
  server's state from the averaged arrays.

Each sampler package declares its node kernel (``fedlangevin.fald.node.NODE``, ``fedlangevin.fahmc.node.NODE``),
which its user class carries as ``node`` (``fedlangevin.FALD.node``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["NodeKernel", "no_options"]


def no_options(given: Mapping[str, Any]) -> dict:
    """A family without options of its own: every option given is refused (``ValueError`` naming it)."""
    for name, value in given.items():
        raise ValueError(f"{name}: not an option of this sampler; got {name}={value!r}")
    return {}


@dataclass(frozen=True)
class NodeKernel:
    """A sampler family as a transport with remote clients sees it (module docstring).

    ``name``: the family's key in messages and settings (``"fald"``); ``label``: its name in
    reports (``"FA-LD"``); ``client_round(problem, theta, step_sizes, *, arrays, options, weight,
    temperature, correlation, shared_generator, private_generator, batch_size, noise_dtype)``
    returns ``{"beta": theta_c, **{name: the client's array}}`` (each (R, d)) from the broadcast
    theta (R, d) and ``arrays`` {name: (R, d)}; ``arrays``: those names; ``options(given)``: the
    family's options (a mapping of those given, None left out) checked, with their defaults
    (``ValueError`` naming an option); ``option_names``: the options it takes; ``state(theta, step,
    round, **arrays)``: the server's state after a round (None: the transport's own plain state of
    theta and the counters); ``initial(theta)``: the arrays at the start ({name: (R, d)}).
    """

    name: str
    label: str
    client_round: Callable[..., dict]
    arrays: tuple[str, ...] = ()
    options: Callable[[Mapping[str, Any]], dict] = no_options
    option_names: tuple[str, ...] = ()
    state: Callable[..., Any] | None = None
    initial: Callable[[Any], dict] | None = None
