"""Tight accountant: exact-Gaussian identity, sandwich lower <= tight <= RDP, discretisation
stability, the per-step dominating pair, monotonicity, the worked example, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm

from fedlangevin.privacy import (
    account,
    lower_bound_epsilon,
    noise_multiplier,
    paper_bound,
    rdp_epsilon,
    tight_epsilon,
)
from fedlangevin.privacy import accountant as acc

WORKED = dict(eta=1e-6, tau=1.0, rho=0.0, gamma=0.02, sensitivity=1.0, p_min=0.1, num_clients=10, num_sampled=10,
              local_steps=10, iterations=1000, scheme="II")


def balle_wang_epsilon(mu: float, delta: float) -> float:
    """Exact Gaussian mechanism of mu = sensitivity / sigma (Balle & Wang 2018, Thm 8), solved for eps."""
    def excess(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
    return brentq(excess, 0.0, 10 * mu + 50, xtol=1e-13)


@pytest.mark.parametrize("eta, iterations, delta", [(1e-6, 1000, 1e-5), (1e-4, 200, 1e-6), (3e-3, 40, 1e-3)])
def test_no_subsampling_is_the_exact_gaussian_composed_T_times(eta, iterations, delta):
    """gamma = 1, S = N: T Gaussian mechanisms of multiplier z compose to mu = sqrt(T) / z exactly."""
    kw = dict(WORKED, eta=eta, gamma=1.0, iterations=iterations)
    z = noise_multiplier(eta=eta, gamma=1.0, sensitivity=1.0, p_min=0.1)
    assert z == pytest.approx(math.sqrt(2 * 0.1 / eta), rel=1e-14)
    exact = balle_wang_epsilon(math.sqrt(iterations) / z, delta)
    a = account(**kw, delta=delta)
    # pessimistic connect-the-dots: above the exact value, within 1e-4 relative
    assert exact * (1 - 1e-9) <= a.epsilon <= exact * (1 + 1e-4)
    assert a.lower_epsilon <= exact * (1 + 1e-9)
    assert a.rdp_epsilon >= exact


SANDWICH = [
    {},
    dict(num_sampled=3),
    dict(scheme="I", num_sampled=4),
    dict(local_steps=1, iterations=300),
    dict(rho=0.8, eta=3e-7),
    dict(gamma=0.2, eta=1e-5, iterations=200),
    dict(num_clients=50, p_min=0.02, num_sampled=5, eta=3e-6),
]


@pytest.mark.parametrize("change", SANDWICH)
def test_lower_bound_below_tight_below_rdp(change):
    a = account(**dict(WORKED, **change), delta=1e-5)
    assert 0 < a.lower_epsilon <= a.epsilon <= a.rdp_epsilon


@pytest.mark.parametrize("change", [{}, dict(num_sampled=3, eta=1e-5), dict(gamma=1.0, eta=1e-4),
                                    dict(gamma=0.003, eta=1e-9)])
def test_stable_under_a_finer_discretisation(change):
    kw = dict(WORKED, **change)
    levels = acc._levels_from(dict(kw))
    d = acc._auto_discretization(levels)
    coarse = tight_epsilon(**kw, delta=1e-5, discretization=d)
    fine = tight_epsilon(**kw, delta=1e-5, discretization=d / 4)
    assert fine == pytest.approx(coarse, rel=1e-3)


def test_worked_example_is_about_a_hundred_times_below_the_paper():
    """The issue's anchor: eps ~ 0.19 at the paper's delta 1.21e-4, ~100x below 18.793."""
    bound = paper_bound(**WORKED, delta0=1e-6, delta1=1e-6, delta2=1e-6)
    eps = tight_epsilon(**WORKED, delta=bound.delta)
    assert 0.185 < eps < 0.20
    assert 80 < bound.epsilon / eps < 120


def _hockey_stick_2d(z, gamma, u, v, eps_grid, half=8.0, n=801):
    """H_{e^eps}((1-g) N(0, z^2 I) + g N(u, z^2 I) || (1-g) N(0, z^2 I) + g N(v, z^2 I)) on a 2-d grid,
    for every eps of eps_grid (Riemann sum; error ~1e-6 here, from the kink of the positive part)."""
    x = np.linspace(-half * z - 1, half * z + 2, n)
    xx, yy = np.meshgrid(x, x)
    h = x[1] - x[0]

    def phi(m):
        return np.exp(-((xx - m[0]) ** 2 + (yy - m[1]) ** 2) / (2 * z * z)) / (2 * math.pi * z * z)

    base = (1 - gamma) * phi((0, 0))
    p, q = base + gamma * phi(u), base + gamma * phi(v)
    return np.array([np.maximum(p - math.exp(e) * q, 0).sum() * h * h for e in eps_grid])


@pytest.mark.parametrize("z, gamma", [(1.0, 0.3), (0.6, 0.1)])
def test_step_pair_dominates_every_fixed_size_sampling_configuration(z, gamma):
    """Assumption 3 of the model: with s, s+u, s+v gradient sums of batches differing in one record
    (|u|, |v|, |u - v| <= 1), the hockey-stick curve of every configuration lies below the
    dominating pair's, for positive and negative eps. Checked by 2-d integration (tolerance 1e-5,
    well above the quadrature error and well below the gaps between configurations)."""
    remove, add = acc._pair_losses(z, gamma)
    eps_grid = np.array([-1.0, -0.4, -0.1, 0.0, 0.1, 0.3, 0.7, 1.2])
    curve = acc._delta_curve(remove, add, eps_grid)
    s3 = math.sqrt(3) / 2
    configs = [((1, 0), (0, 0)), ((0, 0), (1, 0)), ((1, 0), (0.5, s3)), ((-0.5, 0), (0.5, 0)),
               ((0.6, 0.2), (-0.3, 0.1)), ((1, 0), (0.3, 0.4))]
    found = {}
    for u, v in configs:
        assert max(np.hypot(*u), np.hypot(*v), np.hypot(u[0] - v[0], u[1] - v[1])) <= 1 + 1e-12
        found[(u, v)] = h = _hockey_stick_2d(z, gamma, u, v, eps_grid)
        assert np.all(h <= curve + 1e-5), (u, v, h - curve)
    # the curve is attained: by the remove configuration for eps >= 0, by the add one below 0
    pos = eps_grid >= 0
    np.testing.assert_allclose(found[((1, 0), (0, 0))][pos], curve[pos], atol=1e-5)
    np.testing.assert_allclose(found[((0, 0), (1, 0))][~pos], curve[~pos], atol=1e-5)
    # and the equilateral configuration is strictly inside for eps > 0 (the pair is not loose there)
    assert np.all(found[((1, 0), (0.5, s3))][eps_grid > 0] < curve[eps_grid > 0])


def test_rdp_pipeline_matches_dp_accounting_public_rdp_accountant():
    """Without nesting (K = 1, S = N) our RDP route is dp-accounting's own REPLACE_ONE
    sampled-without-replacement accountant."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    z = noise_multiplier(eta=1e-6, gamma=0.02, sensitivity=1.0, p_min=0.1)
    ours = rdp_epsilon(**dict(WORKED, local_steps=1, iterations=500), delta=1e-5)
    ref = rdp.RdpAccountant(list(acc.RDP_ORDERS), dp_accounting.NeighboringRelation.REPLACE_ONE)
    event = dp_accounting.SampledWithoutReplacementDpEvent(1000, 20, dp_accounting.GaussianDpEvent(z))
    ref.compose(dp_accounting.SelfComposedDpEvent(event, 500))
    assert ours == pytest.approx(ref.get_epsilon(1e-5), rel=1e-9)


def test_client_sampling_is_the_mixture_with_a_zero_loss_atom():
    """q = 1/2 is equivalent (in law of the composed loss) to each round touching the client with
    probability 1/2: between the eps of T/(2K) rounds and T/K rounds with q = 1."""
    half = tight_epsilon(**dict(WORKED, num_sampled=5), delta=1e-5)
    all_rounds = tight_epsilon(**WORKED, delta=1e-5)
    half_rounds = tight_epsilon(**dict(WORKED, iterations=500), delta=1e-5)
    assert half_rounds < half < all_rounds


def test_varying_step_sizes_are_bracketed_by_the_constant_extremes():
    etas = np.repeat([2e-6, 1.3e-6, 8e-7, 5e-7], 250)  # four phases of 25 rounds (K = 10)
    kw = dict(WORKED, eta=etas)
    tight = tight_epsilon(**kw, delta=1e-5)
    assert tight_epsilon(**dict(WORKED, eta=5e-7), delta=1e-5) < tight < tight_epsilon(**dict(WORKED, eta=2e-6), delta=1e-5)
    assert lower_bound_epsilon(**kw, delta=1e-5) <= tight <= rdp_epsilon(**kw, delta=1e-5)
    # a constant schedule given step by step is the scalar case exactly
    assert tight_epsilon(**dict(WORKED, eta=np.full(1000, 1e-6)), delta=1e-5) == tight_epsilon(**WORKED, delta=1e-5)


def test_the_rdp_check_of_many_step_sizes_computes_a_few_levels_and_stays_an_upper_bound(monkeypatch):
    """An adapted run has a step size per round: its rounds fell into 9 noise levels, each costing dp-accounting's
    fixed-size RDP bound about a second (a 60-round run's report took 13-23 s). The cross-check computes at most
    MAX_RDP_LEVELS of them, z rounded down: its epsilon is at least the one of every level (an upper bound still),
    and the tight epsilon stays below it."""
    from fedlangevin.privacy import levels as lv
    from fedlangevin.privacy import rdp as rd

    etas = np.repeat(np.geomspace(2e-6, 5e-7, 9), 10 * 7)[:630]  # 63 rounds of K = 10 in 9 levels
    kw = dict(WORKED, eta=etas, iterations=630)
    levels = lv._levels_from(kw)
    assert len(levels.z) == 9
    seen = set()
    step = rd._rdp_step

    def counted(gamma, z, orders):
        seen.add(z)
        return step(gamma, z, orders)

    monkeypatch.setattr(rd, "_rdp_step", counted)
    coarse = rd._rdp_from_levels(levels, 1e-5)
    assert len(seen) <= rd.MAX_RDP_LEVELS
    fine = rd._rdp_from_levels(levels, 1e-5, max_levels=9)
    assert len(seen) > rd.MAX_RDP_LEVELS  # the fine one did compute every level
    assert fine <= coarse < 1.5 * fine
    assert tight_epsilon(**kw, delta=1e-5) <= coarse


_D = 2e-4  # one grid for both sides of each comparison (monotone under a common grid)
mech = st.fixed_dictionaries({
    "eta": st.floats(1e-8, 1e-5),
    "rho": st.floats(0.0, 0.9),
    "gamma": st.sampled_from([0.01, 0.05, 0.2, 1.0]),
    "num_sampled": st.integers(1, 10),
    "local_steps": st.sampled_from([1, 5]),
    "rounds": st.integers(1, 60),
    "scheme": st.sampled_from(["I", "II"]),
})


def _mkw(m):
    return dict(WORKED, eta=m["eta"], rho=m["rho"], gamma=m["gamma"], num_sampled=m["num_sampled"],
                local_steps=m["local_steps"], iterations=m["local_steps"] * m["rounds"], scheme=m["scheme"])


@settings(max_examples=8, deadline=None)
@given(mech, st.floats(1.2, 4.0))
def test_tight_epsilon_is_monotone(m, factor):
    """More privacy loss with larger eta, rho, S, T and smaller delta or gamma (at fixed eta the
    noise multiplier grows like gamma while the sampling rate grows like gamma too)."""
    kw = _mkw(m)
    base = tight_epsilon(**kw, delta=1e-5, discretization=_D)
    tol = 1e-9 + 1e-9 * base

    def eps(delta=1e-5, **change):
        return tight_epsilon(**dict(kw, **change), delta=delta, discretization=_D)

    assert eps(eta=kw["eta"] * factor) >= base - tol
    assert eps(rho=1 - (1 - kw["rho"]) / factor) >= base - tol
    assert eps(iterations=kw["iterations"] + kw["local_steps"]) >= base - tol
    assert eps(delta=1e-5 / factor) >= base - tol
    if kw["num_sampled"] < 10:
        assert eps(num_sampled=kw["num_sampled"] + 1) >= base - tol
    if kw["gamma"] < 1.0:
        assert eps(gamma=min(1.0, kw["gamma"] * factor)) <= base + tol


@pytest.mark.parametrize("change, name", [
    (dict(rho=1.0), "rho"),
    (dict(num_sampled=11), "num_sampled"),
    (dict(sensitivity=-1.0), "sensitivity"),
    (dict(eta=np.ones(7)), "eta"),
    (dict(eta=-1e-6), "eta"),
    (dict(iterations=1001), "iterations"),
    (dict(inclusion_probability=1.5), "inclusion_probability"),
    (dict(step_size_ratio=0.5), "step_size_ratio"),  # checked with a constant eta too (where it is unused)
    (dict(step_size_ratio="1.05"), "step_size_ratio"),
])
def test_invalid_mechanism_names_the_argument(change, name):
    with pytest.raises(ValueError, match=name):
        tight_epsilon(**dict(WORKED, **change), delta=1e-5)


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5, 2.0])
def test_delta_outside_the_unit_interval_is_refused(delta):
    for f in (tight_epsilon, rdp_epsilon, lower_bound_epsilon):
        with pytest.raises(ValueError, match="delta"):
            f(**WORKED, delta=delta)


@pytest.mark.parametrize("z, gamma, d", [(8.944, 0.02, 1e-5), (0.9, 0.02, 1e-4), (3.0, 0.3, 1e-4), (40.0, 1.0, 1e-5)])
def test_optimistic_buckets_equal_dp_accounting_privacy_buckets(z, gamma, d):
    """The lower bound's vectorised buckets are dp-accounting's optimistic Gaussian PLD."""
    from dp_accounting.pld import privacy_loss_distribution as pldm

    ref = pldm.from_gaussian_mechanism(z, sensitivity=1.0, pessimistic_estimate=False, value_discretization_interval=d,
                                       sampling_prob=gamma, use_connect_dots=False)
    for direction, pmf in (("remove", ref._pmf_remove), ("add", ref._pmf_add)):
        ours = acc._optimistic_step_pmf(z, gamma, d, direction).self_compose(50)
        theirs = pmf.self_compose(50)
        for delta in (1e-3, 1e-6):
            assert ours.get_epsilon_for_delta(delta) == pytest.approx(theirs.get_epsilon_for_delta(delta), rel=1e-9)


# -- issue 31: the work is bounded in the counts, the lower bound is a bound ---------------------------
@pytest.mark.parametrize("name", ["tight_epsilon", "lower_bound_epsilon", "account"])
def test_a_billion_iterations_are_accounted_in_seconds(name):
    """T = 10^9 single-step rounds: composition is logarithmic in the count (FFT powers), not a
    loop over the rounds (dp-accounting's sparse self-composition ran for minutes)."""
    import time

    kw = dict(WORKED, iterations=10**9, local_steps=1)
    start = time.perf_counter()
    out = {"tight_epsilon": tight_epsilon, "lower_bound_epsilon": lower_bound_epsilon, "account": account}[name](
        **kw, delta=1e-5)
    assert time.perf_counter() - start < 30.0
    if name == "account":
        assert 0.0 <= out.lower_epsilon <= out.epsilon <= out.rdp_epsilon < math.inf
    else:
        assert 0.0 <= out <= rdp_epsilon(**kw, delta=1e-5) < math.inf


LOWER_CASES = {
    "eta=2.5": (dict(eta=2.5), 1e-5),  # one step's privacy loss spans ~1e4 nats: no tight grid below 1 nat
    "K=10^6": (dict(local_steps=10**6, iterations=10**6), 1e-5),
    "T=10^12": (dict(iterations=10**12), 1e-5),
    "N=S=10^9": (dict(num_clients=10**9, num_sampled=10**9, p_min=1e-9), 1e-5),
    "delta=1e-100": ({}, 1e-100),  # tail truncation (1e-15 per composition) used to exceed delta
    "delta=1e-200": ({}, 1e-200),
    "delta=1e-320": ({}, 1e-320),  # subnormal
}


@pytest.mark.parametrize("case", list(LOWER_CASES))
def test_the_lower_bound_is_a_number_below_the_tight_epsilon(case):
    """The settings where the lower bound was NaN (no grid of step <= 1 nat fits) or inf (the
    truncated tails counted as infinite loss at delta below 1e-15): a finite lower bound <= tight."""
    change, delta = LOWER_CASES[case]
    kw = dict(WORKED, **change)
    a = account(**kw, delta=delta)
    lower = lower_bound_epsilon(**kw, delta=delta)
    assert math.isfinite(a.epsilon) and math.isfinite(a.rdp_epsilon)
    for value in (a.lower_epsilon, lower):
        assert not math.isnan(value) and 0.0 <= value <= a.epsilon <= a.rdp_epsilon
    if case.startswith("delta"):  # informative: at least the lower bound at a larger delta
        assert lower >= lower_bound_epsilon(**kw, delta=1e-5) > 0.0


random_setting = st.fixed_dictionaries({
    "eta": st.floats(-8.0, -3.0).map(lambda x: 10.0**x),
    "tau": st.floats(0.1, 10.0),
    "rho": st.floats(0.0, 0.95),
    "gamma": st.sampled_from([0.005, 0.02, 0.1, 0.5, 1.0]),
    "sensitivity": st.floats(0.1, 10.0),
    "num_clients": st.integers(1, 50),
    "sampled": st.floats(0.0, 1.0),
    "weight": st.floats(0.1, 1.0),
    "local_steps": st.integers(1, 20),
    "rounds": st.integers(1, 100),
    "scheme": st.sampled_from(["I", "II"]),
    "delta": st.floats(-12.0, -2.0).map(lambda x: 10.0**x),
})


def _setting(r: dict) -> dict:
    n = r["num_clients"]
    return dict(eta=r["eta"], tau=r["tau"], rho=r["rho"], gamma=r["gamma"], sensitivity=r["sensitivity"],
                p_min=r["weight"] / n, num_clients=n, num_sampled=1 + int(r["sampled"] * (n - 1)),
                local_steps=r["local_steps"], iterations=r["local_steps"] * r["rounds"], scheme=r["scheme"])


@settings(max_examples=6, deadline=None)
@given(random_setting, st.floats(1.1, 3.0), st.integers(1, 50))
def test_random_settings_are_sandwiched_and_monotone_in_T_and_eta(r, factor, more_rounds):
    """issue 31 (what held and must keep holding): random settings give lower <= tight <= RDP,
    and the tight epsilon does not decrease with T or eta (the sweep ran 200 such settings)."""
    from hypothesis import assume

    kw = _setting(r)
    try:
        base = account(**kw, delta=r["delta"])
        more_t = account(**dict(kw, iterations=kw["iterations"] + more_rounds * kw["local_steps"]), delta=r["delta"])
        more_eta = account(**dict(kw, eta=kw["eta"] * factor), delta=r["delta"])
    except acc.NoiseOutOfRange:
        assume(False)
    for a in (base, more_t, more_eta):
        assert 0.0 <= a.lower_epsilon <= a.epsilon <= a.rdp_epsilon < math.inf
    tol = 1e-9 * (1.0 + base.epsilon)
    assert more_t.epsilon >= base.epsilon - tol and more_eta.epsilon >= base.epsilon - tol


# -- client level (client_account) -------------------------------------------------------------------
@pytest.mark.parametrize("eta, iterations, delta, rho, p_max", [(1e-4, 200, 1e-5, 0.0, 0.1), (3e-4, 40, 1e-6, 0.5, 0.4)])
def test_client_level_with_full_participation_is_the_exact_gaussian_composed_T_times(eta, iterations, delta, rho,
                                                                                       p_max):
    """Client level, S = N: T Gaussian mechanisms of z = sqrt(2 tau (1 - rho^2) / (p_max eta)) / Delta
    (the mean moves by eta Delta against the noise sqrt(2 eta tau (1 - rho^2) / p_max)), mu = sqrt(T) / z."""
    from fedlangevin.privacy import client_account, client_noise_multiplier

    sigma = math.sqrt(2 * eta * (1 - rho * rho) / p_max)  # eq. 10's private noise of the largest client
    z = client_noise_multiplier(eta=eta, rho=rho, sensitivity=0.2, p_max=p_max)
    assert z == pytest.approx(sigma / (eta * 0.2), rel=1e-13)
    a = client_account(eta=eta, rho=rho, sensitivity=0.2, p_max=p_max, num_clients=10, num_sampled=10,
                       local_steps=10, iterations=iterations, delta=delta)
    exact = balle_wang_epsilon(math.sqrt(iterations) / z, delta)
    assert a.gamma == 1.0 and a.q == 1.0 and a.noise_multiplier == pytest.approx(z, rel=1e-13)
    assert exact * (1 - 1e-9) <= a.epsilon <= exact * (1 + 1e-4)
    assert a.lower_epsilon <= exact * (1 + 1e-9) <= a.rdp_epsilon


def test_client_level_is_the_record_level_formula_at_gamma_one_and_a_scaled_sensitivity():
    """z = (1 / Delta) sqrt(2 tau (1 - rho^2) / (p eta)) = (gamma / Delta_l) sqrt(2 p tau (1 - rho^2) / eta)
    at gamma = 1, Delta_l = Delta p: the same accounting as the record-level accountant's (p = 1/N)."""
    from fedlangevin.privacy import client_account

    kw = dict(eta=1e-4, rho=0.3, num_clients=10, num_sampled=4, local_steps=5, iterations=100, delta=1e-5)
    a = client_account(sensitivity=2.0, p_max=0.1, **kw)
    b = account(gamma=1.0, sensitivity=2.0 * 0.1, p_min=0.1, **kw)
    assert a.noise_multiplier == pytest.approx(b.noise_multiplier, rel=1e-14)
    for got, want in ((a.epsilon, b.epsilon), (a.lower_epsilon, b.lower_epsilon), (a.rdp_epsilon, b.rdp_epsilon)):
        assert got == pytest.approx(want, rel=1e-9)


def test_client_level_refuses_a_largest_weight_below_one_over_n_by_name():
    from fedlangevin.privacy import client_account, client_noise_multiplier

    kw = dict(eta=1e-4, sensitivity=1.0, num_clients=10, num_sampled=10, local_steps=1, iterations=10, delta=1e-5)
    with pytest.raises(ValueError, match=r"^p_max must be >= 1/num_clients = 0\.1"):
        client_account(p_max=0.05, **kw)
    for bad in (0.0, 1.5, float("nan"), "0.5"):
        with pytest.raises(ValueError, match="p_max"):
            client_noise_multiplier(eta=1e-4, sensitivity=1.0, p_max=bad)
    with pytest.raises(ValueError, match=r"^eta, sensitivity: the client-level noise multiplier"):
        client_account(p_max=0.5, **dict(kw, sensitivity=1e9))
