"""The FA-HMC kernel (fedlangevin/fahmc/kernel.py): its law against the exact moments of
fedlangevin/fahmc/exact.py within Monte Carlo error, K = 1 as one centralised step, one gradient
per local step, purity and the contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.fahmc import FAHMCState, build
from fedlangevin.fahmc.kernel import OVERDAMPED
from fedlangevin.fahmc.exact import exact_moments
from fedlangevin.federation.contracts import KERNEL, conformance
from fedlangevin.federation.preconditioning import as_preconditioner
from fedlangevin.problems import QuadraticProblem
from tests.targets import small_problem_arrays

pytestmark = pytest.mark.usefixtures("one_torch_thread")

THETA0 = [1.0, -1.0]


def heterogeneous(balanced: bool = False) -> QuadraticProblem:
    """Three clients in 2-d with different curvatures (1-3, 5-15, 0.3-0.9) and shifts; weights
    (0.5, 0.3, 0.2), or 1/3 each (scheme II needs balanced clients)."""
    h, b, p = small_problem_arrays()
    weights = np.full(3, 1 / 3) if balanced else p
    return QuadraticProblem(torch.tensor(h), torch.tensor(b), torch.tensor(weights))


def run_chains(kernel, rounds: int, k: int, h: float, chains: int, seed: int) -> np.ndarray:
    """(R, rounds, 2d): every chain's (theta, v) after each round, from THETA0 and zero momentum."""
    gen = torch.Generator().manual_seed(seed)
    state = kernel.init(torch.tensor(THETA0, dtype=torch.float64).expand(chains, 2))
    out = []
    for _ in range(rounds):
        state, _ = kernel.step(state, [h] * k, gen)
        out.append(torch.cat([state.theta, state.momentum], 1).numpy())
    return np.stack(out, 1)


def assert_within_mc_error(x: np.ndarray, means: np.ndarray, covs: np.ndarray, z: float = 5.0) -> None:
    """Chains x (R, T, D) against exact moments (T, D), (T, D, D). Each mean is within z standard
    errors sqrt(var / R); each covariance entry within z standard errors of the sample covariance,
    estimated from the chains themselves (sd of (x_i - m_i)(x_j - m_j) / sqrt(R)): partial
    participation makes the law a mixture, so the Gaussian formula for that error would not hold.
    With |z| < 5, a false failure has probability 5.7e-7 per comparison (14 per round here)."""
    r = x.shape[0]
    for t in range(len(means)):
        xt = x[:, t]
        sd = np.sqrt(np.diag(covs[t]))
        zm = (xt.mean(0) - means[t]) / (sd / math.sqrt(r))
        assert np.all(np.abs(zm) < z), (t, zm)
        dev = xt - xt.mean(0)
        prod = dev[:, :, None] * dev[:, None, :]                     # (R, D, D)
        se = prod.std(0) / math.sqrt(r)
        zc = (prod.mean(0) - covs[t]) / se
        assert np.all(np.abs(zc) < z), (t, zc)


CASES = [(k, rho, rule) for k in (1, 5) for rho in (0.0, 0.5) for rule in ("full", "I", "II")]


@pytest.mark.parametrize("k,rho,rule", CASES)
def test_the_kernel_has_the_exact_law_of_theta_and_momentum(k, rho, rule):
    """R = 4000 chains, 6 rounds of K local steps (h = 0.2, gamma = 1) from a point: every round's
    mean and covariance of the stacked (theta, v) match fahmc.exact within Monte Carlo error, for
    full participation and schemes I and II (S = 2 of 3 clients)."""
    participation = {"full": None, "I": fl.SchemeI(2), "II": fl.SchemeII(2)}[rule]
    problem = heterogeneous(balanced=rule == "II")
    kernel = build(problem, correlation=rho, participation=participation, friction=1.0)
    x = run_chains(kernel, 6, k, 0.2, 4000, seed=10 * k + int(10 * rho))
    means, covs = exact_moments(problem, [[0.2] * k] * 6, 1.0, correlation=rho, participation=participation,
                                init_mean=THETA0)
    assert_within_mc_error(x, means, covs)


@pytest.mark.parametrize("rule", ["I", "II"])
def test_the_kernel_has_the_exact_law_with_the_papers_noise(rule):
    """As above (K = 5, rho = 0.5, R = 4000, 6 rounds) with the paper's refresh noise (noise="paper":
    private scale 1 / sqrt(p_c) whatever the rule): the exact law models either rule's noise (the
    cases above run the default, calibrated one)."""
    participation = {"I": fl.SchemeI(2, noise="paper"), "II": fl.SchemeII(2, noise="paper")}[rule]
    problem = heterogeneous(balanced=rule == "II")
    kernel = build(problem, correlation=0.5, participation=participation, friction=1.0)
    x = run_chains(kernel, 6, 5, 0.2, 4000, seed=99)
    means, covs = exact_moments(problem, [[0.2] * 5] * 6, 1.0, correlation=0.5, participation=participation,
                                init_mean=THETA0)
    assert_within_mc_error(x, means, covs)


@pytest.mark.parametrize("splitting,pre", [("OBABO", [[0.5, 0.1], [0.1, 0.2]]), ("BAOAB", [0.3, 0.6]),
                                            ("OBABO", None)])
def test_the_law_with_a_preconditioner_and_either_splitting(splitting, pre):
    """A dense and a diagonal preconditioner M, both splittings, K = 3, rho = 0.5, scheme I: as above."""
    problem = heterogeneous()
    kernel = build(problem, correlation=0.5, participation=fl.SchemeI(2), friction=2.0, preconditioner=pre,
                   splitting=splitting, noise_dtype=torch.float64)
    x = run_chains(kernel, 5, 3, 0.25, 4000, seed=7)
    means, covs = exact_moments(problem, [[0.25] * 3] * 5, 2.0, correlation=0.5, participation=fl.SchemeI(2),
                                preconditioner=pre, splitting=splitting, init_mean=THETA0)
    assert_within_mc_error(x, means, covs)


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_one_round_of_one_step_is_one_centralised_step(splitting):
    """K = 1 with rho = 1 (every client draws the same normals): the averaged round is, draw for
    draw, one step of the centralised integrator on f = sum_c p_c f^c, written out here (to
    rounding: the sums over clients are formed in another order)."""
    problem = heterogeneous()
    mass = torch.tensor([[0.5, 0.1], [0.1, 0.2]], dtype=torch.float64)
    kernel = build(problem, correlation=1.0, friction=1.5, preconditioner=mass, splitting=splitting)
    theta = torch.tensor([[0.3, -0.7], [1.0, 2.0]], dtype=torch.float64)
    v = torch.tensor([[0.1, 0.2], [-0.3, 0.0]], dtype=torch.float64)
    state = FAHMCState(theta, v)
    new, info = kernel.step(state, [0.3], torch.Generator().manual_seed(5))
    # the centralised step, by hand
    a_glob, b_glob = problem.global_hessian, problem.global_shift
    force = lambda t: -(t @ a_glob - b_glob) @ mass        # -M grad f (M symmetric)
    factor = torch.linalg.cholesky(mass)
    xi = torch.randn((2, 1, 2), generator=torch.Generator().manual_seed(5), dtype=torch.float32)[:, 0].double()
    h, a = 0.3, math.exp(-1.5 * 0.3)
    noise = math.sqrt(1 - a * a) * xi @ factor.T
    if splitting == "BAOAB":
        vv = v + h * force(theta)
        tt = theta + h / 2 * vv
        vv = a * vv + noise
        tt = tt + h / 2 * vv
    else:
        vv = v + h / 2 * force(theta)
        vv = a * vv + noise
        vv = vv + h / 2 * force(theta)
        tt = theta + h * vv
    torch.testing.assert_close(new.theta, tt, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(new.momentum, vv, rtol=1e-12, atol=1e-12)
    assert (new.step, new.round) == (1, 1) and torch.equal(info.weights, problem.weights)
    assert torch.equal(state.theta, theta) and torch.equal(state.momentum, v)  # the input state is untouched


class Counting(QuadraticProblem):
    """A quadratic problem that counts its gradient calls and the client states they see."""

    calls: list

    def grad(self, theta, *, batch_size=None, generator=None):
        self.calls.append(tuple(theta.shape))
        return super().grad(theta, batch_size=batch_size, generator=generator)

    def to(self, device=None, dtype=None):
        return self


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_one_gradient_per_local_step_for_every_chain_and_client_at_once(splitting):
    h, b, p = small_problem_arrays()
    problem = Counting(torch.tensor(h), torch.tensor(b), torch.tensor(p))
    problem.calls = []
    kernel = build(problem, friction=1.0, splitting=splitting)
    problem.calls.clear()                                          # build probes the gradient once
    state = kernel.init(torch.zeros(7, 2, dtype=torch.float64))
    kernel.step(state, [0.1] * 4, torch.Generator().manual_seed(0))
    assert problem.calls == [(7, 3, 2)] * 4                        # K calls, each on (R, N, d)


def test_the_kernel_conforms_and_reports_its_settings():
    problem = heterogeneous()
    kernel = build(problem, temperature=2.0, correlation=0.3, participation=fl.SchemeI(2), friction=0.5,
                   preconditioner=[1.0, 2.0])
    assert conformance(kernel, KERNEL) == []
    settings = kernel.settings()
    assert settings["sampler"] == "FA-HMC" and settings["scheme"] == "I" and settings["num_sampled"] == 2
    assert settings["temperature"] == 2.0 and settings["preconditioner"].startswith("DiagonalPreconditioner")
    record = kernel.record()
    assert record["friction"] == 0.5 and record["splitting"] == "BAOAB" and record["preconditioner"]["values"] == [1.0, 2.0]
    torch.testing.assert_close(kernel.preconditioner_matrix, torch.diag(torch.tensor([1.0, 2.0], dtype=torch.float64)))
    state = kernel.init(torch.ones(3, 2, dtype=torch.float64))
    assert torch.equal(state.momentum, torch.zeros(3, 2, dtype=torch.float64))   # the momentum starts at zero


def test_minibatch_gradients_run_with_their_own_draws():
    """batch_size: minibatch gradients from the round's generator; the same seed gives the same round."""
    problem = fl.problems.GaussianSimulation(num_clients=4, alpha=1.0, samples_per_client=20, seed=0)
    kernel = build(problem, batch_size=5, friction=1.0)
    state = kernel.init(torch.zeros(3, problem.dim, dtype=torch.float64))
    one, _ = kernel.step(state, [0.05, 0.05], torch.Generator().manual_seed(1))
    two, _ = kernel.step(state, [0.05, 0.05], torch.Generator().manual_seed(1))
    assert torch.equal(one.theta, two.theta) and torch.equal(one.momentum, two.momentum)
    full, _ = build(problem, friction=1.0).step(state, [0.05, 0.05], torch.Generator().manual_seed(1))
    assert not torch.equal(one.theta, full.theta)


@pytest.mark.parametrize("name,kwargs", [
    ("friction", dict(friction=0.0)), ("friction", dict(friction=float("nan"))), ("friction", dict(friction="1")),
    ("friction", dict(friction=True)), ("friction", dict(friction=-1.0)), ("friction", dict(friction=math.inf)),
    ("splitting", dict(splitting="leapfrog")), ("preconditioner", dict(preconditioner=[1.0, -1.0])),
    ("preconditioner", dict(preconditioner=torch.eye(3))),
    ("correlation", dict(correlation=1.5)), ("temperature", dict(temperature=0.0)),
])
def test_build_refuses_bad_arguments_by_name(name, kwargs):
    with pytest.raises(ValueError, match=name):
        build(heterogeneous(), **kwargs)
    kernel = build(heterogeneous())
    with pytest.raises(ValueError, match="step_sizes"):
        kernel.step(kernel.init(torch.zeros(1, 2, dtype=torch.float64)), [0.1, -0.1], None)


@pytest.mark.parametrize("rule", ["full", "I"])
def test_obabo_at_infinite_friction_draws_fald_samples(rule):
    """gamma h > 745 makes a = exp(-gamma h) = 0: OBABO's local step is FA-LD's eq. 10 with
    eta = h^2 / 2, drawing the same random numbers in the same order (gradient, shared normals,
    private normals; the participation draw after the K steps), so with one seed the kernel's
    chains are FA-LD's kernel's, draw for draw (to rounding: the operations differ), over
    several rounds of K = 3 with rho = 0.5 and a preconditioner."""
    participation = {"full": None, "I": fl.SchemeI(2)}[rule]
    problem, h, mass = heterogeneous(), 0.2, [[0.6, 0.15], [0.15, 0.3]]
    hmc = build(problem, correlation=0.5, participation=participation, friction=1e4, splitting="OBABO",
                preconditioner=mass)
    fald = fl.fald.build(problem, correlation=0.5, participation=participation, kernel="gradient",
                         preconditioner=as_preconditioner(mass, 2))
    theta0 = torch.tensor(THETA0, dtype=torch.float64).expand(5, 2)
    s1, s2 = hmc.init(theta0), fald.init(theta0)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(4):
        s1, _ = hmc.step(s1, [h] * 3, g1)
        s2, _ = fald.step(s2, [h * h / 2] * 3, g2)
        torch.testing.assert_close(s1.theta, s2.theta, rtol=1e-10, atol=1e-12)
    assert torch.equal(g1.get_state(), g2.get_state())


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_the_overdamped_step_argument_draws_fald_samples_for_either_splitting(splitting):
    """friction=OVERDAMPED as a step argument is FA-LD's eq. 10 with eta = h^2 / 2 for either splitting
    (the warm-up's first phase): draw for draw with one seed, as the test above, K = 3, rho = 0.5, scheme
    I, a preconditioner given as a step argument too."""
    problem, h, mass = heterogeneous(), 0.2, [[0.6, 0.15], [0.15, 0.3]]
    hmc = build(problem, correlation=0.5, participation=fl.SchemeI(2), friction=0.7, splitting=splitting)
    fald = fl.fald.build(problem, correlation=0.5, participation=fl.SchemeI(2), kernel="gradient")
    pre = as_preconditioner(mass, 2)
    theta0 = torch.tensor(THETA0, dtype=torch.float64).expand(5, 2)
    s1, s2 = hmc.init(theta0), fald.init(theta0)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(4):
        s1, _ = hmc.step(s1, [h] * 3, g1, preconditioner=pre, friction=OVERDAMPED)
        s2, _ = fald.step(s2, [h * h / 2] * 3, g2, preconditioner=pre)
        torch.testing.assert_close(s1.theta, s2.theta, rtol=1e-10, atol=1e-12)
    assert torch.equal(g1.get_state(), g2.get_state())


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_step_arguments_equal_a_kernel_built_with_them_bit_for_bit(splitting):
    """M and gamma given to step are M and gamma given to build, bit for bit, across changes of both
    (so the warm-up that adapts them never rebuilds the kernel); None is M = I."""
    problem, mass = heterogeneous(), [[0.6, 0.15], [0.15, 0.3]]
    plain = build(problem, splitting=splitting)
    theta0 = torch.tensor(THETA0, dtype=torch.float64).expand(4, 2)
    s = plain.init(theta0)
    for pre, gamma in [(mass, 0.5), (None, 2.0), ([0.3, 0.6], 0.5), (mass, 1.0)]:
        built = build(problem, friction=gamma, preconditioner=pre, splitting=splitting)
        one, _ = plain.step(s, [0.3], torch.Generator().manual_seed(5), preconditioner=pre, friction=gamma)
        two, _ = built.step(s, [0.3], torch.Generator().manual_seed(5))
        assert torch.equal(one.theta, two.theta) and torch.equal(one.momentum, two.momentum)
        s = one


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), -math.inf, "1", True])
def test_a_bad_step_friction_is_refused_by_name(value):
    kernel = build(heterogeneous())
    with pytest.raises(ValueError, match="friction"):
        kernel.step(kernel.init(torch.zeros(1, 2, dtype=torch.float64)), [0.1], None, friction=value)
    with pytest.raises(ValueError, match="preconditioner"):
        kernel.step(kernel.init(torch.zeros(1, 2, dtype=torch.float64)), [0.1], None, preconditioner=[1.0, -1.0])


class _Holds:
    """A transport holding some clients whose reduce keeps the partial sums it is given (the sum over
    processes is then the test's: two such kernels are the two processes of a W = 2 run)."""

    def __init__(self, clients) -> None:
        self.clients, self.partials = clients, []

    def reduce(self, partial):
        self.partials.append(partial.clone())
        return partial


@pytest.mark.parametrize("splitting", ["BAOAB", "OBABO"])
def test_two_kernels_holding_half_the_clients_each_sum_to_the_whole_round(splitting):
    """With a transport the kernel runs its clients' local steps only and reduces the stacked
    partial sums (theta, v), (2, R, d), once a round; drawing every random number as one process
    does (minibatches, private normals, participation), the two halves' partials add up to the
    one-process round. Tolerance 1e-12: the sums over clients are added in another order (a few ulp
    of O(1) values), while a wrong draw or slice is O(0.1)."""
    g = torch.Generator().manual_seed(0)
    problem = fl.problems.LogisticRegression(
        [(torch.randn(6, 2, generator=g, dtype=torch.float64), torch.randint(0, 2, (6,), generator=g))
         for _ in range(5)], num_classes=2)
    args = dict(correlation=0.6, participation=fl.SchemeI(3), batch_size=2, splitting=splitting,
                preconditioner=torch.linspace(0.5, 1.5, problem.dim).double())
    whole = build(problem, **args)
    halves = [_Holds([0, 1, 2]), _Holds([3, 4])]
    kernels = [build(problem, transport=t, **args) for t in halves]
    theta0 = torch.randn(4, problem.dim, generator=g, dtype=torch.float64)
    state, info = whole.step(whole.init(theta0), [0.2, 0.3], torch.Generator().manual_seed(7))
    for kernel in kernels:
        _, got_info = kernel.step(kernel.init(theta0), [0.2, 0.3], torch.Generator().manual_seed(7))
        assert torch.equal(got_info.weights, info.weights)  # every process draws the same participation
    assert [tuple(t.partials[0].shape) for t in halves] == [(2, 4, problem.dim)] * 2  # one reduce of (theta, v)
    total = halves[0].partials[0] + halves[1].partials[0]
    torch.testing.assert_close(total[0], state.theta, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(total[1], state.momentum, rtol=1e-12, atol=1e-12)
    assert float((halves[0].partials[0][0] - state.theta).abs().max()) > 0.01  # one half is not the whole sum


def test_a_transport_holding_every_client_leaves_the_round_bit_identical():
    problem = heterogeneous()
    plain, held = build(problem, correlation=0.5), build(problem, correlation=0.5, transport=_Holds(None))
    theta0 = torch.randn(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a, _ = plain.step(plain.init(theta0), [0.1, 0.2], torch.Generator().manual_seed(3))
    b, _ = held.step(held.init(theta0), [0.1, 0.2], torch.Generator().manual_seed(3))
    assert torch.equal(a.theta, b.theta) and torch.equal(a.momentum, b.momentum)
