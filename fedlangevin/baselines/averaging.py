"""Federated averaging (McMahan et al. 2017) of SGD on the MAP objective, and deep ensembles of it.

A point-estimate yardstick for the samplers: the same problem, clients and minibatches, no noise.
Per round, the server broadcasts theta; every client runs ``local_steps`` SGD steps on its own
energy f^c (the one FA-LD uses: (1/p_c) NLL_c + U_0) from there,

    theta_c <- theta_c - (lr / n) * grad f~^c(theta_c),

with grad f~^c the problem's unbiased minibatch estimate (``batch_size`` rows per client) and n
the number of training records, so ``lr`` is the learning rate of the mean per-record loss
(plus the prior's weight decay 1 / (n sigma^2)); the server then averages
theta = sum_c p_c theta_c. Its fixed point for one local step is the MAP, argmin f.

A deep ensemble (Lakshminarayanan et al. 2017) is ``members`` such runs from independent
starts, run side by side as the problem's chain axis (one ``grad`` call per local step for all
members); its predictive is the average of the members' class probabilities.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from fedlangevin._validation import check_int, check_real

__all__ = ["fedavg"]


def fedavg(problem: Any, rounds: int, *, lr: float, local_steps: int = 1, batch_size: int | None = None,
           init: Any = None, members: int = 1, seed: int = 0, dtype: torch.dtype = torch.float64,
           callback: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
    """Federated averaging of SGD on ``problem``'s energy; returns the final models (members, d).

    ``init``: (d,) or (members, d) starting points (default zeros); ``members`` > 1 runs a
    deep ensemble (give distinct starts, e.g. ``NetworkProblem.init_draws``). ``batch_size``:
    rows per client and step (None: full batch). ``callback(round, theta (members, d))`` is
    called after every round (1-based), e.g. to score the models against rounds.
    """
    rounds = check_int("rounds", rounds, 1)
    lr = check_real("lr", lr, low=0.0, low_open=True)
    local_steps = check_int("local_steps", local_steps, 1)
    members = check_int("members", members, 1)
    batch_size = problem.check_batch_size(batch_size)
    n, d = problem.num_clients, problem.dim
    if init is None:
        start = torch.zeros(members, d, dtype=dtype)
    else:
        start = torch.as_tensor(init).detach().to(dtype).clone()
        if start.dim() == 1:
            start = start.expand(members, d).clone()
        if start.shape != (members, d) or not bool(torch.isfinite(start).all()):
            raise ValueError(f"init must be a finite (d,) or (members, d) = ({members}, {d}) array; got shape "
                             f"{tuple(start.shape)}")
    work = problem.to(dtype=dtype)
    weights = problem.weights.to(dtype)
    records = float(problem.client_sizes.sum()) if problem.client_sizes is not None else 1.0
    rate = lr / records
    gen = torch.Generator().manual_seed(check_int("seed", seed, 0))
    theta = start
    for r in range(1, rounds + 1):
        local = theta[:, None, :].expand(members, n, d).contiguous()
        for _ in range(local_steps):
            local.sub_(work.grad(local, batch_size=batch_size, generator=gen), alpha=rate)
        theta = torch.einsum("n,mnd->md", weights, local)
        if not bool(torch.isfinite(theta).all()):
            raise ValueError(f"fedavg diverged in round {r} (non-finite parameters): lower lr (now {lr:g})")
        if callback is not None:
            callback(r, theta)
    return theta
