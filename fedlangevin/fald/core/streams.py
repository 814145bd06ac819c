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

:func:`build_per_client` is :func:`fedlangevin.fald.core.engine.build`'s kernel with this layout
(``FALD(..., streams="per_client")`` runs it): every client runs
:func:`fedlangevin.fald.core.engine.client_round` from its own generators, the server averages with
the participation weights. A Flower run with the same seed gives the same samples.

Privacy note: FA-LD's differential privacy (Deng et al., Sec. 6) rests on the private noise
being unknown to the server. In-process, every private stream derives from the run's seed;
in a deployment each client should seed its private stream from its own secret, and the
in-process run is then a reproduction of the deployment only for whoever knows those seeds.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from fedlangevin.fald.core.engine import Kernel, RoundInfo, check_gradient, client_round, initial_theta
from fedlangevin.fald.core.kernel import FALDState, aggregate
from fedlangevin.fald.core.participation import Participation, as_participation
from fedlangevin.problems.base import FederatedProblem, check_weights

__all__ = ["SHARED", "PRIVATE", "PARTICIPATION", "stream_seed", "shared_stream", "private_stream",
           "participation_stream", "build_per_client"]

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


def build_per_client(
    problem: FederatedProblem,
    temperature: float = 1.0,
    correlation: float = 0.0,
    participation: Participation | str | None = None,
    batch_size: int | None = None,
    *,
    seed: int,
    private_seeds: Sequence[int] | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    noise_dtype: torch.dtype | None = torch.float32,
) -> Kernel:
    """The FA-LD round kernel with per-client streams (see the module docstring).

    ``step(state, step_sizes, generator, on_step=None)`` ignores ``generator``: round t =
    ``state.round`` draws from the streams of (seed, t) and (private_seeds[c], c, t)
    (``private_seeds`` default: ``seed`` for every client). Client c runs
    :func:`~fedlangevin.fald.core.engine.client_round` on ``problem.clients([c])``; clients that
    no chain samples in a round are skipped (their streams are their own, so skipping them
    changes nothing else); the server average is
    :func:`~fedlangevin.fald.core.kernel.aggregate` over (R, N, d) with zeros for them. Slower
    than :func:`~fedlangevin.fald.core.engine.build` (a Python loop over clients): it exists to
    reproduce federated deployments.
    """
    if not isinstance(problem, FederatedProblem):
        raise ValueError(f"problem must be a fedlangevin FederatedProblem; got {type(problem).__name__}")
    rule = as_participation(participation)
    weights = check_weights(problem.weights, problem.num_clients)
    n = problem.num_clients
    seeds = [int(seed)] * n if private_seeds is None else [int(s) for s in private_seeds]
    if len(seeds) != n:
        raise ValueError(f"private_seeds must have one seed per client ({n}); got {len(seeds)}")
    device = torch.device(device)
    work = problem.to(device=device, dtype=dtype)
    check_gradient(work, dtype, device, batch_size, problem)
    singles = [work.clients([c]) for c in range(n)]
    p = weights.to(device=device, dtype=dtype)
    p_c = [float(x) for x in weights.tolist()]
    q_c = [float(x) for x in rule.noise_weights(weights).tolist()]  # the private noise's weights (p_c: eq. 10)

    def init(theta0: torch.Tensor) -> FALDState:
        return FALDState(theta=initial_theta(theta0, problem.dim, dtype, device))

    def step(state: FALDState, step_sizes: Sequence[float], generator=None, on_step=None):
        theta, t = state.theta, int(state.round)
        r, d = theta.shape
        w = rule.weights(p, r, participation_stream(seed, t, device))
        taking_part = (w != 0) if w.dim() == 1 else (w != 0).any(dim=0)
        beta = torch.zeros(r, n, d, dtype=dtype, device=device)
        if on_step is None:
            for c in taking_part.nonzero().flatten().tolist():
                beta[:, c] = client_round(
                    singles[c], theta, step_sizes, weight=p_c[c], noise_weight=q_c[c], temperature=temperature, correlation=correlation,
                    shared_generator=shared_stream(seed, t, device),
                    private_generator=private_stream(seeds[c], c, t, device), batch_size=batch_size,
                    noise_dtype=noise_dtype)
        else:  # step by step (divergence replay): the same draws, each client's stream in its own order
            clients = taking_part.nonzero().flatten().tolist()
            gens = {c: (shared_stream(seed, t, device), private_stream(seeds[c], c, t, device)) for c in clients}
            for c in clients:
                beta[:, c] = theta
            for i, eta in enumerate(step_sizes):
                for c in clients:
                    beta[:, c] = client_round(
                        singles[c], beta[:, c], [eta], weight=p_c[c], noise_weight=q_c[c], temperature=temperature,
                        correlation=correlation, shared_generator=gens[c][0], private_generator=gens[c][1],
                        batch_size=batch_size, noise_dtype=noise_dtype)
                on_step(i, beta)
        new_theta = aggregate(beta, theta, w, None)
        new = FALDState(theta=new_theta, step=state.step + len(step_sizes), round=t + 1, correction=state.correction)
        return new, RoundInfo(weights=w)

    return Kernel(init, step)
