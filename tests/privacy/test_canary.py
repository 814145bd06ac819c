"""The canary audit (fedlangevin.privacy.canary): its attack reads what the mechanism releases,
it stays below the accounted epsilon where the accounting is right, and it exceeds a wrong one.

Statistical tolerances: the scores of R replicates are independent; a mean is checked within
5 standard errors sd / sqrt(R) and a standard deviation within 5 of its standard errors
sd / sqrt(2 (R - 1)) (Gaussian scores; for the minibatch scores, a sum of many bounded steps, the
same is used with the exact variance). The audit's epsilon_lower is itself a 95 % lower bound:
"audited <= accounted" can fail by chance with probability <= 5 % per configuration where the
accounting is right; the seeds are fixed, so each assertion is a fixed, reproducible check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("dp_accounting")

from fedlangevin.privacy import ClientLevel, RecordLevel, tight_epsilon  # noqa: E402
from fedlangevin.privacy.canary import (  # noqa: E402
    MIN_REPLICATES,
    AuditSetting,
    audit,
    epsilon_lower_bound,
)

R = 10_000


def _close(values, mean, sd):
    values = np.asarray(values)
    n = values.size
    assert abs(values.mean() - mean) < 5 * sd / math.sqrt(n), (values.mean(), mean)
    assert abs(values.std(ddof=1) - sd) < 5 * sd / math.sqrt(2 * (n - 1)), (values.std(ddof=1), sd)


# -- the attack reads what the mechanism releases (independent computation of its law) ------------
def test_full_batch_scores_are_the_gaussian_shift_of_the_clipped_canary():
    # N = 1, K = 3, 2 rounds, eta = 0.2, C = 0.5: each step moves by +/- eta C (p = 1), private noise
    # sd sqrt(2 eta tau) per step, 6 steps in all
    result = audit(privacy=RecordLevel(clip=0.5), step_size=0.2, local_steps=3, rounds=2, replicates=R, seed=1)
    steps, eta, clip = 6, 0.2, 0.5
    _close(result.scores_in, steps * eta * clip, math.sqrt(steps * 2 * eta))
    _close(result.scores_out, -steps * eta * clip, math.sqrt(steps * 2 * eta))


def test_shared_noise_is_read_off_the_other_uploads():
    # N = 3 full participation, rho = 0.5: per step the canary client's y_c has shared variance
    # a = rho^2 and private variance b = (1 - rho^2) N (units 2 eta tau); the statistic
    # y_c - lambda mean_o y_o over m = 2 others has variance a + b - a^2 / (a + b / m)
    rho, n, m, eta, steps = 0.5, 3, 2, 0.1, 2
    a, b = rho**2, (1 - rho**2) * n
    var = steps * 2 * eta * (a + b - a * a / (a + b / m))
    result = audit(step_size=eta, rounds=steps, correlation=rho, num_clients=n, replicates=R, seed=2)
    _close(result.scores_in, steps * eta * n, math.sqrt(var))   # each step moves client 0 by eta C / p_c = eta N
    assert AuditSetting(correlation=rho, num_clients=n).shared_weight(m) == pytest.approx(a / (a + b / m))


def test_minibatch_scores_include_the_canary_with_probability_b_over_n():
    # b = 2 of n_c = 8 rows: each step includes the canary with probability gamma = 1/4 (without
    # replacement, independently per step); when included it moves client 0 by eta (n_c / (b p)) C.
    # Per step: mean eta C / p, variance 2 eta tau / p + (eta s C)^2 gamma (1 - gamma), s = n_c / (b p)
    eta, k, gamma, s = 0.1, 4, 0.25, 8 / 2
    result = audit(step_size=eta, local_steps=k, rows=8, batch_size=2, replicates=R, seed=3)
    var = k * (2 * eta + (eta * s) ** 2 * gamma * (1 - gamma))
    _close(result.scores_in, k * eta, math.sqrt(var))


def test_client_level_clips_the_clients_whole_data_term_to_c():
    # client level: client 0's data term is clipped to C (no 1/p_c scale left), N = 2: mean eta C per step;
    # private noise variance 2 eta tau / p_c = 4 eta per step
    eta = 0.1
    result = audit(privacy=ClientLevel(clip=1.0), step_size=eta, rounds=3, num_clients=2, replicates=R, seed=4)
    _close(result.scores_in, 3 * eta, math.sqrt(3 * 4 * eta))


@pytest.mark.parametrize("noise,q", [("paper", 0.5), ("calibrated", 1.0)])
def test_scheme_two_scores_only_rounds_where_the_canary_client_uploads(noise, q):
    # S = 1 of N = 2: client 0 uploads with probability 1/2 per round; a round it uploads adds
    # eta C / p = 2 eta with noise variance 2 eta / q: q = p = 1/2 for the paper's noise (eq. 10), q =
    # E[w_0^2] / p = (1/2) / (1/2) = 1 for the calibrated one. Over 4 rounds, U ~ Binomial(4, 1/2)
    # rounds counted: mean 4 * 1/2 * 2 eta, variance E[U] 2 eta / q + Var[U] (2 eta)^2
    from fedlangevin.federation.participation import SchemeII

    eta = 0.1
    result = audit(step_size=eta, rounds=4, num_clients=2, participation=SchemeII(1, noise=noise), replicates=R,
                   seed=5)
    _close(result.scores_in, 4 * 0.5 * 2 * eta, math.sqrt(2 * 2 * eta / q + 1 * (2 * eta) ** 2))


# -- the audit stays below a right accounting ------------------------------------------------------
CONFIGS = {
    "K1 full batch full participation": dict(step_size=0.3, rounds=2),
    "K10 full batch full participation": dict(step_size=0.05, local_steps=10, rounds=2),
    "K1 rho0.5 full participation": dict(step_size=0.2, rounds=3, correlation=0.5, num_clients=3),
    "K10 rho0.5 scheme II minibatch": dict(step_size=0.05, local_steps=10, rounds=4, correlation=0.5, num_clients=4,
                                           participation=2, rows=10, batch_size=2),
    "K1 scheme II minibatch": dict(step_size=0.3, rounds=4, num_clients=3, participation=2, rows=4, batch_size=1),
    "K10 minibatch full participation": dict(step_size=0.1, local_steps=10, rounds=1, rows=5, batch_size=2),
    "client level K10 scheme II": dict(privacy=ClientLevel(clip=1.0), step_size=0.1, local_steps=10, rounds=3,
                                       num_clients=4, participation=2),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_audited_lower_bound_stays_below_the_accounted_epsilon(name):
    result = audit(**CONFIGS[name], replicates=R, seed=11)
    assert result.epsilon_lower <= result.epsilon and result.consistent, result.summary()
    assert result.report.chains == 1 and result.report.delta == 1e-5


TIGHT = dict(step_size=0.5, rounds=1)   # K = 1, full batch, N = 1: z = sqrt(2 / 0.5) / 2 = 1, mu = 1


@pytest.fixture(scope="module")
def tight():
    return audit(**TIGHT, replicates=200_000, seed=7)


def test_the_accounted_epsilon_is_the_gaussian_mechanisms_and_the_tight_audit_reaches_half_of_it(tight):
    # the accountant of this configuration is one Gaussian mechanism of mu = 1: epsilon at delta solves
    # Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta (Balle & Wang 2018), computed independently
    from scipy.optimize import brentq
    from scipy.stats import norm

    exact = brentq(lambda e: norm.cdf(-e + 0.5) - math.exp(e) * norm.cdf(-e - 0.5) - 1e-5, 0, 50)
    assert tight.epsilon == pytest.approx(exact, rel=2e-3)  # the PLD grid's pessimism is < 0.1 %
    # tightness: the goal is >= 0.5. With 100,000 held-out replicates per world the best
    # single-threshold bound of a mu = 1 Gaussian test is ~0.62 of epsilon (expected counts; the
    # threshold sits where ~20 out-scores exceed it, whose Poisson spread moves the bound by ~0.05)
    assert tight.ratio >= 0.5, tight.summary()


@pytest.mark.parametrize("wrong", ["noise 4x larger", "client sampling that did not happen",
                                   "noise off by sqrt(p_c)"])
def test_the_audit_catches_a_wrong_accounting(wrong, tight):
    """Negative controls: an accountant told something false about the run audited in ``tight``
    (or, for the weight, a 4-client run) gives an epsilon the audit must exceed."""
    base = dict(eta=0.5, tau=1.0, rho=0.0, gamma=1.0, sensitivity=2.0, p_min=1.0, num_clients=1, num_sampled=1,
                local_steps=1, iterations=1, scheme="II", delta=1e-5)
    result = tight
    if wrong == "noise 4x larger":
        claimed = tight_epsilon(**dict(base, tau=16.0))     # z scales with sqrt(tau): 4x the noise multiplier
    elif wrong == "client sampling that did not happen":
        # 10 rounds of z = sqrt(10) (mu = 1 in all), the client uploads every round; accounted as if it
        # uploaded in each round with probability 0.1 (amplification by sampling that did not happen)
        result = audit(step_size=0.05, rounds=10, replicates=100_000, seed=9)
        assert result.epsilon == pytest.approx(tight.epsilon, rel=1e-3) and result.consistent
        claimed = tight_epsilon(**dict(base, eta=0.05, iterations=10, inclusion_probability=0.1))
    else:
        # N = 4 equal clients, full participation: client 0's step moves by eta C / p_c against private noise
        # sqrt(2 eta tau / p_c), z = sqrt(2 p_c tau / eta) / (2C) = 1 at eta = 1/8. A mechanism whose noise
        # lacked the 1/p_c (the bug "noise off by sqrt(p_c)"), accounted as if it had it, is a claim of
        # twice the true noise multiplier: the right accounting at 4x the temperature (z ~ sqrt(tau))
        four = dict(base, eta=0.125, p_min=0.25, num_clients=4, num_sampled=4)
        result = audit(step_size=0.125, rounds=1, num_clients=4, replicates=100_000, seed=8)
        assert result.epsilon == pytest.approx(tight_epsilon(**four), rel=1e-9) and result.consistent
        claimed = tight_epsilon(**dict(four, tau=4.0))
    assert claimed < result.epsilon
    assert result.epsilon_lower > claimed, (wrong, claimed, result.summary())


# -- the bound itself --------------------------------------------------------------------------------
def test_epsilon_lower_bound_of_gaussian_scores_is_below_the_gaussian_epsilon():
    from scipy.optimize import brentq
    from scipy.stats import norm

    rng = np.random.default_rng(0)
    for mu in (0.5, 2.0):
        exact = brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - 1e-5, 0, 60)
        out = epsilon_lower_bound(rng.normal(mu / 2, 1, 50_000), rng.normal(-mu / 2, 1, 50_000), delta=1e-5)
        assert 0.3 * exact < out["epsilon"] <= exact, (mu, out)
    # identical worlds: nothing to find
    same = rng.normal(size=20_000)
    assert epsilon_lower_bound(same[:10_000], same[10_000:], delta=1e-5)["epsilon"] < 0.15
    # the test may go either way: reversed scores give the same bound
    a, b = rng.normal(1, 1, 10_000), rng.normal(-1, 1, 10_000)
    fwd, rev = epsilon_lower_bound(a, b, delta=1e-5, seed=3), epsilon_lower_bound(-a, -b, delta=1e-5, seed=3)
    assert fwd["direction"] == "greater" and rev["direction"] == "less"
    assert rev["epsilon"] == pytest.approx(fwd["epsilon"], rel=1e-12)


# -- bad arguments: a ValueError naming the argument, before any run ------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(replicates=MIN_REPLICATES - 1), "replicates"),
    (dict(delta=0.0), "delta"),
    (dict(delta=1.0), "delta"),
    (dict(confidence=1.0), "confidence"),
    (dict(dim=2, canary=[1.0, 0.0, 0.0]), r"canary must be a direction of shape \(2,\)"),
    (dict(canary=[0.0]), "canary must be a finite, nonzero direction"),
    (dict(canary="up"), "canary"),
    (dict(correlation=0.5), "num_clients must be >= 2 when correlation > 0"),
    (dict(correlation=1.0, num_clients=2), "correlation"),
    (dict(rows=4, batch_size=5), "batch_size"),
    (dict(step_size=0.0), "step_size"),
    (dict(privacy=0.5), "privacy must be"),
    (dict(num_clients=2, participation=3), "num_sampled"),
    (dict(replicates=np.int64(MIN_REPLICATES - 1)), "replicates"),
    (dict(delta=np.float64("nan")), "delta"),
    (dict(replicates=10**15), r"replicates must be an integer in \[100, "),      # beyond this machine's memory
    (dict(dim=10**13), r"dim must be an integer in \[1, "),
    (dict(rows=10**16), r"rows must be an integer in \[1, "),
    (dict(step_size=1e300), "step_size, temperature, privacy .clip.: this setting cannot be accounted"),
    (dict(step_size=1e-300), "step_size, temperature, privacy .clip.: this setting cannot be accounted"),
    (dict(sampler="FALD"), "sampler must be a sampler factory"),
    (dict(friction=0.0), "friction"),
    (dict(friction=float("inf")), "friction"),
])
def test_bad_arguments_are_refused_before_any_run(kwargs, match, monkeypatch):
    import fedlangevin.privacy.canary as mod

    monkeypatch.setattr(mod, "_world", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    with pytest.raises(ValueError, match=match):
        audit(**kwargs)


def test_setting_and_fields_are_not_both_given():
    with pytest.raises(ValueError, match="not both"):
        audit(AuditSetting(), rounds=2)
    with pytest.raises(ValueError, match="setting must be an AuditSetting"):
        audit({"rounds": 2})
    with pytest.raises(ValueError, match="scores_in must be a vector of at least"):
        epsilon_lower_bound(np.zeros(10), np.zeros(200), delta=1e-5)


def test_the_largest_seed_runs_both_worlds():
    # the "out" world's seed is seed + 1 modulo 2^64: the largest seed check_seed accepts runs both runs
    result = audit(step_size=0.3, replicates=MIN_REPLICATES, seed=2**64 - 1)
    assert result.scores_out.size == MIN_REPLICATES and result.consistent


def test_the_audit_runs_the_sampler_it_is_given():
    """The sampler is an argument (privacy imports no sampler): the default is fedlangevin.FALD, resolved
    through the top-level package, and a factory given is the one that runs, with the same draws."""
    import fedlangevin as fl
    from fedlangevin.privacy.canary import default_sampler

    assert default_sampler() is fl.FALD
    built = []

    def factory(problem, **settings):
        built.append(settings["seed"])
        return fl.FALD(problem, **settings)

    given = audit(step_size=0.3, rounds=2, replicates=MIN_REPLICATES, seed=3, sampler=factory)
    default = audit(step_size=0.3, rounds=2, replicates=MIN_REPLICATES, seed=3)
    assert built == [3, 4]  # both worlds ran through the factory given
    np.testing.assert_array_equal(given.scores_in, default.scores_in)
    np.testing.assert_array_equal(given.scores_out, default.scores_out)


# -- private FA-HMC (sampler=fedlangevin.FAHMC): OBABO, docs/fahmc.md "Private FA-HMC" ---------------------
def _fahmc():
    import fedlangevin as fl

    return fl.FAHMC


def test_fahmc_scores_are_the_momentum_innovations_shift_of_the_clipped_canary():
    # N = 1, K = 1, 3 rounds, h = 0.5, gamma = 1, C = 1: each round's innovation v_t - a v_{t-1} has mean
    # (1 + a)(h/2) C (the canary's clipped gradient, eq. P1) and sd sqrt(tau (1 - a^2))
    h, gamma = 0.5, 1.0
    a = math.exp(-gamma * h)
    result = audit(step_size=h, friction=gamma, rounds=3, replicates=R, seed=1, sampler=_fahmc())
    _close(result.scores_in, 3 * (1 + a) * h / 2, math.sqrt(3 * (1 - a * a)))
    _close(result.scores_out, -3 * (1 + a) * h / 2, math.sqrt(3 * (1 - a * a)))
    assert "FA-HMC (OBABO) h = 0.5, friction = 1" in result.summary()


FAHMC_CONFIGS = {
    "K1 full batch full participation": dict(step_size=0.5, friction=1.0, rounds=3),
    "K3 minibatch scheme II": dict(step_size=0.3, friction=2.0, local_steps=3, rounds=3, num_clients=3,
                                   participation=2, rows=4, batch_size=2),
    "K1 rho0.5 full participation": dict(step_size=0.4, friction=0.5, rounds=2, correlation=0.5, num_clients=2),
    "client level K2": dict(privacy=ClientLevel(clip=1.0), step_size=0.3, friction=1.0, local_steps=2, rounds=2,
                            num_clients=2),
}


@pytest.mark.parametrize("name", sorted(FAHMC_CONFIGS))
def test_fahmc_audited_lower_bound_stays_below_the_accounted_epsilon(name):
    result = audit(**FAHMC_CONFIGS[name], replicates=R, seed=11, sampler=_fahmc())
    assert result.epsilon_lower <= result.epsilon and result.consistent, result.summary()
    assert result.report.mechanism["sampler"] == "FA-HMC" and result.report.chains == 1


# K = 1, full batch, N = 1, one round: one Gaussian mechanism of mu = (1 + a)(h/2) 2C / sqrt(1 - a^2) ~ 1.42
FAHMC_TIGHT = dict(step_size=0.5, friction=0.5, rounds=1)


@pytest.fixture(scope="module")
def fahmc_tight():
    return audit(**FAHMC_TIGHT, replicates=200_000, seed=7, sampler=_fahmc())


def _gaussian_epsilon(mu: float, delta: float = 1e-5) -> float:
    from scipy.optimize import brentq
    from scipy.stats import norm

    return brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0, 50)


def test_fahmc_accounted_epsilon_is_the_gaussian_mechanisms_and_the_tight_audit_reaches_half_of_it(fahmc_tight):
    a = math.exp(-0.5 * 0.5)
    mu = (1 + a) * 0.25 * 2.0 / math.sqrt(1 - a * a)
    assert fahmc_tight.epsilon == pytest.approx(_gaussian_epsilon(mu), rel=2e-3)
    assert fahmc_tight.ratio >= 0.5, fahmc_tight.summary()


@pytest.mark.parametrize("wrong", ["momentum ignored (FA-LD at eta = h^2 / 2)", "noise 4x larger"])
def test_the_audit_catches_a_wrong_fahmc_accounting(wrong, fahmc_tight):
    """Negative controls on the run of ``fahmc_tight``: accounting it as FA-LD's step of the same
    displacement noise (eta = h^2 / 2, the infinite-friction limit: the momentum carried in ignored), or
    claiming 4x the noise, gives an epsilon the audit must exceed."""
    h = 0.5
    if wrong.startswith("momentum"):
        claimed = tight_epsilon(eta=h * h / 2, gamma=1.0, sensitivity=2.0, p_min=1.0, num_clients=1, num_sampled=1,
                                local_steps=1, iterations=1, scheme="II", delta=1e-5)
    else:
        a = math.exp(-0.5 * h)
        claimed = _gaussian_epsilon((1 + a) * h / 2 * 2.0 / math.sqrt(1 - a * a) / 4)
    assert claimed < fahmc_tight.epsilon
    assert fahmc_tight.epsilon_lower > claimed, (wrong, claimed, fahmc_tight.summary())
