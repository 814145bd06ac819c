"""trace.privacy(...): what an FA-LD run spent, read from the run's own settings."""

from __future__ import annotations

import math

import numpy as np
import pytest

import torch

import fedlangevin as fl
from fedlangevin.privacy import paper_bound, paper_delta_split, tight_epsilon


@pytest.fixture(scope="module")
def problem():
    return fl.problems.GaussianSimulation(num_clients=10, samples_per_client=20, seed=0)


def _run(problem, **kw):
    args = dict(step_size=1e-6, local_steps=5, chains=2, seed=0)
    args.update(kw)
    return fl.FALD(problem, **args).run(20)


def test_report_matches_the_accountants_on_the_run_settings(problem):
    # a private run: per-example gradients clipped to 0.5, so the sensitivity 2 x 0.5 = 1 is derived
    trace = _run(problem, participation=fl.SchemeII(4), batch_size=2,  # gamma = 2 / 20
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
    with pytest.raises(ValueError, match="client-level, whose accounting is not built yet"):
        client.privacy(delta=1e-5)


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


def test_scheme_one_with_unequal_weights_is_conservative():
    problem = fl.problems.GaussianSimulation(num_clients=4, samples_per_client=[10, 20, 30, 40], seed=0)
    trace = fl.FALD(problem, step_size=1e-6, local_steps=2, participation=fl.SchemeI(2), seed=0).run(10)
    report = trace.privacy(delta=1e-5, sensitivity=1.0)
    assert report.tight.q == pytest.approx(1 - (1 - 0.4) ** 2)
    assert report.mechanism["p_min"] == pytest.approx(0.1)
    assert any("scheme I" in n for n in report.notes) and any("unequal" in n for n in report.notes)


def test_varying_step_sizes_use_the_run_schedule(problem):
    trace = fl.FALD(problem, step_size=lambda k: 2e-6 / (1 + k / 50), local_steps=5, seed=0).run(20)
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
                    participation=fl.SchemeI(1), privacy=fl.privacy.RecordLevel(clip=0.5)).run(4)
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
