"""A problem seen through a privacy mechanism: every gradient query is the clipped private one.

``FALD(problem, privacy=RecordLevel(C))`` runs its kernel on ``Clipped(problem, privacy)``: each
local step's gradient is :meth:`~fedlangevin.problems.FederatedProblem.private_grad` (per-example
gradients clipped to C, or the client's data term clipped, the prior's gradient unclipped;
minibatches of fixed size drawn without replacement). Nothing else of the problem's data is
reachable through it: no affine form (the fast affine kernels would bypass the clipping), no
energy, no Hessian, no smoothness or convexity constants — so a run on it cannot touch the data
outside the noisy, clipped local steps.
"""

from __future__ import annotations

from typing import Any

from fedlangevin.problems.base import FederatedProblem

__all__ = ["Clipped"]


class Clipped(FederatedProblem):
    """``problem`` whose ``grad`` is ``problem.private_grad(theta, privacy, ...)`` (see the module).

    ``no_probe``: the kernel does not evaluate this gradient once at build time to check its shape
    (it would read the data outside the noisy steps); ``private_grad`` is the package's own, tested
    for every problem type (``tests/problems/test_private.py``)."""

    no_probe = True

    def __init__(self, problem: FederatedProblem, privacy: Any) -> None:
        self.problem = problem
        self.privacy = problem.check_privacy(privacy)
        self.num_clients, self.dim, self.weights = problem.num_clients, problem.dim, problem.weights
        self.client_sizes = getattr(problem, "client_sizes", None)
        self.var_names = getattr(problem, "var_names", None)

    def grad(self, theta, *, batch_size=None, generator=None):
        if self.privacy.clip is None:  # a budgeted run before its plan: nothing may read the data unclipped
            raise RuntimeError(f"{self.privacy!r}: the run has not planned its clip yet")
        return self.problem.private_grad(theta, self.privacy, batch_size=batch_size, generator=generator)

    def to(self, device=None, dtype=None) -> "Clipped":
        return Clipped(self.problem.to(device=device, dtype=dtype), self.privacy)

    def parameter_names(self) -> list[str]:
        return self.problem.parameter_names()

    def __repr__(self) -> str:
        return f"Clipped({self.problem!r}, {self.privacy!r})"
