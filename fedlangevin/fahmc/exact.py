"""Exact first two moments of FA-HMC's global (theta, v) on quadratic problems, round by round, and
its stationary law.

For affine client gradients grad f^c = A_c theta - b_c (a
:class:`~fedlangevin.problems.QuadraticProblem`) every operator of a local step
(:mod:`fedlangevin.fahmc.kernel`, eq. 2) is affine in client c's stacked state z_c = (theta_c, v_c)
(2d numbers), with M the preconditioner (the matrix multiplying the force; the inverse mass matrix
in HMC's terms):

    B(s): z <- [[I, 0], [-s M A_c, I]] z + (0, s M b_c)
    A(s): z <- [[I, s I], [0, I]] z
    O:    z <- [[I, 0], [0, a I]] z + (0, noise),  Cov(noise) = tau (1 - a^2) M (rho^2 shared + (1 - rho^2) / q_c
                                                                                   private)

(q_c = p_c for full participation and the paper's rule, E[w_c^2] / p_c for the calibrated rule of
:mod:`fedlangevin.federation.participation`)

so a round of K local steps maps the broadcast z to client c's

    Z_c = Phi_c z + h_c + (noise),

with private noise covariance Pr_c (independent across clients) and shared cross-covariance
Sh_{cc'} (the shared normals are the same vector for every client), exactly the structure of
FA-LD's round in :mod:`fedlangevin.experiments.exact` with d replaced by 2d. The server forms z' =
sum_c w_c Z_c with the participation rule's weights, independent of Z, so the moment recursion is
:func:`fedlangevin.experiments.exact.apply_round` on these operators (for full participation the
law stays Gaussian and this is it; for schemes I and II the law is a mixture and these are its
exact mean and covariance). The stationary law solves

    m = P m + sum_c E[w_c] h_c,     P = sum_c E[w_c] Phi_c,
    S = sum_{c,c'} E[w_c w_c'] Phi_c S Phi_c'^T + C,

for full participation S = P S P^T + C, a discrete Lyapunov equation
(:func:`scipy.linalg.solve_discrete_lyapunov`); with random participation the covariance of the
weights adds the positive map L(S) = sum_{cc'} Cov(w)_{cc'} Phi_c S Phi_c'^T, and S is the limit of
S_{j+1} = dlyap(P, L(S_j) + C) (a regular splitting: it converges whenever the recursion is
stable, geometrically at the rate of L's share).

Moments are of the stacked (theta, v) (2d): the first d coordinates are theta, the last d the
velocity ``state.momentum``. numpy and scipy only, independent of the kernel's code (it reads the
participation rule's ``scheme`` and ``num_sampled``).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
from scipy.linalg import solve_discrete_lyapunov

from fedlangevin._validation import check_choice, check_real
from fedlangevin.experiments.exact import RoundOperators, apply_round, noise_weights, participation_moments
from fedlangevin.federation.participation import Full, Participation

__all__ = ["exact_moments", "preconditioner_matrix", "round_operators", "stationary_moments"]

_SPLITTINGS = ("BAOAB", "OBABO")


def preconditioner_matrix(preconditioner: Any, dim: int) -> np.ndarray:
    """M (d, d) float64 from ``None`` (I), a (d,) positive vector (diagonal) or a (d, d) symmetric
    positive-definite matrix (``ValueError`` naming ``preconditioner`` otherwise)."""
    if preconditioner is None:
        return np.eye(dim)
    try:
        m = np.asarray(preconditioner, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"preconditioner must be None, a ({dim},) positive vector or a symmetric ({dim}, {dim}) "
                         f"matrix; got {type(preconditioner).__name__}") from None
    if m.shape == (dim,):
        m = np.diag(m)
    if m.shape != (dim, dim) or not np.isfinite(m).all() or not np.allclose(m, m.T, rtol=1e-10, atol=1e-300):
        raise ValueError(f"preconditioner must be None, a ({dim},) positive vector or a symmetric ({dim}, {dim}) "
                         f"matrix; got shape {m.shape}")
    if np.linalg.eigvalsh(m).min() <= 0:
        raise ValueError("preconditioner must be positive definite")
    return 0.5 * (m + m.T)


def _client_arrays(problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    form = problem.quadratic() if callable(getattr(problem, "quadratic", None)) else None
    if form is None:
        raise ValueError("problem: exact moments need a problem with affine gradients (a QuadraticProblem)")
    n, d = problem.num_clients, problem.dim
    a = np.broadcast_to(form.hessian.double().cpu().numpy(), (n, d, d))
    return a, form.shift.double().cpu().numpy(), problem.weights.double().cpu().numpy()


def round_operators(problem, etas: Sequence[float], friction: float, temperature: float = 1.0,
                    correlation: float = 0.0, preconditioner: Any = None, splitting: str = "BAOAB",
                    noise_weights: np.ndarray | None = None) -> RoundOperators:
    """Phi_c (N, 2d, 2d), h_c (N, 2d), Pr_c (N, 2d, 2d) and Sh_{cc'} (N, N, 2d, 2d) (``None`` when
    rho = 0) of one round of local steps ``etas`` (the module docstring). ``noise_weights``: q (N,)
    in place of p_c in the private refresh noise (1 - rho^2) / q_c (default: p; the participation
    rule's :func:`fedlangevin.experiments.exact.noise_weights` otherwise)."""
    friction = check_real("friction", friction, low=0.0, low_open=True)
    temperature = check_real("temperature", temperature, low=0.0, low_open=True)
    correlation = check_real("correlation", correlation, low=0.0, high=1.0)
    splitting = check_choice("splitting", splitting, _SPLITTINGS)
    a_c, b_c, p = _client_arrays(problem)
    if noise_weights is not None:
        p = np.asarray(noise_weights, dtype=np.float64)
    n, d = b_c.shape
    m = preconditioner_matrix(preconditioner, d)
    eye, zero = np.eye(d), np.zeros((d, d))
    rho2 = correlation ** 2
    ops = {"phi": np.broadcast_to(np.eye(2 * d), (n, 2 * d, 2 * d)).copy(), "offset": np.zeros((n, 2 * d)),
           "private": np.zeros((n, 2 * d, 2 * d)), "shared": np.zeros((n, n, 2 * d, 2 * d)) if rho2 > 0 else None}
    kick_block = np.einsum("ij,njk->nik", m, a_c)  # M A_c
    kick_offset = b_c @ m.T                          # M b_c

    def kick(s: float) -> None:
        t = np.broadcast_to(np.eye(2 * d), (n, 2 * d, 2 * d)).copy()
        t[:, d:, :d] = -s * kick_block
        o = np.concatenate([np.zeros((n, d)), s * kick_offset], axis=1)
        _apply(ops, t, o)

    def drift(s: float) -> None:
        t = np.block([[eye, s * eye], [zero, eye]])
        _apply(ops, np.broadcast_to(t, (n, 2 * d, 2 * d)), np.zeros((n, 2 * d)))

    def refresh(h: float) -> None:
        a = math.exp(-friction * h)
        t = np.block([[eye, zero], [zero, a * eye]])
        _apply(ops, np.broadcast_to(t, (n, 2 * d, 2 * d)), np.zeros((n, 2 * d)))
        q = np.zeros((2 * d, 2 * d))
        q[d:, d:] = temperature * -math.expm1(-2.0 * friction * h) * m
        if rho2 < 1:
            ops["private"] = ops["private"] + ((1 - rho2) / p)[:, None, None] * q
        if ops["shared"] is not None:
            ops["shared"] = ops["shared"] + rho2 * q

    for h in etas:
        h = check_real("etas", h, low=0.0, low_open=True)
        if splitting == "BAOAB":
            kick(h), drift(h / 2), refresh(h), drift(h / 2)
        else:
            kick(h / 2), refresh(h), kick(h / 2), drift(h)
    return RoundOperators(ops["phi"], ops["offset"], ops["private"], ops["shared"])


def _apply(ops: dict, t: np.ndarray, o: np.ndarray) -> None:
    """Compose one affine operator z <- T_c z + o_c (no noise) after the round so far."""
    ops["phi"] = t @ ops["phi"]
    ops["offset"] = np.einsum("nij,nj->ni", t, ops["offset"]) + o
    ops["private"] = t @ ops["private"] @ t.transpose(0, 2, 1)
    if ops["shared"] is not None:
        ops["shared"] = np.einsum("aij,abjk,blk->abil", t, ops["shared"], t)


def _start(d: int, init_mean: Any, init_cov: Any) -> tuple[np.ndarray, np.ndarray]:
    mean = np.zeros(2 * d)
    if init_mean is not None:
        given = np.asarray(init_mean, dtype=np.float64)
        if given.shape not in ((d,), (2 * d,)):
            raise ValueError(f"init_mean must have shape ({d},) (theta; zero momentum) or ({2 * d},); got {given.shape}")
        mean[: given.size] = given
    cov = np.zeros((2 * d, 2 * d))
    if init_cov is not None:
        given = np.asarray(init_cov, dtype=np.float64)
        if given.shape not in ((d, d), (2 * d, 2 * d)):
            raise ValueError(f"init_cov must have shape ({d}, {d}) or ({2 * d}, {2 * d}); got {given.shape}")
        k = given.shape[0]
        cov[:k, :k] = given
    return mean, cov


def _rule(participation: Participation | None) -> Participation:
    return Full() if participation is None else participation


def exact_moments(problem, etas_per_round: Iterable[Sequence[float]], friction: float, temperature: float = 1.0,
                  correlation: float = 0.0, participation: Participation | None = None, preconditioner: Any = None,
                  splitting: str = "BAOAB", init_mean: Any = None, init_cov: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean (T, 2d) and covariance (T, 2d, 2d) of the global (theta, v) after each round.

    ``etas_per_round``: each round's local step sizes (rounds with the previous round's step sizes
    reuse its operators). The chains start at ``init_mean`` ((d,): theta with zero momentum, as
    :meth:`FAHMCKernel.init`; or (2d,)), default 0, with covariance ``init_cov`` ((d, d) or (2d, 2d),
    default 0: a point). ``participation``: Full (default), SchemeI or SchemeII."""
    rule = _rule(participation)
    _, _, p = _client_arrays(problem)
    ew, eww = participation_moments(p, rule)
    q = noise_weights(p, rule)
    full = rule.scheme == "full"
    mean, cov = _start(problem.dim, init_mean, init_cov)
    means, covs, ops, last = [], [], None, None
    for etas in etas_per_round:
        key = tuple(float(e) for e in etas)
        if key != last:
            ops, last = round_operators(problem, key, friction, temperature, correlation, preconditioner, splitting,
                                        q), key
        mean, cov = apply_round(ops, ew, eww, full, mean, cov)
        means.append(mean)
        covs.append(cov)
    return np.array(means), np.array(covs)


def stationary_moments(problem, etas: Sequence[float], friction: float, temperature: float = 1.0,
                       correlation: float = 0.0, participation: Participation | None = None, preconditioner: Any = None,
                       splitting: str = "BAOAB", tol: float = 1e-13, max_iter: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    """Mean (2d,) and covariance (2d, 2d) of the law the round map of :func:`exact_moments` leaves
    fixed when every round has the local step sizes ``etas`` (module docstring); ``ValueError`` when
    the round map is unstable (a step size too large for the curvature)."""
    rule = _rule(participation)
    _, _, p = _client_arrays(problem)
    ew, eww = participation_moments(p, rule)
    ops = round_operators(problem, etas, friction, temperature, correlation, preconditioner, splitting,
                          noise_weights(p, rule))
    big_p = np.einsum("n,nij->ij", ew, ops.phi)
    radius = float(np.abs(np.linalg.eigvals(big_p)).max())
    if radius >= 1:
        raise ValueError(f"etas: the round map is unstable (spectral radius {radius:.4g} >= 1); use smaller steps")
    mean = np.linalg.solve(np.eye(big_p.shape[0]) - big_p, ew @ ops.offset)
    nu = np.einsum("nij,j->ni", ops.phi, mean) + ops.offset - mean
    const = np.einsum("ab,ai,bj->ij", eww, nu, nu) + np.einsum("n,nij->ij", np.diag(eww), ops.private)
    if ops.shared is not None:
        const = const + np.einsum("ab,abij->ij", eww, ops.shared)
    cov = solve_discrete_lyapunov(big_p, const)
    if rule.scheme != "full":  # the weights' covariance: S = dlyap(P, L(S) + C), iterated to its fixed point
        spread = eww - np.outer(ew, ew)
        for _ in range(max_iter):
            extra = np.einsum("ab,aij,jk,blk->il", spread, ops.phi, cov, ops.phi)
            new = solve_discrete_lyapunov(big_p, const + 0.5 * (extra + extra.T))
            change = np.abs(new - cov).max()
            cov = new
            if change <= tol * max(np.abs(cov).max(), 1e-300):
                break
        else:
            raise ValueError("etas: the second moments do not converge under random participation (the round map "
                             "is unstable in mean square); use smaller steps")
    return mean, 0.5 * (cov + cov.T)
