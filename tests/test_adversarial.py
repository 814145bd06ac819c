"""Regression tests of the bad-input sweep: one test per finding, each a reproducer that used to
crash, hang, exhaust memory, give a wrong number or be accepted, and now gives a ValueError
naming the argument (before any work) or the right value.

Sizes beyond this machine's memory are refused by comparing with the physical memory, so the
"too large" values below are far beyond any machine (2**60 bytes and more).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import diagnostics as dg
import fedlangevin as fl
from fedlangevin import data as fd

HUGE = 10**400  # an integer beyond the float range


@pytest.fixture(scope="module")
def problem():
    return fl.problems.GaussianSimulation(num_clients=5, samples_per_client=10, seed=0)


# -- 1: integers beyond the float range --------------------------------------------------------------
@pytest.mark.parametrize("build, name", [
    (lambda p: fl.FALD(p, 1e-4, temperature=HUGE), "temperature"),
    (lambda p: fl.FALD(p, HUGE), "step_size"),
    (lambda p: fl.FALD(p, 1e-4, chains=HUGE), "chains"),
    (lambda p: fl.Polynomial(HUGE), "a"),
    (lambda p: fl.problems.GaussianSimulation(num_clients=2, alpha=HUGE), "alpha"),
    (lambda p: dg.nll(np.full((1, 2), 0.5), [0], eps=HUGE), "eps"),
    (lambda p: dg.summary(np.zeros((2, 10, 1)), ci_prob=HUGE), "ci_prob"),
    (lambda p: fl.privacy.paper_bound(eta=1e-6, gamma=HUGE, sensitivity=1, p_min=0.1, num_clients=10,
                                      num_sampled=10, local_steps=10, iterations=1000, delta0=1e-6, delta1=1e-6,
                                      delta2=1e-6), "gamma"),
])
def test_integers_beyond_float_range_are_out_of_range(problem, build, name):
    with pytest.raises(ValueError, match=name):
        build(problem)


# -- 2: sizes that fit no memory are refused before allocating ---------------------------------------
@pytest.mark.parametrize("build, name", [
    (lambda p: fl.FALD(p, 1e-4, local_steps=2**60), "local_steps"),
    (lambda p: fl.problems.GaussianSimulation(num_clients=2**63), "num_clients"),
    (lambda p: dg.ece(np.full((4, 2), 0.5), [0, 1, 0, 1], n_bins=2**60), "n_bins"),
    (lambda p: dg.w2_floor(np.zeros(2), np.eye(2), n=2**40, repeats=2**20), "n"),
])
def test_sizes_beyond_memory_are_refused(problem, build, name):
    with pytest.raises(ValueError, match=rf"{name}: .* needs .* GiB, more than"):
        build(problem)


def test_scheme_one_draws_in_blocks_with_the_law_of_one_draw():
    # Scheme I weights are counts / S of S draws with probabilities p: unbiased for p.
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    from fedlangevin.federation import participation

    s = participation._BLOCK * 2 + 5  # three blocks
    w = fl.SchemeI(s).weights(p, 2, g)
    assert w.shape == (2, 4) and torch.allclose(w.sum(1), torch.ones(2, dtype=torch.float64))
    # each weight is a Binomial(S, p_c) / S: sd sqrt(p (1 - p) / S) < 3.5e-4; 6 sd tolerance
    assert torch.allclose(w, p.expand(2, -1), atol=6 * 3.5e-4)
    # a small S is one block: the same stream as a single multinomial draw
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    idx = torch.multinomial(p.expand(3, -1), 7, replacement=True, generator=g2)
    ref = torch.zeros(3, 4, dtype=torch.float64).scatter_add_(1, idx, torch.full(idx.shape, 1 / 7, dtype=torch.float64))
    assert torch.equal(fl.SchemeI(7).weights(p, 3, g1), ref)


def test_paper_scheme_one_delta_of_huge_num_sampled_sums_its_binomial_window(monkeypatch):
    from fedlangevin.privacy import paper


    setting = dict(eta=1e-6, gamma=0.02, sensitivity=1.0, p_min=0.1, num_clients=10, local_steps=10,
                   iterations=1000, scheme="I", delta0=1e-6, delta1=1e-6, delta2=1e-6)
    big = fl.privacy.paper_bound(**setting, num_sampled=10**9)
    assert math.isfinite(big.delta_tilde_K)
    # the window sum equals the full sum where both can be computed
    s = 10**6
    monkeypatch.setattr(paper, "_FULL_SUM", 10**5)  # the window from 1e5 terms on (1e7 by default): fast
    windowed = fl.privacy.paper_bound(**setting, num_sampled=s).delta_tilde_K
    monkeypatch.setattr(paper, "_FULL_SUM", 10 * s)
    full = fl.privacy.paper_bound(**setting, num_sampled=s).delta_tilde_K
    assert windowed == pytest.approx(full, rel=1e-12)


# -- 3: tiny or huge floats ----------------------------------------------------------------------------
PRIVACY = dict(eta=1e-6, tau=1.0, rho=0.0, gamma=0.02, sensitivity=1.0, p_min=0.1, num_clients=10, num_sampled=10,
               local_steps=10, iterations=1000, scheme="II")


@pytest.mark.parametrize("scale", [1e-300, 1e308])
def test_prior_scale_outside_float_range_is_refused(scale):
    X, y = torch.randn(20, 2, generator=torch.Generator().manual_seed(0)), torch.arange(20) % 2
    with pytest.raises(ValueError, match="prior_scale"):
        fl.problems.LogisticRegression.from_partition(X, y, [torch.arange(10), torch.arange(10, 20)], prior_scale=scale)


@pytest.mark.parametrize("call", [
    lambda: fl.privacy.rdp_epsilon(**dict(PRIVACY, gamma=1e-300), delta=1e-5),
    lambda: fl.privacy.tight_epsilon(**dict(PRIVACY, eta=1e308), delta=1e-5),
    lambda: fl.privacy.lower_bound_epsilon(**dict(PRIVACY, eta=np.geomspace(1e-6, 1e-300, 1000)), delta=1e-5),
    lambda: fl.privacy.tight_epsilon(**dict(PRIVACY, sensitivity=1e-300), delta=1e-5),
])
def test_noise_multiplier_outside_the_accountants_range_is_refused(call):
    with pytest.raises(ValueError, match="eta, gamma, sensitivity: the noise multiplier"):
        call()


def test_paper_bound_with_tiny_sensitivity_is_a_number():
    b = fl.privacy.paper_bound(**dict(PRIVACY, sensitivity=1e-300), delta0=1e-6, delta1=1e-6, delta2=1e-6)
    assert b.within_theorem and 0 <= b.epsilon < 1e-200


def test_w2_floor_n_infinite_is_refused():
    with pytest.raises(ValueError, match="n must be an integer"):
        dg.w2_floor(np.zeros(2), np.eye(2), n=float("inf"))


# -- 4/5: the tight accountant: bounded work, never above RDP, never inf where RDP is finite ------------
@pytest.mark.parametrize("change", [dict(eta=0.5), dict(rho=0.999999), dict(iterations=10**9)])
def test_tight_accountant_bounds_its_grid_and_stays_below_rdp(change, monkeypatch):
    from fedlangevin.privacy import accountant as acc

    # a small bound, so that these settings (which need millions of points) exercise the
    # coarsening in a second; the default bound is MAX_GRID_POINTS = 2**22
    monkeypatch.setattr(acc, "MAX_GRID_POINTS", 2**14)
    kw = dict(PRIVACY, **change)
    levels = acc._levels_from(kw)
    d = acc._bounded_grid(levels)
    pld, d_used = acc._pld_from_levels(levels, 1e-5)
    if d is None:  # no grid step below 1 nat fits: the PLD is skipped, RDP answers
        assert pld == math.inf and math.isnan(d_used)
    else:
        assert d > acc._auto_discretization(levels) and acc._grid_points(levels, d) <= 2**14
        assert d_used == d and math.isfinite(pld)
    rdp = fl.privacy.rdp_epsilon(**kw, delta=1e-5)
    tight = fl.privacy.tight_epsilon(**kw, delta=1e-5)
    assert tight == min(pld, rdp) and math.isfinite(tight)


def test_explicit_discretization_too_fine_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"discretization=1e-09 needs about .* grid points"):
        fl.privacy.tight_epsilon(**PRIVACY, delta=1e-5, discretization=1e-9)


def test_tiny_delta_gives_a_finite_tight_epsilon_between_its_neighbours():
    tight = fl.privacy.tight_epsilon(**PRIVACY, delta=1e-13)
    rdp = fl.privacy.rdp_epsilon(**PRIVACY, delta=1e-13)
    assert math.isfinite(tight) and tight <= rdp
    assert fl.privacy.tight_epsilon(**PRIVACY, delta=1e-12) <= tight  # epsilon decreases in delta


def test_the_random_setting_that_gave_inf_is_finite_and_monotone_in_iterations(monkeypatch):
    from fedlangevin.privacy import accountant as acc

    # the epsilon-for-delta of dp-accounting overflowed on this PMF (losses up to ~1200); a
    # coarser grid (2**19 points) keeps the test short and shows the same: finite, monotone
    monkeypatch.setattr(acc, "MAX_GRID_POINTS", 2**19)
    kw = dict(eta=7.359293697702076e-06, tau=0.25136727843140644, gamma=0.03754851495713897,
              sensitivity=4.776508957529887, p_min=0.00882195074117093, num_clients=34, num_sampled=24, local_steps=11,
              delta=9.579185360844239e-08)
    a = fl.privacy.tight_epsilon(**kw, iterations=1155)
    b = fl.privacy.tight_epsilon(**kw, iterations=1166)
    assert math.isfinite(a) and a <= fl.privacy.rdp_epsilon(**kw, iterations=1155)
    assert a <= b * (1 + 1e-9)


def test_epsilon_for_delta_matches_dp_accounting_where_it_does_not_overflow():
    from fedlangevin.privacy import accountant as acc

    levels = acc._levels_from(PRIVACY)
    pmf = acc._tight_pmf(levels, acc._auto_discretization(levels))
    for delta in (1e-3, 1.21e-4, 1e-6):
        assert acc._epsilon_for_delta(pmf, delta) == pytest.approx(pmf.get_epsilon_for_delta(delta), rel=1e-9)


# -- 6: covariances ----------------------------------------------------------------------------------
@pytest.mark.parametrize("cov, what", [(-np.eye(2), "positive semi-definite"),
                                       (np.array([[1.0, 0.5], [0.0, 1.0]]), "symmetric")])
def test_gaussian_w2_refuses_covariances_that_are_not_symmetric_psd(cov, what):
    with pytest.raises(ValueError, match=f"cov2 must be {what}"):
        dg.gaussian_w2(np.zeros(2), np.eye(2), np.zeros(2), cov)


def test_gaussian_w2_and_summary_do_not_overflow():
    # W2 scales linearly: W2(s m1, s^2 C1; s m2, s^2 C2) = s W2(m1, C1; m2, C2)
    base = dg.gaussian_w2(np.ones(2), 2 * np.eye(2), np.zeros(2), np.eye(2))
    assert base == pytest.approx(math.sqrt(2 + 2 * (math.sqrt(2) - 1) ** 2), rel=1e-12)
    for s in (2.0**500, 2.0**-500):
        assert dg.gaussian_w2(s * np.ones(2), s * s * 2 * np.eye(2), np.zeros(2), s * s * np.eye(2)) == pytest.approx(
            s * base, rel=1e-12)
    x = np.random.default_rng(0).standard_normal((2, 50, 1))
    scaled = dg.summary(x * 2.0**660)
    plain = dg.summary(x)
    for column in ("mean", "sd", "mcse_mean", "mcse_sd", "eti90_lb"):
        assert scaled[column].iloc[0] == plain[column].iloc[0] * 2.0**660  # powers of two: exact
    assert scaled["r_hat"].iloc[0] == plain["r_hat"].iloc[0]


# -- 7: ill-conditioned posterior ---------------------------------------------------------------------
def test_quadratic_posterior_of_an_ill_conditioned_hessian_is_a_value_error():
    q = fl.problems.QuadraticProblem(hessians=[[[1e-310, 0], [0, 1]]], shifts=[[0, 0]], weights=[1.0])
    with pytest.raises(ValueError, match="hessians: .* condition number"):
        q.posterior()
    with pytest.raises(ValueError, match="hessians"):
        fl.FALD(q, 1e-3).run(2, target="posterior")


# -- 8: indices and None ------------------------------------------------------------------------------
@pytest.mark.parametrize("call, name", [
    (lambda: fl.problems.LogisticRegression.from_partition(torch.randn(20, 2), torch.arange(20) % 2,
                                                           [torch.tensor([0, 100])]), r"parts\[0\]"),
    (lambda: fd.class_counts(torch.arange(20) % 2, [torch.tensor([0, 100])]), r"parts\[0\]"),
    (lambda: fd.apply_partition(torch.randn(20, 2), torch.arange(20) % 2, [torch.tensor([-1])]), r"parts\[0\]"),
    (lambda: fd.apply_partition(torch.randn(20, 2), torch.arange(20) % 2, [torch.tensor([0.5])]), r"parts\[0\]"),
    (lambda: fd.stratified_holdout(None, 0.2), "y"),
    (lambda: fd.dirichlet_partition(None, 2, 0.5), "y"),
    (lambda: fd.label_skew_partition(None, 2), "y"),
])
def test_bad_indices_and_none_are_value_errors(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# -- 9: init with a graph, unavailable devices ---------------------------------------------------------
def test_init_that_requires_grad_is_detached(problem):
    init = torch.zeros(3, 2, requires_grad=True)
    trace = fl.FALD(problem, 1e-4, init=init, chains=3, seed=0).run(2)
    assert trace.samples.shape == (3, 2, 2) and not trace.samples.requires_grad
    assert init.grad is None and torch.equal(init.detach(), torch.zeros(3, 2))


@pytest.mark.skipif(getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available(),
                    reason="MPS is available here")
def test_mps_without_mps_is_a_value_error(problem):
    with pytest.raises(ValueError, match="device='mps' was requested but MPS"):
        fl.FALD(problem, 1e-4, device="mps")


# -- 10: numpy values -----------------------------------------------------------------------------------
def test_numpy_scalars_bools_and_0d_arrays_are_accepted(problem):
    assert fl.FALD(problem, 1e-4, seed=0).run(2, keep_samples=np.bool_(True), progress=np.array(False)).num_draws == 2
    df = dg.summary(np.random.default_rng(0).standard_normal((2, 10, 1)), ci_prob=np.float32(0.5), round_to=np.int64(3))
    assert list(df.columns)[2] == "eti50_lb"
    probs, labels = np.array([[0.3, 0.7]] * 4), [0, 1, 1, 0]
    assert dg.ece(probs, labels, n_bins=np.array(3)) == dg.ece(probs, labels, n_bins=3)


# -- 11: invalid values that were accepted ---------------------------------------------------------------
@pytest.mark.parametrize("call, name", [
    (lambda p: fl.FALD(p, 1e-4, init=np.zeros(2, dtype=complex)), "init"),
    (lambda p: fl.problems.GaussianSimulation(num_clients=2, cov=np.eye(2, dtype=complex)), "cov"),
    (lambda p: fl.problems.QuadraticProblem(np.eye(2, dtype=complex)[None], [[0, 0]], [1.0]), "hessians"),
    (lambda p: dg.ece(np.array([[0.3, 0.7]] * 2, dtype=complex), [0, 1]), "probs"),
    (lambda p: dg.gaussian_w2([0j, 0], np.eye(2), [0, 0], np.eye(2)), "mean1"),
    (lambda p: fl.Constant(1e-3 + 0j), "step_size"),
    (lambda p: dg.ece(np.array([[0.3, 0.7]] * 2), [0, 1], classwise="no"), "classwise"),
    (lambda p: dg.w2_floor(np.zeros(2), np.eye(2), n=10, seed=None), "seed"),
    (lambda p: dg.w2_floor(np.zeros(2), np.eye(2), n=10, seed=True), "seed"),
    (lambda p: dg.w2_floor(np.zeros(2), np.eye(2), n=10, seed=[3]), "seed"),
    (lambda p: fl.problems.QuadraticProblem(np.eye(2)[None], np.zeros((1, 2)), [1.0], var_names=["a", "a"]),
     "var_names"),
])
def test_invalid_values_are_refused(problem, call, name):
    with pytest.raises(ValueError, match=name):
        call(problem)


def test_classwise_bools_keep_their_meaning():
    probs, labels = np.array([[0.3, 0.7], [0.6, 0.4], [0.1, 0.9], [0.8, 0.2]]), [0, 1, 1, 0]
    assert dg.ece(probs, labels, classwise=np.bool_(True)) == dg.ece(probs, labels, classwise=True)
    assert dg.ece(probs, labels, classwise=True) != dg.ece(probs, labels, classwise=False)


# -- 16: abstract bases and the temperature's share of a divergence --------------------------------------
def test_abstract_problem_and_participation_are_refused_before_any_work(problem):
    with pytest.raises(ValueError, match=r"problem: FederatedProblem is not a complete FederatedProblem \(it lacks "
                                         r"num_clients, dim, weights, grad\(\), to\(\)\)"):
        fl.FALD(fl.problems.FederatedProblem(), 1e-4)
    with pytest.raises(ValueError, match="problem: .* lacks"):
        fl.fald.build(fl.problems.FederatedProblem())

    class OnlyGrad(fl.problems.FederatedProblem):  # sets the sizes but forgets to()
        num_clients, dim, weights = problem.num_clients, problem.dim, problem.weights

        def grad(self, theta, *, batch_size=None, generator=None):
            return theta

    with pytest.raises(ValueError, match=r"lacks to\(\)"):
        fl.FALD(OnlyGrad(), 1e-4)
    with pytest.raises(ValueError, match=r"participation: Participation does not implement weights\(\)"):
        fl.FALD(problem, 1e-4, participation=fl.fald.Participation())


def test_a_temperature_whose_noise_overflows_is_named_up_front(problem):
    # sqrt(2 tau (1 - rho^2) / p_c) with tau = 1e308 overflows float64: the run used to start and
    # then blame the step size for the divergence; now the constructor names the temperature
    for rho in (0.0, 0.5):
        with pytest.raises(ValueError, match=r"temperature=1e\+308 makes the injected noise scale .* overflow float64"):
            fl.FALD(problem, 1e-4, temperature=1e308, correlation=rho)
    # a huge but representable temperature is valid input and runs (its draws are finite)
    trace = fl.FALD(problem, 1e-4, temperature=1e300, chains=2, seed=0).run(3, progress=False)
    assert torch.isfinite(trace.samples).all()


# -- 17: a gradient returned as a transposed (non-contiguous) view ----------------------------------------
def _nuts(problem, **kw):
    from fedlangevin.baselines import federated_nuts

    return federated_nuts(problem, **kw)


class _TransposedGrad(fl.problems.GaussianSimulation):
    """The same problem, whose grad returns its gradient as a permuted view of a (d, N, R) tensor."""

    def grad(self, theta, *, batch_size=None, generator=None):
        g = super().grad(theta, batch_size=batch_size, generator=generator)
        out = g.permute(2, 1, 0).contiguous().permute(2, 1, 0)
        assert not out.is_contiguous()
        return out


@pytest.mark.parametrize("build", [
    lambda p: fl.FALD(p, 1e-3, chains=2, local_steps=2, seed=0).run(4, progress=False).samples,
    lambda p: fl.FALD(p, 1e-3, chains=2, streams="per_client", seed=0).run(4, progress=False).samples,
    lambda p: fl.FAHMC(p, 1e-2, chains=2, local_steps=2, seed=0).run(4, progress=False).samples,
    lambda p: torch.as_tensor(_nuts(p, chains=1, draws=3, warmup=3, seed=0).samples),
], ids=["fald", "fald-per-client", "fahmc", "nuts"])
def test_a_gradient_returned_as_a_transposed_view_gives_the_same_draws(build):
    """A user's grad may return any strided tensor of shape (R, N, d): the samplers read it as its values."""
    plain = fl.problems.GaussianSimulation(num_clients=3, samples_per_client=6, seed=1)
    view = _TransposedGrad(num_clients=3, samples_per_client=6, seed=1)
    assert torch.equal(build(view), build(plain))
