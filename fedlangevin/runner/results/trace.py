"""Results of an FA-LD run: samples, bookkeeping, and bridges to the diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from numpy.lib.mixins import NDArrayOperatorsMixin

__all__ = ["Communication", "Trace", "DivergenceError", "StepSizes", "SUMMARY_LIMIT"]

#: above this many parameters :meth:`Trace.summary` reports random projections, not one row per parameter
SUMMARY_LIMIT = 100


@dataclass(frozen=True)
class Communication:
    """Communication of one federated run (one chain), in messages and floats.

    ``uploads``: client-to-server messages (clients that took part in a synchronisation,
    averaged over chains for random participation); ``floats_up`` = uploads * d;
    ``floats_down`` = N * d per round (the server broadcasts to every client, since all
    clients run local steps from the broadcast model, as in Alg. 1). With an upload codec
    (``FALD(..., upload=...)``) ``floats_up`` still counts entries, d per upload, not their
    encoded size: bits sent = ``uploads * codec.bits(d)`` for
    :class:`~fedlangevin.compression.QuantizedUpdateUpload`.
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


class StepSizes(NDArrayOperatorsMixin):
    """eta_k of the local steps k = start, ..., start + count - 1 of a run, as an array.

    Computed from the step-size schedule when read, so that a run of any length keeps O(1)
    memory for its step sizes (schedules are pure functions of k). Behaves as a read-only
    float64 numpy array: ``np.asarray``, indexing, ``len``, arithmetic and array methods
    (``.max()``, ``.sum()``, ...) work; the values are materialised on first use.
    """

    def __init__(self, schedule: Callable[[int], float], start: int, count: int) -> None:
        self.schedule = schedule
        self.start = int(start)
        self.count = int(count)
        self._values: np.ndarray | None = None

    def _array(self) -> np.ndarray:
        if self._values is None:
            values = np.fromiter((float(self.schedule(k)) for k in range(self.start, self.start + self.count)),
                                 dtype=np.float64, count=self.count)
            values.flags.writeable = False
            self._values = values
        return self._values

    def __array__(self, dtype=None, copy=None):
        a = self._array()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(x._array() if isinstance(x, StepSizes) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            i = int(index) + (self.count if index < 0 else 0)
            if not 0 <= i < self.count:
                raise IndexError(f"step index {index} out of range for {self.count} steps")
            return float(self.schedule(self.start + i))
        return self._array()[index]

    def __iter__(self):
        return (float(self.schedule(k)) for k in range(self.start, self.start + self.count))

    shape = property(lambda self: (self.count,))
    ndim = property(lambda self: 1)
    size = property(lambda self: self.count)
    dtype = property(lambda self: np.dtype(np.float64))

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("schedule", "start", "count"):
            raise AttributeError(name)
        return getattr(self._array(), name)

    def __repr__(self) -> str:
        return f"StepSizes(steps {self.start}..{self.start + self.count - 1} of {self.schedule!r})"


@dataclass
class Trace:
    """Draws of an FA-LD run.

    Attributes
    ----------
    samples : tensor (chains, draws, d) on the CPU; one draw is the synchronised global
        model after a round (kept after warm-up, every ``thin`` rounds). With an on-disk
        store (``run(store=...)``) it is a memory-mapped view of the store's file: values
        are read from disk when touched. Chains dropped after a divergence
        (``on_divergence="drop"``) are not in it: see ``chain_ids`` and ``dropped``.
    draw_rounds : int array (draws,), the round (counted from the sampler's start) of each draw.
    draw_steps : int array (draws,), the local-step counter k at each draw.
    step_sizes : eta_k of every local step of this run (a float64 array-like, see
        :class:`StepSizes`).
    communication : :class:`Communication` totals of this run (per chain).
    settings : the sampler's settings (for reports and privacy accounting).
    chain_ids : int array, the sampler's index (0..chains-1) of each chain on the chain axis
        of ``samples``; ``None`` means 0..chains-1.
    dropped : {chain index: (round, local step)} of the chains dropped in this run because
        their parameters became non-finite (``on_divergence="drop"``).
    stats : :class:`~fedlangevin.runner.results.streaming.RunStatistics` when the run kept streaming
        statistics (``run(stats=True)`` or ``target=``), else ``None``.
    store : path of the run's on-disk sample store, or ``None``.
    ledger : the sampler's cumulative counters after this run (every run and resume since
        it was created): local ``steps``, ``rounds``, ``eta_sum``, ``eta_max``,
        ``uploads`` — what privacy accounting of the whole history needs.
    local_step_bias : what the warm-up measured of the local-step bias (K against K = 1,
        ``local_steps="auto"``'s choice and evidence, a fixed K's verdict):
        :class:`~fedlangevin.warmup.local_steps.LocalStepBias`, or ``None`` where nothing was
        measured; also in :meth:`to_arviz`'s attributes.
    """

    samples: torch.Tensor
    draw_rounds: np.ndarray
    draw_steps: np.ndarray
    step_sizes: Any
    communication: Communication
    settings: dict[str, Any]
    problem: Any = field(repr=False, default=None)
    var_names: list[str] | None = None
    chain_ids: np.ndarray | None = None
    dropped: dict[int, tuple[int, int]] = field(default_factory=dict)
    stats: Any = None
    store: str | None = None
    ledger: dict[str, Any] = field(default_factory=dict)
    local_step_bias: Any = None

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
        if self.num_draws == 0:
            raise ValueError("this trace holds no draws (keep_samples=False?); streaming W2 is in trace.stats.w2")
        per_draw = np.swapaxes(self.numpy(), 0, 1)  # (draws, R, d)
        return np.atleast_1d(empirical_gaussian_w2(per_draw, mean, cov))

    def w2_floor(self, mean: Any = None, cov: Any = None, repeats: int = 400, seed: int = 0):
        """Finite-R floor of :meth:`w2` for exact draws (see :func:`diagnostics.w2_floor`)."""
        from diagnostics import w2_floor

        if mean is None or cov is None:
            mean, cov = self.posterior()
        return w2_floor(mean, cov, self.num_chains, repeats=repeats, seed=seed)

    def privacy(self, *, delta: float, sensitivity: float | None = None, **kwargs: Any):
        """(epsilon, delta) the sampler's chains spent by the end of this run: every round they ever
        released (earlier runs, the checkpoints it resumed, chains dropped after a divergence), under
        the tight accountant and the paper's Thm 6.1 / G.3.

        A private run (``FALD(..., privacy=RecordLevel(clip=C))`` or ``ClientLevel(clip=C)``)
        derives the sensitivity from its clip (2C; accounted at record or client level, its
        warm-up rounds included) and refuses one given here; a run without ``privacy=`` clips nothing, so
        ``sensitivity`` (Delta_l of Assumption G.1) is an assumption the report says is not
        enforced; other keywords (delta0/1/2, chains,
        discretization) as :func:`fedlangevin.privacy.trace_privacy`, which documents what is
        counted. A private FA-HMC run (``FAHMC(..., splitting="OBABO", privacy=...)``) is accounted as
        FA-LD's mechanism at its equivalent step size (:mod:`fedlangevin.privacy.hmc`); an FA-HMC run
        without ``privacy=`` is refused. Returns a :class:`fedlangevin.privacy.PrivacyReport`
        (``.summary()`` prints it).
        """
        from fedlangevin.privacy.report import trace_privacy

        return trace_privacy(self, delta=delta, sensitivity=sensitivity, **kwargs)

    def constrained(self) -> dict[str, np.ndarray] | None:
        """Draws in the model's own space, {name: array (chains, draws, *shape)}, from
        ``problem.constrain`` (e.g. a Pyro model's sites, a positive scale back from its
        log); None when the problem samples theta as is."""
        constrain = getattr(self.problem, "constrain", None)
        return None if constrain is None else constrain(self.samples)

    def summary(self, per_coordinate: bool | None = None, *, k: int = 16, seed: int = 0,
                functionals: Any = None, **kwargs: Any):
        """Convergence table of the draws (a ``pandas.DataFrame``), sized for any d.

        Up to :data:`SUMMARY_LIMIT` (100) parameters, or with ``per_coordinate=True``: one row
        per parameter, :func:`diagnostics.summary` of :meth:`to_arviz`. Above it (or with
        ``per_coordinate=False``): one row per random projection, :func:`diagnostics.projection_summary`
        (``k`` unit directions in standardised coordinates, ``seed``), whose ``attrs`` hold the
        worst R-hat and ESS and every coordinate's largest classic split R-hat. ``functionals``
        ({name: (chains, draws) values per draw}, e.g. the test log predictive) add one row
        each in both forms. Other keywords go to :func:`diagnostics.summary`.
        """
        import diagnostics as dg

        if per_coordinate not in (None, True, False):
            raise ValueError(f"per_coordinate must be None (automatic), True or False; got {per_coordinate!r}")
        if self.num_draws == 0:
            raise ValueError("this trace holds no draws (keep_samples=False?); nothing to summarise")
        d = int(self.samples.shape[2])
        if per_coordinate is None:
            per_coordinate = d <= SUMMARY_LIMIT
        if not per_coordinate:
            return dg.projection_summary(self.numpy(), k=k, seed=seed, functionals=functionals, **kwargs)
        table = dg.summary(self, **kwargs)
        if functionals is None:
            return table
        import pandas as pd

        out = pd.concat([table, dg.functional_summary(functionals, **kwargs)])
        out.attrs = dict(table.attrs)
        return out

    def to_arviz(self, **kwargs: Any):
        """ArviZ data (chains x draws) via :func:`diagnostics.to_arviz`: the problem's named
        sites in their own space when it has them (:meth:`constrained`), else theta. The
        posterior group's attributes hold ``local_steps`` (K after the warm-up) and, where the
        warm-up measured it, ``local_step_bias`` (:attr:`local_step_bias`'s record as JSON)."""
        from diagnostics import to_arviz

        values = self.constrained() if "var_names" not in kwargs else None
        if values is not None:
            columns, names = _named_columns(values)
            return self._attributes(to_arviz(columns, var_names=names, **kwargs))
        kwargs.setdefault("var_names", self.var_names)
        return self._attributes(to_arviz(self.numpy(), **kwargs))

    def _attributes(self, data):
        """``data`` (ArviZ 0.x InferenceData or 1.x DataTree) with the run's K and measured bias in
        its posterior group's attributes (plain values: netCDF-safe)."""
        import json

        attrs = data.posterior.attrs if hasattr(data, "groups") and hasattr(data, "posterior") else data["posterior"].attrs
        k = getattr(self.settings, "local_steps", None)
        if k is not None:
            attrs["local_steps"] = int(k)
        if self.local_step_bias is not None:
            attrs["local_step_bias"] = json.dumps(self.local_step_bias.record())
        return data


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
    """A run produced non-finite parameters; ``.trace`` keeps every draw made before.

    Attributes
    ----------
    trace : :class:`Trace` of the draws made before the diverging round (every chain that
        was running, including the diverged ones: their earlier draws are finite).
    chains : the sampler's indices of the chains that diverged.
    round : the round in which they did.
    step : the first local step (global counter k, 1-based: the step that produced the
        non-finite value) at which one of them did.
    steps : {chain: local step} for each diverged chain.
    causes : {chain: cause}, with cause ``"parameters"`` (the update overflowed from finite
        parameters and finite gradient: typically a step size too large for the curvature),
        ``"gradient"`` (the problem's gradient was NaN/inf at finite parameters),
        ``"synchronisation"`` (the server average of finite client states overflowed) or
        ``"upload"`` (the run's upload codec returned non-finite values from finite client states).
    """

    def __init__(
        self,
        message: str,
        trace: Trace,
        chains: list[int],
        round: int,
        step: int,
        steps: dict[int, int] | None = None,
        causes: dict[int, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.trace = trace
        self.chains = chains
        self.round = round
        self.step = step
        self.steps = steps or {}
        self.causes = causes or {}
