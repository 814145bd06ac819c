"""System design for federated learning over a wireless network (Wan, Lu, Fan, Shao, Peng,
Letaief, *Convergence Analysis and System Design for Federated Learning over Wireless
Networks*).

Setting (Sec. II): N clients, client j holds D_j samples and weight q_j ∝ D_j; D = mean D_j.
Each global epoch runs E_l local SGD steps (eq. 3), then K clients upload over OFDMA; every
upload is lost independently with the packet-loss rate gamma and the server aggregates the
K_gamma received models (eqs. 4, 29).

Provided here:

* aggregation under packet loss: :func:`sample_clients`, :func:`lose_packets`,
  :func:`aggregation_coefficients`, :func:`aggregate_models`;
* Theorem 1 — global epochs to reach loss eps, G_eps (eq. 16) — and the optimal local epochs
  E_l* = sqrt(C1 phi0 f0 / (2 (lambda - 1))) (Sec. III-B, IV-B2);
* Theorem 2 — optimal number of uploading clients K* (eq. 21);
* Theorem 3 — bandwidth allocation a_j (eq. 24) — and the distributed CPU-frequency rule
  f_bar = (1 / (2 l0 kappa))^(1/3), f_j = (D_j / D) f_bar clipped (eqs. 25–26);
* the cost model: rates (eq. 5), upload cost (eqs. 8, 18, 20a), computation cost
  (eqs. 11, 17, 20b), the unit cost C_n0 of Sec. IV-D and the channel model of Sec. V-A.

With alpha0 = 5e5, D = 500, kappa = 5e-27 and l0 = 1 (Sec. V-C): f_bar = 4.6416e8 Hz and
C_n0 = 0.8079.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import torch

from fedlangevin._validation import check_int, check_real, check_tensor, scalar

__all__ = [
    "sample_clients",
    "lose_packets",
    "aggregation_coefficients",
    "aggregate_models",
    "noniid_measure",
    "global_epochs_to_loss",
    "optimal_local_epochs",
    "optimal_num_clients",
    "choose_num_clients",
    "bandwidth_allocation",
    "mean_cpu_frequency",
    "cpu_frequencies",
    "unit_compute_cost",
    "unit_upload_cost",
    "upload_cost",
    "compute_cost",
    "rate_per_unit_bandwidth",
    "channel_gains",
]

Scheme = Literal["uniform", "probability"]


def _positive_vector(name: str, v, n: int | None = None) -> torch.Tensor:
    t = check_tensor(name, v)  # real numbers only: no bools, strings or integers beyond the float range
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-d sequence; got shape {tuple(t.shape)}")
    if n is not None and t.numel() != n:
        raise ValueError(f"{name} must have {n} entries; got {t.numel()}")
    if not torch.isfinite(t).all() or (t <= 0).any():
        raise ValueError(f"{name} must be finite and > 0 in every entry")
    return t


def _check_scheme(scheme: str) -> str:
    if scheme not in ("uniform", "probability"):
        raise ValueError(f"scheme must be 'uniform' or 'probability'; got {scheme!r}")
    return scheme


# ---------------------------------------------------------------------------------------------
# Aggregation under packet loss (Sec. II-A, II-B1; App. A, eqs. 29, 36–37)


def sample_clients(
    num_clients: int,
    k: int,
    weights: torch.Tensor | Sequence[float] | None = None,
    *,
    scheme: Scheme = "uniform",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw the upload set P_t of size K; returns per-client slot counts (N,) int64.

    ``scheme="uniform"``: K distinct clients uniformly (eq. 4); counts are 0/1.
    ``scheme="probability"``: K independent draws with P(j) = q_j (App. A, Lemma 1), with
    replacement, so a client can fill several slots.
    """
    num_clients = check_int("num_clients", num_clients, minimum=1)
    k = check_int("k", k, minimum=1, maximum=num_clients)
    _check_scheme(scheme)
    if scheme == "uniform":
        idx = torch.randperm(num_clients, generator=generator)[:k]
        counts = torch.zeros(num_clients, dtype=torch.int64)
        counts[idx] = 1
        return counts
    q = _positive_vector("weights", weights if weights is not None else [1.0] * num_clients, num_clients)
    draws = torch.multinomial(q / q.sum(), k, replacement=True, generator=generator)
    return torch.bincount(draws, minlength=num_clients)


def lose_packets(counts: torch.Tensor, loss_rate: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each of the uploads in ``counts`` is received independently with probability 1 - gamma."""
    loss_rate = check_real("loss_rate", loss_rate, low=0.0, high=1.0, high_open=True)
    counts = torch.as_tensor(counts, dtype=torch.int64)
    if (counts < 0).any():
        raise ValueError("counts must be non-negative")
    if loss_rate == 0.0:
        return counts.clone()
    p = torch.full(counts.shape, 1.0 - loss_rate, dtype=torch.float64)
    return torch.binomial(counts.to(torch.float64), p, generator=generator).to(torch.int64)


def aggregation_coefficients(
    received: torch.Tensor,
    weights: torch.Tensor | Sequence[float],
    *,
    scheme: Scheme = "uniform",
) -> torch.Tensor:
    """Coefficients c_j of the aggregate sum_j c_j w_j over the K_gamma received uploads.

    ``uniform``: c_j = (N / K_gamma) q_j r_j (eq. 4 with the K_gamma received models);
    ``probability``: c_j = r_j / K_gamma (plain mean of the received slots, eq. 29),
    where r_j counts client j's received slots and K_gamma = sum_j r_j.
    **(choice)** K_gamma = 0 gives c = 0 and the server keeps its model.
    """
    _check_scheme(scheme)
    r = torch.as_tensor(received, dtype=torch.float64)
    q = _positive_vector("weights", weights, r.numel())
    q = q / q.sum()
    k_gamma = float(r.sum())
    if k_gamma == 0.0:
        return torch.zeros_like(r)
    if scheme == "uniform":
        return (r.numel() / k_gamma) * q * r
    return r / k_gamma


def aggregate_models(
    models: torch.Tensor,
    received: torch.Tensor,
    weights: torch.Tensor | Sequence[float],
    previous: torch.Tensor,
    *,
    scheme: Scheme = "uniform",
) -> torch.Tensor:
    """The server's new model from the received local models (eqs. 4, 29).

    ``models`` (N, d) are the clients' local models, ``received`` (N,) the received slot
    counts. Returns ``previous`` unchanged when nothing arrives **(choice)**.
    """
    c = aggregation_coefficients(received, weights, scheme=scheme)
    if float(c.sum()) == 0.0:
        return previous.clone()
    return (c.to(models.dtype).to(models.device)[:, None] * models).sum(dim=0)


def noniid_measure(gradients: torch.Tensor, weights: torch.Tensor | Sequence[float]) -> float:
    """Lambda of Definition 1 (eq. 15): sum_j pi_j ||g_j||^2 / ||sum_j pi_j g_j||^2 (>= 1)."""
    g = torch.as_tensor(gradients, dtype=torch.float64)
    if g.dim() != 2:
        raise ValueError(f"gradients must have shape (N, d); got {tuple(g.shape)}")
    pi = _positive_vector("weights", weights, g.shape[0])
    pi = pi / pi.sum()
    mean = (pi[:, None] * g).sum(0)
    den = float((mean * mean).sum())
    if den == 0.0:
        raise ValueError("the weighted mean gradient is zero; lambda is undefined")
    return float((pi * (g * g).sum(1)).sum()) / den


# ---------------------------------------------------------------------------------------------
# Theorems 1 and 2


def global_epochs_to_loss(
    eps: float,
    *,
    L: float,
    G: float,
    mu: float,
    lam: float,
    k: float,
    loss_rate: float,
    D: float,
    local_epochs: float,
    C1: float,
    phi0: float,
    f0: float,
) -> float:
    """G_eps of Theorem 1 (eq. 16): global epochs for E f(w) - f* to reach eps,

    G_eps = (1/eps) (4 L^2 G^2 lambda / mu^2) [ (lambda-1)/(K (1-gamma)) / (2 D)
            + (lambda-1) E_l / (2 C1 phi0) + f0 / (4 E_l) ].

    L: smoothness (Assumption 1); mu: PL constant (Assumption 2); lambda >= 1: non-iid
    measure (Definition 1; 1 = iid); G^2: gradient bound (Assumption 4); C1: coefficient of
    gradient variation (Assumption 3); phi0: eq. (35); f0: ||grad f(w0)||^2 <= f0 G^2 (App. E).
    For lambda = 1 the result does not depend on K, gamma or D.
    """
    eps = check_real("eps", eps, low=0.0, low_open=True)
    L = check_real("L", L, low=0.0, low_open=True)
    G = check_real("G", G, low=0.0, low_open=True)
    mu = check_real("mu", mu, low=0.0, low_open=True)
    lam = check_real("lam", lam, low=1.0)
    k = check_real("k", k, low=1.0)
    loss_rate = check_real("loss_rate", loss_rate, low=0.0, high=1.0, high_open=True)
    D = check_real("D", D, low=0.0, low_open=True)
    local_epochs = check_real("local_epochs", local_epochs, low=1.0)
    C1 = check_real("C1", C1, low=0.0, low_open=True)
    phi0 = check_real("phi0", phi0, low=0.0, low_open=True)
    f0 = check_real("f0", f0, low=0.0)
    comm = (lam - 1.0) / (k * (1.0 - loss_rate)) / (2.0 * D)
    comp = (lam - 1.0) * local_epochs / (2.0 * C1 * phi0) + f0 / (4.0 * local_epochs)
    return (1.0 / eps) * (4.0 * L * L * G * G * lam / (mu * mu)) * (comm + comp)


def optimal_local_epochs(*, C1: float, phi0: float, f0: float, lam: float) -> float:
    """E_l* = sqrt(C1 phi0 f0 / (2 (lambda - 1))) minimising G_eps over E_l (Sec. IV-B2).

    Returns ``math.inf`` for iid data (lambda = 1): local epochs are then limited only by the
    processors.
    """
    C1 = check_real("C1", C1, low=0.0, low_open=True)
    phi0 = check_real("phi0", phi0, low=0.0, low_open=True)
    f0 = check_real("f0", f0, low=0.0)
    lam = check_real("lam", lam, low=1.0)
    if lam == 1.0:
        return math.inf
    return math.sqrt(C1 * phi0 * f0 / (2.0 * (lam - 1.0)))


def optimal_num_clients(
    *,
    local_epochs: float,
    D: float,
    loss_rate: float,
    C_n0: float,
    C_u0: float,
    T_d: float = 0.0,
    lam: float,
    C1: float,
    phi0: float,
    f0: float,
) -> float:
    """K* of Theorem 2 (eq. 21), unrounded:

    K* = rho0 sqrt(E_l / (D (1 - gamma))) sqrt((C_n0 + T_d / E_l) / C_u0),
    rho0 = (2 (lambda - 1) C1 phi0 / f0)^(1/4).

    C_n0, C_u0: unit computation and upload costs (eqs. 17–18); T_d: broadcast time.
    K*(gamma) / K*(0) = 1 / sqrt(1 - gamma).
    """
    local_epochs = check_real("local_epochs", local_epochs, low=1.0)
    D = check_real("D", D, low=0.0, low_open=True)
    loss_rate = check_real("loss_rate", loss_rate, low=0.0, high=1.0, high_open=True)
    C_n0 = check_real("C_n0", C_n0, low=0.0)
    C_u0 = check_real("C_u0", C_u0, low=0.0, low_open=True)
    T_d = check_real("T_d", T_d, low=0.0)
    lam = check_real("lam", lam, low=1.0)
    C1 = check_real("C1", C1, low=0.0, low_open=True)
    phi0 = check_real("phi0", phi0, low=0.0, low_open=True)
    f0 = check_real("f0", f0, low=0.0, low_open=True)
    rho0 = (2.0 * (lam - 1.0) * C1 * phi0 / f0) ** 0.25
    return rho0 * math.sqrt(local_epochs / (D * (1.0 - loss_rate))) * math.sqrt((C_n0 + T_d / local_epochs) / C_u0)


def choose_num_clients(k_star: float, num_clients: int) -> int:
    """K* clipped to [1, N] (constraint 12c) and rounded to the nearest integer."""
    k_star = check_real("k_star", k_star, low=0.0)
    num_clients = check_int("num_clients", num_clients, minimum=1)
    return int(min(max(round(k_star), 1), num_clients))


# ---------------------------------------------------------------------------------------------
# Theorem 3 and the distributed CPU-frequency rule; cost model


def bandwidth_allocation(kappa, f, r0) -> torch.Tensor:
    """a_j = sqrt(kappa_j f_j^3 / r_j0) / sum_i sqrt(kappa_i f_i^3 / r_i0) (Theorem 3, eq. 24).

    kappa_j: processor energy coefficient, f_j: CPU frequency (Hz), r_j0: rate per unit
    bandwidth (eq. 5, :func:`rate_per_unit_bandwidth`). The shares sum to 1.
    """
    kappa = _positive_vector("kappa", kappa)
    f = _positive_vector("f", f, kappa.numel())
    r0 = _positive_vector("r0", r0, kappa.numel())
    # computed in log space: kappa f^3 spans ~1e-27 * 1e27 and would lose precision otherwise
    log_s = 0.5 * (torch.log(kappa) + 3.0 * torch.log(f) - torch.log(r0))
    return torch.softmax(log_s, dim=0)


def mean_cpu_frequency(kappa: float, l0: float = 1.0) -> float:
    """f_bar = (1 / (2 l0 kappa))^(1/3) (eq. 25): minimises E_l alpha0 D (1/f + l0 kappa f^2)."""
    kappa = check_real("kappa", kappa, low=0.0, low_open=True)
    l0 = check_real("l0", l0, low=0.0, low_open=True)
    return (1.0 / (2.0 * l0 * kappa)) ** (1.0 / 3.0)


def cpu_frequencies(
    data_sizes, kappa: float, l0: float = 1.0, f_min: float = 0.0, f_max: float = math.inf
) -> torch.Tensor:
    """f_j = (D_j / D) f_bar clipped to [f_min, f_max] (eq. 26); kappa is the mean kappa."""
    Dj = _positive_vector("data_sizes", data_sizes)
    f_min = check_real("f_min", f_min, low=0.0)
    if not (isinstance(scalar(f_max), float) and scalar(f_max) == math.inf):  # inf (the default): no upper clip
        f_max = check_real("f_max", f_max, low=f_min, low_open=True)
    f_bar = mean_cpu_frequency(kappa, l0)
    return torch.clamp(Dj / Dj.mean() * f_bar, min=f_min, max=f_max)


def unit_compute_cost(*, alpha0: float, D: float, kappa: float, l0: float = 1.0, f: float | None = None) -> float:
    """C_n0 = alpha0 D / f + l0 f^2 alpha0 kappa D with f = f_bar by default (Sec. IV-D)."""
    alpha0 = check_real("alpha0", alpha0, low=0.0, low_open=True)
    D = check_real("D", D, low=0.0, low_open=True)
    kappa = check_real("kappa", kappa, low=0.0, low_open=True)
    l0 = check_real("l0", l0, low=0.0, low_open=True)
    f = mean_cpu_frequency(kappa, l0) if f is None else check_real("f", f, low=0.0, low_open=True)
    return alpha0 * D / f + l0 * f * f * alpha0 * kappa * D


def rate_per_unit_bandwidth(p0, h, N0: float) -> torch.Tensor:
    """r_j0 = log2(1 + p_j0 h_j / N0) bit/s/Hz (eq. 5): p_j0 power per unit bandwidth (W/Hz),
    h_j channel power gain, N0 noise density (W/Hz)."""
    p0 = _positive_vector("p0", p0)
    h = _positive_vector("h", h, p0.numel())
    N0 = check_real("N0", N0, low=0.0, low_open=True)
    return torch.log2(1.0 + p0 * h / N0)


def channel_gains(
    n: int,
    *,
    g0: float = 1e-4,
    path_loss_exponent: float = 4.0,
    d0: float = 1.0,
    distance: float = 200.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """h_j = g0 (d0 / d)^theta X_j with X_j ~ Exp(1) (Sec. V-A defaults: g0 = 1e-4, theta = 4,
    d0 = 1, d = 200)."""
    n = check_int("n", n, minimum=1)
    g0 = check_real("g0", g0, low=0.0, low_open=True)
    path_loss_exponent = check_real("path_loss_exponent", path_loss_exponent, low=0.0)
    d0 = check_real("d0", d0, low=0.0, low_open=True)
    distance = check_real("distance", distance, low=0.0, low_open=True)
    expo = -torch.log1p(-torch.rand(n, generator=generator, dtype=torch.float64))
    return g0 * (d0 / distance) ** path_loss_exponent * expo


def upload_cost(a, *, bandwidth: float, r0, p0, z_m: float, l0: float = 1.0) -> float:
    """C_u,t = max_j z_m / (a_j B r_j0) + l0 sum_j p_j0 z_m / r_j0 (eq. 20a): upload time of
    the slowest client plus weighted upload energy, for the clients in P_t."""
    a = _positive_vector("a", a)
    if float(a.sum()) > 1.0 + 1e-9:
        raise ValueError(f"a must sum to at most 1 (constraint 12d); got {float(a.sum()):.6g}")
    r0 = _positive_vector("r0", r0, a.numel())
    p0 = _positive_vector("p0", p0, a.numel())
    bandwidth = check_real("bandwidth", bandwidth, low=0.0, low_open=True)
    z_m = check_real("z_m", z_m, low=0.0, low_open=True)
    l0 = check_real("l0", l0, low=0.0)
    return float((z_m / (a * bandwidth * r0)).max() + l0 * (p0 * z_m / r0).sum())


def unit_upload_cost(a, *, bandwidth: float, r0, p0, z_m: float, l0: float = 1.0) -> float:
    """C_u0 = C_u(full participation) / N (eq. 18)."""
    return upload_cost(a, bandwidth=bandwidth, r0=r0, p0=p0, z_m=z_m, l0=l0) / len(torch.as_tensor(a))


def compute_cost(f, *, data_sizes, kappa, alpha0: float, local_epochs: float, l0: float = 1.0) -> float:
    """C_n,t = max_j E_l alpha0 D_j / f_j + (l0 / K) sum_j E_l kappa_j f_j^2 alpha0 D_j (eq. 20b)."""
    f = _positive_vector("f", f)
    Dj = _positive_vector("data_sizes", data_sizes, f.numel())
    if getattr(kappa, "ndim", None) == 0 or isinstance(kappa, (int, float)):  # one number for every device
        kappa = [check_real("kappa", kappa, low=0.0, low_open=True)] * f.numel()
    kappa = _positive_vector("kappa", kappa, f.numel())
    alpha0 = check_real("alpha0", alpha0, low=0.0, low_open=True)
    local_epochs = check_real("local_epochs", local_epochs, low=1.0)
    l0 = check_real("l0", l0, low=0.0)
    time = (local_epochs * alpha0 * Dj / f).max()
    energy = (local_epochs * kappa * f * f * alpha0 * Dj).sum() / f.numel()
    return float(time + l0 * energy)
