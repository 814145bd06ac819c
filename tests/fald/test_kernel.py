"""Exact law of FA-LD on quadratic targets: engine moments vs an independent recursion.

With affine gradients the FA-LD iterate is Gaussian and its mean and covariance follow the
linear recursion in ``tests/targets.py`` (numpy, written independently of the engine). We run
R chains and compare the empirical mean and covariance of the global parameter after every
round with the recursion, within Monte Carlo error.

Tolerance: for R i.i.d. Gaussian draws the sample mean of coordinate i has standard error
sqrt(S_ii / R) and the sample covariance entry (i, j) has standard error
sqrt((S_ii S_jj + S_ij^2) / R). We require every entry within 5 standard errors; with 60
entries per configuration, a correct engine fails with probability < 60 * 6e-7 ≈ 4e-5 (and
the seed is fixed, so the outcome is deterministic).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.problems import QuadraticProblem
from tests.targets import fald_moments, small_problem_arrays

R = 20_000
ROUNDS = 6
ETA = 0.05
TAU = 0.7


def _z_scores(samples: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    r = samples.shape[0]
    emp_mean = samples.mean(0)
    emp_cov = np.cov(samples, rowvar=False, ddof=1)
    se_mean = np.sqrt(np.diag(cov) / r)
    var = np.diag(cov)
    se_cov = np.sqrt((np.outer(var, var) + cov**2) / r)
    return np.concatenate([((emp_mean - mean) / se_mean).ravel(), ((emp_cov - cov) / se_cov).ravel()])


@pytest.mark.parametrize("rho", [0.0, 0.7])
@pytest.mark.parametrize("k", [1, 5])
def test_engine_matches_exact_moment_recursion(rho, k):
    hessians, shifts, p = small_problem_arrays()
    problem = QuadraticProblem(hessians, shifts, p)
    init = np.array([3.0, -2.0])
    sampler = fl.FALD(problem, step_size=ETA, local_steps=k, temperature=TAU, correlation=rho,
                      chains=R, init=torch.tensor(init), seed=11)
    trace = sampler.run(ROUNDS)
    exact = fald_moments(hessians, shifts, p, init, [[ETA] * k] * ROUNDS, TAU, rho)
    z = np.concatenate([_z_scores(trace.numpy()[:, i], m, c) for i, (m, c) in enumerate(exact)])
    assert np.abs(z).max() < 5.0, f"max |z| = {np.abs(z).max():.2f}"


def test_recursion_distinguishes_correlation():
    """Power check: with K = 5 the rho = 0 and rho = 0.7 laws differ by more than 7 standard
    errors, so the test above (threshold 5) would catch an engine that ignored rho. With
    K = 1 the law does not depend on rho at all (eq. 15: the averaged noise is the same)."""
    hessians, shifts, p = small_problem_arrays()
    init = np.array([3.0, -2.0])
    (m0, c0), = fald_moments(hessians, shifts, p, init, [[ETA] * 5], TAU, 0.0)
    (m7, c7), = fald_moments(hessians, shifts, p, init, [[ETA] * 5], TAU, 0.7)
    var = np.diag(c0)
    se = np.sqrt((np.outer(var, var) + c0**2) / R)
    assert np.abs((c0 - c7) / se).max() > 7
    (a0, b0), = fald_moments(hessians, shifts, p, init, [[ETA]], TAU, 0.0)
    (a7, b7), = fald_moments(hessians, shifts, p, init, [[ETA]], TAU, 0.7)
    np.testing.assert_allclose(b0, b7, rtol=1e-12)


def test_varying_step_sizes_follow_the_recursion():
    hessians, shifts, p = small_problem_arrays()
    problem = QuadraticProblem(hessians, shifts, p)
    etas = [0.08 / (1 + 0.3 * k) for k in range(12)]
    sampler = fl.FALD(problem, step_size=etas, local_steps=3, temperature=1.0, correlation=0.3,
                      chains=R, seed=5)
    trace = sampler.run(4)
    exact = fald_moments(hessians, shifts, p, np.zeros(2), [etas[3 * i : 3 * i + 3] for i in range(4)], 1.0, 0.3)
    z = np.concatenate([_z_scores(trace.numpy()[:, i], m, c) for i, (m, c) in enumerate(exact)])
    assert np.abs(z).max() < 5.0


@pytest.mark.parametrize("scheme,s", [("I", 2), ("II", 2)])
@pytest.mark.parametrize("noise", ["calibrated", "paper"])
def test_partial_participation_moments(scheme, s, noise):
    """Random participation: the law is a mixture, but its first two moments are exact, for either
    private-noise rule (the calibrated default and the paper's eq. 10)."""
    _, shifts, _ = small_problem_arrays()
    rng = np.random.default_rng(0)
    n, d = 4, 2
    hessians = np.stack([np.diag(rng.uniform(0.5, 2.0, d)) for _ in range(n)])
    shifts = rng.standard_normal((n, d))
    p = np.full(n, 1 / n) if scheme == "II" else np.array([0.4, 0.3, 0.2, 0.1])
    problem = QuadraticProblem(hessians, shifts, p)
    rule = fl.SchemeI(s, noise=noise) if scheme == "I" else fl.SchemeII(s, noise=noise)
    sampler = fl.FALD(problem, step_size=0.1, local_steps=4, correlation=0.2, participation=rule,
                      chains=R, seed=2)
    trace = sampler.run(5)
    exact = fald_moments(hessians, shifts, p, np.zeros(d), [[0.1] * 4] * 5, 1.0, 0.2, scheme, s, noise=noise)
    for i, (m, c) in enumerate(exact):
        x = trace.numpy()[:, i]
        # Mean: standard error sqrt(var / R) holds for any law. Covariance: a mixture has
        # heavier tails than a Gaussian, so estimate the standard error of each covariance
        # entry from the data (fourth moments) instead of the Gaussian formula.
        se_mean = np.sqrt(np.diag(c) / R)
        assert np.abs((x.mean(0) - m) / se_mean).max() < 5.0
        xc = x - x.mean(0)
        prods = xc[:, :, None] * xc[:, None, :]
        se_cov = prods.std(0, ddof=1) / np.sqrt(R)
        assert np.abs((np.cov(x, rowvar=False) - c) / se_cov).max() < 5.0


# -- round kernels: the fast paths are the same algorithm on the same random stream --------

from fedlangevin.fald.kernel import FALDState, fald_round, local_step, make_stepper  # noqa: E402
from fedlangevin.federation.noise import noise_scales  # noqa: E402


def _rounds(problem, kernel, rho, noise_dtype, etas, rounds=4, chains=5, scheme=None, dtype=torch.float64):
    """``rounds`` FA-LD rounds with the given kernel (None: the plain local_step loop)."""
    g = torch.Generator().manual_seed(42)
    scales = noise_scales(problem.weights, 0.9, rho, dtype=dtype, noise_dtype=noise_dtype)
    stepper = None if kernel is None else make_stepper(problem.to(dtype=dtype), dtype, "cpu", kernel=kernel)
    work = problem.to(dtype=dtype)
    state = FALDState(theta=torch.linspace(-1, 1, chains * problem.dim, dtype=dtype).reshape(chains, problem.dim))
    p = problem.weights.to(dtype)
    rule = scheme or fl.Full()
    out = []
    for _ in range(rounds):
        state, _ = fald_round(state, work, etas, scales, rule, p, g, None, stepper)
        out.append(state.theta.clone())
    return torch.stack(out)


def _random_problem(n, d, per_client, seed=0):
    rng = np.random.default_rng(seed)
    shape = (n, d, d) if per_client else (d, d)
    q = rng.standard_normal(shape)
    a = q @ np.swapaxes(q, -1, -2) / d + np.eye(d)
    b = rng.standard_normal((n, d))
    p = rng.uniform(0.5, 1.5, n)
    return QuadraticProblem(a, b, p / p.sum())


@pytest.mark.parametrize("per_client", [False, True])
@pytest.mark.parametrize("d", [2, 9])
@pytest.mark.parametrize("rho", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("noise_dtype", [torch.float32, torch.float64])
def test_every_kernel_gives_the_reference_draws(per_client, d, rho, noise_dtype):
    """Same seed -> the same draws, up to rounding, for the reference loop (local_step), the
    gradient kernel, the coordinate-major affine kernel and the matrix-product affine kernel,
    with varying step sizes within a round. The affine kernels compute (I - eta A) x + eta b
    instead of x - eta (A x - b): the difference is rounding, ~1e-15 relative per step, and
    the maps are contractions, so 1e-10 is a loose bound that still catches any wrong term."""
    problem = _random_problem(4, d, per_client)
    etas = [0.05, 0.04, 0.03]
    ref = _rounds(problem, None, rho, noise_dtype, etas)
    for kernel in ("gradient", "small", "dense"):
        got = _rounds(problem, kernel, rho, noise_dtype, etas)
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10, msg=f"kernel={kernel}")
    assert ref.std() > 0.1  # the runs really move


@pytest.mark.parametrize("per_client", [False, True])
@pytest.mark.parametrize("d", [2, 9])
@pytest.mark.parametrize("rho", [0.0, 0.6])
@pytest.mark.parametrize("noise_dtype", [torch.float32, torch.float64])
def test_every_kernel_tallies_and_takes_given_normals_as_the_reference(per_client, d, rho, noise_dtype):
    """A round's tally (NoiseTally, halves_of=K) and one step with given normals (the coupled
    companion chains' step) through every kernel equal the reference local_step's: the tally sums
    the same draws exactly (promotion to float64 is exact), and the step differs by rounding only
    (1e-10, as above)."""
    from fedlangevin.federation.noise import NoiseTally

    problem = _random_problem(4, d, per_client)
    work, chains = problem.to(dtype=torch.float64), 5
    scales = noise_scales(problem.weights, 0.9, rho, dtype=torch.float64, noise_dtype=noise_dtype)
    theta = torch.linspace(-1, 1, chains * d, dtype=torch.float64).reshape(chains, d)

    def run(kernel):
        g = torch.Generator().manual_seed(3)
        tally = NoiseTally(halves_of=4)
        if kernel is None:
            beta = theta[:, None, :].expand(chains, 4, d).clone()
            for eta in [0.05] * 4:
                local_step(beta, work, eta, scales, g, tally=tally)
        else:
            stepper = make_stepper(work, torch.float64, "cpu", kernel=kernel)
            beta = stepper.local_steps(theta, [0.05] * 4, scales, g, tally=tally).clone()
        given = tally.normals()
        if kernel is None:
            one = theta[:, None, :].expand(chains, 4, d).clone()
            local_step(one, work, 0.2, scales, g, normals=given)
        else:
            one = stepper.local_steps(theta, [0.2], scales, g, normals=given).clone()
        return beta, tally, one

    ref_beta, ref_tally, ref_one = run(None)
    for kernel in ("gradient", "small", "dense"):
        beta, tally, one = run(kernel)
        torch.testing.assert_close(beta, ref_beta, rtol=1e-10, atol=1e-10, msg=f"kernel={kernel}")
        for half in (None, 0, 1):
            for got, want in zip(tally.normals(half), ref_tally.normals(half)):
                assert (got is None) == (want is None)
                if got is not None:
                    assert torch.equal(got, want), f"kernel={kernel}, half={half}"
        torch.testing.assert_close(one, ref_one, rtol=1e-10, atol=1e-10, msg=f"kernel={kernel}")
    assert (ref_one - ref_beta).abs().max() > 1e-3  # the given-normals step really moves


def test_kernels_agree_with_partial_participation_and_float32_state():
    problem = _random_problem(5, 3, True, seed=1)
    etas = [0.05] * 3
    ref = _rounds(problem, None, 0.3, torch.float32, etas, scheme=fl.SchemeI(3), dtype=torch.float32)
    for kernel in ("gradient", "small", "dense"):
        got = _rounds(problem, kernel, 0.3, torch.float32, etas, scheme=fl.SchemeI(3), dtype=torch.float32)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)  # float32 rounding over 12 steps


def test_make_stepper_choices_and_errors():
    small = _random_problem(3, 2, False)
    big = _random_problem(3, 12, False)
    assert type(make_stepper(small, torch.float64, "cpu")).__name__ == "SmallAffineStepper"
    assert type(make_stepper(big, torch.float64, "cpu")).__name__ == "DenseAffineStepper"
    assert type(make_stepper(small, torch.float64, "cpu", batch_size=2)).__name__ == "GradientStepper"
    with pytest.raises(ValueError, match="kernel"):
        make_stepper(small, torch.float64, "cpu", kernel="fused")
    with pytest.raises(ValueError, match="affine"):
        make_stepper(small, torch.float64, "cpu", batch_size=2, kernel="small")


@pytest.mark.parametrize("per_client", [False, True])
@pytest.mark.parametrize("d", [2, 9])
def test_on_step_sees_every_local_step_and_changes_nothing(per_client, d):
    """``on_step(i, beta)`` gets the (R, N, d) client states after local step i: exactly the
    states of a round cut after i + 1 steps from the same generator state (same kernel, same
    random stream, so bit for bit), and a round with the hook equals the round without it."""
    problem = _random_problem(4, d, per_client)
    work = problem.to(dtype=torch.float64)
    scales = noise_scales(problem.weights, 0.9, 0.5, dtype=torch.float64, noise_dtype=torch.float32)
    theta = torch.linspace(-1, 1, 5 * d, dtype=torch.float64).reshape(5, d)
    etas = [0.05, 0.04, 0.03]
    p = problem.weights.to(torch.float64)
    for kernel in (None, "gradient", "small", "dense"):
        stepper = None if kernel is None else make_stepper(work, torch.float64, "cpu", kernel=kernel)
        seen = []

        def hook(i, beta):
            assert beta.shape == (5, 4, d)
            seen.append((i, beta.clone()))

        plain, _ = fald_round(FALDState(theta), work, etas, scales, fl.Full(), p, torch.Generator().manual_seed(3), None,
                              stepper)
        hooked, _ = fald_round(FALDState(theta), work, etas, scales, fl.Full(), p, torch.Generator().manual_seed(3), None,
                               stepper, on_step=hook)
        assert torch.equal(plain.theta, hooked.theta), kernel
        assert [i for i, _ in seen] == [0, 1, 2]
        for i, beta in seen:  # the reference: the kernel run for i + 1 steps alone, without a hook
            g = torch.Generator().manual_seed(3)
            if stepper is None:
                ref = theta.unsqueeze(1).expand(5, 4, d).clone()
                for eta in etas[: i + 1]:
                    local_step(ref, work, eta, scales, g)
            else:
                ref = stepper.local_steps(theta, etas[: i + 1], scales, g)
            assert torch.equal(ref, beta), (kernel, i)
        assert not torch.equal(seen[0][1], seen[-1][1])


def test_fald_round_rejects_a_batch_size_its_stepper_was_not_built_for():
    """A stepper fixes the gradient's batch size; a different batch_size is an error, not ignored."""
    problem = fl.problems.GaussianSimulation(num_clients=5, samples_per_client=10, seed=0)
    stepper = make_stepper(problem, torch.float64, "cpu")
    p = problem.weights.to(torch.float64)
    scales = noise_scales(p, 1.0, 0.0)
    state = FALDState(theta=torch.zeros(2, problem.dim, dtype=torch.float64), step=0, round=0)
    with pytest.raises(ValueError, match="batch_size"):
        fald_round(state, problem, [1e-3], scales, fl.Full(), p, torch.Generator().manual_seed(0), 5, stepper)
