"""Gaussian (quadratic-energy) federated problems with exact posteriors.

:class:`QuadraticProblem` is any problem whose client energies are quadratic,
f^c(theta) = 1/2 theta^T A_c theta - b_c^T theta, so that grad f^c = A_c theta - b_c, the
global energy f = sum_c p_c f^c has Hessian A = sum_c p_c A_c and the target
pi ∝ exp(-f / tau) is N(A^{-1} b, tau A^{-1}) with b = sum_c p_c b_c.

:class:`GaussianSimulation` is the paper's Sec. 7.1 generator (Deng et al., *On Convergence
of Federated Averaging Langevin Dynamics*): client centres theta_c ~ N(0, alpha I), n_c
points x_ci ~ N(theta_c, Sigma), loss l(theta; x) = 1/2 (theta - x)^T Sigma^{-1} (theta - x),
so that with p_c = n_c / n, f^c = ell^c / p_c has A_c = n Sigma^{-1} and b_c = n Sigma^{-1}
xbar_c, and the posterior at temperature tau is N(u, tau Sigma / n) with u the mean of all
points.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch

from fedlangevin._validation import check_fits, check_int, check_names, check_real, check_seed, check_tensor
from fedlangevin.problems.base import (
    FederatedProblem,
    QuadraticForm,
    check_client_indices,
    check_count_fits,
    check_weights,
)

__all__ = ["QuadraticProblem", "GaussianSimulation", "CurvatureSimulation", "PAPER_COV", "draw_client_data"]

#: Sigma of the paper's simulation (Sec. 7.1).
PAPER_COV = ((5.0, -2.0), (-2.0, 1.0))


def _symmetric_psd(name: str, a: torch.Tensor, d: int) -> None:
    if not torch.isfinite(a).all():
        raise ValueError(f"{name} must be finite")
    if not torch.allclose(a, a.transpose(-1, -2), rtol=1e-10, atol=1e-12 * float(a.abs().max().clamp_min(1.0))):
        raise ValueError(f"{name} must be symmetric")


def draw_client_data(
    num_clients: int, samples: int, alpha: float, cov: torch.Tensor, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The simulation's random draws (Sec. 7.1), float64, from one generator seeded ``seed``.

    Returns the client centres theta_c ~ N(0, alpha I), shape (N, d), and the zero-mean
    point noise eps_ci ~ N(0, Sigma), shape (N, samples, d), so that x_ci = theta_c + eps_ci
    (drawn in that order: the centres first, then standard normals z with eps = z L^T,
    Sigma = L L^T). :class:`GaussianSimulation` and :class:`CurvatureSimulation` both build
    their data from these draws, so the same seed gives them the same centres and noise.
    """
    sigma = cov.to(torch.float64)
    d = sigma.shape[0]
    g = torch.Generator().manual_seed(seed)
    centres = alpha**0.5 * torch.randn(num_clients, d, generator=g, dtype=torch.float64)
    z = torch.randn(num_clients, samples, d, generator=g, dtype=torch.float64)
    return centres, z @ torch.linalg.cholesky(sigma).T


#: largest condition number of the weighted hessian A for which :meth:`QuadraticProblem.posterior`
#: inverts it (float64 keeps about 16 - 12 = 4 correct digits of A^-1 at this bound)
MAX_CONDITION = 1e12


class QuadraticProblem(FederatedProblem):
    """Quadratic client energies f^c(theta) = 1/2 theta^T A_c theta - b_c^T theta.

    Parameters
    ----------
    hessians : (d, d) shared by all clients, or (N, d, d) per client; symmetric positive
        semi-definite, with the weighted average A = sum_c p_c A_c positive definite.
    shifts : (N, d), the vectors b_c.
    weights : (N,) client weights p_c, positive, summing to 1.
    """

    def __init__(
        self,
        hessians: torch.Tensor | Sequence,
        shifts: torch.Tensor | Sequence,
        weights: torch.Tensor | Sequence[float],
        var_names: Sequence[str] | None = None,
    ) -> None:
        a = check_tensor("hessians", hessians).clone()
        b = check_tensor("shifts", shifts).clone()
        if b.dim() != 2:
            raise ValueError(f"shifts must have shape (N, d); got {tuple(b.shape)}")
        n_clients, d = b.shape
        if a.shape not in ((d, d), (n_clients, d, d)):
            raise ValueError(f"hessians must have shape ({d}, {d}) or ({n_clients}, {d}, {d}); got {tuple(a.shape)}")
        _symmetric_psd("hessians", a, d)
        if not torch.isfinite(b).all():
            raise ValueError("shifts must be finite")
        self.weights = check_weights(weights, n_clients)
        self.num_clients, self.dim = n_clients, d
        self.hessians, self.shifts = a, b
        self.var_names = check_names("var_names", var_names, d)
        eig = torch.linalg.eigvalsh(a)
        if (eig < -1e-10 * eig.abs().max()).any():
            raise ValueError("hessians must be positive semi-definite")
        if float(torch.linalg.eigvalsh(self.global_hessian).min()) <= 0:
            raise ValueError("the weighted average of the hessians, sum_c p_c A_c, must be positive definite")

    # -- the math -----------------------------------------------------------------------
    @property
    def global_hessian(self) -> torch.Tensor:
        """A = sum_c p_c A_c."""
        a = self.hessians
        if a.dim() == 2:
            return a
        return torch.einsum("n,nij->ij", self.weights.to(a), a)

    @property
    def global_shift(self) -> torch.Tensor:
        """b = sum_c p_c b_c."""
        return self.weights.to(self.shifts) @ self.shifts

    def quadratic(self) -> QuadraticForm:
        return QuadraticForm(self.hessians, self.shifts)

    def grad(self, theta, *, batch_size=None, generator=None):
        if batch_size is not None:
            raise ValueError("batch_size is not supported by QuadraticProblem (no data); use batch_size=None")
        return self._affine(theta) - self.shifts

    def _affine(self, theta: torch.Tensor) -> torch.Tensor:
        a = self.hessians
        if a.dim() == 2:
            return theta @ a  # A symmetric: (A theta)^T = theta^T A
        return torch.einsum("rnd,nde->rne", theta, a)

    def energy(self, theta: torch.Tensor) -> torch.Tensor:
        """Global energy f(theta) = sum_c p_c f^c(theta) (up to a constant), theta (..., d)."""
        a, b = self.global_hessian.to(theta), self.global_shift.to(theta)
        return 0.5 * ((theta @ a) * theta).sum(-1) - theta @ b

    def posterior(self, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact target N(A^{-1} b, tau A^{-1}) at temperature tau; float64 CPU tensors.

        A ValueError (naming ``hessians``) when A is too ill-conditioned for its inverse to be
        computed in float64 (condition number above :data:`MAX_CONDITION` = 1e12: the
        covariance would lose more than 12 of its 16 digits, or be inf/NaN), and (naming
        ``temperature``) when tau A^{-1} overflows.
        """
        tau = check_real("temperature", temperature, low=0.0, low_open=True)
        a = self.global_hessian.double().cpu()
        b = self.global_shift.double().cpu()
        eig = torch.linalg.eigvalsh(a)
        low, high = float(eig.min()), float(eig.max())
        if not low > high / MAX_CONDITION:
            raise ValueError(
                f"hessians: the weighted average A = sum_c p_c A_c has eigenvalues in [{low:.3g}, {high:.3g}], a "
                f"condition number above {MAX_CONDITION:g}; its inverse (the posterior covariance) cannot be computed "
                "accurately in float64: rescale the coordinates or drop the flat directions"
            )
        mean = torch.linalg.solve(a, b)
        cov = tau * torch.linalg.inv(a)
        if not (torch.isfinite(mean).all() and torch.isfinite(cov).all()):
            raise ValueError(f"temperature={tau:g}: the posterior covariance tau A^-1 (or its mean) overflows float64")
        return mean, 0.5 * (cov + cov.T)

    @property
    def smoothness(self) -> float:
        """L = max_c lambda_max(A_c) (Assumption 5.1, each f^c is L-smooth)."""
        return float(torch.linalg.eigvalsh(self.hessians.double().cpu()).max())

    @property
    def convexity(self) -> float:
        """m = min_c lambda_min(A_c) (Assumption 5.2, each f^c is m-strongly convex)."""
        return float(torch.linalg.eigvalsh(self.hessians.double().cpu()).min())

    @property
    def heterogeneity(self) -> float:
        """gamma = max_c ||grad f^c(theta*)|| at the global minimiser theta* (Assumption 5.3)."""
        mean, _ = self.posterior(1.0)
        a = self.hessians.double().cpu()
        grads = (a @ mean if a.dim() == 2 else torch.einsum("nij,j->ni", a, mean)) - self.shifts.double().cpu()
        return float(torch.linalg.vector_norm(grads, dim=-1).max())

    # -- the private gradient (FederatedProblem.private_grad) -----------------------------
    #: whether the problem keeps its data rows (per-example gradients, private minibatches)
    _has_rows = False

    def prior_grad(self, theta):
        """0: a quadratic problem keeps no prior apart from its client energies, so the whole
        gradient A_c theta - b_c counts as the client's data term (client-level privacy clips it all)."""
        self._check_private_theta(theta)
        return torch.zeros_like(theta)

    def _nll_grad(self, theta, rows, clip):
        # p_c (A_c theta - b_c): the data term A_c theta - b_c once private_grad scales it by 1/p_c
        return (self._affine(theta) - self.shifts) * self.weights.to(theta)[:, None]

    def _privacy_refusal(self, adjacency):
        if adjacency == "record" and not self._has_rows:
            return ("keeps no data rows (its client energies are quadratic forms A_c, b_c): use "
                    "fedlangevin.privacy.ClientLevel, or a problem that holds the rows (GaussianSimulation)")
        return super()._privacy_refusal(adjacency)

    def _draw_rows(self, chains, b, generator, device):
        if not self._has_rows:
            raise ValueError(f"batch_size is not supported by {type(self).__name__} (no data rows); use batch_size=None")
        return super()._draw_rows(chains, b, generator, device)

    def clients(self, indices):
        """The quadratic of the clients ``indices`` only: A_c and b_c of those clients, their p_c
        (see :meth:`FederatedProblem.clients`); no random draws, so nothing else to keep."""
        if type(self) is not QuadraticProblem:  # subclasses with data (minibatches) keep every client's draws
            return super().clients(indices)
        idx = check_client_indices(indices, self.num_clients)
        new = copy.copy(self)
        new.num_clients = int(idx.numel())
        new.shifts = self.shifts.index_select(0, idx.to(self.shifts.device))
        if self.hessians.dim() == 3:
            new.hessians = self.hessians.index_select(0, idx.to(self.hessians.device))
        new.weights = self.weights.index_select(0, idx)
        return new

    def to(self, device=None, dtype=None):
        new = copy.copy(self)
        for name in self._tensor_attrs():
            t = getattr(self, name)
            if t is not None:
                setattr(new, name, t.to(device=device, dtype=dtype if t.is_floating_point() else None))
        new.weights = self.weights  # weights stay float64 on CPU (validation, bookkeeping)
        return new

    def _tensor_attrs(self) -> tuple[str, ...]:
        return ("hessians", "shifts")


class GaussianSimulation(QuadraticProblem):
    """The paper's simulated federated Gaussian problem (Sec. 7.1).

    Parameters
    ----------
    num_clients : N (the paper: 50).
    alpha : heterogeneity; client centres theta_c ~ N(0, alpha I) (the paper: 0, 1, 10, 100, 1000).
    samples_per_client : n_c, an int for all clients or one int per client (the paper leaves
        it open; the default 20 gives a posterior of scale sqrt(5 / 1000) per coordinate).
    cov : Sigma, the data covariance (default the paper's [[5, -2], [-2, 1]]); any d.
    prior_precision : lambda >= 0 of an optional N(0, I / lambda) prior whose energy
        lambda ||theta||^2 / 2 is added to every client's f^c (the prior share); 0 = flat.
    seed : seeds the data generator (independent of the sampler's seed).

    ``problem.data`` is (N, max n_c, d) (rows past n_c are zero and never used),
    ``problem.client_sizes`` is n_c; minibatch gradients draw indices uniformly with
    replacement inside each client, an unbiased estimate of the full gradient.
    """

    def __init__(
        self,
        num_clients: int = 50,
        alpha: float = 1.0,
        samples_per_client: int | Sequence[int] = 20,
        cov: torch.Tensor | Sequence | None = None,
        prior_precision: float = 0.0,
        seed: int = 0,
    ) -> None:
        n_clients = check_int("num_clients", num_clients, 1)
        alpha = check_real("alpha", alpha, low=0.0)
        lam = check_real("prior_precision", prior_precision, low=0.0)
        seed = check_seed("seed", seed)
        sigma = check_tensor("cov", PAPER_COV if cov is None else cov)
        if sigma.dim() != 2 or sigma.shape[0] != sigma.shape[1] or sigma.shape[0] < 1:
            raise ValueError(f"cov must be a square (d, d) matrix; got shape {tuple(sigma.shape)}")
        _symmetric_psd("cov", sigma, sigma.shape[0])
        if float(torch.linalg.eigvalsh(sigma).min()) <= 0:
            raise ValueError("cov must be positive definite")
        d = sigma.shape[0]
        if not isinstance(samples_per_client, (list, tuple)) and getattr(samples_per_client, "ndim", 0) == 0:
            size = check_int("samples_per_client", samples_per_client, 1)
            # the data (N, n_c, d) and its two temporaries (noise, mask product), float64
            check_fits("num_clients", 3 * 8 * n_clients * size * d, "cpu",
                       f"the data of {n_clients} clients x {size} points x d = {d}",
                       "use fewer clients or fewer samples_per_client")
            sizes = [size] * n_clients
        else:
            sizes = [check_int("samples_per_client", s, 1) for s in samples_per_client]
            if len(sizes) != n_clients:
                raise ValueError(f"samples_per_client must be an int or have num_clients={n_clients} entries; got {len(sizes)}")
        counts = torch.tensor(sizes, dtype=torch.int64)
        n_total = int(counts.sum())
        check_fits("samples_per_client", 3 * 8 * n_clients * max(sizes) * d, "cpu",
                   f"the data of {n_clients} clients x {max(sizes)} points x d = {d}", "use fewer samples_per_client")

        n_max = int(counts.max())
        centres, noise = draw_client_data(n_clients, n_max, alpha, sigma, seed)
        data = centres[:, None, :] + noise
        mask = torch.arange(n_max)[None, :] < counts[:, None]
        data = data * mask[..., None]
        client_means = data.sum(1) / counts[:, None]

        precision = torch.linalg.inv(sigma)
        precision = 0.5 * (precision + precision.T)
        lik_hessian = n_total * precision  # A_c for p_c = n_c / n, the same for every client
        hessian = lik_hessian + lam * torch.eye(d, dtype=torch.float64)
        shifts = client_means @ lik_hessian  # b_c = n Sigma^{-1} xbar_c (row form; precision symmetric)

        self.alpha, self.cov, self.prior_precision, self.seed = alpha, sigma, lam, seed
        self.centres, self.data, self.client_sizes = centres, data, counts
        self.client_means = client_means
        self.lik_hessian = lik_hessian
        super().__init__(hessian, shifts, counts.double() / n_total)

    @property
    def num_data(self) -> int:
        return int(self.client_sizes.sum())

    @property
    def data_mean(self) -> torch.Tensor:
        """u = (1/n) sum_c sum_i x_ci, the posterior mean under a flat prior."""
        return self.weights @ self.client_means

    def grad(self, theta, *, batch_size=None, generator=None):
        if batch_size is None:
            return self._affine(theta) - self.shifts
        # (1/p_c)(n_c/b) sum_{i in B} Sigma^{-1}(theta - x_i) = n Sigma^{-1}(theta - xbar_B), prior added.
        r, n_clients, d = theta.shape
        n_max = self.data.shape[1]
        sizes = self.client_sizes.to(theta.device)
        u = torch.rand(r, n_clients, batch_size, generator=generator, device=theta.device, dtype=theta.dtype)
        idx = (u * sizes[None, :, None]).long().clamp_max_(sizes[None, :, None] - 1)
        flat = idx + (torch.arange(n_clients, device=theta.device) * n_max)[None, :, None]
        batch = self.data.reshape(-1, d).index_select(0, flat.reshape(-1)).reshape(r, n_clients, batch_size, d)
        batch_mean = batch.mean(2)
        return self._affine(theta) - batch_mean @ self.lik_hessian

    def _tensor_attrs(self):
        return ("hessians", "shifts", "data", "lik_hessian")

    # -- the private gradient: l(theta; x) = 1/2 (theta - x)^T Sigma^{-1} (theta - x) per row ------
    _has_rows = True

    def _per_example_grads(self, theta, rows):
        """Sigma^{-1} (theta - x_i) for the rows (R, N, B): shape (R, N, B, d)."""
        r, n, b = rows.shape
        d, n_max = self.dim, self.data.shape[1]
        flat = rows.to(self.data.device) + (torch.arange(n, device=self.data.device) * n_max)[None, :, None]
        x = self.data.reshape(-1, d).index_select(0, flat.reshape(-1)).reshape(r, n, b, d)
        return (theta.unsqueeze(2) - x) @ (self.lik_hessian / self.num_data)  # Sigma^{-1} symmetric

    def _nll_grad(self, theta, rows, clip):
        if clip is not None:  # per example: FederatedProblem's chunked sum of the clipped gradients
            return FederatedProblem._nll_grad(self, theta, rows, clip)
        precision = self.lik_hessian / self.num_data
        if rows is None:  # sum_i Sigma^{-1} (theta - x_i) = Sigma^{-1} (n_c theta - sum_i x_i); padding rows are 0
            sizes = self.client_sizes.to(device=theta.device, dtype=theta.dtype)
            return (theta * sizes[:, None] - self.data.sum(1)) @ precision
        return self._per_example_grads(theta, rows).sum(2)

    def prior_grad(self, theta):
        """grad U_0 = lambda theta (the prior_precision's share of every client)."""
        self._check_private_theta(theta)
        return theta * self.prior_precision

    def __repr__(self) -> str:
        return (
            f"GaussianSimulation(num_clients={self.num_clients}, alpha={self.alpha:g}, "
            f"n={self.num_data}, d={self.dim}, prior_precision={self.prior_precision:g}, seed={self.seed})"
        )


class CurvatureSimulation(QuadraticProblem):
    """The paper's Gaussian simulation with client-specific data covariance s_c Sigma.

    Client c draws n_c points x_ci ~ N(theta_c, s_c Sigma), theta_c ~ N(0, alpha I), with
    s_c = spread^(-1 + 2 c / (N - 1)) (log-evenly spaced in [1/spread, spread]: clients
    measuring with different noise levels). Its energy
    f^c = (1/p_c) sum_i 1/2 (theta - x_ci)^T (s_c Sigma)^{-1} (theta - x_ci) has Hessian
    A_c = (n / s_c) Sigma^{-1} and b_c = A_c xbar_c; the posterior is N(A^{-1} b, tau A^{-1})
    with A = sum_c p_c A_c. Client Hessians that differ make the local steps biased (the U
    shape of Fig. 1a). The centres and the point noise are :func:`draw_client_data`'s, as for
    :class:`GaussianSimulation` with the same seed, so spread = 1 reproduces its data exactly.
    """

    def __init__(
        self,
        num_clients: int = 50,
        alpha: float = 1.0,
        samples_per_client: int = 20,
        curvature_spread: float = 1.5,
        seed: int = 0,
    ) -> None:
        d = len(PAPER_COV)
        # per client: its centre, mean, shift and (d, d) Hessian, and per point its data, noise and a temporary
        n_clients = check_count_fits("num_clients", num_clients, 2, 8 * (d * d + 3 * d + 3 * d),
                                     "a client's data and Hessian (float64)")
        alpha = check_real("alpha", alpha, low=0.0)
        n_c = check_count_fits("samples_per_client", samples_per_client, 1, 3 * 8 * n_clients * d,
                               f"a data point on each of {n_clients} clients (float64, with two temporaries)")
        spread = check_real("curvature_spread", curvature_spread, low=1.0)
        seed = check_int("seed", seed, 0)
        sigma = torch.tensor(PAPER_COV, dtype=torch.float64)
        centres, noise = draw_client_data(n_clients, n_c, alpha, sigma, seed)
        scales = spread ** torch.linspace(-1.0, 1.0, n_clients, dtype=torch.float64)
        data = centres[:, None, :] + noise * scales.sqrt()[:, None, None]
        client_means = data.mean(1)
        n_total = n_clients * n_c
        precision = torch.linalg.inv(sigma)
        precision = 0.5 * (precision + precision.T)
        hessians = n_total * precision[None] / scales[:, None, None]
        shifts = torch.einsum("nij,nj->ni", hessians, client_means)
        self.alpha, self.curvature_spread, self.seed = alpha, spread, seed
        self.cov, self.noise_scales, self.centres, self.client_means = sigma, scales, centres, client_means
        self.client_sizes = torch.full((n_clients,), n_c, dtype=torch.int64)
        super().__init__(hessians, shifts, torch.full((n_clients,), 1.0 / n_clients, dtype=torch.float64))

    @property
    def num_data(self) -> int:
        return int(self.client_sizes.sum())

    def __repr__(self) -> str:
        return (
            f"CurvatureSimulation(num_clients={self.num_clients}, alpha={self.alpha:g}, n={self.num_data}, "
            f"curvature_spread={self.curvature_spread:g}, seed={self.seed})"
        )
