"""Worked example for docs/diagnostics.md: FA-LD on a softmax regression of scikit-learn's
digits, convergence diagnostics of the run, and calibration of its posterior predictive
against the MAP (point-estimate) classifier.

    python examples/diagnostics_digits.py            # about 90 s on 2 CPU cores
    python examples/diagnostics_digits.py --out DIR  # where the figures go (default docs/img)

Data: the 1797 8x8 digits bundled with scikit-learn (no download), standardised and
projected on 20 whitened principal components (fitted on the training part), 1000
training images split iid over 10 clients, 797 test images.
Model: softmax regression, theta = (W (20 x 10), b (10)), d = 210, prior N(0, I / 5).
The step size is a quarter of 1 / lambda_max of the energy's Hessian at the mode.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import minimize
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.preprocessing import StandardScaler

import diagnostics as dg
import fedlangevin as fl
from fedlangevin.problems.base import FederatedProblem

P, C = 20, 10  # features after PCA, classes
D = P * C + C
PRIOR_PRECISION = 5.0  # prior N(0, I / 5)


class SoftmaxRegression(FederatedProblem):
    """Client energies f^c = (1/p_c) * (client NLL) + lambda ||theta||^2 / 2 (prior N(0, I / lambda)),
    with per-client data stacked and padded so that one call serves every chain and client."""

    def __init__(self, clients: list[tuple[np.ndarray, np.ndarray]], dtype=torch.float64, device="cpu"):
        sizes = np.array([len(y) for _, y in clients])
        self.num_clients, self.dim = len(clients), D
        self.weights = torch.tensor(sizes / sizes.sum(), dtype=torch.float64)
        n_max = sizes.max()
        X = np.zeros((len(clients), n_max, P))
        Y = np.zeros((len(clients), n_max, C))
        mask = np.zeros((len(clients), n_max, 1))
        for c, (x, y) in enumerate(clients):
            X[c, : len(y)], Y[c, np.arange(len(y)), y], mask[c, : len(y)] = x, 1.0, 1.0
        self._clients = clients
        self.X, self.Y, self.mask = (torch.tensor(a, dtype=dtype, device=device) for a in (X, Y, mask))
        self.Xt = self.X.transpose(-1, -2).contiguous()
        self.inv_p = (1.0 / self.weights).to(dtype=dtype, device=device)
        self.var_names = [f"W[{i},{k}]" for i in range(P) for k in range(C)] + [f"b[{k}]" for k in range(C)]

    def grad(self, theta, *, batch_size=None, generator=None):
        W = theta[..., : P * C].reshape(*theta.shape[:-1], P, C)
        b = theta[..., P * C :]
        logits = torch.matmul(self.X, W) + b[:, :, None, :]  # (R, N, n, C)
        G = (torch.softmax(logits, dim=-1) - self.Y) * self.mask  # d NLL / d logits
        gW = torch.matmul(self.Xt, G).reshape(*theta.shape[:-1], P * C)
        gb = G.sum(dim=2)
        return self.inv_p[None, :, None] * torch.cat([gW, gb], dim=-1) + PRIOR_PRECISION * theta

    def to(self, device=None, dtype=None):
        return SoftmaxRegression(self._clients, dtype=dtype or torch.float64, device=device or "cpu")


def probabilities(theta: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Softmax probabilities of draws theta (..., D) on X (n, P): shape (..., n, C)."""
    W = theta[..., : P * C].reshape(*theta.shape[:-1], P, C)
    logits = X @ W + theta[..., None, P * C :]
    logits -= logits.max(axis=-1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=-1, keepdims=True)


def map_estimate(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Posterior mode (L-BFGS on the full-data energy NLL + lambda ||theta||^2 / 2)."""
    Y = np.eye(C)[y]

    def energy(t):
        p = probabilities(t, X)
        nll = -np.sum(np.log(p[np.arange(len(y)), y]))
        g = p - Y
        grad = np.concatenate([(X.T @ g).ravel(), g.sum(0)]) + PRIOR_PRECISION * t
        return nll + 0.5 * PRIOR_PRECISION * t @ t, grad

    return minimize(energy, np.zeros(D), jac=True, method="L-BFGS-B", options={"maxiter": 2000}).x


def hessian_eigenvalues(theta: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Eigenvalues of the energy's Hessian sum_i (x_i x_i^T) kron (diag p_i - p_i p_i^T) + lambda I."""
    p = probabilities(theta, X)
    xb = np.hstack([X, np.ones((len(X), 1))])  # bias as feature P: matches theta's (W row-major, b) order
    s = np.einsum("ic,ck->ick", p, np.eye(C)) - np.einsum("ic,ik->ick", p, p)
    h = np.einsum("ip,iq,ick->pcqk", xb, xb, s).reshape(D, D)
    return np.linalg.eigvalsh(h + PRIOR_PRECISION * np.eye(D))


def main(out: Path, rounds: int = 1600) -> None:
    torch.set_num_threads(1)  # tensors this small run fastest on one thread
    t0 = time.perf_counter()
    digits = load_digits()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(digits.target))
    tr, te = idx[:1000], idx[1000:]
    scaler = StandardScaler().fit(digits.data[tr])
    pca = PCA(n_components=P, whiten=True, random_state=0).fit(scaler.transform(digits.data[tr]))
    Xtr, Xte = (pca.transform(scaler.transform(digits.data[i])) for i in (tr, te))
    ytr, yte = digits.target[tr], digits.target[te]
    clients = [(Xtr[c::10], ytr[c::10]) for c in range(10)]  # iid split over 10 clients

    theta_map = map_estimate(Xtr, ytr)
    problem = SoftmaxRegression(clients)
    ev = hessian_eigenvalues(theta_map, Xtr)
    eta = 0.25 / ev.max()
    # over-dispersed starts: the mode plus twice the prior's sd per coordinate
    init = theta_map + 2.0 / np.sqrt(PRIOR_PRECISION) * rng.standard_normal((4, D))
    sampler = fl.FALD(problem, step_size=eta, local_steps=10, chains=4, init=torch.tensor(init), seed=0)
    trace = sampler.run(rounds, warmup=rounds // 4, thin=5, progress=False)
    t_run = time.perf_counter() - t0

    # convergence of the 210 parameters
    table = dg.summary(trace)
    worst = table.sort_values("r_hat", ascending=False).head(4)
    print(f"FA-LD: N=10 clients, d={D}, Hessian at the mode: eigenvalues {ev.min():.3g} .. {ev.max():.4g}, "
          f"eta={eta:.3g}, K=10, {rounds} rounds (warm-up {rounds // 4}, thin 5): 4 chains x {trace.num_draws} draws")
    print(f"R-hat: max {table['r_hat'].max():.4f}, median {table['r_hat'].median():.4f}; "
          f"ESS bulk: min {table['ess_bulk'].min():.0f}, median {table['ess_bulk'].median():.0f}; "
          f"ESS tail: min {table['ess_tail'].min():.0f}")
    print("largest R-hat:\n" + worst.to_string(float_format=lambda v: f"{v:.4g}"))

    # posterior predictive: Bayesian model average over all kept draws, streamed chain by
    # chain; the per-draw probability of the true test label is a quantity of interest whose
    # convergence the same diagnostics check
    pp = dg.PosteriorPredictive()
    true_prob = np.empty((trace.num_chains, trace.num_draws, len(yte)))
    for r, chain in enumerate(trace.numpy()):
        probs = probabilities(chain, Xte)  # (draws, n_test, C)
        pp.update(probs)
        true_prob[r] = probs[:, np.arange(len(yte)), yte]
    r_pred = dg.rhat(true_prob)
    print(f"R-hat of p(true label | x, theta) over the {len(yte)} test images: max {r_pred.max():.4f}, "
          f"median {np.median(r_pred):.4f}")
    p_bayes = pp.probs
    p_map = probabilities(theta_map, Xte)
    rows = []
    for name, p in (("MAP (point estimate)", p_map), (f"FA-LD posterior predictive ({pp.count} draws)", p_bayes)):
        rows.append((name, np.mean(p.argmax(1) == yte), dg.ece(p, yte), dg.mce(p, yte), dg.brier(p, yte), dg.nll(p, yte)))
    print(f"\ntest set (n = {len(yte)}), 15 equal-width bins:")
    print(f"{'':44} {'accuracy':>9} {'ECE':>8} {'MCE':>8} {'Brier':>8} {'NLL':>8}")
    for name, *vals in rows:
        print(f"{name:44} " + " ".join(f"{v:>8.4f}" if i else f"{v:>9.4f}" for i, v in enumerate(vals)))

    from matplotlib.figure import Figure

    out.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(10, 6), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=[3, 1])
    for col, (name, p) in enumerate((("MAP", p_map), ("FA-LD posterior predictive", p_bayes))):
        top = fig.add_subplot(grid[0, col])
        bottom = fig.add_subplot(grid[1, col], sharex=top)
        dg.reliability_diagram(p, yte, axes=(top, bottom), title=f"digits, softmax regression: {name}")
    fig.savefig(out / "diagnostics_reliability.png", dpi=110)
    dg.rank_plot(trace, list(worst.index), path=out / "diagnostics_rank.png")
    print(f"\nfigures: {out / 'diagnostics_reliability.png'}, {out / 'diagnostics_rank.png'}")
    print(f"time: {time.perf_counter() - t0:.1f} s (sampling and setup {t_run:.1f} s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "img"))
    parser.add_argument("--rounds", type=int, default=1600)
    args = parser.parse_args()
    main(Path(args.out), args.rounds)
