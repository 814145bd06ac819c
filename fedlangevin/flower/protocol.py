"""What the FA-LD server and its clients say to each other in Flower messages.

Two exchanges (Flower's Message API, ``flwr.app``):

- ``query`` (once, at the start): the server asks every node for its client index, its
  number of examples n_c and the dimension d; the reply is a ``ConfigRecord``
  ``{"client", "num_examples", "dim"}``.
- ``train`` (every round): the server sends the global iterate theta (R, d) as an
  ``ArrayRecord`` and a ``ConfigRecord`` with the round t, the round seed (of the shared
  noise), the K step sizes, the client's weight p_c = n_c / sum n and the sampler's
  settings (temperature, correlation, batch size, noise precision), and, where the
  participation rule's calibrated private noise differs from eq. 10's, ``"noise_weight"``:
  q_c = E[w_c^2] / p_c in place of p_c in the noise scale; the client replies with its local
  state beta (R, d) after the K local steps.

An FA-HMC run (``FlowerRun(sampler="fahmc")``, :mod:`fedlangevin.fahmc.client`) sends the global
velocity v (R, d) beside theta (array ``"momentum"``) and its config adds ``"sampler": "fahmc"``,
the friction gamma and the splitting; the client replies with both its theta_c (``"beta"``) and
its v_c (``"momentum"``). FA-LD's messages are unchanged (no ``"sampler"`` key: FA-LD).

Communication is counted in bytes as Flower carries them: the serialised size of each
message's content (:func:`message_bytes`).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["THETA", "BETA", "MOMENTUM", "CONFIG", "INFO", "NOISE_DTYPES", "SAMPLERS", "DEFAULT_SAMPLER", "node_kernels",
           "to_array_record", "from_array_record", "message_bytes", "flwr_app"]

THETA, BETA, CONFIG, INFO = "theta", "beta", "config", "info"
#: the velocity of an FA-HMC run: the server's v in a train message, the client's v_c in its reply
MOMENTUM = "momentum"
#: the sampler families a Flower run may run (``FlowerRun(sampler=...)``)
SAMPLERS = ("fald", "fahmc")
#: the family of a message without a ``"sampler"`` key (FA-LD's messages carry none)
DEFAULT_SAMPLER = "fald"


def node_kernels(kernels=None) -> dict:
    """The sampler families a run may name, {name: :class:`~fedlangevin.federation.nodes.NodeKernel`}:
    ``kernels`` (node kernels, e.g. ``[fl.FALD.node, my_family]``, or such a mapping) or by default the
    package's (``fl.FALD.node``, ``fl.FAHMC.node``), resolved through the top-level package: the
    transport carries whatever kernel it is given and imports no sampler package."""
    if kernels is None:
        import fedlangevin

        kernels = (fedlangevin.FALD.node, fedlangevin.FAHMC.node)
    values = list(kernels.values()) if isinstance(kernels, dict) else list(kernels)
    for k in values:
        if not (isinstance(getattr(k, "name", None), str) and callable(getattr(k, "client_round", None))):
            raise ValueError(f"kernels must hold node kernels (fedlangevin.federation.nodes.NodeKernel: a name and "
                             f"a client_round); got {type(k).__name__}")
    return {k.name: k for k in values}
#: noise precisions a train message may name (the client maps the name to the torch dtype)
NOISE_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def flwr_app():
    """``flwr.app``, or an ImportError that says how to install it."""
    try:
        import flwr.app as app
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("fedlangevin.flower needs Flower: pip install 'fedlangevin[flower]'") from exc
    return app


def to_array_record(name: str, tensor: torch.Tensor):
    """A (R, d) tensor as an ``ArrayRecord`` holding one float64 numpy array."""
    app = flwr_app()
    array = tensor.detach().to(device="cpu", dtype=torch.float64).contiguous().numpy()
    return app.ArrayRecord({name: app.Array(array)})


def from_array_record(record, name: str, where: str) -> torch.Tensor:
    """The array ``name`` of an ``ArrayRecord`` as a float64 tensor (ValueError naming ``where``)."""
    try:
        array = record[name].numpy()
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"{where}: the message holds no array {name!r}") from exc
    return torch.from_numpy(np.array(array, dtype=np.float64, copy=True))


def message_bytes(content) -> int:
    """Serialised size in bytes of a message's content (a ``RecordDict``) as Flower sends it."""
    from flwr.common.serde import recorddict_to_proto

    return int(recorddict_to_proto(content).ByteSize())
