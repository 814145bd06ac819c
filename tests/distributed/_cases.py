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
            "inexact": inexact_case(rank, world_size), "hmc": hmc_equality_cases(rank, world_size),
            "hmc_resume": hmc_resume_case(rank, world_size, path + ".hmc"),
            "hmc_inexact": hmc_inexact_case(rank, world_size)}


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


# -- FA-HMC (fedlangevin.fahmc) over the same transport -------------------------------------------
HMC_STEP = 0.03  # h: the Gaussian posterior's precision reaches ~700, stable for h < 2 / sqrt(700) = 0.076
HMC_AUTO_ROUNDS = 40  # step_size="auto": a warm-up of 20 rounds, both of its phases (overdamped, underdamped)

#: name -> (problem factory, FAHMC keyword arguments): K in {1, 3}, rho in {0, 0.7}, full and partial
#: participation, minibatches, a preconditioner, both splittings, and the adaptive warm-up
HMC_CASES = {
    "hmc_k1_rho0": (gaussian_problem, dict(local_steps=1, correlation=0.0)),
    # correction=None: "auto" runs control variates in one process only, and the ranks are compared with it
    "hmc_k1_rho07_minibatch": (logistic_problem, dict(step_size=0.3, local_steps=1, correlation=0.7, batch_size=3,
                                                      correction=None)),
    "hmc_k3_rho0_obabo": (gaussian_problem, dict(local_steps=3, correlation=0.0, splitting="OBABO")),
    "hmc_k3_rho07_preconditioned": (gaussian_problem, dict(local_steps=3, correlation=0.7,
                                                           preconditioner=torch.tensor([0.5, 1.5]).double())),
    "hmc_k3_rho07_schemeI": (gaussian_problem, dict(local_steps=3, correlation=0.7, participation=fl.SchemeI(3))),
    "hmc_auto": (gaussian_problem, dict(step_size="auto")),
}


def hmc_sampler(name: str, transport=None, **extra) -> fl.FAHMC:
    factory, kwargs = HMC_CASES[name]
    return fl.FAHMC(factory(), **{"step_size": HMC_STEP, "chains": CHAINS, "seed": 11, "transport": transport,
                                  **kwargs, **extra})


def hmc_rounds(name: str) -> int:
    return HMC_AUTO_ROUNDS if name == "hmc_auto" else ROUNDS


def hmc_equality_cases(rank: int, world_size: int) -> dict:
    """Every FA-HMC case at W ranks: rank 0's draws, every rank's final (theta, v), the step and friction."""
    out = {}
    for name in HMC_CASES:
        pg = ProcessGroup(timeout=60, heartbeat=0.3)
        s = hmc_sampler(name, pg)
        trace = s.run(hmc_rounds(name))
        out[name] = {"theta": s.state.theta.clone(), "momentum": s.state.momentum.clone(),
                     "clients": list(pg.clients), "adapted": (float(s.schedule(s.state.step)), s.friction),
                     "samples": torch.as_tensor(trace.samples).clone() if rank == 0 else tuple(trace.samples.shape)}
        pg.close()
    return out


class Stop(Exception):
    """Raised by every rank in the same round: a run interrupted in all processes at once."""


def hmc_resume_case(rank: int, world_size: int, path: str) -> dict:
    """FA-HMC, W = 2 throughout: (a) 10 rounds with a checkpoint (rank 0 writes it), every rank resumes it
    and runs 10 more; (b) a 20-round run checkpointed every 5 rounds that every rank stops in round 13,
    resumed by every rank from the round-10 checkpoint and finished (the unfinished run continues)."""
    name = "hmc_k3_rho07_preconditioned"
    pg = ProcessGroup(timeout=60, heartbeat=0.3)
    first = hmc_sampler(name, pg).run(10, checkpoint=path if rank == 0 else path + f".rank{rank}")
    torch.distributed.barrier()  # rank 0 has written the checkpoint the others read
    resumed = fl.FAHMC.resume(path, transport=pg)
    second = resumed.run(10)
    out = {"written": os.path.exists(path + f".rank{rank}"), "theta": resumed.state.theta.clone(),
           "samples": None if rank != 0 else torch.cat([torch.as_tensor(first.samples),
                                                         torch.as_tensor(second.samples)], dim=1)}
    stopped = path + ".stopped"
    s = hmc_sampler(name, pg)
    reduce, calls = pg.reduce, [0]

    def stops(partial):
        calls[0] += 1
        if calls[0] == 13:
            raise Stop
        return reduce(partial)

    pg.reduce = stops
    try:
        s.run(20, checkpoint=stopped if rank == 0 else stopped + f".rank{rank}", checkpoint_every=5)
    except Stop:
        pass
    pg.reduce = reduce
    torch.distributed.barrier()
    again = fl.FAHMC.resume(stopped, transport=pg)
    out["unfinished_done"] = again.unfinished["done"]
    trace = again.run()
    out["finished"] = torch.as_tensor(trace.samples).clone() if rank == 0 else tuple(trace.samples.shape)
    out["finished_theta"] = again.state.theta.clone()
    out["stopped_written"] = os.path.exists(stopped + f".rank{rank}")
    pg.close()
    return out


HMC_INEXACT_STEP = 0.3


def hmc_inexact_case(rank: int, world_size: int) -> dict:
    """FA-HMC with exact=False: per-rank private streams; rank 0 returns the final (theta, v) of many chains."""
    pg = ProcessGroup(exact=False, timeout=60, heartbeat=0.3)
    out = {}
    for name, kwargs in {"full_rho07": dict(correlation=0.7),
                         "schemeI_rho0": dict(correlation=0.0, participation=fl.SchemeI(2))}.items():
        s = fl.FAHMC(quadratic_problem(), step_size=HMC_INEXACT_STEP, friction=1.0, local_steps=3,
                     chains=INEXACT_CHAINS, seed=5, transport=pg, **kwargs)
        s.run(INEXACT_ROUNDS, keep_samples=False)
        out[name] = torch.cat([s.state.theta, s.state.momentum], dim=1) if rank == 0 else None
    pg.close()
    return out
