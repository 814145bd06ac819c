"""Results of an FA-LD run: samples, bookkeeping, and bridges to the diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["Communication", "Trace", "DivergenceError"]


@dataclass(frozen=True)
class Communication:
    """Communication of one federated run (one chain), in messages and floats.

    ``uploads``: client-to-server messages (clients that took part in a synchronisation,
    averaged over chains for random participation); ``floats_up`` = uploads * d;
    ``floats_down`` = N * d per round (the server broadcasts to every client, since all
    clients run local steps from the broadcast model, as in Alg. 1).
    """

    rounds: int
    uploads: float
    floats_up: float
    floats_down: float

    def __add__(self, other: "Communication") -> "Communication":
        return Communication(
            self.rounds + other.rounds,
            self.uploads + other.uploads,
            self.floats_up + other.floats_up,
            self.floats_down + other.floats_down,
        )


@dataclass
class Trace:
    """Draws of an FA-LD run.

    Attributes
    ----------
    samples : tensor (chains, draws, d) on the CPU; one draw is the synchronised global
        model after a round (kept after warm-up, every ``thin`` rounds).
    draw_rounds : int array (draws,), the round (counted from the sampler's start) of each draw.
    draw_steps : int array (draws,), the local-step counter k at each draw.
    step_sizes : float array, eta_k of every local step of this run.
    communication : :class:`Communication` totals of this run (per chain).
    settings : the sampler's settings (for reports and privacy accounting).
    """

    samples: torch.Tensor
    draw_rounds: np.ndarray
    draw_steps: np.ndarray
    step_sizes: np.ndarray
    communication: Communication
    settings: dict[str, Any]
    problem: Any = field(repr=False, default=None)
    var_names: list[str] | None = None

    @property
    def num_chains(self) -> int:
        return int(self.samples.shape[0])

    @property
    def num_draws(self) -> int:
        return int(self.samples.shape[1])

    def numpy(self) -> np.ndarray:
        """Samples as a float64 numpy array (chains, draws, d)."""
        return self.samples.detach().cpu().double().numpy()

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """The problem's exact posterior (mean, cov) at the run's temperature, as numpy."""
        post = None if self.problem is None else self.problem.posterior(self.settings["temperature"])
        if post is None:
            raise ValueError("this problem has no exact posterior; pass mean= and cov= explicitly")
        return post[0].double().cpu().numpy(), post[1].double().cpu().numpy()

    def w2(self, mean: Any = None, cov: Any = None) -> np.ndarray:
        """Fitted-Gaussian W2 (paper Sec. 7.1) of the chains at each draw, shape (draws,).

        At each draw the R chains give R points; their mean and ddof = 1 covariance define
        a Gaussian whose exact W2 to N(mean, cov) is returned (default: the problem's exact
        posterior). Computed for all draws in one batched call.
        """
        from diagnostics import empirical_gaussian_w2

        if mean is None or cov is None:
            mean, cov = self.posterior()
        if self.num_chains < 2:
            raise ValueError("w2 needs at least 2 chains (the paper uses R = 300 replicates)")
        per_draw = np.swapaxes(self.numpy(), 0, 1)  # (draws, R, d)
        return np.atleast_1d(empirical_gaussian_w2(per_draw, mean, cov))

    def w2_floor(self, mean: Any = None, cov: Any = None, repeats: int = 400, seed: int = 0):
        """Finite-R floor of :meth:`w2` for exact draws (see :func:`diagnostics.w2_floor`)."""
        from diagnostics import w2_floor

        if mean is None or cov is None:
            mean, cov = self.posterior()
        return w2_floor(mean, cov, self.num_chains, repeats=repeats, seed=seed)

    def privacy(self, *, delta: float, sensitivity: float, **kwargs: Any):
        """(epsilon, delta) this run spent: tight accountant and the paper's Thm 6.1 / G.3.

        ``sensitivity`` is Delta_l of Assumption G.1; other keywords (delta0/1/2, chains,
        discretization) as :func:`fedlangevin.privacy.trace_privacy`, which documents what is
        counted. Returns a :class:`fedlangevin.privacy.PrivacyReport` (``.summary()`` prints it).
        """
        from fedlangevin.privacy import trace_privacy

        return trace_privacy(self, delta=delta, sensitivity=sensitivity, **kwargs)

    def constrained(self) -> dict[str, np.ndarray] | None:
        """Draws in the model's own space, {name: array (chains, draws, *shape)}, from
        ``problem.constrain`` (e.g. a Pyro model's sites, a positive scale back from its
        log); None when the problem samples theta as is."""
        constrain = getattr(self.problem, "constrain", None)
        return None if constrain is None else constrain(self.samples)

    def to_arviz(self, **kwargs: Any):
        """ArviZ data (chains x draws) via :func:`diagnostics.to_arviz`: the problem's named
        sites in their own space when it has them (:meth:`constrained`), else theta."""
        from diagnostics import to_arviz

        values = self.constrained() if "var_names" not in kwargs else None
        if values is not None:
            columns, names = _named_columns(values)
            return to_arviz(columns, var_names=names, **kwargs)
        kwargs.setdefault("var_names", self.var_names)
        return to_arviz(self.numpy(), **kwargs)


def _named_columns(values: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """{name: (chains, draws, *shape)} -> (chains, draws, D) and labels ``sigma``, ``beta[0]``, ``W[0,1]``."""
    columns, names = [], []
    for name, v in values.items():
        v = np.asarray(v, dtype=np.float64)
        shape = v.shape[2:]
        columns.append(v.reshape(v.shape[0], v.shape[1], -1))
        names += [name] if not shape else [f"{name}[{','.join(map(str, i))}]" for i in np.ndindex(*shape)]
    return np.concatenate(columns, axis=2), names


class DivergenceError(RuntimeError):
    """A run produced non-finite parameters; ``.trace`` keeps every draw made before."""

    def __init__(self, message: str, trace: Trace, chains: list[int], round: int, step: int) -> None:
        super().__init__(message)
        self.trace = trace
        self.chains = chains
        self.round = round
        self.step = step
