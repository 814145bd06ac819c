"""A small Bayesian neural network on federated data, from a plain torch energy (FA-LD).

Six clients each observe a noisy function y = sin(2x) + x/2 + N(0, 0.2^2) on their own part
of the x-axis (non-iid: client c only sees x in its own interval), with no client covering
x in (0.3, 1.0). The model is a 1-16-16-1 tanh MLP with a N(0, 1) prior on every weight
(321 parameters) and the Gaussian likelihood with known noise scale, written as an ordinary
torch function for ONE parameter vector and ONE batch:

    def client_energy(theta, batch):                  # negative log-likelihood of the batch
        x, y = batch
        return ((y - mlp(theta, x)) ** 2).sum() / (2 * NOISE**2)

``CustomProblem`` batches it over chains and clients with ``torch.func`` (vmap + grad) and
scales it into the client energies f^c = (1/p_c) NLL_c + prior.

The network's weights are not identifiable (hidden units can be permuted and their signs
flipped), so chains are compared in function space: the script ends with ArviZ's summary of
the posterior predictive mean f(x) at a few inputs (R-hat, ESS) and a calibration check,
the coverage of the central 50/80/90/95% predictive intervals of y on held-out points from
the clients' intervals, plus the predictive spread inside the gap, where there are no data.

    python examples/mlp_custom.py                          # full settings, about a minute
    python examples/mlp_custom.py --quick                  # reduced settings (CI)
    python examples/mlp_custom.py --plot docs/img/mlp_custom.png
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import diagnostics as dg
import fedlangevin as fl

NOISE = 0.2
HIDDEN = 16
SHAPES = {"W1": (HIDDEN, 1), "b1": (HIDDEN,), "W2": (HIDDEN, HIDDEN), "b2": (HIDDEN,), "W3": (1, HIDDEN), "b3": (1,)}
CLIENT_RANGES = [(-2.0, -1.3), (-1.4, -0.7), (-0.8, -0.1), (-0.2, 0.3), (1.0, 1.6), (1.5, 2.0)]
GAP = (0.3, 1.0)
LEVELS = (0.5, 0.8, 0.9, 0.95)


def truth(x):
    return np.sin(2 * x) + 0.5 * x


def unpack(theta: torch.Tensor) -> dict[str, torch.Tensor]:
    out, start = {}, 0
    for name, shape in SHAPES.items():
        size = int(np.prod(shape))
        out[name] = theta[start : start + size].reshape(shape)
        start += size
    return out


def mlp(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The network for one parameter vector theta (d,) on inputs x (n,)."""
    p = unpack(theta)
    h = torch.tanh(x[:, None] @ p["W1"].T + p["b1"])
    h = torch.tanh(h @ p["W2"].T + p["b2"])
    return (h @ p["W3"].T + p["b3"])[:, 0]


def client_energy(theta: torch.Tensor, batch) -> torch.Tensor:
    x, y = batch
    return ((y - mlp(theta, x)) ** 2).sum() / (2 * NOISE**2)


def prior(theta: torch.Tensor) -> torch.Tensor:
    return 0.5 * (theta**2).sum()


def predict(samples: torch.Tensor, x: np.ndarray) -> np.ndarray:
    """f(x) for every draw: samples (chains, draws, d) -> (chains, draws, len(x))."""
    xs = torch.as_tensor(x, dtype=samples.dtype)
    flat = samples.reshape(-1, samples.shape[-1])
    with torch.no_grad():
        f = torch.func.vmap(lambda t: mlp(t, xs))(flat)
    return f.reshape(*samples.shape[:2], len(x)).numpy()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced settings for CI (a few seconds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default=None, help="save a figure of the posterior predictive to this PNG path")
    args = parser.parse_args(argv)
    chains, rounds, warmup = (4, 60, 30) if args.quick else (8, 1200, 400)

    rng = np.random.default_rng(args.seed)
    clients = []
    for lo, hi in CLIENT_RANGES:
        x = rng.uniform(lo, hi, size=40)
        clients.append((torch.tensor(x), torch.tensor(truth(x) + NOISE * rng.normal(size=40))))
    client_of_test = rng.integers(0, len(CLIENT_RANGES), size=2000)
    x_test = np.array([rng.uniform(*CLIENT_RANGES[c]) for c in client_of_test])
    y_test = truth(x_test) + NOISE * rng.normal(size=len(x_test))

    problem = fl.problems.CustomProblem(client_energy, clients, prior=prior, param_shapes=SHAPES)
    print(problem)
    # each chain starts from its own random network (scaled like a standard initialisation)
    g = torch.Generator().manual_seed(args.seed)
    fan_in = torch.cat([torch.full((int(np.prod(s)),), float(s[-1]) if len(s) == 2 else 1.0) for s in SHAPES.values()])
    init = torch.randn(chains, problem.dim, generator=g, dtype=torch.float64) / fan_in.sqrt()
    sampler = fl.FALD(problem, step_size=2e-5, local_steps=10, chains=chains, seed=args.seed, init=init)
    start = time.perf_counter()
    trace = sampler.run(rounds, warmup=warmup, thin=2)
    print(f"FA-LD: {chains} chains x {rounds} rounds x K = 10 local steps in {time.perf_counter() - start:.1f} s\n")

    probe = np.array([-1.5, -0.5, 0.0, 0.6, 1.3, 1.8])
    f_probe = predict(trace.samples, probe)
    names = [f"f[{x:+.1f}]" for x in probe]
    print("ArviZ summary of the network's output f(x) at a few inputs (x = 0.6 lies in the gap):")
    print(dg.summary(dg.to_arviz(f_probe, var_names=names)).round(3).to_string())
    print("truth: " + ", ".join(f"f({x:+.1f}) = {truth(x):.3f}" for x in probe), "\n")

    # calibration: predictive y = f(x) + noise, central intervals, held-out points in the clients' ranges
    f_test = predict(trace.samples, x_test).reshape(-1, len(x_test))
    y_pred = f_test + NOISE * np.random.default_rng(1).normal(size=f_test.shape)
    cover = []
    for level in LEVELS:
        lo, hi = np.quantile(y_pred, [(1 - level) / 2, (1 + level) / 2], axis=0)
        cover.append(float(np.mean((y_test >= lo) & (y_test <= hi))))
    se = max(np.sqrt(lvl * (1 - lvl) / len(y_test)) for lvl in LEVELS)
    print(f"coverage of central predictive intervals on {len(y_test)} held-out points:")
    print("  nominal " + " ".join(f"{lvl:6.2f}" for lvl in LEVELS))
    print("  FA-LD   " + " ".join(f"{c:6.3f}" for c in cover)
          + f"   (largest distance to nominal {max(abs(c - l) for c, l in zip(cover, LEVELS)):.3f}; one binomial s.e. <= {se:.3f})")

    grid = np.linspace(-2.2, 2.2, 221)
    f_grid = predict(trace.samples, grid).reshape(-1, len(grid))
    sd = f_grid.std(axis=0)
    in_gap = (grid > GAP[0]) & (grid < GAP[1])
    in_data = np.zeros_like(grid, dtype=bool)
    for lo, hi in CLIENT_RANGES:
        in_data |= (grid >= lo) & (grid <= hi)
    print(f"posterior sd of f(x): {sd[in_data].mean():.3f} on average where clients have data, "
          f"{sd[in_gap].mean():.3f} in the gap {GAP} (no data)")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        lo90, hi90 = np.quantile(f_grid + NOISE * np.random.default_rng(2).normal(size=f_grid.shape), [0.05, 0.95], axis=0)
        lo_f, hi_f = np.quantile(f_grid, [0.05, 0.95], axis=0)
        ax.fill_between(grid, lo90, hi90, color="tab:blue", alpha=0.15, label="90% predictive interval of y")
        ax.fill_between(grid, lo_f, hi_f, color="tab:blue", alpha=0.35, label="90% interval of f(x)")
        ax.plot(grid, f_grid.mean(axis=0), color="tab:blue", lw=1.5, label="posterior mean of f(x)")
        ax.plot(grid, truth(grid), "k--", lw=1, label="true function")
        for c, (x, y) in enumerate(clients):
            ax.scatter(x.numpy(), y.numpy(), s=8, color=plt.cm.tab10(c + 1), label=f"client {c}" if c < 6 else None)
        ax.axvspan(*GAP, color="grey", alpha=0.12, lw=0)
        ax.text(np.mean(GAP), ax.get_ylim()[0] + 0.1, "no data", ha="center", fontsize=8, color="grey")
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.set_title(f"FA-LD posterior of a 1-16-16-1 MLP, {len(clients)} clients (each sees one interval)")
        ax.legend(fontsize=7, ncol=2, loc="upper left")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=130)
        print(f"figure: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
