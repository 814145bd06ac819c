"""FL over wireless networks (Wan et al.): packet-loss aggregation, Theorems 1–3 and the cost model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar

from fedlangevin.compression import wireless as W

TRAIN = dict(L=2.0, G=3.0, mu=0.5, D=500.0, local_epochs=10.0, C1=0.5, phi0=2.0, f0=4.0)


def test_bandwidth_allocation_theorem3():
    kappa = [5e-27, 4e-27, 6e-27, 5.5e-27]
    f = [4e8, 5e8, 4.6e8, 3e8]
    r0 = [0.6, 1.2, 0.9, 2.0]
    a = W.bandwidth_allocation(kappa, f, r0)
    assert float(a.sum()) == pytest.approx(1.0, abs=1e-12)
    s = np.sqrt(np.array(kappa) * np.array(f) ** 3 / np.array(r0))
    assert np.allclose(a.numpy(), s / s.sum(), rtol=1e-12)
    # scale-free in each argument
    assert torch.allclose(W.bandwidth_allocation([k * 7 for k in kappa], f, r0), a, rtol=1e-12)


def test_theorem3_is_the_kkt_point_of_problem_22():
    """Problem (22): min over (a, f, H) of (l0/K) sum_j E_l alpha0 kappa_j D_j f_j^2 + H subject to
    sum_j a_j <= 1 and z / (a_j B r_j0) + E_l alpha0 D_j / f_j <= H for every j (the constant
    upload-energy term is dropped). The problem is convex (1/a, 1/f and f^2 are convex on a, f > 0;
    the rest is linear) and strictly feasible, so a point satisfying the KKT conditions is its
    global minimum. We take CPU frequencies f_j and a round time H, put the bandwidth shares of
    eq. (24) (Theorem 3) at those f_j, choose the data sizes D_j that make every time constraint
    active, and check every KKT condition at that point: primal feasibility, complementary
    slackness, stationarity with multipliers found by least squares, and dual feasibility.
    With the shares of any other rule (a negative control below) stationarity fails."""
    rng = np.random.default_rng(0)
    K, El, alpha0, l0, B, z = 5, 2.0, 5e5, 1.0, 20e6, 3e6
    kappa = 5e-27 * rng.uniform(0.5, 1.5, K)
    r0 = rng.uniform(0.5, 2.0, K)
    f = 1e9 * rng.uniform(0.3, 1.0, K)
    f *= (K / (2 * l0 * np.sum(kappa * f**3))) ** (1 / 3)  # sum_j beta_j = 1 below (dL/dH = 0)
    a = W.bandwidth_allocation(kappa, f, r0).numpy()
    upload = z / (a * B * r0)
    H = 2.0 * upload.max()
    D = (H - upload) * f / (El * alpha0)  # every time constraint active at (a, f, H)
    assert (D > 0).all()

    def kkt(a):
        """Primal residuals and the relative stationarity residual with least-squares multipliers."""
        t = z / (a * B * r0) + El * alpha0 * D / f
        # gradient of the objective in (a, f, H) and of each constraint g <= 0 (f in Hz)
        grad_obj = np.concatenate([np.zeros(K), 2 * l0 * El * alpha0 * kappa * D * f / K, [1.0]])
        cols = [np.concatenate([np.ones(K), np.zeros(K), [0.0]])]  # g_0 = sum a - 1
        for j in range(K):  # g_j = z / (a_j B r_j) + E_l alpha0 D_j / f_j - H
            g = np.zeros(2 * K + 1)
            g[j] = -z / (a[j] ** 2 * B * r0[j])
            g[K + j] = -El * alpha0 * D[j] / f[j] ** 2
            g[-1] = -1.0
            cols.append(g)
        J = np.stack(cols, axis=1)
        # rows have different units (per unit share, per Hz, per second): scale each row by its
        # largest term, so the residual is relative to the terms that must cancel
        scale = np.maximum(np.abs(grad_obj), np.abs(J).max(axis=1))
        lam, *_ = np.linalg.lstsq(J / scale[:, None], -grad_obj / scale, rcond=None)
        resid = np.abs(grad_obj + J @ lam) / scale
        return np.sum(a) - 1, t - H, lam, resid.max()

    # every quantity is a few float64 operations (relative error ~1e-15), so 1e-12 leaves 1000x
    # room for rounding while a wrong exponent in eq. (24) gives residuals of order 0.1 (below)
    budget, slack, lam, resid = kkt(a)
    assert abs(budget) < 1e-12 and np.abs(slack).max() < 1e-12 * H  # primal feasible, all active
    assert resid < 1e-12  # stationarity
    assert (lam > 0).all()  # dual feasible; with every constraint active, slackness holds
    beta = lam[1:]
    assert beta == pytest.approx(2 * l0 * kappa * f**3 / K, rel=1e-12)  # dL/df_j = 0 in closed form
    assert np.sum(beta) == pytest.approx(1.0, rel=1e-12)  # dL/dH = 0
    # negative control: eq. (24) with f^2 instead of f^3 (shares renormalised, D unchanged) is not stationary
    s = np.sqrt(kappa * f**2 / r0)
    *_, resid_wrong = kkt(s / s.sum())
    assert resid_wrong > 1e-3


def test_cpu_frequency_rule_and_unit_cost():
    # eq. (25): l0 = 1, kappa = 5e-27 -> f_bar = 4.6416e8 Hz (Sec. V-C constants)
    f_bar = W.mean_cpu_frequency(5e-27, 1.0)
    assert f_bar == pytest.approx(4.6416e8, rel=1e-5)
    # f_bar minimises alpha0 D (1/f + l0 kappa f^2)
    res = minimize_scalar(lambda g: 1 / (g * 1e8) + 5e-27 * (g * 1e8) ** 2, bounds=(0.5, 50), method="bounded",
                          options=dict(xatol=1e-10))
    assert res.x * 1e8 == pytest.approx(f_bar, rel=1e-5)
    # C_n0 = alpha0 D / f_bar + l0 f_bar^2 alpha0 kappa D = 0.8079 (alpha0 = 5e5, D = 500)
    assert W.unit_compute_cost(alpha0=5e5, D=500.0, kappa=5e-27) == pytest.approx(0.8079, abs=5e-5)
    # eq. (26) and the clipping to [f_min, f_max]
    f = W.cpu_frequencies([250.0, 500.0, 750.0, 1500.0], 5e-27, f_min=3e8, f_max=9e8)
    D_mean = 750.0
    assert f.tolist() == pytest.approx([3e8, 500 / D_mean * f_bar, f_bar, 9e8])  # 2 f_bar = 9.28e8 is clipped


def test_optimal_num_clients_theorem2():
    kw = dict(local_epochs=20.0, D=500.0, C_n0=0.8079, C_u0=0.05, T_d=2.0, lam=3.0, C1=0.5, phi0=2.0, f0=4.0)
    k0 = W.optimal_num_clients(loss_rate=0.0, **kw)
    for gamma in (0.1, 0.3, 0.5, 0.9):
        assert W.optimal_num_clients(loss_rate=gamma, **kw) / k0 == pytest.approx(1 / math.sqrt(1 - gamma), rel=1e-12)
    # K* minimises the overall cost C_g G_eps of eq. (84) over K
    lam, C1, phi0, f0, D, El = 3.0, 0.5, 2.0, 4.0, 500.0, 20.0
    A = math.sqrt((lam - 1) * f0 / (8 * C1 * phi0))
    Bc = (lam - 1) / (2 * D * (1 - 0.3))
    cost = lambda K: K * 0.05 * A + Bc * El * (0.8079 + 2.0 / El) / K
    res = minimize_scalar(cost, bounds=(1e-3, 1e3), method="bounded", options=dict(xatol=1e-10))
    assert res.x == pytest.approx(W.optimal_num_clients(loss_rate=0.3, **kw), rel=1e-6)
    assert W.choose_num_clients(0.2, 10) == 1 and W.choose_num_clients(7.6, 10) == 8 and W.choose_num_clients(40.0, 10) == 10


def test_global_epochs_theorem1_properties():
    # iid data (lambda = 1): G_eps does not depend on K, gamma or D
    base = W.global_epochs_to_loss(0.1, lam=1.0, k=1, loss_rate=0.0, **TRAIN)
    for k, gamma in ((5, 0.0), (50, 0.5), (2, 0.9)):
        assert W.global_epochs_to_loss(0.1, lam=1.0, k=k, loss_rate=gamma, **TRAIN) == pytest.approx(base, rel=1e-14)
    # non-iid: decreasing in K, increasing in gamma, and K (1 - gamma) enter only as a product
    g = lambda k, gamma: W.global_epochs_to_loss(0.1, lam=2.0, k=k, loss_rate=gamma, **TRAIN)
    assert g(10, 0.0) < g(5, 0.0) and g(10, 0.5) > g(10, 0.0)
    assert g(10, 0.5) == pytest.approx(g(5, 0.0), rel=1e-14)
    # the value of eq. (16) at one point, written out
    L, G, mu, D, El, C1, phi0, f0 = 2.0, 3.0, 0.5, 500.0, 10.0, 0.5, 2.0, 4.0
    expect = (1 / 0.1) * 4 * L**2 * G**2 * 2.0 / mu**2 * ((2.0 - 1) / (10 * 0.5) / (2 * D) + (2.0 - 1) * El / (2 * C1 * phi0) + f0 / (4 * El))
    assert g(10, 0.5) == pytest.approx(expect, rel=1e-14)


def test_optimal_local_epochs_minimise_g_eps():
    lam = 2.5
    e_star = W.optimal_local_epochs(C1=0.5, phi0=2.0, f0=40.0, lam=lam)
    assert e_star == pytest.approx(math.sqrt(0.5 * 2.0 * 40.0 / (2 * (lam - 1))))
    kw = dict(TRAIN)
    kw.update(f0=40.0)

    def g(El):
        kw["local_epochs"] = El
        return W.global_epochs_to_loss(0.1, lam=lam, k=10, loss_rate=0.2, **kw)

    assert g(e_star) < g(e_star * 1.05) and g(e_star) < g(e_star / 1.05)
    assert W.optimal_local_epochs(C1=0.5, phi0=2.0, f0=40.0, lam=1.0) == math.inf


def test_aggregation_under_packet_loss_is_unbiased():
    """E[sum_j c_j w_j | K_gamma > 0] = sum_j q_j w_j for both sampling schemes (Lemma 1, eq. 36)."""
    N, K, gamma, reps = 6, 3, 0.4, 6_000
    gen = torch.Generator().manual_seed(0)
    q = torch.tensor([1.0, 2.0, 3.0, 1.0, 2.0, 1.0], dtype=torch.float64)
    q = q / q.sum()
    w = torch.tensor([1.0, -2.0, 0.5, 3.0, 0.0, 4.0], dtype=torch.float64)
    target = float((q * w).sum())
    for scheme in ("uniform", "probability"):
        vals = []
        for _ in range(reps):
            counts = W.sample_clients(N, K, q, scheme=scheme, generator=gen)
            rec = W.lose_packets(counts, gamma, generator=gen)
            c = W.aggregation_coefficients(rec, q, scheme=scheme)
            if rec.sum() > 0:
                vals.append(float((c * w).sum()))
        vals = np.array(vals)
        # CLT: mean of ~5800 draws within 5 standard errors
        assert abs(vals.mean() - target) < 5 * vals.std() / math.sqrt(len(vals))
        assert counts.sum() == K


def test_aggregate_models_keeps_model_when_nothing_arrives():
    models = torch.randn(4, 3, dtype=torch.float64)
    prev = torch.ones(3, dtype=torch.float64)
    q = [0.25] * 4
    out = W.aggregate_models(models, torch.zeros(4, dtype=torch.int64), q, prev)
    assert torch.equal(out, prev)
    out = W.aggregate_models(models, torch.tensor([1, 0, 1, 0]), q, prev, scheme="probability")
    assert torch.allclose(out, (models[0] + models[2]) / 2)
    # the uniform scheme with equal weights is also the plain mean of the received models
    assert torch.allclose(W.aggregate_models(models, torch.tensor([1, 0, 1, 0]), q, prev), (models[0] + models[2]) / 2)


def test_cost_model_and_channel():
    h = W.channel_gains(10_000, generator=torch.Generator().manual_seed(1))
    # h = g0 (d0/d)^theta Exp(1): mean 1e-4 * 200^-4 = 6.25e-14 (5 % covers the MC error of 1e4 draws)
    assert float(h.mean()) == pytest.approx(6.25e-14, rel=0.05)
    r0 = W.rate_per_unit_bandwidth([4e-7], [6.25e-14], 5e-20)
    assert float(r0) == pytest.approx(math.log2(1.5))
    a = torch.tensor([0.5, 0.5])
    cu = W.upload_cost(a, bandwidth=20e6, r0=[1.0, 2.0], p0=[4e-7, 4e-7], z_m=3e4, l0=1.0)
    assert cu == pytest.approx(3e4 / (0.5 * 20e6 * 1.0) + 4e-7 * 3e4 * (1 / 1.0 + 1 / 2.0))
    assert W.unit_upload_cost(a, bandwidth=20e6, r0=[1.0, 2.0], p0=[4e-7, 4e-7], z_m=3e4) == pytest.approx(cu / 2)
    cn = W.compute_cost([4e8, 5e8], data_sizes=[400, 600], kappa=5e-27, alpha0=5e5, local_epochs=2)
    assert cn == pytest.approx(max(2 * 5e5 * 400 / 4e8, 2 * 5e5 * 600 / 5e8) + (2 * 5e-27 * 5e5 * (4e8**2 * 400 + 5e8**2 * 600)) / 2)
    assert W.noniid_measure(torch.ones(3, 4), [1, 1, 1]) == pytest.approx(1.0)
    assert W.noniid_measure(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), [1, 1]) == pytest.approx(2.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="loss_rate"):
        W.global_epochs_to_loss(0.1, lam=2.0, k=1, loss_rate=1.0, **TRAIN)
    with pytest.raises(ValueError, match="lam"):
        W.optimal_local_epochs(C1=1.0, phi0=1.0, f0=1.0, lam=0.5)
    with pytest.raises(ValueError, match="kappa"):
        W.bandwidth_allocation([0.0, 1.0], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="k"):
        W.sample_clients(5, 6)
    with pytest.raises(ValueError, match="scheme"):
        W.aggregation_coefficients(torch.ones(3), [1, 1, 1], scheme="random")
    with pytest.raises(ValueError, match="a must sum"):
        W.upload_cost([0.7, 0.7], bandwidth=1.0, r0=[1, 1], p0=[1, 1], z_m=1.0)
