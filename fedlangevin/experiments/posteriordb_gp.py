"""posteriordb's ``gp_pois_regr-gp_pois_regr``: a Gaussian-process Poisson regression, federated.

The Stan model (``model.stan`` of the posterior's folder), on N = 11 design points x_i::

    rho ~ gamma(25, 4);  alpha ~ normal(0, 2) on (0, inf);  f_tilde ~ normal(0, 1)   (N values)
    f = L(alpha, rho) f_tilde,  L L^T = K + 1e-10 I,  K_ij = alpha^2 exp(-(x_i - x_j)^2 / (2 rho^2))
    k_i ~ poisson_log(f_i)

is non-centred: the sampler's parameter is theta = (log rho, log alpha, f_tilde) (d = N + 2),
unconstrained, with the log-Jacobians of the two scales in the prior; the reference draws
(Stan's) hold rho, alpha and the transformed parameter f, which :func:`constrain` computes.

Federated: the design points x are public (the GP prior needs all of them, and they carry no
count); client c holds the counts k_i of its points (one or a few). Its negative
log-likelihood is sum_{i in c} exp(f_i) - k_i f_i (+ log k_i!, a constant left out), a sum of
per-point terms (``rowwise=True``: record-level privacy applies, a record being a point's
count). The energy is a :class:`~fedlangevin.problems.CustomProblem` (autodiff through the
Cholesky factor; no closed form is cheaper at N = 11).
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["JITTER", "gp_cholesky", "gp_pois_regr", "reference_names"]

#: the diagonal jitter of Stan's model (``diag_matrix(rep_vector(1e-10, N))``)
JITTER = 1e-10


def reference_names(n: int) -> list[str]:
    """The reference's parameter names, in its order: rho, alpha, f[1..n]."""
    return ["rho", "alpha"] + [f"f[{i + 1}]" for i in range(n)]


def gp_cholesky(x: torch.Tensor, alpha: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """L with L L^T = alpha^2 exp(-(x_i - x_j)^2 / (2 rho^2)) + JITTER I (Stan's ``gp_exp_quad_cov``
    plus the model's jitter); x (N,), alpha and rho scalars (or batched, (...,)): (..., N, N)."""
    sq = (x[:, None] - x[None, :]) ** 2
    cov = alpha[..., None, None] ** 2 * torch.exp(-0.5 * sq / rho[..., None, None] ** 2)
    # cholesky_ex: a matrix that is not positive definite (alpha or rho overflowed on a diverging chain)
    # gives a non-finite factor, hence a non-finite energy the sampler reports, not an exception here
    chol, info = torch.linalg.cholesky_ex(cov + JITTER * torch.eye(x.shape[0], dtype=x.dtype, device=x.device))
    return torch.where((info == 0)[..., None, None], chol, torch.full_like(chol, math.nan))


def _f(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """f = L(alpha, rho) f_tilde for theta (..., N + 2) = (log rho, log alpha, f_tilde): (..., N)."""
    chol = gp_cholesky(x, torch.exp(theta[..., 1]), torch.exp(theta[..., 0]))
    return (chol @ theta[..., 2:, None])[..., 0]


def _prior(theta: torch.Tensor) -> torch.Tensor:
    """The negative log prior of theta (..., N + 2), Jacobians of the two logs included, up to a constant:
    gamma(25, 4) on rho = e^u: 4 e^u - 25 u; half-normal(0, 2) on alpha = e^v: alpha^2 / 8 - v;
    normal(0, 1) on f_tilde."""
    u, v = theta[..., 0], theta[..., 1]
    return 4.0 * torch.exp(u) - 25.0 * u + 0.125 * torch.exp(2 * v) - v + 0.5 * (theta[..., 2:] ** 2).sum(-1)


def gp_pois_regr(data: dict, parts: list[np.ndarray]):
    """The posterior's pieces from its posteriordb ``data`` (N, x, k) and the clients' point
    indices ``parts`` (one int array per client, every point once): ``(problem, constrain,
    unconstrain, potential, clients)`` as :class:`~fedlangevin.experiments.posteriordb.Posterior`
    holds them; ``clients[c]`` = (point indices as float64, counts)."""
    from fedlangevin.problems import CustomProblem

    n = int(data["N"])
    x = torch.as_tensor(np.asarray(data["x"], dtype=np.float64))
    k = torch.as_tensor(np.asarray(data["k"], dtype=np.float64))
    index = torch.arange(n, dtype=torch.float64)
    clients = [(torch.as_tensor(part, dtype=torch.float64), k[torch.as_tensor(part, dtype=torch.long)])
               for part in parts]

    def client_energy(theta, batch):  # the client's points (their indices) and counts
        idx, counts = batch
        f = (index[None, :] == idx[:, None]).to(theta.dtype) @ _f(theta, x)
        return (torch.exp(f) - counts * f).sum()

    var_names = ["log_rho", "log_alpha"] + [f"f_tilde[{i + 1}]" for i in range(n)]
    problem = CustomProblem(client_energy, clients, prior=_prior, dim=n + 2, var_names=var_names, rowwise=True)

    def potential(theta):
        f = _f(theta, x)
        return (torch.exp(f) - k * f).sum() + _prior(theta)

    xn = x.numpy()

    def cholesky_np(alpha, rho):
        cov = alpha[..., None, None] ** 2 * np.exp(-0.5 * (xn[:, None] - xn[None, :]) ** 2 / rho[..., None, None] ** 2)
        return np.linalg.cholesky(cov + JITTER * np.eye(n))

    def constrain(theta):
        theta = np.asarray(theta, dtype=np.float64)
        rho, alpha = np.exp(theta[..., 0]), np.exp(theta[..., 1])
        f = (cholesky_np(alpha, rho) @ theta[..., 2:, None])[..., 0]
        return np.concatenate([rho[..., None], alpha[..., None], f], axis=-1)

    def unconstrain(ref):
        ref = np.asarray(ref, dtype=np.float64)
        rho, alpha = ref[:, 0], ref[:, 1]
        f_tilde = np.linalg.solve(cholesky_np(alpha, rho), ref[:, 2:, None])[..., 0]
        return np.concatenate([np.log(rho)[:, None], np.log(alpha)[:, None], f_tilde], axis=1)

    return problem, constrain, unconstrain, potential, clients
