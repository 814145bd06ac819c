"""The paper's bound (Thm 6.1 / G.3) transcribed exactly: worked example, closed forms, flags."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlangevin.privacy import (
    eq71_step_size,
    eq75_epsilon,
    eq76_step_size,
    inclusion_probability,
    paper_bound,
    paper_delta_split,
    paper_step_size_limit,
)

WORKED = dict(eta=1e-6, tau=1.0, rho=0.0, gamma=0.02, sensitivity=1.0, p_min=0.1, num_clients=10, num_sampled=10,
              local_steps=10, iterations=1000, scheme="II", delta0=1e-6, delta1=1e-6, delta2=1e-6)


def test_worked_example_of_the_issue():
    """eta = 1e-6, gamma = 0.02, N = S = K = 10, T = 1000, deltas 1e-6: (0.023697, 18.793, 1.21e-4)."""
    b = paper_bound(**WORKED)
    assert b.eps_1 == pytest.approx(0.023697, abs=5e-7)
    assert b.epsilon == pytest.approx(18.793, abs=5e-4)
    assert b.delta == pytest.approx(1.21e-4, rel=1e-12)
    assert b.within_theorem and not b.vacuous
    # intermediate values by hand: sqrt(2 K log(1/delta1)) = 16.6 > K, so eps_K = K eps_1 (basic branch)
    assert b.eps_K == pytest.approx(10 * b.eps_1, rel=1e-14)
    assert b.eps_tilde_K == pytest.approx(b.eps_K, rel=1e-14)  # S = N: no client sampling
    assert b.delta_K == pytest.approx(10 * 0.02 * 1e-6 + 1e-6, rel=1e-14)
    assert b.eta_max == pytest.approx(0.02**2 * 0.1 / math.log(1.25e6), rel=1e-14)


def _theorem_61(eta, tau, rho, gamma, sensitivity, p_min, num_clients, num_sampled, local_steps, iterations,
                delta0, delta1, delta2, **_):
    """Theorem 6.1 (scheme II) exactly as printed in Sec. 6, written independently of the package."""
    n, s, k, t = num_clients, num_sampled, local_steps, iterations
    eps1 = 2 * sensitivity * math.sqrt(eta * math.log(1.25 / delta0) / (tau * (1 - rho**2) * p_min))
    inner = math.sqrt(2 * k * math.log(1 / delta1)) + k * (math.exp(eps1) - 1) if delta1 > 0 else math.inf
    eps_k = eps1 * min(inner, k)
    # log(1 + (S/N)(e^x - 1)) written as log((1 - S/N) + (S/N) e^x) so that large x does not overflow
    eps_t = eps_k if s == n else float(np.logaddexp(math.log1p(-s / n), math.log(s / n) + eps_k))
    grow = t * s * math.expm1(eps_k) / (k * n) if eps_k < 700 else math.inf
    outer = math.sqrt(2 * t / k * math.log(1 / delta2)) + grow if delta2 > 0 else math.inf
    eps = eps_t * min(outer, t / k)
    delta = s / n * gamma * t * delta0 + t * s / (k * n) * delta1 + delta2
    return eps1, eps, delta


settings_strategy = st.fixed_dictionaries({
    "eta": st.floats(1e-9, 1e-3),
    "tau": st.floats(0.1, 10.0),
    "rho": st.floats(0.0, 0.99),
    "gamma": st.floats(0.001, 1.0),
    "sensitivity": st.floats(0.01, 10.0),
    "num_clients": st.integers(1, 200),
    "s_frac": st.floats(0.0, 1.0),
    "local_steps": st.integers(1, 50),
    "rounds": st.integers(1, 500),
    "delta0": st.floats(1e-12, 0.1),
    "delta1": st.floats(1e-12, 0.1),
    "delta2": st.floats(1e-12, 0.1),
})


def _kw(d):
    n = d["num_clients"]
    return dict(eta=d["eta"], tau=d["tau"], rho=d["rho"], gamma=d["gamma"], sensitivity=d["sensitivity"], p_min=1.0 / n,
                num_clients=n, num_sampled=max(1, round(d["s_frac"] * n)), local_steps=d["local_steps"],
                iterations=d["local_steps"] * d["rounds"], delta0=d["delta0"], delta1=d["delta1"], delta2=d["delta2"])


@settings(max_examples=60, deadline=None)
@given(settings_strategy)
def test_scheme_two_equals_the_closed_form_of_theorem_61(d):
    """G.3's general chain under scheme II reduces to Thm 6.1's closed form (proof's last line)."""
    kw = _kw(d)
    b = paper_bound(**kw, scheme="II")
    eps1, eps, delta = _theorem_61(**kw)
    assert b.eps_1 == pytest.approx(eps1, rel=1e-12)
    assert b.epsilon_formula == pytest.approx(eps, rel=1e-9)
    assert b.delta_formula == pytest.approx(delta, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(settings_strategy)
def test_at_least_form_after_the_theorem(d):
    """With delta1 = delta2 = 0: ((T/K) log(1 + (S/N)(e^{K eps_1} - 1)), (S/N) gamma T delta_0)."""
    kw = _kw(d)
    b = paper_bound(**kw, scheme="II")
    n, s, k, t = kw["num_clients"], kw["num_sampled"], kw["local_steps"], kw["iterations"]
    x = k * b.eps_1
    expected = t / k * (math.log1p(s / n * math.expm1(x)) if x < 700 else math.log(s / n) + x)
    assert b.basic_epsilon == pytest.approx(expected, rel=1e-9)
    assert b.basic_delta == pytest.approx(s / n * kw["gamma"] * t * kw["delta0"], rel=1e-12)


def test_scheme_one_with_one_draw_equals_scheme_two_with_one_client():
    """S = 1: q = 1/N under both schemes and delta~_K = (1/N) delta_{K,1} = (1/N)(K gamma delta0 + delta1)."""
    kw = dict(WORKED, num_sampled=1)
    one, two = paper_bound(**dict(kw, scheme="I")), paper_bound(**kw)
    assert one.q == pytest.approx(two.q, rel=1e-14)
    assert one.epsilon == pytest.approx(two.epsilon, rel=1e-12)
    assert one.delta == pytest.approx(two.delta, rel=1e-10)


def test_scheme_one_is_flagged_vacuous_where_its_delta_exceeds_one():
    b = paper_bound(**dict(WORKED, scheme="I"))
    # (delta0 / 1.25)^(1/s^2) -> 1 for large s, so delta_{K,s,0} ~ 1.25 K gamma = 0.25 per sampled client
    assert b.vacuous and b.delta >= 1.0 and "VACUOUS" in b.status
    assert b.q == pytest.approx(1 - 0.9**10, rel=1e-14)


def test_step_size_condition_marks_results_outside_the_theorem():
    limit = paper_step_size_limit(tau=1.0, rho=0.0, gamma=0.02, sensitivity=1.0, p_min=0.1, delta0=1e-6)
    inside = paper_bound(**dict(WORKED, eta=limit))
    outside = paper_bound(**dict(WORKED, eta=limit * 1.001))
    assert inside.within_theorem and math.isfinite(inside.epsilon)
    # the condition is exactly "max_c eps_{0,c} <= 1" (eq. 59 from eq. 56)
    assert inside.eps_0 == pytest.approx(1.0, rel=1e-12)
    assert not outside.within_theorem
    assert outside.epsilon == math.inf and outside.delta == 1.0
    assert math.isfinite(outside.epsilon_formula) and outside.epsilon_formula > inside.epsilon_formula
    assert "OUTSIDE" in outside.status


def test_extreme_inputs_never_overflow():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning either
        b = paper_bound(**dict(WORKED, eta=1e4, local_steps=1000, iterations=10**9))
        assert math.isfinite(b.epsilon_formula) and not b.within_theorem
        b1 = paper_bound(**dict(WORKED, eta=1e4, scheme="I", num_sampled=500, num_clients=1000, p_min=1e-3))
        assert b1.delta_formula == math.inf and b1.vacuous
        assert math.isfinite(b1.eps_tilde_K)


def test_inclusion_probabilities():
    assert inclusion_probability("II", 10, 3) == pytest.approx(0.3)
    assert inclusion_probability("I", 10, 3) == pytest.approx(1 - 0.9**3, rel=1e-14)
    assert inclusion_probability("I", 1, 5) == 1.0


def test_delta_split_gives_the_target_delta_under_scheme_two():
    d0, d1, d2 = paper_delta_split(1e-5, gamma=0.02, num_clients=10, num_sampled=5, local_steps=10, iterations=1000)
    b = paper_bound(**dict(WORKED, num_sampled=5, delta0=d0, delta1=d1, delta2=d2))
    assert b.delta == pytest.approx(1e-5, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(settings_strategy, st.floats(1.01, 10.0))
def test_monotone_as_the_paper_says(d, factor):
    """Sec. 6: eps increases with eta / (tau (1 - rho^2)), S/N and T; delta with S/N, gamma and T;
    eps does not depend on gamma."""
    kw = _kw(d)
    base = paper_bound(**kw)

    def more(**change):
        return paper_bound(**dict(kw, **change))

    assert more(eta=kw["eta"] * factor).epsilon_formula >= base.epsilon_formula
    assert more(tau=kw["tau"] / factor).epsilon_formula >= base.epsilon_formula
    assert more(rho=min(0.999, kw["rho"] + (1 - kw["rho"]) * (1 - 1 / factor))).epsilon_formula >= base.epsilon_formula
    bigger_t = more(iterations=kw["iterations"] + kw["local_steps"])
    assert bigger_t.epsilon_formula >= base.epsilon_formula and bigger_t.delta_formula >= base.delta_formula
    if kw["num_sampled"] < kw["num_clients"]:
        bigger_s = more(num_sampled=kw["num_sampled"] + 1)
        assert bigger_s.epsilon_formula >= base.epsilon_formula and bigger_s.delta_formula >= base.delta_formula
    g = more(gamma=min(1.0, kw["gamma"] * factor))
    assert g.delta_formula >= base.delta_formula and g.epsilon_formula == base.epsilon_formula


@settings(max_examples=60, deadline=None)
@given(settings_strategy, st.floats(0.0, 1.0))
def test_eq75_bounds_the_theorem_under_eq71(d, frac):
    """The discussion's bound (75) holds whenever eta satisfies (71)."""
    kw = _kw(d)
    kw.pop("gamma")
    eta = eq71_step_size(**{k: v for k, v in kw.items() if k != "eta"}) * max(frac, 1e-6)
    b = paper_bound(**dict(kw, eta=eta, gamma=1.0))
    assert b.epsilon_formula <= eq75_epsilon(**dict(kw, eta=eta)) * (1 + 1e-9)


def test_eq76_scalings():
    kw = dict(tau=1.0, rho=0.0, sensitivity=1.0, p_min=0.1, num_clients=10, num_sampled=10, delta0=1e-6,
              delta1=1e-6, delta2=1e-6)
    a = eq76_step_size(target_epsilon=1.0, iterations=1000, **kw)
    b = eq76_step_size(target_epsilon=1.0, iterations=2000, **kw)
    assert a.eta == min(a.eta_76, a.eta_target)
    assert b.eta_76 == pytest.approx(a.eta_76 / 2) and b.eta_target == pytest.approx(a.eta_target / 2)
    # eta_target puts the O-form (S Delta / N) sqrt(eta T L0 L1 L2 / (tau (1 - rho^2) p_min)) at the target
    l = math.log(1e6)
    assert math.sqrt(a.eta_target * 1000 * l**3 / 0.1) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("change, name", [
    (dict(rho=1.0), "rho"),
    (dict(num_sampled=11), "num_sampled"),
    (dict(delta0=0.0), "delta0"),
    (dict(delta0=1.0), "delta0"),
    (dict(delta1=1.0), "delta1"),
    (dict(delta2=-0.1), "delta2"),
    (dict(sensitivity=-1.0), "sensitivity"),
    (dict(eta=0.0), "eta"),
    (dict(gamma=1.5), "gamma"),
    (dict(p_min=0.2), "p_min"),
    (dict(iterations=1005), "iterations"),
    (dict(scheme="III"), "scheme"),
    (dict(tau=0.0), "tau"),
])
def test_invalid_inputs_name_the_argument(change, name):
    with pytest.raises(ValueError, match=name):
        paper_bound(**dict(WORKED, **change))


# -- issue 31: one numeric check for every privacy function ---------------------------------------------
def _privacy_calls():
    """Every public privacy function with num_clients, called on the worked example's setting."""
    import fedlangevin.privacy as fp

    mech = {k: v for k, v in WORKED.items() if not k.startswith("delta")}
    deltas = dict(delta0=1e-6, delta1=1e-6, delta2=1e-6)
    target = dict(target_epsilon=1.0, target_delta=1e-5)
    no_eta = {k: v for k, v in mech.items() if k != "eta"}
    no_gamma = {k: v for k, v in mech.items() if k not in ("eta", "gamma", "scheme")}
    return {
        "paper_bound": lambda **c: fp.paper_bound(**{**mech, **deltas, **c}),
        "eq71_step_size": lambda **c: fp.eq71_step_size(**{**no_gamma, **deltas, **c}),
        "eq75_epsilon": lambda **c: fp.eq75_epsilon(**{**no_gamma, "eta": 1e-6, **deltas, **c}),
        "eq76_step_size": lambda **c: fp.eq76_step_size(**{**{k: v for k, v in no_gamma.items() if k != "local_steps"},
                                                           "target_epsilon": 1.0, **deltas, **c}),
        "inclusion_probability": lambda **c: fp.inclusion_probability(c.get("scheme", "II"), c.get("num_clients", 10),
                                                                      c.get("num_sampled", 10)),
        "paper_delta_split": lambda **c: fp.paper_delta_split(1e-5, **{**{k: mech[k] for k in (
            "gamma", "num_clients", "num_sampled", "local_steps", "iterations", "scheme")},
            **{k: v for k, v in c.items() if k != "p_min"}}),
        "tight_epsilon": lambda **c: fp.tight_epsilon(**{**mech, **c}, delta=1e-5),
        "rdp_epsilon": lambda **c: fp.rdp_epsilon(**{**mech, **c}, delta=1e-5),
        "lower_bound_epsilon": lambda **c: fp.lower_bound_epsilon(**{**mech, **c}, delta=1e-5),
        "account": lambda **c: fp.account(**{**mech, **c}, delta=1e-5),
        "largest_step_size": lambda **c: fp.largest_step_size(**target, **{**no_eta, **c}),
        "largest_correlation": lambda **c: fp.largest_correlation(
            **target, **{**{k: v for k, v in mech.items() if k != "rho"}, **c}),
        "largest_iterations": lambda **c: fp.largest_iterations(
            **target, **{**{k: v for k, v in mech.items() if k != "iterations"}, **c}),
        "largest_num_sampled": lambda **c: fp.largest_num_sampled(
            **target, **{**{k: v for k, v in mech.items() if k != "num_sampled"}, **c}),
    }


@pytest.mark.parametrize("function", list(_privacy_calls()))
@pytest.mark.parametrize("change, name", [
    (dict(num_clients=10**400, num_sampled=10), "num_clients"),  # beyond the float range: was an OverflowError
    (dict(num_clients=2**60, num_sampled=10, p_min=1e-19), "num_clients"),
    (dict(num_clients=True), "num_clients"),
    (dict(num_clients="10"), "num_clients"),
    (dict(scheme="I", num_sampled=10**400), "num_sampled"),
    (dict(scheme=2), "scheme"),  # was taken as "II"
    (dict(scheme="2"), "scheme"),
    (dict(scheme=True), "scheme"),
])
def test_every_privacy_function_refuses_non_numbers_and_counts_beyond_the_limit(function, change, name):
    call = _privacy_calls()[function]
    if function in ("eq71_step_size", "eq75_epsilon", "eq76_step_size") and "scheme" in change:
        pytest.skip("scheme II only: no scheme argument")
    if function == "largest_num_sampled" and "num_sampled" in change:
        change = {k: v for k, v in change.items() if k != "num_sampled"}
        if not change or change == {"scheme": "I"}:
            pytest.skip("num_sampled is the solved parameter")
    with pytest.raises(ValueError, match=name):
        call(**change)


@pytest.mark.parametrize("function", list(_privacy_calls()))
def test_numpy_and_0d_counts_equal_python_ints(function):
    import torch

    call = _privacy_calls()[function]
    if function.startswith("largest") or function in ("account", "lower_bound_epsilon", "tight_epsilon"):
        pytest.skip("slow here; the same _check_common as rdp_epsilon, whose numpy forms tests/test_bad_inputs.py checks")
    ref = call()
    for n in (np.int64(10), np.array(10), torch.tensor(10)):
        assert call(num_clients=n) == ref
