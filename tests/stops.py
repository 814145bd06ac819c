"""Runs stopped mid-way, for the checkpoint and measurement tests: a kernel step that raises on its n-th
call, a run interrupted in its n-th observed round, a run resumed from its checkpoint before the last,
and the checks that the run after such a stop finishes as an uninterrupted one (resumed) or measures
afresh."""

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


def interrupted(sampler, n: int, rounds: int, warmup: int) -> None:
    """``sampler.run(rounds, warmup=warmup)`` interrupted (``KeyboardInterrupt``, as Ctrl-C) at the start
    of its ``n``-th observed round's bookkeeping; the sampler's own ``_observe`` is back afterwards."""
    import pytest

    observe, calls = sampler._observe, [0]

    def stop(run, theta, *args):
        calls[0] += 1
        if calls[0] == n:
            raise KeyboardInterrupt
        observe(run, theta, *args)

    sampler._observe = stop
    try:
        with pytest.raises(KeyboardInterrupt):
            sampler.run(rounds, warmup=warmup, progress=False)
    finally:
        del sampler._observe


def finishes_as(resumed, whole, reference) -> None:
    """``resumed.run()`` (a sampler resumed mid-measurement) ends on the draws, steps, local-step record,
    K, anchor and ledger of the uninterrupted sampler ``whole`` and its trace ``reference``."""
    import numpy as np
    import torch

    trace = resumed.run()
    assert torch.equal(trace.samples, reference.samples)
    np.testing.assert_array_equal(trace.draw_steps, reference.draw_steps)
    assert trace.local_step_bias == reference.local_step_bias and trace.local_step_bias.measured
    assert resumed.local_steps == whole.local_steps and resumed.anchor == whole.anchor
    assert dict(resumed.ledger) == dict(whole.ledger)


def measures_afresh_after_a_stop(sampler) -> None:
    """An "auto" ``sampler`` whose run(400, warmup=350) is interrupted mid-measurement (round 250): the
    next run drops the stale phase, counts its steps from where it starts and measures again in its own
    warm-up."""
    import numpy as np

    interrupted(sampler, 250, 400, 350)
    assert sampler.measurement is not None and sampler.companions is not None
    trace = sampler.run(400, warmup=350, progress=False)
    assert trace.local_step_bias.measured and sampler.measurement is None
    assert trace.draw_steps[-1] == sampler.state.step
    assert np.diff(trace.draw_steps).tolist() == [sampler.local_steps] * 49


def resumed_from_prev(cls, problem, kw: dict, rounds: int, warmup: int, every: int, path):
    """(whole, reference, resumed): an uninterrupted ``cls(problem, **kw)`` and its trace of
    ``run(rounds, warmup=warmup)``, and a twin run that checkpoints every ``every`` rounds to ``path``,
    resumed from the checkpoint before its last (``path`` + ".prev": as if the process had died after it)."""
    whole = cls(problem, **kw)
    reference = whole.run(rounds, warmup=warmup, progress=False)
    cls(problem, **kw).run(rounds, warmup=warmup, progress=False, checkpoint=path, checkpoint_every=every)
    return whole, reference, cls.resume(f"{path}.prev")
