"""Per-client gradient memories: FA-LD with QLSD++'s memory mechanism as a drift correction.

Vono, Plassier, Durmus, Dieuleveut, Moulines, "QLSD: Quantised Langevin Stochastic Dynamics
for Bayesian Federated Learning" (AISTATS 2022), QLSD++: client i keeps a memory
h_i of its gradient and sends only the quantised difference Q(grad U_i(theta_k) - h_i); the
server adds it to its copy of the memory, and both update h_i <- h_i + alpha Q(...). QLSD++
takes one step per round (K = 1) and compresses gradients. Here the memories correct FA-LD's
K local steps instead (as SCAFFOLD's control variates do for FedAvg): client c steps with

    grad f^c(beta) + (hbar - h_c),   hbar = sum_c p_c h_c,

and at the end of the round uploads, besides its (quantised) local state, the (quantised)
difference between its full gradient at the round's broadcast point theta_t and its memory:

    h_c <- h_c + alpha Q(grad f^c(theta_t) - h_c),    hbar <- sum_c p_c h_c (server, broadcast with theta).

With alpha = 1 and no quantisation the next round's local gradient is grad f^c(beta) -
grad f^c(theta_t) + grad f(theta_t): every client starts the round on the global gradient.
The memories lag one round (they are sent with the round's upload, so a round still costs
one exchange). Q is the sampler's ``upload=`` codec (``codec(x, 0, generator) = Q(x)``);
without one the differences travel exact. Only clients that take part in a round update
their memory. Memories start at 0; ``memory_rate=0`` keeps them there: FA-LD bit for bit.

Cost per round: each uploading client sends d more floats (its memory difference, quantised
like its state), and the server broadcasts hbar (d more floats to each client). The full
gradient at theta_t is one more gradient evaluation per round (a client running full-batch
local steps computes it anyway at its first step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlangevin.corrections.base import SetupCost, check_fraction

__all__ = ["QLSDPlusPlus"]


@dataclass(frozen=True)
class QLSDPlusPlus:
    """Settings of the memory correction (``FALD(..., correction="qlsd++")``).

    memory_rate : alpha in [0, 1] (default 1); with a quantising codec of relative variance
        omega, QLSD++'s analysis asks for alpha <= 1 / (1 + omega). 0 switches the
        correction off (memories stay 0).
    """

    memory_rate: float = 1.0
    name: ClassVar[str] = "qlsd++"

    def __post_init__(self) -> None:
        object.__setattr__(self, "memory_rate", check_fraction("memory_rate", self.memory_rate))

    @property
    def active(self) -> bool:
        """False when switched off (memory rate 0): the runner then builds FA-LD's own kernel."""
        return self.memory_rate > 0

    @property
    def releases(self) -> str:
        """What the correction releases besides FA-LD's uploads (for privacy accounting)."""
        return "each client's full gradient at every round's broadcast point (its memory difference, quantised or not)"

    def record(self) -> dict:
        return {"kind": self.name, "memory_rate": self.memory_rate}

    def per_round_floats(self, num_clients: int, dim: int) -> tuple[float, float]:
        """Extra floats: d per upload (the memory difference), d per client per round (hbar)."""
        return float(dim), float(num_clients * dim)

    def build(self, problem, *, dtype: torch.dtype, device, upload=None) -> "BuiltQLSD":
        return BuiltQLSD(self, problem, dtype, torch.device(device), upload)

    def __repr__(self) -> str:
        return f"QLSDPlusPlus(memory_rate={self.memory_rate:g})"


class BuiltQLSD:
    """The kernel's side (:class:`~fedlangevin.federation.extensions.DriftCorrection`)."""

    def __init__(self, settings: QLSDPlusPlus, problem, dtype, device, upload) -> None:
        self.settings, self.dtype, self.device, self.upload = settings, dtype, device, upload
        self.problem = problem.to(device=device, dtype=dtype)
        self.weights = problem.weights.to(device=device, dtype=dtype)
        self.cost = SetupCost()

    def init(self, theta: torch.Tensor, mode: torch.Tensor | None = None) -> dict:
        r, d = theta.shape
        n = self.problem.num_clients
        return {"memory": torch.zeros(r, n, d, dtype=self.dtype, device=self.device),
                "mean": torch.zeros(r, d, dtype=self.dtype, device=self.device)}

    def term(self, state: dict, beta: torch.Tensor) -> torch.Tensor:
        return state["mean"].unsqueeze(1) - state["memory"]

    def update(self, state, theta, new_theta, beta, weights, generator) -> dict:
        alpha = self.settings.memory_rate
        if alpha == 0.0:
            return state
        r, d = theta.shape
        n = self.problem.num_clients
        memory = state["memory"]
        grads = self.problem.grad(theta.unsqueeze(1).expand(r, n, d).clone())  # full gradients at theta_t
        delta = grads - memory
        if self.upload is not None:  # Q(x) = codec(x, 0): the codec quantises x - 0
            delta = self.upload(delta, torch.zeros_like(theta), generator)
        taking_part = (weights > 0).to(self.dtype)
        taking_part = taking_part.expand(r, n) if taking_part.dim() == 1 else taking_part
        memory = memory + (alpha * taking_part).unsqueeze(-1) * delta
        mean = torch.einsum("n,rnd->rd", self.weights, memory)
        return {"memory": memory, "mean": mean}

    def keep(self, state: dict, rows: torch.Tensor) -> dict:
        return {"memory": state["memory"][rows].contiguous(), "mean": state["mean"][rows].contiguous()}
