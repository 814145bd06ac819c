"""Drift corrections (fedlangevin.corrections.drift and the three correction modules): switched off they
are FA-LD bit for bit, they checkpoint and resume bit for bit, their communication is counted
exactly, K = 1 is SGLD's round, bad settings are refused before any work."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.compression import QuantizedUpdateUpload
from fedlangevin.corrections.conducive import Conducive, Surrogates
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.fald.engine import build
from fedlangevin.corrections.qlsd import QLSDPlusPlus
from fedlangevin.problems import CurvatureSimulation

VARIANTS = ["control_variates", "conducive", "qlsd++"]


def _problem():
    return CurvatureSimulation(num_clients=6, alpha=100.0, curvature_spread=1.5, samples_per_client=5)


def _logistic(n_clients=3):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(90, 4, generator=g, dtype=torch.float64)
    y = (X[:, 0] + 0.5 * torch.randn(90, generator=g, dtype=torch.float64) > 0).long() + (X[:, 1] > 1).long()
    order = torch.argsort(y, stable=True)  # label skew: clients see different classes
    X, y = X[order], y[order]
    cut = np.linspace(0, 90, n_clients + 1).astype(int)
    return fl.problems.LogisticRegression([(X[a:b], y[a:b]) for a, b in zip(cut[:-1], cut[1:])])


def _off(name, problem):
    n, d = problem.num_clients, problem.dim
    z = torch.zeros
    return {"control_variates": ControlVariates(strength=0.0),
            "conducive": Conducive(surrogates=Surrogates(z(d), z(n, d), z(n, d, d))),
            "qlsd++": QLSDPlusPlus(memory_rate=0.0)}[name]


@pytest.mark.parametrize("name", VARIANTS)
def test_switched_off_correction_is_fald_bit_for_bit(name):
    problem = _problem()
    kw = dict(step_size=1e-4, local_steps=5, chains=7, seed=3)
    base = fl.FALD(problem, **kw).run(rounds=12).samples
    off = fl.FALD(problem, correction=_off(name, problem), **kw)
    assert torch.equal(off.run(rounds=12).samples, base)
    assert off.settings.correction == repr(_off(name, problem))


@pytest.mark.parametrize("name, codec", [(v, False) for v in VARIANTS] + [("qlsd++", True)])
def test_zero_terms_through_the_correction_path_are_the_reference_kernel_bit_for_bit(name, codec):
    """The kernel with the correction computed (zero terms, memories, codec draws) against the
    plain kernel's reference path (kernel="gradient": eq. 10 as written once)."""
    problem = _problem()
    upload = QuantizedUpdateUpload(6) if codec else None

    def run(**kw):
        kernel = build(problem, upload=upload, **kw)
        g = torch.Generator().manual_seed(5)
        state = kernel.init(torch.zeros(9, problem.dim, dtype=torch.float64))
        for _ in range(8):
            state, _ = kernel.step(state, [1e-4] * 4, g)
        return state.theta

    built = _off(name, problem).build(problem, dtype=torch.float64, device="cpu", upload=upload)
    assert torch.equal(run(kernel="gradient", correction=built), run(kernel="gradient"))


@pytest.mark.parametrize("name", ["control_variates", "conducive"])
def test_k1_is_the_sgld_round_up_to_rounding(name):
    """With K = 1 and full participation the constant terms sum to zero over clients (sum_c p_c
    c_c = 0), so the round is SGLD's; conducive terms (Hbar - H_c)(theta - theta*) sum to zero too."""
    problem = _problem()
    kw = dict(step_size=2e-4, local_steps=1, chains=5, seed=8)
    base = fl.FALD(problem, **kw).run(rounds=30).samples
    fixed = fl.FALD(problem, correction=name, **kw).run(rounds=30).samples
    assert torch.allclose(fixed, base, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("logistic", [False, True])
def test_checkpoint_resume_is_bit_for_bit(name, logistic, tmp_path):
    problem = _logistic() if logistic else _problem()
    eta = 1e-3 if logistic else 1e-4
    kw = dict(step_size=eta, local_steps=4, chains=5, seed=21, correction=name)
    whole = fl.FALD(problem, **kw).run(rounds=20).samples
    first = fl.FALD(problem, **kw)
    part1 = first.run(rounds=8, checkpoint=tmp_path / "c.pt").samples
    resumed = fl.FALD.resume(tmp_path / "c.pt")
    assert resumed.settings.correction == first.settings.correction
    for key, value in first.state.correction.items():
        assert torch.equal(resumed.state.correction[key], value)
    part2 = resumed.run(rounds=12).samples
    assert torch.equal(torch.cat([part1, part2], dim=1), whole)


def test_resume_with_given_surrogates(tmp_path):
    problem = _problem()
    n, d = problem.num_clients, problem.dim
    g = torch.Generator().manual_seed(1)
    sur = Surrogates(torch.zeros(d), torch.randn(n, d, generator=g), torch.rand(n, d, generator=g) * 100)
    kw = dict(step_size=1e-4, local_steps=3, chains=4, seed=2, correction=Conducive(surrogates=sur))
    whole = fl.FALD(problem, **kw).run(rounds=10).samples
    a = fl.FALD(problem, **kw).run(rounds=4, checkpoint=tmp_path / "s.pt").samples
    b = fl.FALD.resume(tmp_path / "s.pt").run(rounds=6).samples
    assert torch.equal(torch.cat([a, b], 1), whole)


def test_communication_is_counted_exactly():
    problem = _problem()
    n, d, rounds = problem.num_clients, problem.dim, 7
    plain = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=2, seed=0, check_local_bias=False)  # no companions
    plain.run(rounds)
    ref = torch.zeros(d, dtype=torch.float64)
    cv = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=2, seed=0,
                 correction=ControlVariates(reference=ref))
    trace = cv.run(rounds)
    # given reference: broadcast theta* (N d down), each client's grad f^c(theta*) up (N d), grad f(theta*) down (N d)
    assert cv.communication.floats_up == plain.communication.floats_up + n * d
    assert cv.communication.floats_down == plain.communication.floats_down + 2 * n * d
    assert trace.communication.rounds == rounds
    found = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=2, seed=0, correction="conducive")
    found.run(rounds)
    assert found.ledger["correction_rounds"] >= 1  # the federated mode search's rounds are on the ledger
    q = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=2, seed=0, correction="qlsd++")
    tq = q.run(rounds)
    # per round: each upload carries d more floats (the memory difference), hbar goes to every client
    assert tq.communication.floats_up == 2 * plain.communication.floats_up
    assert tq.communication.floats_down == 2 * plain.communication.floats_down


@pytest.mark.parametrize("name", ["control_variates", "conducive"])
def test_init_map_mode_is_the_reference_without_a_second_search(name):
    """With init="map" the correction takes the mode the run found as theta*: no search rounds on
    its ledger, and the draws of a run given that mode as its reference."""
    problem = _logistic()
    kw = dict(step_size=1e-3, local_steps=3, chains=2, seed=0, init="map")
    found = fl.FALD(problem, correction=name, **kw)
    a = found.run(5, progress=False)
    given = ControlVariates(reference=found.map_result.theta) if name == "control_variates" else \
        Conducive(reference=found.map_result.theta)
    b = fl.FALD(problem, correction=given, **kw).run(5, progress=False)
    assert found.map_result.rounds >= 1 and found.ledger["correction_rounds"] == 0
    np.testing.assert_array_equal(np.asarray(a.samples), np.asarray(b.samples))


def test_qlsd_memories_update_only_for_participating_clients():
    problem = _problem()
    sampler = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=3, seed=4, correction="qlsd++",
                      participation=fl.SchemeII(2))
    sampler.run(1)
    moved = (sampler.state.correction["memory"].abs().sum(-1) > 0).sum(-1)
    assert moved.tolist() == [2, 2, 2]
    p = problem.weights.double()
    mean = torch.einsum("n,rnd->rd", p, sampler.state.correction["memory"])
    assert torch.allclose(sampler.state.correction["mean"], mean)


def test_dropped_chains_drop_their_memories():
    problem = _problem()
    init = torch.zeros(4, problem.dim, dtype=torch.float64)
    init[2] = 1e306  # this chain's gradient A theta overflows in the first round
    sampler = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=4, seed=4, correction="qlsd++", init=init)
    with pytest.warns(RuntimeWarning, match="diverged"):
        trace = sampler.run(5, on_divergence="drop")
    assert trace.samples.shape[0] == 3
    assert sampler.state.correction["memory"].shape[0] == 3
    assert torch.isfinite(sampler.state.correction["memory"]).all()


def test_corrections_fix_the_label_skew_logistic_drift_direction():
    """A smoke check of the d > 100 path (L-BFGS reference search, diagonal curvature) on a
    label-skewed logistic regression: every correction runs and stays finite."""
    problem = _logistic(4)
    for name in VARIANTS:
        trace = fl.FALD(problem, step_size=1e-3, local_steps=5, chains=3, seed=1, correction=name).run(10)
        assert torch.isfinite(trace.samples).all()


@pytest.mark.parametrize("bad, match", [
    ("scaffold", "correction must be None"),
    (ControlVariates, "correction must be None"),
    (3, "correction must be None"),
])
def test_bad_correction_names_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        fl.FALD(_problem(), step_size=1e-4, correction=bad)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match=r"strength must be a finite real number in \[0, 1\]"):
        ControlVariates(strength=1.5)
    with pytest.raises(ValueError, match=r"memory_rate must be a finite real number in \[0, 1\]"):
        QLSDPlusPlus(memory_rate=-0.1)
    with pytest.raises(ValueError, match="curvature must be"):
        Conducive(curvature="full")
    with pytest.raises(ValueError, match="reference must be a finite vector of shape"):
        fl.FALD(_problem(), step_size=1e-4, correction=ControlVariates(reference=[1.0, 2.0, 3.0])).run(1)
    with pytest.raises(ValueError, match="streams='single'"):
        fl.FALD(_problem(), step_size=1e-4, correction="qlsd++", streams="per_client")
    with pytest.raises(ValueError, match="one process"):
        build(_problem(), correction=QLSDPlusPlus(), transport=fl.fald.InProcessGroup([[0, 1, 2], [3, 4, 5]]).transports[0])


@pytest.mark.parametrize("name", VARIANTS)
def test_privacy_accounting_refuses_what_a_correction_releases(name):
    problem = _problem()
    trace = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=2, seed=0, correction=name).run(3)
    assert trace.settings.correction_releases
    with pytest.raises(ValueError, match="no sound accounting"):
        trace.privacy(delta=1e-5, sensitivity=1.0)
    off = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=2, seed=0, correction=_off(name, problem)).run(3)
    assert off.settings.correction_releases == ""
    plain = fl.FALD(problem, step_size=1e-4, local_steps=2, chains=2, seed=0, check_local_bias=False).run(3)
    assert off.privacy(delta=1e-5, sensitivity=1.0).epsilon == plain.privacy(delta=1e-5, sensitivity=1.0).epsilon


def test_a_control_variates_record_without_minibatches_resumes_plain():
    from fedlangevin.corrections.drift import correction_from_record

    old = {"kind": "control_variates", "reference": None, "strength": 1.0, "search_rounds": 50}
    assert correction_from_record(old).minibatches is False
    assert correction_from_record(fl.ControlVariates().record()).minibatches is True


# -- correction="auto": what it runs and why (fedlangevin.corrections.drift.auto_choice) ---------------------------
def _auto(problem=None, **setting):
    from fedlangevin.corrections.drift import auto_choice
    from fedlangevin.problems import GaussianSimulation

    problem = problem or GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=12, seed=1)
    base = dict(private=False, participation=fl.Full(), batch_size=None, local_steps=1, one_process=True)
    return auto_choice(problem, **{**base, **setting})


@pytest.mark.parametrize("setting, runs, why", [
    (dict(), False, "every client and full-batch gradients"),
    (dict(participation=fl.SchemeI(2)), True, "random participation or minibatches"),
    (dict(batch_size=3), True, "random participation or minibatches"),
    (dict(participation=fl.SchemeII(2, noise="paper")), False, "noise='paper'"),
    (dict(batch_size=3, private=True), False, "a private run"),
    (dict(batch_size=3, one_process=False), False, "corrections run in one process"),
    (dict(batch_size=3, local_steps=5), False, "local_steps=5"),
    (dict(batch_size=3, local_steps="auto"), False, "local_steps='auto'"),
])
def test_auto_runs_control_variates_only_where_they_remove_noise_and_can_run(setting, runs, why):
    chosen, reason = _auto(**setting)
    assert isinstance(chosen, fl.ControlVariates) if runs else chosen is None
    assert why in reason


def test_auto_needs_a_reference_search_above_the_dense_limit():
    # d > DENSE_MAX_DIM: the L-BFGS search needs the problem's energy; without one (and without init="map") none
    from fedlangevin.problems import QuadraticProblem
    from tests.targets import OpaqueProblem

    d = 101
    quad = QuadraticProblem(torch.eye(d, dtype=torch.float64), torch.zeros(3, d, dtype=torch.float64), [0.5, 0.3, 0.2])
    assert isinstance(_auto(quad, participation=fl.SchemeI(2))[0], fl.ControlVariates)
    opaque = OpaqueProblem(quad)
    chosen, reason = _auto(opaque, participation=fl.SchemeI(2))
    assert chosen is None and "no energy for the reference search" in reason
    assert isinstance(_auto(opaque, participation=fl.SchemeI(2), init="map")[0], fl.ControlVariates)
