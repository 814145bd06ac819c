"""Budget solvers: the largest step size, number of iterations, clients per round or noise
correlation that keeps FA-LD within a target (epsilon, delta).

This is the use the paper suggests after Theorem 6.1 ("under some DP budget (eps*, delta*),
we can select the largest rho in [0, 1] and S in [N] such that eps <= eps* and delta <=
delta*"), for either accountant:

- ``accountant="tight"`` (default): :func:`fedlangevin.privacy.tight_epsilon` at delta*;
- ``accountant="paper"``: :func:`fedlangevin.privacy.paper_bound` must hold inside the
  theorem (step-size condition 59) with epsilon <= eps* and delta <= delta*. Its delta is set
  by (delta0, delta1, delta2); left as ``None`` they are chosen by
  :func:`fedlangevin.privacy.paper_delta_split` (each term of eq. 67 gets a third of delta*,
  exact for scheme II), recomputed for every candidate value.

Every privacy loss grows with eta / (1 - rho^2), with T and with S (the tests check it), so
each solver searches a monotone predicate: bracketing by doubling, then bisection (a relative
tolerance ``rtol`` for eta and rho, exact for the integers T and S). The answer is certified
(the returned value meets the budget); an infeasible budget raises ``ValueError`` saying why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from fedlangevin._validation import check_int, check_real
from fedlangevin.privacy.accountant import (
    MAX_GRID_POINTS,
    NoiseOutOfRange,
    Z_RANGE,
    _levels_from,
    _rdp_from_levels,
    _tight_with_method,
)
from fedlangevin.privacy.paper import _check_common, paper_bound, paper_delta_split

__all__ = [
    "BudgetSolution",
    "largest_correlation",
    "largest_iterations",
    "largest_num_sampled",
    "largest_step_size",
]


@dataclass(frozen=True)
class BudgetSolution:
    """The solved parameter, the (epsilon, delta) it spends and how it was accounted.

    ``deltas``: the paper accountant's (delta0, delta1, delta2) at the solution (``None`` for
    the tight accountant).
    """

    parameter: str
    value: float
    epsilon: float
    delta: float
    accountant: str
    deltas: tuple[float, float, float] | None = None


class _Budget:
    """Evaluates one accountant against (eps*, delta*) for candidate mechanism arguments."""

    def __init__(self, accountant, target_epsilon, target_delta, delta0, delta1, delta2, discretization):
        acc = str(accountant).lower()
        if acc not in ("tight", "paper"):
            raise ValueError(f"accountant must be 'tight' or 'paper'; got {accountant!r}")
        self.accountant = acc
        self.eps = check_real("target_epsilon", target_epsilon, low=0.0, low_open=True)
        self.delta = check_real("target_delta", target_delta, low=0.0, high=1.0, low_open=True, high_open=True)
        given = [d is not None for d in (delta0, delta1, delta2)]
        if any(given) and not all(given):
            raise ValueError("give all of delta0, delta1, delta2 or none of them (then they are split from target_delta)")
        self.deltas = (delta0, delta1, delta2) if all(given) else None
        self.discretization = discretization

    def evaluate(self, kw: dict, search: bool = False, above_range: bool = False) -> tuple[bool, float, float, tuple | None]:
        """(meets the budget, epsilon, delta, paper deltas) for mechanism arguments ``kw``.

        ``search``: a step of the solver's search. The tight accountant then answers from the
        RDP epsilon when that already meets the budget (tight <= RDP), and otherwise uses a
        PLD grid of at most MAX_GRID_POINTS / 16 points unless ``discretization`` was given (a
        coarser grid is still an upper bound, so the solution stays certified; it may be
        slightly below the one of the finest grid).
        Settings whose noise multiplier is too small for the accountant do not meet the budget;
        ``above_range``: settings whose noise multiplier is above its range (epsilon below ~1e-7, not
        computed) count as meeting it in the search (the step-size search then moves to larger, certifiable
        step sizes; :func:`largest_step_size` refuses an answer that stays there).
        """
        if self.accountant == "tight":
            try:
                levels = _levels_from(dict(kw))
            except NoiseOutOfRange as exc:
                if search and exc.side == "low":
                    return False, math.inf, self.delta, None
                if search and above_range and exc.side == "high":
                    return True, 0.0, self.delta, None
                raise
            rdp = _rdp_from_levels(levels, self.delta)
            if search and rdp <= self.eps:
                return True, rdp, self.delta, None
            coarse = search and self.discretization is None  # an explicit grid is the user's choice
            eps, _, _ = _tight_with_method(levels, self.delta, self.discretization, rdp,
                                           MAX_GRID_POINTS // 16 if coarse else None)
            return eps <= self.eps, eps, self.delta, None
        if self.deltas is None:
            deltas = paper_delta_split(self.delta, gamma=kw["gamma"], num_clients=kw["num_clients"],
                                       num_sampled=kw["num_sampled"], local_steps=kw["local_steps"],
                                       iterations=kw["iterations"], scheme=kw["scheme"])
        else:
            deltas = self.deltas
        b = paper_bound(**kw, delta0=deltas[0], delta1=deltas[1], delta2=deltas[2])
        ok = b.within_theorem and b.epsilon <= self.eps and b.delta <= self.delta
        return ok, b.epsilon_formula, b.delta_formula, tuple(deltas)

    def solution(self, name, value, kw) -> BudgetSolution:
        _, eps, delta, deltas = self.evaluate(kw)
        return BudgetSolution(name, value, eps, delta, self.accountant, deltas)


def _mechanism(tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme):
    tau, rho, gamma, sensitivity, p_min, n, s, k, t, scheme = _check_common(
        tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme)
    return dict(tau=tau, rho=rho, gamma=gamma, sensitivity=sensitivity, p_min=p_min, num_clients=n,
                num_sampled=s, local_steps=k, iterations=t, scheme=scheme)


def _largest_real(ok: Callable[[float], bool], start: float, upper: float | None, rtol: float) -> float | None:
    """Largest x > 0 with ok(x) (ok monotone: true then false), to relative tolerance; None if none.

    ``upper``: a hard upper limit (the answer is upper itself if ok(upper)).
    """
    if upper is not None:
        if ok(upper):
            return upper
        hi, lo = upper, None
        x = upper
    else:
        x, lo, hi = start, None, None
        if ok(x):
            lo = x
            while hi is None:
                x *= 4.0
                if x > 1e300:
                    return math.inf
                if ok(x):
                    lo = x
                else:
                    hi = x
        else:
            hi = x  # the start is over the budget: the bracket's upper end
    while lo is None:
        x /= 4.0
        if x < 1e-300:
            return None
        if ok(x):
            lo = x
        else:
            hi = x
    return geometric_bisect(ok, lo, hi, rtol, largest=True)


def geometric_bisect(ok: Callable[[float], bool], lo: float, hi: float, rtol: float, *, largest: bool) -> float:
    """Narrow 0 < lo < hi geometrically to a relative width ``rtol`` around the boundary of the
    monotone test ``ok``. ``largest``: ok(lo) holds and ok(hi) fails, and the result is the largest
    value found to pass (lo); otherwise ok(hi) holds and ok(lo) fails, and it is the smallest (hi)."""
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        if ok(mid) == largest:
            lo = mid
        else:
            hi = mid
    return lo if largest else hi


def _largest_int(ok: Callable[[int], bool], upper: int | None) -> int | None:
    """Largest integer m >= 1 with ok(m) (monotone); None if ok(1) fails."""
    if not ok(1):
        return None
    lo = 1
    if upper is not None and ok(upper):
        return upper
    hi = upper
    if hi is None:
        x = 2
        while True:
            if ok(x):
                lo = x
                x *= 2
                if x > 2**50:
                    raise ValueError("the budget is met for every number of rounds up to 2^50")
            else:
                hi = x
                break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def largest_step_size(*, target_epsilon, target_delta, accountant="tight", tau=1.0, rho=0.0, gamma, sensitivity,
                      p_min, num_clients, num_sampled, local_steps, iterations, scheme="II", delta0=None, delta1=None,
                      delta2=None, rtol=1e-3, discretization=None) -> BudgetSolution:
    """Largest constant step size eta meeting (target_epsilon, target_delta).

    With the paper accountant the answer never exceeds the step-size condition (59).
    """
    budget = _Budget(accountant, target_epsilon, target_delta, delta0, delta1, delta2, discretization)
    kw = _mechanism(tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme)
    rtol = check_real("rtol", rtol, low=0.0, low_open=True)
    upper = None
    if budget.accountant == "paper":
        deltas = budget.deltas or paper_delta_split(budget.delta, gamma=kw["gamma"], num_clients=kw["num_clients"],
                                                    num_sampled=kw["num_sampled"], local_steps=kw["local_steps"],
                                                    iterations=kw["iterations"], scheme=kw["scheme"])
        upper = paper_bound(eta=1.0, **kw, delta0=deltas[0], delta1=deltas[1], delta2=deltas[2]).eta_max
    eta = _largest_real(lambda e: budget.evaluate(dict(kw, eta=e), search=True, above_range=True)[0], 1e-6, upper,
                        rtol)
    if eta is None:
        raise ValueError(_infeasible(budget, kw, "no step size eta > 0"))
    try:
        return budget.solution("eta", eta, dict(kw, eta=eta))
    except NoiseOutOfRange as exc:
        if exc.side != "high":
            raise
        raise ValueError(
            f"target_epsilon = {budget.eps:g} (at target_delta = {budget.delta:g}) is below what the "
            f"{budget.accountant} accountant certifies with these settings: meeting it needs a noise multiplier z "
            f"above {Z_RANGE[1]:g}, whose epsilon (below ~1e-7) it does not compute; ask for a larger "
            "target_epsilon") from None


def largest_correlation(*, target_epsilon, target_delta, accountant="tight", eta, tau=1.0, gamma, sensitivity, p_min,
                        num_clients, num_sampled, local_steps, iterations, scheme="II", delta0=None, delta1=None,
                        delta2=None, rtol=1e-3, discretization=None) -> BudgetSolution:
    """Largest noise correlation rho in [0, 1) meeting the budget at step size ``eta``.

    Both accountants depend on (eta, rho) only through eta / (1 - rho^2): with eta* the largest
    step size at rho = 0, rho* = sqrt(1 - eta / eta*) (infeasible when eta > eta*).
    """
    eta = check_real("eta", eta, low=0.0, low_open=True)
    sol = largest_step_size(target_epsilon=target_epsilon, target_delta=target_delta, accountant=accountant, tau=tau,
                            rho=0.0, gamma=gamma, sensitivity=sensitivity, p_min=p_min, num_clients=num_clients,
                            num_sampled=num_sampled, local_steps=local_steps, iterations=iterations, scheme=scheme,
                            delta0=delta0, delta1=delta1, delta2=delta2, rtol=rtol, discretization=discretization)
    if eta > sol.value:
        raise ValueError(
            f"no rho in [0, 1) meets (epsilon={target_epsilon:g}, delta={target_delta:g}) with the {sol.accountant} "
            f"accountant: even rho = 0 allows at most eta = {sol.value:.4g} < {eta:.4g}"
        )
    budget = _Budget(accountant, target_epsilon, target_delta, delta0, delta1, delta2, discretization)
    # eta / (1 - rho^2) = eta* certifies; shave the rounding of sqrt so the returned rho does too
    for shave in (0.0, 1e-12, 1e-9, 1e-6):
        rho = math.sqrt(max(0.0, 1.0 - eta / (sol.value * (1.0 - shave))))
        kw = _mechanism(tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations, scheme)
        if budget.evaluate(dict(kw, eta=eta), search=True)[0]:
            break
    else:  # pragma: no cover - eta* certifies, so a shaved rho does
        raise RuntimeError(f"rho = {rho} derived from eta* = {sol.value} does not meet the budget")
    return budget.solution("rho", rho, dict(kw, eta=eta))


def largest_iterations(*, target_epsilon, target_delta, accountant="tight", eta, tau=1.0, rho=0.0, gamma, sensitivity,
                       p_min, num_clients, num_sampled, local_steps, scheme="II", delta0=None, delta1=None, delta2=None,
                       discretization=None) -> BudgetSolution:
    """Largest number of iterations T (a multiple of K: whole rounds) meeting the budget."""
    eta = check_real("eta", eta, low=0.0, low_open=True)
    budget = _Budget(accountant, target_epsilon, target_delta, delta0, delta1, delta2, discretization)
    k = check_int("local_steps", local_steps, 1)
    kw = _mechanism(tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, k, k, scheme)
    rounds = _largest_int(lambda r: budget.evaluate(dict(kw, eta=eta, iterations=r * k), search=True)[0], None)
    if rounds is None:
        raise ValueError(_infeasible(budget, dict(kw, eta=eta), "not even one round (T = K)"))
    return budget.solution("iterations", rounds * k, dict(kw, eta=eta, iterations=rounds * k))


def largest_num_sampled(*, target_epsilon, target_delta, accountant="tight", eta, tau=1.0, rho=0.0, gamma, sensitivity,
                        p_min, num_clients, local_steps, iterations, scheme="II", delta0=None, delta1=None,
                        delta2=None, discretization=None) -> BudgetSolution:
    """Largest number of clients per round S in [1, N] meeting the budget."""
    eta = check_real("eta", eta, low=0.0, low_open=True)
    budget = _Budget(accountant, target_epsilon, target_delta, delta0, delta1, delta2, discretization)
    kw = _mechanism(tau, rho, gamma, sensitivity, p_min, num_clients, 1, local_steps, iterations, scheme)
    n = kw["num_clients"]
    s = _largest_int(lambda m: budget.evaluate(dict(kw, eta=eta, num_sampled=m), search=True)[0], n)
    if s is None:
        raise ValueError(_infeasible(budget, dict(kw, eta=eta), "not even S = 1 client per round"))
    return budget.solution("num_sampled", s, dict(kw, eta=eta, num_sampled=s))


def _infeasible(budget: _Budget, kw: dict, what: str) -> str:
    msg = (f"{what} meets (epsilon={budget.eps:g}, delta={budget.delta:g}) with the {budget.accountant} accountant")
    if budget.accountant == "paper" and "eta" in kw:
        _, eps, delta, deltas = budget.evaluate(kw)
        msg += (f"; at the smallest candidate the paper gives epsilon = {eps:.4g}, delta = {delta:.4g} "
                f"(delta0, delta1, delta2 = {deltas[0]:.3g}, {deltas[1]:.3g}, {deltas[2]:.3g})")
    return msg
