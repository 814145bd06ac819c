"""Bayesian linear regression with an unknown noise scale on federated data (Pyro + FA-LD).

Ten clients hold regression data whose covariates are distributed differently from client to
client (the data never leave them). The model is an ordinary Pyro model with the conjugate
normal-inverse-gamma prior,

    sigma^2 ~ InvGamma(a0, b0),   beta | sigma^2 ~ N(0, sigma^2 v0 I),   y | X ~ N(X beta, sigma^2),

so that the exact posterior is known (beta: multivariate Student t, sigma^2: inverse gamma)
and FA-LD's answer can be checked against it. ``PyroProblem`` turns the model and the
clients' datasets into client energies f^c = (1/p_c) NLL_c + prior share, sampling sigma^2
on the log scale (Pyro's own bijection for its positive support, with the log-Jacobian);
draws come back as ``beta``, ``sigma2`` and the deterministic site ``sigma``.

The script ends with ArviZ's summary (R-hat, ESS), a table of posterior means and 90%
intervals next to the exact ones, and a coverage check: the fraction of held-out points
inside the 90% posterior predictive interval.

    python examples/blr_pyro.py            # full settings, about a minute on a CPU
    python examples/blr_pyro.py --quick    # reduced settings (CI), a few seconds
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from scipy import stats

import diagnostics as dg
import fedlangevin as fl

A0, B0, V0 = 2.0, 1.0, 10.0  # prior: sigma^2 ~ InvGamma(A0, B0), beta | sigma^2 ~ N(0, sigma^2 V0 I)
TRUE_BETA = np.array([1.0, 0.5, -1.0, 2.0])  # intercept, three slopes
TRUE_SIGMA = 0.7


def model(data):
    """One client's data: (X, y), X with an intercept column."""
    X, y = data
    sigma2 = pyro.sample("sigma2", dist.InverseGamma(X.new_tensor(A0), X.new_tensor(B0)))
    beta = pyro.sample("beta", dist.Normal(X.new_zeros(X.shape[1]), torch.sqrt(V0 * sigma2)).to_event(1))
    sigma = pyro.deterministic("sigma", torch.sqrt(sigma2))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)


def simulate(rng: np.random.Generator, n: int, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(shift, 1.0, size=(n, 3))
    X = np.column_stack([np.ones(n), x])
    return X, X @ TRUE_BETA + TRUE_SIGMA * rng.normal(size=n)


def exact_posterior(X: np.ndarray, y: np.ndarray) -> dict:
    """Normal-inverse-gamma update (prior mean 0): V_n, m_n, a_n, b_n."""
    prec = np.eye(X.shape[1]) / V0 + X.T @ X
    v = np.linalg.inv(prec)
    m = v @ X.T @ y
    a = A0 + len(y) / 2
    b = B0 + 0.5 * (y @ y - m @ prec @ m)
    return {"V": v, "m": m, "a": a, "b": b}


def exact_table(post: dict) -> dict[str, tuple[float, float, float]]:
    """Exact mean and 5%/95% quantiles: beta_j ~ t_{2a}(m_j, sqrt(b/a V_jj)), sigma = sqrt(InvGamma(a, b))."""
    a, b = post["a"], post["b"]
    out = {}
    for j, mj in enumerate(post["m"]):
        t = stats.t(df=2 * a, loc=mj, scale=math.sqrt(b / a * post["V"][j, j]))
        out[f"beta[{j}]"] = (mj, t.ppf(0.05), t.ppf(0.95))
    ig = stats.invgamma(a, scale=b)
    mean_sigma = math.sqrt(b) * math.exp(math.lgamma(a - 0.5) - math.lgamma(a))
    out["sigma"] = (mean_sigma, math.sqrt(ig.ppf(0.05)), math.sqrt(ig.ppf(0.95)))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced settings for CI (a few seconds)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    chains, rounds, warmup = (4, 60, 20) if args.quick else (64, 1000, 250)

    rng = np.random.default_rng(args.seed)
    sizes = rng.integers(15, 70, size=10)
    shifts = rng.normal(0.0, 0.7, size=(10, 3))  # covariates differ between clients
    clients = [simulate(rng, int(n), s) for n, s in zip(sizes, shifts)]
    X_test, y_test = simulate(rng, 2000, rng.normal(0.0, 0.7, size=(2000, 3)))

    problem = fl.problems.PyroProblem(model, [(torch.tensor(X), torch.tensor(y)) for X, y in clients])
    print(problem)
    print(f"clients' sizes n_c: {sizes.tolist()} (n = {sizes.sum()}); theta = {problem.var_names}")

    sampler = fl.FALD(problem, local_steps=5, chains=chains, seed=args.seed, init="map")  # step size adapted in warm-up
    start = time.perf_counter()
    trace = sampler.run(rounds, warmup=warmup)
    print(f"FA-LD: {chains} chains x {rounds} rounds x K = 5 local steps in {time.perf_counter() - start:.1f} s\n")

    summary = dg.summary(trace)  # trace.to_arviz() shows the model's sites: beta, sigma2, sigma
    print("ArviZ summary (90% equal-tailed intervals):")
    print(summary.round(3).to_string(), "\n")

    X_all = np.concatenate([X for X, _ in clients])
    y_all = np.concatenate([y for _, y in clients])
    exact = exact_table(exact_posterior(X_all, y_all))
    print(f"{'':>8} {'FA-LD mean':>11} {'exact mean':>11} {'FA-LD 90% interval':>22} {'exact 90% interval':>22} {'truth':>7}")
    truth = dict(zip([f"beta[{j}]" for j in range(4)], TRUE_BETA)) | {"sigma": TRUE_SIGMA}
    for name, (mean, lo, hi) in exact.items():
        row = summary.loc[name]
        print(f"{name:>8} {row['mean']:11.4f} {mean:11.4f}   [{row['eti90_lb']:8.4f}, {row['eti90_ub']:8.4f}]"
              f"   [{lo:8.4f}, {hi:8.4f}] {truth[name]:7.3f}")

    # coverage: posterior predictive y* = x beta + sigma eps from 4000 draws, central 90% interval
    values = trace.constrained()
    beta = values["beta"].reshape(-1, 4)
    sigma = values["sigma"].reshape(-1)
    pick = np.random.default_rng(1).choice(beta.shape[0], size=min(4000, beta.shape[0]), replace=False)
    pred = X_test @ beta[pick].T + sigma[pick] * np.random.default_rng(2).normal(size=(len(y_test), len(pick)))
    lo, hi = np.quantile(pred, [0.05, 0.95], axis=1)
    covered = float(np.mean((y_test >= lo) & (y_test <= hi)))
    post = exact_posterior(X_all, y_all)
    scale = np.sqrt(post["b"] / post["a"] * (1 + np.einsum("ij,jk,ik->i", X_test, post["V"], X_test)))
    t = stats.t(df=2 * post["a"], loc=X_test @ post["m"], scale=scale)
    covered_exact = float(np.mean((y_test >= t.ppf(0.05)) & (y_test <= t.ppf(0.95))))
    se = math.sqrt(0.9 * 0.1 / len(y_test))
    ok = abs(covered - 0.9) < 3 * se
    print(f"\ncoverage of the 90% posterior predictive interval on {len(y_test)} held-out points: "
          f"FA-LD {covered:.3f}, exact posterior {covered_exact:.3f} (nominal 0.900 +- {3 * se:.3f} at 3 s.e.): "
          f"{'OK' if ok else 'OFF'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
