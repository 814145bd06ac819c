"""The breast cancer logistic regression and its shipped NUTS reference
(experiments/logistic_posterior.py): the data, the federated problem, the reference against a
quick MAP and Laplace approximation, the file's checks and the reference maker."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.optimize
import torch

pytest.importorskip("sklearn")

from fedlangevin.experiments import logistic_posterior as lp  # noqa: E402


@pytest.fixture(scope="module")
def post():
    return lp.load_logistic()


def test_data_are_the_ten_mean_features_standardised():
    x, y = lp.breast_cancer_data()
    assert x.shape == (569, 10) and y.shape == (569,) and x.dtype == np.float64 and y.dtype == np.int64
    assert np.isfinite(x).all() and set(np.unique(y)) == {0, 1} and y.sum() == 357  # 357 benign, 212 malignant
    np.testing.assert_allclose(x.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(x.std(0), 1.0, rtol=1e-12)


def test_the_problem_splits_every_row_over_ten_clients(post):
    problem = post.problem
    assert (problem.num_clients, problem.dim, problem.num_classes) == (10, 22, 2)
    assert int(problem.client_sizes.sum()) == 569 and int(problem.client_sizes.min()) >= 56
    assert post.names == problem.parameter_names() and len(post.names) == 22
    assert post.reference.shape == (8000, 22) and np.isfinite(post.reference).all()
    theta = torch.randn(3, 22, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    # the potential is the global energy sum_c p_c f^c of the clients' energies
    per_client = problem.client_energy(theta[:, None, :].expand(3, 10, 22))
    np.testing.assert_allclose(torch.stack([post.potential(t) for t in theta]).numpy(),
                               (per_client * problem.weights).sum(-1).numpy(), rtol=1e-12)


def test_the_reference_sits_where_a_quick_map_and_laplace_say(post):
    """The posterior of 569 rows in d = 22 is close to Gaussian: its mean is within O(n^-1/2) sd of
    the mode (n^-1/2 = 0.042; measured 0.06, allowed 0.15) and its sds within a few % of the Laplace
    approximation's (measured 0.99-1.02, allowed [0.9, 1.1]). The reference's own Monte Carlo error
    is below 0.02 sd (8,000 thinned draws of a run with bulk ESS over 80,000)."""
    problem = post.problem

    def energy_and_grad(t):
        x = torch.as_tensor(t).requires_grad_(True)
        e = problem.energy(x)
        (g,) = torch.autograd.grad(e, x)
        return float(e.detach()), g.numpy()

    found = scipy.optimize.minimize(energy_and_grad, np.zeros(22), jac=True, method="L-BFGS-B",
                                    options=dict(gtol=1e-9, maxiter=500))
    assert found.success
    hessian = torch.autograd.functional.hessian(problem.energy, torch.as_tensor(found.x)).numpy()
    laplace_sd = np.sqrt(np.diag(np.linalg.inv(hessian)))
    mean, sd = post.reference.mean(0), post.reference.std(0, ddof=1)
    assert np.max(np.abs(mean - found.x) / sd) < 0.15
    assert 0.9 < np.min(sd / laplace_sd) and np.max(sd / laplace_sd) < 1.1


def test_the_reference_records_how_it_was_made():
    draws, info = lp.read_reference()
    assert draws.shape == (4, 2000, 22)
    assert info["chains"] == 4 and info["thin"] == 5 and info["seed"] == 0 and info["dim"] == 22
    assert info["max_rhat"] < 1.01 and info["min_ess_bulk"] > 10_000
    assert lp.REFERENCE.stat().st_size < 1_000_000


def test_a_bad_reference_file_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match="path: .*missing.npz"):
        lp.read_reference(tmp_path / "missing.npz")
    np.savez(tmp_path / "nan.npz", draws=np.full((1, 5, 22), np.nan), info=np.array("{}"))
    with pytest.raises(ValueError, match="expected finite"):
        lp.read_reference(tmp_path / "nan.npz")
    np.savez(tmp_path / "d3.npz", draws=np.zeros((1, 5, 3)), info=np.array("{}"))
    with pytest.raises(ValueError, match="reference: draws of dimension 3, the problem has d = 22"):
        lp.load_logistic(reference=tmp_path / "d3.npz")


@pytest.mark.parametrize("kwargs, match", [(dict(clients=0), "clients"), (dict(clients=570), "clients"),
                                           (dict(clients=2.5), "clients"), (dict(seed=-1), "seed")])
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lp.load_logistic(**kwargs)


def test_make_reference_writes_a_file_read_reference_reads(tmp_path):
    draws, info = lp.make_reference(chains=2, warmup=10, draws=8, thin=2, seed=3, max_tree_depth=3)  # quick
    assert draws.shape == (2, 4, 22) and np.isfinite(draws).all() and info["seed"] == 3
    lp.write_reference(tmp_path / "r.npz", draws, info)
    back, info2 = lp.read_reference(tmp_path / "r.npz")
    np.testing.assert_allclose(back, draws, rtol=1e-6)  # stored as float32
    assert info2 == json.loads(json.dumps(info))
    with pytest.raises(ValueError, match="thin"):
        lp.make_reference(draws=8, thin=9)
    with pytest.raises(ValueError, match="max_tree_depth"):
        lp.make_reference(max_tree_depth=0)
