"""A private start and a private clip: a noisy federated MAP search whose rounds also track a
quantile of the gradient norms (adaptive clipping, Andrew, Thakkar, McMahan & Ramaswamy 2021,
"Differentially private learning with adaptive clipping").

Every round r, with the clip C_r and the iterate theta_r (both public: functions of what was
released before):

- **record level**: each client c uploads the sum of its per-example gradients clipped to C_r plus
  N(0, (z_g 2 C_r)^2 I) (sensitivity 2C under substitution), and the number of its records whose
  gradient norm is at most C_r plus N(0, sigma_b^2) (sensitivity 1);
- **client level**: each client uploads its data term (1/p_c) sum_i g_i clipped to C_r plus
  N(0, (z_g 2 C_r)^2 I), and the indicator that the term's norm is at most C_r plus N(0, sigma_b^2).

The server forms the posterior energy's gradient g_r from the uploads and the public prior and
moves theta in two phases, both post-processing of what was released (they cost no privacy):

1. **A step search** (gradient descent). The public curvature guess lambda_r
   (:func:`fedlangevin.warmup.iterates.public_curvature` at C_r, plus the prior's curvature) comes
   from the Fisher-trace bound n C^2 and can sit far above the energy's largest curvature (full
   MNIST at theta = 0: 4.0e6 against 2.3e5), so its step 1 / lambda_r moves the model too little
   (50 rounds: test accuracy 0.844, ECE 0.27). The step s_r / lambda_r starts at s = 1 and grows
   by GROW a round while gradient descent is seen to be stable: on a convex quadratic, descent at
   a stable step shrinks |g| every round, and beyond 2 / lambda_max the stiffest direction grows.
   The server reads |g_r|^2 minus its noise's known mean d sigma^2 (sigma^2 the per-coordinate
   variance of the uploads' summed noise), in units of C_r^2 (a clipped sum scales with the clip),
   with its standard error sqrt(2 d) sigma^2 + 2 |g| sigma; the search ends when that signal rises
   by more than SIGNIFICANCE standard errors (the step passed the stable range) or is no longer
   SIGNIFICANCE standard errors above zero (the noise hides the rest), and s falls by BACK (in
   the second case to no less than 1: nothing was seen to be unstable).
2. **Heavy ball** (momentum MOMENTUM) at the step s / lambda_r found, for the remaining rounds.

The step is capped at 1 / (the prior's curvature) (the prior alone is stable there). The start is
the average of the second half of the heavy-ball rounds (of all rounds where the search never
ended), and the clip moves geometrically towards the ``quantile`` gamma of the norms:
C_{r+1} = C_r exp(-eta_C (b_r - gamma)), b_r the noisy fraction of unclipped records (clients).

One round is one Gaussian mechanism of noise multiplier (z_g^-2 + sigma_b^-2)^(-1/2)
(:func:`fedlangevin.privacy.planning.combined_noise_multiplier`); the rounds compose like any
others (:class:`~fedlangevin.privacy.planning.Release` ``"start"``, every client every round, full
batch). The start is the average of the second half of the iterates (post-processing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.privacy.planning import Release, combined_noise_multiplier
from fedlangevin.problems.private import MAX_ELEMENTS, clip_norms, safe_norm
from fedlangevin.warmup.iterates import prior_curvature

__all__ = ["PrivateStart", "private_start"]

#: heavy-ball momentum of the second phase (post-processing of the released gradients)
MOMENTUM = 0.9
#: the step search's growth of the step a round, its fall where it ends, and the rise (or the level) of the
#: gradient's signal energy, in standard errors, that ends it (module docstring)
GROW = 1.25
BACK = 2.0
SIGNIFICANCE = 2.0
#: the start averages the last KEEP of the heavy-ball rounds (0.8 on full MNIST: ECE 0.033 against 0.016)
KEEP = 0.5


@dataclass(frozen=True)
class PrivateStart:
    """What :func:`private_start` returns: the start ``theta`` (d,), the ``clip`` after the last
    round, the clip and the noisy unclipped fraction of every round, and the ``release`` (its
    rounds as the accountant sees them), with the gradient's and the count's noise; ``scales``: the
    step's multiple s_r of 1 / lambda_r every round, ``search_rounds``: the rounds of the step
    search (None: it never ended)."""

    theta: torch.Tensor
    clip: float
    clips: tuple[float, ...]
    fractions: tuple[float, ...]
    release: Release
    gradient_noise: float
    count_noise: float
    scales: tuple[float, ...] = ()
    search_rounds: int | None = None


def _record_round(problem, theta, clip):
    """Per client: the sum of per-example gradients clipped to ``clip`` (N, d) and the number of
    records whose norm is at most ``clip`` (N,)."""
    n, d = problem.num_clients, problem.dim
    th = theta.expand(1, n, d).contiguous()
    total = problem._nll_grad(th, None, clip)[0]
    full_norms = getattr(problem, "_full_gradient_norms", None)
    if full_norms is not None:
        return total, (full_norms(th) <= clip).to(torch.float64).sum(1)
    sizes = problem.client_sizes.long()
    positions = torch.arange(int(sizes.max()))
    chunk = max(1, MAX_ELEMENTS // max(1, n * d))
    count = torch.zeros(n, dtype=torch.float64)
    for start in range(0, positions.numel(), chunk):
        pos = positions[start:start + chunk]
        idx = torch.minimum(pos[None, :], sizes[:, None] - 1)[None]
        keep = (pos[None, :] < sizes[:, None]).to(torch.float64)
        norms = safe_norm(problem.per_example_grads(th, idx)[0])[..., 0]  # (N, B)
        count += ((norms <= clip).to(torch.float64) * keep).sum(1)
    return total, count


def _client_round(problem, theta, clip):
    """Per client: its data term (1/p_c) sum_i g_i clipped to ``clip`` (N, d) and whether its norm
    is at most ``clip`` (N,)."""
    from fedlangevin.privacy.mechanism import MAX_CLIP, ClientLevel

    n, d = problem.num_clients, problem.dim
    th = theta.expand(1, n, d).contiguous()
    data = (problem.private_grad(th, ClientLevel(clip=MAX_CLIP)) - problem.prior_grad(th))[0]
    norms = safe_norm(data)[..., 0]
    return clip_norms(data, clip), (norms <= clip).to(torch.float64)


def private_start(problem, *, adjacency: str = "record", rounds: int, noise_multiplier: float,
                  count_noise: float | None = None, clip: float = 1.0, quantile: float = 0.5,
                  clip_rate: float = 0.2, theta: torch.Tensor | None = None, move: bool = True,
                  adapt_clip: bool = True, generator: torch.Generator | None = None) -> PrivateStart:
    """Run the private MAP search and clip quantile of the module docstring.

    Parameters
    ----------
    adjacency : "record" or "client" (which uploads are clipped, see the module docstring).
    rounds : its rounds (each one accounted), >= 1.
    noise_multiplier : z of one round, the gradient and the count together (> 0); the gradient's
        own z_g = (z^-2 - sigma_b^-2)^(-1/2).
    count_noise : sigma_b, the std of the count's noise, > noise_multiplier (default 10 z, the
        count taking 1% of the round's privacy, lowered to 0.05 n / sqrt(N) where that is smaller,
        so that the noisy fraction's sd stays near 0.05, but at least 2 z).
    clip : the first round's clip C_0 > 0 (public).
    quantile : the targeted fraction gamma of unclipped records (clients), in (0, 1).
    clip_rate : eta_C > 0 of the geometric update.
    theta : the first iterate (d,) (default zeros).
    move : False keeps theta where it is (only the clip is searched; the gradients are still
        released and accounted).
    adapt_clip : False keeps the clip at ``clip`` (the counts are then not needed; they are
        still accounted, conservatively).
    """
    from fedlangevin.privacy.planning import gradient_noise_multiplier
    from fedlangevin.warmup.iterates import public_curvature
    from fedlangevin.privacy.mechanism import ClientLevel, RecordLevel

    if adjacency not in ("record", "client"):
        raise ValueError(f"adjacency must be 'record' or 'client'; got {adjacency!r}")
    rounds = check_int("rounds", rounds, 1)
    z = check_real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    c = check_real("clip", clip, low=0.0, low_open=True)
    gamma = check_real("quantile", quantile, low=0.0, high=1.0, low_open=True, high_open=True)
    rate = check_real("clip_rate", clip_rate, low=0.0, low_open=True)
    d, n = problem.dim, problem.num_clients
    if theta is None:
        x = torch.zeros(d, dtype=torch.float64)
    else:
        if not isinstance(theta, torch.Tensor) or theta.shape != (d,):
            raise ValueError(f"theta must be a tensor of shape ({d},)")
        x = theta.detach().double().cpu().clone()
    weights = problem.weights.double().cpu()
    sizes = getattr(problem, "client_sizes", None)
    if adjacency == "record" and sizes is None:
        raise ValueError("record-level privacy needs the problem's client_sizes")
    denominator = float(sizes.sum()) if adjacency == "record" else float(n)
    if count_noise is None:  # 10 z (1% of the round's privacy), less where the fraction's noise would exceed 0.05
        sb = max(2.0 * z, min(10.0 * z, 0.05 * denominator / math.sqrt(n)))
    else:
        sb = check_real("count_noise", count_noise, low=0.0, low_open=True)
    zg = gradient_noise_multiplier(z, sb)
    prior = prior_curvature(problem)
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    noise_weight = float(n) if adjacency == "record" else float((weights ** 2).sum())
    velocity = torch.zeros(d, dtype=torch.float64)
    clips, fractions, scales, iterates = [], [], [], []
    scale, searched, previous = 1.0, None, None
    for r in range(rounds):
        record = RecordLevel(clip=c) if adjacency == "record" else ClientLevel(clip=c)
        if adjacency == "record":
            sums, counts = _record_round(problem, x, c)
        else:
            sums, counts = _client_round(problem, x, c)
        sums = sums + zg * 2.0 * c * torch.randn(n, d, dtype=torch.float64, generator=gen)
        counts = counts + sb * torch.randn(n, dtype=torch.float64, generator=gen)
        th = x.expand(1, n, d).contiguous()
        prior_grad = (weights[:, None] * problem.prior_grad(th)[0].double().cpu()).sum(0)
        data = sums.sum(0) if adjacency == "record" else (weights[:, None] * sums).sum(0)
        lam = public_curvature(record, weights, sizes) + prior
        force = data + prior_grad
        if move and searched is None:
            signal = _signal(force, (zg * 2.0 * c) ** 2 * noise_weight, c)
            if previous is not None:
                rose = signal[0] - previous[0] > SIGNIFICANCE * math.hypot(signal[1], previous[1])
                if rose or signal[0] < SIGNIFICANCE * signal[1]:  # past the stable range, or lost in the noise
                    searched, scale = r, scale / BACK if rose else max(scale / BACK, 1.0)  # (then no lower than 1)
                else:
                    scale = scale * GROW
            previous = signal
        if prior > 0:  # the prior alone is stable at 1 / its curvature
            scale = min(scale, lam / prior)
        if move and searched is None:  # gradient descent while the step is searched
            x = x - scale * force / lam
        elif move:  # heavy ball at the step found
            velocity = MOMENTUM * velocity + force
            x = x - scale * velocity / lam
        if not torch.all(torch.isfinite(x)):
            raise FloatingPointError(f"the private start diverged in round {r}; give a smaller clip or a proper prior")
        b = float(counts.sum()) / denominator
        clips.append(c)
        fractions.append(b)
        scales.append(scale)
        if adapt_clip:
            c = c * math.exp(-rate * (min(max(b, 0.0), 1.0) - gamma))  # b clamped to [0, 1]: post-processing
        iterates.append(x)
    first = 0 if searched is None else searched
    kept = iterates[first + int((rounds - first) * (1 - KEEP)):]
    start = torch.stack(kept).mean(0) if move else x
    release = Release("start", z, rounds)
    return PrivateStart(start, c, tuple(clips), tuple(fractions), release, zg, sb, tuple(scales), searched)


def _signal(force: torch.Tensor, variance: float, clip: float) -> tuple[float, float]:
    """The step search's statistic (module docstring): |g|^2 less its noise's mean d sigma^2, and its
    standard error sqrt(2 d) sigma^2 + 2 |g| sigma, both in units of C^2 (``variance`` = sigma^2)."""
    d = force.numel()
    energy = float(force @ force) - d * variance
    error = math.sqrt(2.0 * d) * variance + 2.0 * math.sqrt(max(energy, 0.0) * variance)
    return energy / clip ** 2, error / clip ** 2
