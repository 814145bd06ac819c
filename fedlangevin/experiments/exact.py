"""Exact first two moments of FA-LD's global iterate on quadratic problems, round by round.

For affine client gradients grad f^c = A_c theta - b_c (a
:class:`~fedlangevin.problems.QuadraticProblem`), one round of K local steps is an affine
map of the broadcast parameter g plus Gaussian noise (Deng et al., eq. 10): client c ends
the round at

    X_c = Phi_c g + h_c + (noise),   Phi_c = M_{c,K} ... M_{c,1},  M_{c,j} = I - eta_j A_c,

with h_c the propagated offsets eta_j b_c. The private noises are independent across
clients, Cov = Pr_c = sum_j Psi_{c,j} Psi_{c,j}^T 2 eta_j tau (1 - rho^2) / q_c (q_c = p_c, eq. 10,
for full participation and the paper's rule; E[w_c^2] / p_c for the calibrated rule of
:mod:`fedlangevin.federation.participation`); the shared
noise couples clients c and c', Sh_{cc'} = sum_j Psi_{c,j} Psi_{c',j}^T 2 eta_j tau rho^2,
with Psi_{c,j} = M_{c,K} ... M_{c,j+1}. The server forms g' = sum_c w_c X_c with weights w
independent of X, so with mu_c = Phi_c m + h_c:

    E g'   = sum_c E[w_c] mu_c =: m'
    Cov g' = sum_{c,c'} E[w_c w_c'] (Phi_c S Phi_c'^T + Sh_{cc'} + (mu_c - m')(mu_c' - m')^T)
             + sum_c E[w_c^2] Pr_c,

(the centring is exact because the weights sum to one). With full participation the law
of g' stays Gaussian and this is its law; with random participation (schemes I and II) the
law is a mixture and these are its exact mean and covariance. In both cases
W2(N(m', Cov g'), target) is the limit, as R -> infinity, of the paper's Sec. 7.1 measure
(the W2 of the Gaussian fitted to R replicate chains).

This module is numpy only and independent of the engine's kernels (it reads only the
participation rule's closed-form weight moments,
:meth:`~fedlangevin.federation.participation.Participation.weight_moments`; it is used to cross-check the
engine's Monte Carlo curves and to locate the optimal K cheaply). ``tests/targets.py``
holds a second, brute-force implementation on the stacked (N d)-dimensional state that the
tests compare against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from fedlangevin.federation.participation import Full, Participation

__all__ = [
    "RoundOperators", "apply_round", "exact_moments", "minibatch_gradient_noise", "noise_weights", "participation_moments",
    "round_operators",
    "stationary_moments", "w2_to_target",
]


@dataclass(frozen=True)
class RoundOperators:
    """One round's affine map and noise, per client (numpy float64).

    phi (N, d, d), offset (N, d), private (N, d, d): Pr_c; shared (N, N, d, d) or ``None``
    when rho = 0: Sh_{cc'}.
    """

    phi: np.ndarray
    offset: np.ndarray
    private: np.ndarray
    shared: np.ndarray | None


def _client_arrays(problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    form = problem.quadratic()
    if form is None:
        raise ValueError("exact moments need a problem with affine gradients (a QuadraticProblem)")
    n, d = problem.num_clients, problem.dim
    a = form.hessian.double().cpu().numpy()
    a = np.broadcast_to(a, (n, d, d))
    b = form.shift.double().cpu().numpy()
    p = problem.weights.double().cpu().numpy()
    return a, b, p


def round_operators(
    problem,
    etas: Sequence[float],
    temperature: float = 1.0,
    correlation: float = 0.0,
    gradient_noise: np.ndarray | None = None,
    noise_weights: np.ndarray | None = None,
) -> RoundOperators:
    """Phi_c, h_c, Pr_c and Sh_{cc'} of one round with local step sizes ``etas`` (K of them).

    ``gradient_noise`` (N, d, d): covariance G_c of an additive, state-independent error of
    client c's stochastic gradient (e.g. :func:`minibatch_gradient_noise`); each step then
    adds eta^2 G_c to the client's private covariance. ``noise_weights``: q (N,) of the private
    noise variance 2 eta tau (1 - rho^2) / q_c (default: the client weights p, eq. 10; the
    participation rule's :func:`noise_weights` otherwise).
    """
    a, b, p = _client_arrays(problem)
    if noise_weights is not None:
        p = np.asarray(noise_weights, dtype=np.float64)
    n, d = b.shape
    eye = np.eye(d)
    rho2 = correlation**2
    phi = np.broadcast_to(eye, (n, d, d)).copy()
    offset = np.zeros((n, d))
    private = np.zeros((n, d, d))
    shared = np.zeros((n, n, d, d)) if rho2 > 0 else None
    for eta in etas:
        m = eye - eta * a  # (N, d, d), symmetric
        phi = m @ phi
        offset = np.einsum("nij,nj->ni", m, offset) + eta * b
        if rho2 < 1 or gradient_noise is not None:
            private = m @ private @ m + (2 * eta * temperature * (1 - rho2) / p)[:, None, None] * eye
            if gradient_noise is not None:
                private = private + eta**2 * gradient_noise
        if shared is not None:
            shared = np.einsum("aij,abjk,blk->abil", m, shared, m) + 2 * eta * temperature * rho2 * eye
    return RoundOperators(phi, offset, private, shared)


def participation_moments(p: np.ndarray, participation: Participation | None = None) -> tuple[np.ndarray, np.ndarray]:
    """E[w] (N,) and E[w w^T] (N, N) of the aggregation weights of a participation rule.

    ``participation`` (default :class:`~fedlangevin.federation.participation.Full`): full (w = p),
    scheme I (S draws with replacement with probabilities p, plain mean: w = counts / S) or scheme II
    (S of N uniformly without replacement, w = 1/S on them, App. C.1; on nearly balanced clients its
    corrected weights, :class:`~fedlangevin.federation.participation.SchemeII`): the rule's closed form,
    :meth:`~fedlangevin.federation.participation.Participation.weight_moments` (``NotImplementedError``
    for a rule of your own that gives none).
    """
    import torch

    ew, eww = _rule(participation).weight_moments(torch.from_numpy(np.array(p, dtype=np.float64)))
    return ew.numpy(), eww.numpy()


def noise_weights(p: np.ndarray, participation: Participation | None = None) -> np.ndarray:
    """q (N,) of the participation rule's private noise variance 2 eta tau (1 - rho^2) / q_c: p for full
    participation and ``noise="paper"``, E[w_c^2] / p_c for ``noise="calibrated"``
    (:meth:`fedlangevin.federation.participation.Participation.noise_weights`)."""
    import torch

    p = np.asarray(p, dtype=np.float64)
    return _rule(participation).noise_weights(torch.from_numpy(p.copy())).numpy()


def _rule(participation: Participation | None) -> Participation:
    if participation is None:
        return Full()
    if not isinstance(participation, Participation) or participation.scheme not in ("full", "I", "II"):
        raise ValueError(
            "participation must be a rule with scheme 'full', 'I' or 'II' (Full(), SchemeI(S) or SchemeII(S)); "
            f"got {participation!r}"
        )
    return participation


def apply_round(ops: RoundOperators, ew: np.ndarray, eww: np.ndarray, full: bool, mean: np.ndarray, cov: np.ndarray):
    """One round of the moment recursion (module docstring): (mean, cov) -> (m', Cov g').

    ``ew``, ``eww``: E[w] and E[w w^T] of :func:`participation_moments`; ``full``: the weights
    are the fixed p (the cheaper Gaussian case)."""
    mu = np.einsum("nij,j->ni", ops.phi, mean) + ops.offset  # (N, d)
    new_mean = ew @ mu
    if full:  # w = p: Cov = P S P^T + sum_c p_c^2 Pr_c + sum_cc' p_c p_c' Sh_cc'
        big_p = np.einsum("n,nij->ij", ew, ops.phi)
        new_cov = big_p @ cov @ big_p.T + np.einsum("n,nij->ij", ew**2, ops.private)
        if ops.shared is not None:
            new_cov = new_cov + np.einsum("a,b,abij->ij", ew, ew, ops.shared)
    else:
        nu = mu - new_mean
        new_cov = (
            np.einsum("ab,aij,jk,blk->il", eww, ops.phi, cov, ops.phi)
            + np.einsum("ab,ai,bj->ij", eww, nu, nu)
            + np.einsum("n,nij->ij", np.diag(eww), ops.private)
        )
        if ops.shared is not None:
            new_cov = new_cov + np.einsum("ab,abij->ij", eww, ops.shared)
    return new_mean, 0.5 * (new_cov + new_cov.T)


def exact_moments(
    problem,
    etas_per_round: Iterable[Sequence[float]],
    temperature: float = 1.0,
    correlation: float = 0.0,
    participation: Participation | None = None,
    init_mean: Sequence[float] | np.ndarray | None = None,
    init_cov: np.ndarray | None = None,
    gradient_noise: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean (T, d) and covariance (T, d, d) of the global parameter after each round.

    ``etas_per_round``: the local step sizes of each round (K values per round). Rounds
    with the same step sizes as the previous one reuse its operators, so a constant step
    size costs one operator computation. ``participation``: the synchronisation rule
    (default :class:`~fedlangevin.federation.participation.Full`; see :func:`participation_moments`). The chains start at ``init_mean`` (default 0)
    with covariance ``init_cov`` (default 0: a point). ``gradient_noise``: see
    :func:`round_operators` (with it the moments are exact, the law no longer Gaussian).
    """
    _, _, p = _client_arrays(problem)
    d = problem.dim
    rule = _rule(participation)
    ew, eww = participation_moments(p, rule)
    q = noise_weights(p, rule)
    full = rule.scheme == "full"
    mean = np.zeros(d) if init_mean is None else np.asarray(init_mean, dtype=np.float64).copy()
    cov = np.zeros((d, d)) if init_cov is None else np.asarray(init_cov, dtype=np.float64).copy()
    means, covs = [], []
    ops, last = None, None
    for etas in etas_per_round:
        key = tuple(float(e) for e in etas)
        if key != last:
            ops, last = round_operators(problem, key, temperature, correlation, gradient_noise, q), key
        mean, cov = apply_round(ops, ew, eww, full, mean, cov)
        means.append(mean)
        covs.append(cov)
    return np.array(means), np.array(covs)


def stationary_moments(
    problem,
    etas: Sequence[float],
    temperature: float = 1.0,
    correlation: float = 0.0,
    participation: Participation | None = None,
    gradient_noise: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean (d,) and covariance (d, d) that the round map of :func:`exact_moments` leaves fixed.

    The long-run law of the global iterate when every round uses the local step sizes
    ``etas``: m = (I - P)^{-1} h with P = sum_c E[w_c] Phi_c, h = sum_c E[w_c] h_c, and the
    covariance solves the linear (Stein) equation
    S = sum_{c,c'} E[w_c w_c'] Phi_c S Phi_c'^T + (the round's constant terms),
    here solved directly as a d^2 x d^2 linear system (row-major vec: vec(Phi S Psi^T) =
    (Phi kron Psi) vec S).
    """
    _, _, p = _client_arrays(problem)
    d = problem.dim
    ew, eww = participation_moments(p, participation)
    ops = round_operators(problem, etas, temperature, correlation, gradient_noise, noise_weights(p, participation))
    big_p = np.einsum("n,nij->ij", ew, ops.phi)
    mean = np.linalg.solve(np.eye(d) - big_p, ew @ ops.offset)
    nu = np.einsum("nij,j->ni", ops.phi, mean) + ops.offset - mean
    const = np.einsum("ab,ai,bj->ij", eww, nu, nu) + np.einsum("n,nij->ij", np.diag(eww), ops.private)
    if ops.shared is not None:
        const = const + np.einsum("ab,abij->ij", eww, ops.shared)
    op = np.einsum("ab,aij,bkl->ikjl", eww, ops.phi, ops.phi).reshape(d * d, d * d)
    cov = np.linalg.solve(np.eye(d * d) - op, const.reshape(-1)).reshape(d, d)
    return mean, 0.5 * (cov + cov.T)


def w2_to_target(problem, means: np.ndarray, covs: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """W2 between N(means[t], covs[t]) and the problem's exact posterior, for every t."""
    from diagnostics import gaussian_w2

    post = problem.posterior(temperature)
    target_mean, target_cov = post[0].double().numpy(), post[1].double().numpy()
    return np.atleast_1d(gaussian_w2(means, covs, target_mean, target_cov))


def minibatch_gradient_noise(problem, batch_size: int) -> np.ndarray:
    """Covariance G_c (N, d, d) of the minibatch gradient error of a Gaussian simulation.

    For :class:`~fedlangevin.problems.GaussianSimulation` the minibatch gradient of client c
    is A_c theta - H xbar_B (H = n Sigma^{-1}, plus the prior's exact term), with xbar_B the
    mean of ``batch_size`` points drawn uniformly with replacement from the client's n_c
    points. Its error H (xbar_c - xbar_B) does not depend on theta and has covariance
    G_c = H S_c H / b, S_c the client's (1/n_c-normalised) data covariance.
    """
    data = getattr(problem, "data", None)
    lik = getattr(problem, "lik_hessian", None)
    if data is None or lik is None:
        raise ValueError("minibatch_gradient_noise needs a GaussianSimulation (per-client data and lik_hessian)")
    x = data.double().cpu().numpy()
    sizes = problem.client_sizes.cpu().numpy()
    h = lik.double().cpu().numpy()
    out = np.empty((x.shape[0], x.shape[2], x.shape[2]))
    for c in range(x.shape[0]):
        xc = x[c, : sizes[c]]
        dev = xc - xc.mean(0)
        out[c] = h @ (dev.T @ dev / sizes[c]) @ h / batch_size
    return out
