"""One-shot consensus Monte Carlo (Scott et al. 2016): a communication baseline of one round.

Every client samples its own **sub-posterior** locally and uploads its draws once; the server
combines them. With FA-LD's client energies f^c = (1/p_c) ell^c + U_0 (ell^c the client's
negative log-likelihood, U_0 the negative log prior, p_c its weight; Deng et al., eq. 7) the
global energy is U = sum_c p_c f^c, so the sub-posteriors

    pi_c(theta) ∝ exp(-p_c f^c(theta) / tau) = exp(-(ell^c(theta) + p_c U_0(theta)) / tau)

multiply to the posterior pi ∝ exp(-U / tau) exactly. This is Scott et al.'s factorisation with
prior^(p_c) in place of their prior^(1/N) (both make the product the posterior; with p_c each
client's share of the prior is its share of the data, and the two agree for equal clients).

**The combination** (Scott et al., eq. 2): draw s of every client is combined into one draw

    theta_s = (sum_c W_c)^(-1) sum_c W_c theta_{c,s},       W_c = Sigma_c^(-1),

Sigma_c the sample covariance of client c's draws (all chains and draws pooled). When every
sub-posterior is Gaussian, N(mu_c, Sigma_c), and the W_c are the exact precisions, theta_s is
exactly a draw of the posterior N((sum W_c)^-1 sum W_c mu_c, (sum W_c)^-1), the product of the
Gaussians; with estimated W_c the combination is off by their estimation error, and on a
non-Gaussian sub-posterior it is an approximation whose error the benchmark measures
(``docs/consensus.md``). Draw s of chain r of every client is combined with draw s of chain r
of the others: independent draws, so the combined chains keep the clients' autocorrelation.

**Local sampling** (``local=``): ``"nuts"`` (default) runs :func:`~fedlangevin.baselines.federated_nuts`
on the client's sub-posterior alone (:class:`SubPosterior`: a one-client problem of energy
p_c f^c / tau; it needs the client's energy: quadratic, logistic, autodiff problems and the
posteriordb regressions expose it); ``"fald"`` runs :class:`fedlangevin.FALD` with N = 1 on it
(K = 1, every default; no energy needed). Either way the client's gradients are local work, not
communication: they are counted as ``gradient_evaluations``.

**Communication**: one round. Up: every client's draws, chains x draws x d floats (the server
computes W_c from them: nothing else is sent); down: each client's weight p_c (1 float; the
settings, seeds and the start, zeros, are agreed in advance). Like federated NUTS this is a
benchmark baseline, not a private sampler: the draws of a sub-posterior are released as they
are, with no privacy accounting.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedlangevin._validation import check_bool, check_choice, check_fits, check_int, check_real, refuse_non_real
from fedlangevin.problems.base import FederatedProblem, check_problem

__all__ = ["ConsensusResult", "SubPosterior", "client_energy", "combine", "consensus_monte_carlo"]

LOCAL_SAMPLERS = ("nuts", "fald")


def client_energy(problem: FederatedProblem, client: int):
    """theta (M, d) -> f^c(theta) (M,) of client ``client`` (its energy in FA-LD's split), or None when
    ``problem`` exposes no client energy: from its quadratic form (1/2 theta^T A_c theta - b_c^T theta),
    an autodiff problem's ``energy`` (theta (R, N, d) -> (R, N)) or its ``client_energy`` (theta
    (..., N, d) -> (..., N): logistic regression, the posteriordb regressions)."""
    from fedlangevin.problems._autodiff import AutodiffProblem

    form = problem.quadratic()
    n = problem.num_clients
    if form is not None:
        a = form.hessian if form.hessian.dim() == 2 else form.hessian[client]
        b = form.shift[client]
        return lambda theta: 0.5 * ((theta @ a.to(theta)) * theta).sum(-1) - theta @ b.to(theta)
    # an autodiff problem's energy first: a CustomProblem's ``client_energy`` is the user's (theta, batch) function
    fn = problem.energy if isinstance(problem, AutodiffProblem) else getattr(problem, "client_energy", None)
    if fn is None:
        return None
    return lambda theta: fn(theta[:, None, :].expand(theta.shape[0], n, theta.shape[-1]).contiguous())[:, client]


class SubPosterior(FederatedProblem):
    """Client ``client``'s sub-posterior exp(-p_c f^c / tau) as a one-client problem of weight 1 (so
    that a sampler of the problem's law samples it): ``grad`` is (p_c / tau) grad f^c (through
    ``problem.clients([client])``, minibatches included), ``global_energy`` (p_c / tau) f^c where the
    problem exposes its client energies (:func:`client_energy`; else ``None``: no NUTS, FA-LD only),
    ``posterior`` exact for a quadratic client with A_c positive definite. ``evaluations`` counts the
    gradient evaluations (one per chain per call), shared by the copies ``to`` makes."""

    def __init__(self, problem: FederatedProblem, client: int, temperature: float = 1.0) -> None:
        check_problem(problem)
        self.client = check_int("client", client, 0, problem.num_clients - 1)
        self.temperature = check_real("temperature", temperature, low=0.0, low_open=True)
        self.problem = problem
        self.one = problem.clients([self.client])
        self.scale = float(problem.weights[self.client]) / self.temperature
        self.num_clients, self.dim = 1, int(problem.dim)
        self.weights = torch.ones(1, dtype=torch.float64)
        self.client_sizes = self.one.client_sizes
        self.var_names = problem.var_names
        self._energy = client_energy(problem, self.client)
        self._count = [0]
        if self._energy is None:  # no energy: a sampler must not find one (NUTS is refused, FA-LD's rule adapts)
            self.global_energy = None

    @property
    def evaluations(self) -> int:
        return self._count[0]

    def grad(self, theta, *, batch_size=None, generator=None):
        self._count[0] += int(theta.shape[0])
        return self.one.grad(theta, batch_size=batch_size, generator=generator) * self.scale

    def global_energy(self, theta: torch.Tensor) -> torch.Tensor:  # replaced by None when there is no energy
        """(p_c / tau) f^c(theta) for theta (..., d)."""
        flat = theta.reshape(-1, self.dim)
        return (self._energy(flat) * self.scale).reshape(theta.shape[:-1])

    def posterior(self, temperature: float = 1.0):
        """N(A_c^-1 b_c, (tau / p_c) A_c^-1) for a quadratic client (``temperature`` multiplies tau);
        None otherwise or when A_c is singular."""
        form = self.problem.quadratic()
        if form is None:
            return None
        a = (form.hessian if form.hessian.dim() == 2 else form.hessian[self.client]).double().cpu()
        if float(torch.linalg.eigvalsh(a).min()) <= 0:
            return None
        cov = temperature / self.scale * torch.linalg.inv(a)
        return torch.linalg.solve(a, form.shift[self.client].double().cpu()), 0.5 * (cov + cov.T)

    def to(self, device=None, dtype=None):
        new = copy.copy(self)
        new.problem = self.problem.to(device=device, dtype=dtype)
        new.one = self.one.to(device=device, dtype=dtype)
        if self._energy is not None:
            new._energy = client_energy(new.problem, self.client)
        return new

    def parameter_names(self) -> list[str]:
        return self.problem.parameter_names()


def _power_of_two_scale(a: np.ndarray) -> int:
    """k with 2^k max|a| in [0.5, 1) (0 for an all-zero ``a``): scaling by 2^k is exact in float64, and
    squares and products of the scaled values neither overflow nor underflow."""
    top = float(np.abs(a).max())
    return 0 if top == 0.0 else -int(np.frexp(top)[1])


def combine(client_draws: Any, weights: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Scott et al.'s combination (module docstring) of ``client_draws`` (N, chains, draws, d), finite:
    returns the combined draws (chains, draws, d) and the weights W (N, d, d) used. ``weights``:
    None (each client's inverse sample covariance, over its chains x draws >= d + 1 draws), or the
    W_c as an (N, d, d) array of symmetric positive-definite matrices (e.g. exact precisions).
    ValueError naming the argument.

    The combination is computed on the draws and weights scaled by powers of two (exact), so any
    finite draws give finite combined draws: the average is linear in the draws and does not depend
    on a common factor of the W_c. Estimated W_c whose entries float64 cannot hold (draws of spread
    beyond about 1e154 or below 1e-154) are returned times a common power of two (the W_c of the
    scaled draws)."""
    refuse_non_real("client_draws", client_draws)  # "1.5" would parse: numbers only
    x = np.asarray(client_draws, dtype=np.float64)
    if x.ndim != 4 or min(x.shape) < 1:
        raise ValueError(f"client_draws must have shape (N clients, chains, draws, d); got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("client_draws must be finite")
    n, r, s, d = x.shape
    shift = _power_of_two_scale(x)
    y = np.ldexp(x, shift)
    if weights is None:
        if r * s < d + 1:
            raise ValueError(f"client_draws: a sample covariance needs chains x draws >= d + 1 = {d + 1} draws per "
                             f"client; got {r * s}")
        flat = y.reshape(n, r * s, d)
        centred = flat - flat.mean(1, keepdims=True)
        cov = np.einsum("nmi,nmj->nij", centred, centred) / (r * s - 1)
        try:
            w_scaled = np.linalg.inv(cov)
            np.linalg.cholesky(w_scaled)
        except np.linalg.LinAlgError:
            raise ValueError("client_draws: a client's draws have a singular sample covariance (draws that do not "
                             "move in some direction); pass weights") from None
        w = np.ldexp(w_scaled, 2 * shift)  # the W_c of the draws themselves, where float64 holds them
        held = np.isfinite(w).all() and (np.abs(w)[w_scaled != 0] >= np.finfo(np.float64).tiny).all()
        if not held:
            w = w_scaled
    else:
        refuse_non_real("weights", weights)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n, d, d):
            raise ValueError(f"weights must have shape (N, d, d) = ({n}, {d}, {d}); got {w.shape}")
        if not np.isfinite(w).all() or not np.allclose(w, np.swapaxes(w, 1, 2), rtol=1e-10, atol=0.0):
            raise ValueError("weights must be finite symmetric matrices")
        if (np.linalg.eigvalsh(w).min(axis=1) <= 0).any():
            raise ValueError("weights must be positive definite")
        w_scaled = np.ldexp(w, _power_of_two_scale(w))
    total = w_scaled.sum(0)
    combined = np.linalg.solve(total, np.einsum("nij,nrsj->irs", w_scaled, y).reshape(d, -1)).reshape(d, r, s)
    return np.ascontiguousarray(np.ldexp(np.moveaxis(combined, 0, -1), -shift)), w


@dataclass(frozen=True)
class ConsensusResult:
    """A consensus Monte Carlo run (:func:`consensus_monte_carlo`). ``samples`` (chains, draws, d): the
    combined draws; ``client_samples`` (N, chains, draws, d): each client's sub-posterior draws;
    ``weights`` (N, d, d): the W_c used; ``rounds``: 1; ``floats_up`` / ``floats_down``: sent to /
    from the server (module docstring); ``gradient_evaluations``: all clients' local gradient
    evaluations (per client in ``evaluations_per_client``), warm-up included; ``local``: the local
    sampler; ``var_names``; ``seconds`` of wall time (the clients one after the other)."""

    samples: np.ndarray
    client_samples: np.ndarray
    weights: np.ndarray
    floats_up: int
    floats_down: int
    gradient_evaluations: int
    evaluations_per_client: tuple[int, ...]
    local: str
    var_names: tuple[str, ...]
    seconds: float
    rounds: int = 1

    def min_ess_bulk(self) -> float:
        """The smallest bulk ESS of the combined draws over the d coordinates (:func:`diagnostics.ess`)."""
        import diagnostics as dg

        return float(np.min(dg.ess(self.samples, method="bulk")))

    def to_arviz(self, **kwargs: Any):
        """The combined draws as ArviZ data (:func:`diagnostics.to_arviz`; ``var_names`` default the problem's)."""
        from diagnostics import to_arviz

        kwargs.setdefault("var_names", list(self.var_names))
        return to_arviz(self.samples, **kwargs)


def consensus_monte_carlo(
    problem: Any,
    *,
    chains: int = 4,
    draws: int = 1000,
    warmup: int = 1000,
    seed: int = 0,
    local: str = "nuts",
    temperature: float = 1.0,
    dense_mass: bool = True,
    weights: Any = None,
    max_evaluations: int | None = None,
) -> ConsensusResult:
    """Run one-shot consensus Monte Carlo on ``problem`` (a :class:`~fedlangevin.problems.FederatedProblem`;
    the module docstring): every client samples its sub-posterior with ``local`` (``"nuts"``: Pyro's
    NUTS, ``chains`` chains of ``warmup`` + ``draws`` iterations, ``dense_mass``; ``"fald"``:
    ``FALD(sub-posterior, local_steps=1, chains=chains)``, ``warmup`` + ``draws`` rounds, the first
    ``warmup`` discarded), from zeros, client c seeded ``seed + c * chains``; the server combines the
    draws (:func:`combine`, ``weights`` None or (N, d, d)).

    chains, draws, warmup : >= 1; chains x draws >= d + 1 when the weights are estimated.
    seed : integer in [0, 2**32 - 1 - N chains]; temperature : tau > 0.
    max_evaluations : None, or the most gradient evaluations one client's NUTS chains may make
        together (>= 1; a benchmark's cost cap): beyond it :class:`~fedlangevin.baselines.RoundLimitError`
        (its ``rounds``: the evaluations made) stops the run. local='nuts' only.
    Every bad argument is a ValueError naming it, raised before any sampling.
    """
    check_problem(problem)
    n, d = int(problem.num_clients), int(problem.dim)
    chains = check_int("chains", chains, 1, (2**32 - 1) // n)  # client c's chains are seeded seed + c chains + r
    draws = check_int("draws", draws, 1)
    warmup = check_int("warmup", warmup, 1)
    seed = check_int("seed", seed, 0, 2**32 - 1 - n * chains)
    local = check_choice("local", local, LOCAL_SAMPLERS)
    temperature = check_real("temperature", temperature, low=0.0, low_open=True)
    dense_mass = check_bool("dense_mass", dense_mass)
    if max_evaluations is not None:
        max_evaluations = check_int("max_evaluations", max_evaluations, 1)
        if local != "nuts":
            raise ValueError("max_evaluations: a cap on the local NUTS runs (local='nuts'); FA-LD's cost is its rounds")
    check_fits("draws", 2 * 8 * n * chains * draws * d, "cpu",
               f"the clients' draws ({n} clients x {chains} chains x {draws} draws x d = {d}) and their combination",
               "use fewer chains or draws")
    if weights is None and chains * draws < d + 1:
        raise ValueError(f"draws: the weights (inverse sample covariances) need chains x draws >= d + 1 = {d + 1}; "
                         f"got {chains} x {draws}")
    if weights is not None:  # checked against the shape before any sampling
        combine(np.zeros((n, 1, 1, d)), weights)
    subs = [SubPosterior(problem, c, temperature) for c in range(n)]
    if local == "nuts" and subs[0].global_energy is None:
        raise ValueError(f"problem: local='nuts' needs each client's energy f^c, and {type(problem).__name__} exposes "
                         "none (no quadratic form, client_energy or autodiff energy); use local='fald'")
    start = time.perf_counter()
    out = []
    for c, sub in enumerate(subs):
        try:
            out.append(_sample(sub, local, chains, draws, warmup, seed + c * chains, dense_mass, max_evaluations))
        except Exception as exc:
            exc.client = c  # which client's local run stopped (a RoundLimitError at the cap, a divergence)
            raise
    client_draws = np.stack(out)
    combined, w = combine(client_draws, weights)
    evaluations = tuple(sub.evaluations for sub in subs)
    return ConsensusResult(
        samples=combined, client_samples=client_draws, weights=w, floats_up=n * chains * draws * d, floats_down=n,
        gradient_evaluations=int(sum(evaluations)), evaluations_per_client=evaluations, local=local,
        var_names=tuple(problem.parameter_names()), seconds=time.perf_counter() - start)


def _sample(sub: SubPosterior, local: str, chains: int, draws: int, warmup: int, seed: int,
            dense_mass: bool, cap: int | None) -> np.ndarray:
    """One client's draws (chains, draws, d) of its sub-posterior."""
    if local == "nuts":
        from fedlangevin.baselines.nuts import federated_nuts

        return federated_nuts(sub, chains=chains, draws=draws, warmup=warmup, seed=seed, dense_mass=dense_mass,
                              max_rounds=cap).samples
    import fedlangevin as fl

    sampler = fl.FALD(sub, local_steps=1, chains=chains, seed=seed)
    return np.asarray(sampler.run(warmup + draws, warmup=warmup, progress=False).numpy())
