"""The posteriordb posteriors as Pyro models (experiments/posteriordb_pyro.py): through PyroProblem
they give the gradients of the hand-written problems (closed-form regression gradients, the
eight-schools CustomProblem), and FA-LD samples the same posterior through either."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from fedlangevin.experiments.posteriordb import POSTERIORS, SHIPPED, compare, load

pytest.importorskip("pyro")
from fedlangevin.experiments.posteriordb_pyro import pyro_problem  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BUNDLED = SHIPPED


@pytest.mark.parametrize("name", POSTERIORS)
def test_pyro_model_gradient_equals_the_hand_written_one(name):
    """Same energy, same theta order and space (log scales, with their Jacobians): the gradients
    agree to rounding (measured <= 4e-16 relative on all nine) at random points around 0."""
    post = load(name, BUNDLED)
    fast, pyro = post.problem, pyro_problem(post)
    assert (pyro.dim, pyro.num_clients) == (fast.dim, fast.num_clients)
    theta = 0.3 * torch.randn(3, fast.num_clients, fast.dim, generator=torch.Generator().manual_seed(0),
                              dtype=torch.float64)
    torch.testing.assert_close(pyro.grad(theta), fast.grad(theta), rtol=1e-10, atol=1e-10)


def test_fald_through_the_pyro_model_meets_the_acceptance():
    """kilpisjarvi through PyroProblem with the defaults (K = 1, 32 chains, 1,000 rounds): means within
    0.1 reference sd, sds within 10% (MC error 1 / sqrt(ESS) ~ 0.05 here), like the hand-written
    problem in test_posteriordb.py."""
    import fedlangevin as fl

    post = load("kilpisjarvi_mod-kilpisjarvi", BUNDLED)
    sampler = fl.FALD(pyro_problem(post), chains=32, seed=0, init="map")
    row = compare(post, np.asarray(sampler.run(1000, progress=False).numpy()), 1.0)
    assert row.mc_error < 0.06
    assert row.passes(), row


def test_a_posterior_without_a_model_is_refused():
    import dataclasses

    post = dataclasses.replace(load("earnings-logearn_interaction_z", BUNDLED), model=None)
    with pytest.raises(ValueError, match="no client datasets or Pyro model"):
        pyro_problem(post)


def test_gp_pois_regr_pyro_model_gives_f_as_the_posterior_does():
    """The Pyro model's deterministic site f = L f_tilde, with rho and alpha, equals the
    hand-written constrain (the reference's parameters) at random points."""
    name = "gp_pois_regr-gp_pois_regr"
    post = load(name, BUNDLED)
    theta = 0.5 * torch.randn(5, post.problem.dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = pyro_problem(post).constrain(theta)
    want = post.constrain(theta.numpy())
    for site, cols in (("rho", slice(0, 1)), ("alpha", slice(1, 2)), ("f", slice(2, None))):
        np.testing.assert_allclose(np.asarray(got[site]).reshape(5, -1), want[:, cols], rtol=1e-12, atol=1e-12)
