"""The private gradient's parts shared by every problem: clipping, fixed-size minibatches drawn
without replacement, and the clipped sum of per-example gradients in bounded memory.

:meth:`fedlangevin.problems.FederatedProblem.private_grad` puts them together (its docstring
says what is clipped and the sensitivity of what it returns); a problem supplies its
per-example gradients (``_per_example_grads``), the prior's gradient (``prior_grad``) and,
where it has a faster way, the (clipped) sum (``_nll_grad``).

Sampling (what the accountant assumes, :mod:`fedlangevin.privacy.accountant`, Assumption G.2):
each client's minibatch is b distinct rows, a uniformly random b-subset of its n_c rows, drawn
independently per chain, per client and per call. Vectorised: one uniform per row of the
padded (R, N, n_max) layout, padding rows set to 2 (above every uniform), and the b smallest
kept (``topk``); the ranks of i.i.d. uniforms are a uniformly random permutation, so the b
smallest are a uniformly random b-subset. Costs n_max uniforms per chain and client, where a
draw with replacement costs b.
"""

from __future__ import annotations

import torch

__all__ = ["check_rows", "clip_norms", "rows_without_replacement", "safe_norm", "summed_per_example"]

#: entries of the per-example gradients (chains x clients x rows x d) materialised at once by the
#: generic clipped sum (64 MiB in float64); larger batches are summed in chunks of rows
MAX_ELEMENTS = 2**23


def _scaled(g: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, g / m) with m = max |g_i| along ``dim`` (kept), 1 where that is 0 or not finite: the
    entries of g / m are in [-1, 1], so their squares neither overflow nor (for the largest) underflow."""
    top = g.abs().amax(dim=dim, keepdim=True)
    top = torch.where((top > 0) & torch.isfinite(top), top, torch.ones_like(top))
    return top, g / top


def safe_norm(g: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """||g|| along ``dim`` (kept) without overflow or underflow in the squares (``torch.linalg.vector_norm``
    squares the entries: a finite vector of norm above ~1.3e154 gets inf): max|g_i| ||g / max|g_i|||.
    Inf only where the norm itself exceeds the float range; NaN for a NaN entry."""
    top, unit = _scaled(g, dim)
    return top * torch.linalg.vector_norm(unit, dim=dim, keepdim=True)


def clip_norms(g: torch.Tensor, clip: float) -> torch.Tensor:
    """clip_C(g) = g min(1, C / ||g||) along the last axis: every vector of norm at most C (to
    rounding, a few units in the last place), vectors already within C unchanged. Any finite vector
    is clipped (its norm is computed on g / max|g_i|, and a vector over C is returned as
    (g / max|g_i|) C / ||g / max|g_i|||: no overflow); a non-finite one stays non-finite."""
    top, unit = _scaled(g)
    unit_norm = torch.linalg.vector_norm(unit, dim=-1, keepdim=True)
    over = top * unit_norm > clip  # False for a NaN norm: g (NaN) returned as it is
    return torch.where(over, unit * (clip / unit_norm), g)


def rows_without_replacement(sizes: torch.Tensor, chains: int, batch_size: int, generator, device, *,
                             width: int | None = None, draw_clients: int | None = None,
                             held: torch.Tensor | None = None) -> torch.Tensor:
    """Row indices (R, N, b): for every chain and client, b distinct rows of that client's n_c
    (``sizes`` (N,), each >= b), a uniformly random b-subset (see the module docstring).

    ``width``: the padded row count the uniforms are drawn for (default max n_c). A restriction
    to some clients draws what the whole problem draws: the uniforms for all ``draw_clients``
    clients of the federation, of which the columns ``held`` are kept.
    """
    sizes = sizes.to(device)
    width = int(sizes.max()) if width is None else int(width)
    count = sizes.numel() if draw_clients is None else int(draw_clients)
    u = torch.rand(chains, count, width, generator=generator, device=device, dtype=torch.float64)
    if held is not None:
        u = u.index_select(1, held.to(device))
    padding = torch.arange(width, device=device)[None, :] >= sizes[:, None]
    u.masked_fill_(padding.unsqueeze(0), 2.0)
    return u.topk(batch_size, dim=-1, largest=False, sorted=False).indices


def summed_per_example(per_example, theta: torch.Tensor, sizes: torch.Tensor, rows: torch.Tensor | None,
                       clip: float | None) -> torch.Tensor:
    """sum_i clip_C(g_i) over each client's rows (R, N, d), unscaled; ``clip`` None: sum_i g_i.

    ``per_example(theta (R, N, d), idx (R, N, B))`` gives the per-example gradients g_i of the
    negative log-likelihood at the rows ``idx`` of each client, (R, N, B, d). ``rows`` (R, N, b)
    or None: every row of each client (n_c of them; the padded layout's extra positions point
    at the client's last row and are masked out). Computed in chunks of rows so that at most
    :data:`MAX_ELEMENTS` gradient entries exist at once.
    """
    r, n, d = theta.shape
    if rows is None:
        sizes = sizes.to(theta.device)
        positions = torch.arange(int(sizes.max()), device=theta.device)
        total = positions.numel()
    else:
        total = rows.shape[2]
    chunk = max(1, MAX_ELEMENTS // max(1, r * n * d))
    out = theta.new_zeros(r, n, d)
    for start in range(0, total, chunk):
        if rows is None:
            pos = positions[start:start + chunk]
            idx = torch.minimum(pos[None, :], sizes[:, None] - 1).expand(r, -1, -1)
            keep = (pos[None, :] < sizes[:, None]).to(theta.dtype)[None, :, :, None]
        else:
            idx, keep = rows[:, :, start:start + chunk], None
        g = per_example(theta, idx)
        if clip is not None:
            g = clip_norms(g, clip)
        if keep is not None:
            g = g * keep
        out += g.sum(2)
    return out


def check_rows(rows, chains: int, sizes: torch.Tensor | None) -> torch.Tensor:
    """``rows`` as an int64 tensor (R, N, B) of row indices in [0, n_c) for client c; else a
    ValueError naming ``rows`` and the allowed range."""
    if sizes is None:
        raise ValueError("rows: this problem has no per-client data rows")
    if not isinstance(rows, torch.Tensor) or rows.is_floating_point() or rows.is_complex() or rows.dtype == torch.bool:
        raise ValueError(f"rows must be an integer tensor of row indices, shape ({chains}, {sizes.numel()}, B); "
                         f"got {type(rows).__name__ if not isinstance(rows, torch.Tensor) else rows.dtype}")
    if rows.dim() != 3 or rows.shape[0] != chains or rows.shape[1] != sizes.numel():
        raise ValueError(f"rows must have shape ({chains}, {sizes.numel()}, B); got {tuple(rows.shape)}")
    rows = rows.long()
    if rows.numel() and (bool((rows < 0).any()) or bool((rows >= sizes.to(rows.device)[None, :, None]).any())):
        raise ValueError(f"rows must hold row indices in [0, n_c) for client c (n_c = {sizes.tolist()})")
    return rows
