"""FA-LD with the clients split over W = 2 processes (gloo, CPU) against one process, in one run.

Problem: multinomial logistic regression on MNIST-5k (bundled, 4,000 training images), an
iid split over N = 100 clients, d = 10 x 785 = 7,850, R = 16 chains, K local steps of full
gradients, float64 state (the communication per round is R x d x 8 bytes = 1.0 MB).

One launch of 2 processes measures, alternately and ``--repeats`` times (best of each):
- ``single``: rank 0 alone runs the plain sampler (no transport) with 1 and with 2 torch
  threads while rank 1 waits at a barrier (the baseline a user would run on this machine);
- ``W=2 exact``: both ranks, ProcessGroup(exact=True) (every rank draws all N clients' noise);
- ``W=2 inexact``: both ranks, ProcessGroup(exact=False) (each rank draws its clients' noise);
- the all-reduce alone on an (R, d) tensor (the communication's share of a round).
Each rank uses 1 torch thread in the W = 2 runs. Printed per variant: wall seconds per
round on rank 0 and CPU seconds per round of each rank (``time.process_time``); "x" columns
are the single-process 1-thread time over the variant's (for CPU: over its slower rank's).
On a loaded machine the wall times measure the share of the cores the run got; the CPU
times measure the work each rank does, i.e. the speed-up on free cores. Also: the parts of
a round (gradient and normals of N and N/2 clients), the per-round payload, and each
rank's peak resident memory (``ru_maxrss``, including ~0.3 GB of Python + torch runtime)
after the W = 2 runs, before rank 0's single-process runs.

    python benchmarks/bench_distributed.py [--rounds 2] [--repeats 3] [--local-steps 1]
                                           [--chains 16] [--clients 100]

The machine may be shared: the variants alternate in one run, best of ``--repeats``.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
import torch.distributed as dist

import fedlangevin as fl
from fedlangevin.data import apply_partition, iid_partition, load_mnist5k
from fedlangevin.distributed import ProcessGroup, launch


def _problem(clients: int) -> fl.problems.LogisticRegression:
    data = load_mnist5k()
    parts = iid_partition(len(data.y_train), clients, generator=0)
    return fl.problems.LogisticRegression(apply_partition(data.X_train, data.y_train, parts), num_classes=10)


def _timed(sampler: fl.FALD, rounds: int) -> tuple[float, float]:
    """(wall, CPU) seconds per round of this process (CPU: all its threads)."""
    sampler.run(1, keep_samples=False)  # warm-up: buffers, first-touch of memory
    t0, c0 = time.perf_counter(), time.process_time()
    sampler.run(rounds, keep_samples=False)
    return (time.perf_counter() - t0) / rounds, (time.process_time() - c0) / rounds


def _components(problem, chains: int, repeats: int = 3) -> dict[str, float]:
    """One thread: the gradient of all N / of N/2 clients, and the (R, n, d) float32 normals."""
    n, d = problem.num_clients, problem.dim
    half = problem.clients(list(range(n // 2)))
    theta = torch.zeros(chains, n, d, dtype=torch.float64)
    buf = torch.empty(chains, n, d, dtype=torch.float32)
    buf_half = torch.empty(chains, n // 2, d, dtype=torch.float32)
    jobs = {"gradient, N clients": lambda: problem.grad(theta),
            "gradient, N/2 clients": lambda: half.grad(theta[:, : n // 2]),
            "normals, N clients": lambda: torch.randn(buf.shape, out=buf),
            "normals, N/2 clients": lambda: torch.randn(buf_half.shape, out=buf_half)}
    out = {}
    for name, job in jobs.items():
        job()
        times = []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            job()
            times.append((time.perf_counter() - t0, time.process_time() - c0))
        out[name] = (min(t[0] for t in times), min(t[1] for t in times))
    return out


def _worker(rank: int, world_size: int, args: dict) -> dict:
    problem = _problem(args["clients"])
    kw = dict(step_size=1e-5, local_steps=args["local_steps"], chains=args["chains"], seed=0)
    rounds = args["rounds"]
    best: dict[str, list[float]] = {}

    def keep(name, seconds):  # best wall and best CPU time, separately
        old = best.get(name, [float("inf"), float("inf")])
        best[name] = [min(old[0], seconds[0]), min(old[1], seconds[1])]

    exact_pg, inexact_pg = ProcessGroup(exact=True, timeout=600), ProcessGroup(exact=False, timeout=600)
    payload = torch.zeros(args["chains"], problem.dim, dtype=torch.float64)
    peak_w2 = None
    for _ in range(args["repeats"]):
        dist.barrier()
        keep("W=2 exact", _timed(fl.FALD(problem, transport=exact_pg, **kw), rounds))
        dist.barrier()
        keep("W=2 inexact", _timed(fl.FALD(problem, transport=inexact_pg, **kw), rounds))
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(rounds):
            exact_pg.reduce(payload.clone())
        keep("all-reduce alone", ((time.perf_counter() - t0) / rounds, (time.process_time() - c0) / rounds))
        if peak_w2 is None:  # before rank 0's first single-process run
            peak_w2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        dist.barrier()
        if rank == 0:
            for threads in (1, 2):
                torch.set_num_threads(threads)
                keep(f"single, {threads} thread{'s' * (threads > 1)}", _timed(fl.FALD(problem, **kw), rounds))
            torch.set_num_threads(1)
            for name, sec in _components(problem, args["chains"]).items():
                keep(f"  {name}", sec)
    exact_pg.close()
    inexact_pg.close()
    return {"best": best, "peak_w2_mib": peak_w2, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "clients": exact_pg.clients, "dim": problem.dim}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--local-steps", type=int, default=1)
    ap.add_argument("--chains", type=int, default=16)
    ap.add_argument("--clients", type=int, default=100)
    a = ap.parse_args(argv)
    args = {"rounds": a.rounds, "repeats": a.repeats, "local_steps": a.local_steps, "chains": a.chains,
            "clients": a.clients}
    t0 = time.time()
    results = launch(_worker, 2, (args,), timeout=600, limit=3600)
    best, dim = results[0]["best"], results[0]["dim"]
    other = results[1]["best"]
    base = best["single, 1 thread"]
    order = ["single, 1 thread", "single, 2 threads", "W=2 exact", "W=2 inexact", "all-reduce alone"]
    best = {name: best[name] for name in order + [k for k in best if k not in order]}
    print(f"logistic regression, MNIST-5k, N = {a.clients}, d = {dim}, R = {a.chains}, K = {a.local_steps}, "
          f"float64; {a.rounds} rounds per timing, best of {a.repeats} (alternating)")
    print("wall: seconds per round (rank 0); CPU: CPU seconds per round of rank 0 / rank 1; x: single 1 thread / this")
    print(f"{'variant':<24} {'wall s':>8} {'rounds/s':>9} {'x wall':>7} {'CPU s r0':>9} {'CPU s r1':>9} {'x CPU':>7}")
    for name, (wall, cpu) in best.items():
        cpu1 = other.get(name, [float("nan")] * 2)[1]
        worst = cpu if cpu1 != cpu1 else max(cpu, cpu1)  # a W = 2 round ends when its slower rank has
        print(f"{name:<24} {wall:8.4f} {1 / wall:9.2f} {base[0] / wall:6.2f}x {cpu:9.4f} {cpu1:9.4f} "
              f"{base[1] / worst:6.2f}x")
    payload = a.chains * dim * 8
    print(f"per-round payload: R x d x 8 B = {payload / 1e6:.2f} MB per rank into the all-reduce "
          f"(a ring all-reduce sends and receives 2 (W - 1) / W of it per rank: {payload / 1e6:.2f} MB at W = 2)")
    for r, res in enumerate(results):
        print(f"rank {r}: clients {res['clients'][0]}..{res['clients'][-1]}, peak resident memory after the W = 2 "
              f"runs {res['peak_w2_mib']:.0f} MiB (whole process)")
    print(f"rank 0 after the single-process runs: {results[0]['peak_mib']:.0f} MiB")
    state = a.chains * a.clients * dim * 8
    print(f"client states R x N x d x 8 B: {state / 2**20:.0f} MiB in one process, {state / 2 / 2**20:.0f} MiB per "
          f"rank at W = 2 (plus the same again for the noise buffers)")
    print(f"wall time {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
