"""The codecs of LFL and its baselines: what the parameter server (PS) broadcasts and what the
devices upload, with the bits each costs, and the (broadcast, upload) pair of each named method.

Source: Amiri, Gündüz, Kulkarni, Poor, *Federated Learning With Quantized Global Model
Updates* (version 2 numbering). Notation as in :mod:`~fedlangevin.compression.lfl`, which runs
the round (Algorithm 1) these codecs plug into: theta(t) is the global model at the PS,
theta_hat(t) the devices' estimate of it, q1 and q2 the quantization levels of the broadcast and
of the uploads, Q is :func:`~fedlangevin.compression.quantize.stochastic_quantize` (App. A).

Broadcast codecs (PS -> devices):

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

Upload codecs (devices -> PS):

* :class:`QuantizedUpload` — s_m = Q(Delta_m + delta_m, q2),
  delta_m <- Delta_m + delta_m - s_m (Alg. 1 line 5, eq. 3), R_Q(d, q2) bits per device;
* :class:`LosslessUpload` — s_m = Delta_m, 33 d bits per device.

Named methods (Sec. 4, :func:`method_codecs`): ``lossless``/``fedavg`` (lossless both ways),
``lb`` (lossless broadcast, quantized uploads), ``lfl``, ``lgm``, ``ltgm`` (lossy broadcast,
quantized uploads).

Bits: a broadcast is counted once per round (one transmission reaches all devices); uploads
are summed over devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

import torch

from fedlangevin._validation import check_int
from fedlangevin.compression.optimizer import METHODS
from fedlangevin.compression.quantize import _quantize, lossless_bits, quantized_bits

__all__ = [
    "walsh_hadamard",
    "BroadcastOutput",
    "LosslessBroadcast",
    "LFLBroadcast",
    "LGMBroadcast",
    "LTGMBroadcast",
    "BroadcastCodec",
    "UploadOutput",
    "LosslessUpload",
    "QuantizedUpload",
    "LFLUploadCodec",
    "CODEC_METHODS",
    "method_codecs",
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
# Named methods

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
