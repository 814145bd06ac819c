"""FA-HMC's warm-up: the preconditioner M, the step size h and the friction gamma, adapted in the
first run's warm-up from the default start and then frozen (``FAHMC(problem)``, ``step_size="auto"``).

It has the shape of FA-LD's (:mod:`fedlangevin.warmup.session`): :func:`init` starts it at
the chains' iterates, :func:`update` takes each warm-up round's broadcast iterates and velocities,
:func:`final` gives the frozen (M, h, gamma); each returns a :class:`Changes` value that the sampler
applies in one place (``FAHMC._apply``). Nothing here assigns to the sampler. It needs one local
step per round (:class:`fedlangevin.FAHMC` refuses ``step_size="auto"`` with a fixed K > 1). With
full participation and full gradients a round is one step of the centralised integrator, which is
what its statistic measures; with random participation or minibatches a round's drift is an
unbiased, noisy estimate of the gradient; where that noise stays in the law, the statistic, read off
the round's actual move, counts it like integration error (h smaller where it is large:
``docs/adaptation.md``); where the correction takes it out, GHOST below.

**The noiseless round (GHOST).** Where FA-HMC's gradient-noise correction runs in the warm-up (random
participation or minibatches, K = 1, one process, no privacy, d <= 100: :mod:`~fedlangevin.fahmc.warmup_noise`),
phase 2 reads its statistic off the round the exact force would have made from the chains' (theta, v)
(:func:`~fedlangevin.fahmc.kernel.exact_round`: grad U there is read anyway, the refresh is drawn here, U and
grad U at its end cost d + 1 more floats per client and chain, counted), so the noise the correction takes
out no longer shrinks h; h stays under :attr:`HMCAdapter.limit`, where the refresh holds that noise;
its energy error also decides divergence. arK, scheme I: h 0.392 before, 0.481 now (every client: 0.478).

Two phases
----------
**1. Overdamped, the first (1 - SHARE) = half of the warm-up.** The chains move with the kernel's
overdamped step (``friction=OVERDAMPED``: FA-LD's eq. 10 with eta = h^2 / 2, :mod:`~fedlangevin.fahmc.kernel`)
and FA-LD's :class:`~fedlangevin.warmup.adaptation.Adapter` runs unchanged over these rounds:
from a far start the damped Newton approach (:mod:`fedlangevin.warmup.approach`), Stan's
windows with the slow windows' regularised covariance as M, stragglers restarted, and eta by dual
averaging towards a target acceptance (:mod:`fedlangevin.warmup.acceptance`). Why overdamped:
far from the bulk, momentum carries chains past the mode and through regions where the step is
unstable, and a slow window's covariance would be one of the chains' paths, not of the posterior;
the approach and the windows are built for the overdamped step. Its statistic also serves FA-HMC:
the MALA acceptance the adapter computes for a move theta -> theta' of step eta is exactly the
Metropolis acceptance of OBABO's leapfrog (B(h/2) A(h) B(h/2), h = sqrt(2 eta)) from theta with the
velocity the refresh gave (derivation at :func:`energy_error`), so the phase ends with h0 = sqrt(2
eta), a first M, and the chains in FA-LD's stationary law for it, the velocity fresh N(0, tau M).

**2. Underdamped, the last SHARE of the warm-up.** The friction is set (below) and the chains run
FA-HMC itself:

- h adapts every round by dual averaging (the same :func:`~fedlangevin.warmup.acceptance.da_update`
  on log eta, eta = h^2 / 2, started at h0 without the doubling search) towards the target below,
  with the statistic min(1, exp(-delta)) averaged over chains, delta the energy error of the
  round's deterministic operators (:func:`energy_error`): the leapfrog's for OBABO (its GHMC
  acceptance), for BAOAB the work of B(h/2) A(h/2) and A(h/2) B(h/2) beside the refresh's heat.
  The server reads it off what the clients return with their gradient at the broadcast iterate
  (their energy f^c and gradient: d + 1 floats per client, chain and round, counted as FA-LD's
  rule counts them) and the velocities it holds.
- Its first WINDOW = 60 % is a slow window: M is re-estimated from the underdamped chains'
  iterates (FA-LD's regularised covariance), then the dual averaging restarts (with its doubling
  search) from the step run divided by lambda_max(M_old^-1 M_new), and gamma is set again. Why:
  the overdamped chains explore slow directions badly (gp_pois_regr, seed 0: phase 1's M has
  Sigma^-1 M eigenvalues 0.12-2.9, this window's 0.48-1.24; FA-HMC run with an M like phase 1's
  failed the acceptance on its GP amplitude).
- A **divergent** move, energy error beyond DIVERGENT = 10 tau (a Metropolis acceptance below
  5e-5: never on a Gaussian at these steps, where delta has sd below 0.5), caps h at BACKOFF = 0.8
  times the round's h for good (a new M at the window's end lifts earlier caps), and the chain restarts at the
  (theta, v) of another chain (warm-up draws are discarded: nothing is biased). Why: with momentum
  the chains reach regions the overdamped ones did not (gp_pois_regr's large GP amplitudes, where
  the Poisson likelihood's curvature grows like exp(f)), and a step the mean acceptance finds fine
  lets a chain there blow up once in thousands of rounds; without the cap, FA-HMC's sampling rounds
  on gp_pois_regr did (sds 5-10 times the reference's at h = 0.115; at the cap's 0.077 they pass).

**The target** (``AutoStep``'s ``"auto"``) is the statistic's value on a d-dimensional Gaussian
with a perfect M at h* = sqrt(2 eta*), eta* the step whose stationary sds are SD_EXCESS = 3 % too
wide for FA-LD (:func:`~fedlangevin.warmup.acceptance.excess_step`): h* = 0.479 is where
OBABO's theta sds are 3 % too wide (its theta marginal is N(0, Sigma / (1 - h^2 / 4)), FA-LD's at
eta = h^2 / 2) and BAOAB's velocity sds 3 % too narrow (its theta marginal is exact on a
Gaussian). :func:`gaussian_energy_acceptance` computes it for the splitting and friction in use
(the (theta, v) law the step leaves invariant, from :mod:`fedlangevin.fahmc.exact`, and one step of
the kernel itself). For OBABO it equals phase 1's target (on a Gaussian at stationarity, (theta,
theta') has the law of MALA's at eta = h^2 / 2, its velocity after the refresh being exact and
independent of theta); BAOAB's energy error at a given h is a little larger (0.93 against 0.95 at
h*, d = 22, gamma = 0.7), and its target is lower accordingly. So on a Gaussian either splitting lands near h*
whatever d, and on another posterior h shrinks where the energy error is larger. A number given as
``target_accept`` is the target of both phases.

**The friction** (at the start of phase 2, and again with the window's M): gamma = omega_min /
sqrt(2), clipped to [GAMMA_MIN, GAMMA_MAX], with omega_min^2 = lambda_min(M H) of the chains' mean
Hessian H there
(each client returns its Hessian, summed over the chains: d (d + 1) / 2 floats, counted; above the dense
limit, with M diagonal, lambda_min comes from LANCZOS_ITERATIONS Lanczos steps on Hessian-vector
products instead, d floats per client and step, and no d x d matrix is formed). On a
Gaussian mode of frequency omega the integrated autocorrelation time of theta is 2 gamma / omega^2
time units and that of theta^2 (what the sds need) about 1 / gamma (underdamped); the slowest
direction sets both, and gamma = omega_min / sqrt(2) makes them equal (sqrt(2) / omega_min): a
smaller gamma buys means with sds, a larger one loses both. With M = the posterior covariance
omega_min is about 1 (Cramer-Rao: lambda(Sigma E[H]) >= 1 for any posterior, = 1 on a Gaussian),
so gamma is about 0.7; a direction whose variance M underestimates has omega < 1 and lowers it.
The clip guards the extremes of a Hessian at 32 points: an indefinite or nearly flat mean Hessian
(gamma would go to 0: a chain's energy, a random walk of the integration errors, would then be damped
over no time), and a stiff one.

Without an energy (a problem that gives gradients only) phase 1 uses FA-LD's curvature rule (eta =
SAFETY / lambda_max(M H)) and takes the whole warm-up (no statistic for phase 2): h = sqrt(2 eta)
and the friction rule as above.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any, NamedTuple

import torch

from fedlangevin.fahmc import warmup_noise
from fedlangevin.fahmc.kernel import OVERDAMPED, exact_round
from fedlangevin.federation.preconditioning import (
    as_preconditioner, is_identity, placed, preconditioner_from_record, preconditioner_matrix,
)
from fedlangevin.warmup import session as fald_session
from fedlangevin.warmup.acceptance import (
    SD_EXCESS, DualAveraging, da_final, da_init, da_update, energy_function, excess_step, log_acceptance,
    matrix_growth, mean_acceptance,
)
from fedlangevin.warmup.adaptation import DENSE_MAX_DIM, Adapter, regularised_covariance
from fedlangevin.warmup.curvature import LANCZOS_ITERATIONS, diagonal_of, extreme_curvatures, mean_hessian
from fedlangevin.warmup.iterates import Scatter

__all__ = ["GAMMA_MAX", "GAMMA_MIN", "KEEP", "SHARE", "Changes", "HMCAdapter", "energy_error", "final",
           "friction_from_curvature", "friction_rule", "gaussian_energy_acceptance", "init", "update"]

#: the share of the warm-up run underdamped (phase 2), and the share of phase 2 that is its slow window
#: (module docstring)
SHARE, WINDOW = 0.5, 0.6
#: a shorter underdamped window adapts no M
MIN_WINDOW = 10
#: a move whose energy error exceeds this (in units of tau; a Metropolis acceptance below 5e-5) is
#: divergent: h is capped at BACKOFF times its step and the chain put back (module docstring)
DIVERGENT, BACKOFF = 10.0, 0.8
#: the friction rule's clip (module docstring)
GAMMA_MIN, GAMMA_MAX = 0.25, 2.0
#: :class:`Changes`' ``preconditioner`` (or ``companions``) when it stays as it is
KEEP = fald_session.KEEP
#: normals behind :func:`gaussian_energy_acceptance` (draws x d): 10^4 to 10^5 draws, a standard
#: error below 0.005 (min(1, exp(-delta)) has sd below 0.5)
GAUSSIAN_NUMBERS = 4_000_000


class Changes(NamedTuple):
    """What the warm-up asks the sampler to change, applied in one place (``FAHMC._apply``).

    preconditioner : a new M, broadcast to every client (:data:`KEEP`: unchanged); step_size : h
    from the current step on (None: unchanged); friction : gamma from the next round on (None:
    unchanged; :data:`~fedlangevin.fahmc.kernel.OVERDAMPED` in phase 1); theta : (R, d) where the
    chains are put back (a rejected approach round, stragglers, divergent moves; None: where they
    are); momentum : (R, d) their velocities then (phase 2; None: as they are); floats_down,
    floats_up : set-up floats sent down / up not yet counted (per chain: the warm-up's statistics,
    the local-step check's companions); finished : the warm-up has ended (M, h and gamma frozen);
    companions : the local-step check's companion chains' or ``local_steps="auto"``'s candidates' new
    state (:mod:`~fedlangevin.fahmc.local_bias`, :mod:`~fedlangevin.fahmc.auto`; :data:`KEEP`: unchanged,
    None: ended); local_bias : its record for ``trace.local_step_bias`` (None: none new; warned where it
    says so); measurement : ``"auto"``'s phase (:class:`~fedlangevin.warmup.local_steps.Measurement`;
    KEEP: unchanged, None: ended); local_steps : K from the next round on (None: unchanged)."""

    preconditioner: Any = KEEP
    step_size: float | None = None
    friction: float | None = None
    theta: torch.Tensor | None = None
    momentum: torch.Tensor | None = None
    floats_down: float = 0.0
    floats_up: float = 0.0
    finished: bool = False
    companions: Any = KEEP
    local_bias: Any = None
    measurement: Any = KEEP
    local_steps: int | None = None


class HMCAdapter:
    """The warm-up's state: phase 1's FA-LD :class:`Adapter` (:attr:`overdamped`, None once it has
    finished), phase 2's dual averaging (:attr:`dual`), window (:attr:`pooled`), cap on h (:attr:`cap`)
    and chains to put back (:attr:`reset`), and what the runner reads: :attr:`warmup` (rounds),
    :attr:`done` (rounds observed), :attr:`step_size` (h of the next round), :attr:`friction` (gamma
    of the next round) and :attr:`preconditioner` (M). :meth:`record` / :meth:`from_record`
    checkpoint it."""

    def __init__(self, problem, warmup: int, *, adapt_matrix: bool, seed: int, preconditioner: Any,
                 splitting: str, temperature: float, target: float, given_target: bool,
                 friction: float | None, ghost: bool = False) -> None:
        self.warmup = int(warmup)
        self.ghost, self.limit = bool(ghost), math.inf  # GHOST; h's cap where the refresh holds the noise
        self.splitting = splitting
        self.temperature = float(temperature)
        self.target = float(target)  # phase 1's (FA-LD's), then phase 2's
        self.given_target = bool(given_target)  # a number given as target_accept: both phases'
        self.given_friction = friction  # a user's gamma (None: the friction rule)
        self.problem = problem.to(dtype=torch.float64)
        self.energy = energy_function(self.problem)
        self.second = 0 if self.energy is None else int(round(SHARE * self.warmup))  # phase 2's rounds
        # phase 2's slow window (its first rounds; none when M is not adapted or it would be short)
        window = int(round(WINDOW * self.second))
        self.window = window if adapt_matrix and window >= MIN_WINDOW else 0
        self.overdamped: Adapter | None = Adapter(
            problem, self.warmup - self.second, adapt_matrix=adapt_matrix, fixed_step=None, per_client=False,
            seed=seed, preconditioner=preconditioner, temperature=temperature, target=target)
        self.preconditioner = self.overdamped.preconditioner
        self.pooled = Scatter.empty(problem.dim, self.overdamped.dense)  # the window's iterates
        self.seed, self.cap = int(seed), math.inf  # cap: h's after a divergent move (DIVERGENT)
        self.reset: tuple | None = None  # (theta, v) (R, d) where divergent chains are put back
        self.step_size: float | None = None
        self.friction: float = OVERDAMPED
        self.done = 0
        self.dual: DualAveraging | None = None
        self.last: tuple | None = None  # (theta, v, U, grad U) where the next round starts (phase 2)
        self.floats_up = 0.0  # uploads not yet in the ledger (per chain)

    @property
    def finished(self) -> bool:
        return self.done >= self.warmup and self.overdamped is None

    # -- phase 2 ----------------------------------------------------------------------------------
    def begin_underdamped(self, theta: torch.Tensor, momentum: torch.Tensor) -> None:
        """End phase 1 at the chains' ``theta`` and ``momentum``: M and h0 = sqrt(2 eta) from the FA-LD
        adapter, gamma from :func:`friction_rule` (or the user's), dual averaging started at h0."""
        pre, eta = fald_session.final(self.overdamped)
        self.overdamped, self.preconditioner = None, pre
        self.step_size = math.sqrt(2.0 * eta)
        x = theta.detach().to(device="cpu", dtype=torch.float64)
        self._set_friction(x)
        if self.second > 0 and self.done < self.warmup:
            self.dual = replace(da_init(0.5 * self.step_size ** 2), searching=False)
            self.last = (x, momentum.detach().to(device="cpu", dtype=torch.float64), *self._evaluate(x))

    def _set_friction(self, x: torch.Tensor) -> None:
        """gamma from :func:`friction_rule` at the chains ``x`` with the current M (or the user's), and the
        target that goes with it (:func:`gaussian_energy_acceptance`; a given target stays)."""
        if self.given_friction is not None:
            self.friction = float(self.given_friction)
        else:
            n, r, d = self.problem.num_clients, x.shape[0], self.problem.dim
            diagonal = diagonal_of(self.preconditioner, d) if d > DENSE_MAX_DIM else None
            if diagonal is None:
                self.floats_up += n * d * (d + 1) / 2 / r  # each client's Hessian, summed over the chains
                self.friction = friction_rule(preconditioner_matrix(self.preconditioner, d), mean_hessian(self.problem, x))
            else:  # above the dense limit: Lanczos on Hessian-vector products, no d x d matrix
                self.floats_up += n * d * LANCZOS_ITERATIONS / r  # each client's H_c v per product, summed over chains
                gen = torch.Generator().manual_seed((self.seed * 1_000_003 + 7919 * self.done + 31) % 2**63)
                lam, _ = extreme_curvatures(self.problem, x, diagonal, generator=gen)
                self.friction = friction_from_curvature(lam)
        if not self.given_target:
            self.target = gaussian_energy_acceptance(math.sqrt(2.0 * excess_step(SD_EXCESS)), self.problem.dim,
                                                     self.friction, self.splitting)

    def observe(self, theta: torch.Tensor, momentum: torch.Tensor) -> bool:
        """Phase 2 after a round: the energy error of the moves from :attr:`last`, one dual-averaging
        update, h of the next round (the averaged one after the last round); in the slow window the
        iterates pooled, and at its end M (and gamma) re-estimated. Returns True when M changed."""
        self.done += 1
        x = theta.detach().to(device="cpu", dtype=torch.float64)
        v = momentum.detach().to(device="cpu", dtype=torch.float64)
        here = self._evaluate(x)
        if self.last is None or self.last[0].shape != x.shape:  # chains dropped: start again from here
            self.last = (x, v, *here)
            return False
        x0, v0, u0, g0 = self.last
        pre = None if is_identity(self.preconditioner) else placed(self.preconditioner, "cpu", torch.float64)
        x1, v1, (u1, g1) = x, v, here  # the chains' round
        if self.ghost:  # the round the exact force would have made from the same start (GHOST)
            gen = torch.Generator().manual_seed((self.seed * 1_000_003 + 7919 * self.done + 37) % 2**63)
            x1, v1 = exact_round(x0, v0, g0, self.step_size, self.friction, self.temperature, pre, self.splitting, gen)
            u1, g1 = self._evaluate(x1)
        delta = energy_error(x0, x1, v0, v1, u0, u1, g0, g1, self.step_size, pre, self.splitting, self.temperature)
        divergent = ~(torch.nan_to_num(delta, nan=math.inf) <= DIVERGENT)
        accept, proposed = mean_acceptance(-delta), math.sqrt(2.0 * math.exp(min(self.dual.x, 700.0)))
        if accept < self.target or self.step_size >= proposed * (1 - 1e-12):  # a capped h passing: no news
            self.dual = da_update(self.dual, accept, self.target)
        self.last = (x, v, *here)
        if bool(divergent.any()):  # the step is too large somewhere the chains go: back off, put them back
            self.cap = min(self.cap, BACKOFF * self.step_size)
            self._restart(divergent)
        eta = da_final(self.dual) if self.done >= self.warmup else math.exp(self.dual.x)
        self.step_size = min(math.sqrt(2.0 * eta), self.cap, self.limit)
        first = self.warmup - self.second  # phase 2's first round is first + 1
        if self.window and self.done <= first + self.window:
            self.pooled = self.pooled.add(x)
            if self.done == first + self.window and self.pooled.count > 1:
                self._replace_matrix(x)
                return True
        return False

    def _restart(self, divergent: torch.Tensor) -> None:
        """Chains whose last move was divergent restart at the (theta, v) of another chain, drawn from
        those that were not (seeded by the run's seed and the round; none when every chain diverged);
        sets :attr:`reset`. Warm-up draws are discarded, so a restart biases nothing (FA-LD's stragglers)."""
        if bool(divergent.all()):
            return
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + 7919 * self.done + 29) % 2**63)
        good = torch.nonzero(~divergent).reshape(-1)
        source = torch.arange(divergent.shape[0])
        source[divergent] = good[torch.randint(len(good), (int(divergent.sum()),), generator=gen)]
        self.last = tuple(t[source].clone() for t in self.last)
        self.reset = (self.last[0].clone(), self.last[1].clone())

    def _replace_matrix(self, x: torch.Tensor) -> None:
        """The window's end: M <- its regularised covariance (FA-LD's), dual averaging restarted (with
        its doubling search) from the averaged step over lambda_max(M_old^-1 M_new) (as stable as the
        step before: :func:`~fedlangevin.warmup.acceptance.matrix_growth`), gamma again, and earlier divergent
        moves' cap lifted, a step under the old M (``docs/gradient-noise.md``: eight_schools)."""
        d = self.problem.dim
        new = as_preconditioner(regularised_covariance(self.pooled.covariance(), self.pooled.count, self.pooled.dense), d)
        eta = 0.5 * self.step_size ** 2 / matrix_growth(self.preconditioner, new, d)  # the step run (capped)
        self.preconditioner, self.pooled, self.cap = new, Scatter.empty(d, self.pooled.dense), math.inf
        self.dual = da_init(eta)
        self.step_size = min(math.sqrt(2.0 * eta), self.cap, self.limit)
        self._set_friction(x)

    def _evaluate(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(U, grad U) at the iterates x (R, d): what the clients return with their gradient (their f^c
        and grad f^c, d + 1 floats per client and chain, summed with p_c by the server)."""
        problem, n, d = self.problem, self.problem.num_clients, self.problem.dim
        weights = problem.weights.to(dtype=torch.float64)
        grads = problem.grad(x[:, None, :].expand(x.shape[0], n, d).contiguous())
        self.floats_up += n * (d + 1)
        with torch.no_grad():
            return self.energy(x).reshape(-1), (weights[None, :, None] * grads).sum(1)

    # -- checkpoints --------------------------------------------------------------------------------
    def record(self) -> dict:
        from fedlangevin.federation.preconditioning import preconditioner_record

        return {"warmup": self.warmup, "splitting": self.splitting, "temperature": self.temperature,
                "target": self.target, "given_target": self.given_target, "given_friction": self.given_friction,
                "second": self.second, "window": self.window, "pooled": self.pooled.record(), "seed": self.seed,
                "cap": self.cap, "ghost": self.ghost, "limit": self.limit,
                "overdamped": None if self.overdamped is None else self.overdamped.record(),
                "preconditioner": preconditioner_record(self.preconditioner), "step_size": self.step_size,
                "friction": self.friction, "done": self.done, "dual": None if self.dual is None else self.dual.record(),
                "last": None if self.last is None else list(self.last), "floats_up": self.floats_up}

    @classmethod
    def from_record(cls, problem, rec: dict, given=None) -> "HMCAdapter":
        """The adapter a checkpoint stored; ``given``: the run's own preconditioner class, if any."""
        new = cls.__new__(cls)
        new.warmup, new.splitting, new.temperature = int(rec["warmup"]), rec["splitting"], float(rec["temperature"])
        new.target, new.given_target = float(rec["target"]), bool(rec["given_target"])
        new.given_friction, new.second, new.window = rec["given_friction"], int(rec["second"]), int(rec["window"])
        new.pooled = Scatter.from_record(rec["pooled"])
        new.seed, new.cap, new.reset = int(rec["seed"]), float(rec["cap"]), None
        new.ghost, new.limit = bool(rec.get("ghost", False)), float(rec.get("limit", math.inf))  # absent: older
        new.problem = problem.to(dtype=torch.float64)
        new.energy = energy_function(new.problem)
        new.overdamped = None if rec["overdamped"] is None else Adapter.from_record(problem, rec["overdamped"], given)
        new.preconditioner = preconditioner_from_record(rec["preconditioner"], given)
        new.step_size, new.friction, new.done = rec["step_size"], float(rec["friction"]), int(rec["done"])
        new.dual = None if rec["dual"] is None else DualAveraging.from_record(rec["dual"])
        new.last = None if rec["last"] is None else tuple(torch.as_tensor(t, dtype=torch.float64).clone()
                                                          for t in rec["last"])
        new.floats_up = float(rec["floats_up"])
        return new


# -- the statistic and the friction rule ----------------------------------------------------------
def energy_error(theta, theta_new, momentum, momentum_new, energy, energy_new, grad, grad_new, h: float, pre=None,
                 splitting: str = "BAOAB", temperature: float = 1.0) -> torch.Tensor:
    """delta (R,): the energy error of a K = 1 round's deterministic operators, in units of tau, from
    the broadcast (theta, v) (R, d) before and after it, U and g = grad U at both ends, h, M (``pre``:
    ``drift(x) = M x``; None: I). H(theta, w) = U(theta) + w^T M^-1 w / 2, M^-1 never formed.

    OBABO (a round B(h/2) O B(h/2) A(h) from the kick, the previous step's closing half kick first):
    the leapfrog B(h/2) A(h) B(h/2) runs from (theta, w0 = v' + h M g / 2) to (theta', w1 = v' - h M g' / 2),
    v' the velocity after the round (theta' = theta + h v'), so w1 - w0 = -h M (g + g') / 2 and

        delta = U' - U - (theta' - theta) . (g + g') / 2 - h^2 / 8 (g M g - g' M g') = -log alpha_MALA(eta = h^2 / 2).

    BAOAB (a round B(h) A(h/2) O A(h/2), the stored velocity v before the closing half kick): the
    step's energy change minus the refresh's heat, the refresh taking v - h M g to v',

        delta = U' - U - h (g . v + g' . v') / 2 + h^2 / 8 (g' M g' + 3 g M g).
    """
    if splitting == "OBABO":
        return -log_acceptance(theta, theta_new, energy, energy_new, grad, grad_new, 0.5 * h * h, pre, temperature)
    mg = grad if pre is None else pre.drift(grad)
    mg_new = grad_new if pre is None else pre.drift(grad_new)
    value = (energy_new - energy - 0.5 * h * ((grad * momentum).sum(-1) + (grad_new * momentum_new).sum(-1))
             + h * h / 8 * ((grad_new * mg_new).sum(-1) + 3 * (grad * mg).sum(-1)))
    return value / temperature


@functools.lru_cache(maxsize=64)
def gaussian_energy_acceptance(h: float, dim: int, friction: float, splitting: str = "BAOAB", draws: int | None = None,
                               seed: int = 0) -> float:
    """E[min(1, exp(-delta))] of one K = 1 round of step ``h`` on a standard Gaussian in ``dim``
    dimensions (one client, M = I, tau = 1), (theta, v) drawn from the law the round leaves invariant
    (:func:`fedlangevin.fahmc.exact.stationary_moments`), the round run by the kernel itself, delta by
    :func:`energy_error` (Monte Carlo, float64, a fixed seed: a pure function of its arguments;
    ``draws`` pairs, default 10^4 to 10^5). The coordinates are independent, so the kernel runs the
    one-dimensional Gaussian with ``dim`` chains per draw (at most GAUSSIAN_NUMBERS numbers at a time)
    and delta is the sum of theirs."""
    from fedlangevin.fahmc.exact import stationary_moments
    from fedlangevin.fahmc.kernel import FAHMCState, build
    from fedlangevin.problems import QuadraticProblem

    if draws is None:
        draws = max(10_000, min(100_000, GAUSSIAN_NUMBERS // dim))
    one = QuadraticProblem(torch.ones(1, 1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64),
                           torch.ones(1, dtype=torch.float64))
    _, cov = stationary_moments(one, [h], friction, splitting=splitting)
    chol = torch.linalg.cholesky(torch.as_tensor(cov, dtype=torch.float64))
    kernel = build(one, friction=friction, splitting=splitting, noise_dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    batch = max(1, GAUSSIAN_NUMBERS // dim)
    total, done = 0.0, 0
    while done < draws:
        n = min(batch, draws - done)
        z = torch.randn(n * dim, 2, generator=gen, dtype=torch.float64) @ chol.T  # (theta, v) per coordinate
        theta, v = z[:, :1].contiguous(), z[:, 1:].contiguous()
        new, _ = kernel.step(FAHMCState(theta=theta, momentum=v), [h], gen)
        u0, u1 = 0.5 * theta[:, 0] ** 2, 0.5 * new.theta[:, 0] ** 2
        delta = energy_error(theta, new.theta, v, new.momentum, u0, u1, theta, new.theta, h, None, splitting)
        total += mean_acceptance(-delta.reshape(n, dim).sum(1)) * n
        done += n
    return total / draws


def friction_rule(matrix: torch.Tensor, hessian: torch.Tensor) -> float:
    """gamma = sqrt(lambda_min(M H) / 2) clipped to [GAMMA_MIN, GAMMA_MAX] (module docstring); M
    (d, d), H (d, d) the chains' mean Hessian; a non-finite or non-positive lambda_min gives GAMMA_MIN."""
    m = matrix.to(torch.float64)
    chol = torch.linalg.cholesky(0.5 * (m + m.T))
    inner = chol.T @ hessian.to(torch.float64) @ chol  # A^T H A: the spectrum of M H
    return friction_from_curvature(float(torch.linalg.eigvalsh(0.5 * (inner + inner.T)).min()))


def friction_from_curvature(lam: float) -> float:
    """gamma = sqrt(lam / 2) clipped to [GAMMA_MIN, GAMMA_MAX] for lam = lambda_min(M H) (exact below
    the dense limit, a Lanczos estimate from above beyond it: :func:`~fedlangevin.warmup.curvature.
    extreme_curvatures`); a non-finite or non-positive lam gives GAMMA_MIN."""
    if not math.isfinite(lam) or lam <= 0:
        return GAMMA_MIN
    return min(GAMMA_MAX, max(GAMMA_MIN, math.sqrt(lam / 2.0)))


# -- (init, update, final) --------------------------------------------------------------------------
def init(sampler, warmup: int) -> tuple[HMCAdapter, Changes]:
    """Start the warm-up of ``sampler``'s run (``warmup`` rounds) at its iterates: the adapter and the
    first M, h and gamma (read from the sampler: its problem, seed, state, M, settings)."""
    rule = sampler.step_rule
    adapter = HMCAdapter(sampler.problem, warmup, adapt_matrix=sampler.adapt_matrix, seed=sampler.seed,
                         preconditioner=sampler.preconditioner, splitting=sampler.splitting,
                         temperature=sampler.temperature, target=rule.target(sampler.problem.dim),
                         given_target=not isinstance(rule.target_accept, str), friction=sampler.given_friction,
                         ghost=warmup_noise.in_warmup(sampler))
    adapter.overdamped.start(sampler.state.theta)
    first = fald_session.proposed(adapter.overdamped, sampler.preconditioner, floats_up=False)
    changes = _changes(adapter, first)
    if adapter.overdamped.finished:  # no overdamped round (a warm-up of 0 or 1 rounds)
        changes = _begin_second(adapter, sampler.state.theta, sampler.state.momentum, changes)
    return adapter, changes


def update(adapter: HMCAdapter, theta: torch.Tensor, momentum: torch.Tensor, preconditioner: Any) -> Changes:
    """After a warm-up round: the adapter sees the broadcast iterates ``theta`` and velocities
    ``momentum`` (R, d); a changed M (against the current ``preconditioner``), h or gamma, chains to
    put back and the end of the warm-up."""
    if adapter.overdamped is not None:
        adapter.done += 1
        changes = _changes(adapter, fald_session.update(adapter.overdamped, theta, preconditioner))
        if adapter.overdamped.finished:
            start = theta if changes.theta is None else changes.theta
            changes = _begin_second(adapter, start, momentum, changes)
        return changes
    changed = adapter.observe(theta, momentum)
    reset, adapter.reset = adapter.reset, None
    back = (None, None) if reset is None else tuple(t.to(device=theta.device, dtype=theta.dtype) for t in reset)
    return Changes(preconditioner=adapter.preconditioner if changed else KEEP, step_size=adapter.step_size,
                   friction=adapter.friction if changed else None, theta=back[0], momentum=back[1],
                   floats_up=_take_floats(adapter), finished=adapter.finished)


def final(adapter: HMCAdapter) -> tuple[Any, float | None, float]:
    """The (M, h, gamma) a finished warm-up froze (the adapter's current ones)."""
    return adapter.preconditioner, adapter.step_size, adapter.friction


def _changes(adapter: HMCAdapter, fald: fald_session.Changes) -> Changes:
    """Phase 1's FA-LD changes as FA-HMC's: h = sqrt(2 eta) (None: unchanged), the overdamped step."""
    if fald.preconditioner is not KEEP:
        adapter.preconditioner = fald.preconditioner
    if fald.step_size is not None:
        adapter.step_size = math.sqrt(2.0 * fald.step_size)
    return Changes(preconditioner=fald.preconditioner, step_size=None if fald.step_size is None else adapter.step_size,
                   friction=OVERDAMPED, theta=fald.theta, floats_up=fald.floats_up)


def _begin_second(adapter: HMCAdapter, theta: torch.Tensor, momentum: torch.Tensor, changes: Changes) -> Changes:
    """Phase 1 has ended: the changes so far with phase 2's start (h0, gamma, its uploads)."""
    before = adapter.preconditioner
    adapter.begin_underdamped(theta, momentum)
    new_m = changes.preconditioner if adapter.preconditioner is before else adapter.preconditioner
    return changes._replace(preconditioner=new_m, step_size=adapter.step_size, friction=adapter.friction,
                            floats_up=changes.floats_up + _take_floats(adapter), finished=adapter.finished)


def _take_floats(adapter: HMCAdapter) -> float:
    up, adapter.floats_up = adapter.floats_up, 0.0
    return up
