"""Cost of the samplers' defaults against d and the number of chains.

FA-LD and FA-HMC with every default (``step_size="auto"``: warm-up adaptation of M, the step and,
for FA-HMC, the friction) on a synthetic multinomial logistic regression with ``--records``
records (default 20,000, the size of the Sec. 7.2 study's subsets) over 10 clients, 10 classes
(d = 10 (p + 1), p features; d = 7,850 is MNIST's size). Each configuration runs in a fresh
subprocess (``resource.getrusage`` peak RSS is per process) and reports:

- ``first run``: wall of ``run(rounds)`` from the default start, half of it warm-up;
- ``per round``: wall per round of a following ``run(--sampling)`` (adapted, no warm-up);
- ``data MB``: peak RSS once the problem is built (Python, torch and the features);
- ``peak MB``: peak RSS of the whole process.

    python benchmarks/bench_scale.py [--dims 100 1000 7850] [--chains 4 64] [--samplers fald fahmc]
        [--records 20000] [--rounds 20] [--sampling 10] [--threads 1] [--timeout 1800]

A configuration that exceeds ``--timeout`` seconds or fails prints its reason in the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import json, resource, sys, time
    import torch
    import fedlangevin as fl
    from fedlangevin.problems import LogisticRegression

    cfg = json.loads(sys.argv[1])
    torch.set_num_threads(cfg["threads"])
    n, classes, dim = cfg["records"], 10, cfg["dim"]
    p = dim // classes - 1
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, p, generator=g, dtype=torch.float64) / p ** 0.5
    w = 2.0 * torch.randn(classes, p, generator=g, dtype=torch.float64)
    y = torch.distributions.Categorical(logits=X @ w.T).sample()
    parts = [torch.arange(i, n, 10) for i in range(10)]
    prob = LogisticRegression.from_partition(X, y, parts, num_classes=classes)
    del X
    data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cls = {"fald": fl.FALD, "fahmc": fl.FAHMC}[cfg["sampler"]]
    sampler = cls(prob, chains=cfg["chains"], seed=0)
    t0 = time.perf_counter()
    sampler.run(cfg["rounds"], keep_samples=False)
    t1 = time.perf_counter()
    sampler.run(cfg["sampling"], keep_samples=False)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"dim": prob.dim, "first": t1 - t0, "per_round": (t2 - t1) / cfg["sampling"],
                      "data_mb": data, "peak_mb": peak}))
""")


def measure(cfg: dict, timeout: float, child: str = CHILD) -> dict:
    """Run ``child`` (Python source printing one JSON line last) in a fresh process with ``cfg`` as its
    argument: its JSON, or {"error": why} (over ``timeout`` seconds, or its exit status and last line)."""
    try:
        out = subprocess.run([sys.executable, "-c", child, json.dumps(cfg)], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:g} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {out.returncode}: {last[:80]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", type=int, nargs="+", default=[100, 1000, 7850])
    ap.add_argument("--chains", type=int, nargs="+", default=[4, 64])
    ap.add_argument("--samplers", nargs="+", default=["fald", "fahmc"], choices=["fald", "fahmc"])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sampling", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800.0)
    args = ap.parse_args()
    print(f"records {args.records}, 10 clients, 10 classes, first run {args.rounds} rounds (half warm-up), "
          f"then {args.sampling} sampling rounds, {args.threads} thread(s)")
    print(f"{'sampler':8} {'d':>6} {'chains':>6} {'first run s':>12} {'per round s':>12} {'data MB':>8} {'peak MB':>8}")
    for sampler in args.samplers:
        for dim in args.dims:
            for chains in args.chains:
                cfg = dict(sampler=sampler, dim=dim, chains=chains, records=args.records, rounds=args.rounds,
                           sampling=args.sampling, threads=args.threads)
                r = measure(cfg, args.timeout)
                if "error" in r:
                    print(f"{sampler:8} {dim:>6} {chains:>6}  {r['error']}", flush=True)
                else:
                    print(f"{sampler:8} {r['dim']:>6} {chains:>6} {r['first']:>12.2f} {r['per_round']:>12.4f} "
                          f"{r['data_mb']:>8.0f} {r['peak_mb']:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
