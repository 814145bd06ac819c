"""fedlangevin: Bayesian federated sampling with Federated Averaging Langevin Dynamics.

>>> import fedlangevin as fl
>>> problem = fl.problems.GaussianSimulation(num_clients=50, alpha=1.0, seed=0)
>>> trace = fl.FALD(problem, step_size=1e-5, local_steps=10, chains=300, seed=0).run(200)
>>> trace.samples.shape
torch.Size([300, 200, 2])

The names below are imported on first use (PEP 562), so ``import fedlangevin`` and the
command line's ``--help`` and ``--version`` do not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY = {
    **{name: "fedlangevin.fald" for name in (
        "FALD", "AutoStep", "AutoLocalSteps", "CheckpointError", "Communication", "Constant", "DivergenceError", "Full", "PaperDecay",
        "Polynomial", "SchemeI", "SchemeII", "Trace", "open_store", "ControlVariates", "Conducive", "QLSDPlusPlus")},
    "FAHMC": "fedlangevin.fahmc",
    "distributed": None,
    "privacy": None,
    "problems": None,
}

__all__ = [
    "FALD", "AutoStep", "AutoLocalSteps", "Communication", "Constant", "DivergenceError", "Full", "PaperDecay", "Polynomial",
    "SchemeI", "SchemeII", "Trace", "distributed", "privacy", "problems", "__version__", "CheckpointError", "open_store",
    "ControlVariates", "Conducive", "QLSDPlusPlus", "FAHMC",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from fedlangevin import distributed, privacy, problems
    from fedlangevin.fahmc import FAHMC
    from fedlangevin.fald import (FALD, AutoLocalSteps, AutoStep, CheckpointError, Communication, Conducive, Constant, ControlVariates,
                                  DivergenceError, Full, PaperDecay, Polynomial, QLSDPlusPlus, SchemeI, SchemeII,
                                  Trace, open_store)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'fedlangevin' has no attribute {name!r}")
    module = _LAZY[name]
    value = (importlib.import_module(f"fedlangevin.{name}") if module is None
             else getattr(importlib.import_module(module), name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
