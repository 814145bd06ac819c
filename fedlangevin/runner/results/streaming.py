"""Streaming statistics of a run's draws: running mean and covariance, W2 to a known target.

For runs whose draws are not wanted (or too many to keep), ``FALD.run(..., stats=True)``
updates these in O(d^2) memory per draw, on the run's device:

- :class:`RunningMoments`: mean and covariance of every kept draw of every chain, merged a
  batch at a time with the pairwise update of Chan, Golub & LeVeque (1979) — numerically
  stable where the textbook sum of squares is not.
- :class:`GaussianW2`: the exact 2-Wasserstein distance between a Gaussian N(m, C) and a
  fixed target N(m*, C*) (Givens & Shortt, 1984),
  ``W2^2 = |m - m*|^2 + tr C + tr C* - 2 tr (C*^{1/2} C C*^{1/2})^{1/2}``, batched.
- :class:`StreamingStats`: what the runner keeps per run: the running moments, and with a
  target the paper's Sec. 7.1 measure at every draw — the W2 of the Gaussian fitted to the R
  chains (mean, ddof = 1 covariance) — computed a block of draws at a time so that only one
  float per draw is kept. It equals :meth:`Trace.w2` on the same draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["RunningMoments", "GaussianW2", "StreamingStats", "RunStatistics"]


class RunningMoments:
    """Running mean and covariance of a stream of d-vectors (float64), fed in batches."""

    def __init__(self, dim: int, device: Any = None) -> None:
        self.count = 0
        self.mean = torch.zeros(dim, dtype=torch.float64, device=device)
        self.m2 = torch.zeros(dim, dim, dtype=torch.float64, device=device)  # sum of outer products of deviations

    def update(self, x: torch.Tensor) -> None:
        """Merge the rows of ``x`` (b, d) into the running moments."""
        b = x.shape[0]
        if b == 0:
            return
        x = x.to(torch.float64)
        batch_mean = x.mean(0)
        dev = x - batch_mean
        batch_m2 = dev.T @ dev
        n = self.count
        total = n + b
        delta = batch_mean - self.mean
        self.mean += delta * (b / total)
        self.m2 += batch_m2 + torch.outer(delta, delta) * (n * b / total)
        self.count = total

    def covariance(self, ddof: int = 1) -> torch.Tensor:
        if self.count - ddof <= 0:
            raise ValueError(f"a covariance with ddof={ddof} needs more than {ddof} vectors; have {self.count}")
        cov = self.m2 / (self.count - ddof)
        return 0.5 * (cov + cov.T)

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean.cpu(), "m2": self.m2.cpu()}

    def load_state_dict(self, state: dict) -> None:
        self.count = int(state["count"])
        self.mean = state["mean"].to(self.mean)
        self.m2 = state["m2"].to(self.m2)


def _psd_sqrt(c: torch.Tensor) -> torch.Tensor:
    w, v = torch.linalg.eigh(0.5 * (c + c.transpose(-1, -2)))
    return (v * w.clamp_min(0).sqrt().unsqueeze(-2)) @ v.transpose(-1, -2)


class GaussianW2:
    """Exact W2 from N(m, C) (batched) to the fixed target N(mean, cov); float64."""

    def __init__(self, mean: Any, cov: Any, device: Any = None) -> None:
        self.mean = torch.as_tensor(mean, dtype=torch.float64).to(device)
        self.cov = torch.as_tensor(cov, dtype=torch.float64).to(device)
        self.root = _psd_sqrt(self.cov)
        self.trace = float(torch.diagonal(self.cov).sum())

    def __call__(self, means: torch.Tensor, covs: torch.Tensor) -> torch.Tensor:
        """W2 for means (..., d) and covariances (..., d, d)."""
        means, covs = means.to(self.mean), covs.to(self.mean)
        inner = self.root @ covs @ self.root
        inner = 0.5 * (inner + inner.transpose(-1, -2))
        cross = torch.linalg.eigvalsh(inner).clamp_min(0).sqrt().sum(-1)
        diff = means - self.mean
        w2sq = (diff * diff).sum(-1) + torch.diagonal(covs, dim1=-2, dim2=-1).sum(-1) + self.trace - 2.0 * cross
        return w2sq.clamp_min(0).sqrt()


@dataclass(frozen=True)
class RunStatistics:
    """Streaming statistics of a run's kept draws (``trace.stats``).

    Attributes
    ----------
    count : vectors merged into the moments (draws x chains alive at each draw).
    draws : draws seen.
    mean, cov : running mean (d,) and ddof = 1 covariance (d, d) over every kept draw of
        every chain (a time-and-chain average: a posterior estimate once the chains mix).
    w2 : with a target and at least 2 chains, the fitted-Gaussian W2 across chains at each
        draw (draws,), the paper's Sec. 7.1 measure; else ``None``.
    w2_rounds : the round of each entry of ``w2``.
    target : (mean, cov) of the target, or ``None``.
    """

    count: int
    draws: int
    mean: np.ndarray
    cov: np.ndarray | None
    w2: np.ndarray | None
    w2_rounds: np.ndarray | None
    target: tuple[np.ndarray, np.ndarray] | None

    def w2_pooled(self) -> float:
        """W2 between N(mean, cov) of the pooled draws and the target."""
        if self.target is None:
            raise ValueError("these statistics have no target; run with target=(mean, cov) or target='posterior'")
        if self.cov is None:
            raise ValueError("the pooled covariance needs at least 2 vectors")
        w = GaussianW2(*self.target)
        return float(w(torch.as_tensor(self.mean), torch.as_tensor(self.cov)))


class StreamingStats:
    """Running moments and per-draw cross-chain W2 of a run, updated one draw at a time.

    ``block``: per-draw means and covariances wait on the device in blocks of this many
    draws, then their W2 is computed in one batched call (one float per draw is kept).
    """

    def __init__(self, dim: int, target: tuple[Any, Any] | None = None, device: Any = None, block: int = 256) -> None:
        self.dim = dim
        self.device = device
        self.moments = RunningMoments(dim, device)
        self.draws = 0
        self.target = None if target is None else (np.asarray(target[0], np.float64), np.asarray(target[1], np.float64))
        self._w2 = None if target is None else GaussianW2(self.target[0], self.target[1], device)
        self.block = block
        self._means: list[torch.Tensor] = []
        self._covs: list[torch.Tensor] = []
        self._rounds: list[int] = []
        self.w2_values: list[np.ndarray] = []
        self.w2_rounds: list[np.ndarray] = []

    def update(self, theta: torch.Tensor, round: int) -> None:
        """Merge one draw: theta (chains alive, d)."""
        self.moments.update(theta)
        self.draws += 1
        if self._w2 is not None and theta.shape[0] >= 2:
            x = theta.to(torch.float64)
            m = x.mean(0)
            dev = x - m
            self._means.append(m)
            self._covs.append(dev.T @ dev / (x.shape[0] - 1))
            self._rounds.append(round)
            if len(self._means) >= self.block:
                self.flush()

    def flush(self) -> None:
        """Compute the W2 of the waiting draws."""
        if not self._means:
            return
        w2 = self._w2(torch.stack(self._means), torch.stack(self._covs))
        self.w2_values.append(w2.cpu().numpy())
        self.w2_rounds.append(np.asarray(self._rounds, dtype=np.int64))
        self._means, self._covs, self._rounds = [], [], []

    def result(self) -> RunStatistics:
        self.flush()
        m = self.moments
        with_w2 = self._w2 is not None
        return RunStatistics(
            count=m.count,
            draws=self.draws,
            mean=m.mean.cpu().numpy().copy(),
            cov=m.covariance().cpu().numpy() if m.count >= 2 else None,
            w2=np.concatenate(self.w2_values) if with_w2 and self.w2_values else (np.zeros(0) if with_w2 else None),
            w2_rounds=np.concatenate(self.w2_rounds) if with_w2 and self.w2_rounds else (np.zeros(0, np.int64) if with_w2 else None),
            target=self.target,
        )

    def state_dict(self) -> dict:
        self.flush()
        return {
            "moments": self.moments.state_dict(),
            "draws": self.draws,
            "w2": torch.from_numpy(np.concatenate(self.w2_values)) if self.w2_values else torch.zeros(0, dtype=torch.float64),
            "w2_rounds": torch.from_numpy(np.concatenate(self.w2_rounds)) if self.w2_rounds else torch.zeros(0, dtype=torch.int64),
        }

    def load_state_dict(self, state: dict) -> None:
        self.moments.load_state_dict(state["moments"])
        self.draws = int(state["draws"])
        w2, rounds = state["w2"].numpy().copy(), state["w2_rounds"].numpy().copy()
        self.w2_values = [w2] if w2.size else []
        self.w2_rounds = [rounds] if rounds.size else []
