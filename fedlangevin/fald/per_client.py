"""FA-LD's round kernel with per-client random streams (:mod:`fedlangevin.federation.streams`): every
client runs :func:`fedlangevin.fald.engine.client_round` from its own generators, the server averages
with the participation weights; what ``FALD(..., streams="per_client")`` runs, and what a Flower run
with the same seed reproduces.
"""

from __future__ import annotations

from typing import Sequence

import torch

from fedlangevin.fald.engine import Kernel, client_round
from fedlangevin.fald.kernel import FALDState
from fedlangevin.federation.participation import Participation, as_participation
from fedlangevin.federation.rounds import RoundInfo, aggregate, check_gradient, initial_theta
from fedlangevin.federation.streams import participation_stream, private_stream, shared_stream
from fedlangevin.problems.base import FederatedProblem, check_weights

__all__ = ["build_per_client"]


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
    """The FA-LD round kernel with per-client streams (see :mod:`fedlangevin.federation.streams`).

    ``step(state, step_sizes, generator, on_step=None)`` ignores ``generator``: round t =
    ``state.round`` draws from the streams of (seed, t) and (private_seeds[c], c, t)
    (``private_seeds`` default: ``seed`` for every client). Client c runs
    :func:`~fedlangevin.fald.engine.client_round` on ``problem.clients([c])``; clients that
    no chain samples in a round are skipped (their streams are their own, so skipping them
    changes nothing else); the server average is
    :func:`~fedlangevin.federation.rounds.aggregate` over (R, N, d) with zeros for them. Slower
    than :func:`~fedlangevin.fald.engine.build` (a Python loop over clients): it exists to
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
