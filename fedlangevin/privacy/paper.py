"""The paper's differential-privacy bound for FA-LD, exactly as published.

Deng, Zhang, Ma, Song, Lin, *On Convergence of Federated Averaging Langevin Dynamics*:
Theorem 6.1 (scheme II) and Theorem G.3 (schemes I and II), App. G, with the step-size
condition of eq. (59), the "at least" form of the discussion after Theorem G.3 and the
step-size scalings of eqs. (71), (75) and (76).

Neighbouring datasets differ by the substitution of one data point of one client
(Assumption G.1 bounds the change of a per-example gradient by ``sensitivity`` Delta_l;
Assumption G.2: every local step uses a uniformly random subset of a fraction ``gamma`` of the
client's data). The chain of the theorem, with every intermediate quantity returned by
:func:`paper_bound`:

- eq. (56): one local step of client c is a Gaussian mechanism, eps_0 = c(delta_0) Delta_l /
  gamma * sqrt(eta / (2 p_c tau (1 - rho^2))), c(delta_0) = sqrt(2 log(1.25 / delta_0));
- eq. (57)-(58): subsampling a fraction gamma (Balle et al. 2018, Thm 9) and e^x - 1 <= 2x
  for x <= 1 give (eps_1, gamma delta_0) with
  eps_1 = 2 Delta_l sqrt(eta log(1.25 / delta_0) / (tau (1 - rho^2) min_c p_c));
  the step "x <= 1" is the step-size condition (59):
  eta <= tau (1 - rho^2) gamma^2 min_c p_c / (Delta_l^2 log(1.25 / delta_0));
- eq. (60)-(61): K local steps by advanced composition,
  eps_K = eps_1 min{sqrt(2 K log(1/delta_1)) + K (e^{eps_1} - 1), K},
  delta_K = K gamma delta_0 + delta_1;
- eq. (64)-(65): device sampling, scheme I (S draws with replacement) or II (S of N without),
  eps~_K = log(1 + q (e^{eps_K} - 1)) with q = 1 - (1 - 1/N)^S (I) or S/N (II),
  delta~_K = sum_{s=1}^S C(S,s) N^-s (1 - 1/N)^{S-s} delta_{K,s} (I) or (S/N) delta_K (II),
  delta_{K,s} = (e^{eps_K} - 1) delta_{K,s,0} / (e^{eps_K / s} - 1),
  delta_{K,s,0} = 1.25 K gamma (delta_0 / 1.25)^{1/s^2} + delta_1;
- eq. (66)-(67): T/K rounds by advanced composition,
  eps = eps~_K min{sqrt(2 (T/K) log(1/delta_2)) + (T/K)(e^{eps~_K} - 1), T/K},
  delta = (T/K) delta~_K + delta_2.

Numerics: every exponential is evaluated in log space or guarded, so nothing overflows; a
quantity whose true value exceeds the float range is returned as ``inf``. The bound is a
guarantee only inside the theorem's hypotheses: outside the step-size condition the result is
*returned, clearly marked* (``within_theorem = False``, ``epsilon = inf``, ``delta = 1``,
the formula's values kept in ``epsilon_formula`` / ``delta_formula``); a formula delta >= 1
(scheme I often gives one) is flagged ``vacuous = True``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import gammaln

from fedlangevin._validation import check_int, check_real

__all__ = [
    "PaperBound",
    "paper_bound",
    "paper_step_size_limit",
    "inclusion_probability",
    "eq71_step_size",
    "eq75_epsilon",
    "eq76_step_size",
    "paper_delta_split",
]

_LOG_MAX = math.log(np.finfo(float).max)
#: largest T accepted: counts stay exact in float64 arithmetic (2**53)
MAX_ITERATIONS = 2**53
#: largest N (and S of scheme I) accepted, for the same reason: 1/N, S/N and S log(1 - 1/N) are floats
MAX_CLIENTS = 2**53


# -- argument checks --------------------------------------------------------------------------
def _scheme(scheme) -> str:
    """'I' or 'II' (a string, any case; 'scheme I' too). Numbers are refused: ``scheme=2`` is not
    a scheme's name (it was taken as 'II')."""
    s = scheme.strip().upper() if isinstance(scheme, str) else None
    if s in ("I", "SCHEMEI", "SCHEME I"):
        return "I"
    if s in ("II", "SCHEMEII", "SCHEME II"):
        return "II"
    raise ValueError(f"scheme must be 'I' (S draws with replacement) or 'II' (S of N without replacement); got {scheme!r}")


def _check_common(tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme):
    """Validate the mechanism arguments shared by both accountants; returns them normalised."""
    tau = check_real("tau", tau, low=0.0, low_open=True)
    rho = check_real("rho", rho, low=0.0, high=1.0)
    if rho == 1.0:
        raise ValueError(
            "rho must be in [0, 1): with rho = 1 the private noise sqrt(2 eta tau (1 - rho^2) / p_c) is zero, "
            "the clients' uploads are deterministic given the public shared noise and no privacy holds"
        )
    gamma = check_real("gamma", gamma, low=0.0, high=1.0, low_open=True)
    sensitivity = check_real("sensitivity", sensitivity, low=0.0, low_open=True)
    num_clients = check_int("num_clients", num_clients, 1, MAX_CLIENTS)
    p_min = check_real("p_min", p_min, low=0.0, high=1.0, low_open=True)
    if p_min > 1.0 / num_clients * (1 + 1e-12):
        raise ValueError(
            f"p_min must be <= 1/num_clients = {1.0 / num_clients:g} (the smallest of {num_clients} weights "
            f"summing to 1); got {p_min:g}"
        )
    scheme = _scheme(scheme)
    num_sampled = check_int("num_sampled", num_sampled, 1, num_clients if scheme == "II" else MAX_CLIENTS)
    local_steps = check_int("local_steps", local_steps, 1)
    iterations = check_int("iterations", iterations, 1, MAX_ITERATIONS)
    if iterations % local_steps:
        raise ValueError(
            f"iterations must be a multiple of local_steps (T = E K, whole communication rounds); "
            f"got T = {iterations}, K = {local_steps}"
        )
    return tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme


def inclusion_probability(scheme: str, num_clients: int, num_sampled: int) -> float:
    """Probability that a given client uploads in a round: S/N (II), 1 - (1 - 1/N)^S (I), eq. (64)."""
    scheme = _scheme(scheme)
    n = check_int("num_clients", num_clients, 1, MAX_CLIENTS)
    s = check_int("num_sampled", num_sampled, 1, n if scheme == "II" else MAX_CLIENTS)
    if scheme == "II":
        return s / n
    return -math.expm1(s * math.log1p(-1.0 / n)) if n > 1 else 1.0


# -- numerically safe pieces ------------------------------------------------------------------
def _exp(x: float) -> float:
    return math.inf if x > _LOG_MAX else math.exp(x)


def _expm1(x: float) -> float:
    return math.inf if x > _LOG_MAX else math.expm1(x)


def _log_expm1(x: float) -> float:
    """log(e^x - 1) for x > 0 without overflow."""
    return x + math.log1p(-math.exp(-x)) if x > 30 else math.log(math.expm1(x))


def _amplify(q: float, eps: float) -> float:
    """log(1 + q (e^eps - 1)) = log((1 - q) + q e^eps), stable for any eps >= 0."""
    if q >= 1.0:
        return eps
    if eps < 30:
        return math.log1p(q * math.expm1(eps))
    return float(np.logaddexp(math.log1p(-q), math.log(q) + eps))


def _advanced(eps: float, k: float, delta_prime: float) -> float:
    """eps * min{sqrt(2 k log(1/delta')) + k (e^eps - 1), k} (Dwork et al. 2010, as eqs. 60/66)."""
    if eps == 0.0:
        return 0.0
    basic = k * eps
    if delta_prime <= 0.0:
        return basic
    adv = eps * (math.sqrt(2.0 * k * math.log(1.0 / delta_prime)) + k * _expm1(eps))
    return min(adv, basic)


# -- the theorem ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PaperBound:
    """Result of :func:`paper_bound`: the theorem's (epsilon, delta) and every intermediate value.

    ``epsilon``, ``delta``: the guarantee, (eps^(3)_{K,T}, delta^(3)_{K,T}) of Thm 6.1 / G.3 —
    ``inf`` and 1 when the step-size condition (59) fails (no guarantee from the theorem).
    ``epsilon_formula``, ``delta_formula``: the theorem's formulas evaluated regardless.
    ``eps_0`` (eq. 56, worst client), ``eps_1`` (eq. 58), ``eps_K``, ``delta_K`` (eqs. 60-61),
    ``eps_tilde_K``, ``delta_tilde_K`` (eqs. 64-65), ``q``: client inclusion probability.
    ``eta_max``: the right end of the step-size condition (59); ``within_theorem``: eta <= eta_max.
    ``vacuous``: the formula delta is >= 1 (a true but empty statement).
    ``basic_epsilon``, ``basic_delta``: the "at least" form stated after the theorem, i.e. the
    same formulas with delta_1 = delta_2 = 0 (for scheme II:
    ((T/K) log(1 + (S/N)(e^{K eps_1} - 1)), (S/N) gamma T delta_0)).
    """

    epsilon: float
    delta: float
    epsilon_formula: float
    delta_formula: float
    eps_0: float
    eps_1: float
    eps_K: float
    delta_K: float
    eps_tilde_K: float
    delta_tilde_K: float
    q: float
    eta_max: float
    within_theorem: bool
    vacuous: bool
    basic_epsilon: float
    basic_delta: float
    scheme: str
    rounds: int
    inputs: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def status(self) -> str:
        """One line: whether and how the numbers are a guarantee."""
        if not self.within_theorem:
            return (f"OUTSIDE THE THEOREM: eta = {self.inputs.get('eta', float('nan')):.4g} exceeds the step-size "
                    f"condition (59) eta <= {self.eta_max:.4g}; the paper gives no guarantee")
        if self.vacuous:
            return f"VACUOUS: the theorem's delta = {self.delta_formula:.4g} >= 1"
        return "inside the theorem (step-size condition (59) holds)"

    def summary(self) -> str:
        rows = [
            ("eps_0 (eq. 56, worst client)", self.eps_0),
            ("eps_1 (eq. 58)", self.eps_1),
            ("eps_K (eq. 60)", self.eps_K),
            ("delta_K (eq. 61)", self.delta_K),
            (f"q (client inclusion, scheme {self.scheme})", self.q),
            ("eps~_K (eq. 64)", self.eps_tilde_K),
            ("delta~_K (eq. 65)", self.delta_tilde_K),
            ("epsilon (eq. 66)", self.epsilon_formula),
            ("delta (eq. 67)", self.delta_formula),
            ("step-size limit eta_max (eq. 59)", self.eta_max),
            ("'at least' epsilon (delta_1 = delta_2 = 0)", self.basic_epsilon),
            ("'at least' delta", self.basic_delta),
        ]
        lines = [f"  {name:<44}{value:.6g}" for name, value in rows]
        lines.append(f"  status: {self.status}")
        return "\n".join(lines)


def paper_step_size_limit(*, tau, rho, gamma, sensitivity, p_min, delta0) -> float:
    """Right end of the step-size condition (59): tau (1-rho^2) gamma^2 p_min / (Delta^2 log(1.25/delta_0))."""
    delta0 = check_real("delta0", delta0, low=0.0, high=1.0, low_open=True, high_open=True)
    ratio = gamma / sensitivity  # (gamma / Delta)^2 may exceed the float range: inf, not ZeroDivisionError
    return tau * (1.0 - rho * rho) * p_min * (ratio * ratio) / math.log(1.25 / delta0)


def _formulas(eta, tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme,
              delta0, delta1, delta2):
    """The theorem's chain; inputs already validated. Returns a dict of all quantities."""
    k = local_steps
    rounds = iterations // local_steps
    var = tau * (1.0 - rho * rho) * p_min
    log_c = math.log(1.25 / delta0)
    eps_0 = math.sqrt(2.0 * log_c) * sensitivity / gamma * math.sqrt(eta / (2.0 * var))      # eq. (56)
    eps_1 = 2.0 * sensitivity * math.sqrt(eta * log_c / var)                                   # eq. (58)
    eps_K = _advanced(eps_1, k, delta1)                                                        # eq. (60)
    delta_K = k * gamma * delta0 + delta1                                                      # eq. (61)
    q = inclusion_probability(scheme, num_clients, num_sampled)
    eps_tK = _amplify(q, eps_K)                                                                # eq. (64)
    if scheme == "II":
        delta_tK = q * delta_K                                                                 # eq. (65)
    else:
        delta_tK = _scheme_one_delta(eps_K, k, gamma, delta0, delta1, num_clients, num_sampled)
    eps = _advanced(eps_tK, rounds, delta2)                                                    # eq. (66)
    delta = rounds * delta_tK + delta2                                                         # eq. (67)
    return dict(eps_0=eps_0, eps_1=eps_1, eps_K=eps_K, delta_K=delta_K, q=q, eps_tilde_K=eps_tK,
                delta_tilde_K=delta_tK, epsilon=eps, delta=delta, rounds=rounds)


_FULL_SUM = 10**7  # scheme-I terms summed exactly (80 MB per float64 work array)


def _scheme_one_delta(eps_K, k, gamma, delta0, delta1, n, s_max) -> float:
    """delta~_K under scheme I (eq. 65), summed in log space; inf if it exceeds the float range.

    The sum runs over s = 1..S weighted by Binomial(S, 1/N) probabilities. For S above
    _FULL_SUM terms only the window mean +- (40 sd + 2000) is summed: outside it every binomial
    weight is below e^-800 (Bernstein), and every other factor is at most
    S e^eps_K (1.25 K gamma + delta1), so the dropped part is below float64 resolution of the
    sum whenever eps_K < 700; memory and time are O(sqrt(S / N)) instead of O(S).
    """
    lo, hi = 1, s_max
    if s_max > _FULL_SUM and eps_K < 700.0:
        mean = s_max / n
        sd = math.sqrt(s_max * (1.0 / n) * (1.0 - 1.0 / n))
        lo = max(1, math.floor(mean - 40.0 * sd - 2000.0))
        hi = min(s_max, math.ceil(mean + 40.0 * sd + 2000.0))
    if hi - lo + 1 > _FULL_SUM:
        raise ValueError(
            f"num_sampled={s_max}: the scheme-I delta (eq. 65) sums {hi - lo + 1} terms; use num_sampled <= "
            f"{_FULL_SUM} or fewer clients per round"
        )
    s = np.arange(lo, hi + 1, dtype=np.float64)
    log_w = (gammaln(s_max + 1) - gammaln(s + 1) - gammaln(s_max - s + 1)
             + s * math.log(1.0 / n) + ((s_max - s) * math.log1p(-1.0 / n) if n > 1 else np.where(s == s_max, 0.0, -np.inf)))
    # delta_{K,s,0} = 1.25 K gamma (delta0 / 1.25)^(1/s^2) + delta1, in log space
    log_a = math.log(1.25 * k * gamma) + np.log(delta0 / 1.25) / s**2
    log_d0 = np.logaddexp(log_a, math.log(delta1)) if delta1 > 0 else log_a
    # (e^eps_K - 1) / (e^(eps_K/s) - 1); its limit s as eps_K -> 0
    if eps_K == 0.0:
        log_ratio = np.log(s)
    else:
        x = eps_K / s
        big = x > 30.0
        log_em1 = np.empty_like(x)
        log_em1[big] = x[big] + np.log1p(-np.exp(-x[big]))
        log_em1[~big] = np.log(np.expm1(x[~big]))
        log_ratio = _log_expm1(eps_K) - log_em1
    total = float(np.logaddexp.reduce(log_w + log_ratio + log_d0))
    return _exp(total)


def paper_bound(*, eta, tau=1.0, rho=0.0, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps,
                iterations, scheme="II", delta0, delta1, delta2) -> PaperBound:
    """The (epsilon, delta) of Theorem 6.1 / G.3 for FA-LD (Alg. 1), with every intermediate value.

    Parameters
    ----------
    eta : step size (constant, as in the theorem; > 0).
    tau : temperature (> 0).
    rho : correlation of the injected noise, in [0, 1); the shared part is public, only the
        private part sqrt(2 eta tau (1 - rho^2) / p_c) protects the data. rho = 1 is refused.
    gamma : fraction of a client's data used per local step (Assumption G.2), in (0, 1].
    sensitivity : Delta_l of Assumption G.1, sup ||grad l(theta; x) - grad l(theta; x')||.
    p_min : min_c p_c, the smallest client weight (<= 1/N).
    num_clients, num_sampled : N, and S clients per round (scheme II needs S <= N).
    local_steps, iterations : K and T (T a multiple of K: T/K communication rounds).
    scheme : "I" (S draws with replacement) or "II" (S of N without replacement). Full device
        participation is scheme II with S = N.
    delta0 : in (0, 1), the Gaussian mechanism's delta per local step.
    delta1, delta2 : in [0, 1), the slack of the two advanced compositions (0 = basic composition).

    Returns a :class:`PaperBound`. Outside the step-size condition (59) the result is marked
    (``within_theorem = False``) and its ``epsilon`` is ``inf``; see the module docstring.
    """
    eta = check_real("eta", eta, low=0.0, low_open=True)
    tau, rho, gamma, sensitivity, p_min, n, s, k, t, scheme = _check_common(
        tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme)
    delta0 = check_real("delta0", delta0, low=0.0, high=1.0, low_open=True, high_open=True)
    delta1 = check_real("delta1", delta1, low=0.0, high=1.0, high_open=True)
    delta2 = check_real("delta2", delta2, low=0.0, high=1.0, high_open=True)

    f = _formulas(eta, tau, rho, gamma, sensitivity, p_min, n, s, k, t, scheme, delta0, delta1, delta2)
    basic = _formulas(eta, tau, rho, gamma, sensitivity, p_min, n, s, k, t, scheme, delta0, 0.0, 0.0)
    eta_max = paper_step_size_limit(tau=tau, rho=rho, gamma=gamma, sensitivity=sensitivity, p_min=p_min, delta0=delta0)
    # compare with a relative tolerance so that eta = eta_max computed elsewhere counts as inside
    within = eta <= eta_max * (1.0 + 1e-12)
    vacuous = not (f["delta"] < 1.0)
    inputs = dict(eta=eta, tau=tau, rho=rho, gamma=gamma, sensitivity=sensitivity, p_min=p_min, num_clients=n,
                  num_sampled=s, local_steps=k, iterations=t, scheme=scheme, delta0=delta0, delta1=delta1, delta2=delta2)
    return PaperBound(
        epsilon=f["epsilon"] if within else math.inf,
        delta=f["delta"] if within else 1.0,
        epsilon_formula=f["epsilon"],
        delta_formula=f["delta"],
        eps_0=f["eps_0"], eps_1=f["eps_1"], eps_K=f["eps_K"], delta_K=f["delta_K"],
        eps_tilde_K=f["eps_tilde_K"], delta_tilde_K=f["delta_tilde_K"], q=f["q"],
        eta_max=eta_max, within_theorem=within, vacuous=vacuous,
        basic_epsilon=basic["epsilon"], basic_delta=basic["delta"],
        scheme=scheme, rounds=f["rounds"], inputs=inputs,
    )


# -- step-size scalings of the discussion after Thm G.3 --------------------------------------------
def _log_inv(name, d):
    d = check_real(name, d, low=0.0, high=1.0, low_open=True, high_open=True)
    return math.log(1.0 / d)


def eq71_step_size(*, tau=1.0, rho=0.0, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations,
                   delta0, delta1, delta2) -> float:
    """The explicit step-size condition (71) (scheme II) under which the bound (75) holds."""
    tau, rho, _, sensitivity, p_min, n, s, k, t, _ = _check_common(
        tau, rho, 1.0, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, "II")
    l0 = math.log(1.25 / check_real("delta0", delta0, low=0.0, high=1.0, low_open=True, high_open=True))
    l1, l2 = _log_inv("delta1", delta1), _log_inv("delta2", delta2)
    c2 = 2.0 * l0  # c(delta_0)^2
    pre = tau * (1 - rho * rho) * p_min / (2.0 * sensitivity**2 * c2)
    a = math.log1p(math.sqrt(2.0 * l1 / k)) ** 2
    b = math.log1p(n / s * math.sqrt(2.0 * k * l2 / t)) ** 2 / (8.0 * k * l1)
    return pre * min(a, b)


def eq75_epsilon(*, eta, tau=1.0, rho=0.0, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations,
                 delta0, delta1, delta2) -> float:
    """The closed-form bound (75) on eps^(3)_{K,T} (scheme II), valid when eta satisfies (71)."""
    eta = check_real("eta", eta, low=0.0, low_open=True)
    tau, rho, _, sensitivity, p_min, n, s, k, t, _ = _check_common(
        tau, rho, 1.0, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, "II")
    l0 = math.log(1.25 / check_real("delta0", delta0, low=0.0, high=1.0, low_open=True, high_open=True))
    l1, l2 = _log_inv("delta1", delta1), _log_inv("delta2", delta2)
    c = math.sqrt(2.0 * l0)
    inner = 4.0 * c * sensitivity * math.sqrt(eta * k * l1 / (tau * (1 - rho * rho) * p_min))
    return 2.0 * math.sqrt(2.0 * t / k * l2) * _amplify(s / n, inner)


@dataclass(frozen=True)
class Eq76StepSize:
    """Step sizes of the O-statements after Thm 6.1, with their hidden constants set to 1.

    ``eta_76``: the scale of eq. (76), tau (1-rho^2) N^2 p_min log(1/delta_2) /
    (Delta^2 S^2 T log(1/delta_0) log(1/delta_1)); ``eta_target``: the eta at which the O-form
    eps = (S Delta / N) sqrt(eta T log(1/delta_0) log(1/delta_1) log(1/delta_2) / (tau (1-rho^2) p_min))
    equals the target; ``eta = min(eta_76, eta_target)``. Orders of magnitude, not guarantees:
    use :func:`fedlangevin.privacy.largest_step_size` for a certified value.
    """

    eta: float
    eta_76: float
    eta_target: float


def eq76_step_size(*, target_epsilon, tau=1.0, rho=0.0, sensitivity, p_min, num_clients, num_sampled, iterations,
                   delta0, delta1, delta2) -> Eq76StepSize:
    """Step size for a target epsilon from eq. (76) and the O-form of eps (Sec. 6), constants = 1."""
    target = check_real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    tau, rho, _, sensitivity, p_min, n, s, _, t, _ = _check_common(
        tau, rho, 1.0, sensitivity, p_min, num_clients, num_sampled, 1, iterations, "II")
    l0, l1, l2 = _log_inv("delta0", delta0), _log_inv("delta1", delta1), _log_inv("delta2", delta2)
    var = tau * (1 - rho * rho) * p_min
    eta_76 = var * n * n * l2 / (sensitivity**2 * s * s * t * l0 * l1)
    eta_target = (target * n / (s * sensitivity)) ** 2 * var / (t * l0 * l1 * l2)
    return Eq76StepSize(eta=min(eta_76, eta_target), eta_76=eta_76, eta_target=eta_target)


def paper_delta_split(target_delta, *, gamma, num_clients, num_sampled, local_steps, iterations, scheme="II"):
    """(delta0, delta1, delta2) giving each term of the scheme II delta (eq. 67) a third of the target.

    delta = (S/N) gamma T delta_0 + (T S / (K N)) delta_1 + delta_2 (Thm 6.1), so delta_2 =
    target/3, delta_1 = target/3 * K N / (T S), delta_0 = target/3 * N / (S gamma T). For
    scheme I the client inclusion probability 1 - (1 - 1/N)^S replaces S/N; scheme I's delta
    (eq. 65) then still differs from the target (check the returned bound's ``delta``).
    """
    target = check_real("target_delta", target_delta, low=0.0, high=1.0, low_open=True, high_open=True)
    gamma = check_real("gamma", gamma, low=0.0, high=1.0, low_open=True)
    k = check_int("local_steps", local_steps, 1)
    t = check_int("iterations", iterations, 1, MAX_ITERATIONS)
    q = inclusion_probability(scheme, num_clients, num_sampled)
    third = target / 3.0
    return min(third / (q * gamma * t), 0.5), min(third * k / (t * q), 0.5), third
