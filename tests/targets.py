"""Shared test targets: small quadratic federated problems and an independent, exact
moment recursion for FA-LD on them (numpy only; does not use the engine's code), and
:class:`OpaqueProblem`, a quadratic problem that hides its structure.

For affine client gradients grad f^c(theta) = A_c theta - b_c, the stacked client vector
X = (theta^1, ..., theta^N) evolves linearly with additive Gaussian noise:

    local step:   X <- M X + eta b + noise,  M = blockdiag(I - eta A_c),
                  Cov(noise) = 2 eta tau [rho^2 (J_N ⊗ I_d) + diag((1 - rho^2)/q_c) ⊗ I_d]
                  (q_c = p_c for eq. 10, E[w_c^2] / p_c for the calibrated participation noise)
    synchronise:  g = (w^T ⊗ I_d) X with random weights w independent of X, then X = 1 ⊗ g.

So mean and covariance follow an exact recursion; with full participation the law stays
Gaussian. For random participation E[g] = (E[w]^T ⊗ I) mu and
E[g g^T] = sum_ij E[w_i w_j] (Sigma_ij + mu_i mu_j^T), with E[w w^T] known in closed form.
"""

from __future__ import annotations

import numpy as np

from fedlangevin.problems import FederatedProblem


def weight_moments(p: np.ndarray, scheme: str, s: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """E[w] and E[w w^T] of the aggregation weights for 'full', 'I' or 'II'."""
    n = p.size
    if scheme == "full":
        return p.copy(), np.outer(p, p)
    if scheme == "I":  # counts ~ Multinomial(S, p), w = counts / S
        return p.copy(), (s - 1) / s * np.outer(p, p) + np.diag(p) / s
    if scheme == "II":  # S of N uniformly without replacement, w = 1/S on the chosen ones
        off = (s - 1) / (s * n * (n - 1)) if n > 1 else 0.0
        m2 = np.full((n, n), off)
        np.fill_diagonal(m2, 1.0 / (s * n))
        return np.full(n, 1.0 / n), m2
    raise ValueError(scheme)



def scheme_ii_enumerated_moments(p: np.ndarray, s: int, corrected: bool) -> tuple[np.ndarray, np.ndarray]:
    """E[w] and E[w w^T] of scheme II's weights by enumerating every S-subset of the N clients (exact up to
    rounding; small N only): 1/S on the drawn clients (the plain mean) or, ``corrected``, the nearly
    balanced clients' weights 1/S + (N - 1)/(S - 1) (e_c - mean of the drawn e), e_c = p_c - 1/N."""
    from itertools import combinations

    n = p.size
    ew, eww = np.zeros(n), np.zeros((n, n))
    subsets = list(combinations(range(n), s))
    for subset in subsets:
        idx = np.array(subset)
        w = np.zeros(n)
        if not corrected:
            w[idx] = 1.0 / s
        elif s >= n:
            w = p.copy()
        else:
            e = p[idx] - 1.0 / n
            w[idx] = 1.0 / s + (n - 1) / (s - 1) * (e - e.mean())
        ew += w
        eww += np.outer(w, w)
    return ew / len(subsets), eww / len(subsets)

def fald_moments(
    hessians: np.ndarray,
    shifts: np.ndarray,
    p: np.ndarray,
    init_mean: np.ndarray,
    etas_per_round: list[list[float]],
    tau: float,
    rho: float,
    scheme: str = "full",
    s: int | None = None,
    noise: str = "calibrated",
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Exact (mean, cov) of the global parameter after each round, starting from a point.

    ``noise``: the private noise variance per step is 2 eta tau (1 - rho^2) / q_c with q_c = p_c
    ("paper", eq. 10) or q_c = E[w_c^2] / p_c ("calibrated", the default of the participation
    rules), E[w_c^2] the diagonal of :func:`weight_moments`' E[w w^T]."""
    n, d = shifts.shape
    a = np.broadcast_to(hessians, (n, d, d))
    ew, eww = weight_moments(p, scheme, s)
    qw = p if noise == "paper" or scheme == "full" else np.diag(eww) / p
    g_mean, g_cov = np.asarray(init_mean, float), np.zeros((d, d))
    out = []
    eye = np.eye(d)
    for etas in etas_per_round:
        mu = np.tile(g_mean, n)
        cov = np.kron(np.ones((n, n)), g_cov)
        for eta in etas:
            m = np.zeros((n * d, n * d))
            for c in range(n):
                m[c * d : (c + 1) * d, c * d : (c + 1) * d] = eye - eta * a[c]
            q = 2 * eta * tau * (rho**2 * np.kron(np.ones((n, n)), eye) + np.kron(np.diag((1 - rho**2) / qw), eye))
            mu = m @ mu + eta * shifts.reshape(-1)
            cov = m @ cov @ m.T + q
        mus = mu.reshape(n, d)
        blocks = cov.reshape(n, d, n, d).transpose(0, 2, 1, 3)  # blocks[i, j] = Cov(X_i, X_j)
        g_mean = ew @ mus
        second = np.einsum("ij,ijab->ab", eww, blocks) + np.einsum("ij,ia,jb->ab", eww, mus, mus)
        g_cov = second - np.outer(g_mean, g_mean)
        g_cov = 0.5 * (g_cov + g_cov.T)
        out.append((g_mean.copy(), g_cov.copy()))
    return out


def small_problem_arrays(seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three heterogeneous clients in 2-d with unequal weights (hessians, shifts, p)."""
    rng = np.random.default_rng(seed)
    hs = []
    for scale in (1.0, 5.0, 0.3):
        q, _ = np.linalg.qr(rng.standard_normal((2, 2)))
        hs.append(q @ np.diag([scale, 3.0 * scale]) @ q.T)
    hessians = np.stack(hs)
    hessians = 0.5 * (hessians + hessians.transpose(0, 2, 1))
    shifts = rng.standard_normal((3, 2)) * 2.0
    p = np.array([0.5, 0.3, 0.2])
    return hessians, shifts, p


class OpaqueProblem(FederatedProblem):
    """A problem that exposes only ``grad`` of ``inner`` (e.g. a QuadraticProblem): the engine
    takes its generic gradient path, and, as a class outside fedlangevin, it is a user's own
    problem for checkpoints (not stored; passed again to ``FALD.resume``)."""

    def __init__(self, inner: FederatedProblem) -> None:
        self.inner = inner
        self.num_clients, self.dim, self.weights = inner.num_clients, inner.dim, inner.weights

    def grad(self, theta, *, batch_size=None, generator=None):
        return self.inner.grad(theta)

    def to(self, device=None, dtype=None):
        return OpaqueProblem(self.inner.to(device, dtype))



def assert_moments_within_mc_error(x: np.ndarray, means: np.ndarray, covs: np.ndarray, z: float = 5.0) -> None:
    """Chains x (R, T, d) against exact moments per round (T, d) and (T, d, d): every mean within
    z Monte Carlo standard errors sqrt(var / R), every covariance entry within z of
    sqrt((S_ii S_jj + S_ij^2) / R) (the Gaussian formula)."""
    r = x.shape[0]
    for i in range(len(means)):
        v = np.diag(covs[i])
        assert np.all(np.abs(x[:, i].mean(0) - means[i]) < z * np.sqrt(v / r))
        se = np.sqrt((np.outer(v, v) + covs[i] ** 2) / r)
        assert np.all(np.abs(np.cov(x[:, i], rowvar=False) - covs[i]) < z * se)


def random_quadratic(n: int = 5, d: int = 3, seed: int = 0, random_weights: bool = True):
    """A QuadraticProblem with random per-client Hessians A_c = Q Q^T / d + I and shifts; client
    weights random (normalised U(0.5, 1.5)) or equal."""
    import torch

    from fedlangevin.problems import QuadraticProblem

    f64 = torch.float64
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, d, d, generator=g, dtype=f64)
    a = q @ q.transpose(-1, -2) / d + torch.eye(d, dtype=f64)
    if random_weights:
        w = torch.rand(n, generator=g, dtype=f64) + 0.5
        return QuadraticProblem(a, torch.randn(n, d, generator=g, dtype=f64), w / w.sum())
    return QuadraticProblem(a, torch.randn(n, d, generator=g, dtype=f64), torch.full((n,), 1.0 / n, dtype=f64))


def small_logistic(n_per_client: int = 100, clients: int = 4, seed: int = 0):
    """A three-class logistic regression on 5 Gaussian features, ``clients`` clients of
    ``n_per_client`` records each (labels drawn from the model), with an N(0, 1) prior."""
    import torch

    from fedlangevin.problems import LogisticRegression

    g = torch.Generator().manual_seed(seed)
    w = torch.randn(3, 5, generator=g, dtype=torch.float64)
    out = []
    for _ in range(clients):
        x = torch.randn(n_per_client, 5, generator=g, dtype=torch.float64)
        labels = torch.multinomial(torch.softmax(x @ w.T, dim=1), 1, generator=g).squeeze(1)  # seeded: the same data
        out.append((x, labels))
    return LogisticRegression(out, prior_scale=1.0)
