"""The pure kernel ``fald.engine.build -> (init, step)``: equal to the runner, and each extension
point's default bit-identical to the plain round."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch

import fedlangevin as fl
from fedlangevin.fald.engine import build, client_round
from fedlangevin.federation.noise import NoiseTally
from fedlangevin.federation.extensions import FactorPreconditioner, IdentityPreconditioner, InProcessGroup, LocalTransport
from fedlangevin.problems import QuadraticProblem

from tests.targets import random_quadratic

pytestmark = pytest.mark.usefixtures("one_torch_thread")
F64 = torch.float64


def _quadratic(n=5, d=3, seed=0):
    return random_quadratic(n, d, seed)


def _logistic():
    g = torch.Generator().manual_seed(3)
    clients = [(torch.randn(m, 2, generator=g, dtype=F64), torch.randint(0, 3, (m,), generator=g))
               for m in (8, 8, 8, 8, 8)]
    return fl.problems.LogisticRegression(clients, num_classes=3)


def _run(kernel, theta0, etas, rounds, seed):
    g = torch.Generator().manual_seed(seed)
    state = kernel.init(theta0)
    for _ in range(rounds):
        state, info = kernel.step(state, etas, g)
    return state, info


@pytest.mark.parametrize("rule", [fl.Full(), fl.SchemeI(2), fl.SchemeII(3)])
def test_kernel_equals_the_runner_bit_for_bit(rule):
    problem = fl.problems.GaussianSimulation(num_clients=6, alpha=1.0, samples_per_client=5, seed=1)
    if isinstance(rule, fl.SchemeI):
        problem = _quadratic(6, 2)
    sampler = fl.FALD(problem, step_size=1e-3, local_steps=3, correlation=0.4, participation=rule, chains=4, seed=2)
    trace = sampler.run(6, progress=False)
    kernel = build(problem, 1.0, 0.4, rule)
    state, _ = _run(kernel, torch.zeros(4, 2, dtype=F64), [1e-3] * 3, 6, 2)
    assert torch.equal(state.theta, sampler.state.theta)
    assert torch.equal(torch.as_tensor(trace.samples[:, -1]), state.theta)
    assert (state.step, state.round) == (18, 6)


def test_affine_rounds_run_in_inference_mode_and_hand_back_ordinary_tensors():
    """The runner runs affine kernels' rounds under torch.inference_mode (Kernel.autograd_free) and
    the other kernels outside it; the state and draws it hands back are ordinary tensors (a
    further run, autograd and in-place use work). Equality of the draws with the kernel stepped
    outside inference mode: test_kernel_equals_the_runner_bit_for_bit."""
    assert build(_quadratic()).autograd_free and not build(_logistic()).autograd_free
    for problem, expected in ((_quadratic(), True), (_logistic(), False)):
        seen = []

        def upload(beta, theta, generator):  # records the mode the round runs in, changes nothing
            seen.append(torch.is_inference_mode_enabled())
            return beta

        sampler = fl.FALD(problem, step_size=1e-3, local_steps=2, chains=3, seed=0, upload=upload)
        trace = sampler.run(4, progress=False)
        assert seen == [expected] * 4
        theta = sampler.state.theta
        assert not theta.is_inference() and not torch.as_tensor(trace.samples).is_inference()
        theta.add_(0.0)  # in place outside inference mode: refused for an inference tensor
        assert theta.clone().requires_grad_().sum().requires_grad
        sampler.run(2, progress=False)
        assert not torch.is_inference_mode_enabled()


def test_step_does_not_modify_its_input_state():
    kernel = build(_quadratic(), correlation=0.3)
    state = kernel.init(torch.ones(2, 3, dtype=F64))
    before = state.theta.clone()
    new, info = kernel.step(state, [1e-2, 1e-2], torch.Generator().manual_seed(0))
    assert torch.equal(state.theta, before) and not torch.equal(new.theta, before)
    assert info.weights.shape == (5,)


@pytest.mark.parametrize("kernel_name", ["small", "dense", "gradient"])
def test_explicit_defaults_are_bit_identical_to_the_plain_kernel(kernel_name):
    problem = _quadratic()
    theta0 = torch.randn(3, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    plain = build(problem, 1.0, 0.5, fl.SchemeI(3), kernel=kernel_name)
    explicit = build(problem, 1.0, 0.5, fl.SchemeI(3), kernel=kernel_name, preconditioner=IdentityPreconditioner(),
                     transport=LocalTransport(), correction=None, upload=None)
    a, _ = _run(plain, theta0, [1e-2] * 4, 5, 7)
    b, _ = _run(explicit, theta0, [1e-2] * 4, 5, 7)
    assert torch.equal(a.theta, b.theta)


def test_scalar_preconditioner_equals_a_scaled_step_size():
    """A = a I: theta - eta a^2 grad + a sqrt(eta) noise is the plain step with eta' = a^2 eta
    (the same normals; equal up to rounding of the two ways of scaling)."""
    problem = _quadratic()
    theta0 = torch.zeros(4, 3, dtype=F64)
    a, eta = 0.7, 1e-2
    pre = build(problem, 1.0, 0.5, kernel="gradient", preconditioner=FactorPreconditioner(a * torch.eye(3, dtype=F64)))
    ref = build(problem, 1.0, 0.5, kernel="gradient")
    x, _ = _run(pre, theta0, [eta] * 3, 4, 3)
    y, _ = _run(ref, theta0, [a * a * eta] * 3, 4, 3)
    torch.testing.assert_close(x.theta, y.theta, rtol=1e-12, atol=1e-12)


def test_preconditioner_is_a_step_argument_like_the_step_size():
    """M given to step equals M given to build, bit for bit, on the affine fast path's problem and
    on the generic one; M = None in a step is the plain kernel (its fast path); changing M between
    rounds needs no new kernel; a bad M given to step is refused by name."""
    from fedlangevin.federation.preconditioning import DiagonalPreconditioner

    problem = _quadratic()
    theta0 = torch.zeros(4, 3, dtype=F64)
    m1 = FactorPreconditioner(torch.tensor([[1.0, 0.0, 0.0], [0.3, 0.8, 0.0], [0.0, 0.2, 1.2]], dtype=F64))
    m2 = DiagonalPreconditioner(torch.tensor([0.5, 2.0, 1.0], dtype=F64))
    one = build(problem, 1.0, 0.5)
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a = b = one.init(theta0)
    with_m1, with_m2 = build(problem, 1.0, 0.5, preconditioner=m1), build(problem, 1.0, 0.5, preconditioner=m2)
    plain = build(problem, 1.0, 0.5)
    for t, (m, ref) in enumerate([(m1, with_m1), (m1, with_m1), (m2, with_m2), (None, plain), (m1, with_m1)]):
        a, _ = one.step(a, [1e-2] * 2, gen_a, preconditioner=m)
        b, _ = ref.step(b, [1e-2] * 2, gen_b)
        assert torch.equal(a.theta, b.theta), f"round {t}"
    with pytest.raises(ValueError, match="preconditioner"):
        one.step(a, [1e-2], gen_a, preconditioner=FactorPreconditioner(torch.eye(2, dtype=F64)))
    with pytest.raises(ValueError, match="preconditioner"):
        one.step(a, [1e-2], gen_a, preconditioner="x")
    assert one.rounds is not None and with_m1.rounds is None  # rounds in one call: without M only
    with pytest.raises(ValueError, match="preconditioner"):
        one.rounds(a, [[1e-2]], gen_a, preconditioner=m1)


def test_adaptation_installs_m_without_rebuilding_the_kernel():
    """FA-LD's warm-up changes M between rounds through step's argument: one kernel all run long."""
    sampler = fl.FALD(_quadratic(), chains=4, seed=0)
    kernel = sampler.kernel
    sampler.run(rounds=60)
    assert sampler.adapted and sampler.preconditioner is not None and sampler.kernel is kernel


class ConstantShift:
    """A drift correction adding a fixed term t_c to client c's gradient; counts its updates."""

    def __init__(self, t):
        self.t = t

    def init(self, theta):
        return {"rounds": torch.zeros((), dtype=torch.int64)}

    def term(self, state, beta):
        return self.t

    def update(self, state, theta, new_theta, beta, weights, generator):
        return {"rounds": state["rounds"] + 1}

    def keep(self, state, rows):
        return state


def test_drift_correction_term_equals_a_shifted_problem_and_keeps_its_state():
    """grad f^c + t_c = A_c theta - (b_c - t_c): the corrected run is the run on shifts b_c - t_c."""
    problem = _quadratic()
    t = torch.randn(5, 3, generator=torch.Generator().manual_seed(4), dtype=F64)
    shifted = QuadraticProblem(problem.hessians, problem.shifts - t, problem.weights)
    theta0 = torch.zeros(2, 3, dtype=F64)
    x, _ = _run(build(problem, 1.0, 0.2, correction=ConstantShift(t)), theta0, [1e-2] * 2, 5, 9)
    y, _ = _run(build(shifted, 1.0, 0.2, kernel="gradient"), theta0, [1e-2] * 2, 5, 9)
    torch.testing.assert_close(x.theta, y.theta, rtol=1e-12, atol=1e-12)
    assert int(x.correction["rounds"]) == 5


def _grouped(problem, groups, rule, rounds, etas, seed, batch_size=None, correlation=0.5):
    group = InProcessGroup(groups, timeout=30)
    out, errors = [None] * len(groups), []

    def work(rank):
        try:
            kernel = build(problem, 1.0, correlation, rule, batch_size, transport=group.transports[rank])
            out[rank], _ = _run(kernel, torch.zeros(3, problem.dim, dtype=F64), etas, rounds, seed)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(rank,)) for rank in range(len(groups))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    return out


@pytest.mark.parametrize("groups", [[[0, 1], [2, 3, 4]], [[4], [0, 2], [1, 3]]])
@pytest.mark.parametrize("rule", [fl.Full(), fl.SchemeI(3)])
def test_split_clients_give_the_single_process_samples(groups, rule):
    """Each group draws every client's random numbers, keeps its own; the partial sums are added.
    Tolerance: the split changes only the order of the N-term sum over clients, a relative
    rounding of a few float64 ulps per round (rtol 1e-12 over 6 rounds)."""
    problem = _quadratic()
    whole, _ = _run(build(problem, 1.0, 0.5, rule), torch.zeros(3, 3, dtype=F64), [1e-2] * 3, 6, 5)
    for state in _grouped(problem, groups, rule, 6, [1e-2] * 3, 5):
        torch.testing.assert_close(state.theta, whole.theta, rtol=1e-12, atol=1e-13)


def test_split_clients_with_minibatches_give_the_single_process_samples():
    problem = _logistic()
    whole, _ = _run(build(problem, 1.0, 0.3, fl.SchemeII(2), 3), torch.zeros(3, problem.dim, dtype=F64),
                    [1e-3] * 2, 4, 8)
    for state in _grouped(problem, [[0, 3], [1, 2, 4]], fl.SchemeII(2), 4, [1e-3] * 2, 8, batch_size=3,
                          correlation=0.3):
        torch.testing.assert_close(state.theta, whole.theta, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("make", [_quadratic, _logistic])
def test_problem_clients_restricts_gradients_and_keeps_minibatch_draws(make):
    problem = make()
    idx = [3, 0]
    sub = problem.clients(idx)
    assert sub.num_clients == 2 and torch.equal(sub.weights, problem.weights[idx])
    theta = torch.randn(2, problem.num_clients, problem.dim, generator=torch.Generator().manual_seed(0), dtype=F64)
    full = problem.grad(theta)
    assert torch.equal(sub.grad(theta[:, idx]), full[:, idx])
    if problem.client_sizes is not None:
        a = problem.grad(theta, batch_size=2, generator=torch.Generator().manual_seed(1))
        b = sub.grad(theta[:, idx], batch_size=2, generator=torch.Generator().manual_seed(1))
        assert torch.equal(b, a[:, idx])
    with pytest.raises(ValueError, match="indices"):
        problem.clients([0, 0])
    with pytest.raises(ValueError, match="indices"):
        problem.clients([problem.num_clients])


def test_client_round_is_the_kernels_round_for_one_client():
    """N = 1, one generator for shared and private noise: client_round's beta is the kernel's theta."""
    problem = _logistic()
    single = fl.problems.LogisticRegression([(problem.features[2, :8, :2], problem.labels[2, :8])], num_classes=3)
    theta = torch.randn(3, problem.dim, generator=torch.Generator().manual_seed(0), dtype=F64)
    etas = [1e-3, 2e-3]
    beta = client_round(single, theta, etas, weight=1.0, correlation=0.5, shared_generator=None,
                        private_generator=torch.Generator().manual_seed(4), batch_size=3)
    kernel = build(single, 1.0, 0.5, None, 3)
    state, _ = kernel.step(kernel.init(theta), etas, torch.Generator().manual_seed(4))
    assert torch.equal(beta, state.theta)
    with pytest.raises(ValueError, match="one client"):
        client_round(problem, theta, etas, weight=0.5, shared_generator=None, private_generator=None)
    for bad in (0.0, -1.0, math.nan):  # the participation rule's q_c must be > 0 (finite)
        with pytest.raises(ValueError, match="noise_weight"):
            client_round(single, theta, etas, weight=1.0, noise_weight=bad, shared_generator=None, private_generator=None)


@pytest.mark.parametrize("kwargs,name", [
    (dict(temperature=0.0), "temperature"), (dict(correlation=1.5), "correlation"),
    (dict(participation="scheme"), "participation"), (dict(batch_size=2), "batch_size"),
    (dict(transport=object()), "transport"), (dict(transport=InProcessGroup([[0, 7]]).transports[0]), "indices"),
    (dict(dtype=torch.int64), "dtype"), (dict(dtype="half"), "dtype"), (dict(noise_dtype=torch.int32), "noise_dtype"),
    (dict(device="tpu"), "device"),
])
def test_build_rejects_bad_arguments_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        build(_quadratic(), **kwargs)


def test_in_process_group_names_the_groups_that_never_synchronise():
    """One group's kernel run without the others used to wait 60 s and raise a bare
    BrokenBarrierError (the sweep saw a hang): the wait is bounded by ``timeout`` and the error
    names the groups that did not reach the round's synchronisation."""
    from fedlangevin.distributed import RankFailure

    problem = fl.problems.GaussianSimulation(num_clients=5, samples_per_client=5, seed=0)
    group = InProcessGroup([[0, 1], [2, 3, 4]], timeout=0.5)
    assert group.timeout == 0.5
    sampler = fl.FALD(problem, 1e-3, seed=0, transport=group.transports[0])
    start = time.monotonic()
    with pytest.raises(RankFailure, match=r"rank 0 .*round 1.* waited 0.5 s .*rank 1 \(clients \[2, 3, 4\]") as info:
        sampler.run(2)
    assert time.monotonic() - start < 10
    assert info.value.ranks == (1,)
    assert sampler.state.round == 0
    # the group is broken for good: a later call says so at once
    with pytest.raises(RankFailure, match="broken"):
        group.transports[1].reduce(torch.zeros(1, 2, dtype=F64))


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), "5", True])
def test_in_process_group_timeout_must_be_a_positive_number(timeout):
    with pytest.raises(ValueError, match="timeout"):
        InProcessGroup([[0], [1]], timeout=timeout)


# -- the public kernel checks its arguments by name (bad-input sweep, issue 31) -------------------------
@pytest.mark.parametrize("etas, match", [
    ([float("nan")], "step_sizes at step 0 must be finite and > 0"),
    ([1e-3, -1e-3], "step_sizes at step 1 must be finite and > 0"),
    ([float("inf")], "step_sizes at step 0"),
    (1e-3, "step_sizes must be a number or a non-empty 1-d sequence"),  # a scalar where a sequence is expected
    ([], "step_sizes must be a number or a non-empty 1-d sequence"),
    (["x"], "step_sizes must hold real numbers; got strings"),
])
def test_step_refuses_bad_step_sizes_naming_them(etas, match):
    """NaN or negative step sizes used to run (NaN draws) or fail inside with 'math domain error',
    a scalar with a TypeError and an empty list silently counted a round of no steps."""
    kernel = build(_quadratic())
    state = kernel.init(torch.zeros(2, 3, dtype=F64))
    with pytest.raises(ValueError, match=match):
        kernel.step(state, etas, torch.Generator().manual_seed(0))
    # valid step sizes in any sequence form give the same round
    ref, _ = kernel.step(state, [1e-3, 2e-3], torch.Generator().manual_seed(0))
    for form in ((1e-3, 2e-3), torch.tensor([1e-3, 2e-3], dtype=F64)):
        got, _ = kernel.step(state, form, torch.Generator().manual_seed(0))
        assert torch.equal(got.theta, ref.theta) and got.step == 2


@pytest.mark.parametrize("theta0, match", [
    (torch.zeros(0, 3, dtype=F64), r"theta0 must hold at least one chain \(R >= 1\)"),
    (torch.zeros(2, 3, dtype=F64, requires_grad=True), "theta0 must not require grad"),
    (torch.full((2, 3), float("nan"), dtype=F64), "theta0 must be finite"),
    (torch.zeros(2, 2, dtype=F64), r"theta0 must have shape \(R, d = 3\)"),
    ("x", "theta0 must be an array of numbers"),
])
def test_init_refuses_bad_initial_states_naming_theta0(theta0, match):
    with pytest.raises(ValueError, match=match):
        build(_quadratic()).init(theta0)


def test_preconditioner_of_another_dimension_or_type_is_refused_at_build():
    """FactorPreconditioner(I_3) for d = 2 used to fail on the first step with a matrix-shape
    RuntimeError, and preconditioner='x' with a TypeError from torch."""
    from fedlangevin.federation.preconditioning import DiagonalPreconditioner

    problem = _quadratic(d=2)
    for pre in (FactorPreconditioner(torch.eye(3)), DiagonalPreconditioner(torch.ones(3))):
        with pytest.raises(ValueError, match=r"preconditioner: .* is for d = 3; the problem has d = 2"):
            build(problem, preconditioner=pre)
        with pytest.raises(ValueError, match=r"preconditioner: .* is for d = 3; the problem has d = 2"):
            fl.FALD(problem, 1e-3, preconditioner=pre)

    class Wrong:  # an object implementing the preconditioner contract whose drift returns the wrong shape
        matrix = torch.eye(2, dtype=torch.float64)

        def drift(self, grad):
            return grad[..., :1]

        def noise(self, xi):
            return xi

    with pytest.raises(ValueError, match=r"preconditioner: its drift\(\) must return .* shape \(1, 1, 2\).*got shape \(1, 1, 1\)"):
        build(problem, preconditioner=Wrong())
    for bad in ("x", 3, object()):
        with pytest.raises(ValueError, match=r"preconditioner must be None, IdentityPreconditioner\(\), "
                                             r"FactorPreconditioner\(A\), DiagonalPreconditioner\(m\)"):
            build(problem, preconditioner=bad)
    with pytest.raises(ValueError, match=r"preconditioner must be None, a \(d, d\) symmetric positive-definite"):
        fl.FALD(problem, 1e-3, preconditioner="x")
    build(problem, preconditioner=FactorPreconditioner(torch.eye(2)))  # the right d is fine


class _GradProblem(fl.problems.FederatedProblem):
    """Two clients, d = 2, with a given gradient function (e.g. a wrong one)."""

    def __init__(self, grad):
        self.num_clients, self.dim, self._grad = 2, 2, grad
        self.weights = torch.tensor([0.5, 0.5], dtype=F64)

    def grad(self, theta, *, batch_size=None, generator=None):
        return self._grad(theta)

    def to(self, device=None, dtype=None):
        return self


@pytest.mark.parametrize("grad, match", [
    (lambda t: t[..., :1], r"shape \(1, 2, 1\)"),
    (lambda t: t.sum(), r"shape \(\)"),
    (lambda t: t.long(), "torch.int64"),
    (lambda t: t.float(), "torch.float32"),
    (lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"), "device meta"),
    (lambda t: t.numpy(), "ndarray"),
])
@pytest.mark.parametrize("streams", ["single", "per_client"])
def test_a_gradient_of_the_wrong_shape_dtype_or_device_is_refused_before_the_first_round(grad, match, streams):
    """theta[..., :1] or theta.sum() used to be broadcast into the samples, an integer gradient
    added silently: the first gradient is checked once, when the kernel is built."""
    expected = r"problem\.grad .* must return a tensor of shape \(1, 2, 2\), torch.float64 on cpu \(like its theta.*; got"
    with pytest.raises(ValueError, match=expected + ".*" + match):
        fl.FALD(_GradProblem(grad), 1e-3, seed=0, streams=streams)
    with pytest.raises(ValueError, match=expected):
        build(_GradProblem(grad))
    fl.FALD(_GradProblem(lambda t: t.clone()), 1e-3, seed=0, streams=streams).run(2)  # a right gradient runs


@pytest.mark.parametrize("rho", [0.0, 0.6])
def test_a_tally_leaves_the_round_as_it_is_and_sees_the_same_normals_in_every_kernel(rho):
    """``step(..., tally=)``: the round's bits and the generator's end state are those without it, in
    each round kernel (small, dense, gradient) and with M (the general path); the three kernels draw
    the same stream, so their tallies agree. ``normals=`` (one local step) and ``weights=`` replace the
    draws: one step of K eta with the tally of K steps of eta and their participation differs from
    them by the drift's difference alone, a fraction of what the same step with its own draws is off
    (the coupling of fedlangevin.warmup.companions)."""
    problem = _quadratic(n=4, d=3)
    theta0 = torch.randn(6, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    etas = [0.02] * 5
    tallies = []
    for kernel, pre in (("small", None), ("dense", None), ("gradient", None), ("gradient", FactorPreconditioner(torch.tensor([[1.0, 0, 0], [0.3, 0.9, 0], [0, -0.2, 0.7]], dtype=F64)))):
        k = build(problem, correlation=rho, kernel=kernel, participation=fl.SchemeI(2))
        state = k.init(theta0)
        g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        tally = NoiseTally()
        with_tally, info = k.step(state, etas, g1, tally=tally, preconditioner=pre)
        without, _ = k.step(state, etas, g2, preconditioner=pre)
        assert torch.equal(with_tally.theta, without.theta) and torch.equal(g1.get_state(), g2.get_state())
        assert tally.steps == len(etas)
        tallies.append(tally)
    for other in tallies[1:]:
        for a, b in ((tallies[0].shared, other.shared), (tallies[0].private, other.private)):
            assert (a is None) == (b is None) and (a is None or torch.equal(a, b))
    # small steps: the drift differs between K steps of eta and one of K eta by O(K^2 eta^2 |H grad f|),
    # the noise by nothing (coupled) or O(sqrt(K eta)) (fresh draws)
    small, tally = [1e-4] * 5, NoiseTally()
    k = build(problem, correlation=rho, kernel="gradient", participation=fl.SchemeI(2))
    state = k.init(theta0)
    many, info = k.step(state, small, torch.Generator().manual_seed(5), tally=tally)
    coupled, _ = k.step(state, [sum(small)], torch.Generator().manual_seed(9), normals=tally.normals(),
                        weights=info.weights)
    fresh, _ = k.step(state, [sum(small)], torch.Generator().manual_seed(9))
    assert (coupled.theta - many.theta).abs().max() < 0.01 * (fresh.theta - many.theta).abs().max()
    with pytest.raises(ValueError, match="normals: given for one local step"):
        k.step(state, etas, None, normals=tally.normals())
