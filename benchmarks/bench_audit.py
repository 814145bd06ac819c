"""A larger canary audit than the tests run: audited lower bound vs accounted epsilon.

For each configuration (K, rho, participation, batch fraction, adjacency) the package's own
private FA-LD run is audited with ``--replicates`` independent replicates per world
(:func:`fedlangevin.privacy.canary.audit`), and the tight one (K = 1, full batch, full
participation, where the accountant is exact: a Gaussian mechanism of mu = 1) with ten times
more. Three negative controls follow: the same audits held against a deliberately wrong
accounting, which they must exceed. Prints a markdown table; ``--figure`` draws the scores of
the tight audit and the audited/accounted pairs.

    python benchmarks/bench_audit.py [--replicates 100000] [--delta 1e-5] [--figure docs/img/privacy-audit.png]
"""

from __future__ import annotations

import argparse
import time

from fedlangevin.privacy import ClientLevel, tight_epsilon
from fedlangevin.privacy.canary import audit

CONFIGS = [
    ("K=1, full batch, full participation (Gaussian, mu = 1)", dict(step_size=0.5, rounds=1), 10),
    ("K=1, full batch, full, 2 rounds", dict(step_size=0.3, rounds=2), 1),
    ("K=10, full batch, full, 2 rounds", dict(step_size=0.05, local_steps=10, rounds=2), 1),
    ("K=1, rho=0.5, N=3 full", dict(step_size=0.2, rounds=3, correlation=0.5, num_clients=3), 1),
    ("K=1, scheme II S=2/N=3, b=1/4", dict(step_size=0.3, rounds=4, num_clients=3, participation=2, rows=4,
                                           batch_size=1), 1),
    ("K=10, rho=0.5, scheme II S=2/N=4, b=2/10", dict(step_size=0.05, local_steps=10, rounds=4, correlation=0.5,
                                                      num_clients=4, participation=2, rows=10, batch_size=2), 1),
    ("K=10, full, b=2/5", dict(step_size=0.1, local_steps=10, rounds=1, rows=5, batch_size=2), 1),
    ("client level, K=10, scheme II S=2/N=4", dict(privacy=ClientLevel(clip=1.0), step_size=0.1, local_steps=10,
                                                   rounds=3, num_clients=4, participation=2), 1),
]

BASE = dict(eta=0.5, tau=1.0, rho=0.0, gamma=1.0, sensitivity=2.0, p_min=1.0, num_clients=1, num_sampled=1,
            local_steps=1, iterations=1, scheme="II")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicates", type=int, default=100_000)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--figure", default=None)
    args = parser.parse_args()
    rows, results = [], []
    print("| configuration | replicates / world | accounted ε | audited ε ≥ | audited / accounted | s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, kwargs, scale in CONFIGS:
        t0 = time.perf_counter()
        r = audit(**kwargs, replicates=scale * args.replicates, delta=args.delta, seed=args.seed)
        results.append((name, r))
        print(f"| {name} | {r.replicates:,} | {r.epsilon:.3f} | {r.epsilon_lower:.3f} | {r.ratio:.2f} | "
              f"{time.perf_counter() - t0:.1f} |", flush=True)
        rows.append((name, r))
    tight = results[0][1]
    d = args.delta
    four = dict(BASE, eta=0.125, p_min=0.25, num_clients=4, num_sampled=4)
    rounds10 = audit(step_size=0.05, rounds=10, replicates=args.replicates, delta=d, seed=args.seed + 1)
    clients4 = audit(step_size=0.125, rounds=1, num_clients=4, replicates=args.replicates, delta=d, seed=args.seed + 2)
    controls = [
        ("noise claimed 4x larger (tau x 16)", tight, tight_epsilon(**dict(BASE, tau=16.0), delta=d)),
        ("client sampling q = 0.1 claimed, every round ran (10 rounds)", rounds10,
         tight_epsilon(**dict(BASE, eta=0.05, iterations=10, inclusion_probability=0.1), delta=d)),
        ("private noise off by sqrt(p_c), N = 4 (z claimed 2x)", clients4,
         tight_epsilon(**dict(four, tau=4.0), delta=d)),
    ]
    print("\n| negative control | right ε | wrong (claimed) ε | audited ε ≥ | caught |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, r, claimed in controls:
        print(f"| {name} | {r.epsilon:.3f} | {claimed:.3f} | {r.epsilon_lower:.3f} | "
              f"{'yes' if r.epsilon_lower > claimed else 'NO'} |")
    if args.figure:
        figure(args.figure, tight, results)
        print(f"\nfigure: {args.figure}")


def figure(path, tight, results) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    bins = np.linspace(-5, 5, 101)
    a.hist(tight.scores_out, bins=bins, alpha=0.6, label="without canary (out)", density=True)
    a.hist(tight.scores_in, bins=bins, alpha=0.6, label="with canary (in)", density=True)
    a.axvline(tight.test["threshold"], color="k", lw=1, ls="--", label="chosen threshold")
    a.set_yscale("log")
    a.set_xlabel("attack score (likelihood-ratio statistic)")
    a.set_title(f"K=1 full batch: audited ε ≥ {tight.epsilon_lower:.2f}, accounted {tight.epsilon:.2f}")
    a.legend(fontsize=8)
    names = [n.split(" (")[0] for n, _ in results]
    y = np.arange(len(results))
    acc, low = [r.epsilon for _, r in results], [r.epsilon_lower for _, r in results]
    b.hlines(y, low, acc, color="0.7", lw=2)
    b.plot(acc, y, "o", label="accounted ε (upper bound)")
    b.plot(low, y, "s", label="audited ε (95 % lower bound)")
    b.set_yticks(y, names, fontsize=7)
    b.set_xscale("log")
    b.invert_yaxis()
    b.set_xlabel("ε at δ (log scale)")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
