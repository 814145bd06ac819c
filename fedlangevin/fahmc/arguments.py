"""FA-HMC's argument checks that need no problem: what ``step_size="auto"`` requires of K, and what
FA-HMC does not do yet, each refused before any work with the reason (:class:`fedlangevin.FAHMC`)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_auto", "is_auto", "refuse_unbuilt"]


def is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == "auto"


def check_auto(local_steps: int, auto_local_steps: bool) -> None:
    """step_size="auto" adapts at one local step a round (its statistic reads a round as one step of the
    integrator on the broadcast iterates); K is then fixed by local_steps="auto" or given as 1."""
    if local_steps != 1 and not auto_local_steps:
        raise ValueError(f"step_size='auto' needs local_steps=1 or 'auto' (got local_steps={local_steps}): its "
                         "statistic, the energy error of a round's move read off the clients' energies, measures one "
                         "integrator step, which a round is only at K = 1; give local_steps='auto' (M, h and gamma "
                         "adapted at K = 1, then K chosen against K = 1), or a numeric step_size (and a "
                         "preconditioner, e.g. from a run with local_steps=1) for a fixed K > 1")


def refuse_unbuilt(step_size: Any) -> None:
    """What FA-HMC does not do yet, refused before any work with the reason."""
    if isinstance(step_size, str) and not is_auto(step_size):
        raise ValueError(f"step_size must be 'auto', a number, a sequence or a callable k -> h_k for FA-HMC; got "
                         f"{step_size!r} (FA-LD's 'paper' rule is Thm 5.8 of the FA-LD paper, not a rule for FA-HMC)")

