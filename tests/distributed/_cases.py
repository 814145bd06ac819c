"""What the spawned ranks of tests/distributed run (module-level: spawned processes import it).

Every launch runs several cases in the same processes (starting W processes costs seconds;
the cases cost milliseconds). Problems are tiny and built identically in every rank.
"""

from __future__ import annotations

import os

import torch
import torch.distributed

import fedlangevin as fl
from fedlangevin.distributed import ProcessGroup, RankFailure

ROUNDS = 12
CHAINS = 3
STEP = 0.05


def logistic_problem(num_clients: int = 6) -> fl.problems.LogisticRegression:
    """A tiny 3-class logistic regression, 8 points per client (balanced: scheme II applies)."""
    g = torch.Generator().manual_seed(3)
    clients = []
    for _ in range(num_clients):
        x = torch.randn(8, 2, generator=g, dtype=torch.float64)
        y = torch.randint(0, 3, (8,), generator=g)
        clients.append((x, y))
    return fl.problems.LogisticRegression(clients, num_classes=3)


def gaussian_problem(num_clients: int = 6) -> fl.problems.GaussianSimulation:
    return fl.problems.GaussianSimulation(num_clients=num_clients, alpha=1.0, seed=0)


#: name -> (problem factory, FALD keyword arguments); the single-process reference runs the same
CASES = {
    "full_rho0": (gaussian_problem, dict(local_steps=3, correlation=0.0)),
    "full_rho07": (gaussian_problem, dict(local_steps=3, correlation=0.7)),
    "schemeI_rho07": (gaussian_problem, dict(local_steps=2, correlation=0.7, participation=fl.SchemeI(3))),
    "schemeII_rho0": (gaussian_problem, dict(local_steps=2, correlation=0.0, participation=fl.SchemeII(3))),
    "minibatch_schemeII_rho07": (logistic_problem, dict(local_steps=2, correlation=0.7, batch_size=3,
                                                        participation=fl.SchemeII(4))),
    "minibatch_gaussian": (gaussian_problem, dict(local_steps=2, batch_size=4)),
}


def sampler(name: str, transport=None, **extra) -> fl.FALD:
    factory, kwargs = CASES[name]
    return fl.FALD(factory(), step_size=STEP, chains=CHAINS, seed=11, transport=transport, **{**kwargs, **extra})


def equality_cases(rank: int, world_size: int) -> dict:
    """Every case at W ranks: rank 0's draws, and every rank's final global parameters."""
    out = {}
    for name in CASES:
        pg = ProcessGroup(timeout=60, heartbeat=0.3)
        s = sampler(name, pg)
        trace = s.run(ROUNDS)
        out[name] = {"theta": s.state.theta.clone(), "clients": list(pg.clients),
                     "samples": torch.as_tensor(trace.samples).clone() if rank == 0 else tuple(trace.samples.shape)}
        pg.close()
    return out


def resume_case(rank: int, world_size: int, path: str) -> dict:
    """10 rounds with a checkpoint (written by rank 0 only), then every rank resumes it and runs 10 more."""
    pg = ProcessGroup(timeout=60, heartbeat=0.3)
    first = sampler("full_rho07", pg).run(10, checkpoint=path if rank == 0 else path + f".rank{rank}")
    torch.distributed.barrier()  # rank 0 has written the checkpoint the others read
    resumed = fl.FALD.resume(path, transport=pg)
    second = resumed.run(10)
    pg.close()
    return {"written": os.path.exists(path + f".rank{rank}"),
            "samples": None if rank != 0 else torch.cat([torch.as_tensor(first.samples),
                                                          torch.as_tensor(second.samples)], dim=1),
            "theta": resumed.state.theta.clone()}


def killed_case(rank: int, world_size: int, path: str, victim: int, die_at: int) -> str:
    """30 rounds, checkpoint every 5 rounds; rank ``victim`` dies (os._exit) in round ``die_at``.
    The others return the error they raised."""
    pg = ProcessGroup(timeout=60, heartbeat=0.3)
    if rank == victim:
        reduce, calls = pg.reduce, [0]

        def dies(partial):
            calls[0] += 1
            if calls[0] == die_at:
                os._exit(17)  # killed: no exception, no cleanup, the connection just drops
            return reduce(partial)

        pg.reduce = dies
    s = sampler("full_rho07", pg)
    try:
        s.run(30, checkpoint=path, checkpoint_every=5)
    except RankFailure as exc:
        return f"RankFailure ranks={list(exc.ranks)}: {exc}"
    return "finished"


def w3_launch(rank: int, world_size: int, path: str) -> dict:
    return {"equal": equality_cases(rank, world_size),
            "killed": killed_case(rank, world_size, path, victim=2, die_at=12)}


def w2_launch(rank: int, world_size: int, path: str) -> dict:
    return {"equal": equality_cases(rank, world_size), "resume": resume_case(rank, world_size, path),
            "inexact": inexact_case(rank, world_size)}


INEXACT_CHAINS = 4000
INEXACT_ROUNDS = 8


def quadratic_problem() -> fl.problems.QuadraticProblem:
    """Four clients with affine gradients (exact moments: fedlangevin.experiments.exact)."""
    hess = torch.tensor([[[2.0, 0.3], [0.3, 1.0]], [[1.0, 0.0], [0.0, 3.0]],
                         [[1.5, -0.4], [-0.4, 1.2]], [[0.8, 0.1], [0.1, 0.9]]], dtype=torch.float64)
    shifts = torch.tensor([[1.0, -1.0], [0.5, 2.0], [-1.0, 0.0], [2.0, 1.0]], dtype=torch.float64)
    return fl.problems.QuadraticProblem(hess, shifts, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))


def inexact_case(rank: int, world_size: int) -> dict:
    """exact=False: per-rank private streams; rank 0 returns the final draws of many chains."""
    pg = ProcessGroup(exact=False, timeout=60, heartbeat=0.3)
    out = {}
    for name, kwargs in {"full_rho07": dict(correlation=0.7),
                         "schemeI_rho0": dict(correlation=0.0, participation=fl.SchemeI(2))}.items():
        s = fl.FALD(quadratic_problem(), step_size=0.1, local_steps=3, chains=INEXACT_CHAINS, seed=5,
                    transport=pg, **kwargs)
        trace = s.run(INEXACT_ROUNDS, keep_samples=False)
        out[name] = s.state.theta.clone() if rank == 0 else None
        del trace
    pg.close()
    return out


def nccl_case(rank: int, world_size: int) -> dict:
    """Two cases on GPU rank (NCCL); rank 0 returns its draws (on the CPU)."""
    device = f"cuda:{torch.cuda.current_device()}"
    out = {}
    for name in ("full_rho07", "minibatch_schemeII_rho07"):
        pg = ProcessGroup(timeout=60, heartbeat=0.3)
        trace = sampler(name, pg, device=device).run(ROUNDS)
        out[name] = torch.as_tensor(trace.samples).cpu() if rank == 0 else None
        pg.close()
    return out
