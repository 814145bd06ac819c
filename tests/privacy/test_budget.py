"""Budget solvers: the answer meets the budget and one step further does not, for both accountants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlangevin.privacy import (
    largest_correlation,
    largest_iterations,
    largest_num_sampled,
    largest_step_size,
    paper_bound,
    paper_delta_split,
    tight_epsilon,
)

MECH = dict(tau=1.0, rho=0.0, gamma=0.02, sensitivity=1.0, p_min=0.1, num_clients=10, num_sampled=10, local_steps=10,
            iterations=1000, scheme="II")
D = 5e-4  # a fixed loss grid keeps the solver tests fast; the solvers certify whatever grid they are given
TARGET = dict(target_epsilon=0.5, target_delta=1e-5)


def _paper(**kw):
    d0, d1, d2 = paper_delta_split(1e-5, **{k: kw[k] for k in ("gamma", "num_clients", "num_sampled", "local_steps",
                                                                  "iterations", "scheme")})
    return paper_bound(**kw, delta0=d0, delta1=d1, delta2=d2)


def _paper_ok(b, eps=0.5, delta=1e-5):
    return b.within_theorem and b.epsilon <= eps and b.delta <= delta * (1 + 1e-12)


def test_largest_step_size_tight():
    sol = largest_step_size(**TARGET, **MECH, rtol=1e-3, discretization=D)
    assert sol.parameter == "eta" and sol.accountant == "tight"
    assert tight_epsilon(**MECH, eta=sol.value, delta=1e-5, discretization=D) <= 0.5
    assert tight_epsilon(**MECH, eta=sol.value * 1.002, delta=1e-5, discretization=D) > 0.5


def test_largest_step_size_paper_is_certified_and_maximal():
    sol = largest_step_size(**TARGET, **MECH, accountant="paper", rtol=1e-4)
    assert _paper_ok(_paper(**MECH, eta=sol.value))
    b = _paper(**MECH, eta=sol.value * 1.0002)
    assert not _paper_ok(b)
    assert sol.deltas is not None and sol.delta == pytest.approx(1e-5, rel=1e-12)


def test_paper_step_size_never_leaves_the_theorem():
    """A generous budget: the answer is the right end of the step-size condition (59) itself."""
    sol = largest_step_size(target_epsilon=1e6, target_delta=1e-3, accountant="paper", **MECH)
    d0, d1, d2 = sol.deltas
    b = paper_bound(**MECH, eta=sol.value, delta0=d0, delta1=d1, delta2=d2)
    assert b.within_theorem and sol.value == pytest.approx(b.eta_max, rel=1e-12)


@pytest.mark.parametrize("accountant", ["tight", "paper"])
def test_largest_iterations(accountant):
    kw = {k: v for k, v in MECH.items() if k != "iterations"}
    eta = 1e-6 if accountant == "tight" else 1e-9
    sol = largest_iterations(**TARGET, accountant=accountant, eta=eta, **kw,
                             discretization=D if accountant == "tight" else None)
    t = sol.value
    assert t % 10 == 0 and t >= 10
    if accountant == "tight":
        assert tight_epsilon(**dict(MECH, eta=eta, iterations=t), delta=1e-5, discretization=D) <= 0.5
        assert tight_epsilon(**dict(MECH, eta=eta, iterations=t + 10), delta=1e-5, discretization=D) > 0.5
    else:
        assert _paper_ok(_paper(**dict(MECH, eta=eta, iterations=t)))
        assert not _paper_ok(_paper(**dict(MECH, eta=eta, iterations=t + 10)))


@pytest.mark.parametrize("accountant, eta", [("tight", 1e-5), ("paper", 3e-9)])
def test_largest_num_sampled(accountant, eta):
    kw = {k: v for k, v in MECH.items() if k != "num_sampled"}
    sol = largest_num_sampled(target_epsilon=0.5, target_delta=1e-5, accountant=accountant, eta=eta, **kw,
                              discretization=D if accountant == "tight" else None)
    s = sol.value
    assert 1 <= s < 10  # a budget that binds between 1 and N
    if accountant == "tight":
        assert tight_epsilon(**dict(MECH, eta=eta, num_sampled=s), delta=1e-5, discretization=D) <= 0.5
        assert tight_epsilon(**dict(MECH, eta=eta, num_sampled=s + 1), delta=1e-5, discretization=D) > 0.5
    else:
        assert _paper_ok(_paper(**dict(MECH, eta=eta, num_sampled=s)))
        assert not _paper_ok(_paper(**dict(MECH, eta=eta, num_sampled=s + 1)))


@pytest.mark.parametrize("accountant, eta", [("tight", 1e-7), ("paper", 1e-10)])
def test_largest_correlation(accountant, eta):
    kw = {k: v for k, v in MECH.items() if k != "rho"}
    sol = largest_correlation(**TARGET, accountant=accountant, eta=eta, **kw, rtol=1e-4,
                              discretization=D if accountant == "tight" else None)
    rho = sol.value
    assert 0 < rho < 1
    bigger = rho + (1 - rho) * 0.01
    if accountant == "tight":
        assert tight_epsilon(**dict(MECH, eta=eta, rho=rho), delta=1e-5, discretization=D) <= 0.5
        assert tight_epsilon(**dict(MECH, eta=eta, rho=bigger), delta=1e-5, discretization=D) > 0.5
    else:
        assert _paper_ok(_paper(**dict(MECH, eta=eta, rho=rho)))
        assert not _paper_ok(_paper(**dict(MECH, eta=eta, rho=bigger)))


def test_correlation_and_step_size_trade_one_for_one():
    """Only eta / (1 - rho^2) matters: rho* at eta equals sqrt(1 - eta / eta*(rho = 0))."""
    kw = {k: v for k, v in MECH.items() if k != "rho"}
    star = largest_step_size(**TARGET, accountant="paper", **MECH, rtol=1e-6).value
    rho = largest_correlation(**TARGET, accountant="paper", eta=star / 4, **kw, rtol=1e-6).value
    assert rho == pytest.approx(math.sqrt(0.75), rel=1e-5)


def test_infeasible_budgets_raise_with_a_reason():
    kw = {k: v for k, v in MECH.items() if k != "iterations"}
    with pytest.raises(ValueError, match="not even one round"):
        largest_iterations(target_epsilon=1e-4, target_delta=1e-5, eta=1e-3, **kw, discretization=D)
    kwr = {k: v for k, v in MECH.items() if k != "rho"}
    with pytest.raises(ValueError, match="even rho = 0"):
        largest_correlation(target_epsilon=0.5, target_delta=1e-5, accountant="paper", eta=1e-6, **kwr)
    with pytest.raises(ValueError, match="paper accountant"):  # scheme I's delta is vacuous here
        largest_step_size(target_epsilon=10.0, target_delta=1e-5, accountant="paper", **dict(MECH, scheme="I"))


@pytest.mark.parametrize("change, name", [
    (dict(target_epsilon=0.0), "target_epsilon"),
    (dict(target_delta=1.0), "target_delta"),
    (dict(accountant="exact"), "accountant"),
    (dict(delta0=1e-6), "delta0"),
])
def test_invalid_targets_name_the_argument(change, name):
    args = dict(TARGET, **MECH)
    args.update(change)
    with pytest.raises(ValueError, match=name):
        largest_step_size(**args)


@pytest.mark.parametrize("tau", [0.05, np.float32(0.05)], ids=["float", "float32"])
def test_largest_step_size_when_the_first_candidate_is_over_budget(tau):
    """issue 31: with tau = 0.05 the solver's first candidate (eta = 1e-6) is over the budget and
    the next (2.5e-7) within: the search ended in a TypeError (the over-budget candidate was not
    kept as the bracket's upper end); np.float32(0.05) is the same number."""
    target = dict(target_epsilon=1.0, target_delta=1e-5)  # the first candidate over, a quarter of it within
    sol = largest_step_size(**target, **dict(MECH, tau=tau), rtol=1e-3, discretization=D)
    assert 2.5e-7 <= sol.value < 1e-6 and sol.epsilon <= 1.0
    over = tight_epsilon(**dict(MECH, tau=0.05), eta=sol.value * (1 + 2e-3), delta=1e-5, discretization=D)
    assert over > 1.0


def test_a_first_candidate_beyond_the_accountants_range_moves_the_search_up():
    """With sensitivity 1e-9 the first candidate (eta = 1e-6) has a noise multiplier above 1e4, whose epsilon
    (below ~1e-7) the accountant does not compute: the solver stopped there with "use a larger eta", the value
    it solves for; such a candidate meets any budget it can certify, so the search goes up."""
    mech = dict(MECH, sensitivity=1e-9)
    sol = largest_step_size(**TARGET, **mech, rtol=1e-3, discretization=D)
    assert tight_epsilon(**mech, eta=sol.value, delta=1e-5, discretization=D) <= 0.5
    assert tight_epsilon(**mech, eta=sol.value * 1.002, delta=1e-5, discretization=D) > 0.5


@pytest.mark.parametrize("solve", ["eta", "rho"])
def test_a_target_below_what_the_accountant_certifies_says_so(solve):
    """target_epsilon = 1e-12 needs a noise multiplier above the accountant's range: the message says what is
    needed (a larger target_epsilon), not "use a larger eta"."""
    mech = dict(MECH, sensitivity=1e-9)
    with pytest.raises(ValueError, match=r"target_epsilon = 1e-12 .*above 10000.*larger target_epsilon") as err:
        if solve == "eta":
            largest_step_size(target_epsilon=1e-12, target_delta=1e-5, **mech, discretization=D)
        else:
            largest_correlation(target_epsilon=1e-12, target_delta=1e-5, eta=1e-6,
                                **{k: v for k, v in mech.items() if k != "rho"}, discretization=D)
    assert "larger eta" not in str(err.value)
