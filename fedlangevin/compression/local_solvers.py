"""The local solvers of LFL and its baselines: each device's tau local steps from the broadcast
estimate theta_hat(t) on its own minibatches, batched over devices.

Source: Amiri, Gündüz, Kulkarni, Poor, *Federated Learning With Quantized Global Model
Updates* (version 2 numbering): minibatch SGD as in the analysis (eq. 5), or Adam as in the
experiments (Sec. 4). Used by the round of :mod:`~fedlangevin.compression.lfl`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.compression.models import FlatModel, StackedClients, per_device_loss

__all__ = ["LocalSGD", "LocalAdam", "LocalSolver", "local_train"]


@dataclass(frozen=True)
class LocalSGD:
    """tau = ``steps`` minibatch SGD steps with learning rate eta (eq. 5)."""

    lr: float = 0.1
    steps: int = 4
    batch_size: int = 50

    def __post_init__(self) -> None:
        check_real("lr", self.lr, low=0.0, low_open=True)
        check_int("steps", self.steps, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)

    def init_state(self, num_clients: int, d: int, like: torch.Tensor) -> Any:
        return None


@dataclass(frozen=True)
class LocalAdam:
    """tau = ``steps`` Adam steps (Kingma & Ba) per round, as in the paper's experiments (Sec. 4).

    **(choice)** ``reset_each_round=False`` keeps each device's moment estimates across rounds
    (one persistent optimizer per device); True restarts them at every round.
    """

    lr: float = 1e-3
    steps: int = 4
    batch_size: int = 50
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    reset_each_round: bool = False

    def __post_init__(self) -> None:
        check_real("lr", self.lr, low=0.0, low_open=True)
        check_int("steps", self.steps, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)
        check_real("beta1", self.beta1, low=0.0, high=1.0, high_open=True)
        check_real("beta2", self.beta2, low=0.0, high=1.0, high_open=True)
        check_real("eps", self.eps, low=0.0, low_open=True)

    def init_state(self, num_clients: int, d: int, like: torch.Tensor) -> Any:
        z = torch.zeros(num_clients, d, dtype=like.dtype, device=like.device)
        return (z, z.clone(), 0)


LocalSolver = Union[LocalSGD, LocalAdam]


def _device_grads(model: FlatModel, theta_m: torch.Tensor, batch) -> torch.Tensor:
    Xb, yb, mask = batch
    with torch.enable_grad():
        th = theta_m.detach().requires_grad_(True)
        loss = per_device_loss(model, th, Xb, yb, mask).sum()  # devices are independent
        (g,) = torch.autograd.grad(loss, th)
    return g


def local_train(
    theta_start: torch.Tensor,
    clients: StackedClients,
    model: FlatModel,
    solver: LocalSolver,
    solver_state: Any,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, Any]:
    """All devices' tau local steps from theta_hat(t), batched over devices: (M, d) models.

    Device m minimises its own F_m (mean cross-entropy of its data) from ``theta_start``.
    """
    M = clients.num_clients
    theta_m = theta_start.detach().expand(M, -1).clone()
    if isinstance(solver, LocalSGD):
        for _ in range(solver.steps):
            g = _device_grads(model, theta_m, clients.sample_batch(solver.batch_size, generator))
            theta_m = theta_m - solver.lr * g
        return theta_m, solver_state
    m1, m2, k = solver_state
    if solver.reset_each_round:
        m1, m2, k = torch.zeros_like(m1), torch.zeros_like(m2), 0
    for _ in range(solver.steps):
        g = _device_grads(model, theta_m, clients.sample_batch(solver.batch_size, generator))
        k += 1
        m1 = solver.beta1 * m1 + (1 - solver.beta1) * g
        m2 = solver.beta2 * m2 + (1 - solver.beta2) * g * g
        m_hat = m1 / (1 - solver.beta1**k)
        v_hat = m2 / (1 - solver.beta2**k)
        theta_m = theta_m - solver.lr * m_hat / (v_hat.sqrt() + solver.eps)
    return theta_m, (m1, m2, k)

