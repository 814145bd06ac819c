"""Warm-up adaptation of FA-LD: a preconditioner M and a step size, frozen after warm-up.

Stan, NumPyro and BlackJAX adapt a step size and a mass matrix during warm-up; this module
does the same for FA-LD, using only what the server already has: the broadcast global
iterates theta (R, d) of all chains after each round (server-side post-processing; clients
receive the new M when it changes, counted in the communication record).

Windows (Stan's, counted in rounds): a fast start window (``init_buffer`` rounds) in which
the chains move towards the typical set, slow windows of ``base_window``, 2 ``base_window``,
4 ``base_window``, ... rounds (the last one stretched to fill), and a fast end window
(``term_buffer`` rounds). At the end of every slow window M is set to the regularised
covariance of the global iterate over that window, pooled over all chains (R chains x w
rounds draws: many chains make the estimate cheap and good). When the run's warm-up is too
short for the defaults, the buffers take 15% and 10% of it and the slow windows the rest
(Stan's rule); below :data:`MIN_WARMUP` rounds M is not adapted.

Regularisation (Stan's, made scale-free per coordinate): with n pooled draws and sample
covariance S,

    M = n / (n + 5) S + 5 / (n + 5) * 1e-3 * diag(S),

so M stays positive definite for any n, the shrinkage fades as draws accumulate, and a
coordinate with a tiny posterior scale is not swamped by one with a large scale (Stan's
1e-3 I would be, in the uncentred regressions of posteriordb). M is
dense up to d = :data:`DENSE_MAX_DIM` and diagonal (the variances, same regulariser) beyond
(a dense M costs a (d x d) product per local step and needs n >> d draws).

Step size: at the start, at the end of every window (fast windows are cut into pieces of at
most ``base_window`` rounds) and at the end of warm-up,

    eta = SAFETY / lambda_max,

lambda_max being the largest eigenvalue of the preconditioned Hessian M H (the same spectrum
as A^T H A), maximised over the chains' current iterates. H is the global Hessian sum_c p_c
H_c when one local step is followed by full participation (the round is then one step on
f), otherwise each client's H_c (K > 1 local steps run each client's own energy, and a round of
random participation a weighted sum of a few; the maximum over clients). lambda_max comes from power iteration with
Hessian-vector products by central gradient differences (no autodiff needed, so any
problem's ``grad`` serves). There is no Metropolis step to tune against, so SAFETY sets the
discretisation bias: for a Gaussian target and a perfect M, Langevin's stationary standard
deviation is (1 - eta lambda / 2)^(-1/2) times the true one, 1.026 at SAFETY = 0.1, while an
e-fold of the slowest preconditioned direction takes about 1 / (SAFETY lambda_min / lambda_max)
steps. The random start vectors of the power iteration come from a generator seeded from
the run's seed and the window, never from the sampler's stream.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from fedlangevin.warmup.curvature import diagonal_of, max_curvature, mean_hessian
from fedlangevin.federation.extensions import IdentityPreconditioner
from fedlangevin.federation.preconditioning import (
    as_preconditioner, is_identity, placed, preconditioner_from_record, preconditioner_matrix, preconditioner_record,
)
from fedlangevin.warmup.acceptance import (
    DualAveraging, da_final, da_init, da_update, energy_and_gradient, energy_function, log_acceptance, matrix_growth,
    mean_acceptance,
)
from fedlangevin.warmup.approach import (
    ARRIVED, PIECE, Approach, approach_init, approach_update, arrived, newton_statistic, straggler_excess,
)
from fedlangevin.warmup.iterates import GROWTH, Across, Scatter, prior_curvature, public_curvature, step_from_spread
from fedlangevin.federation.schedules import AdaptedSteps

__all__ = [
    "DENSE_MAX_DIM", "MIN_WARMUP", "PRIVATE_WINDOWS", "SAFETY", "AdaptedSteps", "Adapter", "Window",
    "max_curvature", "mean_hessian", "private_windows",
    "regularised_covariance", "warmup_windows",
]

#: step size = SAFETY / lambda_max of the preconditioned Hessian (see the module docstring)
SAFETY = 0.1
#: dense M up to this dimension, diagonal beyond
DENSE_MAX_DIM = 100
#: warm-ups shorter than this many rounds adapt the step size only
MIN_WARMUP = 20
#: Stan's window sizes (rounds)
INIT_BUFFER, TERM_BUFFER, BASE_WINDOW = 75, 50, 25
#: a private warm-up's slow windows: this many of equal length (it adapts from round 0)
PRIVATE_WINDOWS = 8


@dataclass(frozen=True)
class Window:
    """Rounds [start, end) of warm-up; ``slow``: M is re-estimated from them."""

    start: int
    end: int
    slow: bool


def warmup_windows(warmup: int, init_buffer: int = INIT_BUFFER, term_buffer: int = TERM_BUFFER,
                   base_window: int = BASE_WINDOW) -> list[Window]:
    """Stan's adaptation windows for ``warmup`` rounds (fast pieces cut to <= ``base_window``)."""
    if warmup < MIN_WARMUP:
        return [Window(0, warmup, False)] if warmup > 0 else []
    if init_buffer + base_window + term_buffer > warmup:
        init_buffer = int(0.15 * warmup)
        term_buffer = int(0.1 * warmup)
        base_window = warmup - init_buffer - term_buffer
    piece = max(1, base_window)
    out = [Window(s, min(s + piece, init_buffer), False) for s in range(0, init_buffer, piece)]
    start, size, last = init_buffer, base_window, warmup - term_buffer
    while start < last:
        end = start + size
        if end + 2 * size > last:  # the next window would not fit: stretch this one to the end
            end = last
        out.append(Window(start, end, True))
        start, size = end, 2 * size
    out.append(Window(last, warmup, False)) if term_buffer > 0 else None
    return out


def private_windows(warmup: int, term_buffer: int = TERM_BUFFER) -> list[Window]:
    """A private warm-up's windows: PRIVATE_WINDOWS slow windows of equal length from round 0 (its
    first step is only a public guess, and every window end moves the step towards the iterates'
    spread: :mod:`fedlangevin.warmup.iterates`), then the fast end window (``term_buffer``,
    at most 10% of the warm-up); below MIN_WARMUP rounds one fast window."""
    if warmup < MIN_WARMUP:
        return [Window(0, warmup, False)] if warmup > 0 else []
    term = min(term_buffer, int(0.1 * warmup))
    last = warmup - term
    cuts = [round(i * last / PRIVATE_WINDOWS) for i in range(PRIVATE_WINDOWS + 1)]
    out = [Window(a, b, True) for a, b in zip(cuts, cuts[1:]) if b > a]
    return out + ([Window(last, warmup, False)] if term > 0 else [])


def regularised_covariance(cov: torch.Tensor, count: int, dense: bool) -> torch.Tensor:
    """The regularised M from a pooled covariance S ((d, d), or (d,) variances) of ``count`` draws:
    n / (n + 5) S + 5 / (n + 5) 1e-3 diag(S) (diag(S) floored at 1e-12 of its largest entry)."""
    var = torch.diagonal(cov) if dense else cov
    var = torch.clamp(var, min=1e-12 * float(var.max()))
    shrink = 5.0 / (count + 5.0)
    if dense:
        return (1 - shrink) * cov + shrink * 1e-3 * torch.diag(var)
    return (1 - shrink) * cov + shrink * 1e-3 * var


class Adapter:
    """The warm-up state machine; the runner calls :meth:`observe` after every warm-up round.

    ``warmup``: rounds of warm-up; ``adapt_matrix``: re-estimate M in the slow windows;
    ``fixed_step``: a user's step size (``None``: estimate it, ``step_size="auto"``);
    ``per_client``: curvature of each client's energy (K > 1 or random participation);
    ``target``: the step rule's target acceptance (:class:`AutoStep`'s ``target_accept``, resolved;
    None: the curvature rule). :attr:`rule` is the step rule in use: ``"acceptance"`` (dual
    averaging, :mod:`fedlangevin.warmup.acceptance`: eta estimated, no privacy, one local step
    with full participation, a problem with an energy, a target), ``"curvature"`` (SAFETY /
    lambda_max, every other estimated eta), ``"spread"`` (a private run) or ``"fixed"``.
    :attr:`preconditioner` and :attr:`step_size` are the current M and eta; :meth:`record`
    / :meth:`from_record` checkpoint the whole state.
    """

    def __init__(self, problem, warmup: int, *, adapt_matrix: bool, fixed_step: float | None, per_client: bool,
                 seed: int, preconditioner=None, dense_max_dim: int = DENSE_MAX_DIM, privacy=None,
                 temperature: float = 1.0, target: float | None = None) -> None:
        # a private run's adapter never holds the problem: it reads the broadcast iterates only
        self.privacy = privacy
        self.problem = problem.to(dtype=torch.float64) if privacy is None else None
        self.dim = problem.dim
        self.temperature = float(temperature)
        self.warmup = int(warmup)
        self.adapt_matrix = bool(adapt_matrix) and warmup >= MIN_WARMUP
        self.fixed_step = fixed_step
        self.per_client = per_client
        self.seed = int(seed)
        self.dense = problem.dim <= dense_max_dim
        # a private run adapts from the first round (its first step is only a public guess)
        self.windows = warmup_windows(self.warmup) if privacy is None else private_windows(self.warmup)
        self.preconditioner = IdentityPreconditioner() if preconditioner is None else preconditioner
        self.step_size = fixed_step
        self.done = 0  # warm-up rounds observed
        self.estimates = 0  # step-size estimates made (seeds the power iteration)
        self.matrix_updates = 0
        if privacy is not None:  # the first step of fedlangevin.warmup.iterates
            # the clip's curvature guess plus the prior's (public): the prior alone bounds the step (an N(0, 1)
            # prior needs eta < 2), however small the clip's guess
            self.lambda0 = (public_curvature(privacy, problem.weights, getattr(problem, "client_sizes", None))
                            + prior_curvature(problem))
        self.pooled = Scatter.empty(self.dim, self.dense)  # the slow window's iterates (M)
        self.across = Across.empty(self.dim, self.dense)  # and their spread across chains (a private step)
        self.energy = None if self.problem is None or fixed_step is not None or per_client else energy_function(self.problem)
        self.target = target if self.energy is not None else None
        self.rule = ("fixed" if fixed_step is not None else "spread" if privacy is not None
                     else "acceptance" if self.target is not None else "curvature")
        self.dual: DualAveraging | None = None  # the acceptance rule's state
        self.last: torch.Tensor | None = None  # the iterates the next round starts from (R, d)
        self._at_last = None  # (U, grad U) there: what the clients sent with it
        self.approach: Approach | None = None  # the approach in progress (fedlangevin.warmup.approach)
        self.arrived: int | None = None  # the warm-up round at which it ended
        self.reset: torch.Tensor | None = None  # where a rejected approach round puts the chains back (R, d)
        self.floats_up = 0.0  # the acceptance rule's uploads not yet in the ledger (per chain)

    @property
    def count(self) -> int:
        return self.pooled.count

    @property
    def finished(self) -> bool:
        return self.done >= self.warmup

    def start(self, theta: torch.Tensor) -> float:
        """The first M and step size, at the initial iterates. With a dense M to adapt, M starts at
        the inverse of the mean Hessian there (a Laplace start) when that Hessian is positive
        definite (eigenvalues >= 1e-12 of the largest), else at I; the slow windows then replace it."""
        if self.privacy is not None:  # no Laplace start: M starts at I (or the given M)
            if self.fixed_step is None and self.estimates == 0:
                self.step_size = SAFETY / self.lambda0
                self.estimates += 1
            return self.step_size
        fresh = self.matrix_updates == 0 and self.done == 0
        hessian = None  # the start's, when the approach test already asked the clients for it
        if self.rule == "acceptance" and self.adapt_matrix and self.dense and fresh and self.arrived is None:
            hessian = self._hessian(theta)
            if self._begin_approach(theta, hessian):
                return self.step_size
        if self.adapt_matrix and self.dense and fresh:
            laplace = self._laplace(theta, hessian=hessian)
            self.preconditioner = self.preconditioner if laplace is None else laplace
        if self.fixed_step is None:
            self._estimate(theta)
        if self.rule == "acceptance" and self.dual is None:
            self.dual = da_init(self.step_size)
            self.last = theta.detach().to(device="cpu", dtype=torch.float64).clone()
        return self.step_size

    def observe(self, theta: torch.Tensor) -> bool:
        """Take the global iterates (R, d) after warm-up round ``done + 1``; returns True when M
        or eta changed (the runner then rebuilds its kernel)."""
        x = theta.detach().to(device="cpu", dtype=torch.float64)
        if self.approach is not None:
            self.done += 1
            self._approach(x)
            return True
        window = self._window(self.done)
        self.done += 1
        if self.rule == "acceptance":
            self._accept(x)
        if window is not None and window.slow and self.adapt_matrix:
            self.pooled = self.pooled.add(x)
            if self.privacy is not None:
                self.across = self.across.add(x)
        end = window is None or self.done == window.end
        if not end:
            return self.rule == "acceptance"
        spread = None
        if window is not None and window.slow and self.adapt_matrix and self.count > 1:
            m = regularised_covariance(self.pooled.covariance(), self.count, self.dense)
            if self.privacy is not None and not bool(torch.all(torch.isfinite(m))):
                raise FloatingPointError(
                    "step_size='auto' (private): the chains' iterates are not finite in the warm-up (the step size "
                    "was too large for the posterior); give a smaller numeric step_size, or a budget "
                    "(RecordLevel(epsilon=..., delta=...)) whose plan respects the prior's curvature")
            if self.privacy is not None:  # lambda_max(M) = 1, its scale carried by eta (the same kernel)
                m = m / (float(torch.linalg.eigvalsh(m).max()) if self.dense else float(m.max()))
                if self.across.dof >= 2:  # one chain has no spread across chains: its eta stays
                    spread = regularised_covariance(self.across.covariance(), self.across.dof, self.dense)
            self._replace_matrix(as_preconditioner(m, self.dim))
            self.matrix_updates += 1
            self.pooled = Scatter.empty(self.dim, self.dense)
            self.across = Across.empty(self.dim, self.dense)
        if self.rule == "acceptance":
            slow = [w.start for w in self.windows if w.slow]
            buffer = (window is not None and not window.slow and self.adapt_matrix and self.dense
                      and slow and self.done <= slow[0])  # the init buffer: a Laplace M where the chains are
            if buffer:  # the chains may still move: stragglers restart, a Laplace M where the chains are
                self._restart_stragglers()
                if (m := self._laplace(self.last, absolute=True)) is not None:
                    self._replace_matrix(m)
            if self.finished:
                self.step_size = da_final(self.dual)
        elif self.fixed_step is None and self.privacy is None:
            self._estimate(theta)
        elif self.fixed_step is None and spread is not None:  # a private step follows the new M's spread
            diagonal = diagonal_of(self.preconditioner, self.dim) if spread.dim() == 1 else None
            matrix = preconditioner_matrix(self.preconditioner, self.dim) if diagonal is None else diagonal
            eta = step_from_spread(spread, matrix, self.temperature, SAFETY)
            self.step_size = min(eta, GROWTH * self.step_size)
            self.estimates += 1
        return True

    # -- the approach (fedlangevin.warmup.approach) -----------------------------------------
    def _begin_approach(self, theta: torch.Tensor, hessian: torch.Tensor) -> bool:
        """Whether the chains start an approach (True) or are already in the bulk (init="map", a start
        from draws: Newton statistic <= ARRIVED at the start; False, and :meth:`start` goes on as
        without an approach: a Laplace M from ``hessian``, eta = SAFETY / lambda_max(M H), Stan's
        windows from round 0). Approaching: M = |H|^-1 at the start, eta = 5 SAFETY / lambda_max(M H)
        capped at the approach's STEP, and Stan's windows wait until the chains have arrived. Called only
        while M is dense (d <= ``dense_max_dim``, :meth:`start`): it forms d x d matrices."""
        self.last = theta.detach().to(device="cpu", dtype=torch.float64).clone()
        self._at_last = self._evaluate(self.last)
        laplace = self._laplace(theta, absolute=True, hessian=hessian)
        matrix = preconditioner_matrix(self.preconditioner if laplace is None else laplace, self.dim)
        statistic = newton_statistic(self._at_last[1], matrix, self.temperature)
        if statistic <= ARRIVED:
            self.arrived = 0
            return False
        self.preconditioner = self.preconditioner if laplace is None else laplace
        self._estimate(theta)
        self.approach = approach_init(5 * self.step_size, self._at_last[0], statistic)
        self.step_size = self.approach.step
        self.windows = [Window(0, self.warmup, False)]
        return True

    def _approach(self, x: torch.Tensor) -> None:
        """A round of the approach: the energy guard (a rejected round sets :attr:`reset`) and the
        Newton statistic from the energies and gradients the clients returned at ``x``; every PIECE
        rounds a Laplace M where the chains are."""
        here = self._evaluate(x)
        statistic = newton_statistic(here[1], preconditioner_matrix(self.preconditioner, self.dim), self.temperature)
        if self.last is None or self.last.shape != x.shape:  # chains dropped: the guard starts again, from here
            self.last, self._at_last = x.clone(), here
            self.approach = approach_init(self.approach.step, here[0], statistic)
        state = approach_update(self.approach, here[0], statistic, tolerance=self.dim * self.temperature)
        if state.rejected:  # the chains go back to where the round started
            self.reset, x, here = self.last.clone(), self.last, self._at_last
        else:
            self.last, self._at_last = x.clone(), here
        if arrived(state, self.warmup):
            self._arrive(x, here, state)
            return
        self.approach, self.step_size = state, state.step
        if state.rounds % PIECE == 0 and (m := self._laplace(x, absolute=True)) is not None:
            self.preconditioner = m

    def _arrive(self, x: torch.Tensor, here, state: Approach) -> None:
        """End the approach at round ``done``: Stan's windows over the rest of the warm-up, a Laplace
        M at the arrival, dual averaging from the approach's last step."""
        self.approach, self.arrived = None, self.done
        self.windows = self._laid_out(self.done)
        if state.statistic > ARRIVED:
            warnings.warn(f"step_size='auto': after {self.done} warm-up rounds the chains had not reached the bulk "
                          f"(Newton statistic {state.statistic:.3g}; about 1 in the typical set); the rest of the warm-up "
                          "adapts from there. A longer warm-up (run(rounds, warmup=...)) or init='map' may help",
                          RuntimeWarning, stacklevel=2)
        self.last, self._at_last = x.clone(), here
        self._restart_stragglers()
        if (m := self._laplace(self.last, absolute=True)) is not None:
            self.preconditioner = m
        self.step_size = state.step
        self.dual = da_init(self.step_size)

    def _restart_stragglers(self) -> None:
        """Chains whose energy (at :attr:`last`) exceeds the median by more than :func:`straggler_excess`
        (or is not finite) restart at the place of another chain, drawn from those that did not (seeded
        by the run's seed and the round); sets :attr:`reset`. A warm-up's draws are discarded, so a
        restart biases nothing; it copies a chain that has arrived over one left far behind (mesquite
        from zeros: one chain 200 posterior sds out in a flat direction, where the slow window's M
        would have been the covariance of that one chain's distance to the others)."""
        if self._at_last is None:  # resumed without the energies: nothing to compare
            return
        u, g = self._at_last
        excess = u - u[torch.isfinite(u)].median() if bool(torch.isfinite(u).any()) else u
        far = ~(excess <= straggler_excess(self.dim, self.temperature))  # NaN counts as far
        if not bool(far.any()) or bool(far.all()):
            return
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + 7919 * self.done + 17) % 2**63)
        good = torch.nonzero(~far).reshape(-1)
        source = torch.arange(u.shape[0])
        source[far] = good[torch.randint(len(good), (int(far.sum()),), generator=gen)]
        self.last, self._at_last = self.last[source].clone(), (u[source].clone(), g[source].clone())
        self.reset = self.last.clone()

    def _laid_out(self, arrived: int) -> list[Window]:
        """The approach's rounds [0, arrived) as one fast window (none when it never began), then Stan's
        windows over the rest."""
        rest = [Window(arrived + w.start, arrived + w.end, w.slow) for w in warmup_windows(self.warmup - arrived)]
        return ([Window(0, arrived, False)] if arrived > 0 else []) + rest

    def _replace_matrix(self, new) -> None:
        """M <- ``new``; under the acceptance rule dual averaging restarts (Stan), from its averaged
        step divided by lambda_max(M_old^-1 M_new) (as stable as the step before it)."""
        old, self.preconditioner = self.preconditioner, new
        if self.rule == "acceptance":
            self.step_size = da_final(self.dual) / matrix_growth(old, new, self.dim)
            self.dual = da_init(self.step_size)

    def _hessian(self, theta: torch.Tensor) -> torch.Tensor:
        """The chains' mean Hessian at ``theta`` (d, d) on the CPU; each client returns its own Hessian,
        summed over the chains, with the round's upload (d (d + 1) / 2 floats, counted per chain)."""
        x = theta.detach().to(dtype=torch.float64)
        self.floats_up += self.problem.num_clients * self.dim * (self.dim + 1) / 2 / x.shape[0]
        return mean_hessian(self.problem.to(device=x.device), x).cpu()

    def _laplace(self, theta: torch.Tensor, absolute: bool = False, hessian: torch.Tensor | None = None):
        """M = the inverse of the chains' mean Hessian at ``theta`` when it is positive definite
        (eigenvalues >= 1e-12 of the largest), else None; ``absolute``: of its absolute values
        |H| = V |Lambda| V^T instead (floored at 1e-12 of the largest: a saddle or a concave
        region far from the mode still gets each direction's scale)."""
        hess = self._hessian(theta) if hessian is None else hessian
        eig, vec = torch.linalg.eigh(hess)
        if absolute and bool(torch.isfinite(eig).all()) and float(eig.abs().max()) > 0:
            eig = eig.abs().clamp_min(1e-12 * float(eig.abs().max()))
        if bool(torch.isfinite(eig).all()) and float(eig.min()) > 1e-12 * float(eig.max()) > 0:
            m = (vec / eig) @ vec.T
            return as_preconditioner(0.5 * (m + m.T), self.problem.dim)
        return None

    def _window(self, j: int) -> Window | None:
        for w in self.windows:
            if w.start <= j < w.end:
                return w
        return None

    def _evaluate(self, x: torch.Tensor):
        """(U, grad U) at the iterates x (R, d): what the clients return with their gradient (their
        f^c and grad f^c, d + 1 floats per client and chain, summed with p_c by the server)."""
        self.floats_up += self.problem.num_clients * (self.dim + 1)
        return energy_and_gradient(self.problem, self.energy, x)

    def _accept(self, x: torch.Tensor) -> None:
        """The acceptance rule after a round from :attr:`last` to ``x``: the acceptance MALA would
        give the chains' moves, one dual-averaging update, eta for the next round."""
        if self.last is None or self.last.shape != x.shape:  # resumed without a start, or chains dropped
            self.last, self._at_last = x.clone(), None
            return
        if self._at_last is None:
            self._at_last = self._evaluate(self.last)
        here = self._evaluate(x)
        pre = None if is_identity(self.preconditioner) else placed(self.preconditioner, "cpu", torch.float64)
        log_a = log_acceptance(self.last, x, self._at_last[0], here[0], self._at_last[1], here[1], self.step_size, pre,
                               self.temperature)
        self.dual = da_update(self.dual, mean_acceptance(log_a), self.target)
        self.step_size = math.exp(self.dual.x)
        self.last, self._at_last = x.clone(), here

    def _estimate(self, theta: torch.Tensor) -> None:
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + self.estimates) % 2**63)
        x = theta.detach().to(dtype=torch.float64)
        pre = self.preconditioner
        pre = None if is_identity(pre) else placed(pre, x.device, torch.float64)
        problem = self.problem.to(device=x.device)
        lam = max_curvature(problem, x, pre, per_client=self.per_client, generator=gen)
        self.step_size = SAFETY / lam
        self.estimates += 1

    # -- checkpoints ------------------------------------------------------------------------
    def record(self) -> dict:
        return {
            "warmup": self.warmup, "adapt_matrix": self.adapt_matrix, "fixed_step": self.fixed_step,
            "per_client": self.per_client, "seed": self.seed, "dense": self.dense, "done": self.done,
            "estimates": self.estimates, "matrix_updates": self.matrix_updates, "step_size": self.step_size,
            "preconditioner": preconditioner_record(self.preconditioner), "count": self.count,
            "mean": self.pooled.mean.tolist(), "m2": self.pooled.m2.tolist(),
            **({} if self.privacy is None else {"temperature": self.temperature, "across": self.across.record()}),
            **({} if self.rule != "acceptance" else {"target": self.target, "arrived": self.arrived,
                                                     "approach": None if self.approach is None else self.approach.record(),
                                                     "dual": None if self.dual is None else self.dual.record(),
                                                     "last": self.last, "temperature": self.temperature,
                                                     "at_last": None if self._at_last is None else list(self._at_last)}),
        }

    @classmethod
    def from_record(cls, problem, rec: dict, given=None, privacy=None) -> "Adapter":
        """The adapter a checkpoint stored; ``given``: the run's own preconditioner class, if any;
        ``privacy``: the run's mechanism (a private run's adapter reads iterates only)."""
        new = cls(problem, rec["warmup"], adapt_matrix=rec["adapt_matrix"], fixed_step=rec["fixed_step"],
                  per_client=rec["per_client"], seed=rec["seed"],
                  preconditioner=preconditioner_from_record(rec["preconditioner"], given),
                  dense_max_dim=problem.dim if rec["dense"] else problem.dim - 1, privacy=privacy,
                  temperature=rec.get("temperature", 1.0), target=rec.get("target"))
        if new.rule == "acceptance":
            new.dual = None if rec["dual"] is None else DualAveraging.from_record(rec["dual"])
            new.arrived = rec.get("arrived")
            new.approach = None if rec.get("approach") is None else Approach.from_record(rec["approach"])
            if new.approach is not None:
                new.windows = [Window(0, new.warmup, False)]
            elif new.arrived is not None:
                new.windows = new._laid_out(new.arrived)
            new.last = None if rec.get("last") is None else torch.as_tensor(rec["last"], dtype=torch.float64).clone()
            if rec.get("at_last") is not None:
                new._at_last = tuple(torch.as_tensor(t, dtype=torch.float64).clone() for t in rec["at_last"])
        if privacy is not None:
            new.across = Across.from_record(rec["across"])
        new.adapt_matrix = rec["adapt_matrix"]
        new.done, new.estimates, new.matrix_updates = rec["done"], rec["estimates"], rec["matrix_updates"]
        new.step_size = rec["step_size"]
        new.pooled = Scatter(rec["count"], torch.tensor(rec["mean"], dtype=torch.float64),
                             torch.tensor(rec["m2"], dtype=torch.float64), new.dense)
        return new
