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

The server forms the posterior energy's gradient from the uploads and the public prior, takes a
heavy-ball gradient step (momentum 0.9) of the public step size 1 / lambda_r (lambda_r the public curvature
guess :func:`fedlangevin.warmup.iterates.public_curvature` at C_r plus the prior's curvature),
and updates the clip geometrically towards the ``quantile`` gamma of the norms:
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

#: heavy-ball momentum of the noisy gradient descent (post-processing of the released gradients)
MOMENTUM = 0.9


@dataclass(frozen=True)
class PrivateStart:
    """What :func:`private_start` returns: the start ``theta`` (d,), the ``clip`` after the last
    round, the clip and the noisy unclipped fraction of every round, and the ``release`` (its
    rounds as the accountant sees them), with the gradient's and the count's noise."""

    theta: torch.Tensor
    clip: float
    clips: tuple[float, ...]
    fractions: tuple[float, ...]
    release: Release
    gradient_noise: float
    count_noise: float


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
    velocity = torch.zeros(d, dtype=torch.float64)
    clips, fractions, kept = [], [], []
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
        if move:  # heavy ball at the public step 1 / lambda_r (stable: lambda_r bounds the curvature guess)
            velocity = MOMENTUM * velocity + (data + prior_grad)
            x = x - velocity / lam
        if not torch.all(torch.isfinite(x)):
            raise FloatingPointError(f"the private start diverged in round {r}; give a smaller clip or a proper prior")
        b = float(counts.sum()) / denominator
        clips.append(c)
        fractions.append(b)
        if adapt_clip:
            c = c * math.exp(-rate * (min(max(b, 0.0), 1.0) - gamma))  # b clamped to [0, 1]: post-processing
        if r >= rounds // 2:
            kept.append(x)
    start = torch.stack(kept).mean(0) if move else x
    release = Release("start", z, rounds)
    return PrivateStart(start, c, tuple(clips), tuple(fractions), release, zg, sb)
