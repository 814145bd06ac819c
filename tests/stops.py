"""A process killed mid-run, for the checkpoint tests: a kernel step that raises on its n-th call."""

from __future__ import annotations

from typing import Callable


def dies_in_round(step: Callable, n: int) -> Callable:
    """``step`` (a kernel's ``step``) that raises ``KeyboardInterrupt`` on its ``n``-th call instead of
    running it (the process dies in round n, counted from the wrapped sampler's first call)."""
    calls = [0]

    def dies(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            raise KeyboardInterrupt
        return step(*args, **kwargs)

    return dies
