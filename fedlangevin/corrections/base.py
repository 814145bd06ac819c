"""What the drift corrections share: their set-up cost, the reference point, client gradients
and curvature, and the mapping from ``FALD(..., correction=...)`` to a settings record.

FA-LD's local steps drift towards each client's own posterior; the bias grows with K and
the heterogeneity of the clients (Deng et al., Thm 5.7's gamma term). A *drift correction*
adds a term c_c to client c's gradient at every local step (the kernel's
:class:`~fedlangevin.federation.extensions.DriftCorrection` extension point) so that the corrected
local gradients agree across clients near the posterior's bulk:

- ``"control_variates"`` (:mod:`fedlangevin.corrections.control_variates`): VR-FALD*'s control
  variates at a reference point theta* (Plassier et al. 2023);
- ``"conducive"`` (:mod:`fedlangevin.corrections.conducive`): FSGLD's conducive gradients from
  Gaussian surrogates of the clients' energies (El Mekkaoui et al. 2021);
- ``"qlsd++"`` (:mod:`fedlangevin.corrections.qlsd`): QLSD++'s per-client gradient memories
  (Vono et al. 2022), quantised through the sampler's ``upload=`` codec.

:mod:`fedlangevin.corrections.drift` maps ``FALD(..., correction=...)`` to them. ``docs/drift.md`` has the equations, the costs in floats and the exact-law study.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.warmup.adaptation import DENSE_MAX_DIM
from fedlangevin.warmup.curvature import client_hessian_diagonals
from fedlangevin.warmup.mode import client_derivatives, find_map, global_energy

__all__ = ["SetupCost", "check_fraction", "check_rounds", "client_curvature", "client_gradients", "find_reference"]

@dataclass(frozen=True)
class SetupCost:
    """The one-off communication of a correction's set-up (summed over clients): rounds and floats."""

    rounds: int = 0
    floats_up: float = 0.0
    floats_down: float = 0.0

    def __add__(self, other: "SetupCost") -> "SetupCost":
        return SetupCost(self.rounds + other.rounds, self.floats_up + other.floats_up,
                         self.floats_down + other.floats_down)


def check_fraction(name: str, value: Any) -> float:
    """A real number in [0, 1] (a correction's strength or memory rate), else ``ValueError``:
    the package's one real-number check (numpy scalars and 0-d tensors accepted; bools, strings,
    NaN and integers beyond the float range refused)."""
    return check_real(name, value, low=0.0, high=1.0)


def check_rounds(value: Any) -> int:
    """A correction's ``search_rounds``: an integer >= 1 (numpy and 0-d integers too; not a
    bool), else ``ValueError``."""
    return check_int("search_rounds", value, 1)


def client_gradients(problem, theta: torch.Tensor) -> torch.Tensor:
    """Full gradients grad f^c(theta) (N, d) of every client at one point theta (d,)."""
    n, d = problem.num_clients, problem.dim
    return problem.grad(theta.reshape(1, 1, d).expand(1, n, d).clone())[0]


def client_curvature(problem, theta: torch.Tensor, dense: bool) -> torch.Tensor:
    """Client Hessians of f^c at theta (d,): (N, d, d) when ``dense``, else their diagonals (N, d).

    Dense: central differences of the gradients (:func:`fedlangevin.warmup.mode.client_derivatives`).
    Diagonal: the problem's own ``client_hessian_diagonal(theta)`` when it has one (logistic
    regression, analytic), else central differences of the gradients coordinate by coordinate
    (2 d gradient evaluations, in blocks of at most 2^24 numbers).
    """
    if dense:
        return client_derivatives(problem, theta, True)[1]
    return client_hessian_diagonals(problem, theta)


def find_reference(problem, reference: Any = None, max_rounds: int = 50,
                   mode: torch.Tensor | None = None) -> tuple[torch.Tensor, SetupCost]:
    """A reference point theta* (d,) near the mode of f = sum_c p_c f^c, float64, and its cost.

    ``reference`` given (else ``mode``, one the run found already with ``init="map"``): checked
    and broadcast to the clients (N d floats down). Otherwise a
    federated search: the damped Newton search of :func:`fedlangevin.warmup.mode.find_map` for
    d <= ``DENSE_MAX_DIM`` (clients send gradients and Hessians), and beyond it L-BFGS run by
    the server on f, one round per evaluation (clients send f^c and grad f^c, d + 1 floats;
    the server broadcasts theta, d floats), which needs the problem's energy. Either search
    stops after ``max_rounds`` rounds: the corrections are unbiased for any theta*, a closer one
    only corrects more, and a long search would cost more than the sampling it helps.
    """
    n, d = problem.num_clients, problem.dim
    reference = mode if reference is None else reference
    if reference is not None:
        theta = torch.as_tensor(reference, dtype=torch.float64).detach().cpu()
        if theta.shape != (d,) or not bool(torch.isfinite(theta).all()):
            raise ValueError(f"reference must be a finite vector of shape ({d},); got shape {tuple(theta.shape)}")
        return theta.clone(), SetupCost(0, 0.0, float(n * d))
    work = problem.to(device="cpu", dtype=torch.float64)
    if d <= DENSE_MAX_DIM:
        found = find_map(work, max_rounds=max_rounds)
        return found.theta, SetupCost(found.rounds, found.floats_up, found.floats_down + n * d)
    energy = global_energy(work)
    if energy is None:
        raise ValueError(
            f"the correction needs a reference point near the mode; this problem (d = {d} > {DENSE_MAX_DIM}) does "
            "not expose its energy for the federated L-BFGS search: give one, e.g. ControlVariates(reference=theta)"
        )
    p = work.weights.to(torch.float64)
    x = torch.zeros(d, dtype=torch.float64, requires_grad=True)
    g0 = p @ client_gradients(work, x.detach())
    opt = torch.optim.LBFGS([x], lr=1.0, max_iter=max_rounds, max_eval=max_rounds, tolerance_grad=1e-9 * (1.0 + float(g0.abs().max())),
                            tolerance_change=0.0, history_size=20, line_search_fn="strong_wolfe")
    rounds = 0

    def closure():
        nonlocal rounds
        rounds += 1
        with torch.no_grad():
            x.grad = p @ client_gradients(work, x.detach())
            return torch.tensor(energy(x.detach()), dtype=torch.float64)

    opt.step(closure)
    theta = x.detach().clone()
    if not bool(torch.isfinite(theta).all()) or not math.isfinite(energy(theta)):
        raise ValueError("the correction's reference search diverged; give a reference point (reference=theta)")
    return theta, SetupCost(rounds, float(rounds * n * (d + 1)), float(rounds * n * d + n * d))
