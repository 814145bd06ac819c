"""A private FA-HMC run: what ``FAHMC(..., privacy=RecordLevel(clip=C))`` accepts, and the problem its
kernel queries.

The mechanism and its accounting are :mod:`fedlangevin.privacy.hmc`'s (``docs/fahmc.md``, "Private
FA-HMC"): every local step is OBABO's on the clipped gradient of
:class:`~fedlangevin.problems.clipped.Clipped`, FA-LD's Gaussian mechanism at the equivalent step size
h^2 / (2 tanh(gamma h / 2)). Refused before any work, with the reason, is what that accounting does not
cover: BAOAB (its upload reveals the noiseless kick; a private run's default splitting is OBABO), a
warm-up that reads client energies, gradients or Hessians without noise (``step_size="auto"``,
``local_steps="auto"``), companion chains on the same data (``check_local_bias`` with K > 1: a
second, unaccounted release) and a distributed run.

A budget (``RecordLevel(epsilon=..., delta=...)``, clip optional) plans the step size h, the clip and
the start (:mod:`fedlangevin.fahmc.budget`): the step size is then left "auto" (planned), the friction
a number or "auto" (the default friction), ``init`` None or "map" (both: the private start) or an
array of the user's own; ``adapt`` is refused (an adapted M would change the sensitivity after the plan).
"""

from __future__ import annotations

from typing import Any

from fedlangevin.privacy.runplan import check_planned, check_unplanned_init
from fedlangevin.problems.base import FederatedProblem
from fedlangevin.problems.clipped import Clipped

__all__ = ["check_private", "kernel_problem"]


def check_private(problem: FederatedProblem, privacy: Any, *, step_size: Any, local_steps: int, auto_local_steps: bool,
                  splitting: str, transport: Any, check_local_bias: bool, init: Any = None, adapt: Any = None) -> Any:
    """The run's mechanism (``None``: not private), or a ``ValueError`` naming what a private FA-HMC run
    cannot do (module docstring). ``privacy`` is checked by the problem (``problem.check_privacy``:
    ``RecordLevel(clip=C)``, ``ClientLevel(clip=C)`` or a budget ``RecordLevel(epsilon=, delta=)``)."""
    if privacy is None:
        return None
    privacy = problem.check_privacy(privacy)
    budgeted = getattr(privacy, "budgeted", False)
    if budgeted:
        check_planned(step_size, adapt, init)
    if splitting != "OBABO":
        raise ValueError(f"privacy: splitting={splitting!r}: a BAOAB upload (theta_c, v_c) gives theta_c - (h/2) v_c, "
                         "the position after the noiseless kick, so the clipped gradient leaves the client without "
                         "noise; a private FA-HMC run needs splitting='OBABO', whose every local step is a Gaussian "
                         "mechanism (docs/fahmc.md, Private FA-HMC)")
    if not budgeted and (isinstance(step_size, str) or type(step_size).__name__ == "AutoStep"):
        raise ValueError(f"privacy: step_size={step_size!r}: FA-HMC's warm-up adapts h, M and the friction from the "
                         "clients' exact energies, gradients and Hessians, outside the private mechanism; give a "
                         "numeric step_size (a number, a sequence or a callable k -> h_k), a numeric friction and, "
                         "if wanted, a preconditioner of your own")
    if not budgeted:
        check_unplanned_init(init)
    if auto_local_steps:
        raise ValueError("privacy: local_steps='auto' runs candidate chains beside the sampler's on the same "
                         "data, releases the accountant does not cover; give local_steps a number")
    if transport is not None:
        raise ValueError("privacy: a private FA-HMC run is not built for a transport (distributed run); use "
                         "transport=None")
    if check_local_bias and local_steps > 1:
        raise ValueError(f"privacy: check_local_bias=True with local_steps={local_steps} runs K = 1 companion chains "
                         "on the same data beside the sampler's (a second release the accountant does not cover); "
                         "pass check_local_bias=False")
    return privacy


def kernel_problem(problem: FederatedProblem, privacy: Any) -> FederatedProblem:
    """What the kernel queries: the problem itself, or in a private run only its clipped gradients."""
    return problem if privacy is None else Clipped(problem, privacy)
