"""W2 curves of FA-LD on the paper's Gaussian simulation (Deng et al., Sec. 7.1), simulated and exact.

The Monte Carlo measure is the paper's: R replicate chains, and at each communication round
the W2 distance between the Gaussian fitted to the R draws (mean, ddof = 1 covariance) and
the exact posterior (:func:`mc_w2_curve`); the finite-R floor is what R exact draws would give
(:func:`exact_draw_floor`). Each Monte Carlo curve has an exact counterpart, the W2 of the
sampler's own law as R -> oo (:func:`exact_w2_curve`, from
:mod:`fedlangevin.experiments.exact`); :func:`exact_centralised_curve` computes it for 10^5+
rounds when all clients share one Hessian.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlangevin._validation import check_real
from fedlangevin.experiments.exact import exact_moments, w2_to_target
from fedlangevin.federation.participation import Participation
from fedlangevin.problems import CurvatureSimulation, GaussianSimulation, QuadraticProblem

__all__ = [
    "Curve", "affine_scan", "exact_centralised_curve", "exact_draw_floor", "exact_first_below", "exact_w2_curve",
    "loglog_slope", "mc_w2_curve", "simulation_problem", "target_moments",
]


def simulation_problem(
    alpha: float = 1.0,
    curvature_spread: float = 1.0,
    num_clients: int = 50,
    samples_per_client: int = 20,
    seed: int = 0,
) -> QuadraticProblem:
    """The paper's simulation (``curvature_spread = 1``) or its per-client-curvature variant."""
    spread = check_real("curvature_spread", curvature_spread, low=1.0)
    if spread == 1.0:
        return GaussianSimulation(num_clients=num_clients, alpha=alpha, samples_per_client=samples_per_client, seed=seed)
    return CurvatureSimulation(num_clients, alpha, samples_per_client, spread, seed)


def target_moments(problem) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the exact posterior at tau = 1, float64 numpy."""
    mean, cov = problem.posterior(1.0)
    return mean.double().numpy(), cov.double().numpy()


@dataclass
class Curve:
    """W2 after each round: ``w2[i]`` after round i + 1 (K (i + 1) local steps)."""

    local_steps: int
    w2: np.ndarray
    seconds: float = 0.0

    @property
    def rounds(self) -> np.ndarray:
        return np.arange(1, self.w2.size + 1)

    @property
    def steps(self) -> np.ndarray:
        return self.rounds * self.local_steps

    def first_below(self, eps: float) -> int | None:
        """First round with W2 <= eps (``None`` if never)."""
        hit = np.flatnonzero(self.w2 <= eps)
        return int(hit[0]) + 1 if hit.size else None


def mc_w2_curve(
    problem,
    step_size: Any,
    local_steps: int,
    rounds: int,
    *,
    correlation: float = 0.0,
    participation=None,
    chains: int = 300,
    seed: int = 0,
    stop_below: float | None = None,
    chunk_rounds: int = 2000,
    batch_size: int | None = None,
    correction: Any = None,
) -> Curve:
    """The paper's measure: fitted-Gaussian W2 of ``chains`` replicate chains after every round
    (``correction``: a drift correction of :mod:`fedlangevin.corrections.drift`).

    Runs :class:`~fedlangevin.FALD` for up to ``rounds`` rounds in chunks (bounded memory);
    with ``stop_below`` it stops after the chunk in which W2 first falls to that level.
    """
    import fedlangevin as fl

    mean, cov = target_moments(problem)
    sampler = fl.FALD(problem, step_size=step_size, local_steps=local_steps, correlation=correlation,
                      participation=participation, chains=chains, seed=seed, batch_size=batch_size,
                      correction=correction, check_local_bias=False)  # the paper's fixed K, on purpose
    parts, done = [], 0
    t0 = time.perf_counter()
    while done < rounds:
        n = min(chunk_rounds, rounds - done)
        w = sampler.run(n, progress=False).w2(mean, cov)
        parts.append(w)
        done += n
        if stop_below is not None and bool((w <= stop_below).any()):
            break
    return Curve(local_steps, np.concatenate(parts), time.perf_counter() - t0)


def exact_w2_curve(
    problem,
    step_size: Any,
    local_steps: int,
    rounds: int,
    *,
    correlation: float = 0.0,
    participation: Participation | None = None,
) -> Curve:
    """W2 of the sampler's exact law (the R -> oo limit of :func:`mc_w2_curve`); ``participation``
    as in :func:`~fedlangevin.experiments.exact.exact_moments` (default full)."""
    from fedlangevin.federation.schedules import as_schedule, step_sizes

    k = local_steps
    schedule = as_schedule(step_size, problem)
    if isinstance(step_size, (int, float)):
        etas = [[float(step_size)] * k] * rounds
    else:
        flat = step_sizes(schedule, 0, rounds * k)
        etas = [flat[i * k : (i + 1) * k] for i in range(rounds)]
    t0 = time.perf_counter()
    means, covs = exact_moments(problem, etas, 1.0, correlation, participation)
    return Curve(k, w2_to_target(problem, means, covs), time.perf_counter() - t0)


def exact_draw_floor(problem, chains: int, seed: int = 0):
    """The fitted-Gaussian W2 of ``chains`` exact posterior draws (400 repeats): the level a
    perfect sampler's Monte Carlo curve sits at (:func:`diagnostics.w2_floor`)."""
    from diagnostics import w2_floor
    from fedlangevin._validation import check_fits, check_int

    chains, repeats = check_int("chains", chains, 2), 400
    # w2_floor's own memory check (3 float64 arrays of repeats x n x d) would name its n: named chains here
    check_fits("chains", 3 * repeats * chains * problem.dim * 8, "cpu",
               f"the exact-draw floor ({repeats} repeats of {chains} draws of d = {problem.dim})", "use fewer chains")
    mean, cov = target_moments(problem)
    return w2_floor(mean, cov, chains, repeats=repeats, seed=seed)


def exact_first_below(problem, step_size, k, eps, max_rounds: int | None = None, chunk: int = 2000) -> int | None:
    """First round whose exact W2 is <= eps (chunks of rounds, stops early); None if not by max_rounds."""
    from fedlangevin.experiments.exact import apply_round, participation_moments, round_operators

    ops = round_operators(problem, [step_size] * k)
    ew, eww = participation_moments(problem.weights.double().numpy())
    tm, tc = target_moments(problem)
    from diagnostics import gaussian_w2

    mean, cov = np.zeros(problem.dim), np.zeros((problem.dim, problem.dim))
    done = 0
    limit = max_rounds if max_rounds is not None else 10**7
    while done < limit:
        n = min(chunk, limit - done)
        ms, cs = np.empty((n, problem.dim)), np.empty((n, problem.dim, problem.dim))
        for i in range(n):
            mean, cov = apply_round(ops, ew, eww, True, mean, cov)
            ms[i], cs[i] = mean, cov
        w = np.atleast_1d(gaussian_w2(ms, cs, tm, tc))
        hit = np.flatnonzero(w <= eps)
        if hit.size:
            return done + int(hit[0]) + 1
        done += n
        if max_rounds is None and done >= 50 * chunk and np.all(np.abs(np.diff(w[-10:])) < 1e-12):
            return None  # stationary above eps
    return None


def loglog_slope(steps: np.ndarray, w: np.ndarray, lo: float, hi: float) -> float:
    """Least-squares slope of log w against log steps over lo <= steps <= hi (NaN if < 2 points)."""
    sel = (steps >= lo) & (steps <= hi)
    return float(np.polyfit(np.log(steps[sel]), np.log(w[sel]), 1)[0]) if sel.sum() >= 2 else float("nan")


def exact_centralised_curve(problem, schedule, k: int, rounds: int, gradient_noise: np.ndarray | None = None):
    """Exact W2 after each round for a step-size schedule, on a problem with one shared Hessian.

    With A_c = A for every client, averaging commutes with the local updates and the global
    law after k local steps is that of k steps of centralised Langevin on f with per-step
    noise covariance 2 eta I + eta^2 G, G = sum_c p_c^2 G_c the aggregated gradient-noise
    covariance. In A's eigenbasis (A = V diag(w) V^T) every entry of the mean and of the
    covariance follows a scalar first-order recursion,

        m_i <- (1 - eta w_i) m_i + eta b~_i,
        C_ij <- (1 - eta w_i)(1 - eta w_j) C_ij + 2 eta [i = j] + eta^2 G~_ij,

    solved with a chunked cumulative-product scan (exact and vectorised: 10^6 steps in about
    a second). Cross-checked against :func:`~fedlangevin.experiments.exact.exact_moments`.
    """
    form = problem.quadratic()
    if not form.shared:
        raise ValueError("the long exact curve needs identical client Hessians")
    a = form.hessian.double().numpy()
    b = problem.global_shift.double().numpy()
    p = problem.weights.double().numpy()
    w, v = np.linalg.eigh(a)
    d = w.size
    bt = v.T @ b
    g = np.zeros((d, d)) if gradient_noise is None else v.T @ np.einsum("n,nij->ij", p**2, gradient_noise) @ v
    n = rounds * k
    etas = np.array([schedule(i) for i in range(n)]) if callable(schedule) else np.full(n, float(schedule))
    factor = 1.0 - etas[:, None] * w[None, :]  # (n, d)
    means = affine_scan(factor, etas[:, None] * bt[None, :], np.zeros(d))[k - 1 :: k]
    pair = (factor[:, :, None] * factor[:, None, :]).reshape(n, d * d)
    inject = (2.0 * etas[:, None, None] * np.eye(d) + etas[:, None, None] ** 2 * g).reshape(n, d * d)
    covs = affine_scan(pair, inject, np.zeros(d * d))[k - 1 :: k].reshape(rounds, d, d)
    from diagnostics import gaussian_w2

    w2 = np.atleast_1d(gaussian_w2(means, covs, bt / w, np.diag(1.0 / w)))
    return np.arange(1, rounds + 1) * k, w2


def affine_scan(a: np.ndarray, c: np.ndarray, x0: np.ndarray, chunk: int = 256) -> np.ndarray:
    """x_j = a_j x_{j-1} + c_j for all j (rows), by cumulative products over chunks.

    Within a chunk x_j = P_j (x_0 + sum_{i<=j} c_i / P_i) with P_j = prod_{i<=j} a_i; chunks
    of 256 steps keep P_j far from underflow for |a| >= e^-0.5.
    """
    out = np.empty_like(c)
    x = x0
    for s in range(0, a.shape[0], chunk):
        p = np.cumprod(a[s : s + chunk], axis=0)
        out[s : s + chunk] = p * (x + np.cumsum(c[s : s + chunk] / p, axis=0))
        x = out[min(s + chunk, a.shape[0]) - 1]
    return out
