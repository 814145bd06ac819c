"""Exact law of FA-LD with a drift correction on quadratic problems, round by round.

On a quadratic problem (client gradients A_c theta - b_c, e.g.
:class:`~fedlangevin.problems.CurvatureSimulation` with its per-client Hessians) every
correction of :mod:`fedlangevin.corrections.drift` adds a term that is affine in the client's
local state beta_c and in the sampler's state s between rounds:

    term_c = D_c beta_c + E_c s + k_c,

- control variates (VR-FALD*): D = E = 0, k_c = strength (gbar - g_c), g_c = A_c theta* - b_c;
- conducive gradients with the exact quadratic surrogates expanded at theta*: D_c = Hbar - H_c
  (H_c = A_c, or its diagonal), k_c = (gbar - g_c) - D_c theta*;
- QLSD++ memories without quantisation: s = (theta, h_1, ..., h_N), term_c = hbar - h_c, and
  after the round h_c <- (1 - alpha) h_c + alpha (A_c theta - b_c) (theta: the round's broadcast).

So one round maps s to F s + f + (Gaussian noise of covariance Q): the client states are
tracked as beta_c = P_c s + q_c + e_c, with the (N d)-dimensional noise e of covariance V
(private noise independent across clients, shared noise common to all) through the K local
steps beta_c <- (I - eta (A_c + D_c)) beta_c - eta (E_c s + k_c - b_c) + noise, then averaged
with the weights p (full participation). The exact moments follow m' = F m + f,
S' = F S F^T + Q, and the stationary law solves m = F m + f and the discrete Lyapunov
equation S = F S F^T + Q. Without a correction this is the law of
:mod:`fedlangevin.experiments.exact` (tested equal); here it is written on the stacked
state, independently of that module's per-client operators and of the engine.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.linalg

from fedlangevin.corrections.conducive import Conducive
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.corrections.drift import as_correction
from fedlangevin.corrections.qlsd import QLSDPlusPlus

__all__ = ["corrected_moments", "corrected_round", "corrected_stationary"]


def _quadratic(problem):
    form = problem.quadratic()
    if form is None:
        raise ValueError("the exact law needs a problem with affine gradients (a QuadraticProblem)")
    n, d = problem.num_clients, problem.dim
    a = np.broadcast_to(form.hessian.double().cpu().numpy(), (n, d, d)).copy()
    b = form.shift.double().cpu().numpy()
    p = problem.weights.double().cpu().numpy()
    return a, b, p


def _reference(setting, a, b, p, reference):
    if reference is not None:
        return np.asarray(reference, dtype=np.float64)
    given = getattr(setting, "reference", None)
    if given is not None:
        return np.asarray(given, dtype=np.float64)
    return np.linalg.solve(np.einsum("n,nij->ij", p, a), p @ b)  # the exact mode A^{-1} b


def corrected_round(problem, etas: Sequence[float], correction=None, temperature: float = 1.0,
                    correlation: float = 0.0, reference=None):
    """(F, f, Q) of one round with local step sizes ``etas``; the state is theta (d,), or
    (theta, h_1, ..., h_N) ((N + 1) d,) for QLSD++. ``reference``: theta* of the control
    variates and conducive surrogates (default: the setting's, else the exact mode)."""
    setting = as_correction(correction)
    if setting is not None and not setting.active:
        setting = None
    a, b, p = _quadratic(problem)
    n, d = b.shape
    memory = isinstance(setting, QLSDPlusPlus)
    ds = d + (n * d if memory else 0)
    dmat = np.zeros((n, d, d))
    emat = np.zeros((n, d, ds))
    k = np.zeros((n, d))
    if isinstance(setting, (ControlVariates, Conducive)):
        ref = _reference(setting, a, b, p, reference)
        g = np.einsum("nij,j->ni", a, ref) - b
        k = (p @ g)[None] - g
        if isinstance(setting, ControlVariates):
            k = setting.strength * k
        else:
            if setting.surrogates is not None:
                raise ValueError("the exact law fits the surrogates itself; give a Conducive without surrogates")
            h = a if setting.dense(d) else np.einsum("nii->ni", a)[:, :, None] * np.eye(d)[None]
            dmat = np.einsum("n,nij->ij", p, h)[None] - h
            k = k - np.einsum("nij,j->ni", dmat, ref)
    elif memory:
        for c in range(n):  # hbar - h_c = sum_j p_j h_j - h_c
            for j in range(n):
                emat[c, :, d + j * d: d + (j + 1) * d] += p[j] * np.eye(d)
            emat[c, :, d + c * d: d + (c + 1) * d] -= np.eye(d)
    elif setting is not None:
        raise ValueError(f"no exact law for correction {setting!r}")
    rho2 = correlation**2
    pmat = np.zeros((n, d, ds))
    pmat[:, :, :d] = np.eye(d)
    q = np.zeros((n, d))
    v = np.zeros((n * d, n * d))
    shared = np.kron(np.ones((n, n)), np.eye(d))
    private = np.kron(np.diag(1.0 / p), np.eye(d))
    for eta in etas:
        m = np.eye(d)[None] - eta * (a + dmat)  # (N, d, d)
        pmat = np.einsum("nij,njk->nik", m, pmat) - eta * emat
        q = np.einsum("nij,nj->ni", m, q) + eta * (b - k)
        big = scipy.linalg.block_diag(*m)
        v = big @ v @ big.T + 2 * eta * temperature * (rho2 * shared + (1 - rho2) * private)
    avg = np.kron(p[None, :], np.eye(d))  # (d, N d): theta' = sum_c p_c beta_c
    f_mat = np.zeros((ds, ds))
    f_vec = np.zeros(ds)
    f_mat[:d] = np.einsum("n,nij->ij", p, pmat)
    f_vec[:d] = p @ q
    noise = np.zeros((ds, ds))
    noise[:d, :d] = avg @ v @ avg.T
    if memory:
        alpha = setting.memory_rate
        for c in range(n):
            rows = slice(d + c * d, d + (c + 1) * d)
            f_mat[rows, :d] = alpha * a[c]
            f_mat[rows, rows] = (1 - alpha) * np.eye(d)
            f_vec[rows] = -alpha * b[c]
    return f_mat, f_vec, 0.5 * (noise + noise.T)


def corrected_moments(problem, etas: Sequence[float], rounds: int, correction=None, temperature: float = 1.0,
                      correlation: float = 0.0, reference=None, init_mean=None):
    """Exact mean (T, d) and covariance (T, d, d) of the global parameter after rounds 1..T, from
    chains started at ``init_mean`` (default 0; memories start at 0)."""
    f_mat, f_vec, noise = corrected_round(problem, etas, correction, temperature, correlation, reference)
    d = problem.dim
    m = np.zeros(len(f_vec))
    if init_mean is not None:
        m[:d] = np.asarray(init_mean, dtype=np.float64)
    s = np.zeros((len(f_vec), len(f_vec)))
    means, covs = [], []
    for _ in range(int(rounds)):
        m = f_mat @ m + f_vec
        s = f_mat @ s @ f_mat.T + noise
        means.append(m[:d].copy())
        covs.append(0.5 * (s[:d, :d] + s[:d, :d].T))
    return np.array(means), np.array(covs)


def corrected_stationary(problem, etas: Sequence[float], correction=None, temperature: float = 1.0,
                         correlation: float = 0.0, reference=None):
    """The stationary mean (d,) and covariance (d, d) of the global parameter (``ValueError``
    when the round map is unstable: spectral radius >= 1, the step size is too large)."""
    f_mat, f_vec, noise = corrected_round(problem, etas, correction, temperature, correlation, reference)
    radius = float(np.abs(np.linalg.eigvals(f_mat)).max())
    if radius >= 1:
        raise ValueError(f"the round map is unstable (spectral radius {radius:.4g} >= 1): lower the step size")
    d = problem.dim
    m = np.linalg.solve(np.eye(len(f_vec)) - f_mat, f_vec)
    s = scipy.linalg.solve_discrete_lyapunov(f_mat, noise)
    return m[:d], 0.5 * (s[:d, :d] + s[:d, :d].T)
