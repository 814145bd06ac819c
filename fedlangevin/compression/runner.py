"""Run any compressed-communication optimizer on given federated data — the optimizer side of
the FA-LD comparison (issue 7, item 5).

:func:`run_method` takes per-client (X_m, y_m) tensors, a test set and a flat-parameter model
(:class:`~fedlangevin.compression.models.MultinomialLogistic`,
:class:`~fedlangevin.compression.models.MLP` or anything following
:class:`~fedlangevin.compression.models.FlatModel`) and returns a
:class:`~fedlangevin.compression.models.History`: test accuracy, NLL, Brier score and ECE of
the server's model per evaluated round, against cumulative bits in each direction.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from fedlangevin.compression.dzofl import DZOFLConfig, DZOFLOptimizer
from fedlangevin.compression.lfl import LFLOptimizer
from fedlangevin.compression.local_solvers import LocalAdam, LocalSGD
from fedlangevin.compression.models import FlatModel, History
from fedlangevin.compression.optimizer import METHODS

__all__ = ["METHODS", "DEFAULT_Q1", "make_optimizer", "run_method"]

#: broadcast level q1 used when none is given: the paper's Fig. 1a settings (LTGM needs q1 = 50)
DEFAULT_Q1 = {"lfl": 2, "lgm": 2, "ltgm": 50, "lb": 2, "fedavg": 2, "lossless": 2}


def make_optimizer(
    method: str,
    clients: Sequence[tuple[torch.Tensor, torch.Tensor]],
    model: FlatModel,
    *,
    q1: int | None = None,
    q2: int = 2,
    local: LocalSGD | LocalAdam | None = None,
    dzofl: DZOFLConfig | None = None,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    **options: Any,
) -> LFLOptimizer | DZOFLOptimizer:
    """The seeded optimizer behind :func:`run_method` (same arguments, without the run's),
    for callers that need its state afterwards (e.g. the final model ``opt.state.theta``)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if method == "dzofl":
        unknown = set(options) - {"theta0"}
        if unknown:
            raise ValueError(f"options {sorted(unknown)} do not apply to dzofl (allowed: theta0)")
        return DZOFLOptimizer(model, clients, dzofl, seed=seed, device=device, dtype=dtype, **options)
    if dzofl is not None:
        raise ValueError("dzofl configuration given for a non-dzofl method")
    q1 = DEFAULT_Q1[method] if q1 is None else q1
    return LFLOptimizer(
        model, clients, method=method, q1=q1, q2=q2, local=local, seed=seed, device=device, dtype=dtype, **options
    )


def run_method(
    method: str,
    clients: Sequence[tuple[torch.Tensor, torch.Tensor]],
    test: tuple[torch.Tensor, torch.Tensor],
    model: FlatModel,
    *,
    rounds: int,
    q1: int | None = None,
    q2: int = 2,
    local: LocalSGD | LocalAdam | None = None,
    dzofl: DZOFLConfig | None = None,
    eval_every: int = 1,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    **options: Any,
) -> History:
    """Run ``method`` for ``rounds`` rounds and return its :class:`History`.

    Methods: ``fedavg``/``lossless`` (exact both ways), ``lb`` (exact broadcast, quantized
    error-feedback uploads with level q2), ``lfl``, ``lgm``, ``ltgm`` (broadcast level q1,
    default :data:`DEFAULT_Q1`), all with ``local`` steps (default SGD lr 0.1, tau 4, batch 50);
    ``dzofl`` with the :class:`~fedlangevin.compression.dzofl.DZOFLConfig` ``dzofl``.
    Further keyword ``options`` go to :class:`~fedlangevin.compression.lfl.LFLOptimizer`
    (e.g. ``bits_per_entry``, ``clients_per_round``, ``loss_rate``, ``sampling``, ``theta0``)
    or :class:`~fedlangevin.compression.dzofl.DZOFLOptimizer` (``theta0``).
    """
    opt = make_optimizer(
        method, clients, model, q1=q1, q2=q2, local=local, dzofl=dzofl, seed=seed, device=device, dtype=dtype,
        **options,
    )
    hist = opt.run(rounds, test, eval_every=eval_every)
    hist.method = method
    return hist
