"""Conducive gradients: FA-LD with FSGLD's correction from Gaussian surrogates of the clients.

El Mekkaoui, Mesquita, Blomstedt, Kaski, "Federated Stochastic Gradient Langevin Dynamics"
(UAI 2021), the conducive-gradient estimator: every client s holds a cheap surrogate q_s of its own likelihood
factor, and the product q = prod_s q_s is shared once. Client s then steps with

    grad f^s(beta) + [grad f^q(beta) - grad f^q_s(beta)],   f^q = sum_c p_c f^q_c,

(in FA-LD's scaling f^c = (1/p_c) NLL_c + prior share, so that sum_c p_c f^c = f). The
bracket, the *conducive gradient*, sums to zero over clients with weights p_c, so the
average drift is untouched; where the surrogates are good, the corrected local gradient of
every client is close to the global grad f, and local steps stop drifting apart. On a
quadratic problem with exact surrogates it is grad f itself: K local steps are then K steps
of centralised Langevin dynamics, whatever the heterogeneity.

Surrogates here are the second-order expansions of f^c at a reference point theta* near the
global mode (a Gaussian in theta with precision H_c; FSGLD fits each q_s from its shard
alone, e.g. a Laplace approximation at the shard's mode, which for a label-skewed client may
lie far away or at infinity; the expansion at the global mode is where the chains are):

    f^q_c(theta) = g_c^T (theta - theta*) + 1/2 (theta - theta*)^T H_c (theta - theta*),

so the term is (gbar - g_c) + (Hbar - H_c)(beta - theta*), with g_c = grad f^c(theta*),
H_c its Hessian (dense for d <= 100, its diagonal beyond), gbar, Hbar their p-weighted
means. Without curvature it is :mod:`fedlangevin.corrections.control_variates`' term.

Cost: the reference search (:func:`fedlangevin.corrections.base.find_reference`), then once:
each client uploads g_c and H_c (d + d (d + 1) / 2 floats, or 2 d diagonal), the server
broadcasts gbar and Hbar. Nothing per round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from fedlangevin.warmup.adaptation import DENSE_MAX_DIM
from fedlangevin.corrections.base import SetupCost, check_rounds, client_curvature, client_gradients, find_reference

__all__ = ["Conducive", "Surrogates"]


@dataclass(frozen=True)
class Surrogates:
    """Given quadratic surrogates: ``center`` theta* (d,), ``grads`` g_c (N, d), ``curvature``
    H_c (N, d, d) or diagonal (N, d). All zero: flat surrogates (the correction is off)."""

    center: Any
    grads: Any
    curvature: Any


@dataclass(frozen=True)
class Conducive:
    """Settings of the conducive-gradient correction (``FALD(..., correction="conducive")``).

    curvature : ``"auto"`` (dense Hessians for d <= 100, diagonals beyond), ``"dense"`` or
        ``"diagonal"``.
    reference : the expansion point theta* (d,); ``None``: a federated mode search.
    surrogates : a :class:`Surrogates` to use as they are (no search, no fit).
    search_rounds : at most this many rounds of the federated search for theta* (default 50).
    """

    curvature: str = "auto"
    reference: Any = field(default=None, compare=False)
    surrogates: Any = field(default=None, compare=False)
    search_rounds: int = 50
    name: ClassVar[str] = "conducive"

    def __post_init__(self) -> None:
        object.__setattr__(self, "search_rounds", check_rounds(self.search_rounds))
        if self.curvature not in ("auto", "dense", "diagonal"):
            raise ValueError(f"curvature must be 'auto', 'dense' or 'diagonal'; got {self.curvature!r}")
        if isinstance(self.surrogates, dict):  # from a checkpoint's record
            object.__setattr__(self, "surrogates", Surrogates(**self.surrogates))
        if self.surrogates is not None and not isinstance(self.surrogates, Surrogates):
            raise ValueError(f"surrogates must be None or a Surrogates(center, grads, curvature); got {self.surrogates!r}")

    @property
    def active(self) -> bool:
        """False for given flat surrogates (all zero): the runner then builds FA-LD's own kernel."""
        given = self.surrogates
        return given is None or any(bool(torch.as_tensor(x).abs().sum() > 0) for x in (given.grads, given.curvature))

    def dense(self, dim: int) -> bool:
        return self.curvature == "dense" or (self.curvature == "auto" and dim <= DENSE_MAX_DIM)

    @property
    def releases(self) -> str:
        """What the correction releases besides FA-LD's uploads (for privacy accounting)."""
        if self.surrogates is not None:
            return "each client's surrogate (fitted outside the sampler from its data), once"
        search = "" if self.reference is not None else ", and the mode search's exact gradients and Hessians"
        return f"each client's exact gradient and Hessian at the reference point (its surrogate), once{search}"

    def record(self) -> dict:
        ref = None if self.reference is None else torch.as_tensor(self.reference, dtype=torch.float64).tolist()
        given = self.surrogates
        stored = None if given is None else {k: torch.as_tensor(getattr(given, k), dtype=torch.float64).clone()
                                             for k in ("center", "grads", "curvature")}
        return {"kind": self.name, "curvature": self.curvature, "reference": ref, "surrogates": stored,
                "search_rounds": self.search_rounds}

    def per_round_floats(self, num_clients: int, dim: int) -> tuple[float, float]:
        return 0.0, 0.0

    def build(self, problem, *, dtype: torch.dtype, device, upload=None) -> "BuiltConducive":
        return BuiltConducive(self, problem, dtype, torch.device(device))

    def __repr__(self) -> str:
        given = "given" if self.surrogates is not None else ("expanded at a given reference" if self.reference is not None
                                                              else "expanded at the mode")
        return f"Conducive(curvature={self.curvature!r}, surrogates={given})"


class BuiltConducive:
    """The kernel's side (:class:`~fedlangevin.federation.extensions.DriftCorrection`)."""

    def __init__(self, settings: Conducive, problem, dtype, device) -> None:
        self.settings, self.problem, self.dtype, self.device = settings, problem, dtype, device
        self.cost = SetupCost()

    def _fit(self, mode=None):
        work = self.problem.to(device="cpu", dtype=torch.float64)
        n, d = work.num_clients, work.dim
        given = self.settings.surrogates
        if given is not None:
            center = torch.as_tensor(given.center, dtype=torch.float64)
            grads = torch.as_tensor(given.grads, dtype=torch.float64)
            curv = torch.as_tensor(given.curvature, dtype=torch.float64)
            if center.shape != (d,) or grads.shape != (n, d) or curv.shape not in ((n, d, d), (n, d)):
                raise ValueError(f"surrogates must have center (d,) = ({d},), grads (N, d) = ({n}, {d}) and curvature "
                                 f"(N, d, d) or (N, d); got {tuple(center.shape)}, {tuple(grads.shape)}, "
                                 f"{tuple(curv.shape)}")
            up = n * (d + (d * (d + 1) // 2 if curv.dim() == 3 else d))
            return center, grads, curv, SetupCost(0, float(up), float(up))
        center, cost = find_reference(work, self.settings.reference, self.settings.search_rounds, mode)
        dense = self.settings.dense(d)
        grads = client_gradients(work, center)
        curv = client_curvature(work, center, dense)
        if dense:
            curv = 0.5 * (curv + curv.transpose(1, 2))
        up = n * (d + (d * (d + 1) // 2 if dense else d))
        return center, grads, curv, cost + SetupCost(0, float(up), float(up))

    def init(self, theta: torch.Tensor, mode: torch.Tensor | None = None) -> dict:
        center, grads, curv, self.cost = self._fit(mode)
        p = self.problem.weights.to(torch.float64)
        offset = (p @ grads)[None, :] - grads  # gbar - g_c
        coupling = torch.einsum("n,n...->...", p, curv)[None] - curv  # Hbar - H_c
        opts = {"device": self.device, "dtype": self.dtype}
        return {"center": center.to(**opts), "offset": offset.to(**opts), "coupling": coupling.to(**opts)}

    def term(self, state: dict, beta: torch.Tensor) -> torch.Tensor:
        diff = beta - state["center"]
        coupling = state["coupling"]
        if coupling.dim() == 3:  # dense: (Hbar - H_c) (beta - theta*) per client, H symmetric
            return torch.einsum("rnd,ned->rne", diff, coupling) + state["offset"]
        return diff * coupling + state["offset"]

    def update(self, state, theta, new_theta, beta, weights, generator) -> dict:
        return state

    def keep(self, state: dict, rows: torch.Tensor) -> dict:
        return state
