"""Injected noise of FA-LD's local step (Deng et al., eq. 10 / eq. 14).

Client c at step k adds

    sqrt(2 eta tau rho^2) * xi_shared_k  +  sqrt(2 eta tau (1 - rho^2) / p_c) * xi^c_k,

with xi_shared_k one standard Gaussian vector per chain and step, shared by every client,
and xi^c_k independent per client. After p-weighted averaging the total noise is
sqrt(2 eta tau) * (rho xi_shared + sqrt(1 - rho^2) sum_c sqrt(p_c) xi^c), a standard
Gaussian scaled by sqrt(2 eta tau) (eq. 15): the sampler keeps the temperature tau while
each client runs at the higher temperature T_{c,rho} = tau (rho^2 + (1 - rho^2) / p_c).

Draw order (fixed, so that runs are reproducible): the shared vector first, then the private
ones; a term whose scale is zero (rho = 0 or rho = 1) draws nothing. With rho = 1 the stream
is exactly that of centralised SGLD drawing one (R, d) Gaussian per step.

Noise precision: the standard normals are drawn in ``noise_dtype`` (by default float32) and
promoted when added to the state. On CPU torch draws float32 normals about 4x faster than
float64 ones (vectorised Box-Muller), and this draw dominates a step for small d. The only
statistical difference is that float32 Box-Muller normals are bounded by
sqrt(-2 log 2^-24) ≈ 5.77 in absolute value (a tail of probability 8e-9 is cut) and carry a
relative rounding of 6e-8: far below any Monte Carlo error of a run. Pass
``noise_dtype=torch.float64`` for double-precision normals.
"""

from __future__ import annotations

import math

import torch

from fedlangevin._validation import check_real

__all__ = ["NoiseScales", "NoiseTally", "add_noise_", "client_noise_weight", "given_normals", "noise_scales"]


class NoiseScales:
    """Per-unit-step noise scales: multiply by sqrt(eta) to get eq. (10)'s coefficients.

    ``shared`` = sqrt(2 tau rho^2) (a float); ``private`` = sqrt(2 tau (1 - rho^2) / p_c)
    with shape (N, 1), ready to broadcast against (R, N, d); ``None`` where the term is zero.
    ``noise_dtype``: precision of the standard normals (``None``: the state's dtype);
    ``buffers``: reusable draw buffers (filled lazily).
    """

    __slots__ = ("shared", "private", "noise_dtype", "buffers")

    def __init__(self, shared: float | None, private: torch.Tensor | None, noise_dtype: torch.dtype | None = None) -> None:
        self.shared = shared
        self.private = private
        self.noise_dtype = noise_dtype
        self.buffers: dict = {}


class NoiseTally:
    """The standard normals of one round's local steps, summed: what one step of K eta with the
    same law would add (a synchronous coupling).

    A round of K local steps of eta adds to client c the noise sqrt(eta) sum_k (s_0 xi_shared_k
    + s_c xi^c_k) (eq. 10): the Brownian increment of the round's K eta of Langevin time, sampled
    at every local step. (1 / sqrt(K)) sum_k xi_k is again a standard normal, independent across
    clients and rounds as the xi_k are, so ``normals()`` is exactly eq. 10's draw for one step of
    K eta; ``normals(half)`` are those of two steps of K eta / 2 (the path's two halves; for an odd
    K the middle step's increment is split by a Brownian bridge, with one fresh normal per number
    from ``generator``). A chain that takes them (:func:`add_noise_`'s ``normals``) has its own law
    unchanged and moves with the round's chain: the companion chains of
    :mod:`fedlangevin.warmup.companions` use them so that their difference from the sampler's
    chains, not each chain's own spread, is what their Monte Carlo error measures. Tallying only
    reads the draws: the round is bit-identical.

    ``halves_of``: the round's K, to keep the halves apart (None: the whole round only). ``shared``
    (R, 1, d) and ``private`` (R, N, d): the sums, all N clients (whichever a process holds), in
    float64; ``steps``: the local steps added.
    """

    __slots__ = ("parts", "marks", "steps", "bridge")

    def __init__(self, halves_of: int | None = None) -> None:
        k = halves_of
        self.marks = () if k is None else ((k // 2,) if k % 2 == 0 else (k // 2, k // 2 + 1))
        self.parts: list[list] = []  # per stretch of steps between marks: [shared sum, private sum]
        self.steps = 0
        self.bridge: list | None = None  # an odd K's middle-step split (drawn once, for both halves)

    def add(self, shared: torch.Tensor | None, private: torch.Tensor | None) -> None:
        """One local step's standard normals: shared (R, d) or (R, 1, d), private (R, N, d); None
        where the term draws nothing."""
        if self.steps == 0 or self.steps in self.marks:
            self.parts.append([None, None])
        part = self.parts[-1]
        if shared is not None:
            shared = shared.reshape(shared.shape[0], 1, shared.shape[-1])
        for i, draw in enumerate((shared, private)):
            if draw is not None:  # a float64 copy of the first, the others added in place (promoted by add_)
                part[i] = draw.to(torch.float64, copy=True) if part[i] is None else part[i].add_(draw)
        self.steps += 1

    def _sum(self, i: int):
        terms = [p[i] for p in self.parts if p[i] is not None]
        return None if not terms else sum(terms[1:], terms[0].clone())

    def _scaled_sum(self, i: int, root: float):
        """The sum of term ``i``'s stretches over ``root`` (None: none drawn), in two passes for two stretches."""
        terms = [p[i] for p in self.parts if p[i] is not None]
        if not terms:
            return None
        total = torch.add(terms[0], terms[1]) if len(terms) > 1 else terms[0].clone()
        for t in terms[2:]:
            total.add_(t)
        return total.div_(root)

    shared = property(lambda self: self._sum(0), doc="the shared normals' sum (R, 1, d), None: none drawn")
    private = property(lambda self: self._sum(1), doc="the private normals' sum (R, N, d), None: none drawn")

    def normals(self, half: int | None = None, generator: torch.Generator | None = None):
        """(shared, private) standard normals of one step of K eta (``half`` None: the sums over
        sqrt(K)), or of the first (``half=0``) or second (1) of two steps of K eta / 2."""
        if self.steps < 1:
            raise ValueError("tally: no local step was added (run a round with tally= first)")
        if half is None:
            root = math.sqrt(self.steps)
            return tuple(self._scaled_sum(i, root) for i in (0, 1))
        if half not in (0, 1) or not self.marks or len(self.parts) != len(self.marks) + 1 or self.steps <= self.marks[-1]:
            raise ValueError(f"half: 0 or 1 of a tally made with halves_of=K over its K steps; got half={half!r}, "
                             f"{self.steps} steps, marks {self.marks}")
        root = math.sqrt(self.steps / 2.0)
        if len(self.parts) == 2:  # K even: the two stretches
            return tuple(None if t is None else t / root for t in self.parts[half])
        # K odd: the middle step's increment M split at its midpoint, (M + z) / 2 and (M - z) / 2 (z a
        # standard normal: the halves are independent N(0, 1/2) each, their sum M)
        if self.bridge is None:
            self.bridge = [None if m is None else torch.randn(m.shape, generator=generator, dtype=m.dtype,
                                                              device=m.device) for m in self.parts[1]]
        sign = 1.0 if half == 0 else -1.0
        return tuple(None if m is None else (side + (m + sign * z) / 2) / root
                     for side, m, z in zip(self.parts[2 * half], self.parts[1], self.bridge))


def client_noise_weight(weight: float, noise_weight: float | None = None) -> float:
    """The weight in ONE client's private noise scale sqrt(2 tau (1 - rho^2) / q_c): its p_c (``weight``,
    in (0, 1]) or, given, ``noise_weight`` q_c > 0 in its place (the participation rule's
    :meth:`~fedlangevin.federation.participation.Participation.noise_weights`). The clients of FA-LD and
    FA-HMC share this check; ``ValueError`` naming the bad argument and its range."""
    weight = check_real("weight", weight, low=0.0, high=1.0, low_open=True)
    if noise_weight is None:
        return weight
    return check_real("noise_weight", noise_weight, low=0.0, low_open=True)


def noise_scales(
    weights: torch.Tensor,
    temperature: float,
    correlation: float,
    *,
    device=None,
    dtype=torch.float64,
    noise_dtype: torch.dtype | None = None,
) -> NoiseScales:
    """Scales of the shared and private noise for weights p_c, temperature tau, correlation rho."""
    rho2 = correlation * correlation
    shared = math.sqrt(2.0 * temperature * rho2) if rho2 > 0 else None
    private = None
    if rho2 < 1:
        p = weights.to(dtype=torch.float64, device="cpu")
        private = torch.sqrt(2.0 * temperature * (1.0 - rho2) / p).to(device=device, dtype=dtype)[:, None]
    largest = max([shared or 0.0] + ([] if private is None else [float(private.abs().max())]))
    if not math.isfinite(largest) or largest > torch.finfo(dtype).max:
        raise ValueError(
            f"temperature={temperature!r} makes the injected noise scale sqrt(2 tau (1 - rho^2) / p_c) overflow "
            f"{str(dtype).replace('torch.', '')} (eq. 10); use a temperature below "
            f"{torch.finfo(torch.float64).max / 2 * float(weights.min()) / max(1.0 - rho2, 1e-300):.3g}"
        )
    return NoiseScales(shared, private, noise_dtype)


def add_noise_(
    theta: torch.Tensor,
    scales: NoiseScales,
    eta: float,
    generator: torch.Generator | None,
    *,
    clients: torch.Tensor | None = None,
    transform=None,
    shared_generator: torch.Generator | None = None,
    tally: NoiseTally | None = None,
    normals: tuple[torch.Tensor | None, torch.Tensor | None] | None = None,
) -> torch.Tensor:
    """Add eq. (10)'s noise for step size ``eta`` to client states ``theta`` (R, n, d) in place.

    The normals are drawn in ``scales.noise_dtype`` (default: theta's dtype) into buffers
    reused across calls: the shared vector (R, d) from ``shared_generator`` (default:
    ``generator``), then the private ones (R, N, d) for all N clients of ``scales``.
    ``clients``: the indices (n,) of the clients ``theta`` holds (default: all N); the
    private normals of every client are drawn and those columns kept, so the stream does not
    depend on which clients a process holds. ``transform``: a map applied to the noise
    before it is added (a preconditioner's factor A, see
    :class:`fedlangevin.federation.extensions.Preconditioner`); without it the noise is added term
    by term, as it always was. ``tally``: a :class:`NoiseTally` the drawn normals (all N
    clients') are added to; ``normals``: (shared (R, 1, d), private (R, N, d)) standard normals
    to use instead of drawing (:meth:`NoiseTally.normals`: nothing is drawn from the generators).
    """
    r, n, d = theta.shape
    root = math.sqrt(eta)
    dtype = theta.dtype if scales.noise_dtype is None else scales.noise_dtype
    buffers = scales.buffers
    target = theta if transform is None else _buffer(buffers, "transformed", (r, n, d), theta.device, theta.dtype).zero_()
    if scales.shared is not None:
        if normals is None:
            shared = _buffer(buffers, "shared", (r, 1, d), theta.device, dtype)
            torch.randn((r, 1, d), generator=generator if shared_generator is None else shared_generator, out=shared)
        else:
            shared = given_normals(normals[0], "shared", (r, 1, d), theta.dtype, theta.device)
        target.add_(shared, alpha=root * scales.shared)
    if scales.private is not None:
        total = scales.private.shape[0]
        if normals is None:
            private = _buffer(buffers, "private", (r, total, d), theta.device, dtype)
            torch.randn((r, total, d), generator=generator, out=private)
        else:
            private = given_normals(normals[1], "private", (r, total, d), theta.dtype, theta.device)
        if tally is not None:
            tally.add(shared if scales.shared is not None else None, private)
        rows = _scale_rows(buffers, scales.private, d, theta)
        if clients is not None:
            private = private.index_select(1, clients)
            rows = rows.index_select(0, clients)
        if dtype != theta.dtype:  # promote through a staging buffer: 2x faster than a mixed-dtype addcmul_
            private = _buffer(buffers, "private_promoted", (r, n, d), theta.device, theta.dtype).copy_(private)
        target.addcmul_(private, rows, value=root)
    elif tally is not None:
        tally.add(shared if scales.shared is not None else None, None)
    if transform is not None:
        theta.add_(transform(target))
    return theta


def given_normals(normals: torch.Tensor | None, term: str, shape: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    """Given standard normals of one term (``term``: "shared" or "private"), checked against the
    draw of ``shape`` they replace, in ``dtype`` on ``device``."""
    if normals is None or tuple(normals.shape) != shape:
        got = None if normals is None else tuple(normals.shape)
        raise ValueError(f"normals: the {term} normals must have shape {shape} (the draw they replace); got {got}")
    return normals.to(device=device, dtype=dtype)


def _scale_rows(buffers: dict, private: torch.Tensor, d: int, theta: torch.Tensor) -> torch.Tensor:
    """The (N, 1) private scale repeated to (N, d): multiplying by a size-1 innermost dimension
    is several times slower on CPU than by a contiguous (N, d) block."""
    rows = buffers.get("scale_rows")
    if rows is None or rows.shape[1] != d or rows.dtype != theta.dtype or rows.device != theta.device:
        rows = buffers["scale_rows"] = private.to(device=theta.device, dtype=theta.dtype).expand(-1, d).contiguous()
    return rows


def _buffer(buffers: dict | None, key: str, shape: tuple, device, dtype) -> torch.Tensor:
    if buffers is None:
        return torch.empty(shape, device=device, dtype=dtype)
    buf = buffers.get(key)
    if buf is None or buf.shape != shape or buf.dtype != dtype or buf.device != device:
        buf = buffers[key] = torch.empty(shape, device=device, dtype=dtype)
    return buf
