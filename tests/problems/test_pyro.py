"""PyroProblem: a Pyro model + per-client data as a federated problem.

Closed-form checks on Bayesian linear regression (known noise scale: Gaussian posterior;
unknown scale: hand-derived gradient with the log-Jacobian of sigma = exp(z)), the energy
identity sum_c p_c f^c = full negative log posterior against Pyro on the pooled data,
minibatch unbiasedness, FA-LD against the exact posterior, constrained sites, errors.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

pyro = pytest.importorskip("pyro")
import pyro.distributions as dist  # noqa: E402
from pyro import poutine  # noqa: E402

import fedlangevin as fl  # noqa: E402
from fedlangevin.problems import PyroProblem  # noqa: E402
from fedlangevin.problems._autodiff import minibatch_indices  # noqa: E402
from tests.targets import fald_moments  # noqa: E402

SIGMA, S0, SH = 1.0, 0.5, 2.0  # known noise scale, prior sd of beta, HalfNormal scale of sigma
SIZES = [10, 15, 20, 25]
F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors (tests/conftest.py)


def blr_known(data):
    """y ~ N(X beta, SIGMA^2), beta ~ N(0, S0^2 I): Gaussian posterior in closed form."""
    X, y = data
    beta = pyro.sample("beta", dist.Normal(X.new_zeros(X.shape[1]), S0).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(X @ beta, SIGMA), obs=y)


def blr_unknown(data):
    """Unknown noise scale: sigma ~ HalfNormal(SH), sampled as z = log sigma."""
    X, y = data
    beta = pyro.sample("beta", dist.Normal(X.new_zeros(X.shape[1]), S0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(X.new_tensor(SH)))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)


def make_clients(sizes=SIZES, seed=1, shift=0.5):
    """Heterogeneous clients: the covariate's mean moves with the client."""
    g = torch.Generator().manual_seed(seed)
    beta = torch.tensor([0.8, -0.5], dtype=F64)
    out = []
    for c, n in enumerate(sizes):
        X = torch.randn(n, 2, generator=g, dtype=F64) + torch.tensor([shift * (c - 1.5), 0.0], dtype=F64)
        y = X @ beta + SIGMA * torch.randn(n, generator=g, dtype=F64)
        out.append((X, y))
    return out


def closed_form(clients, p):
    """Client quadratics A_c theta - b_c of f^c = (1/p_c) NLL_c + prior, and the posterior."""
    A = np.stack([(X.T @ X).numpy() / SIGMA**2 / pc + np.eye(2) / S0**2 for (X, _), pc in zip(clients, p)])
    b = np.stack([(X.T @ y).numpy() / SIGMA**2 / pc for (X, y), pc in zip(clients, p)])
    a_glob, b_glob = np.einsum("c,cij->ij", p, A), p @ b
    cov = np.linalg.inv(a_glob)
    return A, b, cov @ b_glob, cov


def _theta(r, n, d, seed=0):
    return torch.randn(r, n, d, generator=torch.Generator().manual_seed(seed), dtype=F64)


# -- gradients against closed forms ---------------------------------------------------------------


@pytest.mark.parametrize("vectorize", [None, False])
def test_gradient_equals_closed_form_gradient_known_sigma(vectorize):
    """grad f^c = (1/p_c) X_c^T (X_c beta - y_c) / sigma^2 + beta / s0^2 (unequal n_c: padded + masked)."""
    clients = make_clients()
    prob = PyroProblem(blr_known, clients, vectorize=vectorize)
    assert prob.data_plate == "data" and prob.vectorized is (vectorize is None)
    p = prob.weights.numpy()
    A, b, _, _ = closed_form(clients, p)
    theta = _theta(3, 4, 2)
    expected = torch.einsum("rcd,cde->rce", theta, torch.tensor(A)) - torch.tensor(b)[None]
    torch.testing.assert_close(prob.grad(theta), expected, rtol=1e-10, atol=1e-10)


def test_gradient_includes_log_jacobian_of_the_positive_scale():
    """theta = (beta, z), sigma = exp(z). Energy in z (prior HalfNormal(SH), Jacobian d sigma/dz = sigma):
    f^c = (1/p_c) sum_i [r_i^2 / (2 sigma^2) + log sigma] + |beta|^2/(2 s0^2) + sigma^2/(2 SH^2) - z,
    so d f^c / dz = (1/p_c) (n_c - sum_i r_i^2 / sigma^2) + sigma^2 / SH^2 - 1."""
    clients = make_clients()
    prob = PyroProblem(blr_unknown, clients)
    assert prob.var_names == ["beta[0]", "beta[1]", "sigma_unconstrained"]
    theta = 0.5 * _theta(2, 4, 3, seed=3)
    got = prob.grad(theta)
    for r in range(2):
        for c, ((X, y), pc) in enumerate(zip(clients, prob.weights.tolist())):
            beta, z = theta[r, c, :2], theta[r, c, 2]
            sigma = torch.exp(z)
            res = y - X @ beta
            g_beta = -(X.T @ res) / sigma**2 / pc + beta / S0**2
            g_z = (len(y) - (res**2).sum() / sigma**2) / pc + sigma**2 / SH**2 - 1.0
            torch.testing.assert_close(got[r, c], torch.cat([g_beta, g_z[None]]), rtol=1e-10, atol=1e-10)


def pooled_negative_log_posterior(model, clients, theta, prob):
    """-[log p(all data, T(theta)) + log|J_T(theta)|] from Pyro's own trace on the pooled data."""
    X = torch.cat([c[0] for c in clients])
    y = torch.cat([c[1] for c in clients])
    values, log_det = {}, 0.0
    for s in prob.sites:  # s.transform is biject_to(support), Pyro's constraint registry
        z = theta[s.start : s.stop].reshape(s.unconstrained_shape)
        values[s.name] = s.transform(z)
        log_det = log_det + s.transform.log_abs_det_jacobian(z, values[s.name]).sum()
    tr = poutine.trace(poutine.condition(model, values)).get_trace((X, y))
    return -(tr.log_prob_sum() + log_det)


def test_weighted_client_energies_are_the_pooled_negative_log_posterior():
    """sum_c p_c f^c(theta) = full negative log posterior (eq. 7), differences between points so
    that constants drop; the reference is Pyro's log_prob_sum on the pooled data."""
    clients = make_clients()
    prob = PyroProblem(blr_unknown, clients)
    pts = 0.4 * _theta(1, 3, 3, seed=5)[0]
    ours = prob.global_energy(pts)
    ref = torch.stack([pooled_negative_log_posterior(blr_unknown, clients, t, prob) for t in pts])
    torch.testing.assert_close(ours - ours[0], ref - ref[0], rtol=1e-10, atol=1e-9)


def test_factor_outside_the_data_plate_is_prior_share_and_inside_is_likelihood():
    """A pyro.factor on the parameters alone counts once in sum_c p_c f^c (prior share); one
    inside the data plate counts with the client's rows (likelihood)."""

    def model(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), S0).to_event(1))
        pyro.factor("soft", -0.5 * (beta**2).sum())  # an extra N(0, 1) prior factor
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ beta, SIGMA), obs=y)
            pyro.factor("row", -0.1 * (y - X @ beta) ** 2)  # extra per-row likelihood term

    clients = make_clients()
    prob = PyroProblem(model, clients)
    assert prob._prior_factors == frozenset({"soft"})
    p = prob.weights.numpy()
    A, b, _, _ = closed_form(clients, p)
    extra_a = np.stack([0.2 * (X.T @ X).numpy() / pc + np.eye(2) for (X, _), pc in zip(clients, p)])
    extra_b = np.stack([0.2 * (X.T @ y).numpy() / pc for (X, y), pc in zip(clients, p)])
    theta = _theta(2, 4, 2, seed=7)
    expected = torch.einsum("rcd,cde->rce", theta, torch.tensor(A + extra_a)) - torch.tensor(b + extra_b)[None]
    torch.testing.assert_close(prob.grad(theta), expected, rtol=1e-10, atol=1e-10)


def test_padding_masking_grouping_and_loop_give_the_same_gradients():
    """Unequal n_c: the masked padded call, the per-size groups (model without a plate) and the
    per-chain loop agree."""

    def no_plate(data):  # the rows as one event: no data plate, so clients are grouped by size
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(X.shape[1]), S0).to_event(1))
        sigma = pyro.sample("sigma", dist.HalfNormal(X.new_tensor(SH)))
        pyro.sample("y", dist.Normal(X @ beta, sigma).to_event(1), obs=y)

    clients = make_clients()
    theta = _theta(3, 4, 3, seed=11)
    masked = PyroProblem(blr_unknown, clients)
    grouped = PyroProblem(no_plate, clients)
    loop = PyroProblem(blr_unknown, clients, vectorize=False)
    assert masked._can_mask and masked._full_groups()[0].mask is not None
    assert grouped.data_plate is None and len(grouped._full_groups()) == len(set(SIZES))
    ref = loop.grad(theta)
    torch.testing.assert_close(masked.grad(theta), ref, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(grouped.grad(theta), ref, rtol=1e-11, atol=1e-11)


def test_dict_data_and_equal_sizes():
    def model(data):
        beta = pyro.sample("beta", dist.Normal(data["x"].new_zeros(2), S0).to_event(1))
        with pyro.plate("rows", data["x"].shape[0]):
            pyro.sample("obs", dist.Normal(data["x"] @ beta, SIGMA), obs=data["y"])

    clients = make_clients(sizes=[12, 12, 12])
    prob = PyroProblem(model, [{"x": X, "y": y} for X, y in clients])
    assert prob._full_groups()[0].mask is None
    A, b, _, _ = closed_form(clients, prob.weights.numpy())
    theta = _theta(2, 3, 2)
    torch.testing.assert_close(prob.grad(theta), torch.einsum("rcd,cde->rce", theta, torch.tensor(A)) - torch.tensor(b)[None])


# -- minibatches ------------------------------------------------------------------------------------


def test_minibatch_gradient_is_the_scaled_batch_gradient():
    """With batch B of b rows: (1/p_c)(n_c/b) sum_{i in B} grad NLL_i + grad prior, rows drawn as
    minibatch_indices draws them (the GaussianSimulation scheme)."""
    clients = make_clients()
    prob = PyroProblem(blr_known, clients)
    theta, bsz = _theta(3, 4, 2, seed=2), 6
    got = prob.grad(theta, batch_size=bsz, generator=torch.Generator().manual_seed(9))
    idx = minibatch_indices(prob.client_sizes, 3, bsz, torch.Generator().manual_seed(9), theta.device, theta.dtype)
    for r in range(3):
        for c, ((X, y), pc) in enumerate(zip(clients, prob.weights.tolist())):
            xb, yb = X[idx[r, c]], y[idx[r, c]]
            beta = theta[r, c]
            exp = (len(y) / bsz) * xb.T @ (xb @ beta - yb) / SIGMA**2 / pc + beta / S0**2
            torch.testing.assert_close(got[r, c], exp, rtol=1e-10, atol=1e-10)


def test_minibatch_gradient_is_unbiased():
    """Mean of M minibatch gradients vs the full gradient, within 5 standard errors (sd of the
    M draws / sqrt(M)); M = 4000 draws in one call (chains as replicates)."""
    clients = make_clients()
    prob = PyroProblem(blr_unknown, clients)
    point = 0.3 * _theta(1, 1, 3, seed=4)[0, 0]
    m = 4000
    theta = point.expand(m, 4, 3).contiguous()
    draws = prob.grad(theta, batch_size=4, generator=torch.Generator().manual_seed(0))
    full = prob.grad(theta[:1])[0]
    se = draws.std(0) / math.sqrt(m)
    z = (draws.mean(0) - full) / se
    assert float(z.abs().max()) < 5.0, z


# -- FA-LD on the closed-form posterior ------------------------------------------------------------


def test_fald_matches_the_closed_form_posterior():
    """FA-LD (K = 2, rho = 0, eta = 2e-4, 250 rounds from beta = 0) on the known-sigma Pyro model.

    Tolerances from Monte Carlo error: the R = 500 chains' last draws are independent; the
    sample mean's coordinates have standard error sqrt(Sigma_ii / R) and the sample covariance
    (R - 1 dof, Wishart) has sd(S_ij) = sqrt((Sigma_ij^2 + Sigma_ii Sigma_jj) / (R - 1)). Each of
    the 5 z-scores must be < 4.5 (family-wise false alarm < 5e-5 for exact draws). The sampler's
    own bias at this eta (discretisation, local steps, finite burn-in) is computed exactly by the
    independent moment recursion of tests/targets.py and is below 0.25 standard errors, so it
    cannot decide the test. Power: the posterior of a wrong prior share (prior counted once per
    client, f^c = (1/p_c)(NLL_c + U_0)) is rejected by the same statistics.
    """
    clients = make_clients()
    prob = PyroProblem(blr_known, clients)
    p = prob.weights.numpy()
    A, b, mean, cov = closed_form(clients, p)
    eta, k, rounds, r = 2e-4, 2, 250, 500
    se_mean = np.sqrt(np.diag(cov) / r)
    se_cov = np.sqrt((cov**2 + np.outer(np.diag(cov), np.diag(cov))) / (r - 1))

    law_mean, law_cov = fald_moments(A, b, p, np.zeros(2), [[eta] * k] * rounds, 1.0, 0.0)[-1]
    assert np.abs((law_mean - mean) / se_mean).max() < 0.25
    assert np.abs((law_cov - cov) / se_cov).max() < 0.25

    trace = fl.FALD(prob, step_size=eta, local_steps=k, chains=r, seed=2024).run(rounds, warmup=rounds - 1)
    x = trace.samples[:, -1].numpy()
    z_mean = (x.mean(0) - mean) / se_mean
    z_cov = (np.cov(x.T) - cov) / se_cov
    assert np.abs(z_mean).max() < 4.5, z_mean
    assert np.abs(z_cov).max() < 4.5, z_cov

    # power: a wrong prior share (N times the prior) moves the posterior mean by many standard errors
    n = len(clients)
    wrong_a = np.einsum("c,cij->ij", p, A) + (n - 1) * np.eye(2) / S0**2
    wrong_mean = np.linalg.solve(wrong_a, p @ b)
    assert np.abs((x.mean(0) - wrong_mean) / se_mean).max() > 4.5


# -- constrained sites ------------------------------------------------------------------------------


def test_positive_site_never_goes_negative_and_comes_back_named():
    """sigma is sampled as z = log sigma: with a step large enough to rattle the chains, every
    constrained draw is > 0 and equals exp(z); trace.constrained() has the site names and shapes."""
    clients = make_clients()
    prob = PyroProblem(blr_unknown, clients)
    trace = fl.FALD(prob, step_size=2e-3, local_steps=3, chains=8, seed=1, init=prob.initial_params).run(150)
    z = trace.samples[..., 2]
    assert float(z.min()) < float(z.max())  # the log-scale moved
    values = trace.constrained()
    assert set(values) == {"beta", "sigma"}
    assert values["beta"].shape == (8, 150, 2) and values["sigma"].shape == (8, 150)
    assert (values["sigma"] > 0).all()
    np.testing.assert_allclose(values["sigma"], np.exp(z.numpy()), rtol=1e-12)
    np.testing.assert_array_equal(values["beta"], trace.samples[..., :2].numpy())


def test_to_arviz_and_summary_show_the_sites():
    """trace.to_arviz() has variables beta (vector) and sigma (constrained), not theta[0..d]."""
    pytest.importorskip("arviz")
    import diagnostics as dg

    prob = PyroProblem(blr_unknown, make_clients())
    trace = fl.FALD(prob, step_size=1e-3, local_steps=2, chains=2, seed=3).run(30)
    post = dg.posterior_dataset(trace.to_arviz())
    assert set(post.data_vars) == {"beta", "sigma"}
    assert dict(post["beta"].sizes) == {"chain": 2, "draw": 30, "beta_dim_0": 2}
    np.testing.assert_allclose(post["sigma"].values, np.exp(trace.numpy()[..., 2]), rtol=1e-12)
    assert list(dg.summary(trace).index) == ["beta[0]", "beta[1]", "sigma"]
    # var_names= keeps the raw (unconstrained) theta
    assert set(dg.posterior_dataset(trace.to_arviz(var_names=prob.var_names)).data_vars) == {"beta", "sigma_unconstrained"}


def test_interval_and_simplex_sites_stay_in_their_supports():
    """Pyro's bijections for (0, 2) (sigmoid) and the simplex (stick-breaking): every draw of a
    rattled run lies in the support."""

    def model(data):
        w = pyro.sample("w", dist.Dirichlet(data.new_ones(3)))
        s = pyro.sample("s", dist.Uniform(data.new_tensor(0.0), data.new_tensor(2.0)))
        with pyro.plate("data", data.shape[0]):
            pyro.sample("x", dist.Normal((w * data.new_tensor([-1.0, 0.0, 1.0])).sum(), s), obs=data)

    g = torch.Generator().manual_seed(0)
    clients = [0.5 * torch.randn(n, generator=g, dtype=F64) for n in (8, 12)]
    prob = PyroProblem(model, clients)
    assert prob.dim == 3 and prob.site_shapes == {"w": (3,), "s": ()}
    trace = fl.FALD(prob, step_size=5e-3, local_steps=2, chains=6, seed=0).run(100)
    v = trace.constrained()
    assert (v["s"] > 0).all() and (v["s"] < 2).all()
    assert (v["w"] > 0).all()
    np.testing.assert_allclose(v["w"].sum(-1), 1.0, rtol=1e-12)


def test_deterministic_sites_come_back_with_the_latents():
    def model(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), S0).to_event(1))
        sigma = pyro.sample("sigma", dist.HalfNormal(X.new_tensor(SH)))
        pyro.deterministic("precision", sigma**-2)
        with pyro.plate("data", X.shape[0]):
            pyro.deterministic("mu", X @ beta)  # per row: data-dependent, left out
            pyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)

    prob = PyroProblem(model, make_clients())
    v = prob.constrain(0.2 * _theta(2, 5, 3).numpy())
    assert set(v) == {"beta", "sigma", "precision"}
    np.testing.assert_allclose(v["precision"], v["sigma"] ** -2, rtol=1e-12)


def test_init_values_are_unconstrained_and_checked():
    prob = PyroProblem(blr_unknown, make_clients(), init_values={"sigma": 2.0, "beta": [0.1, 0.2]})
    torch.testing.assert_close(prob.initial_params, torch.tensor([0.1, 0.2, math.log(2.0)], dtype=F64))
    with pytest.raises(ValueError, match="outside the site's support"):
        PyroProblem(blr_unknown, make_clients(), init_values={"sigma": -1.0})
    with pytest.raises(ValueError, match="unknown latent site"):
        PyroProblem(blr_unknown, make_clients(), init_values={"tau": 1.0})


def test_float32_run_and_equal_seed_reproducibility():
    prob = PyroProblem(blr_unknown, make_clients())
    kw = dict(step_size=1e-3, local_steps=2, chains=3, seed=5, dtype=torch.float32, batch_size=5)
    a = fl.FALD(prob, **kw).run(20).samples
    b = fl.FALD(prob, **kw).run(20).samples
    assert a.dtype == torch.float32 and torch.isfinite(a).all()
    torch.testing.assert_close(a, b, rtol=0, atol=0)


# -- errors ---------------------------------------------------------------------------------------


def test_nan_log_density_at_the_start_is_a_clear_error():
    """A scale sampled on the real line is 0 at the start (z = 0): log N(y | mu, 0) is not finite."""

    def bad(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), S0).to_event(1))
        s = pyro.sample("s", dist.Normal(X.new_tensor(0.0), 1.0))  # should have been positive
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ beta, s), obs=y)

    with pytest.raises(ValueError, match=r"not finite at the initial point.*'y'"):
        PyroProblem(bad, make_clients())
    # inside the support it builds
    PyroProblem(bad, make_clients(), init_values={"s": 1.0})

    def nan_model(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), S0).to_event(1))
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ beta, torch.sqrt(beta.sum() - 1.0)), obs=y)

    with pytest.raises(ValueError, match=r"log-density is not finite at the initial point"):
        PyroProblem(nan_model, make_clients())


def test_model_errors_and_unsupported_structures():
    clients = make_clients()

    def discrete(data):
        X, y = data
        k = pyro.sample("k", dist.Bernoulli(X.new_tensor(0.5)))
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(k * X[:, 0], SIGMA), obs=y)

    with pytest.raises(ValueError, match="discrete"):
        PyroProblem(discrete, clients)

    def subsampled(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), S0).to_event(1))
        with pyro.plate("data", X.shape[0], subsample_size=3) as i:
            pyro.sample("y", dist.Normal(X[i] @ beta, SIGMA), obs=y[i])

    with pytest.raises(ValueError, match="batch_size"):
        PyroProblem(subsampled, clients)

    def local_latent(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), S0).to_event(1))
        with pyro.plate("data", X.shape[0]):
            u = pyro.sample("u", dist.Normal(X.new_tensor(0.0), 1.0))
            pyro.sample("y", dist.Normal(X @ beta + u, SIGMA), obs=y)

    with pytest.raises(ValueError, match="inside the data plate"):
        PyroProblem(local_latent, make_clients(sizes=[10, 10]))
    with pytest.raises(ValueError, match="latent sites differ between client 0"):
        PyroProblem(local_latent, clients)

    def no_obs(data):
        pyro.sample("beta", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="no observed sites"):
        PyroProblem(no_obs, clients)

    def broken(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(3), S0).to_event(1))
        pyro.sample("y", dist.Normal(X @ beta, SIGMA).to_event(1), obs=y)

    with pytest.raises(ValueError, match="running the model on client 0"):
        PyroProblem(broken, clients)
    with pytest.raises(ValueError, match="data_plate='rows'"):
        PyroProblem(blr_known, clients, data_plate="rows")
    with pytest.raises(ValueError, match="client_data"):
        PyroProblem(blr_known, [clients[0][0], clients[1]])
    with pytest.raises(ValueError, match="one dataset per client"):
        PyroProblem(blr_known, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="batch_size"):
        fl.FALD(PyroProblem(blr_known, clients), step_size=1e-3, batch_size=11)


def test_model_vmap_cannot_run_falls_back_to_the_loop_with_a_warning():
    """.item() inside the model defeats vmap: a RuntimeWarning, the same gradients by the loop;
    vectorize=True turns it into a ValueError."""

    def itemized(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(2), S0).to_event(1))
        scale = SIGMA if float(X[0, 0].item()) > -100 else 2 * SIGMA
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ beta, scale), obs=y)

    clients = make_clients()
    with pytest.warns(RuntimeWarning, match="falling back"):
        prob = PyroProblem(itemized, clients)
    assert not prob.vectorized
    theta = _theta(2, 4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref = PyroProblem(blr_known, clients).grad(theta)
    torch.testing.assert_close(prob.grad(theta), ref, rtol=1e-11, atol=1e-11)
    with pytest.raises(ValueError, match="vectorize=True"):
        PyroProblem(itemized, clients, vectorize=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_gradients_and_minibatches_match_the_cpu():
    prob = PyroProblem(blr_unknown, make_clients())
    theta = 0.3 * _theta(5, 4, 3, seed=8)
    gpu = prob.to(device="cuda", dtype=F64)
    torch.testing.assert_close(gpu.grad(theta.cuda()).cpu(), prob.grad(theta), rtol=1e-10, atol=1e-10)
    trace = fl.FALD(prob, step_size=1e-3, local_steps=2, chains=4, seed=0, device="cuda", batch_size=5).run(10)
    assert torch.isfinite(trace.samples).all() and (trace.constrained()["sigma"] > 0).all()
