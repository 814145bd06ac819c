"""Control variates at a reference point: FA-LD with VR-FALD*'s corrected local gradients.

Plassier, Durmus, Moulines et al., "Federated Averaging Langevin Dynamics: toward a unified
theory and new algorithms" (AISTATS 2023), VR-FALD*: each client replaces its gradient by

    grad f^c(beta) - grad f^c(theta*) + grad f(theta*),   grad f = sum_c p_c grad f^c,

with theta* a fixed reference point near the mode (where grad f(theta*) is about 0). The
term c_c = grad f(theta*) - grad f^c(theta*) is a constant per client: the corrected
gradients of all clients vanish at the same point theta*, so the local steps no longer pull
the clients apart towards their own modes. The sum over clients is unchanged
(sum_c p_c c_c = 0), so with K = 1 the round is FA-LD's (SGLD's) up to the constant's
rounding. What is left of the drift is the curvature difference (H_c - H)(beta - theta*)
(:mod:`fedlangevin.corrections.conducive` corrects that too).

Cost: a federated search for theta* (:func:`fedlangevin.corrections.base.find_reference`,
or theta* given), then once: each client uploads grad f^c(theta*) (d floats), the server
broadcasts grad f(theta*) (d floats to each client). Nothing per round.

Under partial participation the average of the corrected drifts over the clients drawn,
sum_c w_c (grad f^c(beta) - grad f^c(theta*)) + grad f(theta*), no longer carries the spread of
the clients' own gradients grad f^c(theta*) (the client-sampling noise), only that of their
differences. With minibatches (``batch_size``) each client's minibatch gradient is centred at
theta* as well (``minibatches=True``, SGLD-CV: :mod:`fedlangevin.problems.centred`), at twice the
per-example gradient work and one full gradient per client at theta*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from fedlangevin._validation import check_bool
from fedlangevin.corrections.base import SetupCost, check_fraction, check_rounds, find_reference
from fedlangevin.problems.centred import CentredClients, CentredMinibatches, control_variate_offsets

__all__ = ["ControlVariates"]


@dataclass(frozen=True)
class ControlVariates:
    """Settings of the control-variate correction (``FALD(..., correction="control_variates")``).

    reference : theta* (d,); ``None`` (default) finds it by a federated mode search.
    strength : s in [0, 1]: the term is s (grad f(theta*) - grad f^c(theta*)); 1 (default) is
        VR-FALD*, 0 switches the correction off (the samples are FA-LD's, bit for bit).
    search_rounds : at most this many rounds of the federated search for theta* (default 50).
    minibatches : with ``batch_size``, centre every client's minibatch gradient at theta* too
        (SGLD-CV, :class:`~fedlangevin.problems.centred.CentredMinibatches`: the minibatch noise is
        that of g_i(beta) - g_i(theta*)); default True. False: the plain minibatch gradients.
    """

    reference: Any = field(default=None, compare=False)
    strength: float = 1.0
    search_rounds: int = 50
    minibatches: bool = True
    name: ClassVar[str] = "control_variates"

    def __post_init__(self) -> None:
        object.__setattr__(self, "strength", check_fraction("strength", self.strength))
        object.__setattr__(self, "search_rounds", check_rounds(self.search_rounds))
        object.__setattr__(self, "minibatches", check_bool("minibatches", self.minibatches))

    @property
    def active(self) -> bool:
        """False when switched off (strength 0): the runner then builds FA-LD's own kernel."""
        return self.strength > 0

    @property
    def releases(self) -> str:
        """What the correction releases besides FA-LD's uploads (for privacy accounting)."""
        found = "" if self.reference is not None else " and the mode search's exact gradients and Hessians"
        return f"each client's exact gradient grad f^c(theta*) at the reference point, once{found}"

    def record(self) -> dict:
        ref = None if self.reference is None else torch.as_tensor(self.reference, dtype=torch.float64).tolist()
        return {"kind": self.name, "reference": ref, "strength": self.strength, "search_rounds": self.search_rounds,
                "minibatches": self.minibatches}

    def per_round_floats(self, num_clients: int, dim: int) -> tuple[float, float]:
        """Extra floats (up per upload, down per round) on top of FA-LD's: none."""
        return 0.0, 0.0

    def centre(self, problem, mode: torch.Tensor | None = None) -> tuple[CentredClients, SetupCost]:
        """The problem with these control variates built in (:class:`~fedlangevin.problems.CentredClients`:
        what FA-HMC runs on) and the set-up's cost: theta* is ``reference``, else ``mode`` (``init="map"``'s),
        else the federated search of :func:`~fedlangevin.corrections.base.find_reference`; then every
        client's gradient at theta* (N d floats up, N d down)."""
        ref, cost = self.reference_point(problem, mode)
        return CentredClients(problem, ref, strength=self.strength, minibatches=self.minibatches), cost

    def reference_point(self, problem, mode: torch.Tensor | None = None) -> tuple[torch.Tensor, SetupCost]:
        """theta* (d,) float64 (``reference``, else ``mode``, else the federated search of
        :func:`~fedlangevin.corrections.base.find_reference`) and the set-up's whole cost: the search, and
        every client's gradient there (N d floats up) and their average back (N d down)."""
        work = problem.to(device="cpu", dtype=torch.float64)
        ref, cost = find_reference(work, self.reference, self.search_rounds, mode)
        n, d = work.num_clients, work.dim
        return ref, cost + SetupCost(0, float(n * d), float(n * d))

    def build(self, problem, *, dtype: torch.dtype, device, upload=None) -> "BuiltControlVariates":
        return BuiltControlVariates(self, problem, dtype, torch.device(device))

    def __repr__(self) -> str:
        ref = "found" if self.reference is None else "given"
        return f"ControlVariates(reference={ref}, strength={self.strength:g})"


class BuiltControlVariates:
    """The kernel's side (:class:`~fedlangevin.federation.extensions.DriftCorrection`). ``cost``: the
    set-up's communication, known after :meth:`init`."""

    def __init__(self, settings: ControlVariates, problem, dtype, device) -> None:
        self.settings, self.problem, self.dtype, self.device = settings, problem, dtype, device
        self.cost = SetupCost()
        self._centred = None  # (theta*, the problem it wraps, CentredMinibatches): built once per reference

    def minibatch_problem(self, work, state: dict):
        """What the clients' minibatch gradients come from: ``work`` (the kernel's problem), its
        minibatches centred at the state's theta* (:class:`CentredMinibatches`) unless
        ``minibatches=False`` or the problem has no per-example gradients."""
        if not self.settings.minibatches or work._privacy_refusal("record") is not None or work.client_sizes is None:
            return work
        ref = state["reference"]
        cached = self._centred
        if cached is None or cached[1] is not work or not torch.equal(cached[0], ref):
            cached = self._centred = (ref.clone(), work, CentredMinibatches(work, ref))
        return cached[2]

    def init(self, theta: torch.Tensor, mode: torch.Tensor | None = None) -> dict:
        ref, self.cost = self.settings.reference_point(self.problem, mode)
        offset = control_variate_offsets(self.problem, ref, self.settings.strength)
        return {"reference": ref.to(device=self.device, dtype=self.dtype),
                "offset": offset.to(device=self.device, dtype=self.dtype)}

    def term(self, state: dict, beta: torch.Tensor) -> torch.Tensor:
        return state["offset"]  # (N, d), the same for every chain and local step

    def update(self, state, theta, new_theta, beta, weights, generator) -> dict:
        return state

    def keep(self, state: dict, rows: torch.Tensor) -> dict:
        return state
