"""Per-round time and bytes of FA-LD on Flower against the in-process engine, for one problem.

The problem is the template app's (examples/flower_app: Bayesian linear regression in Pyro,
d = 3, one synthetic partition of 40 rows per node), N = 2 nodes, R chains, K local steps:

- in-process ``FALD`` (one generator), and ``FALD(streams="per_client")`` (the layout that
  Flower runs reproduce);
- Flower's simulation engine (``run_simulation``, Ray workers in this machine);
- a localhost deployment (a SuperLink and N SuperNodes on 127.0.0.1, ``flwr run``).

Flower times are the server's wall time per round (``trace.seconds_per_round``: from the
participation draw to the averaged iterate, after the nodes have registered); bytes per
round are the serialised message contents Flower carried, both directions. All rows are
measured in one run of this script; compare them as ratios.

    python benchmarks/bench_flower.py [--rounds 20] [--deploy-rounds 3] [--chains 4] [--local-steps 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

APP = Path(__file__).resolve().parents[1] / "examples" / "flower_app"
sys.path.insert(0, str(APP))

from fald_app.client import app as client_app  # noqa: E402
from fald_app.model import load_partition, model  # noqa: E402

import fedlangevin as fl  # noqa: E402
from fedlangevin.flower import FlowerRun, load_trace, server_app  # noqa: E402
from fedlangevin.flower.localhost import LocalDeployment  # noqa: E402

ETA, SEED, N = 1e-3, 0, 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--deploy-rounds", type=int, default=3)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--local-steps", type=int, default=5)
    args = parser.parse_args()
    r, k = args.chains, args.local_steps
    problem = fl.problems.PyroProblem(model, [load_partition({"partition-id": c}) for c in range(N)])
    rows = []
    for streams in ("single", "per_client"):
        sampler = fl.FALD(problem, step_size=ETA, local_steps=k, chains=r, seed=SEED, streams=streams)
        sampler.run(2)  # warm the vmapped gradient
        t0 = time.perf_counter()
        sampler.run(args.rounds)
        rows.append((f"in-process FALD (streams={streams})", (time.perf_counter() - t0) / args.rounds, None))

    from flwr.simulation import run_simulation

    out = {}
    run = FlowerRun(rounds=args.rounds, step_size=ETA, num_nodes=N, local_steps=k, chains=r, seed=SEED)
    run_simulation(server_app=server_app(run, on_trace=lambda t: out.setdefault("t", t)), client_app=client_app,
                   num_supernodes=N, backend_config={"client_resources": {"num_cpus": 1}})
    comm = out["t"].communication
    rows.append(("Flower simulation (run_simulation)", out["t"].seconds_per_round,
                 (comm.bytes_up + comm.bytes_down) / comm.rounds))

    with tempfile.TemporaryDirectory() as tmp, LocalDeployment([{"partition-id": c} for c in range(N)]) as dep:
        path = str(Path(tmp) / "trace.pt")
        result = dep.run_app(APP, {"rounds": args.deploy_rounds, "warmup": 0, "local-steps": k, "chains": r,
                                   "seed": SEED, "step-size": ETA, "output": path}, timeout=1800)
        if result.returncode != 0:
            raise SystemExit(result.stdout[-3000:])
        trace = load_trace(path, ETA)
    comm = trace.communication
    rows.append(("Flower localhost deployment (flwr run)", trace.seconds_per_round,
                 (comm.bytes_up + comm.bytes_down) / comm.rounds))

    base = rows[0][1]
    print(f"Pyro linear regression, d = 3, N = {N}, R = {r}, K = {k}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'engine':42s} {'ms/round':>10s} {'x in-process':>13s} {'bytes/round':>12s}")
    for name, sec, nbytes in rows:
        shown = "-" if nbytes is None else f"{nbytes:.0f}"
        print(f"{name:42s} {sec * 1e3:10.2f} {sec / base:13.1f} {shown:>12s}")


if __name__ == "__main__":
    main()
