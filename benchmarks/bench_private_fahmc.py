"""Private FA-HMC against private FA-LD at the same (epsilon, delta) on a small logistic regression.

Synthetic binary logistic regression: 5 features plus an intercept (d = 12 with the two classes'
weights), N = 4 clients of 250 records, a held-out test set of 4,000 records, prior N(0, 1). Both
samplers release 4 chains of R rounds, K = 1, full batches, full participation, record level with the
clip C: FA-LD's step eta is the largest that meets epsilon at delta
(:func:`fedlangevin.privacy.largest_step_size`, 4 x R local steps composed); FA-HMC (OBABO) at friction
gamma gets the h whose equivalent step size h^2 / (2 tanh(gamma h / 2)) is that eta, so both runs are the
same mechanism to the accountant (``docs/fahmc.md``, Private FA-HMC), and ``trace.privacy`` confirms it.
The reference is a non-private FA-HMC run (``step_size="auto"``, 4 chains x 4,000 rounds).

Reported per sampler: the reported epsilon, test accuracy and NLL per record of the model average
(every kept draw of every chain), the largest |mean error| over coordinates in reference sds, the
range over coordinates of the sd over the reference sd, and the
smallest bulk ESS over coordinates per round (all chains, kept rounds).

    python benchmarks/bench_private_fahmc.py [--epsilon 8] [--rounds 2000] [--clip 1.0] [--batch B] [--seed 0]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

import diagnostics as dg
import fedlangevin as fl
from fedlangevin.privacy import RecordLevel, largest_step_size
from fedlangevin.privacy.hmc import equivalent_step_size

CHAINS, CLIENTS, ROWS, FEATURES, DELTA = 4, 4, 250, 5, 1e-5


def data(seed: int):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(FEATURES, generator=g, dtype=torch.float64)

    def draw(n):
        X = torch.randn(n, FEATURES, generator=g, dtype=torch.float64)
        y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(X @ w + 0.5)).long()
        return X, y

    clients = [draw(ROWS) for _ in range(CLIENTS)]
    return fl.problems.LogisticRegression(clients, num_classes=2), draw(4000)


def h_for(eta: float, friction: float) -> float:
    """The h with equivalent_step_size(h, friction) = eta (bisection: it increases with h)."""
    lo, hi = 1e-12, 1e3
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if equivalent_step_size(mid, friction) < eta else (lo, mid)
    return lo


def scores(problem, test, samples, ref_mean, ref_sd, rounds):
    X, y = test
    theta = torch.as_tensor(samples, dtype=torch.float64)                     # (R, T, d)
    prob = problem.predict_proba(theta.reshape(-1, theta.shape[-1]), X).mean(0)  # model average (n, 2)
    acc = float((prob.argmax(-1) == y).double().mean())
    nll = float(-torch.log(prob[torch.arange(len(y)), y].clamp_min(1e-300)).mean())
    err = float(np.max(np.abs(theta.numpy().mean((0, 1)) - ref_mean) / ref_sd))
    ratio = theta.numpy().std((0, 1)) / ref_sd
    ess = float(np.min(dg.ess(theta.numpy(), method="bulk")))
    return acc, nll, err, f"{ratio.min():.2f}-{ratio.max():.2f}", ess / (CHAINS * rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--frictions", type=float, nargs="+", default=[0.5, 2.0, 10.0])
    parser.add_argument("--batch", type=int, default=None, help="minibatch rows per client and step (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    problem, test = data(args.seed)
    reference = fl.FAHMC(problem, chains=CHAINS, seed=args.seed).run(4000)
    ref = reference.samples.numpy() if hasattr(reference.samples, "numpy") else np.asarray(reference.samples)
    ref_mean, ref_sd = ref.mean((0, 1)), ref.std((0, 1))
    kept = args.rounds // 2
    rows = [("non-private FA-HMC (auto)", "-", *scores(problem, test, ref, ref_mean, ref_sd, ref.shape[1]), "-")]
    eta = largest_step_size(target_epsilon=args.epsilon, target_delta=DELTA,
                            gamma=1.0 if args.batch is None else args.batch / ROWS, sensitivity=2 * args.clip,
                            p_min=1 / CLIENTS, num_clients=CLIENTS, num_sampled=CLIENTS, local_steps=1,
                            iterations=CHAINS * args.rounds).value
    privacy = RecordLevel(clip=args.clip)
    trace = fl.FALD(problem, step_size=eta, chains=CHAINS, seed=args.seed, privacy=privacy,
                    batch_size=args.batch).run(args.rounds,
                                                                                                warmup=kept)
    rows.append((f"private FA-LD, eta = {eta:.3g}", f"{trace.privacy(delta=DELTA).epsilon:.3f}",
                 *scores(problem, test, trace.samples, ref_mean, ref_sd, kept), "-"))
    for gamma in args.frictions:
        h = h_for(eta, gamma)
        trace = fl.FAHMC(problem, step_size=h, friction=gamma, splitting="OBABO", chains=CHAINS, seed=args.seed,
                         privacy=privacy, batch_size=args.batch).run(args.rounds, warmup=kept)
        rows.append((f"private FA-HMC, gamma = {gamma:g}, h = {h:.3g}", f"{trace.privacy(delta=DELTA).epsilon:.3f}",
                     *scores(problem, test, trace.samples, ref_mean, ref_sd, kept), f"{h * kept:.3g}"))
    print(f"epsilon target {args.epsilon:g} at delta {DELTA:g}, {CHAINS} chains x {args.rounds} rounds (second half "
          f"kept), clip {args.clip:g}, batch {args.batch or ROWS} of {ROWS}, N = {CLIENTS} x {ROWS} records, d = {problem.dim}")
    print("| sampler | reported epsilon | test accuracy | test NLL | max mean error (ref sd) | sd / ref sd "
          "| min bulk ESS / round | kept time h x rounds |")
    print("|---|---|---|---|---|---|---|---|")
    for name, eps, acc, nll, err, sds, ess, time in rows:
        print(f"| {name} | {eps} | {acc:.4f} | {nll:.4f} | {err:.2f} | {sds} | {ess:.4f} | {time} |")


if __name__ == "__main__":
    main()
