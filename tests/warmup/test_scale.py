"""The warm-up above the dense limit: Lanczos extremes of the mean preconditioned Hessian against
the dense eigenvalues, the diagonal matrix-growth rule against the dense one, and FA-LD's and
FA-HMC's defaults at d = 2,400 forming no d x d tensor, and a given diagonal M just above the limit
calling no dense builder (the approach's M, FA-HMC's friction rule)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import fedlangevin as fl
from fedlangevin.fahmc import warmup as hmc_warmup
from fedlangevin.federation.preconditioning import as_preconditioner
from fedlangevin.problems import LogisticRegression, QuadraticProblem
from fedlangevin.warmup import adaptation, curvature
from fedlangevin.warmup.acceptance import matrix_growth


def _logistic(n=200, p=14, c=3, clients=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, p, generator=g, dtype=torch.float64)
    y = torch.randint(0, c, (n,), generator=g)
    return LogisticRegression.from_partition(X, y, [torch.arange(i, n, clients) for i in range(clients)], num_classes=c)


def _dense_extremes(hessian, diagonal):
    root = diagonal.sqrt()
    eig = torch.linalg.eigvalsh(root[:, None] * hessian * root[None, :])
    return float(eig[0]), float(eig[-1])


def test_lanczos_extremes_match_the_dense_spectrum_on_a_quadratic():
    """On quadratic energies the central differences are exact (to rounding) and Lanczos with
    d steps spans the whole space: the extremes agree with eigvalsh to 1e-9 relative."""
    g = torch.Generator().manual_seed(1)
    d, n = 12, 3
    a = torch.randn(n, d, d, generator=g, dtype=torch.float64)
    prob = QuadraticProblem(a @ a.transpose(-1, -2) + torch.eye(d, dtype=torch.float64),
                            torch.randn(n, d, generator=g, dtype=torch.float64), [0.2, 0.3, 0.5])
    theta = torch.randn(3, d, generator=g, dtype=torch.float64)
    diagonal = torch.rand(d, generator=g, dtype=torch.float64) + 0.5
    lo, hi = curvature.extreme_curvatures(prob, theta, diagonal, iterations=d, generator=g)
    want_lo, want_hi = _dense_extremes(curvature.mean_hessian(prob, theta), diagonal)
    assert abs(lo - want_lo) <= 1e-9 * want_hi and abs(hi - want_hi) <= 1e-9 * want_hi


def test_lanczos_extremes_match_the_mean_hessian_of_a_logistic_regression():
    """The chains' mean Hessian (not each chain's): d = 45, 4 chains, 45 steps. Both sides are
    central differences with steps ~1e-5 (errors ~1e-9 relative); tolerance 1e-6 of lambda_max."""
    prob = _logistic()
    g = torch.Generator().manual_seed(2)
    theta = 0.3 * torch.randn(4, prob.dim, generator=g, dtype=torch.float64)
    diagonal = torch.rand(prob.dim, generator=g, dtype=torch.float64) + 0.5
    lo, hi = curvature.extreme_curvatures(prob, theta, diagonal, iterations=prob.dim, generator=g)
    want_lo, want_hi = _dense_extremes(curvature.mean_hessian(prob, theta), diagonal)
    assert abs(lo - want_lo) <= 1e-6 * want_hi and abs(hi - want_hi) <= 1e-6 * want_hi
    # fewer steps: Ritz values lie inside the spectrum (lambda_min from above, lambda_max from below)
    lo10, hi10 = curvature.extreme_curvatures(prob, theta, diagonal, iterations=10, generator=g)
    assert want_lo - 1e-6 * want_hi <= lo10 and hi10 <= want_hi + 1e-6 * want_hi


def test_friction_from_lanczos_equals_the_dense_rule_when_exact():
    prob = _logistic()
    theta = 0.3 * torch.randn(4, prob.dim, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    diagonal = torch.full((prob.dim,), 0.02, dtype=torch.float64)
    lo, _ = curvature.extreme_curvatures(prob, theta, diagonal, iterations=prob.dim)
    dense = hmc_warmup.friction_rule(torch.diag(diagonal), curvature.mean_hessian(prob, theta))
    assert abs(hmc_warmup.friction_from_curvature(lo) - dense) <= 1e-6 * dense


def test_matrix_growth_of_diagonal_matrices_needs_no_dense_matrix():
    """lambda_max(M_old^-1 M_new) = max(m_new / m_old) for diagonal M: equal to the dense rule to
    rounding (Cholesky and eigvalsh: a few ulps)."""
    g = torch.Generator().manual_seed(4)
    old, new = torch.rand(30, generator=g, dtype=torch.float64) + 0.1, torch.rand(30, generator=g, dtype=torch.float64) + 0.1
    fast = matrix_growth(as_preconditioner(old), as_preconditioner(new), 30)
    dense = matrix_growth(as_preconditioner(torch.diag(old)), as_preconditioner(torch.diag(new)), 30)
    assert abs(fast - dense) <= 1e-12 * dense
    assert matrix_growth(None, as_preconditioner(new), 30) == float(new.max())


class _NoSquare(TorchDispatchMode):
    """Records every tensor an aten op returns with two axes of length >= ``dim`` (a d x d matrix,
    a batch of them, or d displaced copies of the d parameters)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim, self.seen = dim, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and sum(int(s) >= self.dim for s in t.shape) >= 2:
                self.seen.append((str(func), tuple(t.shape)))
        return out


def _refuse(*args, **kwargs):
    raise AssertionError("mean_hessian (d x d) called above the dense limit")


def test_defaults_above_the_dense_limit_form_no_d_by_d_tensor(monkeypatch):
    """FALD(problem) and FAHMC(problem) with every default (step_size="auto": the curvature and
    acceptance rules, M adapted, FA-HMC's friction rule) on a logistic regression with d = 2,400
    (2 classes x 1,200), 300 records over 10 clients, 3 chains, 30 rounds (FA-HMC's phase 2 and
    its friction reached): no aten op returns a tensor with two axes of length >= d. (d = 2,400, not
    2,000: the Gaussian Monte Carlo behind the acceptance target draws 4 x 10^6 / d normals per
    coordinate, a (2,000 x 2,000) array at d = 2,000 whose size does not grow with d.)"""
    monkeypatch.setattr(hmc_warmup, "mean_hessian", _refuse)
    monkeypatch.setattr(adaptation, "mean_hessian", _refuse)
    prob = _logistic(n=300, p=1199, c=2, clients=10)
    assert prob.dim == 2400 > adaptation.DENSE_MAX_DIM
    for cls in (fl.FALD, fl.FAHMC):
        sampler = cls(prob, chains=3, seed=0)
        mode = _NoSquare(prob.dim)
        with mode:
            sampler.run(30)
        assert mode.seen == [], f"{cls.__name__}: {mode.seen[:5]}"
    assert hmc_warmup.GAMMA_MIN <= sampler.friction <= hmc_warmup.GAMMA_MAX


def test_client_hessian_diagonals_without_dense_hessians():
    """Above the limit the MAP search and the drift corrections read the client Hessians' diagonals:
    the problem's own analytic ones (logistic regression) agree with central differences of its
    gradients (rtol 1e-6: steps ~1e-5, O(h^2) error), and a problem without them (quadratic) gets
    its exact diag(A_c) from blocks of central differences (exact up to rounding on a quadratic)."""
    prob = _logistic()
    theta = 0.3 * torch.randn(prob.dim, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    analytic = curvature.client_hessian_diagonals(prob, theta)
    finite = curvature.client_hessian_diagonals(_NoDiagonal(prob), theta)
    torch.testing.assert_close(finite, analytic, rtol=1e-6, atol=1e-6 * float(analytic.abs().max()))
    g = torch.Generator().manual_seed(6)
    a = torch.randn(2, 7, 7, generator=g, dtype=torch.float64)
    a = a @ a.transpose(-1, -2) + torch.eye(7, dtype=torch.float64)
    quad = QuadraticProblem(a, torch.zeros(2, 7, dtype=torch.float64), [0.4, 0.6])
    got = curvature.client_hessian_diagonals(quad, torch.randn(7, generator=g, dtype=torch.float64))
    torch.testing.assert_close(got, torch.diagonal(a, dim1=1, dim2=2), rtol=1e-8, atol=1e-8)


class _NoDiagonal:
    """A problem's gradients only (no client_hessian_diagonal)."""

    def __init__(self, problem) -> None:
        self._problem = problem
        self.num_clients, self.dim = problem.num_clients, problem.dim

    def grad(self, theta, **kwargs):
        return self._problem.grad(theta, **kwargs)


#: the modules of a run that can build a dense M (preconditioner_matrix) or a d x d Hessian (mean_hessian)
DENSE_BUILDERS = [(module, name) for module in ("fedlangevin.fahmc.kernel", "fedlangevin.fahmc.warmup",
                                                "fedlangevin.fald.setting_noise", "fedlangevin.warmup.acceptance",
                                                "fedlangevin.warmup.adaptation")
                  for name in ("preconditioner_matrix", "mean_hessian")]


def test_a_diagonal_preconditioner_just_above_the_dense_limit_builds_no_dense_matrix(monkeypatch):
    """FALD and FAHMC with step_size="auto", a given diagonal M (adapted: adapt left at its default) and
    chains started far from the mode (so that the acceptance rule would begin an approach, and FA-HMC sets
    its friction in phase 2), on a quadratic problem with d = DENSE_MAX_DIM + 1: no dense builder
    (preconditioner_matrix, mean_hessian) is called: the approach (Adapter._begin_approach) and the
    friction rule's dense path stay below the limit. At d = DENSE_MAX_DIM the same runs do call them
    (the check reaches the code it guards)."""
    import importlib

    calls = []
    for module, name in DENSE_BUILDERS:
        mod = importlib.import_module(module)
        if hasattr(mod, name):
            real = getattr(mod, name)

            def record(*args, _real=real, _name=f"{module}.{name}", **kwargs):
                calls.append(_name)
                return _real(*args, **kwargs)

            monkeypatch.setattr(mod, name, record)
    for d in (adaptation.DENSE_MAX_DIM + 1, adaptation.DENSE_MAX_DIM):
        g = torch.Generator().manual_seed(0)
        hessians = torch.diag_embed(torch.rand(4, d, generator=g, dtype=torch.float64) + 0.5)
        prob = QuadraticProblem(hessians, torch.randn(4, d, generator=g, dtype=torch.float64), [0.25] * 4)
        diagonal = torch.rand(d, generator=g, dtype=torch.float64) + 0.5
        for cls in (fl.FALD, fl.FAHMC):
            calls.clear()
            sampler = cls(prob, chains=3, seed=0, preconditioner=diagonal, init=torch.full((d,), 30.0, dtype=torch.float64))
            sampler.run(45, warmup=40, progress=False)
            if cls is fl.FAHMC:
                assert hmc_warmup.GAMMA_MIN <= sampler.friction <= hmc_warmup.GAMMA_MAX  # the friction rule ran
            if d > adaptation.DENSE_MAX_DIM:
                assert isinstance(sampler.preconditioner.diagonal, torch.Tensor)  # M stays diagonal
                assert calls == [], f"{cls.__name__} at d = {d}: {calls[:5]}"
            else:  # the approach's M (both samplers' warm-up) and FA-HMC's friction rule
                want = {"fedlangevin.warmup.adaptation.preconditioner_matrix"} | (
                    {"fedlangevin.fahmc.warmup.preconditioner_matrix"} if cls is fl.FAHMC else set())
                assert want <= set(calls), f"{cls.__name__} at d = {d}: the dense path was not taken ({set(calls)})"
