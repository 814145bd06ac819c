"""Differential privacy of FA-LD: the paper's theorem exactly, a tight accountant, budget solvers.

>>> from fedlangevin.privacy import paper_bound, tight_epsilon
>>> setting = dict(eta=1e-6, tau=1.0, rho=0.0, gamma=0.02, sensitivity=1.0, p_min=0.1,
...                num_clients=10, num_sampled=10, local_steps=10, iterations=1000, scheme="II")
>>> bound = paper_bound(**setting, delta0=1e-6, delta1=1e-6, delta2=1e-6)
>>> round(bound.eps_1, 6), round(bound.epsilon, 3), round(bound.delta, 9)
(0.023697, 18.793, 0.000121)
>>> round(tight_epsilon(**setting, delta=bound.delta), 2)
0.19

- :mod:`fedlangevin.privacy.paper`: Theorem 6.1 / G.3 as published (``paper_bound``), the
  step-size condition (59), the "at least" form and the scalings (71), (75), (76).
- :mod:`fedlangevin.privacy.accountant`: the tight accountant (privacy-loss distributions via
  ``dp-accounting``), an RDP cross-check and a lower bound; the modelling assumptions are
  listed in its docstring and in docs/privacy.md. Record level (``account``) and client level
  (``client_account``: one client's whole data changes, no minibatch amplification).
- :mod:`fedlangevin.privacy.budget`: the largest eta, T, S or rho within a budget.
- :mod:`fedlangevin.privacy.report`: what a run (a ``Trace``) spent, ``trace.privacy(...)``.
- :mod:`fedlangevin.privacy.canary`: a canary audit of a private run, an empirical lower bound on
  epsilon held against the accounted one (``audit``).
- :mod:`fedlangevin.privacy.mechanism`: what a private run clips, ``RecordLevel(clip=C)`` and
  ``ClientLevel(clip=C)``, and the sensitivity 2C derived from the clipping norm; or a budget,
  ``RecordLevel(epsilon=2, delta=1e-5)``, within which the run plans itself
  (:mod:`fedlangevin.privacy.runplan`; FA-LD's :mod:`fedlangevin.fald.budget`, FA-HMC's
  :mod:`fedlangevin.fahmc.budget`).
- :mod:`fedlangevin.privacy.planning`: releases of any sampler described for the accountant
  (``Release``), composed (``compose_epsilon``), and the largest step within a budget.
- :mod:`fedlangevin.privacy.runplan`: a budgeted run's plan (private start, clip, the largest step
  of a sampler's step rule within the budget), shared by FA-LD and FA-HMC.
- :mod:`fedlangevin.privacy.start`: the private start, a noisy federated MAP search whose rounds
  track a private quantile of the gradient norms (adaptive clipping, Andrew et al. 2021).

The tight accountant needs the ``privacy`` extra (``pip install 'fedlangevin[privacy]'``);
the paper's formulas do not.
"""

from typing import TYPE_CHECKING

from fedlangevin.privacy.accountant import (
    Accounting,
    account,
    client_account,
    client_noise_multiplier,
    lower_bound_epsilon,
    noise_multiplier,
    rdp_epsilon,
    tight_epsilon,
)
from fedlangevin.privacy.budget import (
    BudgetSolution,
    largest_correlation,
    largest_iterations,
    largest_num_sampled,
    largest_step_size,
)
from fedlangevin.privacy.mechanism import ClientLevel, RecordLevel
from fedlangevin.privacy.paper import (
    PaperBound,
    eq71_step_size,
    eq75_epsilon,
    eq76_step_size,
    inclusion_probability,
    paper_bound,
    paper_delta_split,
    paper_step_size_limit,
)
from fedlangevin.privacy.report import PrivacyReport, trace_privacy

if TYPE_CHECKING:  # for static tools (the API reference); at run time they load on first use, below
    from fedlangevin.privacy.canary import AuditResult, AuditSetting, audit, epsilon_lower_bound

__all__ = [
    "Accounting", "AuditResult", "AuditSetting", "BudgetSolution", "ClientLevel", "PaperBound",
    "PrivacyReport", "RecordLevel", "account", "audit", "client_account", "client_noise_multiplier",
    "eq71_step_size", "eq75_epsilon", "eq76_step_size", "epsilon_lower_bound", "inclusion_probability",
    "largest_correlation", "largest_iterations", "largest_num_sampled", "largest_step_size",
    "lower_bound_epsilon", "noise_multiplier", "paper_bound", "paper_delta_split",
    "paper_step_size_limit", "rdp_epsilon", "tight_epsilon", "trace_privacy",
]

#: the canary audit's names, imported on first use (PEP 562): the audit runs a sampler and builds a
#: problem, so importing it here would make every importer of the accountant depend on both
_AUDIT = ("AuditResult", "AuditSetting", "audit", "epsilon_lower_bound")


def __getattr__(name: str):
    if name in _AUDIT:
        import importlib

        value = getattr(importlib.import_module("fedlangevin.privacy.canary"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fedlangevin.privacy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
