"""A budgeted private FA-LD run: ``FALD(problem, privacy=RecordLevel(epsilon=..., delta=...))``.

The plan is :mod:`fedlangevin.privacy.runplan`'s at FA-LD's own step rule
(:data:`~fedlangevin.privacy.runplan.LANGEVIN`): the private start and clip, then the largest
constant step size eta, at most the public step SAFETY / lambda_0, such that the start and the
sampling (every round of every chain released) composed stay within (epsilon, delta).
"""

from __future__ import annotations

from fedlangevin.privacy.runplan import (
    LANGEVIN, SAFETY, START_CLIP, START_ROUNDS, START_SHARE, BudgetPlan, plan, resolved, run_length,
)

__all__ = ["BudgetPlan", "LANGEVIN", "SAFETY", "START_CLIP", "START_ROUNDS", "START_SHARE", "plan", "resolved",
           "run_length"]
