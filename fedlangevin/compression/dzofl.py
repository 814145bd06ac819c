"""DZOFL — digital zero-order federated learning (Mhanna & Assaad, *Communication and Energy
Efficient Federated Learning using Zero-Order Optimization Technique*, Alg. 1).

Objective (eq. 1): F(theta) = sum_{i=1}^N F_i(theta), F_i(theta) = E f_i(theta, xi_i) — a sum,
not an average, over the N devices. Round k:

1. every device draws a minibatch xi_{i,k} and evaluates, with the *same* batch,
   Delta f_{i,k} = f_i(theta_k + gamma_k Phi_k, xi) - f_i(theta_k - gamma_k Phi_k, xi), where
   Phi_k has i.i.d. entries +-1/sqrt(d) (Example IV.8) and is shared through a common seed;
2. device i uploads Q(Delta f_{i,k}) — one M = 16-bit scalar; each packet is received with
   probability p (eq. 2), independently; S_k is the set received;
3. the server forms Delta f_k = (N / |S_k|) sum_{i in S_k} Q(Delta f_{i,k}), or 0 if S_k is
   empty (eq. 3), and broadcasts Q(Delta f_k) (16 bits);
4. every device updates theta_{k+1} = theta_k - alpha_k g_k with g_k = Phi_k Q(Delta f_k)
   (eq. 13). An empty S_k leaves the model unchanged.

Step sizes (Example IV.4): alpha_k = alpha0 (1 + k)^(-v1), gamma_k = gamma0 (1 + k)^(-v2) with
0 < v1 + v2 <= 1, v1 + 3 v2 > 1 and v1 + v2 > 0.5 (Assumption IV.3); the paper recommends
v1 = v2 = 1/4 + eps/2 (after Theorem IV.10). Lemma A.1–A.2: E[g_k | H_k] = c1 gamma_k
(grad F + b_k), c1 = 2 q alpha_2 with q = 1 - (1 - p)^N and alpha_2 = 1/d; on a quadratic
b_k = 0, so E[g_k] = 2 q gamma_k grad F / d exactly.

**(choice)** Q is unbiased stochastic rounding to the IEEE half-precision grid
(:func:`~fedlangevin.compression.quantize.stochastic_round_float`), which satisfies
Assumption IV.5 with sigma = 2^-22 in the normal range.

Bits (Sec. III-A): T N M uploaded in total (T M per device) against T' N M d for standard FL;
one M-bit broadcast per round. Energy (Sec. III-C, eqs. 9–10): :class:`EnergyModel`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.compression.models import FlatModel, StackedClients, per_device_loss
from fedlangevin.compression.quantize import stochastic_round_float
from fedlangevin.compression.optimizer import FederatedOptimizer

__all__ = [
    "check_exponents",
    "step_sizes",
    "perturbation",
    "received_probability",
    "dzofl_estimate",
    "DZOFLConfig",
    "DZOFLState",
    "dzofl_round",
    "DZOFLOptimizer",
    "dzofl_upload_bits",
    "standard_fl_upload_bits",
    "EnergyModel",
    "mac_energy",
    "forward_energy",
    "backward_energy",
    "processing_energy",
]


def check_exponents(v1: float, v2: float) -> tuple[float, float]:
    """Raise ValueError unless v1, v2 > 0, v1 + v2 <= 1, v1 + 3 v2 > 1 and v1 + v2 > 0.5
    (Example IV.4, sufficient for Assumption IV.3)."""
    v1 = check_real("v1", v1, low=0.0, low_open=True)
    v2 = check_real("v2", v2, low=0.0, low_open=True)
    if not (v1 + v2 <= 1.0 and v1 + 3.0 * v2 > 1.0 and v1 + v2 > 0.5):
        raise ValueError(
            "step-size exponents v1, v2 must satisfy 0 < v1 + v2 <= 1, v1 + 3 v2 > 1 and v1 + v2 > 0.5 "
            f"(Example IV.4); got v1={v1}, v2={v2}"
        )
    return v1, v2


def step_sizes(k: int, *, alpha0: float, gamma0: float, v1: float, v2: float) -> tuple[float, float]:
    """(alpha_k, gamma_k) = (alpha0 (1 + k)^-v1, gamma0 (1 + k)^-v2) (Example IV.4)."""
    k = check_int("k", k, minimum=0)
    return alpha0 * (1.0 + k) ** (-v1), gamma0 * (1.0 + k) ** (-v2)


def perturbation(
    d: int, *, generator: torch.Generator | None = None, batch: tuple[int, ...] = (), device=None, dtype=torch.float32
) -> torch.Tensor:
    """Phi with i.i.d. entries +-1/sqrt(d), each with probability 1/2 (Example IV.8:
    alpha_2 = E phi^2 = 1/d, ||Phi|| = 1)."""
    d = check_int("d", d, minimum=1)
    bits = torch.randint(0, 2, (*batch, d), generator=generator, device=device)
    return (2.0 * bits.to(dtype) - 1.0) / math.sqrt(d)


def received_probability(p: float, n: int) -> float:
    """q = P(|S_k| > 0) = 1 - (1 - p)^N (Lemma A.1)."""
    p = check_real("p", p, low=0.0, high=1.0, low_open=True)
    n = check_int("n", n, minimum=1)
    return 1.0 - (1.0 - p) ** n


def dzofl_estimate(
    delta_f: torch.Tensor,
    phi: torch.Tensor,
    received: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    quantize: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """g_k = Phi_k Q((N / |S_k|) sum_{S_k} Q(Delta f_{i,k})) (eqs. 3, 13), batched.

    ``delta_f`` (..., N) are the devices' query differences, ``phi`` (..., d) the shared
    perturbations, ``received`` (..., N) bool the packets that arrived. Returns (g (..., d),
    the server scalar Q(Delta f_k) (...)). An empty S_k gives Delta f_k = 0, so g = 0.
    """
    N = delta_f.shape[-1]
    up = stochastic_round_float(delta_f, generator) if quantize else delta_f
    rec = received.to(delta_f.dtype)
    n_rec = rec.sum(dim=-1)
    agg = torch.where(n_rec > 0, N * (up * rec).sum(dim=-1) / n_rec.clamp(min=1.0), torch.zeros_like(n_rec))
    down = stochastic_round_float(agg, generator) if quantize else agg
    return phi * down.unsqueeze(-1), down


@dataclass(frozen=True)
class DZOFLConfig:
    """Hyper-parameters of Alg. 1: alpha0, gamma0, exponents v1, v2 (default 1/4 + 0.01 each,
    i.e. the paper's 1/4 + eps/2 with eps = 0.02), packet success probability p, minibatch
    size (10 in Sec. V) and the scalar width M (16 bits)."""

    alpha0: float = 0.05
    gamma0: float = 0.05
    v1: float = 0.26
    v2: float = 0.26
    p: float = 1.0
    batch_size: int = 10
    bits: int = 16

    def __post_init__(self) -> None:
        check_real("alpha0", self.alpha0, low=0.0, low_open=True)
        check_real("gamma0", self.gamma0, low=0.0, low_open=True)
        check_exponents(self.v1, self.v2)
        check_real("p", self.p, low=0.0, high=1.0, low_open=True)
        check_int("batch_size", self.batch_size, minimum=1)
        if self.bits != 16:
            raise ValueError(f"bits must be 16 (the half-precision scalar quantizer); got {self.bits}")


@dataclass(frozen=True)
class DZOFLState:
    theta: torch.Tensor
    round: int = 0


def dzofl_round(
    state: DZOFLState,
    clients: StackedClients,
    model: FlatModel,
    cfg: DZOFLConfig,
    generator: torch.Generator | None = None,
) -> tuple[DZOFLState, dict[str, float]]:
    """One round of Alg. 1, all N devices' two queries in one batched forward pass."""
    k = state.round
    alpha, gamma = step_sizes(k, alpha0=cfg.alpha0, gamma0=cfg.gamma0, v1=cfg.v1, v2=cfg.v2)
    theta = state.theta
    d = theta.shape[-1]
    N = clients.num_clients
    phi = perturbation(d, generator=generator, device=theta.device, dtype=theta.dtype)
    Xb, yb, mask = clients.sample_batch(cfg.batch_size, generator)  # same batch for both queries
    pm = torch.stack((theta + gamma * phi, theta - gamma * phi))[:, None, :]  # (2, 1, d)
    with torch.no_grad():
        losses = per_device_loss(model, pm, Xb, yb, mask)  # (2, N)
    delta_f = losses[0] - losses[1]
    received = torch.rand(N, generator=generator, device=theta.device) < cfg.p
    g, down = dzofl_estimate(delta_f, phi, received, generator)
    new = DZOFLState(theta=theta - alpha * g, round=k + 1)
    return new, {"bits_up": float(N * cfg.bits), "bits_down": float(cfg.bits), "received": float(received.sum())}


class DZOFLOptimizer(FederatedOptimizer):
    """Thin seeded runner around :func:`dzofl_round`, recording a :class:`~fedlangevin.compression.models.History` (checks,
    ``evaluate`` and ``run`` from :class:`~fedlangevin.compression.optimizer.FederatedOptimizer`)."""

    method = "dzofl"

    def __init__(
        self,
        model: FlatModel,
        clients,
        config: DZOFLConfig | None = None,
        *,
        theta0: torch.Tensor | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(model, clients, theta0=theta0, seed=seed, device=device, dtype=dtype)
        self.config = config if config is not None else DZOFLConfig()
        self.state = DZOFLState(theta=self._start().clone())

    def step(self) -> dict[str, float]:
        self.state, info = dzofl_round(self.state, self.clients, self.model, self.config, self.generator)
        return info

    def account(self, info: dict[str, float]) -> tuple[float, float, dict[str, float]]:
        return info["bits_down"], info["bits_up"], {}


# ---------------------------------------------------------------------------------------------
# Communication (Sec. III-A) and energy (Sec. III-C)


def dzofl_upload_bits(T: int, *, N: int = 1, M: int = 16) -> float:
    """T N M: total DZOFL upload bits of N devices over T rounds (T M per device)."""
    return float(check_int("T", T, minimum=0) * check_int("N", N, minimum=1) * check_int("M", M, minimum=1))


def standard_fl_upload_bits(T: int, *, d: int, N: int = 1, M: int = 16) -> float:
    """T' N M d: total upload bits of gradient-based FL (T' M d per device). With d = 4e5,
    M = 16, T' = 100 this is 6.4e8 bits per device (Sec. III-A)."""
    return dzofl_upload_bits(T, N=N, M=M) * check_int("d", d, minimum=1)


@dataclass(frozen=True)
class EnergyModel:
    """Processing-energy model of Sec. III-C with the paper's constants (Sec. V):

    N_c = 10.56e6 MAC operations, O_c = 25042 x 10 activations, d = 45362 weights, S = 8 MB
    SRAM buffer (expressed in bits: eqs. 9–10 compare S with d M, a bit count), x_in = 784
    inputs, M = 16-bit precision, M_max = 32, A = 3.7 pJ per M_max-bit MAC, A_d = 150 (DRAM
    access cost in MACs), mu = 1.25, p = 64 MAC units.
    """

    N_c: float = 10.56e6
    O_c: float = 250420.0
    d: float = 45362.0
    S_bits: float = 8.0 * 1024 * 1024 * 8
    x_in: float = 784.0
    M: float = 16.0
    M_max: float = 32.0
    A: float = 3.7e-12
    A_d: float = 150.0
    mu: float = 1.25
    p: float = 64.0

    def __post_init__(self) -> None:
        for name in ("N_c", "O_c", "d", "S_bits", "x_in", "M", "M_max", "A", "A_d", "p"):
            check_real(name, getattr(self, name), low=0.0, low_open=True)
        check_real("mu", self.mu, low=1.0, high=2.0, low_open=True, high_open=True)
        if self.M > self.M_max:
            raise ValueError(f"M must be <= M_max ({self.M_max}); got {self.M}")


def mac_energy(m: float, model: EnergyModel = EnergyModel()) -> float:
    """E_MAC(m) = A (m / M_max)^mu (Sec. III-C, after eq. 9); E_MAC(16) = 1.5557 pJ."""
    m = check_real("m", m, low=0.0, low_open=True)
    return model.A * (m / model.M_max) ** model.mu


def forward_energy(model: EnergyModel = EnergyModel()) -> dict[str, float]:
    """E_FP = E_computing + E_w + E_b + E_DRAM (eq. 9), joules per forward pass:

    E_computing = E_MAC(M) N_c + 3 O_c E_MAC(M_max),
    E_w = 2 E_MAC(M) d + E_MAC(M) N_c sqrt(M / (p M_max)),
    E_b = 2 E_MAC(M) O_c + E_MAC(M) N_c sqrt(M / (p M_max)),
    E_DRAM = A_d E_MAC(M_max) x_in + 2 A_d E_MAC(M) max(d M + O_c M - S, 0).
    The paper's constants give 2.347e-5 J.
    """
    e_m = mac_energy(model.M, model)
    e_max = mac_energy(model.M_max, model)
    root = math.sqrt(model.M / (model.p * model.M_max))
    comp = e_m * model.N_c + 3.0 * model.O_c * e_max
    w = 2.0 * e_m * model.d + e_m * model.N_c * root
    b = 2.0 * e_m * model.O_c + e_m * model.N_c * root
    dram = model.A_d * e_max * model.x_in + 2.0 * model.A_d * e_m * max(model.d * model.M + model.O_c * model.M - model.S_bits, 0.0)
    return {"computing": comp, "weights": w, "activations": b, "dram": dram, "total": comp + w + b + dram}


def backward_energy(model: EnergyModel = EnergyModel()) -> float:
    """E_BP (eq. 10), joules per backward pass:

    2 N_c E_MAC(M_max) + 2 O_c E_MAC(M_max) + d E_MAC(M_max) + 2 N_c E_MAC(M_max) sqrt(1/p)
    + 2 A_d E_MAC(M_max) max(d M_max + O_c M_max - S, 0). The paper's constants give 8.993e-5 J.
    """
    e_max = mac_energy(model.M_max, model)
    return (
        2.0 * model.N_c * e_max
        + 2.0 * model.O_c * e_max
        + model.d * e_max
        + 2.0 * model.N_c * e_max * math.sqrt(1.0 / model.p)
        + 2.0 * model.A_d * e_max * max(model.d * model.M_max + model.O_c * model.M_max - model.S_bits, 0.0)
    )


def processing_energy(
    rounds: int, *, backward: bool, forward_passes: int = 1, model: EnergyModel = EnergyModel()
) -> float:
    """Device processing energy over ``rounds``: rounds x (forward_passes E_FP + [E_BP]) joules.

    Sec. III-C counts E_FP x T for DZOFL (no backward pass) and (E_FP + E_BP) x T' for
    gradient-based FL. Alg. 1 queries the loss twice per round (theta +- gamma Phi); pass
    ``forward_passes=2`` to count both queries — the paper's total counts one. Transmission
    energy is not modelled here (the paper derives it from its channel model, Sec. V).
    """
    rounds = check_int("rounds", rounds, minimum=0)
    forward_passes = check_int("forward_passes", forward_passes, minimum=1)
    per_round = forward_passes * forward_energy(model)["total"] + (backward_energy(model) if backward else 0.0)
    return rounds * per_round
