"""The validation of a sampler on a posteriordb posterior (:mod:`fedlangevin.experiments.posteriordb`):
what a run sets besides the defaults (:class:`Recipe`), one posterior's row of the validation table
(:class:`ValidationRow`: mean errors and sd ratios in reference sds, W2, bulk ESS), FA-LD's run
(:func:`validate`) and any sampler's draws against the reference (:func:`compare`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fedlangevin.experiments.posteriordb import Posterior

__all__ = ["RECIPES", "Recipe", "ValidationRow", "compare", "validate"]


@dataclass(frozen=True)
class Recipe:
    """What a validation run sets besides the defaults: ``correction`` (``FALD(correction=)``,
    ``docs/drift.md``; default ``"auto"``, the sampler's) and ``correlation`` (rho of eq. 14); ``label`` names it in the table.

    ``RECIPES["defaults"]`` is FA-LD as a user gets it. ``RECIPES["corrected"]`` adds control
    variates and shared noise (rho = 1), what K > 1 needs on these posteriors (docs/validation.md:
    the local steps drift towards each client's own mode, and with rho < 1 each client's private
    noise, sqrt(1 / p_c) times the global one, spreads the local states where the gradients are
    nonlinear). Both corrections release what the noise does not cover: such a run has no privacy
    accounting.
    """

    label: str = "FA-LD"
    correction: str | None = "auto"
    correlation: float = 0.0
    participation: Any = None
    batch_fraction: float | None = None

    def batch_size(self, problem) -> int | None:
        """``FALD(batch_size=)`` of this recipe on ``problem``: ``batch_fraction`` of the smallest
        client's records (at least 5, at most that client's), ``None`` for full gradients."""
        if self.batch_fraction is None:
            return None
        sizes = getattr(problem, "client_sizes", None)
        smallest = int(min(sizes)) if sizes is not None else 5
        return max(1, min(smallest, max(5, round(self.batch_fraction * smallest))))


RECIPES = {"defaults": Recipe(), "corrected": Recipe("FA-LD+CV rho=1", "control_variates", 1.0)}


@dataclass(frozen=True)
class ValidationRow:
    """One posterior's result (see the module docstring); ``mc_error``: the Monte Carlo standard
    error of our means in reference sd units, 1 / sqrt(min bulk ESS)."""

    name: str
    local_steps: int
    rounds: int
    max_mean_error: float
    min_sd_ratio: float
    max_sd_ratio: float
    w2_relative: float
    min_ess_bulk: float
    ess_per_second: float
    seconds: float
    mc_error: float
    step_size: float
    map_rounds: int

    HEADER = ("| posterior | sampler | K | max mean err / sd | sd ratio min-max | W2 / sqrt(tr) | min bulk ESS | "
              "ESS/s | time s | MC err | passes |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def markdown(self, sampler: str = "FA-LD") -> str:
        """One row of the validation table (``HEADER``); its last cell says whether the run meets
        the acceptance (:meth:`passes`)."""
        flag = "" if self.passes() else " (fails)"
        k = self.local_steps if sampler.startswith("FA-LD") else "-"
        return (f"| {self.name} | {sampler} | {k} | {self.max_mean_error:.3f}{flag} | {self.min_sd_ratio:.3f}-"
                f"{self.max_sd_ratio:.3f} | {self.w2_relative:.3f} | {self.min_ess_bulk:.0f} | "
                f"{self.ess_per_second:.1f} | {self.seconds:.1f} | {self.mc_error:.3f} | {'yes' if self.passes() else 'no'} |")

    def passes(self) -> bool:
        """The acceptance of the validation: means within 0.1 sd, sds within 10%."""
        return self.max_mean_error <= 0.1 and 0.9 <= self.min_sd_ratio and self.max_sd_ratio <= 1.1


def validate(post: Posterior, *, local_steps: int = 1, rounds: int = 2000, chains: int = 32, seed: int = 0,
             thin: int = 1, recipe: Recipe = RECIPES["defaults"]) -> ValidationRow:
    """Run FA-LD with the defaults (``step_size="auto"``, warm-up ``rounds // 2``,
    ``init="map"``) and what ``recipe`` adds on ``post`` and compare with its reference."""
    import fedlangevin as fl

    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe must be a Recipe, e.g. RECIPES['corrected'] (one of {', '.join(RECIPES)}); got {recipe!r}")
    start = time.perf_counter()
    sampler = fl.FALD(post.problem, local_steps=local_steps, chains=chains, seed=seed, init="map",
                      correction=recipe.correction, correlation=recipe.correlation,
                      participation=recipe.participation, batch_size=recipe.batch_size(post.problem))
    trace = sampler.run(rounds, thin=thin, progress=False)
    seconds = time.perf_counter() - start
    return compare(post, np.asarray(trace.numpy()), seconds, local_steps=local_steps, rounds=rounds,
                   step_size=float(sampler.schedule(sampler.state.step)), map_rounds=int(sampler.map_result.rounds))


def compare(post: Posterior, theta: np.ndarray, seconds: float, *, local_steps: int = 0, rounds: int = 0,
            step_size: float = math.nan, map_rounds: int = 0) -> ValidationRow:
    """The validation row of draws ``theta`` (chains, draws, d) in ``post``'s unconstrained space
    (any sampler's) made in ``seconds``, against the reference."""
    import diagnostics as dg

    ours = post.constrain(theta)
    ref = post.reference
    mean_ref, sd_ref = ref.mean(0), ref.std(0, ddof=1)
    flat = ours.reshape(-1, ours.shape[-1])
    mean_err = np.abs(flat.mean(0) - mean_ref) / sd_ref
    sd_ratio = flat.std(0, ddof=1) / sd_ref
    ess = np.asarray(dg.ess(ours), dtype=np.float64)
    ref_u = post.unconstrain(ref)
    ours_u = theta.reshape(-1, theta.shape[-1])
    c_ref = np.cov(ref_u.T)
    w2 = float(dg.gaussian_w2(ours_u.mean(0), np.cov(ours_u.T), ref_u.mean(0), c_ref)) / math.sqrt(float(np.trace(c_ref)))
    return ValidationRow(
        name=post.name, local_steps=local_steps, rounds=rounds, max_mean_error=float(mean_err.max()),
        min_sd_ratio=float(sd_ratio.min()), max_sd_ratio=float(sd_ratio.max()), w2_relative=w2,
        min_ess_bulk=float(ess.min()), ess_per_second=float(ess.min() / seconds), seconds=seconds,
        mc_error=float(1 / math.sqrt(max(ess.min(), 1.0))), step_size=step_size, map_rounds=map_rounds,
    )
