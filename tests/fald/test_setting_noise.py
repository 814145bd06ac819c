"""The check of a run's participation / minibatch setting (fedlangevin.fald.setting_noise): its predicted
sd ratios against the exact law of FA-LD on a Gaussian (schemes I and II, minibatches), control
variates removing the client-sampling noise there (exactly, and in the engine's law), and the run's
warning firing on a biased setting and not on right ones."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.experiments.exact import minibatch_gradient_noise, stationary_moments
from fedlangevin.fald.setting_noise import drift_noise, predicted_sd_ratios
from fedlangevin.federation.participation import Participation
from fedlangevin.problems import GaussianSimulation


def _problem(alpha=1.0):
    return GaussianSimulation(num_clients=10, alpha=alpha, samples_per_client=20, seed=0)


def _eta(problem):
    return 0.1 / float(torch.linalg.eigvalsh(problem.quadratic().hessian).max())


@pytest.mark.parametrize("rule, batch", [(fl.SchemeI(3), None), (fl.SchemeII(3), None), (fl.Full(), 4)])
@pytest.mark.parametrize("alpha", [0.03, 1.0])
def test_predicted_sd_ratios_match_the_exact_law(rule, batch, alpha):
    problem = _problem(alpha)
    eta = _eta(problem)
    noise = None if batch is None else minibatch_gradient_noise(problem, batch)
    _, full = stationary_moments(problem, [eta])
    mean, cov = stationary_moments(problem, [eta], participation=rule, gradient_noise=noise)
    exact = np.sqrt(np.diag(cov) / np.diag(full))
    theta = torch.from_numpy(np.random.default_rng(0).multivariate_normal(mean, cov, size=200))
    v_part, v_mb = drift_noise(problem, theta, rule, batch, generator=torch.Generator().manual_seed(0))
    predicted = predicted_sd_ratios(eta * (v_part + v_mb), None, cov, 1.0)
    # the prediction is the continuous-time (eta -> 0) excess: it misses O(eta L) = 10 % of the excess
    # variance (ratio^2 - 1); the weights' covariance is the rules' closed form
    assert np.all(np.abs(predicted**2 - exact**2) <= 0.1 * (exact**2 - 1) + 1e-3), (predicted, exact)
    assert exact.max() > 1.02  # the setting is off the target here


def test_control_variates_remove_the_client_sampling_noise_exactly_on_a_gaussian():
    problem = _problem(1.0)
    sampler = fl.FALD(problem, step_size=_eta(problem), chains=4, seed=0, participation=fl.SchemeI(3),
                      correction="control_variates")
    sampler.run(1, progress=False)
    theta = torch.randn(50, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 0.05
    term = sampler.state.correction["offset"]
    plain, _ = drift_noise(problem, theta, fl.SchemeI(3), None)
    corrected, _ = drift_noise(problem, theta, fl.SchemeI(3), None, term=term)
    # a shared Hessian: the corrected gradients A (theta - theta*) + grad f(theta*) agree across clients
    assert float(corrected.abs().max()) <= 1e-9 * float(plain.abs().max())


def test_control_variates_give_full_participations_law_under_scheme_one():
    problem = _problem(1.0)
    eta = _eta(problem)
    mean, cov = stationary_moments(problem, [eta])
    _, inflated = stationary_moments(problem, [eta], participation=fl.SchemeI(3))
    sampler = fl.FALD(problem, step_size=eta, chains=400, seed=3, participation=fl.SchemeI(3),
                      correction="control_variates", init=torch.from_numpy(mean))
    theta = sampler.run(300, warmup=299, progress=False).numpy()[:, -1]
    ratio = np.var(theta, axis=0, ddof=1) / np.diag(cov)
    # 400 independent chains: a variance ratio has standard error sqrt(2 / 399) = 0.071; 5 of them: 0.35.
    # Without the correction the exact law's ratio is 3.5 on the second coordinate.
    assert np.all(np.abs(ratio - 1) <= 0.35), ratio
    assert np.diag(inflated)[1] / np.diag(cov)[1] > 3.0
    assert np.all(np.abs(theta.mean(0) - mean) <= 5 * np.sqrt(np.diag(cov) / 400))


def _run(**kwargs):
    problem = kwargs.pop("problem", None) or _problem(1.0)
    sampler = fl.FALD(problem, step_size=_eta(problem), chains=8, seed=0, init=problem.posterior()[0], **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler.run(120, warmup=20, progress=False)
    return sampler, [str(w.message) for w in caught if "off the target" in str(w.message)]


def test_the_warning_fires_on_a_biased_setting():
    # the settings without their default correction (correction="auto" runs control variates there)
    sampler, caught = _run(participation=fl.SchemeI(3), correction=None)
    assert sampler.setting_noise.measured and sampler.setting_noise.exceeds
    assert len(caught) == 1 and "client sampling" in caught[0] and "predicted sd ratio" in caught[0]
    assert sampler.setting_noise.max_sd_ratio > 1.5  # the exact law's: 1.88
    sampler, caught = _run(batch_size=2, correction=None)
    assert len(caught) == 1 and "minibatch gradients" in caught[0]


@pytest.mark.parametrize("kwargs", [dict(participation=fl.SchemeI(3), correction="control_variates"),
                                    dict(batch_size=2, correction="control_variates"),
                                    dict(participation=fl.SchemeI(3)), dict(batch_size=2),  # the defaults: the same
                                    dict(participation=fl.SchemeII(5), problem=_problem(0.0)),
                                    dict()])
def test_the_warning_is_silent_on_a_right_setting(kwargs):
    sampler, caught = _run(**kwargs)
    assert caught == []
    if kwargs:
        assert sampler.setting_noise.measured and sampler.setting_noise.max_sd_ratio < 1.05
    else:  # full participation with full-batch gradients: nothing to check
        assert sampler.setting_noise is None


def test_the_diagonal_path_equals_the_dense_one_where_the_posterior_is_diagonal():
    # above d = 100 the check keeps O(d) memory: Q's diagonal and M, H taken diagonal; with a diagonal H and
    # M = I the Lyapunov solution's diagonal is Q_jj / (2 h_j) exactly, so both paths agree
    problem = GaussianSimulation(num_clients=10, alpha=0.03, samples_per_client=20, cov=torch.diag(torch.tensor(
        [2.0, 0.5], dtype=torch.float64)), seed=0)
    eta = _eta(problem)
    mean, cov = stationary_moments(problem, [eta], participation=fl.SchemeI(3))
    theta = torch.from_numpy(np.random.default_rng(0).multivariate_normal(mean, cov, size=100))
    seed = lambda: torch.Generator().manual_seed(0)  # noqa: E731  (the same rows for both paths)
    dense = predicted_sd_ratios(eta * sum(drift_noise(problem, theta, fl.SchemeI(3), 4, generator=seed())), None, cov,
                                1.0)
    diagonal = predicted_sd_ratios(eta * sum(drift_noise(problem, theta, fl.SchemeI(3), 4, dense=False,
                                                         generator=seed())), None, None, 1.0)
    # the client data's sample covariance is not exactly diagonal: its off-diagonal terms enter the dense path
    assert np.allclose(dense, diagonal, rtol=0.02), (dense, diagonal)


class _Drawn(Participation):
    """A rule of one's own (no scheme, no closed form): scheme I's weights."""

    def weights(self, p, chains, generator):
        return fl.SchemeI(3).weights(p, chains, generator)


def test_a_rule_of_ones_own_is_checked_from_its_draws():
    problem = _problem(0.03)
    eta = _eta(problem)
    _, cov = stationary_moments(problem, [eta], participation=fl.SchemeI(3))
    theta = torch.zeros(4, 2, dtype=torch.float64)
    closed = predicted_sd_ratios(eta * drift_noise(problem, theta, fl.SchemeI(3), None)[0], None, cov, 1.0)
    drawn = predicted_sd_ratios(eta * drift_noise(problem, theta, _Drawn(), None)[0], None, cov, 1.0)
    # 4,096 drawn weight vectors: the covariance's relative standard error is about sqrt(2 / 4096) = 2.2 %
    assert np.allclose(drawn**2 - 1, closed**2 - 1, rtol=0.1), (drawn, closed)



def test_scheme_two_on_many_nearly_balanced_clients_is_checked_in_closed_form():
    """Scheme II on 40 nearly balanced clients, S = 8 (C(40, 8) = 7.7e7 subsets, beyond any enumeration):
    V_part at one state is the variance of the averaged drift sum_c w_c g_c over the rule's own drawn
    rounds (2^17 of them, fixed seed), each diagonal entry within 5 Monte Carlo standard errors
    (se = sd((y - mean y)^2) / sqrt(draws))."""
    n, draws = 40, 1 << 17
    u = torch.rand(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    p = 1.0 / n + 0.9 / (n - 1) * ((u - u.min()) / (u.max() - u.min()) - 0.5)
    p = p / p.sum()
    shifts = torch.randn(n, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    problem = fl.problems.QuadraticProblem(torch.eye(2, dtype=torch.float64), shifts, p)
    rule = fl.SchemeII(8)
    rule.validate(problem.weights)
    theta = torch.tensor([[0.3, -0.2]], dtype=torch.float64)
    v_part, _ = drift_noise(problem, theta, rule, None)
    g = problem.to(dtype=torch.float64).grad(theta.expand(n, 2).unsqueeze(0).clone())[0]  # (N, d)
    y = rule.weights(problem.weights.to(torch.float64), draws, torch.Generator().manual_seed(2)) @ g
    dev2 = (y - y.mean(0)) ** 2
    se = dev2.std(0) / draws ** 0.5
    assert bool(((dev2.mean(0) - v_part.diagonal()).abs() <= 5 * se).all()), (dev2.mean(0), v_part.diagonal(), se)


def test_the_warning_names_the_remedy_the_run_has_left():
    # a run that already ran a drift correction is not told to run control variates
    from fedlangevin.fald.setting_noise import SettingNoise

    plain = SettingNoise(True, (1.02, 1.3), 1.0, 0.0, True)
    corrected = SettingNoise(True, (1.02, 1.3), 1.0, 0.0, True, corrected=True)
    assert "Control variates remove most of it" in plain.message(["a", "b"])
    text = corrected.message(["a", "b"])
    assert "what the run's drift correction leaves" in text and "Control variates" not in text and "of b" in text
