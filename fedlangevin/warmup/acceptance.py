"""The step-size rule of ``step_size="auto"``: dual averaging towards a target acceptance.

A round of FA-LD with one local step and every client taking part is one preconditioned
Langevin step on the global energy U = sum_c p_c f^c (Deng et al., eq. 7 with K = 1; the
clients' noises add up to N(0, 2 eta tau M)):

    theta' = theta - eta M grad U(theta) + sqrt(2 eta tau) M^(1/2) xi,

which is the proposal of the Metropolis-adjusted Langevin algorithm (MALA). FA-LD does not
accept or reject; but the acceptance probability MALA *would* give the move,

    log alpha = [U(theta) - U(theta') + (theta' - theta) . (g + g') / 2
                 + eta (g . M g - g' . M g') / 4] / tau,      g = grad U(theta), g' = grad U(theta'),

(the log density ratio plus the log ratio of the Gaussian proposal densities, simplified so that
M^-1 never appears) measures how far the step's discretisation moves the chain's law from
the target: it is 1 for an exact step and falls as eta grows. During warm-up the server reads
it off what the clients return with their gradient at the broadcast iterate (their energy
f^c: one extra float, and their gradient, d floats, per client, chain and round, counted in
the communication record) and adapts eta by **dual averaging** (Nesterov 2009; Hoffman &
Gelman 2014, Alg. 5, as Stan and NumPyro tune HMC) towards a target acceptance.

What a target means, exactly, on a Gaussian: for a standard Gaussian target in d dimensions
and a perfect M, the unadjusted step's stationary law is N(0, I / (1 - eta / 2)) (its sds are
(1 - eta / 2)^(-1/2) times too wide), and the acceptance at that law is a function of eta and
d alone. :func:`gaussian_acceptance` computes it; ``target="auto"`` (the default) is the
acceptance at the step whose stationary sds are :data:`SD_EXCESS` too wide, so on a
Gaussian with a well-adapted M the rule lands on that bias in every dimension (a fixed target
would not: the acceptance of a given eta falls with d, from 0.98 at d = 1 to 0.85 at
d = 62 for eta = 0.19). A number in (0, 1) is a target acceptance used as given.

Private runs cannot use this rule: the energies and gradients it reads are exact and
un-noised. They keep the rule of :mod:`fedlangevin.warmup.iterates` (eta from the spread
of the broadcast iterates alone); runs where a round is not one Langevin step (K > 1 local
steps) and problems without an energy keep the curvature rule (``SAFETY / lambda_max``,
:mod:`fedlangevin.warmup.adaptation`). With one local step, random participation and minibatch
gradients use this rule: a round's move is then a Langevin step whose drift is an unbiased, noisy
estimate of the gradient, and the acceptance of the actual move counts that noise against the
target like discretisation error (a smaller eta where the drift is noisier).

The dual averaging is a pure ``(init, update, final)`` triple over a frozen state.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import torch

from fedlangevin._validation import check_real
from fedlangevin.federation.preconditioning import preconditioner_matrix
from fedlangevin.warmup.curvature import diagonal_of

__all__ = [
    "SD_EXCESS", "AutoStep", "DualAveraging", "da_final", "da_init", "da_update", "energy_and_gradient",
    "energy_function", "gaussian_acceptance",
    "log_acceptance", "matrix_growth", "mean_acceptance", "resolve_target",
]

#: target="auto": the acceptance of the step whose stationary sds on a Gaussian are this much too wide
SD_EXCESS = 0.03
#: dual averaging's constants (Hoffman & Gelman 2014, section 3.2.1: gamma, t0, kappa)
GAMMA, T0, KAPPA = 0.05, 10.0, 0.75
#: normals drawn by the Monte Carlo behind gaussian_acceptance (draws x d): 10^4 to 10^5 pairs,
#: a standard error below 0.005 (min(1, alpha) has sd below 0.5) in well under a second
GAUSSIAN_NUMBERS = 4_000_000


def energy_function(problem):
    """theta (R, d) -> U(theta) (R,) = sum_c p_c f^c(theta), when ``problem`` exposes its energy
    (``global_energy`` of autodiff problems, ``energy`` of quadratic and logistic problems); else
    None. The server's sum of the clients' f^c, each of which the client sends with its gradient."""
    fn = getattr(problem, "global_energy", None)
    if fn is None:
        fn = getattr(problem, "energy", None)
        if fn is None or getattr(problem, "quadratic", lambda: None)() is None and not hasattr(problem, "client_energy"):
            return None
    return fn


def energy_and_gradient(problem, energy, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(U, grad U) at the iterates x (R, d): ``energy`` (:func:`energy_function` of ``problem``) and
    sum_c p_c grad f^c, the server's sum of what the clients return with their gradient (their f^c and
    grad f^c: d + 1 floats per client and chain)."""
    n = problem.num_clients
    weights = problem.weights.to(dtype=x.dtype, device=x.device)
    grads = problem.grad(x[:, None, :].expand(x.shape[0], n, x.shape[1]).contiguous())
    with torch.no_grad():
        return energy(x).reshape(-1), (weights[None, :, None] * grads).sum(1)


def log_acceptance(theta, theta_new, energy, energy_new, grad, grad_new, eta: float, pre=None,
                   temperature: float = 1.0) -> torch.Tensor:
    """log alpha (R,) of the Langevin moves theta -> theta_new (R, d) (the module docstring's
    formula, not capped at 0): ``energy`` U and ``grad`` grad U at both ends, ``eta`` the step,
    ``pre`` the preconditioner M (``drift(v) = M v``; None: I), ``temperature`` tau."""
    mg = grad if pre is None else pre.drift(grad)
    mg_new = grad_new if pre is None else pre.drift(grad_new)
    delta = theta_new - theta
    value = (energy - energy_new + 0.5 * (delta * (grad + grad_new)).sum(-1)
             + 0.25 * eta * ((grad * mg).sum(-1) - (grad_new * mg_new).sum(-1)))
    return value / temperature


def mean_acceptance(log_alpha: torch.Tensor) -> float:
    """The chains' mean of min(1, alpha); a non-finite log alpha (an energy or gradient that blew
    up) counts as 0, so the rule shrinks the step (the stability guard)."""
    a = torch.exp(torch.clamp(torch.nan_to_num(log_alpha, nan=-math.inf), max=0.0))
    return float(a.mean())


@functools.lru_cache(maxsize=64)
def gaussian_acceptance(eta: float, dim: int, draws: int | None = None, seed: int = 0) -> float:
    """E[min(1, alpha)] of the step ``eta`` on a standard Gaussian in ``dim`` dimensions with M = I,
    theta from the step's own stationary law N(0, I / (1 - eta / 2)) (Monte Carlo, float64, a fixed
    seed: a pure function of its arguments; ``draws`` pairs, default between 10^4 and 10^5 by d)."""
    if not 0 < eta < 2:
        raise ValueError(f"eta must be in (0, 2) (the unadjusted step is unstable beyond); got {eta!r}")
    if draws is None:
        draws = max(10_000, min(100_000, GAUSSIAN_NUMBERS // dim))
    gen = torch.Generator().manual_seed(seed)
    batch = max(1, min(draws, GAUSSIAN_NUMBERS // max(dim, 1)))
    total, done = 0.0, 0
    while done < draws:
        n = min(batch, draws - done)
        x = torch.randn(n, dim, generator=gen, dtype=torch.float64) / math.sqrt(1 - eta / 2)
        y = (1 - eta) * x + math.sqrt(2 * eta) * torch.randn(n, dim, generator=gen, dtype=torch.float64)
        la = log_acceptance(x, y, 0.5 * (x * x).sum(-1), 0.5 * (y * y).sum(-1), x, y, eta)
        total += mean_acceptance(la) * n
        done += n
    return total / draws


def excess_step(sd_excess: float) -> float:
    """The eta whose stationary sds on a Gaussian (perfect M) are ``sd_excess`` too wide:
    (1 - eta / 2)^(-1/2) = 1 + sd_excess."""
    return 2.0 * (1.0 - (1.0 + sd_excess) ** -2)


def resolve_target(target, dim: int) -> float:
    """The target acceptance: ``"auto"`` -> :func:`gaussian_acceptance` at :func:`excess_step`
    (:data:`SD_EXCESS`) in ``dim`` dimensions; a number in (0, 1) as given."""
    if isinstance(target, str) and target == "auto":
        return gaussian_acceptance(excess_step(SD_EXCESS), dim)
    return check_real("target_accept", target, low=0.0, high=1.0, low_open=True, high_open=True)


@dataclass(frozen=True)
class AutoStep:
    """``step_size=AutoStep(...)``: eta estimated in warm-up (``step_size="auto"`` is ``AutoStep()``).

    ``target_accept``: the acceptance the dual averaging aims at (the module docstring), a number
    in (0, 1), or ``"auto"`` (default): the acceptance whose stationary sds on a Gaussian are
    :data:`SD_EXCESS` too wide, in the problem's dimension. Higher targets take smaller steps
    (less bias, fewer effective samples per round). Used where the acceptance rule applies (one
    local step, full participation, a problem with an energy, not private); elsewhere eta comes
    from the curvature rule, and a private run refuses a number here.
    """

    target_accept: float | str = "auto"

    def __post_init__(self) -> None:
        t = self.target_accept
        if not (isinstance(t, str) and t == "auto"):
            if isinstance(t, str):
                raise ValueError(f"target_accept must be 'auto' or a number in (0, 1); got {t!r}")
            object.__setattr__(self, "target_accept", resolve_target(t, 1))

    def target(self, dim: int) -> float:
        """The target acceptance in ``dim`` dimensions."""
        return resolve_target(self.target_accept, dim)


@dataclass(frozen=True)
class DualAveraging:
    """The state of dual averaging on x = log eta: ``mu`` the point it shrinks towards,
    ``h_bar`` the averaged error (target - acceptance), ``x`` the current log step, ``x_bar`` the
    averaged log step (the final value), ``count`` the updates made; ``searching``: still in the
    doubling search that precedes them (:func:`da_update`)."""

    mu: float
    h_bar: float = 0.0
    x: float = 0.0
    x_bar: float = 0.0
    count: int = 0
    searching: bool = True

    def record(self) -> dict:
        return {"mu": self.mu, "h_bar": self.h_bar, "x": self.x, "x_bar": self.x_bar, "count": self.count,
                "searching": self.searching}

    @classmethod
    def from_record(cls, rec: dict) -> "DualAveraging":
        return cls(float(rec["mu"]), float(rec["h_bar"]), float(rec["x"]), float(rec["x_bar"]), int(rec["count"]),
                   bool(rec["searching"]))


def da_init(eta: float, push: float = 1.0) -> DualAveraging:
    """Start (or restart after M changed) at step ``eta``, shrinking towards ``push * eta``.
    Hoffman & Gelman take mu = log(10 eta_0), a bias towards trying larger steps that a
    Metropolis test makes harmless; an unadjusted step 10 times too large moves every chain
    before the next update can react (a Langevin step beyond 2 / lambda diverges), so here
    mu = log eta_0: the step grows only as the acceptances stay above the target."""
    x = math.log(eta)
    return DualAveraging(mu=x + math.log(push), x=x, x_bar=x)


def da_update(state: DualAveraging, acceptance: float, target: float) -> DualAveraging:
    """One update with the round's mean acceptance. First a search (Hoffman & Gelman's heuristic
    for a reasonable first step, here one round per trial): while the acceptance stays above the
    target the step doubles; the first round below it starts dual averaging there (mu = x).
    Then Hoffman & Gelman 2014, Alg. 5:
    H_m = (1 - 1/(m + t0)) H_{m-1} + (target - a_m) / (m + t0); x_m = mu - sqrt(m) H_m / gamma;
    x_bar_m = m^-kappa x_m + (1 - m^-kappa) x_bar_{m-1}."""
    if state.searching:
        if acceptance > target:
            x = state.x + math.log(2.0)
            return replace(state, mu=x, x=x, x_bar=x)
        state = replace(state, searching=False)
    m = state.count + 1
    w = 1.0 / (m + T0)
    h_bar = (1 - w) * state.h_bar + w * (target - acceptance)
    x = state.mu - math.sqrt(m) / GAMMA * h_bar
    decay = m ** -KAPPA
    x_bar = decay * x + (1 - decay) * state.x_bar
    return replace(state, h_bar=h_bar, x=x, x_bar=x_bar, count=m)


def matrix_growth(old, new, dim: int) -> float:
    """lambda_max(M_old^-1 M_new): how much further the new preconditioner moves a chain in its most
    stretched direction. The step divided by it keeps eta lambda_max(M H) from growing when M
    changes (lambda_max(M_new H) <= lambda_max(M_old^-1 M_new) lambda_max(M_old H)), so a restart
    after a new M is as stable as the step before it."""
    da, db = diagonal_of(old, dim), diagonal_of(new, dim)
    if da is not None and db is not None:  # both diagonal: O(d), no d x d matrix
        return float((db / da).max())
    a = preconditioner_matrix(old, dim).to(torch.float64)
    b = preconditioner_matrix(new, dim).to(torch.float64)
    chol = torch.linalg.cholesky(0.5 * (a + a.T))
    inner = torch.linalg.solve_triangular(chol, torch.linalg.solve_triangular(chol, b, upper=False).T, upper=False)
    return float(torch.linalg.eigvalsh(0.5 * (inner + inner.T)).max())


def da_final(state: DualAveraging) -> float:
    """The step after adaptation: exp(x_bar) (the averaged iterate: less noisy than x)."""
    return math.exp(state.x_bar)
