"""Convergence bounds of LFL (Amiri, Gündüz, Kulkarni, Poor, *Federated Learning With
Quantized Global Model Updates*; equation numbers of version 2).

Assumptions (Sec. 3.1): E||grad F_m(theta, xi)||^2 <= G^2 (Assumption 1, eq. 8); every F_m is
L-smooth (Assumption 2, eq. 9); Gamma = F* - sum_m (B_m / B) F_m* >= 0 measures the data
heterogeneity. The bounds assume lossless uploads and lossy broadcast with level q1; eps in
[0, 1] is the skewness of Lemma 1 (the paper reports eps ≈ 1e-3 for LFL in practice).

* :func:`theorem1_bound` — strongly convex (mu) case, eq. (11a–c), as a recursion
  b(t+1) = A(t) b(t) + B(t), b(0) = ||theta(0) - theta*||^2 (equivalent to the product–sum).
* :func:`corollary1_bound` / :func:`corollary1_closed_form` — eqs. (12) and (13).
* :func:`theorem2_bound` — non-convex case, eq. (14).
* :func:`tau_coefficients`, :func:`h_tau`, :func:`choose_tau` — eqs. (17)–(18) and the rule
  that follows them.

eta(-1) appears in B(0) and in the t = 0 term of eq. (14) but is not defined by the paper: it
is the ``eta_prev`` argument, defaulting to eta(0) (which reproduces Corollary 1).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from fedlangevin._validation import check_int, check_real

__all__ = [
    "theorem1_terms",
    "theorem1_bound",
    "corollary1_bound",
    "corollary1_closed_form",
    "theorem2_bound",
    "tau_coefficients",
    "h_tau",
    "choose_tau",
]


def _etas(etas: Sequence[float] | float, T: int | None = None) -> np.ndarray:
    if np.isscalar(etas):
        if T is None:
            raise ValueError("a scalar eta needs the number of rounds T")
        e = np.full(check_int("T", T, minimum=1), float(etas))
    else:
        e = np.asarray(etas, dtype=np.float64)
    if e.ndim != 1 or e.size == 0:
        raise ValueError("etas must be a non-empty 1-d sequence of step sizes eta(t)")
    if not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError("etas must be finite and > 0")
    return e


def _common(G, q1, eps, d):
    G = check_real("G", G, low=0.0)
    q1 = check_int("q1", q1, minimum=1)
    eps = check_real("eps", eps, low=0.0, high=1.0)
    d = check_int("d", d, minimum=1)
    return G, q1, eps, d


def theorem1_terms(
    etas: Sequence[float],
    *,
    mu: float,
    tau: int,
    G: float,
    q1: int,
    eps: float,
    d: int,
    Gamma: float = 0.0,
    eta_prev: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A(i) and B(i) of Theorem 1 (eqs. 11b–c) for i = 0..T-1.

    A(i) = 1 - mu eta(i) (tau - eta(i)(tau - 1)),
    B(i) = A(i) (eta(i-1) tau G / (2 q1))^2 eps d + eta(i)^2 (tau^2 + tau - 1) G^2
           + (1 + mu (1 - eta(i))) eta(i)^2 G^2 tau (tau - 1)(2 tau - 1) / 6 + 2 eta(i)(tau - 1) Gamma.

    Requires 0 < eta(t) <= min(1, 1 / (mu tau)) (the theorem's condition).
    """
    e = _etas(etas)
    mu = check_real("mu", mu, low=0.0, low_open=True)
    tau = check_int("tau", tau, minimum=1)
    G, q1, eps, d = _common(G, q1, eps, d)
    Gamma = check_real("Gamma", Gamma, low=0.0)
    cap = min(1.0, 1.0 / (mu * tau))
    if np.any(e > cap * (1 + 1e-12)):
        raise ValueError(f"etas must satisfy 0 < eta(t) <= min(1, 1/(mu tau)) = {cap:.6g} (Theorem 1)")
    prev = e[0] if eta_prev is None else check_real("eta_prev", eta_prev, low=0.0, low_open=True)
    e_prev = np.concatenate(([prev], e[:-1]))
    A = 1.0 - mu * e * (tau - e * (tau - 1))
    B = (
        A * (e_prev * tau * G / (2.0 * q1)) ** 2 * eps * d
        + e**2 * (tau**2 + tau - 1) * G**2
        + (1.0 + mu * (1.0 - e)) * e**2 * G**2 * tau * (tau - 1) * (2 * tau - 1) / 6.0
        + 2.0 * e * (tau - 1) * Gamma
    )
    return A, B


def theorem1_bound(
    etas: Sequence[float],
    *,
    dist0: float,
    mu: float,
    tau: int,
    G: float,
    q1: int,
    eps: float,
    d: int,
    Gamma: float = 0.0,
    eta_prev: float | None = None,
) -> np.ndarray:
    """Bound on E||theta(t) - theta*||^2 for t = 0..T (eq. 11a); entry 0 is ``dist0``."""
    dist0 = check_real("dist0", dist0, low=0.0)
    A, B = theorem1_terms(etas, mu=mu, tau=tau, G=G, q1=q1, eps=eps, d=d, Gamma=Gamma, eta_prev=eta_prev)
    out = np.empty(A.size + 1)
    out[0] = dist0
    for i in range(A.size):
        out[i + 1] = A[i] * out[i] + B[i]
    return out


def corollary1_bound(etas: Sequence[float], *, L: float, **theorem1_kwargs) -> float:
    """E F(theta(T)) - F* <= (L/2) x (Theorem 1 bound at T) (eq. 12)."""
    L = check_real("L", L, low=0.0, low_open=True)
    return 0.5 * L * float(theorem1_bound(etas, **theorem1_kwargs)[-1])


def corollary1_closed_form(
    T: int, *, eta: float, L: float, mu: float, G: float, q1: int, eps: float, d: int, dist0: float
) -> float:
    """Eq. (13), tau = 1 and constant eta:

    (L/2)(1 - mu eta)^T dist0 + (L/2)((1 - mu eta) eps d / (4 q1^2) + 1)(1 - (1 - mu eta)^T) eta G^2 / mu.
    """
    T = check_int("T", T, minimum=1)
    L = check_real("L", L, low=0.0, low_open=True)
    mu = check_real("mu", mu, low=0.0, low_open=True)
    eta = check_real("eta", eta, low=0.0, high=min(1.0, 1.0 / mu), low_open=True)
    G, q1, eps, d = _common(G, q1, eps, d)
    dist0 = check_real("dist0", dist0, low=0.0)
    r = (1.0 - mu * eta) ** T
    return 0.5 * L * r * dist0 + 0.5 * L * ((1.0 - mu * eta) * eps * d / (4.0 * q1 * q1) + 1.0) * (1.0 - r) * eta * G * G / mu


def theorem2_bound(
    etas: Sequence[float],
    *,
    L: float,
    G: float,
    tau: int,
    q1: int,
    eps: float,
    d: int,
    F0_gap: float,
    Gamma: float = 0.0,
    eta_prev: float | None = None,
) -> float:
    """Bound on (1/S1) sum_t eta(t) E||grad F(theta(t))||^2 (Theorem 2, eq. 14), S_k = sum eta^k:

    2 (F(theta0) - F*) / (tau S1) + 2 Gamma / (tau S1)
    + (1/S1) sum_t (eta(t-1) G / (2 q1))^2 (eta(t)(2 tau - 1) L + 2) eps d tau L
    + 2 G^2 tau L S2 / S1 + L^2 G^2 (tau - 1)(2 tau - 1) S3 / (3 S1).
    """
    e = _etas(etas)
    L = check_real("L", L, low=0.0, low_open=True)
    tau = check_int("tau", tau, minimum=1)
    G, q1, eps, d = _common(G, q1, eps, d)
    F0_gap = check_real("F0_gap", F0_gap, low=0.0)
    Gamma = check_real("Gamma", Gamma, low=0.0)
    prev = e[0] if eta_prev is None else check_real("eta_prev", eta_prev, low=0.0, low_open=True)
    e_prev = np.concatenate(([prev], e[:-1]))
    S1, S2, S3 = e.sum(), (e**2).sum(), (e**3).sum()
    quant = ((e_prev * G / (2.0 * q1)) ** 2 * (e * (2 * tau - 1) * L + 2.0)).sum() * eps * d * tau * L
    return float(
        2.0 * F0_gap / (tau * S1)
        + 2.0 * Gamma / (tau * S1)
        + quant / S1
        + 2.0 * G * G * tau * L * S2 / S1
        + L * L * G * G * (tau - 1) * (2 * tau - 1) * S3 / (3.0 * S1)
    )


def tau_coefficients(
    *, eta: float, T: int, L: float, G: float, q1: int, eps: float, d: int, F0_gap: float, Gamma: float = 0.0
) -> tuple[float, float, float, float]:
    """(a_{-1}, a0, a1, a2) of eq. (18) (constant eta):

    a_{-1} = 2 (F(0) - F* + Gamma) / (eta T), a0 = eta^2 L^2 G^2 / 3,
    a1 = (2 - eta L) eta L G^2 (1 + eps d / (4 q1^2)), a2 = eta^2 L^2 G^2 (2/3 + eps d / (2 q1^2)).
    """
    eta = check_real("eta", eta, low=0.0, low_open=True)
    T = check_int("T", T, minimum=1)
    L = check_real("L", L, low=0.0, low_open=True)
    G, q1, eps, d = _common(G, q1, eps, d)
    F0_gap = check_real("F0_gap", F0_gap, low=0.0)
    Gamma = check_real("Gamma", Gamma, low=0.0)
    a_m1 = 2.0 * (F0_gap + Gamma) / (eta * T)
    a0 = eta**2 * L**2 * G**2 / 3.0
    a1 = (2.0 - eta * L) * eta * L * G**2 * (1.0 + eps * d / (4.0 * q1**2))
    a2 = eta**2 * L**2 * G**2 * (2.0 / 3.0 + eps * d / (2.0 * q1**2))
    return a_m1, a0, a1, a2


def h_tau(tau: float, coefficients: tuple[float, float, float, float]) -> float:
    """h(tau) = a_{-1}/tau + a0 + a1 tau + a2 tau^2 (eq. 17)."""
    a_m1, a0, a1, a2 = coefficients
    return a_m1 / tau + a0 + a1 * tau + a2 * tau * tau


def choose_tau(**kwargs) -> int:
    """The number of local steps that minimises h(tau) (Sec. 3.3, after eq. 18).

    tau = 1 if a_{-1} <= a1 + 2 a2; otherwise the integer nearest the positive root of
    (a1 + 2 a2 tau) tau^2 - a_{-1} = 0 (the stationary point of h). Keyword arguments are
    those of :func:`tau_coefficients`.
    """
    a_m1, a0, a1, a2 = tau_coefficients(**kwargs)
    if a_m1 <= a1 + 2.0 * a2:
        return 1
    roots = np.roots([2.0 * a2, a1, 0.0, -a_m1]) if a2 > 0 else np.roots([a1, 0.0, -a_m1])
    real = [r.real for r in roots if abs(r.imag) <= 1e-9 * max(1.0, abs(r)) and r.real > 0]
    if not real:  # cannot happen for a_{-1} > 0 with a1 + 2 a2 >= 0; kept as a guard
        raise ValueError("h'(tau) = 0 has no positive root for these coefficients")
    return max(1, int(math.floor(max(real) + 0.5)))
