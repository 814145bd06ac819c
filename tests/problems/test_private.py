"""The private gradient of every problem type (FederatedProblem.private_grad, problems/private.py).

Per-example gradients against a batch-size-1 loop (one autograd call of an independent
per-row loss per chain, client and row), the clipping bound, the enforcement of the derived
sensitivity against an outlier record, private minibatches (fixed size, no repeats, uniform
over subsets), restrictions to some clients, and refusals before any work.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import fedlangevin as fl
from fedlangevin.privacy import ClientLevel, RecordLevel
from fedlangevin.problems import private
from fedlangevin.problems.base import ClientSubset, FederatedProblem

F64 = torch.float64
SIZES = (5, 8, 6)
R, B = 2, 4  # chains, minibatch rows

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors (tests/conftest.py)


def _regression(seed=0, outlier=1.0):
    """Per-client (X (n_c, 2), y (n_c,)); ``outlier`` multiplies y of client 0's row 0."""
    g = torch.Generator().manual_seed(seed)
    out = [(torch.randn(n, 2, generator=g, dtype=F64), torch.randn(n, generator=g, dtype=F64)) for n in SIZES]
    out[0][1][0] *= outlier
    return out


def _classification(seed=0, outlier=1.0):
    """Per-client (X (n_c, 3), y (n_c,)) with 3 classes; ``outlier`` multiplies x of client 0's row 0."""
    g = torch.Generator().manual_seed(seed)
    out = [(torch.randn(n, 3, generator=g, dtype=F64), torch.randint(0, 3, (n,), generator=g)) for n in SIZES]
    out[0][0][0] *= outlier
    return out


def _sq_loss(theta, X, y):
    """Gaussian linear regression with sigma = exp(theta[2]): sum over rows of 1/2 r^2 / sigma^2 + log sigma."""
    resid = X @ theta[:2] - y
    return 0.5 * (resid * resid).sum() * torch.exp(-2 * theta[2]) + X.shape[0] * theta[2]


def _sq_energy(theta, batch):
    """The CustomProblem energy: ``_sq_loss`` of a batch (X, y)."""
    return _sq_loss(theta, *batch)


def _pyro_model(data):
    import pyro
    import pyro.distributions as dist

    X, y = data
    beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), 0.5).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(X.new_tensor(2.0)))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)


class Case:
    """A problem of one type, built on data with an optional outlier, and an independent per-row loss."""

    def __init__(self, name):
        self.name = name

    def build(self, outlier=1.0):
        if self.name == "logistic":
            return fl.problems.LogisticRegression(_classification(outlier=outlier), num_classes=3, prior_scale=2.0)
        if self.name == "gaussian":
            problem = fl.problems.GaussianSimulation(num_clients=3, samples_per_client=list(SIZES), prior_precision=0.5)
            problem.data[0, 0] *= outlier  # the rows the private path reads (grad reads the shifts)
            return problem
        if self.name == "custom":
            return fl.problems.CustomProblem(_sq_energy, _regression(outlier=outlier), dim=3, rowwise=True,
                                             prior=lambda t: 0.5 * (t * t).sum())
        if self.name in ("pyro", "pyro-loop"):
            pytest.importorskip("pyro")
            return fl.problems.PyroProblem(_pyro_model, _regression(outlier=outlier),
                                           vectorize=False if self.name == "pyro-loop" else None)
        if self.name == "subset":  # the wrapper of FederatedProblem.clients, around a problem that has no restriction
            return ClientSubset(Case("custom").build(outlier), [0, 2])
        raise KeyError(self.name)

    def far(self, theta):
        """theta where the outlier's gradient is ~1e6 times the others': for the logistic problem
        the weights are set to 0 (the biases kept), so that softmax(W x + b) does not saturate at
        the outlier x and its gradient (s - e_y) (x, 1) grows with x."""
        if self.name == "logistic":
            theta = theta.clone()
            theta.view(*theta.shape[:-1], 3, 4)[..., :3] = 0.0
        return theta

    def row_loss(self, problem, theta, c, j):
        """l(theta; x_cj) computed apart from the problem's gradient code, for autograd."""
        if self.name == "logistic":
            X, y = _classification()[c]
            w = theta.reshape(3, 4)
            return -torch.log_softmax(w[:, :3] @ X[j] + w[:, 3], 0)[y[j]]
        if self.name == "gaussian":
            diff = theta - problem.data[c, j]
            return 0.5 * diff @ torch.linalg.solve(problem.cov, diff)
        if self.name == "subset":
            X, y = _regression()[[0, 2][c]]
            return _sq_loss(theta, X[j:j + 1], y[j:j + 1])
        X, y = _regression()[c]
        if self.name == "custom":
            return _sq_loss(theta, X[j:j + 1], y[j:j + 1])  # the user's energy on a batch of one row
        # pyro: -log N(y | x beta, sigma), sigma = exp(z) (HalfNormal's support through biject_to)
        return -torch.distributions.Normal(X[j] @ theta[:2], torch.exp(theta[2])).log_prob(y[j])


CASES = ["logistic", "gaussian", "custom", "pyro", "pyro-loop", "subset"]


def _theta(problem, seed=3, scale=0.4):
    return scale * torch.randn(R, problem.num_clients, problem.dim, generator=torch.Generator().manual_seed(seed),
                               dtype=F64)


def _gen(seed=7):
    return torch.Generator().manual_seed(seed)


def _loop_grads(case, problem, theta, rows):
    """The batch-size-1 loop: one autograd call per chain, client and row."""
    out = torch.empty(*rows.shape, problem.dim, dtype=F64)
    for r, c, i in itertools.product(*map(range, rows.shape)):
        t = theta[r, c].clone().requires_grad_(True)
        (out[r, c, i],) = torch.autograd.grad(case.row_loss(problem, t, c, int(rows[r, c, i])), t)
    return out


# -- per-example gradients -------------------------------------------------------------------------
@pytest.mark.parametrize("name", CASES)
def test_per_example_gradients_equal_a_batch_size_one_loop(name):
    case = Case(name)
    problem = case.build()
    theta = _theta(problem)
    rows = problem.private_rows(R, B, generator=_gen())
    every = torch.arange(min(problem.client_sizes)).expand(R, problem.num_clients, -1)  # every row the clients share
    for idx in (rows, every):
        torch.testing.assert_close(problem.per_example_grads(theta, idx), _loop_grads(case, problem, theta, idx),
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("privacy", [RecordLevel(clip=1e12), ClientLevel(clip=1e12)])
def test_a_clip_no_gradient_reaches_gives_the_unprivate_full_gradient(name, privacy):
    """Nothing clipped: (1/p_c) sum_i g_i + grad U_0 is grad f^c (the scaling of the unclipped estimate)."""
    problem = Case(name).build()
    theta = _theta(problem)
    torch.testing.assert_close(problem.private_grad(theta, privacy), problem.grad(theta), rtol=1e-12, atol=1e-11)


@pytest.mark.parametrize("name", CASES)
def test_a_private_minibatch_gradient_is_the_scaled_clipped_sum_plus_the_prior(name):
    """(1/p_c)(n_c/b) sum_i clip_C(g_i) + grad U_0 over the rows private_rows draws from the same seed."""
    problem = Case(name).build()
    theta = _theta(problem)
    rows = problem.private_rows(R, B, generator=_gen())
    g = problem.per_example_grads(theta, rows)
    clip = 0.5 * float(torch.linalg.vector_norm(g, dim=-1).median())  # about half the gradients are clipped
    norms = torch.linalg.vector_norm(g, dim=-1, keepdim=True)
    clipped = torch.where(norms > clip, g * (clip / norms), g)
    scale = problem.client_sizes.to(F64) / (problem.weights * B)
    expected = clipped.sum(2) * scale[:, None] + problem.prior_grad(theta)
    got = problem.private_grad(theta, RecordLevel(clip=clip), batch_size=B, generator=_gen())
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    data = (g.sum(2) * scale[:, None]).clone()
    expected = data * (clip / torch.linalg.vector_norm(data, dim=-1, keepdim=True)).clamp(max=1) + problem.prior_grad(theta)
    got = problem.private_grad(theta, ClientLevel(clip=clip), batch_size=B, generator=_gen())
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


# -- the clipping bound and its enforcement --------------------------------------------------------
@pytest.mark.parametrize("name", CASES)
def test_each_clipped_per_example_term_has_norm_at_most_the_clip(name):
    """With b = 1 the data term is (n_c / p_c) clip_C(g) for the one drawn row: its norm is
    min(C, ||g||), to rounding (a few ulp of the rescaling g C / ||g||: 1e-12 relative)."""
    problem = Case(name).build()
    theta = _theta(problem, scale=2.0)
    g = problem.per_example_grads(theta, problem.private_rows(R, 1, generator=_gen()))[:, :, 0]
    norms = torch.linalg.vector_norm(g, dim=-1)
    clip = float(norms.median())  # the lower median of 6 norms: some above, some below
    got = problem.private_grad(theta, RecordLevel(clip=clip), batch_size=1, generator=_gen()) - problem.prior_grad(theta)
    term = torch.linalg.vector_norm(got * (problem.weights / problem.client_sizes.to(F64))[:, None], dim=-1)
    assert bool((term <= clip * (1 + 1e-12)).all())
    torch.testing.assert_close(term, norms.clamp(max=clip), rtol=1e-12, atol=0.0)
    assert bool((norms > clip).any()) and bool((norms < clip).any())  # both branches of the clipping ran


@pytest.mark.parametrize("name", ["logistic", "gaussian", "custom", "pyro"])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_an_outlier_record_moves_the_private_gradient_by_at_most_the_derived_bound(name, batch_size):
    """Two datasets differing in client 0's row 0, one of them with a gradient ~1e6 times the
    others': at the same theta and seed the record-level gradients differ by at most
    (1/p_c)(n_c/b) 2C (2C / p_c in full batch); without clipping (C = 1e300) by far more."""
    case = Case(name)
    plain, outlier = case.build(), case.build(outlier=1e6)
    chains = 16  # b = 3 of n_0 = 5 rows: some chains draw row 0 (and the test checks that they do)
    theta = case.far(_theta(plain, scale=0.3).repeat(chains // R, 1, 1))
    clip = 0.1
    scale = 1.0 / plain.weights if batch_size is None else plain.client_sizes.to(F64) / (plain.weights * batch_size)
    bound = float(scale[0]) * RecordLevel(clip=clip).sensitivity

    def change(c):
        a = plain.private_grad(theta, RecordLevel(clip=c), batch_size=batch_size, generator=_gen())
        b = outlier.private_grad(theta, RecordLevel(clip=c), batch_size=batch_size, generator=_gen())
        return torch.linalg.vector_norm(b - a, dim=-1)

    clipped, unclipped = change(clip), change(1e300)
    assert float(clipped[:, 0].max()) <= bound * (1 + 1e-12)
    assert float(clipped[:, 1:].max()) <= 1e-9 * bound  # the other clients' data did not change
    drew = unclipped[:, 0] > 0  # the chains whose minibatch held row 0 (all of them in full batch)
    assert int(drew.sum()) >= (chains if batch_size is None else 4)
    assert float(unclipped[drew, 0].min()) > 1e3 * bound


@pytest.mark.parametrize("name", ["logistic", "custom", "pyro"])
def test_client_level_bounds_the_change_of_a_clients_data_term_by_twice_the_clip(name):
    case = Case(name)
    plain, outlier = case.build(), case.build(outlier=1e6)
    theta = case.far(_theta(plain))
    a = plain.private_grad(theta, ClientLevel(clip=0.1))
    b = outlier.private_grad(theta, ClientLevel(clip=0.1))
    assert float(torch.linalg.vector_norm(b - a, dim=-1)[:, 0].max()) <= 0.2 * (1 + 1e-12)
    assert float(torch.linalg.vector_norm(outlier.grad(theta) - plain.grad(theta), dim=-1)[:, 0].min()) > 1e3


# a record whose gradient's squared norm overflows float64 (||g|| ~ 1e160 where g is linear in the record;
# custom and pyro: y x 1e100, whose gradient in log sigma is ~ r^2 ~ 1e200)
HUGE = {"logistic": 1e160, "gaussian": 1e160, "custom": 1e100, "pyro": 1e100}


@pytest.mark.parametrize("name", list(HUGE))
@pytest.mark.parametrize("privacy", [RecordLevel(clip=0.1), ClientLevel(clip=0.1)], ids=["record", "client"])
def test_any_finite_record_is_clipped_to_the_clip_like_a_moderate_outlier(name, privacy):
    """Clipping is robust to any finite record: the private gradient with an outlier whose gradient norm
    squared overflows is finite, within the derived bound of the data without it, and equal (to the
    direction's change, 1e-5 of the bound) to the gradient with a 1e6 outlier, which the clipping also
    scales to norm C: the norms are computed without overflow (they were inf, and 0 x inf made NaN)."""
    case = Case(name)
    plain, moderate, huge = case.build(), case.build(outlier=1e6), case.build(outlier=HUGE[name])
    theta = case.far(_theta(plain, scale=0.3))
    a, b, c = (p.private_grad(theta, privacy) for p in (plain, moderate, huge))
    assert bool(torch.isfinite(c).all())
    bound = privacy.sensitivity * (float(1.0 / plain.weights[0]) if privacy.adjacency == "record" else 1.0)
    assert float(torch.linalg.vector_norm(c - a, dim=-1)[:, 0].max()) <= bound * (1 + 1e-12)
    torch.testing.assert_close(c, b, rtol=0.0, atol=1e-5 * bound)
    assert float(torch.linalg.vector_norm(c - a, dim=-1)[:, 0].min()) > 1e-3 * bound  # the record does count


@pytest.mark.parametrize("privacy", [RecordLevel(clip=0.1), ClientLevel(clip=0.1)], ids=["record", "client"])
def test_a_huge_record_that_the_softmax_saturates_at_gives_a_finite_gradient(privacy):
    """Where softmax(W x + b) saturates at a huge x (s - e_y = 0 exactly in some chain), the old norm
    ||s - e_y|| ||x|| was 0 x inf = NaN and the run stopped; the gradient is finite, within the bound."""
    case = Case("logistic")
    plain, huge = case.build(), case.build(outlier=1e160)
    theta = _theta(plain, scale=1.0)
    a, c = plain.private_grad(theta, privacy), huge.private_grad(theta, privacy)
    assert bool(torch.isfinite(c).all())
    bound = privacy.sensitivity * (float(1.0 / plain.weights[0]) if privacy.adjacency == "record" else 1.0)
    assert float(torch.linalg.vector_norm(c - a, dim=-1)[:, 0].max()) <= bound * (1 + 1e-12)


@pytest.mark.parametrize("scale", [1.0, 1e-200, 1e200, 1e307])
def test_clip_norms_scales_any_finite_vector_to_norm_at_most_the_clip(scale):
    g = torch.tensor([[3.0, 4.0], [0.0, 0.0], [1e-3, 0.0]], dtype=F64) * scale
    out = private.clip_norms(g, 1.0)
    assert bool(torch.isfinite(out).all())
    # norms 5 s, 0 and 1e-3 s: a row above C = 1 is scaled to norm 1, the others are unchanged
    expected = g.clone()
    if 5 * scale > 1:
        expected[0] = torch.tensor([0.6, 0.8], dtype=F64)
    if 1e-3 * scale > 1:
        expected[2] = torch.tensor([1.0, 0.0], dtype=F64)
    torch.testing.assert_close(out, expected, rtol=1e-14, atol=0.0)
    bad = private.clip_norms(torch.tensor([[float("nan"), 1.0], [float("inf"), 1.0]], dtype=F64), 1.0)
    assert not bool(torch.isfinite(bad).all(dim=-1).any())  # a non-finite gradient stays non-finite


def test_the_logistic_closed_form_clipping_equals_clipping_each_example():
    """S - Y scaled column by column (norm ||s - e_y|| ||x||) = the generic chunked per-example sum."""
    problem = Case("logistic").build()
    theta = _theta(problem, scale=2.0)
    for clip in (0.05, 0.5, 5.0):
        generic = FederatedProblem._nll_grad(problem, theta, None, clip)
        torch.testing.assert_close(problem._nll_grad(theta, None, clip), generic, rtol=1e-12, atol=1e-12)


def test_the_chunked_sum_over_rows_equals_one_chunk(monkeypatch):
    problem = Case("gaussian").build()
    theta = _theta(problem, scale=3.0)
    whole = problem.private_grad(theta, RecordLevel(clip=1.0))
    monkeypatch.setattr(private, "MAX_ELEMENTS", 2 * R * problem.num_clients * problem.dim)  # chunks of 2 rows
    torch.testing.assert_close(problem.private_grad(theta, RecordLevel(clip=1.0)), whole, rtol=1e-12, atol=1e-12)


def test_float32_private_gradients_follow_the_float64_ones():
    problem = Case("logistic").build()
    theta = _theta(problem)
    want = problem.private_grad(theta, RecordLevel(clip=0.3), batch_size=B, generator=_gen())
    got = problem.to(dtype=torch.float32).private_grad(theta.float(), RecordLevel(clip=0.3), batch_size=B,
                                                       generator=_gen())
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


# -- private minibatches ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["logistic", "gaussian", "custom", "pyro", "subset"])
def test_private_minibatches_are_b_distinct_rows_of_each_client(name):
    problem = Case(name).build()
    sizes = problem.client_sizes
    g = _gen()
    first = problem.private_rows(50, 5, generator=g)
    second = problem.private_rows(50, 5, generator=g)
    for rows in (first, second):
        assert rows.shape == (50, problem.num_clients, 5) and rows.dtype == torch.int64
        assert bool((rows >= 0).all()) and bool((rows < sizes[None, :, None]).all())
        assert bool((rows.sort(-1).values.diff(dim=-1) > 0).all())  # no repeats within a (chain, client)
    assert not torch.equal(first, second)  # a new draw per call


def test_private_minibatches_are_uniform_over_subsets():
    """n_c = 5, b = 2: the 10 subsets of 50000 draws are equally likely (chi-square, 9 degrees of
    freedom, below 37.7, its 1 - 1e-5 quantile), and so is every row (inclusion b / n_c = 0.4)."""
    problem = fl.problems.CustomProblem(_sq_energy, [_regression()[0]], dim=3, rowwise=True)
    rows = problem.private_rows(50000, 2, generator=_gen())[:, 0].sort(-1).values
    counts = torch.bincount(rows[:, 0] * 5 + rows[:, 1], minlength=25)[[i * 5 + j for i in range(5)
                                                                         for j in range(i + 1, 5)]]
    expected = 50000 / 10
    assert float(((counts - expected) ** 2 / expected).sum()) < 37.7
    inclusion = torch.bincount(rows.reshape(-1), minlength=5) / 50000
    # binomial standard error sqrt(0.4 * 0.6 / 50000) = 0.0022: 5 of them
    assert float((inclusion - 0.4).abs().max()) < 5 * math.sqrt(0.24 / 50000)


@pytest.mark.parametrize("name", ["logistic", "pyro"])
def test_a_restriction_to_some_clients_draws_and_computes_what_the_whole_problem_does(name):
    problem = Case(name).build()
    part = problem.clients([0, 2])
    theta = _theta(problem)
    torch.testing.assert_close(part.private_rows(R, B, generator=_gen()),
                               problem.private_rows(R, B, generator=_gen())[:, [0, 2]], rtol=0, atol=0)
    for privacy in (RecordLevel(clip=0.2), ClientLevel(clip=0.2)):
        want = problem.private_grad(theta, privacy, batch_size=B, generator=_gen())[:, [0, 2]]
        got = part.private_grad(theta[:, [0, 2]], privacy, batch_size=B, generator=_gen())
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_unprivate_draws_are_untouched_by_private_calls():
    """grad's minibatch (with replacement, its own stream) is the same before and after private calls."""
    problem = Case("logistic").build()
    theta = _theta(problem)
    before = problem.grad(theta, batch_size=B, generator=_gen())
    problem.private_grad(theta, RecordLevel(clip=0.2), batch_size=B, generator=_gen(1))
    torch.testing.assert_close(problem.grad(theta, batch_size=B, generator=_gen()), before, rtol=0, atol=0)


# -- refusals, before any work ---------------------------------------------------------------------
def _no_plate_model(data):
    import pyro
    import pyro.distributions as dist

    X, y = data
    beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), 0.5).to_event(1))
    pyro.sample("y", dist.Normal(X @ beta, 1.0).to_event(1), obs=y)  # no plate over the rows


@pytest.mark.parametrize("build, why", [
    (lambda: fl.problems.QuadraticProblem(torch.eye(2, dtype=F64), torch.ones(3, 2, dtype=F64), [0.2, 0.3, 0.5]),
     r"QuadraticProblem keeps no data rows"),
    (lambda: fl.problems.CurvatureSimulation(num_clients=3, samples_per_client=4), r"CurvatureSimulation keeps no data rows"),
    (lambda: fl.problems.CustomProblem(_sq_energy, _regression(), dim=3), r"CustomProblem was built with rowwise=False"),
    (lambda: fl.problems.PyroProblem(_no_plate_model, _regression()), r"PyroProblem has no data plate"),
])
def test_record_level_on_a_model_that_is_not_a_sum_over_rows_is_refused_before_any_work(build, why):
    if "Pyro" in why:
        pytest.importorskip("pyro")
    problem = build()
    theta = torch.zeros(1, problem.num_clients, problem.dim, dtype=F64)
    g = _gen()
    state = g.get_state()
    with pytest.raises(ValueError, match=r"^privacy=RecordLevel\(clip=1\.0\): record-level privacy clips per-example "
                                         r"gradients, so it needs a negative log-likelihood that is a sum of per-row "
                                         rf"terms; {why}"):
        problem.private_grad(theta, RecordLevel(clip=1.0), generator=g)
    assert torch.equal(g.get_state(), state)  # no random draw was made
    with pytest.raises(ValueError, match=why):
        problem.per_example_grads(theta, torch.zeros(1, problem.num_clients, 1, dtype=torch.int64))
    # client level needs only the likelihood apart from the prior: every one of them has it
    torch.testing.assert_close(problem.private_grad(theta, ClientLevel(clip=1e12)), problem.grad(theta),
                               rtol=1e-12, atol=1e-10)


def test_a_problem_without_the_private_hooks_refuses_both_levels_by_name():
    class Bare(FederatedProblem):
        num_clients, dim, weights = 1, 2, torch.ones(1, dtype=F64)

        def grad(self, theta, *, batch_size=None, generator=None):
            return theta

    for privacy in (RecordLevel(clip=1.0), ClientLevel(clip=1.0)):
        with pytest.raises(ValueError, match=r"Bare does not implement prior_grad\(\)"):
            Bare().check_privacy(privacy)


@pytest.mark.parametrize("privacy", [None, 1.0, "record", {"clip": 1.0}])
def test_privacy_must_be_a_record(privacy):
    problem = Case("logistic").build()
    with pytest.raises(ValueError, match=r"^privacy must be fedlangevin\.privacy\.RecordLevel\(clip=C\)"):
        problem.private_grad(_theta(problem), privacy)


def test_bad_theta_rows_and_batch_size_are_value_errors_naming_them():
    problem = Case("logistic").build()
    theta = _theta(problem)
    with pytest.raises(ValueError, match=r"^theta must be a tensor of shape \(R, 3, 12\); got \(2, 2, 12\)"):
        problem.private_grad(theta[:, :2], RecordLevel(clip=1.0))
    with pytest.raises(ValueError, match=r"^batch_size must be an integer in \[1, 5\]"):
        problem.private_grad(theta, RecordLevel(clip=1.0), batch_size=6)
    rows = torch.zeros(R, 3, 2, dtype=torch.int64)
    for bad, message in [(rows.double(), r"^rows must be an integer tensor"), (rows[:, :2], r"^rows must have shape"),
                         (rows - 1, r"^rows must hold row indices in \[0, n_c\)"),
                         (rows + 5, r"^rows must hold row indices in \[0, n_c\)")]:
        with pytest.raises(ValueError, match=message):
            problem.per_example_grads(theta, bad)
    with pytest.raises(ValueError, match=r"^chains must be an integer"):
        problem.private_rows(0, 2)
