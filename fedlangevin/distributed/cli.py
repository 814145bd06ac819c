"""``torchrun --nproc-per-node=W -m fedlangevin.distributed ...``: a distributed FA-LD (or FA-HMC) run
(the command behind ``python -m fedlangevin.distributed``; ``run`` is importable, so the
processes that ``--nproc`` starts can find it).

Every rank builds the same problem (the paper's Gaussian simulation, or logistic
regression on bundled MNIST-5k split iid over the clients), holds its block of clients and
runs the sampler; rank 0 writes the draws (``--out``, a ``.pt`` file with the samples
(R, T, d) and the settings) and the checkpoint. ``--nproc W`` starts W local processes
itself (no torchrun needed). ``--resume`` continues from rank 0's checkpoint (same W).
``--sampler fahmc`` runs :class:`fedlangevin.FAHMC` instead (``--step-size`` is then its h and
``--friction`` its gamma; both numeric here).

    torchrun --nproc-per-node=2 -m fedlangevin.distributed --problem gaussian --clients 50 \\
        --chains 100 --rounds 200 --step-size 1e-5 --local-steps 10 --out draws.pt
    python -m fedlangevin.distributed --nproc 2 --problem mnist --clients 100 --chains 16 \\
        --rounds 50 --step-size 1e-5 --checkpoint run.ckpt --out draws.pt
"""

from __future__ import annotations

import argparse

PROBLEMS = ("gaussian", "mnist")
SAMPLERS = ("fald", "fahmc")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m fedlangevin.distributed", description=__doc__.splitlines()[0])
    ap.add_argument("--sampler", choices=SAMPLERS, default="fald", help="fald (default) or fahmc")
    ap.add_argument("--problem", choices=PROBLEMS, default="gaussian")
    ap.add_argument("--clients", type=int, default=50, help="N (default 50)")
    ap.add_argument("--chains", type=int, default=10, help="R (default 10)")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--local-steps", type=int, default=10, help="K (default 10)")
    ap.add_argument("--step-size", type=float, default=1e-5)
    ap.add_argument("--friction", type=float, default=1.0, help="gamma > 0 of --sampler fahmc (default 1.0)")
    ap.add_argument("--correlation", type=float, default=0.0, help="rho in [0, 1]")
    ap.add_argument("--participation", default="full", help="full, I:S or II:S (scheme I / II with S clients)")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--inexact", action="store_true", help="ProcessGroup(exact=False): per-rank private streams")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a round waits for the other ranks")
    ap.add_argument("--checkpoint", default=None, help="checkpoint path (rank 0 writes it)")
    ap.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    ap.add_argument("--out", default=None, help="rank 0 saves the draws here (torch.save)")
    ap.add_argument("--nproc", type=int, default=None, help="start this many local processes (without torchrun)")
    return ap


def _participation(text: str):
    import fedlangevin as fl

    if text == "full":
        return fl.Full()
    scheme, _, s = text.partition(":")
    if scheme in ("I", "II") and s.isdigit():
        return (fl.SchemeI if scheme == "I" else fl.SchemeII)(int(s))
    raise ValueError(f"--participation must be full, I:S or II:S; got {text!r}")


def _problem(args):
    import fedlangevin as fl

    if args.problem == "gaussian":
        return fl.problems.GaussianSimulation(num_clients=args.clients, alpha=1.0, seed=0)
    from fedlangevin.data import apply_partition, iid_partition, load_mnist5k

    data = load_mnist5k()
    parts = iid_partition(len(data.y_train), args.clients, generator=0)
    return fl.problems.LogisticRegression(apply_partition(data.X_train, data.y_train, parts), num_classes=10)


def run(rank: int, world_size: int, args: argparse.Namespace) -> str | None:
    """One rank's run (after the process group is initialised); rank 0 returns a summary line."""
    import torch

    import fedlangevin as fl
    from fedlangevin.distributed import ProcessGroup

    device = f"cuda:{torch.cuda.current_device()}" if args.backend == "nccl" else "cpu"
    transport = ProcessGroup(exact=not args.inexact, timeout=args.timeout)
    family = fl.FAHMC if args.sampler == "fahmc" else fl.FALD
    extra = {"friction": args.friction} if args.sampler == "fahmc" else {}
    try:
        if args.resume:
            sampler = family.resume(args.checkpoint, transport=transport, device=device)
            trace = sampler.run() if sampler.unfinished else sampler.run(args.rounds, checkpoint=args.checkpoint)
        else:
            sampler = family(_problem(args), step_size=args.step_size, local_steps=args.local_steps,
                             correlation=args.correlation, participation=_participation(args.participation),
                             chains=args.chains, batch_size=args.batch_size, seed=args.seed, device=device,
                             transport=transport, **extra)
            trace = sampler.run(args.rounds, checkpoint=args.checkpoint)
    finally:
        transport.close()
    if rank != 0:
        return None
    if args.out is not None:
        torch.save({"samples": torch.as_tensor(trace.samples), "settings": dict(trace.settings),
                    "world_size": world_size, "exact": not args.inexact}, args.out)
    return (f"{world_size} rank(s), clients split {[len(c) for c in _blocks(sampler, world_size)]}, "
            f"draws {tuple(trace.samples.shape)}" + (f" -> {args.out}" if args.out else ""))


def _blocks(sampler, world_size: int):
    from fedlangevin.distributed import split_clients

    return split_clients(sampler.problem.num_clients, world_size)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.resume and args.checkpoint is None:
        raise SystemExit("--resume needs --checkpoint")
    _participation(args.participation)  # fail before starting processes
    if args.sampler == "fahmc" and not (args.friction > 0 and args.friction < float("inf")):
        raise SystemExit(f"--friction must be a finite number > 0; got {args.friction}")
    from fedlangevin.distributed import init, launch

    if args.nproc is not None:
        results = launch(run, args.nproc, (args,), backend=args.backend, timeout=args.timeout, limit=7 * 24 * 3600)
        print(results[0])
        return 0
    rank, world_size = init(args.backend, timeout=args.timeout)
    line = run(rank, world_size, args)
    if line is not None:
        print(line)
    import torch.distributed as dist

    dist.destroy_process_group()
    return 0


