"""FA-HMC's warm-up (fedlangevin/fahmc/warmup.py): its statistic against a direct computation, its
Gaussian target, the friction rule, what it adapts on a Gaussian (M, h, gamma) from the default start,
a checkpoint in either phase resuming bit for bit, what it counts, and FAHMC(problem) with every
default passing the acceptance on the shipped logistic regression."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.fahmc import warmup as wu
from fedlangevin.fahmc.kernel import OVERDAMPED, build
from fedlangevin.federation.preconditioning import as_preconditioner, preconditioner_matrix
from fedlangevin.warmup.acceptance import energy_function, excess_step, gaussian_acceptance, mean_acceptance
from fedlangevin.problems import QuadraticProblem
from tests.fahmc.test_kernel import THETA0, heterogeneous
from tests.stops import dies_in_round

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MASS = [[0.6, 0.15], [0.15, 0.3]]
#: h* = sqrt(2 eta*): OBABO's theta sds 3 % too wide on a Gaussian (the target's step)
H_STAR = math.sqrt(2 * excess_step(0.03))


def _global(problem, x):
    """(U, grad U) of the global energy at x (R, d)."""
    n = problem.num_clients
    grads = problem.grad(x[:, None, :].expand(x.shape[0], n, problem.dim).contiguous())
    return energy_function(problem)(x), (problem.weights[None, :, None] * grads).sum(1)


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_energy_error_is_the_hamiltonian_change_less_the_refresh_heat(splitting):
    """delta of a K = 1 round (a centralised step on the global energy) against H = U + w^T M^-1 w / 2
    computed with M^-1 from the velocities the splitting passes through: BAOAB, w = v - h M g / 2 at
    either end, the refresh from v - h M g to v'; OBABO, the leapfrog from v' + h M g / 2 to
    v' - h M g' / 2. To rounding, for several states and steps."""
    problem = heterogeneous()
    m = torch.tensor(MASS, dtype=torch.float64)
    m_inv = torch.linalg.inv(m)
    kernel = build(problem, friction=0.8, preconditioner=MASS, splitting=splitting)
    gen = torch.Generator().manual_seed(2)
    theta = torch.tensor(THETA0, dtype=torch.float64) + torch.randn(6, 2, generator=gen, dtype=torch.float64)
    v = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    kin = lambda w: 0.5 * ((w @ m_inv) * w).sum(-1)  # noqa: E731
    for h in (0.05, 0.3, 0.9):
        new, _ = kernel.step(fl.fahmc.FAHMCState(theta=theta, momentum=v), [h], gen)
        (u0, g0), (u1, g1) = _global(problem, theta), _global(problem, new.theta)
        delta = wu.energy_error(theta, new.theta, v, new.momentum, u0, u1, g0, g1, h, as_preconditioner(m),
                                splitting)
        if splitting == "BAOAB":
            w0, w1 = v - 0.5 * h * g0 @ m, new.momentum - 0.5 * h * g1 @ m
            heat = kin(new.momentum) - kin(v - h * g0 @ m)
            direct = u1 + kin(w1) - u0 - kin(w0) - heat
        else:
            direct = u1 + kin(new.momentum - 0.5 * h * g1 @ m) - u0 - kin(new.momentum + 0.5 * h * g0 @ m)
        torch.testing.assert_close(delta, direct, rtol=1e-9, atol=1e-9)
        assert bool((delta.abs() > 1e-6).any())                      # not trivially zero


def test_the_gaussian_target_is_fald_s_for_obabo_and_lower_for_baoab():
    """On a standard Gaussian at stationarity OBABO's energy-error acceptance at h is MALA's at eta =
    h^2 / 2 (FA-LD's target, fedlangevin.warmup.acceptance.gaussian_acceptance) whatever the
    friction: the two Monte Carlo estimates (10^4 to 10^5 draws each, min(1, alpha) with sd below 0.15
    here: standard errors below 0.0015) agree within 0.01. BAOAB's energy error is larger (its half
    steps' O(h^2) errors do not cancel across the refresh): its target is lower by far more than that."""
    for d in (5, 22):
        fald = gaussian_acceptance(excess_step(0.03), d)
        for gamma in (0.3, 3.0):
            assert abs(wu.gaussian_energy_acceptance(H_STAR, d, gamma, "OBABO") - fald) < 0.01
        assert wu.gaussian_energy_acceptance(H_STAR, d, 0.7, "BAOAB") < fald - 0.01
    a = [wu.gaussian_energy_acceptance(h, 10, 0.7, "BAOAB") for h in (0.2, 0.5, 1.0)]
    assert 1 > a[0] > a[1] > a[2] > 0                                # it falls as h grows


def test_friction_rule():
    """gamma = sqrt(lambda_min(M H) / 2), clipped to [GAMMA_MIN, GAMMA_MAX]."""
    cov = torch.tensor(MASS, dtype=torch.float64)
    prec = torch.linalg.inv(cov)
    assert wu.friction_rule(cov, prec) == pytest.approx(math.sqrt(0.5), rel=1e-12)   # M = Sigma: omega = 1
    assert wu.friction_rule(cov / 4, prec) == pytest.approx(math.sqrt(0.125), rel=1e-12)
    skew = torch.diag(torch.tensor([1.0, 3.0], dtype=torch.float64))                # lambda(M H) = {1, 3}
    assert wu.friction_rule(skew, torch.eye(2, dtype=torch.float64)) == pytest.approx(math.sqrt(0.5))
    assert wu.friction_rule(cov / 1e4, prec) == wu.GAMMA_MIN
    assert wu.friction_rule(cov * 1e4, prec) == wu.GAMMA_MAX
    indefinite = torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)
    assert wu.friction_rule(torch.eye(2, dtype=torch.float64), indefinite) == wu.GAMMA_MIN


def gaussian(d: int = 5, clients: int = 4, seed: int = 0) -> QuadraticProblem:
    """A d-dimensional Gaussian posterior (sds 0.1 to 10, a random rotation, the mean about 3 sds from
    zeros in each direction) over clients with curvatures 0.5 to 1.5 times the posterior's."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    sd = torch.logspace(-1, 1, d, dtype=torch.float64)
    prec = q @ torch.diag(sd ** -2) @ q.T
    mean = 3 * sd[torch.randperm(d, generator=g)] * torch.randn(d, generator=g, dtype=torch.float64).sign() + 1.0
    hs = torch.stack([prec * (0.5 + c / (clients - 1)) for c in range(clients)])
    return QuadraticProblem(hs, hs @ mean, torch.full((clients,), 1 / clients, dtype=torch.float64))


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_on_a_gaussian_from_zeros_m_h_and_gamma_land_where_the_rules_say(splitting):
    """FAHMC(problem, chains=32) with every other default, run(1000) from zeros (warm-up 500: 250
    overdamped rounds, then 250 underdamped, the first 150 of them M's window).

    M: the covariance of the underdamped window (150 rounds x 32 chains). FA-HMC's autocorrelation
    times of theta and theta^2 there are about 2 gamma / h and 1 / (gamma h), 3 rounds (whitened:
    gamma = 0.7, h = 0.48), so over 500 effective draws even with the window's start not quite in
    equilibrium; the sample covariance's eigenvalues relative to the law's lie within the
    Marchenko-Pastur edges (1 +- sqrt(d / n))^2 <= [0.81, 1.21], and the law is exact (BAOAB) or at
    most 1 / (1 - h^2 / 4) = 1.06 times too wide (OBABO): the eigenvalues of Sigma^-1 M in [0.8, 1.3]
    (14 runs: 0.87-1.21).
    gamma: the rule on the final M and the mean Hessian, here Sigma^-1 exactly: sqrt(mu_min / 2).
    h: the acceptance measured at the frozen h over 200 further rounds (32 chains; per-round sd 0.01,
    so a standard error below 0.002) equals the target within 0.01 (14 runs: within 0.003), and h
    lies in h* [sqrt(0.8), sqrt(1.3)] (a step h in whitened units acts as h / sqrt(mu) in a direction
    with Sigma^-1 M eigenvalue mu; h* where the target is exact for M = Sigma).
    The draws pass the acceptance against the exact posterior."""
    problem = gaussian()
    mean, cov = problem.posterior(1.0)
    sampler = fl.FAHMC(problem, chains=32, seed=0, splitting=splitting)
    trace = sampler.run(1000)
    assert sampler.adapted and sampler.adapter is None
    m = preconditioner_matrix(sampler.preconditioner, problem.dim)
    chol = torch.linalg.cholesky(cov)
    mu = torch.linalg.eigvalsh(torch.linalg.solve(chol, torch.linalg.solve(chol, m).T))
    assert 0.8 <= float(mu.min()) and float(mu.max()) <= 1.3, mu
    gamma = sampler.friction
    assert math.isfinite(gamma) and gamma == pytest.approx(math.sqrt(float(mu.min()) / 2), rel=1e-6)
    h = sampler.schedule(sampler.state.step)
    assert H_STAR * math.sqrt(0.8) <= h <= H_STAR * math.sqrt(1.3), h
    target = wu.gaussian_energy_acceptance(H_STAR, problem.dim, gamma, splitting)
    accepted = []
    for _ in range(200):
        start = (sampler.state.theta.clone(), sampler.state.momentum.clone())
        sampler.run(1, keep_samples=False)
        (u0, g0), (u1, g1) = _global(problem, start[0]), _global(problem, sampler.state.theta)
        delta = wu.energy_error(start[0], sampler.state.theta, start[1], sampler.state.momentum, u0, u1, g0, g1, h,
                                sampler.preconditioner, splitting)
        accepted.append(mean_acceptance(-delta))
    assert abs(np.mean(accepted) - target) < 0.01, (np.mean(accepted), target)
    draws = trace.samples.reshape(-1, problem.dim)
    sd = cov.diagonal().sqrt()
    assert float(((draws.mean(0) - mean) / sd).abs().max()) <= 0.1
    ratio = draws.std(0) / sd
    assert 0.9 <= float(ratio.min()) and float(ratio.max()) <= 1.1
    assert trace.settings.step_size.startswith("auto(h=") and trace.settings.adapt and trace.settings.auto_step_size


def test_the_phases_and_what_they_count():
    """Phase 1 runs the overdamped step with FA-LD's adapter (h = sqrt(2 eta)), phase 2 FA-HMC with the
    rule's gamma; the warm-up's uploads (energies and gradients, d + 1 floats per client and chain and
    round, Hessians) are counted as set-up floats up, and the sampling rounds add none."""
    problem = gaussian()
    sampler = fl.FAHMC(problem, chains=8, seed=1)
    seen = []
    observe = sampler._observe

    def spy(run, theta, *args):
        seen.append((sampler._step_arguments()["friction"], sampler.schedule(sampler.state.step - 1)))
        observe(run, theta, *args)

    sampler._observe = spy
    sampler.run(100)                                                # warm-up 50: 25 overdamped, 25 underdamped
    assert [f for f, _ in seen[:25]] == [OVERDAMPED] * 25
    assert all(0 < f < OVERDAMPED for f, _ in seen[25:]) and len(seen) == 50
    n, d = problem.num_clients, problem.dim
    up = sampler.ledger["setup_floats_up"]
    assert up >= 50 * n * (d + 1)                                   # each warm-up round's energies and gradients
    sampler.run(20)
    assert sampler.ledger["setup_floats_up"] == up                  # frozen: nothing more


@pytest.mark.parametrize("splitting,kill", [("BAOAB", 37), ("OBABO", 37), ("BAOAB", 67), ("OBABO", 95)])
def test_a_checkpoint_mid_warmup_resumes_bit_for_bit(tmp_path, splitting, kill):
    """run(200) (warm-up 100: rounds 1-50 overdamped, 51-100 underdamped, 51-80 M's window) killed in
    round ``kill`` resumes from its last checkpoint (every 10 rounds: round 30 in phase 1, 60 in the
    window, 90 after it) and ends on the same draws, M, h, gamma, momentum, stream and ledger as an
    uninterrupted run."""
    problem = gaussian()
    args = dict(chains=6, seed=4, splitting=splitting)
    whole = fl.FAHMC(problem, **args)
    whole_trace = whole.run(200)
    sampler = fl.FAHMC(problem, **args)
    sampler.kernel.step = dies_in_round(sampler.kernel.step, kill)
    with pytest.raises(KeyboardInterrupt):
        sampler.run(200, checkpoint=tmp_path / "run.ckpt", checkpoint_every=10)
    resumed = fl.FAHMC.resume(tmp_path / "run.ckpt")
    assert resumed.unfinished["done"] == kill // 10 * 10 and resumed.adapter is not None
    assert (resumed.adapter.overdamped is None) == (kill > 50)
    trace = resumed.run()
    assert torch.equal(trace.samples, whole_trace.samples)
    assert torch.equal(resumed.state.theta, whole.state.theta)
    assert torch.equal(resumed.state.momentum, whole.state.momentum)
    assert torch.equal(preconditioner_matrix(resumed.preconditioner, 5), preconditioner_matrix(whole.preconditioner, 5))
    assert resumed.friction == whole.friction and resumed.schedule.values == whole.schedule.values
    assert torch.equal(resumed.generator.get_state(), whole.generator.get_state())
    assert resumed.ledger == whole.ledger and resumed.settings == whole.settings and resumed.adapted


def test_adapt_false_keeps_the_given_preconditioner_and_friction_given_is_kept():
    problem = gaussian()
    _, cov = problem.posterior(1.0)
    sampler = fl.FAHMC(problem, chains=8, seed=0, preconditioner=cov, adapt=False, friction=1.3)
    sampler.run(100)
    assert torch.equal(preconditioner_matrix(sampler.preconditioner, 5), preconditioner_matrix(as_preconditioner(cov), 5))
    assert sampler.friction == 1.3 and sampler.adapted and 0.3 < sampler.schedule(sampler.state.step) < 0.7


def test_defaults_from_zeros_pass_the_acceptance_on_the_shipped_logistic_regression():
    """FAHMC(problem, chains=32) with every other default (zeros, step_size, friction and M 'auto',
    warm-up half the rounds), run(1000): the validation's acceptance against the shipped NUTS
    reference (max |mean err| <= 0.1 sd, sd ratios in [0.9, 1.1]; seed 0: 0.056, 0.97-1.03)."""
    from fedlangevin.experiments.logistic_posterior import load_logistic
    from fedlangevin.experiments.posteriordb import compare

    post = load_logistic()
    sampler = fl.FAHMC(post.problem, chains=32, seed=0)
    row = compare(post, sampler.run(1000).numpy(), 1.0)
    assert row.passes(), row


def test_without_an_energy_h_comes_from_the_curvature_rule_and_there_is_no_underdamped_phase():
    """A problem that gives gradients only (no energy for the statistic): phase 1 takes the whole
    warm-up with FA-LD's curvature rule, h = sqrt(2 eta), and the friction rule still sets gamma."""
    from tests.targets import OpaqueProblem

    problem = OpaqueProblem(gaussian())
    assert energy_function(problem) is None
    sampler = fl.FAHMC(problem, chains=8, seed=0)
    frictions = []
    observe = sampler._observe

    def spy(run, theta, *args):
        frictions.append(sampler.friction)
        observe(run, theta, *args)

    sampler._observe = spy
    sampler.run(200)
    assert frictions == [OVERDAMPED] * 100
    assert sampler.adapted and wu.GAMMA_MIN <= sampler.friction <= wu.GAMMA_MAX
    assert 0 < sampler.schedule(sampler.state.step) < 2


@pytest.mark.parametrize("when", [12, 40])
def test_a_divergent_move_caps_h_and_puts_the_chain_back(monkeypatch, when):
    """A move whose energy error exceeds DIVERGENT (a Metropolis acceptance below 5e-5) in phase 2: h
    is capped at BACKOFF times the round's h, and the chain restarts at the (theta, v) of another chain;
    the round's other chains stay where they are. After the window (its 30 rounds) the cap holds for the
    rest of the warm-up and after it; in the window it holds until the window's new M lifts it."""
    problem = gaussian()
    sampler = fl.FAHMC(problem, chains=6, seed=3)
    real, steps = wu.energy_error, []

    def diverges_once(*args, **kwargs):
        delta = real(*args, **kwargs)
        if delta.shape[0] == 6:                                     # a round's (not the target's Monte Carlo)
            steps.append(args[8])
            if len(steps) == when:                                  # that underdamped round: chain 4
                delta = delta.clone()
                delta[4] = 50.0
        return delta

    monkeypatch.setattr(wu, "energy_error", diverges_once)
    rounds, caps, duals = [], [], []
    observe = sampler._observe

    def spy(run, theta, *args):
        count = len(steps)
        observe(run, theta, *args)
        rounds.append((len(steps) > count and len(steps) == when, theta.clone(), sampler.state.theta.clone(),
                       sampler.state.momentum.clone()))
        if sampler.adapter is not None and len(steps) > count:
            caps.append(sampler.adapter.cap)
            duals.append(sampler.adapter.dual.x)

    sampler._observe = spy
    sampler.run(200)                                                # phase 2: warm-up rounds 51-100
    h_then = steps[when - 1]
    if when > 30:
        assert max(steps[when:]) <= wu.BACKOFF * h_then + 1e-15     # capped for the rest of the warm-up
        assert sampler.schedule(sampler.state.step) <= wu.BACKOFF * h_then + 1e-15
        # a capped h that passes says nothing of the larger step the dual averaging proposes: while the
        # proposal is above the cap it is not raised (it was, round after round, until exp overflowed in a
        # 6,000-round warm-up); below the cap it adapts as before
        cap = wu.BACKOFF * h_then
        bound = [(a, b) for a, b in zip(duals[when - 1:], duals[when:]) if math.sqrt(2 * math.exp(a)) > cap]
        assert bound and all(b <= a + 1e-12 for a, b in bound)
    else:
        assert max(steps[when:30]) <= wu.BACKOFF * h_then + 1e-15   # capped in the window
        assert caps[when - 1] == pytest.approx(wu.BACKOFF * h_then) and caps[30] == math.inf  # lifted there
    (hit,) = [r for r in rounds if r[0]]
    _, before, theta, momentum = hit
    assert torch.equal(theta[[0, 1, 2, 3, 5]], before[[0, 1, 2, 3, 5]])
    assert not torch.equal(theta[4], before[4])
    source = [j for j in (0, 1, 2, 3, 5) if torch.equal(theta[j], theta[4])]
    assert len(source) == 1 and torch.equal(momentum[source[0]], momentum[4])


def _identical_clients() -> QuadraticProblem:
    """Four clients with one energy (same Hessian and shift) and unequal weights: any participation
    rule's average of their gradients is the global gradient exactly (no client-sampling noise), so
    with the calibrated noise a K = 1 round of scheme I has full participation's mean and covariance
    (its private noise's variance varies from round to round around full participation's)."""
    h, b = torch.tensor([[2.0, 0.6], [0.6, 0.5]], dtype=torch.float64), torch.tensor([1.0, -2.0], dtype=torch.float64)
    return QuadraticProblem(h.expand(4, 2, 2).clone(), b.expand(4, 2).clone(),
                            torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64))


def _one_record_clients():
    """A Gaussian simulation with one record per client: a minibatch of 1 is that record, so the
    minibatch path runs (its index draws from the round's stream) with no gradient noise."""
    return fl.problems.GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=1, prior_precision=1.0, seed=0)


@pytest.mark.parametrize("setting", ["scheme I", "minibatch"])
def test_auto_and_map_start_under_partial_participation_and_minibatches_sample_the_posterior(setting):
    """FAHMC(step_size="auto", init="map") with SchemeI(2) or batch_size=1, where the round's drift is
    the global gradient exactly (the problems above), so the moments are full participation's and
    BAOAB's theta moments are exact on a Gaussian: the warm-up (300 of 600 rounds) adapts M, h and gamma from
    what the rounds do, with h within h* [sqrt(0.8), sqrt(1.3)] as with full participation (the test
    above), and the last draws of R = 400 independent chains are R posterior draws: each mean within 4
    sd / sqrt(R) and each variance ratio within 4 sqrt(2 / R) of 1 (|z| < 4: a false failure has
    probability < 1e-3). The mode search started every chain at the MAP (the posterior mean here) and
    its rounds are counted."""
    problem = _identical_clients() if setting == "scheme I" else _one_record_clients()
    kwargs = dict(participation=fl.SchemeI(2)) if setting == "scheme I" else dict(batch_size=1)
    mean, cov = problem.posterior(1.0)
    chains = 400
    sampler = fl.FAHMC(problem, chains=chains, seed=1, init="map", **kwargs)
    assert sampler.map_result.converged
    torch.testing.assert_close(sampler.map_result.theta, mean.double(), rtol=0, atol=1e-6)
    assert sampler.ledger["map_rounds"] == sampler.map_result.rounds >= 1
    trace = sampler.run(600)
    assert sampler.adapted
    h = sampler.schedule(sampler.state.step)
    assert H_STAR * math.sqrt(0.8) <= h <= H_STAR * math.sqrt(1.3), h
    last = trace.samples[:, -1]
    z = (last.mean(0) - mean) / (cov.diagonal().sqrt() / math.sqrt(chains))
    assert bool((z.abs() < 4).all()), z
    ratio = last.var(0) / cov.diagonal()
    assert bool(((ratio - 1).abs() < 4 * math.sqrt(2 / chains)).all()), ratio
