"""Validation on real posteriors: eleven posteriors of the public posterior database (posteriordb,
BSD 3-Clause) with Stan's reference draws, run with FA-LD's defaults and compared.

Each posterior is written as a :class:`~fedlangevin.problems.CustomProblem` (the Stan model's
density, term by term, in the unconstrained space: a positive scale sigma is sampled as
log sigma, with its Jacobian), its data split over 10 clients (iid rows; eight schools: one
school per client; ``arK``: the rows (y_t, y_{t-1}, ..., y_{t-5}) of its AR(5) likelihood, a
regression; ``gp_pois_regr``: the counts of its 11 points, the design points public, see
:mod:`~fedlangevin.experiments.posteriordb_gp`). :func:`validate` runs ``FALD(problem, local_steps=K, chains=R,
init="map")`` with ``step_size="auto"`` and the default warm-up (half the rounds) and returns,
against the reference draws: max |mean - mean_ref| / sd_ref and the range of sd / sd_ref
(in the model's own parameters, as Stan reports them), the W2 between Gaussians fitted to our
draws and to the reference in the unconstrained space relative to sqrt(tr Sigma_ref), the
bulk ESS per second (ArviZ) and the wall time.

Data: a posteriordb folder per posterior (``posterior.json``, ``data.json.zip``,
``reference_draws.json.zip``); the package ships all eleven (:data:`SHIPPED`, with posteriordb's
BSD 3-Clause licence), and :data:`SHARED`, the default root, is ``$FEDLANGEVIN_POSTERIORDB`` when
set, else the shipped copy.
"""

from __future__ import annotations

import copy
import json
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fedlangevin.experiments.posteriordb_pyro import pyro_model
from fedlangevin.experiments.posteriordb_validation import RECIPES, Recipe, ValidationRow, compare, validate
from fedlangevin._validation import check_int
from fedlangevin.problems._client_data import ClientData, minibatch_indices
from fedlangevin.problems.base import FederatedProblem

__all__ = [
    "LinearRegressionProblem", "POSTERIORS", "RECIPES", "Recipe", "SHARED", "SHIPPED", "Posterior", "ValidationRow", "compare",
    "custom_problem", "iid_split", "load", "read_zip_json", "validate",
]

#: the eleven posteriors as the package ships them (copied unchanged from posteriordb, with its licence)
SHIPPED = Path(__file__).resolve().parent / "data" / "posteriordb"
#: the default posteriordb folder: $FEDLANGEVIN_POSTERIORDB when set (another copy of posteriordb), else :data:`SHIPPED`
SHARED = Path(os.environ["FEDLANGEVIN_POSTERIORDB"]) if os.environ.get("FEDLANGEVIN_POSTERIORDB") else SHIPPED
POSTERIORS = (
    "arK-arK", "diamonds-diamonds", "earnings-logearn_interaction_z", "eight_schools-eight_schools_noncentered",
    "kidiq-kidscore_momhsiq", "kidiq_with_mom_work-kidscore_interaction_c", "kilpisjarvi_mod-kilpisjarvi",
    "gp_pois_regr-gp_pois_regr", "mesquite-logmesquite_logvas", "nes2000-nes", "sblri-blr",
)
LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class Posterior:
    """A posterior as a federated problem: ``problem``; ``names`` of the reference parameters;
    ``constrain(theta (..., d)) -> (..., m)`` our draws as the reference's parameters;
    ``unconstrain(ref (n, m)) -> (n, d)`` the reference draws in our unconstrained space;
    ``potential(theta (d,))``: the negative log posterior, differentiable (for NUTS);
    ``clients``: the clients' datasets ((X_c, y_c); eight schools: (index, y, sigma); gp_pois_regr:
    (point indices, counts)) and
    ``model`` the Pyro model of the same posterior
    (:func:`fedlangevin.experiments.posteriordb_pyro.pyro_problem` builds its ``PyroProblem``)."""

    name: str
    problem: Any
    names: list[str]
    constrain: Callable[[np.ndarray], np.ndarray]
    unconstrain: Callable[[np.ndarray], np.ndarray]
    reference: np.ndarray  # (n, m) pooled reference draws
    potential: Callable[[torch.Tensor], torch.Tensor]  # theta (d,) -> negative log posterior (differentiable)
    clients: list | None = None
    model: Callable | None = None


def read_zip_json(path: Path) -> Any:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read(z.namelist()[0]))


def _reference(folder: Path, names: list[str]) -> np.ndarray:
    chains = read_zip_json(folder / "reference_draws.json.zip")
    return np.concatenate([np.stack([np.asarray(c[n], dtype=np.float64) for n in names], axis=1) for c in chains])


def iid_split(n: int, clients: int, seed: int = 0) -> list[np.ndarray]:
    """iid split of n rows over ``clients`` clients (a fixed permutation)."""
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, clients)]


# -- priors (negative log densities up to constants, of torch scalars) -------------------------------
def _normal(x, loc, scale):
    return 0.5 * ((x - loc) / scale) ** 2


def _student_t(x, df, loc, scale):
    return 0.5 * (df + 1) * torch.log1p(((x - loc) / scale) ** 2 / df)


class LinearRegressionProblem(FederatedProblem):
    """Gaussian linear regression y ~ N(X beta, sigma^2) over clients, theta = (beta, log sigma),
    with closed-form likelihood gradients from each client's sufficient statistics (X_c^T X_c,
    X_c^T y_c, y_c^T y_c, n_c): the fast path beside a :class:`~fedlangevin.problems.CustomProblem`
    of the same energy (tested equal). ``prior(theta (..., d)) -> (...)``: the negative log prior
    in theta, Jacobian of log sigma included; its gradient by autograd.

    Private runs (``FALD(..., privacy=RecordLevel(clip=C) | ClientLevel(clip=C))``,
    :meth:`~fedlangevin.problems.FederatedProblem.private_grad`): the rows are kept too
    (:class:`~fedlangevin.problems._client_data.ClientData`, ``client_sizes``), the per-example
    gradients of l(theta; x, y) = (y - x beta)^2 / (2 sigma^2) + log sigma are in closed form
    (:meth:`_per_example_grads`) and the prior's gradient is :meth:`prior_grad`. ``grad`` with
    ``batch_size=b`` draws b rows per client with replacement (as every problem's ``grad``); a
    private run draws them without replacement (:meth:`~fedlangevin.problems.FederatedProblem.private_rows`).
    """

    def __init__(self, parts: list[tuple[torch.Tensor, torch.Tensor]], prior, names: list[str]) -> None:
        self.k = parts[0][0].shape[1]
        self.dim = self.k + 1
        self.num_clients = len(parts)
        sizes = torch.tensor([float(len(y)) for _, y in parts], dtype=torch.float64)
        self.weights = sizes / sizes.sum()
        self.sizes = sizes
        self.xtx = torch.stack([x.T @ x for x, _ in parts])  # (N, k, k)
        self.xty = torch.stack([x.T @ y for x, y in parts])  # (N, k)
        self.yty = torch.stack([y @ y for _, y in parts])  # (N,)
        self.rows = ClientData.from_clients([(x, y) for x, y in parts])  # padded (N, n_max, k), (N, n_max)
        self.client_sizes = self.rows.sizes
        self.prior = prior
        self.var_names = names

    def grad(self, theta, *, batch_size=None, generator=None):
        p = self.weights.to(theta)
        if batch_size is None:
            return self._likelihood_sum(theta) / p[:, None] + self._prior_grad(theta)
        # (1/p_c)(n_c/b) sum_{i in B} grad l_i: the rows drawn with replacement as every problem's grad draws them
        # (the CustomProblem of the same energy draws the same rows from the same seed)
        b = self.check_batch_size(batch_size)
        idx = minibatch_indices(self.client_sizes, theta.shape[0], b, generator, theta.device, theta.dtype)
        scale = self.client_sizes.to(theta) / (p * b)
        return self._per_example_grads(theta, idx).sum(2) * scale[:, None] + self._prior_grad(theta)

    def _likelihood_sum(self, theta: torch.Tensor) -> torch.Tensor:
        """sum_i grad l(theta[r, c]; x_ci, y_ci) over every row of client c, (R, N, d), from the
        sufficient statistics: beta: (X^T X beta - X^T y) / sigma^2; log sigma: n_c - RSS / sigma^2."""
        k = self.k
        beta, log_sigma = theta[..., :k], theta[..., k]
        prec = torch.exp(-2 * log_sigma)  # (R, N)
        xtxb = torch.einsum("nij,rnj->rni", self.xtx, beta)
        g_beta = (xtxb - self.xty) * prec[..., None]
        rss = self.yty - 2 * (beta * self.xty).sum(-1) + (beta * xtxb).sum(-1)
        g_ls = -rss * prec + self.sizes
        return torch.cat([g_beta, g_ls[..., None]], dim=-1)

    def _prior_grad(self, theta: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            x = theta.detach().requires_grad_(True)
            (g_prior,) = torch.autograd.grad(self.prior(x).sum(), x)
        return g_prior

    # -- the private gradient (FederatedProblem.private_grad) ---------------------------------
    def prior_grad(self, theta):
        """grad U_0(theta[r, c]), the prior's gradient (public: no data), by autograd, (R, N, d)."""
        self._check_private_theta(theta)
        return self._prior_grad(theta)

    def _per_example_grads(self, theta, rows):
        """grad l(theta; x_i, y_i) = (-r_i x_i / sigma^2, 1 - r_i^2 / sigma^2), r_i = y_i - x_i beta,
        for the rows (R, N, B) of each client: (R, N, B, d)."""
        x, y = self.rows.gather(rows)  # (R, N, B, k), (R, N, B)
        k = self.k
        prec = torch.exp(-2 * theta[..., k])[..., None]  # (R, N, 1)
        resid = y - torch.einsum("rnbj,rnj->rnb", x, theta[..., :k])
        return torch.cat([-(resid * prec)[..., None] * x, (1 - resid * resid * prec)[..., None]], dim=-1)

    def _nll_grad(self, theta, rows, clip):
        if rows is None and clip is None:  # every row, unclipped (client level, full batch): the statistics
            return self._likelihood_sum(theta)
        return FederatedProblem._nll_grad(self, theta, rows, clip)

    def potential(self, theta: torch.Tensor) -> torch.Tensor:
        """The negative log posterior sum_c p_c f^c at theta (d,), differentiable."""
        k = self.k
        beta, log_sigma = theta[:k], theta[k]
        rss = self.yty - 2 * self.xty @ beta + torch.einsum("i,nij,j->n", beta, self.xtx, beta)
        return (0.5 * rss * torch.exp(-2 * log_sigma) + self.sizes * log_sigma).sum() + self.prior(theta)

    def client_energy(self, theta: torch.Tensor) -> torch.Tensor:
        """f^c(theta[..., c, :]) = ell^c / p_c + U_0 for theta (..., N, d), shape (..., N) (a consensus MC client's)."""
        beta, log_sigma = theta[..., :self.k], theta[..., self.k]
        xtxb = torch.einsum("nij,...nj->...ni", self.xtx, beta)
        ell = 0.5 * (self.yty - 2 * (beta * self.xty).sum(-1) + (beta * xtxb).sum(-1)) * torch.exp(-2 * log_sigma)
        return (ell + self.sizes * log_sigma) / self.weights.to(theta) + self.prior(theta)

    def global_energy(self, theta: torch.Tensor) -> torch.Tensor:
        """sum_c p_c f^c for theta (..., d)."""
        return torch.stack([self.potential(t) for t in theta.reshape(-1, self.dim)]).reshape(theta.shape[:-1])

    def to(self, device=None, dtype=None):
        new = copy.copy(self)
        for name in ("xtx", "xty", "yty", "sizes"):
            setattr(new, name, getattr(self, name).to(device=device, dtype=dtype))
        new.rows = self.rows.to(device=device, dtype=dtype)
        return new


def custom_problem(post: "Posterior"):
    """A regression posterior's energy as a :class:`~fedlangevin.problems.CustomProblem` (autodiff
    of the per-client energy 0.5 |y - X beta|^2 / sigma^2 + n log sigma, the same prior): the
    middle path between the closed-form :class:`LinearRegressionProblem` and the Pyro model."""
    from fedlangevin.problems import CustomProblem

    fast = post.problem
    if not isinstance(fast, LinearRegressionProblem):
        raise ValueError(f"{post.name}: custom_problem is for the regression posteriors; this one is a "
                         f"{type(fast).__name__} already")
    k = fast.k

    def client_energy(theta, batch):
        x, y = batch
        resid = (y - x @ theta[:k]) * torch.exp(-theta[k])
        return 0.5 * (resid * resid).sum() + y.shape[0] * theta[k]

    return CustomProblem(client_energy, post.clients, prior=fast.prior, dim=k + 1, weights=fast.weights)


def _regression(name: str, folder: Path, x: np.ndarray, y: np.ndarray, names: list[str], beta_prior, sigma_prior,
                clients: int, data: dict) -> Posterior:
    """Gaussian linear regression y ~ N(x beta, sigma), theta = (beta, log sigma); priors act on
    the last axis of (..., k) coefficients and on (...,) scales."""
    k = x.shape[1]
    xt, yt = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    parts = [(xt[i], yt[i]) for i in iid_split(len(y), clients)]

    def prior(theta):
        log_sigma = theta[..., k]
        return beta_prior(theta[..., :k]) + sigma_prior(torch.exp(log_sigma)) - log_sigma  # - log Jacobian

    problem = LinearRegressionProblem(parts, prior, names[:k] + [f"log_{names[k]}"])

    def constrain(theta):
        out = np.array(theta, dtype=np.float64, copy=True)
        out[..., k] = np.exp(out[..., k])
        return out

    def unconstrain(ref):
        out = np.array(ref, dtype=np.float64, copy=True)
        out[:, k] = np.log(out[:, k])
        return out

    return Posterior(name, problem, names, constrain, unconstrain, _reference(folder, names), problem.potential,
                     parts, pyro_model(name, data, k))


def _flat(values):
    return torch.zeros(values.shape[:-1] if values.dim() else (), dtype=values.dtype, device=values.device)


def _flat_scale(sigma):
    return torch.zeros_like(sigma)


def _eight_schools(folder: Path, data: dict) -> Posterior:
    from fedlangevin.problems import CustomProblem

    j = int(data["J"])
    y, s = np.asarray(data["y"], dtype=np.float64), np.asarray(data["sigma"], dtype=np.float64)
    names = [f"theta[{i + 1}]" for i in range(j)] + ["mu", "tau"]
    index = torch.arange(j, dtype=torch.float64)

    def client_energy(theta, batch):  # one school: its index, y and sigma
        idx, yb, sb = batch
        tau = torch.exp(theta[j + 1])
        onehot = (index[None, :] == idx[:, None]).to(theta.dtype)
        effect = onehot @ theta[:j] * tau + theta[j]
        return _normal(yb, effect, sb).sum()

    def prior(theta):
        log_tau = theta[j + 1]
        tau = torch.exp(log_tau)
        return (_normal(theta[:j], 0.0, 1.0).sum() + _normal(theta[j], 0.0, 5.0)
                + torch.log1p((tau / 5.0) ** 2) - log_tau)

    clients = [(torch.tensor([float(i)]), torch.tensor([y[i]]), torch.tensor([s[i]])) for i in range(j)]
    problem = CustomProblem(client_energy, clients, prior=prior, dim=j + 2,
                            var_names=[f"theta_trans[{i + 1}]" for i in range(j)] + ["mu", "log_tau"])

    def constrain(theta):
        theta = np.asarray(theta, dtype=np.float64)
        tau = np.exp(theta[..., j + 1])
        return np.concatenate([theta[..., :j] * tau[..., None] + theta[..., j:j + 1], theta[..., j:j + 1],
                               tau[..., None]], axis=-1)

    def unconstrain(ref):
        mu, tau = ref[:, j], ref[:, j + 1]
        return np.concatenate([(ref[:, :j] - mu[:, None]) / tau[:, None], mu[:, None], np.log(tau)[:, None]], axis=1)

    yt, st = torch.as_tensor(y), torch.as_tensor(s)

    def potential(theta):
        return _normal(yt, theta[:j] * torch.exp(theta[j + 1]) + theta[j], st).sum() + prior(theta)

    return Posterior("eight_schools-eight_schools_noncentered", problem, names, constrain, unconstrain,
                     _reference(folder, names), potential, clients, pyro_model("eight_schools", data, 0))


def load(name: str, root: Path | str | None = None, clients: int = 10) -> Posterior:
    """The posterior ``name`` (one of :data:`POSTERIORS`) from the posteriordb folder ``root``
    (default: :data:`SHARED`), its data split over ``clients`` clients (eight schools: a school
    per client, whatever ``clients``; the others: an integer from 1 to the number of rows)."""
    if name not in POSTERIORS:
        raise ValueError(f"name must be one of {', '.join(POSTERIORS)}; got {name!r}")
    folder = Path(SHARED if root is None else root) / name
    if not folder.is_dir():
        raise ValueError(f"root: no posteriordb folder {str(folder)!r}")
    data = read_zip_json(folder / "data.json.zip")
    col = lambda key: np.asarray(data[key], dtype=np.float64)  # noqa: E731
    ones = np.ones(int(data.get("N", 1)))
    sd = lambda v: v.std(ddof=1)  # noqa: E731
    if name.startswith("eight_schools"):
        return _eight_schools(folder, data)
    if name in ("arK-arK", "gp_pois_regr-gp_pois_regr"):  # every client holds at least one row
        rows = len(data["k"]) if name.startswith("gp_pois") else len(data["y"]) - int(data["K"])
        clients = check_int("clients", clients, 1, rows)
    if name == "gp_pois_regr-gp_pois_regr":
        from fedlangevin.experiments.posteriordb_gp import gp_pois_regr, reference_names

        problem, constrain, unconstrain, potential, parts = gp_pois_regr(data, iid_split(rows, clients))
        ref_names = reference_names(rows)
        return Posterior(name, problem, ref_names, constrain, unconstrain, _reference(folder, ref_names), potential,
                         parts, pyro_model(name, data, 0))
    if name == "arK-arK":  # y_t ~ N(alpha + sum_k beta_k y_{t-k}, sigma), t = K+1..T: a regression on the lags
        y, lags = col("y"), int(data["K"])
        design = np.stack([np.ones(rows)] + [y[lags - j:len(y) - j] for j in range(1, lags + 1)], axis=1)
        return _regression(name, folder, design, y[lags:], ["alpha"] + [f"beta[{j}]" for j in range(1, lags + 1)]
                           + ["sigma"], lambda b: _normal(b, 0.0, 10.0).sum(-1), lambda s: torch.log1p((s / 2.5) ** 2),
                           clients, data)
    if name == "diamonds-diamonds":
        x = np.asarray(data["X"], dtype=np.float64)
        xc = x[:, 1:] - x[:, 1:].mean(0)
        kc = xc.shape[1]
        names = [f"b[{i + 1}]" for i in range(kc)] + ["Intercept", "sigma"]
        design = np.concatenate([xc, ones[:, None]], axis=1)

        def beta_prior(b):
            return _normal(b[..., :kc], 0.0, 1.0).sum(-1) + _student_t(b[..., kc], 3.0, 8.0, 10.0)

        return _regression(name, folder, design, col("Y"), names, beta_prior,
                           lambda s: _student_t(s, 3.0, 0.0, 10.0), clients, data)
    if name == "earnings-logearn_interaction_z":
        h, male = col("height"), col("male")
        z = (h - h.mean()) / sd(h)
        design = np.stack([ones, z, male, z * male], axis=1)
        return _regression(name, folder, design, np.log(col("earn")), [f"beta[{i}]" for i in range(1, 5)] + ["sigma"],
                           _flat, _flat_scale, clients, data)
    if name == "kidiq-kidscore_momhsiq":
        design = np.stack([ones, col("mom_hs"), col("mom_iq")], axis=1)
        return _regression(name, folder, design, col("kid_score"), ["beta[1]", "beta[2]", "beta[3]", "sigma"],
                           _flat, lambda s: torch.log1p((s / 2.5) ** 2), clients, data)
    if name == "kidiq_with_mom_work-kidscore_interaction_c":
        hs, iq = col("mom_hs") - col("mom_hs").mean(), col("mom_iq") - col("mom_iq").mean()
        design = np.stack([ones, hs, iq, hs * iq], axis=1)
        return _regression(name, folder, design, col("kid_score"), [f"beta[{i}]" for i in range(1, 5)] + ["sigma"],
                           _flat, _flat_scale, clients, data)
    if name == "kilpisjarvi_mod-kilpisjarvi":
        design = np.stack([ones, col("x")], axis=1)
        pa, sa, pb, sb = (float(data[k]) for k in ("pmualpha", "psalpha", "pmubeta", "psbeta"))

        def beta_prior(b):
            return _normal(b[..., 0], pa, sa) + _normal(b[..., 1], pb, sb)

        return _regression(name, folder, design, col("y"), ["alpha", "beta", "sigma"], beta_prior, _flat_scale,
                           clients, data)
    if name == "mesquite-logmesquite_logvas":
        d1, d2 = col("diam1"), col("diam2")
        design = np.stack([ones, np.log(d1 * d2 * col("canopy_height")), np.log(d1 * d2), np.log(d1 / d2),
                           np.log(col("total_height")), np.log(col("density")), col("group")], axis=1)
        return _regression(name, folder, design, np.log(col("weight")), [f"beta[{i}]" for i in range(1, 8)] + ["sigma"],
                           _flat, _flat_scale, clients, data)
    if name == "nes2000-nes":
        age = col("age_discrete")
        design = np.stack([ones, col("real_ideo"), col("race_adj"), (age == 2) * 1.0, (age == 3) * 1.0,
                           (age == 4) * 1.0, col("educ1"), col("gender"), col("income")], axis=1)
        return _regression(name, folder, design, col("partyid7"), [f"beta[{i}]" for i in range(1, 10)] + ["sigma"],
                           _flat, _flat_scale, clients, data)
    # sblri-blr
    x = np.asarray(data["X"], dtype=np.float64)
    names = [f"beta[{i + 1}]" for i in range(x.shape[1])] + ["sigma"]
    return _regression(name, folder, x, col("y"), names, lambda b: _normal(b, 0.0, 10.0).sum(-1),
                       lambda s: _normal(s, 0.0, 10.0), clients, data)
