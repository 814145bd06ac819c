"""Per-client random streams: the randomness layout of a run whose clients are separate processes.

The default engine draws everything from one ``torch.Generator`` in a fixed order (minibatches,
shared noise, the private noise of all N clients, participation). Clients that run on other
machines (e.g. Flower nodes, :mod:`fedlangevin.flower`) cannot share one generator, so a
federated deployment needs a layout in which every draw comes from a stream that a process
can open alone:

- shared noise xi_shared_k of round t (eq. 10, the rho part): a stream of (seed, t), the
  *round seed* the server broadcasts; every client opens it and draws the same normals;
- private noise xi^c_k and minibatches of client c in round t: a stream of
  (private_seed_c, c, t), opened by client c only (``private_seed_c`` is the client's own
  secret in a deployment; see the privacy note below);
- participation draw of round t (schemes I and II): a stream of (seed, t), on the server.

:func:`fedlangevin.fald.per_client.build_per_client` is FA-LD's kernel with this layout
(``FALD(..., streams="per_client")`` runs it): every client runs
:func:`fedlangevin.fald.engine.client_round` from its own generators, the server averages with
the participation weights. A Flower run with the same seed gives the same samples.

Privacy note: FA-LD's differential privacy (Deng et al., Sec. 6) rests on the private noise
being unknown to the server. In-process, every private stream derives from the run's seed;
in a deployment each client should seed its private stream from its own secret, and the
in-process run is then a reproduction of the deployment only for whoever knows those seeds.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["SHARED", "PRIVATE", "PARTICIPATION", "stream_seed", "shared_stream", "private_stream",
           "participation_stream"]

#: stream tags (part of every derived seed, so that the streams of a run never coincide)
SHARED, PRIVATE, PARTICIPATION = 1, 2, 3


def stream_seed(seed: int, tag: int, round: int, client: int = 0) -> int:
    """A 63-bit seed for the stream (seed, tag, round, client), via numpy's SeedSequence
    (well-mixed: neighbouring rounds and clients give unrelated streams)."""
    words = np.random.SeedSequence([int(seed) % 2**64, int(tag), int(round), int(client)]).generate_state(2, np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])


def _generator(seed: int, device) -> torch.Generator:
    return torch.Generator(device=torch.device(device)).manual_seed(seed)


def shared_stream(seed: int, round: int, device="cpu") -> torch.Generator:
    """The shared-noise stream of ``round`` (every client opens the same one)."""
    return _generator(stream_seed(seed, SHARED, round), device)


def private_stream(private_seed: int, client: int, round: int, device="cpu") -> torch.Generator:
    """Client ``client``'s private-noise and minibatch stream of ``round``."""
    return _generator(stream_seed(private_seed, PRIVATE, round, client), device)


def participation_stream(seed: int, round: int, device="cpu") -> torch.Generator:
    """The server's participation draw of ``round``."""
    return _generator(stream_seed(seed, PARTICIPATION, round), device)
