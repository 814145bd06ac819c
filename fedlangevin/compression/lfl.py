"""LFL and its baselines as one federated optimizer with pluggable codecs.

Source: Amiri, Gündüz, Kulkarni, Poor, *Federated Learning With Quantized Global Model
Updates* (version 2 numbering; version 1 in brackets where it differs). Notation: M devices,
device m holds B_m points, weight B_m / B; theta(t) is the global model at the parameter
server (PS), theta_hat(t) the devices' estimate of it; q1 and q2 are the quantization levels of
the broadcast (PS -> devices) and of the uploads (devices -> PS); Q is
:func:`~fedlangevin.compression.quantize.stochastic_quantize` (App. A).

One round t (Algorithm 1) with a broadcast codec and an upload codec:

1. broadcast: the devices obtain theta_hat(t) from the PS (codec-specific, below);
2. every device runs tau local steps from theta_hat(t) on its own minibatches (SGD, eq. 5,
   as in the analysis; or Adam as in the experiments, Sec. 4);
3. Delta_m = theta_m^{tau+1} - theta_hat(t) (eq. 6);
4. upload: the PS receives s_m (codec-specific);
5. theta(t+1) = theta_hat(t) + sum_m (B_m / B) s_m (eq. 4) — the base is theta_hat(t).

Broadcast codecs:

* :class:`LFLBroadcast` — LFL: U(t) = Q(theta(t) - theta_hat(t-1), q1) and
  theta_hat(t) = theta_hat(t-1) + U(t) (Alg. 1 lines 2–3, eq. 2), theta_hat(-1) = theta(0)
  (the initial model is shared through the seed), R_Q(d, q1) bits. No error feedback at the
  PS (Remark 1).
* :class:`LGMBroadcast` — LGM (Tang et al., DoubleSqueeze): v = theta(t) + e(t),
  theta_hat(t) = Q(v, q1), e(t+1) = v - theta_hat(t), e(0) = 0.
* :class:`LTGMBroadcast` — LTGM (Caldas et al.): zero-pad to n = 2^k, y = H diag(s) theta
  with H the orthonormal Walsh–Hadamard matrix and s a shared random +-1 vector; broadcast
  Q(y, q1) (R_Q(n, q1) bits: the padded length is what is sent); devices recover
  theta_hat = (diag(s) H^T Q(y))[:d]. No error feedback.
* :class:`LosslessBroadcast` — exact: R_LB = 33 d bits (Sec. 4, eq. 19).

Upload codecs:

* :class:`QuantizedUpload` — s_m = Q(Delta_m + delta_m, q2),
  delta_m <- Delta_m + delta_m - s_m (Alg. 1 line 5, eq. 3), R_Q(d, q2) bits per device;
* :class:`LosslessUpload` — s_m = Delta_m, 33 d bits per device.

Named methods (Sec. 4): ``lossless``/``fedavg`` (lossless both ways), ``lb`` (lossless
broadcast, quantized uploads), ``lfl``, ``lgm``, ``ltgm`` (lossy broadcast, quantized uploads).

Bits: a broadcast is counted once per round (one transmission reaches all devices); uploads
are summed over devices. The vector quantized at the PS (LFL: theta - theta_hat(t-1); LGM:
theta + e; LTGM: the transformed y) is summarised each round by its empirical variance and
peak-to-average ratio, the quantities of version 2's Fig. 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.compression.models import FlatModel, StackedClients, per_device_loss
from fedlangevin.compression.optimizer import METHODS, FederatedOptimizer
from fedlangevin.compression.quantize import _quantize, lossless_bits, quantization_skewness, quantized_bits
from fedlangevin.compression import wireless

__all__ = [
    "walsh_hadamard",
    "BroadcastOutput",
    "LosslessBroadcast",
    "LFLBroadcast",
    "LGMBroadcast",
    "LTGMBroadcast",
    "UploadOutput",
    "LosslessUpload",
    "QuantizedUpload",
    "LocalSGD",
    "LocalAdam",
    "LFLState",
    "RoundInfo",
    "lfl_init",
    "local_train",
    "lfl_round",
    "vector_variance",
    "peak_to_average",
    "CODEC_METHODS",
    "LFLUploadCodec",
    "method_codecs",
    "LFLOptimizer",
]


# ---------------------------------------------------------------------------------------------
# Walsh–Hadamard transform (LTGM)


def walsh_hadamard(x: torch.Tensor) -> torch.Tensor:
    """Orthonormal fast Walsh–Hadamard transform H x / sqrt(n) along the last dimension.

    n = x.shape[-1] must be a power of two. H is symmetric and (H / sqrt(n))^2 = I, so the
    transform is its own inverse. O(n log n), batched over leading dimensions.
    """
    n = x.shape[-1]
    if n < 1 or n & (n - 1):
        raise ValueError(f"x.shape[-1] must be a power of two; got {n}")
    lead = x.shape[:-1]
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = torch.stack((a + b, a - b), dim=2)
        h *= 2
    return (y.reshape(*lead, n)) / math.sqrt(n)


def _next_pow2(d: int) -> int:
    return 1 << (d - 1).bit_length()


def _check_base(ps_base: str) -> None:
    if ps_base not in ("estimate", "model"):
        raise ValueError(f"ps_base must be 'estimate' (eq. 4) or 'model'; got {ps_base!r}")


# ---------------------------------------------------------------------------------------------
# Broadcast codecs (PS -> devices)


@dataclass(frozen=True)
class BroadcastOutput:
    """theta_hat(t) at the devices, the codec's new state, bits sent, and the vector that was
    quantized at the PS (None for a lossless broadcast)."""

    theta_hat: torch.Tensor
    state: Any
    bits: float
    sent: torch.Tensor | None


@dataclass(frozen=True)
class LosslessBroadcast:
    """Exact broadcast: theta_hat(t) = theta(t), R_LB = bits_per_entry * d (33 d in the paper)."""

    bits_per_entry: int = 33
    name: str = "lossless"
    ps_base: str = "estimate"

    def __post_init__(self) -> None:
        check_int("bits_per_entry", self.bits_per_entry, minimum=1)
        _check_base(self.ps_base)

    def init_state(self, theta0: torch.Tensor, generator: torch.Generator | None = None) -> Any:
        return None

    def __call__(self, theta, theta_hat_prev, state, generator=None) -> BroadcastOutput:
        return BroadcastOutput(theta.clone(), None, lossless_bits(theta.shape[-1], self.bits_per_entry), None)


@dataclass(frozen=True)
class LFLBroadcast:
    """LFL: broadcast Q(theta(t) - theta_hat(t-1), q1); theta_hat(t) = theta_hat(t-1) + U (eq. 2)."""

    q: int = 2
    name: str = "lfl"
    ps_base: str = "estimate"

    def __post_init__(self) -> None:
        check_int("q1", self.q, minimum=1)
        _check_base(self.ps_base)

    def init_state(self, theta0: torch.Tensor, generator: torch.Generator | None = None) -> Any:
        return None

    def __call__(self, theta, theta_hat_prev, state, generator=None) -> BroadcastOutput:
        diff = theta - theta_hat_prev
        U = _quantize(diff, self.q, generator)
        return BroadcastOutput(theta_hat_prev + U, None, quantized_bits(theta.shape[-1], self.q), diff)


@dataclass(frozen=True)
class LGMBroadcast:
    """LGM: v = theta + e; broadcast theta_hat = Q(v, q1); e <- v - theta_hat (state e, e(0) = 0)."""

    q: int = 2
    name: str = "lgm"
    ps_base: str = "estimate"

    def __post_init__(self) -> None:
        check_int("q1", self.q, minimum=1)
        _check_base(self.ps_base)

    def init_state(self, theta0: torch.Tensor, generator: torch.Generator | None = None) -> Any:
        return torch.zeros_like(theta0)

    def __call__(self, theta, theta_hat_prev, state, generator=None) -> BroadcastOutput:
        v = theta + state
        theta_hat = _quantize(v, self.q, generator)
        return BroadcastOutput(theta_hat, v - theta_hat, quantized_bits(theta.shape[-1], self.q), v)


@dataclass(frozen=True)
class LTGMBroadcast:
    """LTGM: y = H diag(s) pad(theta) (orthonormal Walsh–Hadamard H); broadcast Q(y, q1);
    devices use (diag(s) H^T Q(y))[:d].

    **(choice)** ``resample_signs=False`` draws the shared +-1 vector s once per run (from the
    shared seed, so it costs no bits); True draws a fresh s every round. LTGM has no error
    feedback and the PS adds the uploads to theta_hat(t) (eq. 4), so broadcast noise
    accumulates in the model: at q1 = 2 the noise is about 60 % of ||theta|| per round and the
    model norm grows geometrically — with fresh signs it overflows float32 around round 200 in
    the docs' reproduction, with a fixed s it grows more slowly and stays finite for 300 rounds
    (see docs/compression.md).
    """

    q: int = 50
    resample_signs: bool = False
    name: str = "ltgm"
    ps_base: str = "estimate"

    def __post_init__(self) -> None:
        check_int("q1", self.q, minimum=1)
        _check_base(self.ps_base)

    def _signs(self, n: int, like: torch.Tensor, generator) -> torch.Tensor:
        bits = torch.randint(0, 2, (n,), generator=generator, device=like.device)
        return (2 * bits - 1).to(like.dtype)

    def init_state(self, theta0: torch.Tensor, generator: torch.Generator | None = None) -> Any:
        if self.resample_signs:
            return None
        return self._signs(_next_pow2(theta0.shape[-1]), theta0, generator)

    def __call__(self, theta, theta_hat_prev, state, generator=None) -> BroadcastOutput:
        d = theta.shape[-1]
        n = _next_pow2(d)
        s = self._signs(n, theta, generator) if state is None else state
        padded = torch.nn.functional.pad(theta, (0, n - d))
        y = walsh_hadamard(s * padded)
        y_q = _quantize(y, self.q, generator)
        theta_hat = (s * walsh_hadamard(y_q))[..., :d]
        return BroadcastOutput(theta_hat, state, quantized_bits(n, self.q), y)


BroadcastCodec = Union[LosslessBroadcast, LFLBroadcast, LGMBroadcast, LTGMBroadcast]


# ---------------------------------------------------------------------------------------------
# Upload codecs (devices -> PS)


@dataclass(frozen=True)
class UploadOutput:
    """What the PS receives from each device (M, d), the devices' new error memories and the
    total upload bits of the round."""

    sent: torch.Tensor
    memory: torch.Tensor
    bits: float


@dataclass(frozen=True)
class LosslessUpload:
    """Exact uploads, ``bits_per_entry * d`` bits per device (33 d in the paper)."""

    bits_per_entry: int = 33
    name: str = "lossless"

    def __call__(self, delta, memory, generator=None, selected: torch.Tensor | None = None) -> UploadOutput:
        n_up = delta.shape[0] if selected is None else int(selected.sum())
        return UploadOutput(delta, memory, n_up * lossless_bits(delta.shape[-1], self.bits_per_entry))


@dataclass(frozen=True)
class QuantizedUpload:
    """s_m = Q(Delta_m + delta_m, q2), delta_m <- Delta_m + delta_m - s_m (Alg. 1 l. 5, eq. 3).

    ``error_feedback=False`` sends Q(Delta_m, q2) and keeps no memory. Devices that are not
    ``selected`` this round send nothing and keep their memory.
    """

    q: int = 2
    error_feedback: bool = True
    name: str = "quantized"

    def __post_init__(self) -> None:
        check_int("q2", self.q, minimum=1)

    def __call__(self, delta, memory, generator=None, selected: torch.Tensor | None = None) -> UploadOutput:
        v = delta + memory if self.error_feedback else delta
        s = _quantize(v, self.q, generator)  # one (x_min, x_max) per device row
        new_memory = v - s if self.error_feedback else memory
        if selected is not None:
            keep = selected[:, None]
            new_memory = torch.where(keep, new_memory, memory)
            s = torch.where(keep, s, torch.zeros_like(s))
        n_up = delta.shape[0] if selected is None else int(selected.sum())
        return UploadOutput(s, new_memory, n_up * quantized_bits(delta.shape[-1], self.q))


LFLUploadCodec = Union[LosslessUpload, QuantizedUpload]


# ---------------------------------------------------------------------------------------------
# Local solvers


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
# Named methods and the runner

#: the methods that are a (broadcast, upload) codec pair: every optimizer but DZOFL
CODEC_METHODS = tuple(m for m in METHODS if m != "dzofl")


def method_codecs(method: str, q1: int = 2, q2: int = 2, bits_per_entry: int = 33) -> tuple[BroadcastCodec, LFLUploadCodec]:
    """The (broadcast, upload) codec pair of a named method of Sec. 4.

    ``fedavg`` and ``lossless`` are the same pair (exact both ways); ``lb`` is lossless
    broadcast with quantized error-feedback uploads; ``lfl``, ``lgm``, ``ltgm`` quantize the
    broadcast with level q1 and the uploads with level q2.
    """
    if method not in CODEC_METHODS:
        raise ValueError(f"method must be one of {CODEC_METHODS}; got {method!r}")
    q1 = check_int("q1", q1, minimum=1)
    q2 = check_int("q2", q2, minimum=1)
    if method in ("fedavg", "lossless"):
        return LosslessBroadcast(bits_per_entry), LosslessUpload(bits_per_entry)
    up = QuantizedUpload(q2)
    if method == "lb":
        return LosslessBroadcast(bits_per_entry), up
    if method == "lfl":
        return LFLBroadcast(q1), up
    if method == "lgm":
        return LGMBroadcast(q1), up
    return LTGMBroadcast(q1), up


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
