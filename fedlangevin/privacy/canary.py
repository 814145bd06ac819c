"""A canary audit of a private FA-LD run: an empirical lower bound on epsilon, to hold against the accountant.

An accountant is a proof about a model of the code; a clip in the wrong place, a batch sampler
that is not the one assumed or a noise scale off by sqrt(p_c) would not show in its numbers.
An audit runs the mechanism itself many times on two neighbouring datasets and measures how
well an attacker tells them apart (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021, 2023):
for an (epsilon, delta)-DP mechanism every test with false-positive rate FPR and
false-negative rate FNR satisfies

    FPR + e^eps FNR >= 1 - delta   and   FNR + e^eps FPR >= 1 - delta,

so eps >= max(log((1 - delta - FPR) / FNR), log((1 - delta - FNR) / FPR)); with
Clopper–Pearson upper bounds on FPR and FNR this is a lower bound on epsilon that holds with
the stated confidence. An audited lower bound above the accounted epsilon means the accounting
(or the code) is wrong.

The audit (:func:`audit`)
-------------------------
- **Mechanism**: the package's own private FA-LD run (``FALD(..., privacy=...)``: its clipping,
  its batch sampler, its noise, its participation draw) with a fixed step size, ``R`` chains
  being ``R`` independent replicates of the run. Each world is one run of ``R`` chains.
- **Datasets** (the worst case the analysis allows): a linear likelihood
  l(theta; x) = -<x, theta> with a flat prior, so every per-example gradient is the constant
  -x. Every record is x = 0 except the canary, row 0 of client 0: x = +4C u in world "in" and
  x = -4C u in world "out" (u the unit canary direction). Record level: the canary's per-example
  gradient is clipped to -/+ C u, the two worlds' clipped sums differ by exactly 2C (the
  substitution sensitivity). Client level: client 0's whole data term is clipped to -/+ C u, a
  difference of 2C (the client-level sensitivity). Each local step of client 0 then moves its
  state by +/- eta s C u whenever the canary is in its batch (s = (1/p_c)(n_c/b) at record
  level, 1 at client level); no other quantity depends on the world.
- **What the attacker sees** (the accountant's threat model): every upload, the broadcast
  theta, who took part, and the shared noise as far as it can be read from the uploads. For
  each round in which client 0 uploads, y_c = <beta_0 - theta, u>; the other participating
  clients' y_o = <beta_o - theta, u> carry the round's shared noise and their own private noise
  only. With shared variance a = rho^2 and private variance b = (1 - rho^2)/p per step (in units
  of 2 eta tau), the likelihood-ratio statistic of the Gaussian observation (y_c, y_o) for a
  mean shift in y_c alone is y_c - lambda mean_o(y_o), lambda = a / (a + b / m) with m other
  uploads (Sherman–Morrison on the covariance a 11^T + b I). The score of a replicate is the
  sum over rounds: with full batches this is the exact likelihood-ratio statistic of the
  whole transcript (the flat prior makes the shift the same every round). With minibatches the
  statistic is the same linear one (the exact ratio is a mixture), still a valid attack.
- **Threshold**: chosen on one half of each world's replicates (the threshold and direction
  that maximise the lower bound there), the bound then computed on the other half, so the
  choice does not bias the confidence statement. FPR and FNR are bounded at confidence
  1 - (1 - confidence)/2 each, so both hold together with ``confidence`` (union bound).
- **Accounted epsilon**: ``trace.privacy(delta, chains=1)`` of the "in" run: the epsilon the
  package reports for one replicate (one chain) of this configuration, the same number a user
  reads off a run.

The full-batch, K = 1, full-participation audit of a Gaussian mechanism is the tightest case
(the accountant is exact there, and the statistic is the optimal test); its ratio
audited / accounted is then limited by the replicates alone: a bound from n held-out replicates
per world cannot exceed about log(n / 3) (an error rate bounded at 95 % from zero errors is
still about 3/n). Minibatches (the accountant's dominating pair covers every substitution
configuration, this canary realises one), client sampling and K > 1 give looser audits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedlangevin._validation import check_bool, check_int, check_real, check_seed
from fedlangevin.federation.participation import Participation, SchemeII, as_participation
from fedlangevin.privacy.audit_bound import MIN_REPLICATES, epsilon_lower_bound
from fedlangevin.privacy.hmc import equivalent_step_size
from fedlangevin.privacy.mechanism import RecordLevel, check_privacy
from fedlangevin.problems.base import check_count_fits

__all__ = ["AuditResult", "AuditSetting", "audit", "default_sampler", "epsilon_lower_bound"]

#: the canary's norm in units of the clip C: > 1, so its gradient (or its client's data term) is clipped to exactly C
CANARY_SCALE = 4.0


@dataclass(frozen=True)
class AuditSetting:
    """A private FA-LD configuration to audit, validated once.

    Parameters
    ----------
    privacy : ``RecordLevel(clip=C)`` (default C = 1) or ``ClientLevel(clip=C)``.
    step_size : eta > 0, constant (an audit needs the mechanism fixed in advance: no adaptation).
    local_steps : K >= 1.
    rounds : communication rounds >= 1 (K x rounds local steps).
    correlation : rho in [0, 1): the shared part of the noise (public to the attacker).
    num_clients : N >= 1 clients of equal size; client 0 holds the canary. rho > 0 needs N >= 2
        (with one client the shared noise could not be read off another upload).
    participation : ``"full"`` (default), an int S (scheme II, S of N drawn without
        replacement, ``SchemeII(S)``: its calibrated private noise) or a
        :class:`~fedlangevin.federation.participation.Participation` rule.
    rows : n_c >= 1 records per client (the canary and n_c - 1 zero records).
    batch_size : b in [1, n_c] rows per local step (drawn without replacement), or None for
        full batches (batch fraction b / n_c).
    temperature : tau > 0.
    dim : d >= 1, the length of theta.
    canary : the canary direction u, shape (d,), nonzero (normalised here); default e_1.
    friction : gamma > 0 of an FA-HMC audit (``audit(..., sampler=fedlangevin.FAHMC)``; its step_size
        is then h); unused for FA-LD.
    """

    privacy: Any = field(default_factory=lambda: RecordLevel(clip=1.0))
    step_size: float = 0.1
    local_steps: int = 1
    rounds: int = 1
    correlation: float = 0.0
    num_clients: int = 1
    participation: Any = "full"
    rows: int = 4
    batch_size: int | None = None
    temperature: float = 1.0
    dim: int = 1
    canary: Any = None
    friction: float = 1.0

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "friction", check_real("friction", self.friction, low=0.0, low_open=True))
        s(self, "privacy", check_privacy(self.privacy))
        s(self, "step_size", check_real("step_size", self.step_size, low=0.0, low_open=True))
        s(self, "local_steps", check_int("local_steps", self.local_steps, 1))
        s(self, "rounds", check_int("rounds", self.rounds, 1))
        s(self, "correlation", check_real("correlation", self.correlation, low=0.0, high=1.0, high_open=True))
        # sizes whose product is allocated (the records N x n_c x d): each checked against memory, before any
        s(self, "num_clients", check_count_fits("num_clients", self.num_clients, 1, 8, "records of d >= 1 floats"))
        if self.correlation > 0 and self.num_clients < 2:
            raise ValueError(f"num_clients must be >= 2 when correlation > 0 (the attacker reads the shared noise off "
                             f"another client's upload); got num_clients = {self.num_clients}, correlation = "
                             f"{self.correlation:g}")
        part = self.participation
        if isinstance(part, (int, np.integer)) and not isinstance(part, bool):
            part = SchemeII(int(part))
        part = as_participation(part)
        part.validate(torch.full((self.num_clients,), 1.0 / self.num_clients, dtype=torch.float64))
        s(self, "participation", part)
        s(self, "rows", check_count_fits("rows", self.rows, 1, 8 * self.num_clients, "one record per client"))
        if self.batch_size is not None:
            s(self, "batch_size", check_int("batch_size", self.batch_size, 1, self.rows))
        s(self, "temperature", check_real("temperature", self.temperature, low=0.0, low_open=True))
        s(self, "dim", check_count_fits("dim", self.dim, 1, 8 * self.num_clients * self.rows,
                                        "one float per record and client"))
        s(self, "canary", _unit(self.canary, self.dim))

    def data(self, world: str) -> list[torch.Tensor]:
        """The clients' records (N tensors (n_c, d)): zeros, and the canary +4C u ("in") or
        -4C u ("out") as row 0 of client 0."""
        sign = {"in": 1.0, "out": -1.0}[world]
        clients = [torch.zeros(self.rows, self.dim, dtype=torch.float64) for _ in range(self.num_clients)]
        clients[0][0] = sign * CANARY_SCALE * self.privacy.clip * torch.as_tensor(self.canary)
        return clients

    def shared_weight(self, others: int) -> float:
        """lambda = a / (a + b / m): the weight of the other uploads' mean in the statistic (module
        docstring), a = rho^2, b = (1 - rho^2) N, m = ``others``; 0 without shared noise."""
        a = self.correlation**2
        if a == 0.0 or others == 0:
            return 0.0
        return a / (a + (1.0 - a) * self.num_clients / others)


def _unit(canary: Any, dim: int) -> tuple[float, ...]:
    if canary is None:
        return (1.0,) + (0.0,) * (dim - 1)
    try:
        u = np.asarray(canary, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"canary must be a direction of shape ({dim},) (real numbers); got {canary!r}") from None
    if u.shape != (dim,):
        raise ValueError(f"canary must be a direction of shape ({dim},) (dim = {dim}); got shape {u.shape}")
    norm = float(np.linalg.norm(u))
    if not np.all(np.isfinite(u)) or norm == 0.0:
        raise ValueError("canary must be a finite, nonzero direction")
    return tuple(float(v) for v in u / norm)


class _Watched(Participation):
    """The run's participation rule, unchanged (every call delegated), keeping the last round's
    weights: the attacker knows who uploaded."""

    def __init__(self, rule: Participation) -> None:
        self.rule, self.last, self.history = rule, None, []

    def validate(self, weights):
        return self.rule.validate(weights)

    def weights(self, p, chains, generator):
        self.last = self.rule.weights(p, chains, generator)
        self.history.append(self.last)  # every round's weights (the FA-HMC attack reads who uploaded)
        return self.last

    scheme = property(lambda self: self.rule.scheme)
    num_sampled = property(lambda self: self.rule.num_sampled)
    noise = property(lambda self: self.rule.noise)

    def mean_square_weights(self, p):
        return self.rule.mean_square_weights(p)

    def noise_weights(self, p):
        return self.rule.noise_weights(p)

    def fixed_uploads(self, num_clients):
        return self.rule.fixed_uploads(num_clients)

    def uploads(self, w):
        return self.rule.uploads(w)

    def __repr__(self) -> str:
        return repr(self.rule)


class _Attacker:
    """An upload observer (an upload codec that returns the uploads unchanged): adds each round's
    y_c - lambda mean_o y_o to the score of every chain in which client 0 uploaded."""

    def __init__(self, setting: AuditSetting, watched: _Watched, chains: int) -> None:
        self.setting, self.watched = setting, watched
        self.direction = torch.as_tensor(setting.canary, dtype=torch.float64)
        #: lambda by the number m of other uploads, 0..N-1 (AuditSetting.shared_weight)
        self.weights = torch.tensor([setting.shared_weight(m) for m in range(setting.num_clients)],
                                    dtype=torch.float64)
        self.score = torch.zeros(chains, dtype=torch.float64)

    def __call__(self, beta: torch.Tensor, theta: torch.Tensor, generator) -> torch.Tensor:
        y = (beta - theta.unsqueeze(1)) @ self.direction.to(beta)          # (R, N)
        w = self.watched.last
        up = (w > 0).expand_as(y).to(y.dtype)                              # who uploaded
        stat = y[:, 0]
        if self.setting.correlation > 0:
            others = up[:, 1:].sum(1)
            lam = self.weights.to(y).index_select(0, others.long())
            stat = stat - lam * (y[:, 1:] * up[:, 1:]).sum(1) / others.clamp(min=1.0)
        self.score += (stat * up[:, 0]).to(self.score)
        return beta


def default_sampler():
    """The audit's sampler when none is given: :class:`fedlangevin.FALD`, resolved through the top-level
    package (privacy imports no sampler package: the sampler is the caller's to give)."""
    import fedlangevin

    return fedlangevin.FALD


def _is_hmc(sampler) -> bool:
    """The factory runs FA-HMC (its class says so: ``privacy_family = "FA-HMC"``)."""
    return getattr(sampler, "privacy_family", "FA-LD") == "FA-HMC"


def _world(setting: AuditSetting, world: str, replicates: int, seed: int, progress, sampler):
    """One world's run with the sampler factory: (scores (R,), trace)."""
    from fedlangevin.problems.custom import CustomProblem

    def energy(theta, x):  # l(theta; x) = -<x, theta>: per-example gradient -x
        return -(x @ theta).sum()

    problem = CustomProblem(energy, setting.data(world), dim=setting.dim, rowwise=True)
    watched = _Watched(setting.participation)
    if _is_hmc(sampler):
        return _hmc_world(setting, problem, watched, replicates, seed, progress, sampler)
    attacker = _Attacker(setting, watched, replicates)
    run = sampler(problem, step_size=setting.step_size, local_steps=setting.local_steps,
                  temperature=setting.temperature, correlation=setting.correlation, participation=watched,
                  chains=replicates, batch_size=setting.batch_size, seed=seed, upload=attacker, adapt=False,
                  privacy=setting.privacy)
    trace = run.run(setting.rounds, progress=progress, keep_samples=False)
    return attacker.score.numpy().copy(), trace


def _hmc_world(setting: AuditSetting, problem, watched: _Watched, replicates: int, seed: int, progress, sampler):
    """One world of a private FA-HMC run (OBABO): (scores (R,), trace). The attacker reads the broadcast
    theta of every round (the average of the uploads: post-processing of what the threat model
    releases, so a valid, if for N > 1 weaker, attack). K = 1: theta_t - theta_{t-1} = h v_t, and the
    innovation v_t - a v_{t-1} = (1 + a)(h / 2) (force) + noise (eq. P1) carries the canary's shift in
    every round client 0 uploads: the score sums <v_t - a v_{t-1}, u> over those rounds (with full
    batches and N = 1 the likelihood-ratio statistic of the whole transcript). K > 1: the total
    displacement <theta_T - theta_0, u>."""
    run = sampler(problem, step_size=setting.step_size, friction=setting.friction, splitting="OBABO",
                  local_steps=setting.local_steps, temperature=setting.temperature, correlation=setting.correlation,
                  participation=watched, chains=replicates, batch_size=setting.batch_size, seed=seed,
                  privacy=setting.privacy, check_local_bias=False)
    trace = run.run(setting.rounds, warmup=0, thin=1, progress=progress, keep_samples=True)
    u = torch.as_tensor(setting.canary, dtype=torch.float64)
    theta = torch.cat([torch.zeros(replicates, 1, setting.dim, dtype=torch.float64),
                       torch.as_tensor(trace.samples, dtype=torch.float64)], 1) @ u      # (R, T + 1), theta_0 = 0
    if setting.local_steps > 1:
        return (theta[:, -1] - theta[:, 0]).numpy().copy(), trace
    h, a = setting.step_size, math.exp(-setting.friction * setting.step_size)
    v = torch.diff(theta, dim=1) / h                                                     # v_1..v_T (v_0 = 0)
    innovation = v - a * torch.cat([torch.zeros(replicates, 1, dtype=torch.float64), v[:, :-1]], 1)
    n = setting.num_clients
    up = torch.stack([(w.cpu() > 0).expand(replicates, n)[:, 0] for w in watched.history], 1).to(torch.float64)
    return (innovation * up).sum(1).numpy().copy(), trace


@dataclass(frozen=True)
class AuditResult:
    """What :func:`audit` measured.

    ``epsilon_lower``: the audited lower bound (holds with ``confidence``); ``epsilon``: the
    accounted epsilon of one replicate (``trace.privacy(delta, chains=1)``); ``ratio``:
    epsilon_lower / epsilon (<= 1 unless the accounting is wrong; the audit's tightness);
    ``report``: the accountant's :class:`~fedlangevin.privacy.PrivacyReport`; ``test``: the
    attack (threshold, direction, FPR/FNR upper bounds, error counts on the held-out half);
    ``scores_in``/``scores_out``: the replicates' scores.
    """

    setting: AuditSetting
    delta: float
    confidence: float
    replicates: int
    epsilon_lower: float
    epsilon: float
    report: Any
    test: dict
    scores_in: np.ndarray = field(repr=False)
    scores_out: np.ndarray = field(repr=False)

    @property
    def ratio(self) -> float:
        return self.epsilon_lower / self.epsilon if self.epsilon > 0 else math.inf

    @property
    def consistent(self) -> bool:
        """True when the audit does not contradict the accounting (epsilon_lower <= epsilon)."""
        return self.epsilon_lower <= self.epsilon

    def summary(self) -> str:
        s, t = self.setting, self.test
        part = "full participation" if s.participation.scheme == "full" else \
            f"scheme {s.participation.scheme}, S = {s.participation.num_sampled}"
        batch = "full batches" if s.batch_size is None else f"b = {s.batch_size} of n_c = {s.rows}"
        hmc = self.report.mechanism.get("sampler") == "FA-HMC"
        step = f"FA-HMC (OBABO) h = {s.step_size:g}, friction = {s.friction:g}" if hmc else f"eta = {s.step_size:g}"
        verdict = ("consistent: the audit stays below the accounted epsilon" if self.consistent else
                   "VIOLATION: the audited lower bound exceeds the accounted epsilon — the accounting or the code is wrong")
        return "\n".join([
            f"canary audit: {s.privacy.adjacency} level, clip C = {s.privacy.clip:g}, {step}, "
            f"K = {s.local_steps}, {s.rounds} round(s), rho = {s.correlation:g}, N = {s.num_clients}, {part}, {batch}, "
            f"d = {s.dim}",
            f"replicates: {self.replicates} per world (half choose the test, half bound it), confidence "
            f"{self.confidence:g}",
            f"attack: guess 'canary in' when the score is {'above' if t['direction'] == 'greater' else 'below'} "
            f"{t['threshold']:.4g}; held-out errors {t['counts']['false_positives']} FP / "
            f"{t['counts']['false_negatives']} FN, upper bounds FPR <= {t['false_positive']:.3g}, "
            f"FNR <= {t['false_negative']:.3g}",
            f"audited epsilon >= {self.epsilon_lower:.4g}   accounted epsilon = {self.epsilon:.4g}   at delta = "
            f"{self.delta:.3g}   (ratio {self.ratio:.3g})",
            verdict,
        ])


def _check_accountable(setting: AuditSetting, hmc: bool = False) -> None:
    """The accountant's noise-multiplier range (:data:`~fedlangevin.privacy.levels.Z_RANGE`) for this
    setting, checked before the runs (the report of the "in" run would otherwise refuse it after both):
    the run's own reductions for equal clients, p_c = 1/N, gamma = b / n_c, sensitivity 2C."""
    from fedlangevin.privacy.levels import client_levels, record_levels

    n, rule = setting.num_clients, setting.participation
    eta = setting.step_size if not hmc else equivalent_step_size(setting.step_size, setting.friction)
    scheme, s = ("II", n) if rule.scheme == "full" else (rule.scheme, int(rule.num_sampled))
    k, t = setting.local_steps, setting.local_steps * setting.rounds
    common = (setting.temperature, setting.correlation)
    try:
        if setting.privacy.adjacency == "client":
            client_levels(eta, *common, setting.privacy.sensitivity, 1.0 / n, n, s, k, t, scheme,
                           None, 1.05)
        else:
            gamma = 1.0 if setting.batch_size is None else setting.batch_size / setting.rows
            record_levels(eta, *common, gamma, setting.privacy.sensitivity, 1.0 / n, n, s, k, t, scheme,
                    None, 1.05)
    except ValueError as exc:
        raise ValueError(f"step_size, temperature, privacy (clip): this setting cannot be accounted: {exc}") from None


def audit(setting: AuditSetting | None = None, *, replicates: int = 10_000, delta: float = 1e-5,
          confidence: float = 0.95, seed: int = 0, progress: bool | None = None, sampler: Any = None,
          **kwargs: Any) -> AuditResult:
    """Audit a private FA-LD configuration with a canary (module docstring).

    ``setting``: an :class:`AuditSetting`, or its fields as keyword arguments
    (``audit(privacy=RecordLevel(clip=1.0), step_size=0.1, rounds=4)``). ``replicates``:
    R >= 100 independent runs per world (the chains of one run; 10,000 by default).
    ``delta`` in (0, 1); ``confidence`` in (0, 1) of the lower bound; ``seed`` seeds both
    worlds' runs (different streams) and the split. Every argument is checked before any run.

    ``sampler``: the sampler factory audited, called as ``sampler(problem, step_size=, local_steps=,
    temperature=, correlation=, participation=, chains=, batch_size=, seed=, upload=, adapt=False,
    privacy=)`` (the keyword arguments of :class:`fedlangevin.FALD`, the default: :func:`default_sampler`);
    its ``run(rounds, progress=, keep_samples=False)`` returns a trace with ``privacy(delta=, chains=)``.
    The attacker reads the uploads through ``upload`` and the participation draw through
    ``participation``, so the audited sampler must route every release through both.
    ``sampler=fedlangevin.FAHMC`` (a factory whose ``privacy_family`` is ``"FA-HMC"``) audits private
    FA-HMC (OBABO at the setting's ``friction``, step size h = ``step_size``): called with
    ``friction=, splitting="OBABO", check_local_bias=False`` in place of ``upload=, adapt=``, its
    attacker reads the broadcast theta of every round (:func:`_hmc_world`).
    """
    if setting is None:
        setting = AuditSetting(**kwargs)
    elif kwargs:
        raise ValueError(f"give an AuditSetting or its fields, not both (got {sorted(kwargs)})")
    elif not isinstance(setting, AuditSetting):
        raise ValueError(f"setting must be an AuditSetting; got {type(setting).__name__}")
    replicates = check_count_fits("replicates", replicates, MIN_REPLICATES, 8 * setting.num_clients * setting.dim,
                                  "the client states of N x d floats per replicate (chain)")
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    confidence = check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    seed = check_seed("seed", seed)
    progress = None if progress is None else check_bool("progress", progress)
    if sampler is None:
        sampler = default_sampler()
    elif not callable(sampler):
        raise ValueError(f"sampler must be a sampler factory (a callable such as fedlangevin.FALD); got "
                         f"{type(sampler).__name__}")
    _check_accountable(setting, _is_hmc(sampler))
    scores_in, trace = _world(setting, "in", replicates, seed, progress, sampler)
    scores_out, _ = _world(setting, "out", replicates, (seed + 1) % 2**64, progress, sampler)  # any seed check_seed takes
    report = trace.privacy(delta=delta, chains=1)
    test = epsilon_lower_bound(scores_in, scores_out, delta=delta, confidence=confidence, seed=seed)
    return AuditResult(setting=setting, delta=delta, confidence=confidence, replicates=replicates,
                       epsilon_lower=test.pop("epsilon"), epsilon=float(report.epsilon), report=report, test=test,
                       scores_in=scores_in, scores_out=scores_out)
