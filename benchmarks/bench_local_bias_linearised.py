"""Does the linearised model predict FA-LD's local-step bias? A measured negative result (issue 27).

The deterministic alternative to measuring the K-step bias from iterates: linearise every
client's gradient at the posterior mean, grad f^c(theta) ~ g_c + H_c (theta - theta_bar) (H_c by
central differences of the gradients, :func:`fedlangevin.warmup.mode.client_derivatives`),
and read the bias off the exact stationary law of FA-LD on that quadratic problem
(:func:`fedlangevin.experiments.exact.stationary_moments`, in the coordinates whitened by M, where
the preconditioned step is plain FA-LD): the worst |mean(K) - mean(1)| / sd(1) and the sd ratios.
No Monte Carlo error, one upload of the clients' Hessians, and exact on Gaussian targets.

Per posterior: eta and M of a short default warm-up at K (as the run would use them), the
prediction, and with ``--simulate`` the bias FA-LD actually has at that eta with M = the
reference covariance: 32 chains of K and of K = 1 from the reference mean, a third discarded,
in K = 1 sds, with the worst coordinate's Monte Carlo error (chain means' spread).

    python benchmarks/bench_local_bias_linearised.py [--local-steps 10] [--simulate] [--names ...]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlangevin as fl  # noqa: E402
from fedlangevin.experiments import exact  # noqa: E402
from fedlangevin.experiments.posteriordb import POSTERIORS, load  # noqa: E402
from fedlangevin.warmup.mode import client_derivatives  # noqa: E402


def predicted(problem, theta_bar: np.ndarray, cov: np.ndarray, eta: float, k: int) -> tuple[float, float, float]:
    """Worst |mean shift| / sd(1), min and max sd ratio of K against K = 1, by the linearised exact law."""
    d = problem.dim
    theta = torch.as_tensor(theta_bar, dtype=torch.float64)
    grads, hess = client_derivatives(problem, theta, dense=True)  # (N, d), (N, d, d): central differences
    chol = torch.linalg.cholesky(torch.as_tensor(cov, dtype=torch.float64))
    hess = chol.T @ hess @ chol  # whitened: theta = theta_bar + L phi
    # a client's whitened Hessian may be indefinite (then no QuadraticProblem); the law still exists
    # where the averaged round map contracts, which stationary_moments' solve needs
    form = type("Form", (), {"hessian": hess, "shift": -(grads @ chol)})()
    quad = type("Quad", (), {"num_clients": problem.num_clients, "dim": d, "weights": problem.weights.double(),
                             "quadratic": lambda self: form})()
    m1, c1 = exact.stationary_moments(quad, [eta])
    mk, ck = exact.stationary_moments(quad, [eta] * k)
    low = chol.numpy()
    m1, mk, c1, ck = low @ m1, low @ mk, low @ c1 @ low.T, low @ ck @ low.T
    sd1, sdk = np.sqrt(np.diag(c1)), np.sqrt(np.diag(ck))
    return float(np.max(np.abs(mk - m1) / sd1)), float(np.min(sdk / sd1)), float(np.max(sdk / sd1))


def simulated(problem, mean: np.ndarray, cov: np.ndarray, eta: float, k: int, chains: int = 32) -> tuple[float, float]:
    """Worst |mean shift| / sd(1) of FA-LD at K against K = 1 (same eta, M = cov), and its MC error."""
    stats = {}
    for steps, rounds in ((1, 3000), (k, max(300, 3000 // k * 2))):
        sampler = fl.FALD(problem, local_steps=steps, step_size=eta, preconditioner=cov, chains=chains, seed=1,
                          init=torch.as_tensor(mean), check_local_bias=False)
        draws = np.asarray(sampler.run(rounds, progress=False).samples)[:, rounds // 3:]
        stats[steps] = draws.mean(1), draws.reshape(-1, draws.shape[-1]).std(0)
    sd = stats[1][1]
    shift = (stats[k][0].mean(0) - stats[1][0].mean(0)) / sd
    error = np.sqrt(stats[k][0].var(0, ddof=1) / chains + stats[1][0].var(0, ddof=1) / chains) / sd
    worst = int(np.argmax(np.abs(shift)))
    return float(abs(shift[worst])), float(error[worst])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--simulate", action="store_true", help="also FA-LD's actual bias at the same eta and M")
    parser.add_argument("--names", nargs="*", default=list(POSTERIORS))
    args = parser.parse_args()
    k = args.local_steps
    print(f"| posterior | eta (K = {k}) | predicted worst shift | predicted sd ratio | simulated worst shift | time s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.names:
        start = time.perf_counter()
        post = load(name)
        ref = post.unconstrain(post.reference)
        mean, cov = ref.mean(0), np.cov(ref.T)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = fl.FALD(post.problem, local_steps=k, chains=8, seed=0, init="map", check_local_bias=False)
            sampler.run(200, progress=False)
        eta = float(np.atleast_1d(sampler.schedule(sampler.state.step))[0])
        with np.errstate(all="ignore"):
            shift, low, high = predicted(post.problem, mean, cov, eta, k)
        sim = "-"
        if args.simulate:
            value, error = simulated(post.problem, mean, cov, eta, k)
            sim = f"{value:.3f} ± {error:.3f}"
        print(f"| {name.split('-')[0]} | {eta:.3g} | {shift:.3f} | {low:.3f}-{high:.3f} | {sim} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
