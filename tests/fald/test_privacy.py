"""FALD(..., privacy=RecordLevel(clip=C)): the sensitivity the accountant uses is enforced by the run
itself (every local step's per-example gradients clipped, minibatches of fixed size without
replacement), and a private run touches the data only through those clipped, noised steps."""

from __future__ import annotations

import math

import numpy as np

import pytest
import torch

import fedlangevin as fl
from fedlangevin.privacy import ClientLevel, RecordLevel


def _clients(outlier: bool):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0).long()
    if outlier:  # neighbouring dataset: client 0's record 7 replaced by one whose gradient is ~1e6 times the others'
        X = X.clone()
        X[7] = 1e6 * torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
        y = y.clone()
        y[7] = 0
    return [(X[:20], y[:20]), (X[20:], y[20:])]


def _uploads(privacy, outlier, batch_size=None, eta=1e-3):
    """Client states beta (R, N, d) uploaded in one round of one chain from seed 0."""
    seen = []

    def capture(beta, theta, generator):
        seen.append(beta.clone())
        return beta

    problem = fl.problems.LogisticRegression(_clients(outlier))
    fl.FALD(problem, step_size=eta, chains=1, seed=0, batch_size=batch_size, upload=capture,
            privacy=privacy).run(1)
    return seen[0], problem


def test_one_outlier_record_moves_an_upload_by_at_most_the_derived_bound():
    """Full batch, K = 1: the same seed draws the same noise, so the uploads of the two neighbouring
    datasets differ only through the clipped data term: |beta - beta'| <= eta 2C / p_c (eq. 10 with
    f^c = (1/p_c) NLL_c + prior); client 1's data are equal, so its upload is equal bit for bit."""
    eta, clip = 1e-3, 1.0
    a, problem = _uploads(RecordLevel(clip=clip), False, eta=eta)
    b, _ = _uploads(RecordLevel(clip=clip), True, eta=eta)
    p0 = float(problem.weights[0])
    bound = eta * 2 * clip / p0
    moved = float((a[0, 0] - b[0, 0]).norm())
    assert 0 < moved <= bound * (1 + 1e-9), (moved, bound)
    assert torch.equal(a[0, 1], b[0, 1])
    a0, _ = _uploads(None, False, eta=eta)
    b0, _ = _uploads(None, True, eta=eta)
    assert float((a0[0, 0] - b0[0, 0]).norm()) > 1e3 * bound  # without clipping: unbounded by the clip


def test_the_minibatch_bound_holds_too():
    """batch_size = b: the data term is (1/p_c)(n_c/b) sum over b distinct rows, so one record moves
    the upload by at most eta (1/p_c)(n_c/b) 2C (0 when the record is not in the batch)."""
    eta, clip, b = 1e-3, 1.0, 5
    worst, bound = 0.0, None
    for seed_shift in range(8):  # the same rows are drawn for both datasets (same sizes, same seed)
        torch.manual_seed(seed_shift)
        a, problem = _uploads(RecordLevel(clip=clip), False, batch_size=b, eta=eta)
        c, _ = _uploads(RecordLevel(clip=clip), True, batch_size=b, eta=eta)
        bound = eta * (20 / b) * 2 * clip / float(problem.weights[0])
        worst = max(worst, float((a[0, 0] - c[0, 0]).norm()))
    assert worst <= bound * (1 + 1e-9)


class NoNoiselessAccess(fl.problems.LogisticRegression):
    """Any query of the data outside the clipped private gradient fails."""

    def grad(self, *args, **kwargs):
        raise AssertionError("a noiseless gradient query in a private run")

    def energy(self, *args, **kwargs):
        raise AssertionError("an energy query in a private run")

    def client_hessian_diagonal(self, *args, **kwargs):
        raise AssertionError("a Hessian query in a private run")

    def to(self, device=None, dtype=None):
        return self  # the run's device and dtype already

    def _draw_rows(self, chains, b, generator, device):
        rows = super()._draw_rows(chains, b, generator, device)
        self.drawn.append(rows.clone())
        return rows


def test_a_private_run_touches_the_data_only_through_clipped_steps_and_draws_no_repeated_rows(tmp_path):
    problem = NoNoiselessAccess(_clients(False))
    problem.drawn = []
    sampler = fl.FALD(problem, step_size=1e-3, local_steps=3, chains=4, batch_size=6, seed=0,
                      privacy=RecordLevel(clip=1.0))
    trace = sampler.run(20, warmup=5, checkpoint=tmp_path / "run.ckpt")
    assert trace.settings.privacy == "RecordLevel(clip=1.0)" and trace.num_draws == 15
    assert len(problem.drawn) == 20 * 3  # one draw per local step
    for rows in problem.drawn:  # (R, N, b): b distinct rows of every client in every chain
        assert rows.shape == (4, 2, 6)
        assert all(len(set(r.tolist())) == 6 for r in rows.reshape(-1, 6))
    report = trace.privacy(delta=1e-5)
    assert math.isfinite(report.epsilon) and report.mechanism["sensitivity"] == 2.0
    resumed = fl.FALD.resume(tmp_path / "run.ckpt", problem=problem)
    assert resumed.privacy == RecordLevel(clip=1.0)


def test_a_default_private_run_warms_up_from_the_broadcast_iterates_only(tmp_path):
    """step_size="auto" and the adapted M of a private run read only the iterates: the whole run,
    warm-up included, goes through a problem whose every other data query fails; M is scaled to
    lambda_max(M) = 1, so the accountant's per-step noise multiplier is the step size's."""
    problem = NoNoiselessAccess(_clients(False))
    problem.drawn = []
    sampler = fl.FALD(problem, chains=4, seed=0, privacy=RecordLevel(clip=1.0))
    trace = sampler.run(200, checkpoint=tmp_path / "run.ckpt")
    assert sampler.adapted and sampler.preconditioner is not None and trace.num_draws == 100
    assert sampler.settings.preconditioner_norm == pytest.approx(1.0, rel=1e-12)
    assert len(set(sampler.schedule.values)) > 2  # the step moved at the window ends
    report = trace.privacy(delta=1e-5)
    assert math.isfinite(report.epsilon)
    assert any("broadcast iterates" in note for note in report.notes)


def test_a_private_warm_up_checkpointed_mid_way_resumes_bit_for_bit(tmp_path):
    problem = fl.problems.LogisticRegression(_clients(False))
    whole = fl.FALD(problem, chains=3, seed=2, privacy=RecordLevel(clip=1.0)).run(130, warmup=110)
    path = tmp_path / "run.ckpt"
    fl.FALD(problem, chains=3, seed=2, privacy=RecordLevel(clip=1.0)).run(130, warmup=110, checkpoint=path,
                                                                        checkpoint_every=50)
    resumed = fl.FALD.resume(path.with_name(path.name + ".prev"))  # written at round 100, mid warm-up
    assert resumed.adapter is not None and resumed.adapter.done == 100
    assert resumed.adapter.privacy == RecordLevel(clip=1.0) and resumed.adapter.problem is None
    assert torch.equal(torch.as_tensor(resumed.run().samples), torch.as_tensor(whole.samples))


def test_a_default_private_run_samples_the_posterior():
    """GaussianSimulation (80 records, d = 2, exact Gaussian posterior); the clip C = 50 is far above
    every per-example gradient norm the chains meet (about 13 at the posterior mean), so nothing is
    clipped and the private run's target is the exact posterior. 4 chains x 1000 kept rounds:
    tolerances are 4 Monte Carlo standard errors from the run's own ESS (mean: sd / sqrt(ESS);
    variance: sqrt(2 / ESS) relative) plus the 2.6% variance inflation of SAFETY = 0.1."""
    from diagnostics import ess

    problem = fl.problems.GaussianSimulation(num_clients=4, seed=0)
    mean, cov = (t.numpy() for t in problem.posterior())
    sampler = fl.FALD(problem, chains=4, seed=0, privacy=RecordLevel(clip=50.0))
    trace = sampler.run(2000)
    draws = trace.numpy()
    n_eff = ess(draws)
    flat = draws.reshape(-1, 2)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(flat.mean(0) - mean) <= 4 * sd / np.sqrt(n_eff)), (flat.mean(0), mean, n_eff)
    rel = np.var(flat, axis=0) / np.diag(cov) - 1
    assert np.all(np.abs(rel) <= 4 * np.sqrt(2 / n_eff) + 0.026), (rel, n_eff)
    assert sampler.schedule.values[-1] > 100 * sampler.schedule.values[0]  # it left its public start


@pytest.mark.parametrize("kwargs, match", [
    (dict(step_size="paper"), "step_size='paper'"),
    (dict(step_size=1e-3, init="map"), "init='map'"),
    (dict(step_size=1e-3, correction="control_variates"), "drift correction"),
])
def test_what_would_touch_the_data_without_noise_is_refused_before_any_work(kwargs, match):
    problem = NoNoiselessAccess(_clients(False))
    with pytest.raises(ValueError, match=match):
        fl.FALD(problem, privacy=RecordLevel(clip=1.0), **kwargs)


@pytest.mark.parametrize("clip", [0.0, -1.0, float("nan"), float("inf"), "a", True])
def test_a_bad_clip_is_refused_naming_it(clip):
    with pytest.raises(ValueError, match="clip"):
        fl.FALD(fl.problems.LogisticRegression(_clients(False)), step_size=1e-3, privacy=RecordLevel(clip=clip))


def test_record_level_privacy_needs_a_row_wise_likelihood():
    quadratic = fl.problems.GaussianSimulation(num_clients=2, seed=0)
    curvature = fl.problems.CurvatureSimulation(num_clients=2, alpha=1.0)
    with pytest.raises(ValueError, match="privacy=RecordLevel.*per-row"):
        fl.FALD(curvature, step_size=1e-3, privacy=RecordLevel(clip=1.0))
    assert fl.FALD(quadratic, step_size=1e-3, privacy=ClientLevel(clip=1.0)).privacy == ClientLevel(clip=1.0)
    with pytest.raises(ValueError, match="privacy"):
        fl.FALD(quadratic, step_size=1e-3, privacy="record")


def test_a_single_private_chain_keeps_its_public_step_and_adapts_m():
    """No spread across chains with R = 1: eta stays SAFETY / lambda_0 (lambda_0 = max_c n_c C^2 / p_c
    = 40 here, plus the N(0, 1) prior's curvature 1), M adapts (normalised, so lambda_max(M H) <= lambda_max(H): the guess stays safe)."""
    sampler = fl.FALD(fl.problems.LogisticRegression(_clients(False)), chains=1, seed=0,
                      privacy=RecordLevel(clip=1.0))
    sampler.run(100)
    assert sampler.schedule.values == [pytest.approx(0.1 / 41.0, rel=1e-6)]  # the prior's curvature: a power iteration
    assert sampler.preconditioner is not None and sampler.settings.preconditioner_norm == pytest.approx(1.0)


# -- what a private run released over its life, and what a resume may change --------------------------------------
def _private(**kw):
    args = dict(step_size=1e-6, local_steps=5, chains=2, seed=0, batch_size=2, participation=fl.SchemeII(4, noise="paper"),
                privacy=RecordLevel(clip=0.5))
    args.update(kw)
    problem = fl.problems.GaussianSimulation(num_clients=10, samples_per_client=20, seed=0)
    return fl.FALD(problem, **args)


def _epsilon(steps: int, chains: int) -> float:
    """The accountant called directly on _private()'s mechanism: ``chains`` chains x ``steps`` local steps."""
    from fedlangevin.privacy import tight_epsilon

    return tight_epsilon(eta=1e-6, iterations=chains * steps, delta=1e-5, tau=1.0, rho=0.0, gamma=0.1,
                         sensitivity=1.0, p_min=0.1, num_clients=10, num_sampled=4, local_steps=5, scheme="II")


def test_the_epsilon_of_a_later_run_counts_every_round_the_chains_ever_released(tmp_path):
    """run(60); run(60) released 120 rounds of each chain: its report is a 120-round run's, not a 60-round one's
    (and the same across a checkpoint, resumed and extended)."""
    whole = _private().run(120).privacy(delta=1e-5)
    assert whole.epsilon == pytest.approx(_epsilon(600, 2), rel=1e-12)
    sampler = _private()
    first = sampler.run(60).privacy(delta=1e-5)
    second = sampler.run(60).privacy(delta=1e-5)
    assert first.epsilon == pytest.approx(_epsilon(300, 2), rel=1e-12)
    assert second.epsilon == pytest.approx(whole.epsilon, rel=1e-12) and second.epsilon > first.epsilon
    assert "released: 120 rounds x 2 chain(s)" in second.summary()
    _private().run(60, checkpoint=tmp_path / "run.ckpt")
    resumed = fl.FALD.resume(tmp_path / "run.ckpt").run(60).privacy(delta=1e-5)
    assert resumed.epsilon == pytest.approx(whole.epsilon, rel=1e-12)


def test_dropped_chains_are_still_counted_as_released():
    """on_divergence="drop": the two chains started far out diverge (the prior's pull with eta / sigma^2 = 4
    overshoots by a factor 3 a step) after a few rounds, which they released; the two started at 0 survive
    the 40 rounds. Every chain ever run is composed, at every step (conservative for the dropped ones)."""
    problem = fl.problems.LogisticRegression(_clients(False))
    init = torch.zeros(4, problem.dim, dtype=torch.float64)
    init[0], init[1] = 1e300, 1e290
    sampler = fl.FALD(problem, step_size=4.0, local_steps=1, chains=4, seed=0, init=init,
                      privacy=RecordLevel(clip=1.0))
    with pytest.warns(RuntimeWarning):
        trace = sampler.run(40, on_divergence="drop")
    assert sorted(trace.dropped) == [0, 1] and trace.num_chains == 2
    report = trace.privacy(delta=1e-5)
    assert report.chains == 4 and report.mechanism["chains"] == 4
    assert trace.privacy(delta=1e-5, chains=4).epsilon == report.epsilon
    assert trace.privacy(delta=1e-5, chains=2).epsilon < report.epsilon


def test_a_private_run_refuses_the_noiseless_exact_posterior_as_target():
    sampler = _private()
    with pytest.raises(ValueError, match="target"):
        sampler.run(5, target="posterior")
    assert sampler.state.round == 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(step_size="paper"), r"step_size='paper'"),
    (dict(participation=fl.SchemeII(8)), "participation"),
])
def test_a_private_checkpoint_is_not_weakened_on_resume(tmp_path, kwargs, match):
    _private().run(5, checkpoint=tmp_path / "run.ckpt")
    with pytest.raises(ValueError, match=match):
        fl.FALD.resume(tmp_path / "run.ckpt", **kwargs)


def _not_private(path):
    """Rewrite the checkpoint at ``path`` as a run without privacy (its settings' three privacy entries), with a
    valid checksum: what anyone with write access can do (the checksum detects damage, not authorship)."""
    from fedlangevin.runner.io.checkpoint import decode, encode, read_file, write_file

    record, _ = read_file(path)
    settings = decode(record["settings"])
    settings.update(privacy="none", adjacency="", clip=None)
    record["settings"] = encode(settings)
    write_file(path, record, keep_previous=False)


def test_a_checkpoint_whose_privacy_record_was_removed_does_not_resume_unclipped(tmp_path):
    """Where the checkpoint holds a trace of its mechanism besides the settings (a private warm-up's
    adaptation, the store's meta.json), removing the privacy record is refused."""
    problem = fl.problems.LogisticRegression(_clients(False))
    path = tmp_path / "warm.ckpt"
    fl.FALD(problem, chains=3, seed=2, privacy=RecordLevel(clip=1.0)).run(130, warmup=110, checkpoint=path,
                                                                        checkpoint_every=50)
    mid = path.with_name(path.name + ".prev")  # round 100, mid warm-up
    _not_private(mid)
    with pytest.raises(fl.CheckpointError, match="warm-up adaptation is a private run's: the privacy record was altered"):
        fl.FALD.resume(mid)
    path = tmp_path / "store.ckpt"
    fl.FALD(problem, step_size=1e-3, chains=3, seed=2, privacy=RecordLevel(clip=1.0)).run(
        20, checkpoint=path, checkpoint_every=10, store=tmp_path / "draws")
    mid = path.with_name(path.name + ".prev")  # round 10 of 20
    _not_private(mid)
    with pytest.raises(fl.CheckpointError, match=r"store .* was made by a run with 'RecordLevel\(clip=1.0\)'"):
        fl.FALD.resume(mid)


def test_an_unfinished_private_run_keeps_its_step_sizes_on_resume(tmp_path):
    """Its accounting reads the step sizes of all the run's rounds from the sampler's schedule: a smaller one
    given on resume would account the rounds before the checkpoint at less than they spent."""
    path = tmp_path / "run.ckpt"
    _private().run(20, checkpoint=path, checkpoint_every=10)
    mid = path.with_name(path.name + ".prev")  # round 10 of 20
    with pytest.raises(ValueError, match="step_size: the checkpoint holds an unfinished private run"):
        fl.FALD.resume(mid, step_size=5e-7)
    same = fl.FALD.resume(mid, step_size=1e-6).run().privacy(delta=1e-5)
    assert same.epsilon == pytest.approx(_epsilon(100, 2), rel=1e-12)
    later = fl.FALD.resume(path, step_size=5e-7).run(20).privacy(delta=1e-5)  # finished: a new run may change it
    assert _epsilon(200, 2) * 0.5 < later.epsilon <= _epsilon(200, 2) * (1 + 1e-12)
