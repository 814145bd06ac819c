"""LFL and its baselines as one federated optimizer with pluggable codecs.

Source: Amiri, Gündüz, Kulkarni, Poor, *Federated Learning With Quantized Global Model
Updates* (version 2 numbering; version 1 in brackets where it differs). Notation: M devices,
device m holds B_m points, weight B_m / B; theta(t) is the global model at the parameter
server (PS), theta_hat(t) the devices' estimate of it; q1 and q2 are the quantization levels of
the broadcast (PS -> devices) and of the uploads (devices -> PS); Q is
:func:`~fedlangevin.compression.quantize.stochastic_quantize` (App. A).

One round t (Algorithm 1) with a broadcast codec and an upload codec
(:mod:`~fedlangevin.compression.lfl_codecs`) and a local solver
(:mod:`~fedlangevin.compression.local_solvers`):

1. broadcast: the devices obtain theta_hat(t) from the PS (codec-specific);
2. every device runs tau local steps from theta_hat(t) on its own minibatches (SGD, eq. 5,
   as in the analysis; or Adam as in the experiments, Sec. 4);
3. Delta_m = theta_m^{tau+1} - theta_hat(t) (eq. 6);
4. upload: the PS receives s_m (codec-specific);
5. theta(t+1) = theta_hat(t) + sum_m (B_m / B) s_m (eq. 4) — the base is theta_hat(t).

The codecs of the named methods of Sec. 4 (``lossless``/``fedavg``, ``lb``, ``lfl``, ``lgm``,
``ltgm``) are given by :func:`~fedlangevin.compression.lfl_codecs.method_codecs`.

Bits: a broadcast is counted once per round (one transmission reaches all devices); uploads
are summed over devices. The vector quantized at the PS (LFL: theta - theta_hat(t-1); LGM:
theta + e; LTGM: the transformed y) is summarised each round by its empirical variance and
peak-to-average ratio, the quantities of version 2's Fig. 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.compression import wireless
from fedlangevin.compression.lfl_codecs import BroadcastCodec, LFLUploadCodec, method_codecs
from fedlangevin.compression.local_solvers import LocalAdam, LocalSGD, LocalSolver, local_train
from fedlangevin.compression.models import FlatModel, StackedClients
from fedlangevin.compression.optimizer import FederatedOptimizer
from fedlangevin.compression.quantize import quantization_skewness

__all__ = [
    "LFLState",
    "RoundInfo",
    "lfl_init",
    "lfl_round",
    "vector_variance",
    "peak_to_average",
    "LFLOptimizer",
]


# ---------------------------------------------------------------------------------------------
# State and one round


@dataclass(frozen=True)
class LFLState:
    """theta(t) at the PS, theta_hat(t-1) at the devices, upload error memories delta_m (M, d),
    the broadcast codec's state (LGM's e), the local solver's state and the round t."""

    theta: torch.Tensor
    theta_hat: torch.Tensor
    memory: torch.Tensor
    broadcast_state: Any
    solver_state: Any
    round: int = 0


@dataclass(frozen=True)
class RoundInfo:
    """Bits of one round in each direction, Fig. 2's statistics of the vector quantized at the
    PS (variance and peak-to-average ratio of its magnitudes) and its Lemma 1 skewness eps
    (the paper reports eps ≈ 1e-3 for LFL, Sec. 3.3); NaN for a lossless broadcast."""

    bits_down: float
    bits_up: float
    sent_variance: float
    sent_peak_to_average: float
    sent_skewness: float


def vector_variance(x: torch.Tensor) -> float:
    """Empirical variance of the entries' magnitudes |x_i| (version 2, Fig. 2)."""
    return float(x.abs().to(torch.float64).var(unbiased=False))


def peak_to_average(x: torch.Tensor) -> float:
    """Peak-to-average ratio max_i |x_i| / mean_i |x_i| (version 2, Fig. 2); 1 for x = 0."""
    a = x.abs().to(torch.float64)
    mean = float(a.mean())
    return float(a.max()) / mean if mean > 0 else 1.0


def lfl_init(
    theta0: torch.Tensor,
    num_clients: int,
    broadcast: BroadcastCodec,
    solver: LocalSolver,
    generator: torch.Generator | None = None,
) -> LFLState:
    """theta(0) = theta_hat(-1) = theta0, delta_m(0) = 0, e(0) = 0 (Alg. 1; Sec. 2.2)."""
    num_clients = check_int("num_clients", num_clients, minimum=1)
    if theta0.dim() != 1:
        raise ValueError(f"theta0 must be a 1-d parameter vector; got shape {tuple(theta0.shape)}")
    d = theta0.shape[0]
    return LFLState(
        theta=theta0.clone(),
        theta_hat=theta0.clone(),
        memory=torch.zeros(num_clients, d, dtype=theta0.dtype, device=theta0.device),
        broadcast_state=broadcast.init_state(theta0, generator),
        solver_state=solver.init_state(num_clients, d, theta0),
        round=0,
    )


def lfl_round(
    state: LFLState,
    clients: StackedClients,
    model: FlatModel,
    broadcast: BroadcastCodec,
    upload: LFLUploadCodec,
    solver: LocalSolver,
    generator: torch.Generator | None = None,
    *,
    clients_per_round: int | None = None,
    loss_rate: float = 0.0,
    sampling: str = "uniform",
) -> tuple[LFLState, RoundInfo]:
    """One round of Algorithm 1 with the given codecs (see the module docstring).

    The PS adds the aggregate to theta_hat(t) (eq. 4) — for every codec unless its
    ``ps_base`` is ``"model"``, which adds it to theta(t) instead (an alternative reading for
    LGM/LTGM, not the default). The defaults are the paper's (all devices every round, no loss). ``clients_per_round`` K
    and ``loss_rate`` gamma add the wireless paper's client sampling and packet loss
    (:mod:`~fedlangevin.compression.wireless`): theta(t+1) = theta_hat(t) + sum_m c_m s_m with
    the coefficients c of :func:`~fedlangevin.compression.wireless.aggregation_coefficients`
    (equal to B_m / B when K = M and gamma = 0). Every device trains (batched), only the
    selected ones upload and keep their new error memory and Adam moments.
    """
    M = clients.num_clients
    out_b = broadcast(state.theta, state.theta_hat, state.broadcast_state, generator)
    theta_hat = out_b.theta_hat
    theta_m, solver_state = local_train(theta_hat, clients, model, solver, state.solver_state, generator)
    delta = theta_m - theta_hat
    weights = clients.weights
    if clients_per_round is None and loss_rate == 0.0:
        out_u = upload(delta, state.memory, generator)
        coef = weights
    else:
        k = M if clients_per_round is None else clients_per_round
        cpu_gen = generator
        if generator is not None and generator.device.type != "cpu":  # sampling runs on the CPU
            seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
            cpu_gen = torch.Generator().manual_seed(seed)
        counts = wireless.sample_clients(M, k, weights.cpu(), scheme=sampling, generator=cpu_gen)
        received = wireless.lose_packets(counts, loss_rate, generator=cpu_gen)
        selected = (counts > 0).to(delta.device)
        out_u = upload(delta, state.memory, generator, selected=selected)
        coef = wireless.aggregation_coefficients(received, weights.cpu(), scheme=sampling).to(delta)
        if isinstance(solver, LocalAdam) and not solver.reset_each_round:
            # devices that sat this round out keep their Adam moments (their local run is discarded)
            (m1, m2, k_adam), (o1, o2, _) = solver_state, state.solver_state
            keep = selected[:, None]
            solver_state = (torch.where(keep, m1, o1), torch.where(keep, m2, o2), k_adam)
    base = theta_hat if broadcast.ps_base == "estimate" else state.theta
    theta_next = base + coef @ out_u.sent
    sent = out_b.sent
    info = RoundInfo(
        bits_down=out_b.bits,
        bits_up=out_u.bits,
        sent_variance=vector_variance(sent) if sent is not None else float("nan"),
        sent_peak_to_average=peak_to_average(sent) if sent is not None else float("nan"),
        sent_skewness=float(quantization_skewness(sent)) if sent is not None else float("nan"),
    )
    new_state = LFLState(
        theta=theta_next,
        theta_hat=theta_hat,
        memory=out_u.memory,
        broadcast_state=out_b.state,
        solver_state=solver_state,
        round=state.round + 1,
    )
    return new_state, info


# ---------------------------------------------------------------------------------------------
# The runner


class LFLOptimizer(FederatedOptimizer):
    """Thin runner around :func:`lfl_round`: seeded, device-aware, records a :class:`~fedlangevin.compression.models.History`
    (checks, ``evaluate`` and ``run`` from :class:`~fedlangevin.compression.optimizer.FederatedOptimizer`).

    Example::

        opt = LFLOptimizer(model, clients, method="lfl", q1=2, q2=2,
                           local=LocalSGD(lr=0.1, steps=4, batch_size=50), seed=0)
        hist = opt.run(300, test=(X_test, y_test))
    """

    def __init__(
        self,
        model: FlatModel,
        clients,
        *,
        method: str = "lfl",
        q1: int = 2,
        q2: int = 2,
        broadcast: BroadcastCodec | None = None,
        upload: LFLUploadCodec | None = None,
        local: LocalSolver | None = None,
        bits_per_entry: int = 33,
        clients_per_round: int | None = None,
        loss_rate: float = 0.0,
        sampling: str = "uniform",
        theta0: torch.Tensor | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(model, clients, theta0=theta0, seed=seed, device=device, dtype=dtype)
        M = self.clients.num_clients
        if clients_per_round is not None:
            check_int("clients_per_round", clients_per_round, minimum=1, maximum=M)
        check_real("loss_rate", loss_rate, low=0.0, high=1.0, high_open=True)
        wireless._check_scheme(sampling)
        b_default, u_default = method_codecs(method, q1, q2, bits_per_entry)
        self.method = method
        self.broadcast = broadcast if broadcast is not None else b_default
        self.upload = upload if upload is not None else u_default
        self.local = local if local is not None else LocalSGD()
        self.clients_per_round = clients_per_round
        self.loss_rate = float(loss_rate)
        self.sampling = sampling
        self.state = lfl_init(self._start(), M, self.broadcast, self.local, self.generator)

    def step(self) -> RoundInfo:
        self.state, info = lfl_round(
            self.state,
            self.clients,
            self.model,
            self.broadcast,
            self.upload,
            self.local,
            self.generator,
            clients_per_round=self.clients_per_round,
            loss_rate=self.loss_rate,
            sampling=self.sampling,
        )
        return info

    def account(self, info: RoundInfo) -> tuple[float, float, dict[str, float]]:
        return info.bits_down, info.bits_up, {"sent_variance": info.sent_variance,
                                              "sent_peak_to_average": info.sent_peak_to_average,
                                              "sent_skewness": info.sent_skewness}
