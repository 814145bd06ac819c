"""An independent reference for the full-MNIST runs: the Laplace approximation of the posterior.

The samplers' MNIST acceptance (``bench_mnist.py``) asks the model average of the draws for an
accuracy, ECE and NLL; the MAP (scikit-learn ``LogisticRegression(C=1)``) is one anchor, but the
*posterior's* model average need not be as sharp as the MAP. This script computes, without the
package's samplers or its optimiser:

1. the MAP of the same model (softmax regression, every weight and bias with an N(0, 1) prior,
   ``LogisticRegression``'s layout: class k's weights then its bias) by SciPy's L-BFGS-B on the
   full training set (60,000 images);
2. the exact Hessian of the negative log posterior there, H = sum_i (diag(p_i) - p_i p_i^T) (x)
   x_i x_i^T + I (d x d = 7,850^2, built block by block: H_kl = X^T diag(p_k (delta_kl - p_l)) X);
3. ``--draws`` draws of N(MAP, H^-1) (Cholesky of H), their model average on the 10,000 test
   images (accuracy, ECE with 15 bins, NLL), the sd of the test log predictive across draws,
   and the marginal sds (their quartiles: a sampler's draws can be compared coordinate-wise).

The Laplace law is an approximation (7.6 records per parameter is not deep in the asymptotic
regime), so it is a reference for the *scale* of what a posterior average gives, not an exact
target. Dense on purpose: it is a one-off reference (0.5 GB for H), not a default path.

    python benchmarks/mnist_laplace.py [--dataset mnist] [--draws 800] [--seed 0] [--out laplace.npz]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.linalg
import scipy.optimize
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--draws", type=int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="save MAP and marginal sds to this .npz")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import diagnostics
    from fedlangevin.data import load_dataset

    data = load_dataset(args.dataset)
    X = torch.cat([data.X_train.double(), torch.ones(len(data.y_train), 1, dtype=torch.float64)], 1)
    Xt = torch.cat([data.X_test.double(), torch.ones(len(data.y_test), 1, dtype=torch.float64)], 1)
    y, yt = data.y_train.long(), data.y_test.numpy()
    n, p1 = X.shape
    C = data.num_classes
    d = C * p1
    Y = torch.nn.functional.one_hot(y, C).double()

    def energy(w: np.ndarray) -> tuple[float, np.ndarray]:
        W = torch.from_numpy(w).view(C, p1)
        logits = X @ W.T
        lse = torch.logsumexp(logits, 1)
        f = float((lse - logits[torch.arange(n), y]).sum() + 0.5 * (W * W).sum())
        g = (torch.softmax(logits, 1) - Y).T @ X + W
        return f, g.reshape(-1).numpy().copy()

    t0 = time.perf_counter()
    res = scipy.optimize.minimize(energy, np.zeros(d), jac=True, method="L-BFGS-B",
                                  options={"maxiter": 5000, "gtol": 1e-8, "ftol": 0.0, "maxcor": 30})
    w_map = res.x
    t_map = time.perf_counter() - t0

    t0 = time.perf_counter()
    P = torch.softmax(X @ torch.from_numpy(w_map).view(C, p1).T, 1)
    H = torch.zeros(d, d, dtype=torch.float64)
    for k in range(C):
        for m in range(k, C):
            s = P[:, k] * ((1.0 if k == m else 0.0) - P[:, m])
            block = X.T @ (s[:, None] * X)
            H[k * p1:(k + 1) * p1, m * p1:(m + 1) * p1] = block
            if m != k:
                H[m * p1:(m + 1) * p1, k * p1:(k + 1) * p1] = block.T
    H.diagonal().add_(1.0)
    L = torch.linalg.cholesky(H)  # H = L L^T; a draw is MAP + L^-T z
    del H
    t_hess = time.perf_counter() - t0

    gen = torch.Generator().manual_seed(args.seed)
    probs = np.zeros((len(yt), C))
    lpd = np.empty(args.draws)
    # marginal variances: diag(H^-1) = column sums of squares of L^-1
    Linv = torch.linalg.solve_triangular(L, torch.eye(d, dtype=torch.float64), upper=False)
    sds = Linv.square().sum(0).sqrt().numpy()
    del Linv
    W0 = torch.from_numpy(w_map)
    for j in range(args.draws):
        z = torch.randn(d, 1, generator=gen, dtype=torch.float64)
        theta = W0 + torch.linalg.solve_triangular(L.T, z, upper=True).view(-1)
        pj = torch.softmax(Xt @ theta.view(C, p1).T, 1).numpy()
        probs += pj
        lpd[j] = float(np.mean(np.log(np.maximum(pj[np.arange(len(yt)), yt], 1e-300))))
    probs /= args.draws
    P_map = torch.softmax(Xt @ W0.view(C, p1).T, 1).numpy()
    out = {
        "map_iterations": int(res.nit), "map_grad_norm": float(np.linalg.norm(res.jac)), "map_s": t_map,
        "hessian_s": t_hess,
        "map": {"accuracy": float(np.mean(P_map.argmax(1) == yt)), "ece": diagnostics.ece(P_map, yt, 15),
                "nll": diagnostics.nll(P_map, yt)},
        "laplace_bma": {"draws": args.draws, "accuracy": float(np.mean(probs.argmax(1) == yt)),
                        "ece": diagnostics.ece(probs, yt, 15), "nll": diagnostics.nll(probs, yt)},
        "test_lpd_mean": float(lpd.mean()), "test_lpd_sd": float(lpd.std(ddof=1)),
        "marginal_sd_quartiles": np.quantile(sds, [0.0, 0.25, 0.5, 0.75, 1.0]).tolist(),
    }
    print(json.dumps(out, indent=1))
    if args.out:
        np.savez(args.out, map=w_map, sd=sds)


if __name__ == "__main__":
    main()
