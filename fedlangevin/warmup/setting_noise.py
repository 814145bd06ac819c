"""What the samplers' end-of-run setting checks share (:mod:`fedlangevin.fald.setting_noise` for FA-LD,
:mod:`fedlangevin.fahmc.setting_noise` for FA-HMC): the drift's noise at the chains' states under a
participation rule and minibatches (:func:`drift_noise`: V_part and V_mb), the verdict's record
(:class:`SettingNoise`) and its warning.

V_part = Cov_w(sum_c w_c g_c) (the covariance of the rule's weights over its draws, the clients' gradients
with the run's correction term) and V_mb = sum_c E[w_c^2] (n_c / p_c)^2 C_c / b (C_c the covariance of
client c's per-example gradients, centred at theta* under centred minibatches), measured from every
client's full gradient once per chain and up to :data:`ROWS` per-example gradients per client for up to
:data:`MB_CHAINS` chains, at most :data:`PER_EXAMPLE_BYTES` of them.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from fedlangevin.federation.preconditioning import preconditioner_matrix

__all__ = ["MAX_DRAWS", "MIN_KEPT", "ROWS", "TOLERANCE", "SettingNoise", "drift_noise", "preconditioner_diagonal",
           "sd_ratios_from", "warn"]

#: a predicted sd inflation above this share warns (the validation's acceptance is 10 %, of which
#: the discretisation takes 1-4 %)
TOLERANCE = 0.05
#: kept draws a verdict needs (their covariance stands in for the posterior's)
MIN_KEPT = 50
#: the last draws of each chain whose covariance stands in for the posterior's
MAX_DRAWS = 1000
#: per-example gradients per client (and chain) that estimate a client's minibatch noise, the chains whose
#: states they are read at, and the most bytes they take. Why this many: a few records with large
#: gradients can set the noise's largest direction (diamonds' centred minibatches: 64 rows of 8 chains
#: predicted an sd ratio of 1.01 for the two parameters measured at 1.57; all 500 rows of 32 chains, 1.32)
ROWS = 1024
MB_CHAINS = 32
PER_EXAMPLE_BYTES = 1 << 26
#: weight vectors drawn to estimate the covariance of a participation rule's weights
WEIGHT_DRAWS = 4096
#: iterations of the fixed point Sigma = C - X(Sigma) (:func:`sd_ratios_from`)
FIXED_POINT_ITERATIONS = 50


@dataclass(frozen=True)
class SettingNoise:
    """The check's record: ``sd_ratios`` predicted per parameter (None: not measured, ``note`` says
    why), the largest share of the extra variance due to client sampling (``participation``) and to
    minibatches (``minibatch``), and whether the largest ratio exceeds 1 + :data:`TOLERANCE`."""

    measured: bool
    sd_ratios: tuple | None
    participation: float
    minibatch: float
    exceeds: bool
    note: str = ""
    corrected: bool = False  #: the run had a drift correction (the remedy then is not control variates)

    @property
    def max_sd_ratio(self) -> float:
        return max(self.sd_ratios) if self.sd_ratios else math.nan

    def message(self, names) -> str:
        j = int(np.argmax(self.sd_ratios))
        ratio = self.sd_ratios[j]
        size = "more than doubles" if not math.isfinite(ratio) else f"widens by {100 * (ratio - 1):.0f} %"
        source = ("client sampling" if self.participation >= self.minibatch else "minibatch gradients")
        return (f"the setting is off the target: the noise of the averaged drift ({source}; measured at the chains' "
                f"last states) {size} the posterior sd of {names[j]} (predicted sd ratio "
                f"{ratio:.3g}, tolerance {1 + TOLERANCE:g}). " + (
                    "That is what the run's drift correction leaves: use larger minibatches, more clients per round "
                    "or a smaller step size. " if self.corrected else
                    "Control variates remove most of it (correction='control_variates': they centre the clients' "
                    "gradients and minibatches at the mode; the default 'auto' runs them at K = 1 in one process "
                    "without privacy); or use larger minibatches, more clients per round, a smaller step size. ")
                + "See docs/realistic.md")


def _weight_covariance(rule, p: torch.Tensor) -> torch.Tensor:
    """Cov(w) (N, N) float64 of the rule's weights: its closed form
    (:meth:`~fedlangevin.federation.participation.Participation.covariance_weights`; a large S would make
    the draws costly), else estimated from :data:`WEIGHT_DRAWS` draws with a fixed seed (the same
    estimate every call)."""
    try:
        return rule.covariance_weights(p.detach().cpu().to(torch.float64))
    except NotImplementedError:  # a rule of one's own without a closed form
        pass
    w = rule.weights(p.to(torch.float64), WEIGHT_DRAWS, torch.Generator().manual_seed(0)).to(torch.float64)
    if w.dim() == 1:
        return torch.zeros(p.numel(), p.numel(), dtype=torch.float64)
    return torch.cov(w.T)


def drift_noise(problem, theta: torch.Tensor, rule, batch_size: int | None, *, term=None, centre=None,
                generator: torch.Generator | None = None, dense: bool = True, rows: int = ROWS,
                chains: int = MB_CHAINS, budget: int = PER_EXAMPLE_BYTES):
    """(V_part, V_mb) at the chains' states ``theta`` (R, d), float64: (d, d) when ``dense``, else their
    diagonals (d,). ``term``: a correction's term added to every client's gradient ((N, d) or
    (R, N, d)); ``centre``: theta* (d,) whose per-example gradients are subtracted (centred minibatches);
    ``rows``, ``chains``, ``budget``: per-example gradients per client and chain, the chains that draw them
    and the most bytes they take (module docstring)."""
    r, d = theta.shape
    n = problem.num_clients
    # measured on the CPU in float64 whatever device the run is on (a diagnostic after the run)
    p = problem.weights.detach().to(device="cpu", dtype=torch.float64)
    x = theta.detach().to(device="cpu", dtype=torch.float64).unsqueeze(1).expand(r, n, d).contiguous()
    work = problem.to(device="cpu", dtype=torch.float64)
    g = work.grad(x.clone())
    if term is not None:
        g = g + term.detach().to(device="cpu", dtype=torch.float64)
    cov_w = _weight_covariance(rule, p)
    if dense:
        v_part = torch.einsum("ab,rai,rbj->ij", cov_w, g, g) / r
    else:
        v_part = torch.einsum("ab,rai,rbi->i", cov_w, g, g) / r
    v_mb = torch.zeros_like(v_part)
    if batch_size is not None:
        sizes = work.client_sizes.to(torch.float64)
        chains = min(r, chains)  # a few chains' states: the per-example gradients stay within the budget
        rows_n = min(rows, int(sizes.min()), max(2, budget // (8 * chains * n * d)))
        u = torch.rand(chains, n, rows_n, generator=generator, dtype=torch.float64)
        rows = (u * sizes[None, :, None]).long().minimum(sizes.long()[None, :, None] - 1)
        per = work._per_example_grads(x[:chains], rows)  # (chains, N, B, d)
        if centre is not None:
            star = centre.detach().to(device="cpu", dtype=torch.float64).expand(chains, n, d).contiguous()
            per = per - work._per_example_grads(star, rows)
        dev = per - per.mean(2, keepdim=True)
        scale = rule.mean_square_weights(p) * (sizes / p) ** 2 / (batch_size * max(rows_n - 1, 1))  # (N,)
        if dense:
            v_mb = torch.einsum("n,rnbi,rnbj->ij", scale, dev, dev) / chains
        else:
            v_mb = torch.einsum("n,rnbi->i", scale, dev * dev) / chains
    return v_part, v_mb


def warn(record: SettingNoise | None, names) -> None:
    """The run's warning where the record exceeds the tolerance."""
    if record is not None and record.measured and record.exceeds:
        warnings.warn(record.message(names), UserWarning, stacklevel=4)


def sd_ratios_from(observed: np.ndarray, excess) -> np.ndarray:
    """Predicted sd ratios sqrt(C_jj / Sigma_jj) (d,) from the kept draws' covariance C = ``observed`` (d, d),
    which holds the excess too: Sigma solves the fixed point Sigma = C - X(Sigma), with ``excess`` the
    sampler's linearised excess covariance Sigma -> X(Sigma); inf where no target covariance is left."""
    d = observed.shape[0]
    target = observed
    for _ in range(FIXED_POINT_ITERATIONS):
        x = excess(target)
        # X is homogeneous of degree 1 in Sigma: Sigma = (I + X Sigma^-1)^-1 C is exact where X Sigma^-1 is
        # a multiple of I (one step), and converges to the fixed point Sigma = C - X(Sigma) near it
        nxt = np.linalg.solve(np.eye(d) + x @ np.linalg.inv(target), observed)
        nxt = 0.5 * (nxt + nxt.T)
        if not np.isfinite(nxt).all() or np.linalg.eigvalsh(nxt).min() <= 0:  # no target covariance is left
            return np.full(d, np.inf)
        if np.allclose(nxt, target, rtol=1e-6, atol=0):
            target = nxt
            break
        target = nxt
    return np.sqrt(np.diag(observed) / np.diag(target))


def preconditioner_diagonal(preconditioner, d: int) -> np.ndarray:
    """M's diagonal (d,) float64: ones for None (I), a diagonal M's own, else the dense matrix's diagonal."""
    if preconditioner is None:
        return np.ones(d)
    diagonal = getattr(preconditioner, "diagonal", None)
    if diagonal is not None:
        return torch.as_tensor(diagonal).to(torch.float64).cpu().numpy()
    return np.diag(preconditioner_matrix(preconditioner, d).numpy())
