"""FAHMC(..., privacy=RecordLevel(clip=C)): the sensitivity of a local step's release is the derived one
(eqs. P1-P2 of docs/fahmc.md, checked on two neighbouring datasets with the same noise), epsilon is the
Gaussian mechanism's computed independently, checkpoints keep the mechanism, and what the accounting
does not cover is refused before any work."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.fahmc import kernel as hkernel
from fedlangevin.privacy import ClientLevel, RecordLevel
from fedlangevin.privacy.hmc import equivalent_step_size
from fedlangevin.problems.custom import CustomProblem

pytest.importorskip("dp_accounting")


def _canary(sign: float, clip: float, clients: int = 2, rows: int = 4, dim: int = 2):
    """l(theta; x) = -<x, theta> (per-example gradient -x), flat prior: zeros and, in row 0 of client 0, the
    canary sign 4C e_1, whose clipped gradient is -/+ C e_1: the neighbours' clipped sums differ by exactly 2C."""
    data = [torch.zeros(rows, dim, dtype=torch.float64) for _ in range(clients)]
    data[0][0, 0] = sign * 4.0 * clip
    return CustomProblem(lambda theta, x: -(x @ theta).sum(), data, dim=dim, rowwise=True)


def _uploads(monkeypatch, problem, **kwargs):
    """Every client's upload (x_c, v_c) of one round of one chain (R, N, d each)."""
    seen = []
    original = hkernel.synchronize

    def capture(x, w):
        seen.append(x.clone())
        return original(x, w)

    monkeypatch.setattr(hkernel, "synchronize", capture)
    sampler = fl.FAHMC(problem, chains=1, seed=3, splitting="OBABO", **kwargs)
    trace = sampler.run(1, warmup=0)
    return seen[0], seen[1], trace


H, GAMMA, CLIP = 0.3, 2.0, 0.5


@pytest.mark.parametrize("privacy", [RecordLevel(clip=CLIP), ClientLevel(clip=CLIP)])
def test_one_step_moves_the_upload_by_exactly_the_derived_sensitivity(monkeypatch, privacy):
    """Two neighbouring datasets, the same seed: client 0's velocity moves by (1 + a)(h/2) D, D = 2C / p_0 at
    record level (its data term is (1/p_c)(n_c/b) times the clipped sum, full batch) and 2C at client level
    (the data term itself clipped), its position by h times that (eq. P1); client 1's upload does not move.
    Against client 0's private noise sd sqrt(tau (1 - a^2) / p_0), the shift is 1/z with z the accountant's."""
    a, p0 = math.exp(-GAMMA * H), 0.5
    args = dict(step_size=H, friction=GAMMA, privacy=privacy)
    x_in, v_in, trace = _uploads(monkeypatch, _canary(1.0, CLIP), **args)
    x_out, v_out, _ = _uploads(monkeypatch, _canary(-1.0, CLIP), **args)
    shift = 2 * CLIP / p0 if privacy.adjacency == "record" else 2 * CLIP
    dv = (v_in - v_out)[0]
    assert float(dv[0].norm()) == pytest.approx((1 + a) * H / 2 * shift, rel=1e-12)
    assert torch.equal(dv[1], torch.zeros_like(dv[1]))
    assert torch.allclose((x_in - x_out)[0], H * dv, rtol=0, atol=1e-15)
    noise_sd = math.sqrt((1 - a * a) / p0)
    z = trace.privacy(delta=1e-5).tight.noise_multiplier
    assert float(dv[0].norm()) / noise_sd == pytest.approx(1 / z, rel=1e-9)


def test_a_minibatch_step_of_an_outlier_stays_within_the_bound(monkeypatch):
    """Logistic regression, client 0's record 7 replaced by an outlier ~1e6 times the others' gradients, batch
    b = 5 of n_c = 20 rows drawn with the same seed: ||dv_0|| <= (1 + a)(h/2) (n_c / (b p_0)) 2C (eq. P2)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0).long()
    X2, y2 = X.clone(), y.clone()
    X2[7], y2[7] = 1e6 * torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64), 0
    bound = (1 + math.exp(-GAMMA * H)) * H / 2 * (20 / (5 * 0.5)) * 2 * CLIP
    largest = 0.0
    for seed in range(8):  # seeds whose batch holds record 7 move by up to the bound, the others not at all
        args = dict(step_size=H, friction=GAMMA, batch_size=5, privacy=RecordLevel(clip=CLIP))
        monkeypatch.setattr(fl.FAHMC, "_seeded", staticmethod(lambda _s, seed=seed: seed))
        _, v_in, _ = _uploads(monkeypatch, fl.problems.LogisticRegression([(X[:20], y[:20]), (X[20:], y[20:])]), **args)
        _, v_out, _ = _uploads(monkeypatch, fl.problems.LogisticRegression([(X2[:20], y2[:20]), (X2[20:], y2[20:])]),
                               **args)
        dv = float((v_in - v_out)[0, 0].norm())
        assert dv <= bound * (1 + 1e-12)
        assert torch.equal(v_in[0, 1], v_out[0, 1])
        largest = max(largest, dv)
    assert largest > 0.5 * bound  # the outlier was in some batch: the clip, not chance, bounds the move


def test_epsilon_is_the_gaussian_mechanism_of_eq_p2_computed_independently():
    """N = 1, full batch, one round of one chain: one Gaussian mechanism of mu = (1 + a)(h/2) 2C /
    sqrt(tau (1 - a^2)); epsilon at delta solves Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    h, gamma, clip, tau = 0.5, 1.0, 1.0, 1.0
    a = math.exp(-gamma * h)
    mu = (1 + a) * h / 2 * 2 * clip / math.sqrt(tau * (1 - a * a))
    exact = brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - 1e-5, 0, 50)
    trace = fl.FAHMC(_canary(1.0, clip, clients=1), step_size=h, friction=gamma, splitting="OBABO", chains=1, seed=0,
                     privacy=RecordLevel(clip=clip)).run(1, warmup=0)
    report = trace.privacy(delta=1e-5)
    assert report.epsilon == pytest.approx(exact, rel=2e-3)  # the PLD grid's pessimism is < 0.1 %
    assert report.paper is None and report.mechanism["sampler"] == "FA-HMC"
    assert "FA-HMC run" in report.summary() and "momentum refresh" in report.summary()
    assert "x 2 x 2 floats broadcast (theta and v)" in report.summary()


def test_epsilon_is_fald_accountants_at_the_equivalent_step_size():
    """Minibatches, K = 2, scheme II, 2 chains: the report equals tight_epsilon at eta_eq = h^2 (1 + a) /
    (2 (1 - a)) (eq. P3, written here from a, not from tanh), batch fraction b / n_c, p_min = 1/4."""
    from fedlangevin.privacy import tight_epsilon

    problem = fl.problems.GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=20, seed=0)
    h, gamma = 0.05, 3.0
    sampler = fl.FAHMC(problem, step_size=h, friction=gamma, splitting="OBABO", local_steps=2, chains=2, seed=0,
                       batch_size=5, participation=fl.SchemeII(2), check_local_bias=False,
                       privacy=RecordLevel(clip=1.0))
    report = sampler.run(5, warmup=0).privacy(delta=1e-5)
    a = math.exp(-gamma * h)
    eta = h * h * (1 + a) / (2 * (1 - a))
    # the calibrated scheme-II noise q_c = E[w_c^2] / p_c = (S / N)(1 / S^2) / (1 / N) = 1/2 (SchemeII(2) of 4
    # equal clients): the record-level z^2 ~ gamma^2 p_c^2 / q_c, i.e. p_min = p^2 / q in tight_epsilon's terms
    q = 0.5
    calibrated = tight_epsilon(eta=eta, gamma=0.25, sensitivity=2.0, p_min=0.25 ** 2 / q, num_clients=4,
                               num_sampled=2, local_steps=2, iterations=2 * 10, scheme="II", delta=1e-5)
    assert report.mechanism["calibrated"] and report.epsilon == pytest.approx(calibrated, rel=1e-9)


def test_equivalent_step_size_limits_and_monotonicity():
    h = np.geomspace(1e-3, 3.0, 50)
    eq = equivalent_step_size(h, 1.0)
    assert np.all(np.diff(eq) > 0)
    assert equivalent_step_size(0.2, 1e4) == pytest.approx(0.2**2 / 2, rel=1e-12)    # a = 0: FA-LD's eta = h^2/2
    assert equivalent_step_size(1e-3, 1e-3) == pytest.approx(1e-3 / 1e-3, rel=1e-6)  # small gamma h: h / gamma
    a = math.exp(-0.7 * 0.4)
    assert equivalent_step_size(0.4, 0.7) == pytest.approx(0.16 * (1 + a) / (2 * (1 - a)), rel=1e-12)
    for bad in (0.0, -1.0, float("nan"), "0.1"):
        with pytest.raises(ValueError, match="step_size"):
            equivalent_step_size(bad, 1.0)
    with pytest.raises(ValueError, match="friction"):
        equivalent_step_size(0.1, 0.0)
    with pytest.raises(ValueError, match="step_size"):
        equivalent_step_size([0.1, -0.1], 1.0)


def test_a_preconditioned_run_scales_the_sensitivity_by_the_root_of_its_largest_eigenvalue():
    problem = fl.problems.GaussianSimulation(num_clients=2, alpha=1.0, samples_per_client=10, seed=0)
    common = dict(step_size=0.2, friction=1.0, splitting="OBABO", chains=1, seed=0, privacy=RecordLevel(clip=1.0))
    plain = fl.FAHMC(problem, **common).run(5, warmup=0).privacy(delta=1e-5)
    scaled = fl.FAHMC(problem, preconditioner=[4.0, 1.0], **common).run(5, warmup=0)
    assert scaled.settings.preconditioner_norm == pytest.approx(4.0)
    z = scaled.privacy(delta=1e-5).tight.noise_multiplier
    assert z == pytest.approx(plain.tight.noise_multiplier / 2, rel=1e-12)


def test_a_checkpoint_keeps_the_mechanism_and_the_whole_life_is_accounted(tmp_path):
    problem = fl.problems.GaussianSimulation(num_clients=2, alpha=1.0, samples_per_client=10, seed=0)
    common = dict(step_size=0.2, friction=1.5, splitting="OBABO", chains=2, seed=4, batch_size=3,
                  privacy=ClientLevel(clip=2.0))
    whole = fl.FAHMC(problem, **common).run(30, warmup=0)
    path = tmp_path / "run.ckpt"
    fl.FAHMC(problem, **common).run(10, warmup=0, checkpoint=path)
    resumed = fl.FAHMC.resume(path, problem=problem)
    assert resumed.privacy == ClientLevel(clip=2.0)
    later = resumed.run(20, warmup=0)
    assert torch.equal(later.samples[:, -1], whole.samples[:, -1])  # the clipped kernel, bit for bit
    assert later.privacy(delta=1e-5).epsilon == pytest.approx(whole.privacy(delta=1e-5).epsilon, rel=1e-12)
    with pytest.raises(ValueError, match="private run"):
        fl.FAHMC.resume(path, problem=problem, step_size="auto")


@pytest.mark.parametrize("kwargs,match", [
    (dict(step_size=0.1, splitting="BAOAB"), "splitting='BAOAB'.*needs splitting='OBABO'"),
    (dict(step_size="auto", splitting="OBABO"), "privacy: step_size='auto'"),
    (dict(step_size=fl.AutoStep(0.8), splitting="OBABO"), "privacy: step_size="),
    (dict(step_size=0.1, splitting="OBABO", local_steps="auto"), "privacy: local_steps='auto'"),
    (dict(step_size=0.1, splitting="OBABO", init="map"), "privacy: init='map' searches the mode with noiseless"),
    (dict(step_size=0.1, splitting="OBABO", local_steps=3), "check_local_bias=False"),
    (dict(step_size=0.1, splitting="OBABO", privacy=RecordLevel(epsilon=2.0, delta=1e-5)), "a budgeted run plans its step size"),
    (dict(step_size=0.1, splitting="OBABO", privacy="record"), "privacy must be"),
    (dict(step_size=0.1, splitting="OBABO", privacy=RecordLevel), "privacy must be"),
])
def test_what_the_accounting_does_not_cover_is_refused_before_any_work(kwargs, match):
    problem = fl.problems.GaussianSimulation(num_clients=2, alpha=1.0, samples_per_client=10, seed=0)
    kwargs = {"privacy": RecordLevel(clip=1.0), **kwargs}
    with pytest.raises(ValueError, match=match):
        fl.FAHMC(problem, chains=2, **kwargs)


def test_a_clip_out_of_range_is_refused_naming_clip():
    for clip in (0.0, -1.0, float("inf"), "1"):
        with pytest.raises(ValueError, match="clip"):
            RecordLevel(clip=clip)


def test_a_transport_is_refused_in_a_private_run():
    from fedlangevin.privacy.mechanism import RecordLevel as Record
    from fedlangevin.fahmc.private import check_private

    problem = fl.problems.GaussianSimulation(num_clients=2, alpha=1.0, samples_per_client=10, seed=0)
    with pytest.raises(ValueError, match="transport"):
        check_private(problem, Record(clip=1.0), step_size=0.1, local_steps=1, auto_local_steps=False,
                      splitting="OBABO", transport=object(), check_local_bias=True)
