"""The local-step bias of FA-LD, measured from the broadcast iterates alone (issue 27, item 1).

With K > 1 local steps a round is no longer one Langevin step on the global energy: between two
synchronisations every client follows its own energy f^c, and with heterogeneous clients the
stationary law of the broadcast iterate moves away from the K = 1 law (Deng et al., Thm. 5.7:
the bias grows with K eta and the clients' heterogeneity). How far is a property of the model
and of the split, unknown in advance. This module measures it while the chains run.

**What is compared.** The stationary law of the broadcast iterate theta when every round runs
K local steps of eta, against its law when every round runs one step of the same eta. A round
of K steps moves K eta of Langevin time, a round of one step eta: the two chains have different
per-round dynamics (the K chain decorrelates about K times faster per round), so only their
stationary laws are compared, never round-to-round behaviour. Per coordinate i,

    mean shift  delta_i = (E_K theta_i - E_1 theta_i) / sd_1(theta_i),
    sd ratio    s_i     = sd_K(theta_i) / sd_1(theta_i),

in units of the K = 1 sd: the acceptance of docs/validation.md (|mean error| <= 0.1 sd,
sd ratio in [0.9, 1.1]) applied to the step from K = 1 to K. (The K = 1 law has its own
discretisation bias, which the step-size rule bounds; this is the *extra* bias of K.)

**The plan** (:func:`plan_segments`, :class:`BiasPlan`): ``cycles`` repetitions of a K = 1
segment followed by one segment per candidate K (several candidates share the K = 1 segments).
Every segment starts with ``burn_in`` rounds that are discarded: after a switch the chains
still carry the previous K's law, which relaxes geometrically. With the K = 1 chains' e-folding
time tau_e (rounds; :func:`decay_rounds` estimates it from K = 1 iterates), the transient of a
mean after B rounds is at most e^(-B / tau_e) of the difference, so B = ceil(tau_e ln(1/eps))
with eps = :data:`TRANSIENT` leaves at most eps tau_e / kept of it in a segment mean (under
1 % with the default kept = 4 B). The K segments keep the same burn-in *in rounds*: a round of K
steps contracts the mean at least as fast as a round of one (in one dimension, with
eta lambda_max(A_c) <= 1, sum_c p_c (1 - eta a_c)^K <= sum_c p_c (1 - eta a_c); heterogeneity
can make it much slower than (1 - eta a)^K, so B / K would not be safe). Their kept rounds are
ceil(kept / K): the same Langevin time as a K = 1 segment, for K / (K + 1) fewer rounds.

**The estimator** (:func:`bias_init`, :func:`bias_update`, :func:`bias_final`: BlackJAX's
shape, pure over the frozen :class:`BiasState`): per chain r and per K, the mean a_r and mean
square q_r of the kept iterates; the law's moments are the chains' averages (mean = mean_r a_r,
variance = mean_r q_r - mean^2: about the grand mean, so a slow chain's offset counts in the
spread). Its Monte Carlo error is the **jackknife over chains** (leave one chain out, the
estimates recomputed; Efron & Stein 1981): the R chains are independent (each draws its own
noise; this needs full participation or participation drawn per chain, and chains that have
forgotten their common start), so their per-chain summaries are i.i.d. whatever the
autocorrelation within a chain, and the jackknife needs no model of it (batch means would
need a batch longer than the autocorrelation, which a short segment cannot give); it also
covers the nonlinearity of the ratios. It needs R >= 2 chains; with fewer than about 10 the
standard errors are themselves rough, and the verdicts use Student's t with R - 1 degrees of
freedom. Rough size: se(delta_i) ~ sqrt(2 * 2 tau_e / (R * cycles * kept)).

**The verdicts.** :func:`exceeds` (the warning's test): some coordinate's mean shift or sd ratio
is beyond the tolerance at the stated confidence, simultaneously over the 2 d tests (Bonferroni:
each one-sided at (1 - confidence) / (2 d)); :func:`within` (the choice's test): every one is
inside it at that confidence. Between the two a measurement is inconclusive.
:func:`choose_local_steps` walks up the ladder (:func:`check_ladder`, default
:data:`DEFAULT_LADDER`) and keeps the largest K such that it and every K below it are within
the tolerance: the bias grows with K eta, so a larger K passing after a smaller one failed is
read as noise.

What it does not see: the bias of K = 1 itself (the reference), and a bias that only the
posterior's tails show (the first two moments per coordinate are compared). No data are read:
it is post-processing of the iterates a round releases anyway (free for privacy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from fedlangevin._validation import check_int, check_real

__all__ = [
    "DEFAULT_LADDER", "KEPT_PER_BURN_IN", "TRANSIENT", "BiasEstimate", "BiasPlan", "BiasState", "LocalStepsChoice",
    "chain_moments", "jackknife",
    "bias_final", "bias_init", "bias_update", "check_ladder", "choose_local_steps", "decay_rounds", "exceeds",
    "margins", "plan_segments", "within",
]

#: the ladder of local_steps="auto" (K = 1 is the reference every K is measured against)
DEFAULT_LADDER = (1, 2, 5, 10, 20, 50)
#: a segment's burn-in leaves at most this fraction of a switch's transient (eps in the docstring)
TRANSIENT = 0.05
#: kept K = 1 rounds per segment, in burn-ins (the default of plan_segments)
KEPT_PER_BURN_IN = 4


def check_ladder(ladder: Any) -> tuple[int, ...]:
    """``ladder``: a sequence of strictly increasing positive integers starting at 1 (the reference
    K = 1), as a tuple; else a ValueError naming ``ladder``."""
    if isinstance(ladder, (str, bytes)) or not hasattr(ladder, "__len__") or len(ladder) == 0:
        raise ValueError(f"ladder must be a non-empty sequence of increasing positive integers starting at 1; "
                         f"got {ladder!r}")
    values = tuple(check_int("ladder", k, 1) for k in ladder)
    if values[0] != 1 or any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"ladder must be strictly increasing positive integers starting at 1 (the reference K = 1 "
                         f"every K is measured against); got {list(values)}")
    return values


def _check_candidates(candidates: Any) -> tuple[int, ...]:
    if isinstance(candidates, (str, bytes)) or not hasattr(candidates, "__len__") or len(candidates) == 0:
        raise ValueError(f"candidates must be a non-empty sequence of increasing integers >= 2; got {candidates!r}")
    values = tuple(check_int("candidates", k, 2) for k in candidates)
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"candidates must be strictly increasing integers >= 2; got {list(values)}")
    return values


@dataclass(frozen=True)
class BiasPlan:
    """Which K every round of the measurement runs (the module docstring's plan): ``cycles`` times a
    K = 1 segment, then a segment per K of ``candidates``; every segment discards its first
    ``burn_in`` rounds; a K = 1 segment keeps ``kept`` rounds, a K segment ceil(kept / K)."""

    candidates: tuple[int, ...]
    burn_in: int
    kept: int
    cycles: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", _check_candidates(self.candidates))
        check_int("burn_in", self.burn_in, 0)
        check_int("kept", self.kept, 1)
        check_int("cycles", self.cycles, 1)

    @property
    def local_steps(self) -> tuple[int, ...]:
        """K of the classes compared: 1, then the candidates."""
        return (1,) + self.candidates

    def segments(self) -> tuple[tuple[int, int, int], ...]:
        """One cycle's segments in order: (K, burn-in rounds, kept rounds)."""
        return tuple((k, self.burn_in, -(-self.kept // k)) for k in self.local_steps)

    @property
    def rounds(self) -> int:
        """Rounds of the whole plan."""
        return self.cycles * sum(b + n for _, b, n in self.segments())

    def schedule(self) -> tuple[int, ...]:
        """K of every round of the plan, in order (what the runner schedules)."""
        one = tuple(k for k, b, n in self.segments() for _ in range(b + n))
        return one * self.cycles

    def where(self, t: int) -> tuple[int, bool]:
        """Round ``t`` of the plan (0-based): the index of its K in :attr:`local_steps` and whether it
        is kept (past its segment's burn-in)."""
        cycle = sum(b + n for _, b, n in self.segments())
        t %= cycle
        for i, (_, b, n) in enumerate(self.segments()):
            if t < b + n:
                return i, t >= b
            t -= b + n
        raise AssertionError("unreachable")

    def record(self) -> dict:
        return {"candidates": list(self.candidates), "burn_in": self.burn_in, "kept": self.kept, "cycles": self.cycles}

    @classmethod
    def from_record(cls, rec: dict) -> "BiasPlan":
        return cls(tuple(int(k) for k in rec["candidates"]), int(rec["burn_in"]), int(rec["kept"]), int(rec["cycles"]))


def plan_segments(candidates: Sequence[int], decay: float, *, cycles: int = 4, burn_in: int | None = None,
                  kept: int | None = None, transient: float = TRANSIENT) -> BiasPlan:
    """The plan for ``candidates`` (increasing K >= 2) from ``decay``, the K = 1 chains' e-folding
    time in rounds (> 0; :func:`decay_rounds`): ``burn_in`` (default ceil(decay ln(1 / transient)),
    ``transient`` in (0, 1)) and ``kept`` (default :data:`KEPT_PER_BURN_IN` burn-ins, at least 1)
    K = 1 rounds per segment, ``cycles`` (>= 1) repetitions. ValueError naming the argument."""
    candidates = _check_candidates(candidates)
    decay = check_real("decay", decay, low=0.0, low_open=True)
    transient = check_real("transient", transient, low=0.0, high=1.0, low_open=True, high_open=True)
    cycles = check_int("cycles", cycles, 1)
    if burn_in is None:
        burn_in = math.ceil(decay * math.log(1.0 / transient))
    burn_in = check_int("burn_in", burn_in, 0)
    kept = check_int("kept", max(1, KEPT_PER_BURN_IN * burn_in) if kept is None else kept, 1)
    return BiasPlan(candidates, burn_in, kept, cycles)


def decay_rounds(thetas: Any) -> float:
    """The e-folding time, in rounds, of K = 1 chains from their iterates ``thetas`` (T, R, d)
    (T >= 4 rounds of R chains, finite; e.g. the last warm-up window): half the integrated
    autocorrelation time tau_int (Geyer's initial positive sequence on the autocorrelation pooled
    over the chains), the largest over the coordinates, at least 1. For an AR(1) chain of
    coefficient rho, tau_int / 2 = (1 + rho) / (2 (1 - rho)) ~ -1 / ln rho; where a coordinate
    mixes several modes it is their variance-weighted average (assumed: the preconditioner makes
    the modes alike, as the warm-up's M does)."""
    x = torch.as_tensor(thetas, dtype=torch.float64)
    if x.dim() != 3 or x.shape[0] < 4 or x.shape[1] < 1 or x.shape[2] < 1:
        raise ValueError(f"thetas must have shape (T >= 4 rounds, R chains, d); got {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("thetas must be finite")
    t = x.shape[0]
    centred = x - x.mean(dim=(0, 1))
    f = torch.fft.rfft(centred, n=2 * t, dim=0)
    acov = torch.fft.irfft(f * f.conj(), n=2 * t, dim=0)[:t].sum(1)  # (T, d), summed over chains
    var = acov[0]
    if not bool((var > 0).all()):
        raise ValueError("thetas: a coordinate does not move (zero variance); its decay time is undefined")
    rho = acov / var
    pairs = rho[: 2 * ((t - 1) // 2)].reshape(-1, 2, rho.shape[1]).sum(1)  # Gamma_k = rho_2k + rho_2k+1
    positive = torch.cumprod((pairs > 0).to(torch.float64), dim=0)
    tau_int = -1.0 + 2.0 * (pairs * positive).sum(0)
    return max(1.0, float(tau_int.max()) / 2.0)


@dataclass(frozen=True)
class BiasState:
    """The estimator's state: the ``plan``, the rounds of it seen (``round``), the ``shift`` (d,) the
    sums are taken about (the chains' mean at the first round: keeps the squares well scaled),
    and per class of :attr:`BiasPlan.local_steps` and chain the sums of the kept iterates and
    of their squares ((G, R, d) float64) and the kept rounds per chain (``counts``, G)."""

    plan: BiasPlan
    round: int
    shift: torch.Tensor | None
    sums: torch.Tensor
    squares: torch.Tensor
    counts: tuple[int, ...]

    def record(self) -> dict:
        return {"plan": self.plan.record(), "round": self.round,
                "shift": None if self.shift is None else self.shift.tolist(), "sums": self.sums.tolist(),
                "squares": self.squares.tolist(), "counts": list(self.counts)}

    @classmethod
    def from_record(cls, rec: dict) -> "BiasState":
        shift = None if rec["shift"] is None else _tensor(rec["shift"])
        return cls(BiasPlan.from_record(rec["plan"]), int(rec["round"]), shift, _tensor(rec["sums"]),
                   _tensor(rec["squares"]), tuple(int(c) for c in rec["counts"]))


def _tensor(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def bias_init(plan: BiasPlan, chains: int, dim: int) -> BiasState:
    """An empty measurement of ``plan`` (a :class:`BiasPlan`) over ``chains`` (>= 2: the jackknife
    leaves one out) chains of ``dim`` (>= 1) coordinates."""
    if not isinstance(plan, BiasPlan):
        raise ValueError(f"plan must be a BiasPlan (plan_segments(...)); got {type(plan).__name__}")
    chains = check_int("chains", chains, 2)
    dim = check_int("dim", dim, 1)
    g = len(plan.local_steps)
    zeros = torch.zeros(g, chains, dim, dtype=torch.float64)
    return BiasState(plan, 0, None, zeros, zeros.clone(), (0,) * g)


def bias_update(state: BiasState, theta: Any) -> BiasState:
    """With ``theta`` (R, d), the broadcast iterate after round ``state.round`` of the plan (the round
    that ran K = ``state.plan.schedule()[state.round]``). Finite, of the state's shape; a round
    past the plan's end is a ValueError naming ``state``."""
    if state.round >= state.plan.rounds:
        raise ValueError(f"state: the plan's {state.plan.rounds} rounds are all measured; call bias_final")
    x = torch.as_tensor(theta).detach().to(device="cpu", dtype=torch.float64)
    if x.shape != state.sums.shape[1:]:
        raise ValueError(f"theta must have shape (R, d) = {tuple(state.sums.shape[1:])}; got {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"theta must be finite (round {state.round} of the plan)")
    shift = x.mean(0) if state.shift is None else state.shift
    i, keep = state.plan.where(state.round)
    if not keep:
        return replace(state, round=state.round + 1, shift=shift)
    y = x - shift
    sums, squares = state.sums.clone(), state.squares.clone()
    sums[i] += y
    squares[i] += y * y
    counts = tuple(c + (j == i) for j, c in enumerate(state.counts))
    return BiasState(state.plan, state.round + 1, shift, sums, squares, counts)


@dataclass(frozen=True)
class BiasEstimate:
    """The measured bias of ``local_steps`` = K against K = 1, per coordinate (tuples of floats):
    ``mean_shift`` (E_K - E_1) / sd_1 and ``sd_ratio`` sd_K / sd_1, with their jackknife standard
    errors; ``chains`` (R), ``kept`` (kept rounds per chain of K = 1 and of K), ``rounds`` (of the
    plan measured)."""

    local_steps: int
    mean_shift: tuple[float, ...]
    mean_shift_se: tuple[float, ...]
    sd_ratio: tuple[float, ...]
    sd_ratio_se: tuple[float, ...]
    chains: int
    kept: tuple[int, int]
    rounds: int

    @property
    def worst(self) -> float:
        """max over the coordinates of |mean shift| and |sd ratio - 1| (the point estimate)."""
        return max(max(abs(v) for v in self.mean_shift), max(abs(v - 1.0) for v in self.sd_ratio))

    def record(self) -> dict:
        """Plain data (for a trace, a checkpoint, ArviZ attributes)."""
        return {"local_steps": self.local_steps, "mean_shift": list(self.mean_shift),
                "mean_shift_se": list(self.mean_shift_se), "sd_ratio": list(self.sd_ratio),
                "sd_ratio_se": list(self.sd_ratio_se), "chains": self.chains, "kept": list(self.kept),
                "rounds": self.rounds}

    @classmethod
    def from_record(cls, rec: dict) -> "BiasEstimate":
        fl = lambda v: tuple(float(x) for x in v)  # noqa: E731
        return cls(int(rec["local_steps"]), fl(rec["mean_shift"]), fl(rec["mean_shift_se"]), fl(rec["sd_ratio"]),
                   fl(rec["sd_ratio_se"]), int(rec["chains"]), tuple(int(k) for k in rec["kept"]), int(rec["rounds"]))


def chain_moments(sums: torch.Tensor, squares: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every chain's leave-one-out (and, last, the all-chains) mean and variance: (R + 1, d) each."""
    r = sums.shape[0]
    a, q = sums / count, squares / count  # per chain (R, d)
    ta, tq = a.sum(0), q.sum(0)
    mean = torch.cat([(ta - a) / (r - 1), (ta / r)[None]])
    square = torch.cat([(tq - q) / (r - 1), (tq / r)[None]])
    return mean, square - mean * mean


def jackknife(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The all-chains value (last row) and the jackknife standard error from the R leave-one-out rows."""
    loo = values[:-1]
    r = loo.shape[0]
    se = torch.sqrt((r - 1) / r * ((loo - loo.mean(0)) ** 2).sum(0))
    return values[-1], se


def bias_final(state: BiasState) -> tuple[BiasEstimate, ...]:
    """One :class:`BiasEstimate` per candidate K of the plan, in order. Every K (1 included) must have
    kept rounds (else a ValueError naming ``state``: too few rounds measured); the plan need not be
    finished (the estimate says how many rounds it used)."""
    if min(state.counts) < 1:
        missing = [k for k, c in zip(state.plan.local_steps, state.counts) if c < 1]
        raise ValueError(f"state: no kept rounds yet for K = {missing} (measured {state.round} of the plan's "
                         f"{state.plan.rounds} rounds)")
    mean1, var1 = chain_moments(state.sums[0], state.squares[0], state.counts[0])
    if not bool((var1 > 0).all()):
        raise ValueError("state: a coordinate does not move in the K = 1 rounds (zero spread); no bias in sd units")
    sd1 = var1.sqrt()
    out = []
    for i, k in enumerate(state.plan.candidates, start=1):
        mean, var = chain_moments(state.sums[i], state.squares[i], state.counts[i])
        shift, shift_se = jackknife((mean - mean1) / sd1)
        ratio, ratio_se = jackknife(var.clamp(min=0.0).sqrt() / sd1)
        out.append(BiasEstimate(k, tuple(shift.tolist()), tuple(shift_se.tolist()), tuple(ratio.tolist()),
                                tuple(ratio_se.tolist()), int(state.sums.shape[1]),
                                (state.counts[0], state.counts[i]), state.round))
    return tuple(out)


# -- verdicts -------------------------------------------------------------------------------------
def _quantile(estimate: BiasEstimate, confidence: float, sd: bool = True) -> float:
    """Student's t quantile (R - 1 degrees of freedom) of one of the 2 d one-sided tests at the
    Bonferroni level (1 - confidence) / (2 d) (d tests of the means alone where not ``sd``)."""
    from scipy.special import stdtrit  # scipy.stats.t.ppf's function, without importing scipy.stats (about 1 s)

    tests = (2 if sd else 1) * len(estimate.mean_shift)
    return float(stdtrit(estimate.chains - 1, 1.0 - (1.0 - confidence) / tests))


def _checked(estimate: Any, tolerance: Any, confidence: Any) -> tuple[float, float]:
    if not isinstance(estimate, BiasEstimate):
        raise ValueError(f"estimate must be a BiasEstimate (bias_final); got {type(estimate).__name__}")
    tolerance = check_real("tolerance", tolerance, low=0.0, low_open=True)
    confidence = check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    return tolerance, confidence


def _deviations(estimate: BiasEstimate, sd: bool = True):
    """(|deviation|, standard error) of the 2 d quantities: the mean shifts and sd ratios - 1 (the
    mean shifts alone where not ``sd``)."""
    devs = [abs(v) for v in estimate.mean_shift] + ([abs(v - 1.0) for v in estimate.sd_ratio] if sd else [])
    return zip(devs, list(estimate.mean_shift_se) + (list(estimate.sd_ratio_se) if sd else []))


def margins(estimate: BiasEstimate, confidence: float = 0.95, *,
            sd: bool = True) -> tuple[tuple[str, int, float, float], ...]:
    """The 2 d tests of :func:`exceeds` and :func:`within` one by one: (``"mean"`` or ``"sd"``, the
    coordinate, |mean shift| or |sd ratio - 1|, its margin: the t quantile times the standard error,
    simultaneous at ``confidence``). A test exceeds a tolerance where deviation - margin > tolerance
    and is within it where deviation + margin <= tolerance (what a warning names). ``sd=False``:
    the d tests of the means alone (the companions' check, :mod:`~fedlangevin.warmup.companions`)."""
    _, confidence = _checked(estimate, 1.0, confidence)
    q, d = _quantile(estimate, confidence, sd), len(estimate.mean_shift)
    return tuple((("mean", "sd")[j // d], j % d, dev, q * se) for j, (dev, se) in enumerate(_deviations(estimate, sd)))


def exceeds(estimate: BiasEstimate, tolerance: float = 0.1, confidence: float = 0.95, *, sd: bool = True) -> bool:
    """True when the measured bias exceeds ``tolerance`` (> 0, in K = 1 sds) at ``confidence`` (in
    (0, 1)): on some coordinate |mean shift| or |sd ratio - 1| is above the tolerance by more than
    its standard error times the t quantile of :func:`_quantile` (simultaneous over the 2 d tests).
    The warning's test: a fixed K is called biased only on evidence. ``sd=False``: the d mean
    shifts alone (Bonferroni over d)."""
    tolerance, confidence = _checked(estimate, tolerance, confidence)
    q = _quantile(estimate, confidence, sd)
    return any(dev - q * se > tolerance for dev, se in _deviations(estimate, sd))


def within(estimate: BiasEstimate, tolerance: float = 0.1, confidence: float = 0.95) -> bool:
    """True when every coordinate's |mean shift| and |sd ratio - 1| is below ``tolerance`` at
    ``confidence`` (its upper bound: value + quantile x standard error, simultaneous over the 2 d
    tests). The choice's test: a K is taken only on evidence that it is safe."""
    tolerance, confidence = _checked(estimate, tolerance, confidence)
    q = _quantile(estimate, confidence)
    return all(dev + q * se <= tolerance for dev, se in _deviations(estimate))


@dataclass(frozen=True)
class LocalStepsChoice:
    """:func:`choose_local_steps`' answer: ``local_steps`` the K chosen, the ``tolerance`` and
    ``confidence`` used, the ``ladder``, and the ``evidence``: per K measured, in ladder order,
    (K, worst point estimate, its upper bound, within the tolerance)."""

    local_steps: int
    tolerance: float
    confidence: float
    ladder: tuple[int, ...]
    evidence: tuple[tuple[int, float, float, bool], ...]

    def record(self) -> dict:
        return {"local_steps": self.local_steps, "tolerance": self.tolerance, "confidence": self.confidence,
                "ladder": list(self.ladder), "evidence": [list(e) for e in self.evidence]}

    @classmethod
    def from_record(cls, rec: dict) -> "LocalStepsChoice":
        return cls(int(rec["local_steps"]), float(rec["tolerance"]), float(rec["confidence"]),
                   tuple(int(k) for k in rec["ladder"]),
                   tuple((int(k), float(w), float(u), bool(ok)) for k, w, u, ok in rec["evidence"]))


def choose_local_steps(estimates: Sequence[BiasEstimate], tolerance: float = 0.1, confidence: float = 0.95,
                       ladder: Sequence[int] = DEFAULT_LADDER) -> LocalStepsChoice:
    """The largest K of ``ladder`` (:func:`check_ladder`) such that K and every K below it on the
    ladder were measured (``estimates``: :class:`BiasEstimate` s, at most one per K, every K on the
    ladder) and are :func:`within` ``tolerance`` at ``confidence``; K = 1 (the reference) when
    K = ladder[1] is not. A pure function: the evidence says what every measured K gave."""
    ladder = check_ladder(ladder)
    tolerance = check_real("tolerance", tolerance, low=0.0, low_open=True)
    confidence = check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    if isinstance(estimates, BiasEstimate) or not hasattr(estimates, "__iter__"):
        raise ValueError(f"estimates must be a sequence of BiasEstimate; got {type(estimates).__name__}")
    estimates = list(estimates)
    by_k: dict[int, BiasEstimate] = {}
    for e in estimates:
        if not isinstance(e, BiasEstimate):
            raise ValueError(f"estimates must be a sequence of BiasEstimate; got an entry {type(e).__name__}")
        if e.local_steps not in ladder or e.local_steps in by_k:
            raise ValueError(f"estimates must hold at most one estimate per K of the ladder {list(ladder)}; "
                             f"got K = {e.local_steps}" + (" twice" if e.local_steps in by_k else ""))
        by_k[e.local_steps] = e
    chosen, going, evidence = 1, True, []
    for k in ladder[1:]:
        e = by_k.get(k)
        if e is None:
            going = False
            continue
        q = _quantile(e, confidence)
        upper = max(dev + q * se for dev, se in _deviations(e))
        ok = within(e, tolerance, confidence)
        evidence.append((k, e.worst, upper, ok))
        if going and ok:
            chosen = k
        else:
            going = False
    return LocalStepsChoice(chosen, tolerance, confidence, ladder, tuple(evidence))
