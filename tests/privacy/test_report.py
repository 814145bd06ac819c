"""trace.privacy(...): what an FA-LD run spent, read from the run's own settings."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import binom, norm

import fedlangevin as fl
from fedlangevin.federation.noise import noise_scales
from fedlangevin.federation.participation import as_participation
from fedlangevin.privacy.accountant import client_account
from fedlangevin.privacy import ClientLevel, RecordLevel, paper_bound, paper_delta_split, tight_epsilon


@pytest.fixture(scope="module")
def problem():
    return fl.problems.GaussianSimulation(num_clients=10, samples_per_client=20, seed=0)


def _run(problem, **kw):
    args = dict(step_size=1e-6, local_steps=5, chains=2, seed=0)
    args.update(kw)
    return fl.FALD(problem, **args).run(20)


@pytest.mark.parametrize("privacy, advice", [(RecordLevel(clip=1e-320), "a larger clip"),
                                             (ClientLevel(clip=1e-320), "a larger clip"),
                                             (RecordLevel(clip=1e300), "a smaller clip")], ids=["record", "client", "huge"])
def test_a_clip_beyond_the_accountants_range_is_named(problem, privacy, advice):
    """clip = 1e-320 (noise multiplier ~1e321) was refused naming "sensitivity", which a private run refuses to be
    given: the run's clip is what sets it."""
    trace = _run(problem, batch_size=2, privacy=privacy)
    with pytest.raises(ValueError, match=re.escape(f"clip: the run's clip C = {privacy.clip:g} ") + f".*{advice}") as err:
        trace.privacy(delta=1e-5)
    assert "larger sensitivity" not in str(err.value) and "smaller sensitivity" not in str(err.value)


def test_report_matches_the_accountants_on_the_run_settings(problem):
    # a private run: per-example gradients clipped to 0.5, so the sensitivity 2 x 0.5 = 1 is derived
    trace = _run(problem, participation=fl.SchemeII(4, noise="paper"), batch_size=2,  # gamma = 2 / 20
                 privacy=fl.privacy.RecordLevel(clip=0.5))
    report = trace.privacy(delta=1e-5)
    mech = dict(tau=1.0, rho=0.0, gamma=0.1, sensitivity=1.0, p_min=0.1, num_clients=10, num_sampled=4,
                local_steps=5, scheme="II")
    # two chains released: two runs of T = 100 steps composed = 200 steps
    expected = tight_epsilon(eta=1e-6, iterations=200, delta=1e-5, **mech)
    assert report.epsilon == pytest.approx(expected, rel=1e-12)
    d0, d1, d2 = paper_delta_split(1e-5, gamma=0.1, num_clients=10, num_sampled=4, local_steps=5, iterations=200)
    paper = paper_bound(eta=1e-6, iterations=200, delta0=d0, delta1=d1, delta2=d2, **mech)
    assert report.paper.epsilon == pytest.approx(paper.epsilon, rel=1e-12)
    assert report.paper.delta == pytest.approx(1e-5, rel=1e-12)
    assert report.tight.lower_epsilon <= report.epsilon <= report.tight.rdp_epsilon
    assert any("2 chains" in n for n in report.notes) and any("without replacement" in n for n in report.notes)
    one = trace.privacy(delta=1e-5, chains=1)
    assert one.epsilon < report.epsilon
    text = report.summary()
    assert "tight accountant" in text and "paper" in text
    assert "sensitivity = 1 (derived: 2 x clip 0.5" in text


def test_a_private_run_derives_the_sensitivity_and_refuses_a_typed_one(problem):
    trace = _run(problem, batch_size=2, privacy=fl.privacy.RecordLevel(clip=0.5))
    with pytest.raises(ValueError, match="sensitivity: the run's mechanism RecordLevel.clip=0.5. derives it"):
        trace.privacy(delta=1e-5, sensitivity=1.0)
    client = _run(problem, privacy=fl.privacy.ClientLevel(clip=0.5))
    with pytest.raises(ValueError, match="sensitivity: the run's mechanism ClientLevel.clip=0.5. derives it"):
        client.privacy(delta=1e-5, sensitivity=1.0)
    report = client.privacy(delta=1e-5)
    assert report.mechanism["sensitivity"] == 1.0 and report.mechanism["adjacency"] == "client"
    assert report.paper is None  # Thm 6.1/G.3 is record-level
    with pytest.raises(ValueError, match="delta0, delta1, delta2 are the paper's deltas"):
        client.privacy(delta=1e-5, delta0=1e-6, delta1=1e-6, delta2=1e-6)


def test_a_run_without_privacy_has_an_assumed_sensitivity_and_no_epsilon_for_minibatches_with_replacement(problem):
    report = _run(problem, chains=1).privacy(delta=1e-5, sensitivity=1.0)
    assert "sensitivity = 1 (assumed, not enforced)" in report.summary()
    with pytest.raises(ValueError, match="sensitivity: this run clipped nothing"):
        _run(problem, chains=1).privacy(delta=1e-5)
    with pytest.raises(ValueError, match="drew its minibatches with replacement"):
        _run(problem, chains=1, batch_size=2).privacy(delta=1e-5, sensitivity=1.0)


def test_full_participation_and_full_batch(problem):
    trace = _run(problem, chains=1)
    report = trace.privacy(delta=1e-5, sensitivity=0.5)
    assert report.tight.q == 1.0 and report.tight.gamma == 1.0
    expected = tight_epsilon(eta=1e-6, gamma=1.0, sensitivity=0.5, p_min=0.1, num_clients=10, num_sampled=10,
                             local_steps=5, iterations=100, delta=1e-5)
    assert report.epsilon == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("rule", [fl.SchemeII(4), fl.SchemeI(3)])
def test_calibrated_participation_is_accounted_with_the_noise_it_ran(problem, rule):
    """The calibrated rule's private noise has variance 2 eta tau (1 - rho^2) / q_c (q_c = E[w_c^2] /
    p_c, the engine's own scales): a Gaussian mechanism of noise multiplier sigma_c gamma p_c /
    (eta Delta), i.e. the accountant's with p_c^2 / q_c in place of p_c (balanced clients p_c = 0.1:
    0.1^2 S for scheme II, 0.1^2 S / (1 + (S - 1) 0.1) for scheme I). The paper's bound, which
    assumes eq. 10's noise, is not reported, and the summary says why."""
    trace = _run(problem, participation=rule, batch_size=2, privacy=fl.privacy.RecordLevel(clip=0.5))
    report = trace.privacy(delta=1e-5)
    q = float(rule.noise_weights(problem.weights)[0])
    sigma = math.sqrt(1e-6) * float(noise_scales(rule.noise_weights(problem.weights), 1.0, 0.0).private[0])
    assert sigma * 0.1 * 0.1 / (1e-6 * 1.0) == pytest.approx(  # z_c from the engine's scale, gamma = 0.1, Delta = 1
        (0.1 / 1.0) * math.sqrt(2 * (0.1**2 / q) / 1e-6), rel=1e-12)
    expected = tight_epsilon(eta=1e-6, iterations=200, delta=1e-5, tau=1.0, rho=0.0, gamma=0.1, sensitivity=1.0,
                             p_min=0.1**2 / q, num_clients=10, num_sampled=rule.num_sampled, local_steps=5,
                             scheme=rule.scheme, inclusion_probability=None)
    assert report.epsilon == pytest.approx(expected, rel=1e-12)
    paper_noise = _run(problem, participation=dataclasses.replace(rule, noise="paper"), batch_size=2,
                       privacy=fl.privacy.RecordLevel(clip=0.5)).privacy(delta=1e-5)
    assert report.epsilon > paper_noise.epsilon  # less private noise than eq. 10's (q_c > p_c): more spent
    assert report.paper is None and any("calibrated" in n for n in report.notes)
    assert "assumes eq. 10's private noise" in report.summary()


@pytest.mark.filterwarnings("ignore:SchemeII assumes balanced")  # allow_unbalanced=True: the plain mean on purpose
def test_scheme_two_on_nearly_balanced_clients_is_accounted_with_the_noise_it_ran():
    """Clients of 19 and 20 records: SchemeII(4)'s nearly balanced weights have their own E[w_c^2], so the
    run's private noise is 2 eta tau / q_c with their q_c, and the report's tight accountant uses the
    largest of those q (the least noise); allow_unbalanced=True ran the
    plain mean's q and is accounted with that one (client level: z at q_max, the run's noise). The two
    differ (0.00772 against 0.00772 + 2e-6), so the report reads which weights the run drew."""
    sizes = [19, 20] * 5
    problem = fl.problems.GaussianSimulation(num_clients=10, samples_per_client=sizes, seed=0)
    eps = {}
    for rule in (fl.SchemeII(4), fl.SchemeII(4, allow_unbalanced=True)):
        trace = _run(problem, participation=rule, privacy=fl.privacy.ClientLevel(clip=0.5))
        q = rule.noise_weights(problem.weights).double()
        # sensitivity 2C = 1; iterations as the report counts them (the other tests' 200 for 20 rounds of K = 5)
        expected = client_account(eta=1e-6, tau=1.0, rho=0.0, sensitivity=1.0, p_max=float(q.max()), num_clients=10,
                                  num_sampled=4, local_steps=5, iterations=200, scheme="II", delta=1e-5)
        eps[rule.allow_unbalanced] = trace.privacy(delta=1e-5).epsilon
        assert eps[rule.allow_unbalanced] == pytest.approx(expected.epsilon, rel=1e-12)
    assert eps[False] != eps[True]


def test_scheme_one_with_unequal_weights_is_conservative():
    problem = fl.problems.GaussianSimulation(num_clients=4, samples_per_client=[10, 20, 30, 40], seed=0)
    trace = fl.FALD(problem, step_size=1e-6, local_steps=2, participation=fl.SchemeI(2), chains=1,
                    seed=0).run(10)
    report = trace.privacy(delta=1e-5, sensitivity=1.0)
    assert report.tight.q == pytest.approx(1 - (1 - 0.4) ** 2)
    assert report.mechanism["p_min"] == pytest.approx(0.1)
    assert any("scheme I" in n for n in report.notes) and any("unequal" in n for n in report.notes)


def test_varying_step_sizes_use_the_run_schedule(problem):
    trace = fl.FALD(problem, step_size=lambda k: 2e-6 / (1 + k / 50), local_steps=5, chains=1, seed=0).run(20)
    report = trace.privacy(delta=1e-5, sensitivity=1.0)
    top = tight_epsilon(eta=2e-6, gamma=1.0, sensitivity=1.0, p_min=0.1, num_clients=10, num_sampled=10,
                        local_steps=5, iterations=100, delta=1e-5)
    assert report.epsilon < top
    assert report.paper.inputs["eta"] == pytest.approx(2e-6)
    assert any("varying step sizes" in n for n in report.notes)


def test_step_size_condition_is_checked_client_by_client():
    """Unequal sizes with minibatches: (59) needs eta <= tau gamma_c^2 p_c / (Delta^2 log(1.25/delta0))
    for every client; the binding one is the largest client (gamma_c^2 p_c = b^2 / (n_c n))."""
    problem = fl.problems.GaussianSimulation(num_clients=2, samples_per_client=[10, 90], seed=0)
    trace = fl.FALD(problem, step_size=1e-7, local_steps=1, batch_size=5, seed=0,
                    participation=fl.SchemeI(1, noise="paper"), privacy=fl.privacy.RecordLevel(clip=0.5)).run(4)
    report = trace.privacy(delta=1e-5)  # sensitivity 2 x 0.5 = 1
    d0 = report.mechanism["delta0"]
    limit = (5 / 90) ** 2 * 0.9 / math.log(1.25 / d0)
    assert report.paper.eta_max == pytest.approx(limit, rel=1e-12)
    assert report.paper.within_theorem == (1e-7 <= limit)


def test_invalid_report_arguments(problem):
    trace = _run(problem, chains=1)
    with pytest.raises(ValueError, match="sensitivity"):
        trace.privacy(delta=1e-5, sensitivity=-1.0)
    with pytest.raises(ValueError, match="delta"):
        trace.privacy(delta=1.5, sensitivity=1.0)
    with pytest.raises(ValueError, match="chains"):
        trace.privacy(delta=1e-5, sensitivity=1.0, chains=3)
    with pytest.raises(ValueError, match="rho"):
        fl.FALD(problem, step_size=1e-6, correlation=1.0, seed=0).run(2).privacy(delta=1e-5, sensitivity=1.0)
    assert np.isfinite(trace.privacy(delta=1e-5, sensitivity=1.0).epsilon)


def test_preconditioned_run_scales_the_sensitivity_by_the_root_of_lambda_max():
    """Clients step in z on A^T grad f: the sensitivity is sqrt(lambda_max(M)) times larger, so a run
    with M = diag(4, 1) and Delta = 1 spends what the plain run spends with Delta = 2."""
    problem = fl.problems.GaussianSimulation(num_clients=10, alpha=1.0, seed=0)
    pre = fl.FALD(problem, step_size=1e-4, chains=2, seed=0, preconditioner=torch.tensor([4.0, 1.0]))
    plain = fl.FALD(problem, step_size=1e-4, chains=2, seed=0)
    assert pre.settings.preconditioner_norm == 4.0 and plain.settings.preconditioner_norm == 1.0
    a = pre.run(20, progress=False).privacy(delta=1e-5, sensitivity=1.0)
    b = plain.run(20, progress=False).privacy(delta=1e-5, sensitivity=2.0)
    assert a.epsilon == b.epsilon and a.paper.epsilon == b.paper.epsilon
    assert any("sqrt(lambda_max(M))" in note for note in a.notes)


def test_adapted_run_says_what_the_adaptation_used():
    problem = fl.problems.GaussianSimulation(num_clients=10, alpha=1.0, seed=0)
    sampler = fl.FALD(problem, chains=4, seed=0)
    report = sampler.run(60, progress=False).privacy(delta=1e-5, sensitivity=1.0)
    assert sampler.settings.auto_step_size and sampler.settings.preconditioner_norm >= 1.0
    assert any("noiseless" in note for note in report.notes)


# -- client level ----------------------------------------------------------------------------------
def _gaussian_delta(mu: float, eps: float) -> float:
    """delta(eps) of the Gaussian mechanism of mu = sensitivity / sigma (Balle & Wang 2018, Thm 8)."""
    if mu == 0.0:
        return 0.0
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def _client_epsilon_closed_form(z: float, local_steps: int, rounds: int, q: float, delta: float) -> float:
    """The client-level model in closed form: each of ``rounds`` rounds touches the client with
    probability q (else its privacy loss is 0), a touched round is K Gaussian mechanisms of
    multiplier z, so given m touched rounds the loss is the Gaussian mechanism's with
    mu = sqrt(m K) / z, and delta(eps) = sum_m Binom(rounds, q; m) delta_mu(eps)."""
    m = np.arange(rounds + 1)
    weights = binom.pmf(m, rounds, q)
    mus = np.sqrt(m * local_steps) / z

    def excess(eps):
        return sum(w * _gaussian_delta(mu, eps) for w, mu in zip(weights, mus)) - delta

    return brentq(excess, 0.0, 100.0, xtol=1e-13)


UNEQUAL = dict(num_clients=5, samples_per_client=[10, 20, 30, 40, 50], seed=0)  # p_max = 50 / 150


@pytest.mark.parametrize("sizes, participation, q", [
    (UNEQUAL, None, 1.0),
    (dict(num_clients=5, samples_per_client=20, seed=0), fl.SchemeII(2), 0.4),
    (UNEQUAL, fl.SchemeI(2), 1 - (1 - 1 / 3) ** 2),  # the largest client is drawn with probability p_max = 1/3
    (dict(num_clients=5, samples_per_client=20, seed=0), fl.SchemeII(2, noise="paper"), 0.4),
    (UNEQUAL, fl.SchemeI(2, noise="paper"), 1 - (1 - 1 / 3) ** 2),
])
def test_client_level_report_equals_the_closed_form_gaussian_composition(sizes, participation, q):
    """A ClientLevel(clip=C) run: each local step moves a client's state by eta clip_C(s_c), at
    most eta 2C apart between neighbours, against the kernel's private noise of standard deviation
    sigma_c (federation/noise.py, with the participation rule's noise weights q_c: the calibrated
    rule's E[w_c^2] / p_c or the paper's p_c): z = min_c sigma_c / (eta 2C); minibatches
    (b = 5) give no amplification. The report equals the closed form to 1e-4 relative (its
    pessimistic PLD is above the exact value, by the grid error the accountant's own Gaussian
    anchor also bounds by 1e-4), the lower bound is below it and RDP above."""
    problem = fl.problems.GaussianSimulation(**sizes)
    eta, rho, clip, k = 2e-4, 0.3, 20.0, 4
    trace = fl.FALD(problem, step_size=eta, local_steps=k, chains=2, seed=0, batch_size=5, correlation=rho,
                    participation=participation, privacy=ClientLevel(clip=clip)).run(10)
    report = trace.privacy(delta=1e-5)
    rule = as_participation(participation)
    sigma = math.sqrt(eta) * noise_scales(rule.noise_weights(problem.weights), 1.0, rho).private.squeeze(1)
    z = float((sigma / (eta * 2 * clip)).min())
    assert report.tight.noise_multiplier == pytest.approx(z, rel=1e-12)
    assert report.tight.gamma == 1.0 and report.tight.q == pytest.approx(q, rel=1e-12)
    exact = _client_epsilon_closed_form(z, k, 2 * 10, q, 1e-5)  # 2 chains x 10 rounds, composed
    assert exact * (1 - 1e-9) <= report.epsilon <= exact * (1 + 1e-4)
    assert report.tight.lower_epsilon <= exact * (1 + 1e-9) <= report.tight.rdp_epsilon
    assert report.paper is None and report.mechanism["delta0"] is None


def test_client_level_epsilon_moves_the_right_way_with_clip_eta_rho_and_s():
    """epsilon grows with the clip (sensitivity 2C), the step size (z ~ 1/sqrt(eta)), the
    correlation (less private noise) and S (inclusion S/N); it does not depend on the batch size
    (no minibatch amplification at client level). The paper's noise (eq. 10), so that S changes
    only the inclusion probability."""
    problem = fl.problems.GaussianSimulation(num_clients=5, samples_per_client=20, seed=0)

    def eps(clip=20.0, eta=2e-4, rho=0.3, s=2, batch_size=5):
        trace = fl.FALD(problem, step_size=eta, local_steps=4, chains=1, seed=0, batch_size=batch_size,
                        correlation=rho, participation=fl.SchemeII(s, noise="paper"),
                        privacy=ClientLevel(clip=clip)).run(10)
        return trace.privacy(delta=1e-5).epsilon

    base = eps()
    assert eps(clip=40.0) > base > eps(clip=10.0)
    assert eps(eta=4e-4) > base > eps(eta=1e-4)
    assert eps(rho=0.6) > base > eps(rho=0.0)
    assert eps(s=3) > base > eps(s=1)
    assert eps(batch_size=None) == base == eps(batch_size=1)


# -- the summary -------------------------------------------------------------------------------------
@pytest.mark.parametrize("privacy", [None, RecordLevel(clip=0.5), ClientLevel(clip=0.5)])
def test_summary_states_adjacency_threat_model_sampling_release_and_the_four_epsilons(problem, privacy):
    kw = dict(participation=fl.SchemeII(4, noise="paper"), chains=2, check_local_bias=False)  # accountable: no companions
    if privacy is not None:
        kw.update(batch_size=2, privacy=privacy)
    trace = fl.FALD(problem, step_size=1e-6, local_steps=5, seed=0, **kw).run(20, warmup=10)
    report = trace.privacy(delta=1e-5, **({} if privacy else dict(sensitivity=1.0)))
    lines = report.summary().splitlines()
    heads = [line.split(":")[0] for line in lines]
    assert heads[:7] == ["FA-LD run", "adjacency", "threat model", "sampling", "released", "tight accountant (PLD)",
                         "paper (Thm 6.1/G.3)"]
    first, adjacency, threat, sampling, released, tight, paper = lines[:7]
    if privacy is None:
        assert first.endswith("sensitivity = 1 (assumed, not enforced)")
        assert adjacency.startswith("adjacency: not enforced")
        assert sampling.startswith("sampling: full batches")
    else:
        assert "sensitivity = 1 (derived: 2 x clip 0.5" in first
        level = "record level, one record of one client substituted" if privacy.adjacency == "record" else \
            "client level, one client's whole data replaced"
        assert adjacency.startswith(f"adjacency: {level}") and "clipped to C = 0.5 in every local step" in adjacency
        assert "b = 2 rows drawn uniformly without replacement in every local step, as the run drew them" in sampling
        assert ("no amplification at client level" in sampling) == (privacy.adjacency == "client")
    assert "scheme II" in sampling and "S = 4 of N = 10 drawn uniformly without replacement" in sampling
    assert "the server sees every upload" in threat and "the shared noise of rho > 0 is public" in threat
    # 20 rounds (10 of them warm-up) x 2 chains x d = 2
    assert released.startswith("released: 20 rounds x 2 chain(s) x 2 floats broadcast (warm-up rounds included")
    t = report.tight
    assert f"epsilon = {t.epsilon:.4g} at delta = 1e-05" in tight
    assert f"RDP: {t.rdp_epsilon:.4g}" in tight and f"lower bound: {t.lower_epsilon:.4g}" in tight
    if privacy is not None and privacy.adjacency == "client":
        assert report.paper is None and "does not apply" in paper and "client-level" in paper
    else:
        assert f"epsilon = {report.paper.epsilon_formula:.4g}" in paper


def test_the_adapted_note_says_post_processing_for_a_private_run_and_noiseless_queries_otherwise(problem):
    """Settings built by hand: the same run marked adapted, with and without privacy."""
    trace = _run(problem, chains=1, privacy=RecordLevel(clip=0.5))
    adapted = dataclasses.replace(trace.settings, auto_step_size=True, adapt=True)
    notes = dataclasses.replace(trace, settings=adapted).privacy(delta=1e-5).notes
    assert any("adapted from the broadcast iterates only (post-processing of released values; no noiseless query"
               in n for n in notes), notes
    assert not any("noiseless client Hessian-vector products" in n for n in notes)
    plain = dataclasses.replace(adapted, privacy="none", adjacency="", clip=None)
    notes = dataclasses.replace(trace, settings=plain).privacy(delta=1e-5, sensitivity=1.0).notes
    assert any("noiseless client Hessian-vector products, outside the accounted mechanism" in n for n in notes)
    assert not any("post-processing of released values" in n for n in notes)
