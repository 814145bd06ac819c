"""Convergence at large d: R-hat and ESS of random projections and of scalar functionals.

With thousands of parameters (a softmax regression on MNIST has d = 7,850) a table of R-hat
and ESS per coordinate is slow to compute and too long to read. Two summaries that scale:

- :func:`projections` — the draws projected on ``k`` random unit directions (in coordinates
  standardised by their pooled sd, so that no coordinate's scale dominates), and the R-hat
  and ESS of each projection; the worst is what to check. Chains that disagree along many
  coordinates disagree along almost every random direction. A disagreement confined to a few
  of d coordinates is diluted (a unit direction has weight about 1/sqrt(d) on one
  coordinate): :func:`split_rhat` (every coordinate's classic split R-hat in one vectorised
  pass, reported with the projections) catches those, and so do the quantities you care about:
- :func:`functionals` — R-hat and ESS of scalar functionals given per draw, such as the test
  log predictive (the mean over test points of log p(y | x, theta) at each draw), the
  log posterior, or a prediction.

Both use :func:`diagnostics.rhat` and :func:`diagnostics.ess` (rank-normalised split R-hat,
bulk and tail ESS; Vehtari et al. 2021), so the numbers read as they do per coordinate:
R-hat < 1.01 and ESS >= 100 per chain. :func:`projection_summary` gives both as one table in
:func:`diagnostics.summary`'s format.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from diagnostics._arrays import as_numpy
from diagnostics._validation import check_bool, check_int

__all__ = ["Convergence", "functional_summary", "functionals", "projection_summary", "projections", "random_directions", "split_rhat"]


@dataclass(frozen=True)
class Convergence:
    """R-hat and bulk/tail ESS of a few scalar quantities (projections or functionals).

    ``labels`` (k,) names them; ``rhat``, ``ess_bulk``, ``ess_tail`` are arrays (k,);
    ``directions`` (d, k) are the unit directions of :func:`projections` (``None`` for
    functionals); ``draws`` is chains x draws.
    """

    labels: list[str]
    rhat: np.ndarray
    ess_bulk: np.ndarray
    ess_tail: np.ndarray
    draws: int
    directions: np.ndarray | None = None
    coordinate_rhat: np.ndarray | None = None

    @property
    def max_rhat(self) -> float:
        """The largest R-hat (the worst quantity); NaN with one chain."""
        return float(np.max(self.rhat))

    @property
    def min_ess_bulk(self) -> float:
        return float(np.min(self.ess_bulk))

    @property
    def min_ess_tail(self) -> float:
        return float(np.min(self.ess_tail))

    def converged(self, rhat: float = 1.01, ess_per_chain: float = 100.0, chains: int | None = None) -> bool:
        """True when every R-hat is below ``rhat`` and every bulk and tail ESS at least
        ``ess_per_chain`` x ``chains`` (Vehtari et al. 2021's 1.01 and 100 per chain)."""
        need = ess_per_chain * (chains if chains is not None else 1)
        return bool(self.max_rhat < rhat and self.min_ess_bulk >= need and self.min_ess_tail >= need)

    def worst(self) -> str:
        """One line: the largest R-hat and the smallest ESS, with the quantities they belong to
        (and the largest coordinate split R-hat, where computed)."""
        i, j, t = int(np.argmax(self.rhat)), int(np.argmin(self.ess_bulk)), int(np.argmin(self.ess_tail))
        line = (f"max R-hat {self.rhat[i]:.4f} ({self.labels[i]}), min bulk ESS {self.ess_bulk[j]:.0f} "
                f"({self.labels[j]}), min tail ESS {self.ess_tail[t]:.0f} ({self.labels[t]}) of {self.draws} draws")
        if self.coordinate_rhat is not None:
            c = int(np.nanargmax(self.coordinate_rhat)) if np.isfinite(self.coordinate_rhat).any() else 0
            line += f"; max coordinate split R-hat {self.coordinate_rhat[c]:.4f} (theta[{c}])"
        return line


def split_rhat(samples: Any) -> np.ndarray:
    """Classic split R-hat of every coordinate, shape (d,), in one vectorised pass (Gelman et al.,
    *Bayesian Data Analysis*, 3rd ed., eq. 11.4 on chains split in halves; no rank normalisation).

    Cheap at any d (O(chains x draws x d)); it catches chains that disagree in a few coordinates,
    which random projections dilute. Needs >= 4 draws per chain and >= 2 chains (NaN with one);
    a coordinate constant across all draws gets 1.
    """
    x = _draws(samples)
    if x.shape[1] < 4:
        raise ValueError(f"samples have {x.shape[1]} draws per chain; split_rhat needs at least 4")
    n = x.shape[1] // 2
    halves = np.concatenate([x[:, :n], x[:, x.shape[1] - n:]], axis=0)  # (2 chains, n, d)
    if halves.shape[0] < 4:  # one chain: two halves only say nothing about chains
        return np.full(x.shape[2], np.nan)
    w = halves.var(axis=1, ddof=1).mean(axis=0)
    b_over_n = halves.mean(axis=1).var(axis=0, ddof=1)
    var_plus = (n - 1) / n * w + b_over_n
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sqrt(var_plus / w)
    return np.where((w == 0) & (b_over_n == 0), 1.0, np.where(w == 0, np.inf, r))


def random_directions(d: int, k: int, seed: int = 0) -> np.ndarray:
    """``k`` independent directions uniform on the unit sphere of R^d, as columns (d, k)
    (normalised standard Gaussian vectors, numpy's ``default_rng(seed)``)."""
    d = check_int("d", d, 1)
    k = check_int("k", k, 1)
    seed = check_int("seed", seed, 0)
    g = np.random.default_rng(seed).standard_normal((d, k))
    return g / np.linalg.norm(g, axis=0, keepdims=True)


def _draws(samples: Any) -> np.ndarray:
    x = as_numpy(samples, "samples")
    if x.ndim == 2:
        x = x[:, :, None]
    if x.ndim != 3 or min(x.shape) < 1:
        raise ValueError(f"samples must have shape (chains, draws, d) with each at least 1; got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples must be finite; found NaN/inf: drop the diverged draws first")
    return x


def _project(x: np.ndarray, k: int, seed: int, standardize: bool) -> tuple[np.ndarray, np.ndarray]:
    """x (chains, draws, d) -> (projected draws (chains, draws, k), directions (d, k))."""
    u = random_directions(x.shape[2], k, seed)
    if standardize:
        flat = x.reshape(-1, x.shape[2])
        sd = flat.std(axis=0)
        scale = np.where(sd > 0, sd, 1.0)
        z = (x - flat.mean(axis=0)) / scale
    else:
        z = x
    return z @ u, u


def _convergence(y: np.ndarray, labels: list[str], directions: np.ndarray | None) -> Convergence:
    from diagnostics.arviz import ess, rhat

    return Convergence(list(labels), rhat(y), ess(y, method="bulk"), ess(y, method="tail"),
                       int(y.shape[0] * y.shape[1]), directions)


def projections(samples: Any, k: int = 16, seed: int = 0, standardize: bool = True) -> Convergence:
    """R-hat and ESS of the draws projected on ``k`` random unit directions.

    ``samples``: (chains, draws, d) (numpy or torch), finite, >= 4 draws per chain. With
    ``standardize`` (default) each coordinate is first centred and divided by its pooled sd
    (a constant coordinate is left as is), so every coordinate counts alike whatever its
    scale; the directions are :func:`random_directions` (d, k, ``seed``). Costs one
    (chains x draws, d) by (d, k) product and k scalar diagnostics, whatever d is. Returns a
    :class:`Convergence` with labels ``proj[0]`` ... ``proj[k-1]``; check
    ``.max_rhat`` and ``.min_ess_bulk`` / ``.min_ess_tail``, and ``.coordinate_rhat`` (every
    coordinate's classic split R-hat, :func:`split_rhat`) for disagreements in few coordinates.
    """
    k = check_int("k", k, 1)
    seed = check_int("seed", seed, 0)
    standardize = check_bool("standardize", standardize)
    x = _draws(samples)
    y, u = _project(x, k, seed, bool(standardize))
    out = _convergence(y, [f"proj[{i}]" for i in range(k)], u)
    return replace(out, coordinate_rhat=split_rhat(x))


def _functional_values(values: Any) -> tuple[np.ndarray, list[str]]:
    if isinstance(values, Mapping):
        if not values:
            raise ValueError("values must name at least one functional")
        arrays, labels = [], []
        for name, v in values.items():
            v = _draws(v)
            arrays.append(v)
            labels += [str(name)] if v.shape[2] == 1 else [f"{name}[{i}]" for i in range(v.shape[2])]
        shapes = {a.shape[:2] for a in arrays}
        if len(shapes) != 1:
            raise ValueError(f"values must all have the same (chains, draws); got {sorted(shapes)}")
        return np.concatenate(arrays, axis=2), labels
    x = _draws(values)
    return x, ["f"] if x.shape[2] == 1 else [f"f[{i}]" for i in range(x.shape[2])]


def functionals(values: Any) -> Convergence:
    """R-hat and ESS of scalar functionals computed per draw.

    ``values``: (chains, draws) for one functional, (chains, draws, m) for m of them, or a
    mapping {name: such an array}, e.g. ``{"test_lpd": lpd}`` with ``lpd[c, t]`` the mean
    over test points of log p(y_i | x_i, theta_{c,t}). Finite, >= 4 draws per chain. Returns
    a :class:`Convergence` labelled by the names (``f``, ``f[i]`` for an unnamed array).
    """
    x, labels = _functional_values(values)
    return _convergence(x, labels, None)


def functional_summary(values: Any, **summary_kwargs: Any):
    """:func:`diagnostics.summary`'s table of scalar functionals given per draw (``values`` as
    :func:`functionals` takes them), one row per functional, labelled by its name."""
    import pandas as pd

    from diagnostics.arviz import summary

    x, labels = _functional_values(values)
    df = summary(x, **summary_kwargs)
    df.index = pd.Index(labels)
    return df


def projection_summary(samples: Any, k: int = 16, seed: int = 0, functionals: Any = None,
                       standardize: bool = True, **summary_kwargs: Any):
    """:func:`diagnostics.summary`'s table for the ``k`` random projections of
    :func:`projections` (rows ``proj[0]`` ...), plus one row per functional in
    ``functionals`` (as :func:`functionals` takes them, with the samples' chains and draws),
    instead of one row per coordinate. ``df.attrs`` records ``d``, ``k``, ``seed``,
    ``standardize`` and the worst values (``max_r_hat``, ``min_ess_bulk``, ``min_ess_tail``,
    and ``max_coordinate_split_r_hat`` from :func:`split_rhat`). Means and sds of projections
    are in the standardised units. Other keywords go to :func:`diagnostics.summary`."""
    import pandas as pd

    from diagnostics.arviz import summary

    k = check_int("k", k, 1)
    seed = check_int("seed", seed, 0)
    standardize = check_bool("standardize", standardize)
    x = _draws(samples)
    y, _ = _project(x, k, seed, standardize)
    df = summary(y, **summary_kwargs)
    df.index = pd.Index([f"proj[{i}]" for i in range(k)])
    attrs = dict(df.attrs)
    if functionals is not None:
        f = functional_summary(functionals, **summary_kwargs)
        if (f.attrs["chains"], f.attrs["draws"]) != y.shape[:2]:
            raise ValueError(f"functionals must have the samples' (chains, draws) {y.shape[:2]}; "
                             f"got {(f.attrs['chains'], f.attrs['draws'])}")
        df = pd.concat([df, f])
    attrs.update({"d": int(x.shape[2]), "k": k, "seed": seed, "standardize": standardize,
                  "max_r_hat": float(df["r_hat"].max()), "min_ess_bulk": float(df["ess_bulk"].min()),
                  "min_ess_tail": float(df["ess_tail"].min()),
                  "max_coordinate_split_r_hat": float(np.max(split_rhat(x)))})
    df.attrs = attrs
    return df
