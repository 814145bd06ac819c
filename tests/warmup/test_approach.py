"""The warm-up's approach from a data-independent start (fedlangevin/warmup/approach.py and its
use in the Adapter): the guard, the Newton statistic, the arrival, stragglers, a rejected round,
checkpoints mid-approach, and diamonds from zeros."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import fedlangevin as fl
from fedlangevin.warmup import adaptation
from fedlangevin.warmup.approach import (
    ARRIVED, GROW, SHARE, STEP, STRAGGLER_QUANTILE, Approach, approach_init, approach_update, arrived, newton_statistic,
    straggler_excess,
)
from fedlangevin.problems import QuadraticProblem


def _far_gaussian(d=4, n=3, distance=1e4, seed=7):
    """Clients' quadratics whose global posterior N(mu, H^-1) has its mean ``distance`` posterior sds from 0."""
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, d, d, generator=gen, dtype=torch.float64))
    scales = torch.logspace(0, 2, d, dtype=torch.float64)
    a = q @ torch.diag_embed(scales.expand(n, d)) @ q.transpose(1, 2)
    h = a.mean(0)
    direction = torch.randn(d, generator=gen, dtype=torch.float64)
    mu = distance * direction / float(direction @ h @ direction).__pow__(0.5)  # |mu|_H = distance
    b = torch.einsum("cij,j->ci", a, mu)
    return QuadraticProblem(a, b, torch.full((n,), 1 / n, dtype=torch.float64)), mu, h


# -- the pure functions ----------------------------------------------------------------------------
@pytest.mark.parametrize("step", [0.0, -1.0, math.nan, math.inf])
def test_a_bad_first_step_is_a_value_error_naming_it(step):
    with pytest.raises(ValueError, match="step"):
        approach_init(step)


def test_the_first_step_is_capped_and_the_start_energy_is_kept():
    assert approach_init(3.0).step == STEP and approach_init(1e-3).step == 1e-3
    assert approach_init(0.1, torch.tensor([1.0, 3.0])).energy == 2.0
    assert approach_init(0.1, torch.tensor([1.0, math.nan])).energy == math.inf  # unknown: the next round is not judged


def test_a_round_that_lowers_the_mean_energy_is_accepted_and_one_that_raises_it_rejected():
    state = Approach(step=0.2, energy=10.0, statistic=50.0, rounds=3)
    down = approach_update(state, torch.tensor([8.0, 9.0]), 20.0)
    assert not down.rejected and down.step == pytest.approx(GROW * 0.2) and down.energy == 8.5
    assert down.statistic == 20.0 and down.rounds == 4
    assert approach_update(Approach(step=0.4, energy=10.0), torch.tensor([1.0]), 1.0).step == STEP  # grows up to STEP
    up = approach_update(state, torch.tensor([9.0, 11.5]), 2.0)  # mean 10.25 > 10
    # rejected: the chains go back, so energy and statistic stay those of where they were
    assert up.rejected and up.step == 0.1 and up.energy == 10.0 and up.statistic == 50.0 and up.rounds == 4
    assert approach_update(state, torch.tensor([1.0, math.inf]), 1.0).rejected
    assert approach_update(state, torch.tensor([1.0, math.nan]), 1.0).rejected
    assert not approach_update(Approach(step=0.1), torch.tensor([1e30]), 1.0).rejected  # nothing to compare with
    # a rise within the tolerance (the Adapter's: d tau, what a step's noise may add) is accepted
    assert not approach_update(state, torch.tensor([9.0, 11.5]), 2.0, tolerance=0.5).rejected
    assert approach_update(state, torch.tensor([9.0, 11.5]), 2.0, tolerance=0.2).rejected


def test_newton_statistic_against_a_direct_computation():
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    a = torch.randn(3, 3, generator=gen, dtype=torch.float64)
    m = a @ a.T + torch.eye(3, dtype=torch.float64)
    direct = sum(float(g[r] @ m @ g[r]) for r in range(5)) / 5 / 3
    assert newton_statistic(g, m) == pytest.approx(direct, rel=1e-12)
    assert newton_statistic(g, m, temperature=2.0) == pytest.approx(direct / 2, rel=1e-12)
    diag = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert newton_statistic(g, diag) == pytest.approx(newton_statistic(g, torch.diag(diag)), rel=1e-12)
    g[2, 1] = math.nan
    assert newton_statistic(g, m) == math.inf


def test_the_newton_statistic_is_one_in_the_typical_set_and_large_far_from_it():
    # exact draws from N(mu, H^-1): g = H (x - mu) and g^T H^-1 g = z^T z ~ chi^2_d, so the mean over n
    # draws of g^T H^-1 g / d has mean 1 and sd sqrt(2 / (d n)) = 0.0071 (d = 4, n = 10,000); 5 sd allowed
    problem, mu, h = _far_gaussian()
    n, d = 10_000, 4
    chol = torch.linalg.cholesky(torch.linalg.inv(h))
    x = mu + torch.randn(n, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64) @ chol.T
    g = (x - mu) @ h
    s = newton_statistic(g, torch.linalg.inv(h))
    assert s == pytest.approx(1.0, abs=5 * math.sqrt(2 / (d * n)))
    # at zero, 1e4 sds away: (1e4)^2 / d
    g0 = (torch.zeros(1, d, dtype=torch.float64) - mu) @ h
    assert newton_statistic(g0, torch.linalg.inv(h)) == pytest.approx(1e8 / d, rel=1e-9)


def test_arrival_is_the_statistic_or_the_share_of_the_warm_up():
    assert arrived(Approach(step=0.1, statistic=ARRIVED, rounds=1), 1000)
    assert not arrived(Approach(step=0.1, statistic=ARRIVED + 0.01, rounds=1), 1000)
    assert arrived(Approach(step=0.1, statistic=1e6, rounds=int(SHARE * 1000)), 1000)


def test_typical_set_energies_exceed_the_straggler_excess_at_the_stated_rate():
    # energies above the minimum of exact draws of a d-dimensional Gaussian are z^T z / 2 ~ Gamma(d / 2);
    # above median + excess with probability STRAGGLER_QUANTILE = 1e-4 (Monte Carlo: 2e6 draws, sd of
    # the count sqrt(200) = 14, 5 sd allowed), and the excess scales with the temperature
    rng = np.random.default_rng(3)
    for d in (1, 10):
        e = 0.5 * (rng.standard_normal((2_000_000, d)) ** 2).sum(1)
        count = int((e - stats.gamma.median(d / 2) > straggler_excess(d)).sum())
        assert abs(count - 2_000_000 * STRAGGLER_QUANTILE) <= 5 * math.sqrt(2_000_000 * STRAGGLER_QUANTILE)
    assert straggler_excess(10, temperature=3.0) == pytest.approx(3 * straggler_excess(10))


# -- in the Adapter ----------------------------------------------------------------------------------
def _adapter(problem, warmup=400, seed=0):
    return adaptation.Adapter(problem, warmup, adapt_matrix=True, fixed_step=None, per_client=False, seed=seed,
                              target=0.9)


def test_the_approach_reaches_the_bulk_from_1e4_sds_and_stan_windows_follow():
    problem, mu, h = _far_gaussian()
    sampler = fl.FALD(problem, chains=8, seed=0)
    trace = sampler.run(400, progress=False)
    # the approach ends within a few dozen rounds (Newton-Langevin at eta <= 0.5 contracts by 1 - eta)
    assert sampler.adapted
    x = trace.samples.to(torch.float64).reshape(-1, 4)
    z = (x - mu) @ torch.linalg.cholesky(h)  # whitened: N(0, I) up to the step's bias and Monte Carlo error
    assert float(z.mean(0).abs().max()) < 0.3 and 0.8 < float(z.std(0).min()) and float(z.std(0).max()) < 1.25


def test_chains_starting_in_the_bulk_have_no_approach():
    # at the mode g = 0: the Newton statistic is 0, Stan's windows start at round 0 as without an approach
    problem, mu, _ = _far_gaussian()
    adapter = _adapter(problem)
    adapter.start(mu.expand(8, 4).clone())
    assert adapter.approach is None and adapter.arrived == 0 and adapter.dual is not None
    assert adapter.windows == adaptation.warmup_windows(400)


def test_the_approach_windows_start_where_it_ended():
    problem, _, _ = _far_gaussian()
    adapter = _adapter(problem)
    theta = torch.zeros(8, 4, dtype=torch.float64)
    adapter.start(theta)
    assert adapter.approach is not None and adapter.windows == [adaptation.Window(0, 400, False)]
    adapter.done = 30
    adapter.windows = adapter._laid_out(30)
    rest = adaptation.warmup_windows(370)
    assert adapter.windows[0] == adaptation.Window(0, 30, False)
    assert [(w.start - 30, w.end - 30, w.slow) for w in adapter.windows[1:]] == [(w.start, w.end, w.slow) for w in rest]


def test_a_rejected_round_puts_the_chains_back(monkeypatch):
    problem, _, _ = _far_gaussian()
    calls, seen = [], []
    real_update, real_observe = adaptation.approach_update, fl.FALD._observe

    def update(state, energies, statistic, tolerance=0.0):  # the third round is rejected whatever its energies
        calls.append(1)
        new = real_update(state, energies, statistic, tolerance)
        return Approach(state.step / 2, state.energy, state.statistic, new.rounds, True) if len(calls) == 3 else new

    def observe(sampler, run, theta, *args):
        before = None if sampler.adapter.approach is None else sampler.adapter.last.clone()
        real_observe(sampler, run, theta, *args)
        seen.append((before, theta.clone(), sampler.state.theta.clone()))

    monkeypatch.setattr(adaptation, "approach_update", update)
    monkeypatch.setattr(fl.FALD, "_observe", observe)
    sampler = fl.FALD(problem, chains=4, seed=0)
    sampler.run(60, progress=False)
    before, moved, now = seen[2]
    assert torch.equal(now.to(torch.float64), before) and not torch.equal(moved, now)  # back where it started
    assert torch.equal(seen[1][2], seen[1][1])  # an accepted round stays


def test_stragglers_restart_at_another_chains_place():
    problem, mu, h = _far_gaussian(d=4)
    adapter = _adapter(problem, seed=3)
    chol = torch.linalg.cholesky(torch.linalg.inv(h))
    x = mu + torch.randn(16, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64) @ chol.T
    x[5] = mu + 300 * chol[:, 0]  # 300 sds out: an energy 45,000 above the others
    x[9] = math.nan
    adapter.last = x.clone()
    adapter._at_last = adapter._evaluate(x)
    adapter._restart_stragglers()
    new = adapter.reset
    assert new is not None and torch.equal(adapter.last, new)
    keep = [r for r in range(16) if r not in (5, 9)]
    assert torch.equal(new[keep], x[keep])
    for r in (5, 9):  # each now sits exactly where one of the others does, with its energy and gradient
        assert any(torch.equal(new[r], x[k]) for k in keep)
        assert torch.equal(adapter._at_last[0][r], adapter._evaluate(new)[0][r])
    # chains all in the typical set: nobody restarts
    adapter.reset = None
    adapter.last, adapter._at_last = x[keep].clone(), adapter._evaluate(x[keep])
    adapter._restart_stragglers()
    assert adapter.reset is None


def test_a_run_checkpointed_mid_approach_resumes_bit_for_bit(tmp_path, monkeypatch):
    problem, _, _ = _far_gaussian()
    whole = fl.FALD(problem, chains=4, seed=5).run(200, progress=False)
    path = tmp_path / "run.ckpt"
    real = adaptation.Adapter._approach
    count = []

    def interrupted(self, x):
        count.append(1)
        if len(count) == 7:
            raise KeyboardInterrupt
        return real(self, x)

    monkeypatch.setattr(adaptation.Adapter, "_approach", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fl.FALD(problem, chains=4, seed=5).run(200, progress=False, checkpoint=path, checkpoint_every=1)
    monkeypatch.setattr(adaptation.Adapter, "_approach", real)
    resumed = fl.FALD.resume(path)
    assert resumed.adapter is not None and resumed.adapter.approach is not None and resumed.adapter.done == 6
    trace = resumed.run(progress=False)
    assert np.array_equal(np.asarray(trace.samples), np.asarray(whole.samples))


def test_the_warm_up_reaches_the_bulk_from_zeros_on_diamonds():
    # diamonds: a regression whose posterior mean is ~4,400 posterior sds (whitened) from zero; before the
    # approach the defaults ended 1,356 sds off after 2,000 rounds (docs/adaptation.md)
    from fedlangevin.experiments.posteriordb import compare, load

    post = load("diamonds-diamonds")
    ref = post.unconstrain(post.reference)
    assert np.abs(ref.mean(0) / ref.std(0)).max() > 100
    sampler = fl.FALD(post.problem, chains=16, seed=0)
    trace = sampler.run(2000, progress=False)
    row = compare(post, np.asarray(trace.numpy()), 1.0)
    assert row.passes(), row


def test_a_chain_dropped_during_the_approach_leaves_the_others_to_arrive(monkeypatch):
    """on_divergence='drop' mid-approach, and that very round rejected by the energy guard: the
    guard starts again from the surviving chains (so the chains are put back with 7 rows, not the
    8 of before the drop), the approach arrives and the warm-up ends; the survivors' draws are
    finite and near the far mean."""
    problem, mu, h = _far_gaussian()
    real_update, updates = adaptation.approach_update, []

    def update(state, energies, statistic, tolerance=0.0):  # the round of the drop (the 5th) is rejected
        updates.append(1)
        new = real_update(state, energies, statistic, tolerance)
        return Approach(state.step / 2, state.energy, state.statistic, new.rounds, True) if len(updates) == 5 else new

    monkeypatch.setattr(adaptation, "approach_update", update)
    sampler = fl.FALD(problem, chains=8, seed=0)
    real, calls, during = sampler._kernel.step, [0], []

    def poisoned(state, step_sizes, generator, on_step=None, **arguments):
        new, info = real(state, step_sizes, generator, on_step, **arguments)
        calls[0] += 1
        if calls[0] == 5:  # round 5, inside the approach: chain 3 goes non-finite
            during.append(sampler.adapter is not None and sampler.adapter.approach is not None)
            theta = new.theta.clone()
            theta[3] = math.nan
            new = type(new)(theta=theta, step=new.step, round=new.round, correction=new.correction)
        return new, info

    sampler._kernel = sampler._kernel._replace(step=poisoned)
    with pytest.warns(RuntimeWarning, match="diverged"):
        trace = sampler.run(400, progress=False, on_divergence="drop")
    assert during == [True] and list(trace.dropped) == [3] and trace.samples.shape[0] == 7 and sampler.adapted
    assert sampler.adapter is None and torch.isfinite(trace.samples).all()
    # the draws' mean within 6 posterior sds of mu (7 chains x 200 correlated draws: its sd is well
    # under one posterior sd; far from 0, which is 1e4 sds away)
    sd = torch.sqrt(torch.diagonal(torch.linalg.inv(h)))
    z = (trace.samples.reshape(-1, mu.numel()).mean(0) - mu) / sd
    assert float(z.abs().max()) < 6, z
