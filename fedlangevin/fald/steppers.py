"""Round kernels: the K local steps of one FA-LD round for every chain and client at once.

A stepper turns the broadcast global parameters theta (R, d) and the round's step sizes
eta_k into the clients' local states beta (R, N, d) before synchronisation (Deng et al.,
Alg. 1, eq. 10). It owns preallocated buffers, so the loop over local steps allocates
nothing; the math is that of :func:`fedlangevin.fald.kernel.local_step`.

Three kernels, chosen by :func:`make_stepper`:

- :class:`SmallAffineStepper` — affine gradients (a :class:`~fedlangevin.problems.QuadraticForm`,
  e.g. the paper's Gaussian simulation) and small d. The state is kept coordinate-major,
  (d, R, N), and the affine map theta <- theta M + eta b_c + noise (M = I - eta A, or
  M_c = I - eta A_c per client) works on contiguous (R, N) planes: the offset-and-noise term
  is one multiply-add over the planes; with a shared Hessian the map is one (d x d) @ (d x R N)
  ``addmm`` that also adds it; with per-client Hessians it is d^2 multiply-adds by (N,)
  coefficient rows.
- :class:`DenseAffineStepper` — affine gradients, larger d: one matrix product per step
  (``addmm`` for a shared Hessian, ``baddbmm`` for per-client Hessians) that also adds
  the offset and the noise, so the step costs the matrix product plus the noise draw.
- :class:`GradientStepper` — any problem, through ``problem.grad`` (minibatches included),
  on an (R, N, d) buffer: the reference :func:`fedlangevin.fald.kernel.local_step` itself.

Random stream (the same in all three, so that they give the same draws for the same seed,
up to floating-point rounding): at each local step, after the gradient, the shared normals
(R, d) are drawn first, then the private normals (R, N, d) in that (chain, client,
coordinate) order, in ``noise_dtype``; a term whose scale is zero draws nothing. The
coordinate-major kernels transpose the draws while promoting them to the state's dtype.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from fedlangevin.fald.local import local_step
from fedlangevin.federation.noise import NoiseScales, given_normals
from fedlangevin.federation.participation import synchronize
from fedlangevin.problems.base import FederatedProblem

__all__ = [
    "AffineStepper",
    "DenseAffineStepper",
    "GradientStepper",
    "SMALL_DIM",
    "SmallAffineStepper",
    "Stepper",
    "make_stepper",
]

#: Largest d for which affine problems use the coordinate-major kernel. Measured on CPU
#: (``benchmarks/bench_step.py --crossover``, (R, N) = (300, 50)): it is faster than the
#: matrix-product kernel up to d = 6 with per-client Hessians (d^2 plane updates) and up to
#: at least d = 10 with a shared one (one (d x d) @ (d x R N) product).
SMALL_DIM = 6

#: step sizes whose coefficients an affine kernel keeps (a round alternates between a few: the
#: sampler's eta and a fixed K's companions' K eta and K eta / 2)
COEFFICIENT_CACHE = 8

#: ``on_step(i, beta)``: called after local step i of a round with the client states (R, N, d)
#: (a view of the kernel's buffer, valid during the call).
StepHook = Callable[[int, torch.Tensor], None]


class Stepper:
    """Base class: ``local_steps(theta, etas, scales, generator, on_step=None, tally=None, normals=None) -> beta`` (R, N, d).

    ``beta`` may be a view of an internal buffer, valid until the next call. Buffers are
    sized on the first call and resized when the number of chains or the noise changes.
    ``on_step`` (:data:`StepHook`), if given, sees the states after every local step (the
    runner replays a diverged round with it); unused, it costs one ``None`` test per step.
    ``tally`` (a :class:`~fedlangevin.federation.noise.NoiseTally`), if given, gets every step's
    standard normals (read only: the same bits). ``normals`` (shared (R, 1, d), private (R, N, d)):
    one local step's standard normals, used instead of drawing
    (:func:`~fedlangevin.federation.noise.add_noise_`'s ``normals``: the coupled companion chains of
    :mod:`fedlangevin.warmup.companions`).
    """

    #: minibatch size of the gradients (``None``: full gradients, always so for affine kernels)
    batch_size: int | None = None

    def __init__(self, problem: FederatedProblem, dtype: torch.dtype, device: torch.device) -> None:
        self.problem = problem
        self.dtype = dtype
        self.device = torch.device(device)
        self.num_clients = problem.num_clients
        self.dim = problem.dim
        self._chains, self._scales = None, None

    # -- noise ---------------------------------------------------------------------------
    def _setup(self, chains: int, scales: NoiseScales) -> None:
        if chains == self._chains and scales is self._scales:  # same chains and noise: buffers fit
            return
        r, n, d = chains, self.num_clients, self.dim
        dev, dt = self.device, self.dtype
        ndt = scales.noise_dtype or dt
        self._promote = ndt != dt
        self._shared_scale = scales.shared
        self._shared_draw = torch.empty(r, d, device=dev, dtype=ndt) if scales.shared is not None else None
        self._private_draw = torch.empty(r, n, d, device=dev, dtype=ndt) if scales.private is not None else None
        # (N,) per-client scale sqrt(2 tau (1 - rho^2) / p_c), in the state's dtype.
        self._private_scale = None if scales.private is None else scales.private.reshape(n).to(device=dev, dtype=dt)
        self._allocate(r)
        self._chains, self._scales = chains, scales

    def _allocate(self, chains: int) -> None:
        raise NotImplementedError

    def _draw(self, generator: torch.Generator | None, normals: tuple | None = None):
        """Shared normals (R, d), then private normals (R, N, d), into the draw buffers; returns the
        (shared, private) draws. ``normals`` (shared (R, 1, d), private (R, N, d)): used instead of
        drawing (nothing is drawn; a term whose scale is zero takes none)."""
        if normals is not None:
            return self._given(normals)
        if self._shared_draw is not None:
            self._shared_draw.normal_(generator=generator)
        if self._private_draw is not None:
            self._private_draw.normal_(generator=generator)
        return self._shared_draw, self._private_draw

    def _given(self, normals: tuple) -> tuple:
        """Given standard normals (shared (R, 1, d), private (R, N, d)), checked against the draws
        they replace, as (shared (R, d), private (R, N, d)) in the state's dtype (None: no such term)."""
        shared, private = self._shared_draw, self._private_draw
        r = (shared if shared is not None else private).shape[0]
        if shared is not None:
            shared = given_normals(normals[0], "shared", (r, 1, self.dim), self.dtype, self.device).reshape(r, self.dim)
        if private is not None:
            private = given_normals(normals[1], "private", tuple(private.shape), self.dtype, self.device)
        return shared, private

    # -- the round -----------------------------------------------------------------------
    def local_steps(
        self,
        theta: torch.Tensor,
        etas: Sequence[float],
        scales: NoiseScales,
        generator: torch.Generator | None,
        on_step: StepHook | None = None,
        tally=None,
        normals: tuple | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError


class AffineStepper(Stepper):
    """Base of the affine kernels: reads the problem's quadratic form (grad f^c = A_c theta - b_c)
    once. ``hessian`` is A (d, d) when every client shares it (``shared_hessian``), else
    A_c (N, d, d); ``shift`` is b_c (N, d), both in the state's dtype and on its device."""

    def __init__(self, problem: FederatedProblem, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(problem, dtype, device)
        form = problem.quadratic()
        if form is None:
            raise ValueError(f"{type(self).__name__} needs a problem with affine gradients (problem.quadratic())")
        self.shared_hessian = form.shared
        self.hessian = form.hessian.to(device=self.device, dtype=dtype)
        self.shift = form.shift.to(device=self.device, dtype=dtype)  # (N, d)
        self._eta, self._cache = None, {}
        # a few small coefficient sets (the (d, d) matrix I - eta A of each step size): one above 2^16 entries
        self._cache_size = COEFFICIENT_CACHE if self.dim * self.dim <= 1 << 16 else 1


class SmallAffineStepper(AffineStepper):
    """Affine gradients grad f^c = A_c theta - b_c, small d: coordinate-major (d, R, N) planes.

    Local step (eq. 10) for coordinate e of every chain r and client c:

        y[e] = w[e] + sum_j M_c[j, e] x[j],   w[e] = eta b_c[e] + sqrt(eta) (s_c xi[e] + s_0 xi_0[e]),

    M_c = I - eta A_c, s_c = sqrt(2 tau (1 - rho^2) / p_c), s_0 = sqrt(2 tau rho^2). The
    noise-and-offset term w is one multiply-add over all planes; with a shared Hessian the
    sum over j is one (d x d) @ (d x R N) product that also adds w (``addmm``), with
    per-client Hessians it is d^2 multiply-adds by (N,) coefficient rows.
    """

    def __init__(self, problem: FederatedProblem, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(problem, dtype, device)
        self.shift_planes = self.shift.t().contiguous()[:, None, :]  # (d, 1, N)
        self._block, self._block_chains, self._slots = None, None, []  # the rounds of rounds()

    def _allocate(self, chains: int) -> None:
        r, n, d = chains, self.num_clients, self.dim
        kw = dict(device=self.device, dtype=self.dtype)
        self._x = torch.empty(d, r, n, **kw)
        self._y = torch.empty(d, r, n, **kw)
        self._w = torch.empty(d, r, n, **kw)
        # the (d, R N) matrix views of the planes, made once (a view per step costs a dispatch)
        self._xf, self._yf, self._wf = (t.view(d, r * n) for t in (self._x, self._y, self._w))
        self._z0 = torch.empty(d, r, 1, **kw) if self._shared_draw is not None else None
        self._prod = torch.empty(d, r, **kw)  # the first step's (d x d) @ (d x R) product
        self._prod3 = self._prod.unsqueeze(2)  # ... as (d, R, 1) planes
        self._eta, self._cache = None, {}

    def _coefficients(self, eta: float) -> None:
        if eta == self._eta:
            return
        hit = self._cache.get(eta)  # a few step sizes alternate (a check's companions: K eta, K eta / 2)
        if hit is None:
            d = self.dim
            eye = torch.eye(d, device=self.device, dtype=self.dtype)
            mt = m = None
            if self.shared_hessian:
                mt = (eye - eta * self.hessian).t().contiguous()  # y = M^T x in plane form
            else:
                full = eye - eta * self.hessian  # (N, d, d)
                m = [[full[:, j, e].contiguous() for j in range(d)] for e in range(d)]  # (N,) each
            root = math.sqrt(eta)
            hit = (mt, m, eta * self.shift_planes,  # the offset (d, 1, N)
                   None if self._private_scale is None else root * self._private_scale,
                   None if self._shared_scale is None else root * self._shared_scale)
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[eta] = hit
        self._mt, self._m, self._offset, self._noise, self._noise0 = hit
        self._eta = eta

    def local_steps(self, theta, etas, scales, generator, on_step=None, tally=None, normals=None):
        self._setup(theta.shape[0], scales)
        return self._steps(theta.t(), etas, generator, on_step, tally=tally, normals=normals).permute(1, 2, 0)

    def _steps(self, planes, etas, generator, on_step=None, last=None, tally=None, normals=None):
        """The K local steps of one round from the broadcast planes (d, R); returns the final
        client planes (d, R, N): an internal buffer, or ``last`` (a (d, R, N) tensor) where
        given, which the last step then writes instead of the buffer. ``normals``: one step's
        given normals (:class:`Stepper`)."""
        x, y, w, z0 = self._x, self._y, self._w, self._z0
        xf, yf, wf = self._xf, self._yf, self._wf
        d, r, n = w.shape
        final = len(etas) - 1
        shared_draw, private_draw = self._shared_draw, self._private_draw
        if normals is not None:
            shared_draw, private_draw = self._given(normals)
        wide = self.dtype == torch.float64  # a tally (float64) reads the promoted planes
        given = normals is not None
        # the broadcast is folded into the first local step: every client starts at theta, so
        # its sum over j is the same (d, R) plane for all N clients (or a broadcast outer product)
        for i, eta in enumerate(etas):
            self._coefficients(float(eta))
            if normals is None:  # shared normals (R, d), then private normals (R, N, d)
                if shared_draw is not None:
                    shared_draw.normal_(generator=generator)
                if private_draw is not None:
                    private_draw.normal_(generator=generator)
            if tally is not None and not wide:
                tally.add(shared_draw, private_draw)
            if z0 is not None:
                z0.copy_(shared_draw.t()[:, :, None])  # promote and transpose
            if private_draw is not None and not given:
                w.copy_(private_draw.permute(2, 0, 1))  # promote and transpose
            if tally is not None and wide:  # the same numbers, promoted already (in the planes' layout)
                tally.add(None if z0 is None else z0.permute(1, 2, 0),
                          None if private_draw is None else private_draw if given else w.permute(1, 2, 0))
            if private_draw is not None:  # given normals are in the state's dtype already: read in place
                torch.addcmul(self._offset, private_draw.permute(2, 0, 1) if given else w, self._noise, out=w)
            else:
                w.copy_(self._offset.expand(d, r, n))
            if z0 is not None:
                w.add_(z0, alpha=self._noise0)
            into = y if last is None or i < final else last
            if self.shared_hessian:
                if i == 0:
                    torch.mm(self._mt, planes, out=self._prod)
                    torch.add(w, self._prod3, out=into)
                else:
                    torch.addmm(wf, self._mt, xf, out=yf if into is y else into.view(d, r * n))
            else:
                src, m = (planes.unsqueeze(2) if i == 0 else x), self._m  # (d, R, 1) or (d, R, N) by (N,) rows
                for e in range(d):
                    ye = into[e]
                    torch.addcmul(w[e], src[0], m[e][0], out=ye)
                    for j in range(1, d):
                        ye.addcmul_(src[j], m[e][j])
            if into is not y:
                return into
            x, y, xf, yf = y, x, yf, xf
            if on_step is not None:
                on_step(i, x.permute(1, 2, 0))
        self._x, self._y, self._xf, self._yf = x, y, xf, yf
        return x

    def rounds(self, theta, etas_list, scales, generator, weights, tallies=None):
        """``len(etas_list)`` rounds with full participation (synchronisation weights ``weights``,
        (N,)) from theta (R, d), with the operations of :meth:`local_steps` and
        :func:`~fedlangevin.federation.participation.synchronize` round by round, so the same bits;
        returns the synchronised parameters of every round, an (M, R, d) view of an internal
        buffer valid until the next call. With N = 1 a round's last local step writes straight
        into its slot of that buffer (the synchronisation is the product by p_1, skipped when
        p_1 = 1, where it is exact). ``tallies``: one :class:`~fedlangevin.federation.noise.NoiseTally`
        per round (or None), which gets that round's standard normals, as :meth:`local_steps`' ``tally``."""
        r, d = theta.shape
        n = self.num_clients
        self._setup(r, scales)
        count = len(etas_list)
        block = self._block
        if block is None or block.shape[0] < count or self._block_chains != r:
            size = max(count, 0 if block is None or self._block_chains != r else block.shape[0])
            kw = dict(device=self.device, dtype=self.dtype)
            block = self._block = torch.empty(size, d, r, **kw) if n == 1 else torch.empty(size, r, d, **kw)
            self._block_chains = r
            # per round: (d, R, 1) slot the last local step writes and its (d, R) plane (N = 1),
            # or the (R, d) row and its (d, R) transposed view (N > 1)
            self._slots = [(b.unsqueeze(2), b) for b in block] if n == 1 else [(b, b.t()) for b in block]
        slots, planes = self._slots, theta.t()
        if n == 1:
            unit = bool(weights.numel() == 1 and float(weights[0]) == 1.0)
            if (unit and self.shared_hessian and self._shared_draw is None and self._private_draw is not None
                    and max(map(len, etas_list)) == 1 and tallies is None):
                self._single_steps(planes, etas_list, generator, slots)
                return block[:count].transpose(1, 2)
            tallies = [None] * count if tallies is None else tallies
            for etas, (slot, plane), tally in zip(etas_list, slots, tallies):
                self._steps(planes, etas, generator, None, slot, tally=tally)
                if not unit:
                    slot.mul_(weights)  # synchronize's w_1 beta_1, in place
                planes = plane
            return block[:count].transpose(1, 2)
        tallies = [None] * count if tallies is None else tallies
        for etas, (row, plane), tally in zip(etas_list, slots, tallies):
            beta = self._steps(planes, etas, generator, tally=tally).permute(1, 2, 0)
            row.copy_(synchronize(beta, weights))
            planes = plane
        return block[:count]

    def _single_steps(self, planes, etas_list, generator, slots) -> None:
        """Rounds of one local step, N = 1, p_1 = 1, a shared Hessian and private noise only (the
        default settings): the operations of :meth:`_steps` for K = 1 with the branches taken once
        for all the rounds, each round's result written into its slot."""
        w, prod, prod3, draw = self._w, self._prod, self._prod3, self._private_draw
        xi = draw.permute(2, 0, 1)
        normal, copy, addcmul, mm, add = draw.normal_, w.copy_, torch.addcmul, torch.mm, torch.add
        eta = None
        for (step,), (slot, plane) in zip(etas_list, slots):
            if step != eta:
                eta = step
                self._coefficients(float(eta))
                offset, noise, mt = self._offset, self._noise, self._mt
            normal(generator=generator)
            copy(xi)  # promote and transpose
            addcmul(offset, w, noise, out=w)
            mm(mt, planes, out=prod)
            add(w, prod3, out=slot)
            planes = plane


class DenseAffineStepper(AffineStepper):
    """Affine gradients, any d: one matrix product per local step.

    Shared Hessian A, state (R, N, d): y = addmm(eta b_c + noise, x, M) with M = I - eta A
    (cached per eta). Per-client Hessians A_c, state (N, R, d):
    y = baddbmm(x + eta b_c + noise, x, A_c, alpha = -eta), which never forms I - eta A_c.
    """

    def _allocate(self, chains: int) -> None:
        r, n, d = chains, self.num_clients, self.dim
        kw = dict(device=self.device, dtype=self.dtype)
        shape = (r, n, d) if self.shared_hessian else (n, r, d)
        self._x = torch.empty(shape, **kw)
        self._y = torch.empty(shape, **kw)
        self._z = torch.empty(shape, **kw)
        self._p = torch.empty(shape, **kw) if (self._promote and self._private_draw is not None) else None
        self._p0 = torch.empty(r, d, **kw) if (self._promote and self._shared_draw is not None) else None
        # the (N,) private scale, repeated along d so that the multiply broadcasts over whole rows
        if self._private_scale is not None:
            s = self._private_scale[:, None].expand(n, d)
            self._scale_rows = (s if self.shared_hessian else s[:, None, :]).contiguous()
        self._eta, self._cache = None, {}

    def _coefficients(self, eta: float) -> None:
        if eta == self._eta:
            return
        hit = self._cache.get(eta)  # a few step sizes alternate (a check's companions: K eta, K eta / 2)
        if hit is None:
            if self.shared_hessian:
                eye = torch.eye(self.dim, device=self.device, dtype=self.dtype)
                hit = (eye - eta * self.hessian, eta * self.shift)  # offset (N, d), broadcasts over chains
            else:
                hit = (None, (eta * self.shift)[:, None, :])  # (N, 1, d)
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[eta] = hit
        if hit[0] is not None:
            self._m = hit[0]
        self._offset = hit[1]
        self._root = math.sqrt(eta)
        self._eta = eta

    def local_steps(self, theta, etas, scales, generator, on_step=None, tally=None, normals=None):
        r, d = theta.shape
        n = self.num_clients
        self._setup(r, scales)
        shared_hessian = self.shared_hessian
        x, y, z = self._x, self._y, self._z
        if shared_hessian:
            x.copy_(theta[:, None, :].expand(r, n, d))
        else:
            x.copy_(theta[None, :, :].expand(n, r, d))
        for i, eta in enumerate(etas):
            self._coefficients(float(eta))
            shared_draw, private_draw = self._draw(generator, normals)
            if tally is not None:
                tally.add(shared_draw, private_draw)
            root = self._root
            if private_draw is not None:
                xi = private_draw if shared_hessian else private_draw.permute(1, 0, 2)
                if self._p is not None:
                    xi = self._p.copy_(xi)
                torch.addcmul(self._offset, xi, self._scale_rows, value=root, out=z)
            else:
                z.copy_(self._offset.expand_as(z))
            if shared_draw is not None:
                xi0 = shared_draw if self._p0 is None else self._p0.copy_(shared_draw)
                z.add_(xi0[:, None, :] if shared_hessian else xi0[None], alpha=root * self._shared_scale)
            if shared_hessian:
                torch.addmm(z.view(r * n, d), x.view(r * n, d), self._m, out=y.view(r * n, d))
            else:
                z.add_(x)
                torch.baddbmm(z, x, self.hessian, alpha=-eta, out=y)
            x, y = y, x
            if on_step is not None:
                on_step(i, x if shared_hessian else x.permute(1, 0, 2))
        self._x, self._y = x, y
        return x if shared_hessian else x.permute(1, 0, 2)


class GradientStepper(Stepper):
    """Any problem: beta <- beta - eta grad f^c(beta) + noise, through ``problem.grad``."""

    def __init__(
        self, problem: FederatedProblem, dtype: torch.dtype, device: torch.device, batch_size: int | None = None
    ) -> None:
        super().__init__(problem, dtype, device)
        self.batch_size = batch_size

    def _allocate(self, chains: int) -> None:
        self._x = torch.empty(chains, self.num_clients, self.dim, device=self.device, dtype=self.dtype)

    def local_steps(self, theta, etas, scales, generator, on_step=None, tally=None, normals=None):
        r, d = theta.shape
        self._setup(r, scales)
        x = self._x
        x.copy_(theta[:, None, :].expand(r, self.num_clients, d))
        for i, eta in enumerate(etas):
            local_step(x, self.problem, float(eta), scales, generator, self.batch_size, tally=tally, normals=normals)
            if on_step is not None:
                on_step(i, x)
        return x


def make_stepper(
    problem: FederatedProblem,
    dtype: torch.dtype,
    device: torch.device | str,
    batch_size: int | None = None,
    kernel: str = "auto",
) -> Stepper:
    """The round kernel for ``problem``: ``kernel`` = "auto", "small", "dense" or "gradient".

    "auto" picks :class:`SmallAffineStepper` for affine problems with d <= :data:`SMALL_DIM`,
    :class:`DenseAffineStepper` for larger affine problems, and :class:`GradientStepper`
    otherwise or when minibatches are requested.
    """
    if kernel not in ("auto", "small", "dense", "gradient"):
        raise ValueError(f"kernel must be 'auto', 'small', 'dense' or 'gradient'; got {kernel!r}")
    affine = batch_size is None and problem.quadratic() is not None
    if kernel == "auto":
        kernel = "gradient" if not affine else ("small" if problem.dim <= SMALL_DIM else "dense")
    if kernel != "gradient" and not affine:
        raise ValueError(f"kernel={kernel!r} needs affine gradients (problem.quadratic()) and batch_size=None")
    if kernel == "small":
        return SmallAffineStepper(problem, dtype, device)
    if kernel == "dense":
        return DenseAffineStepper(problem, dtype, device)
    return GradientStepper(problem, dtype, device, batch_size)
