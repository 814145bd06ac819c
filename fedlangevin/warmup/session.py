"""FA-LD's warm-up in BlackJAX's ``(init, update, final)`` shape, returning values.

:func:`init` starts an adaptive warm-up at the chains' iterates (an
:class:`~fedlangevin.warmup.adaptation.Adapter` and the first M and eta), :func:`update`
takes each warm-up round's broadcast iterates and :func:`final` gives the frozen M and eta. Each
returns a :class:`Changes` value (a new M, a new eta, chains to put back, floats to count, the
end of the warm-up) that the runner applies in one place (``FALD._apply``): nothing here
assigns to the sampler. Also here: the step rule behind ``step_size`` (:func:`auto_schedule`),
the ledger entries of a new sampler (:func:`setup_changes`), a run's default warm-up
(:func:`default_warmup`), the step sizes of the rounds ahead (:func:`round_etas`) and an
adapter's state from a checkpoint (:func:`restore`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from fedlangevin.federation.preconditioning import (
    broadcast_floats, preconditioner_from_record, preconditioner_record, spectral_norm,
)
from fedlangevin.federation.schedules import AdaptedSteps, as_schedule, round_step_sizes, step_sizes
from fedlangevin.warmup.acceptance import AutoStep, energy_function
from fedlangevin.warmup.adaptation import Adapter

__all__ = ["KEEP", "Changes", "auto_schedule", "default_warmup", "final", "init", "proposed", "restore", "round_etas",
           "setup_changes", "update"]

#: :class:`Changes`' ``preconditioner`` when M stays as it is (None is a change to I)
KEEP = object()


class Changes(NamedTuple):
    """What the warm-up (or a correction's set-up) asks the runner to change, applied in one place.

    preconditioner : a new M, broadcast to every client (:data:`KEEP`: unchanged); step_size : eta
    from the current step on (None: unchanged; applied where eta is adapted); theta : (R, d)
    where the chains are put back (a rejected approach round; None: where they are); correction :
    a drift correction's initial state (None: none given); floats_down, floats_up : set-up floats
    sent down / up besides a new M's broadcast (per chain); rounds : set-up rounds by ledger
    counter (``{"map_rounds": 12}``); finished : the adaptation has ended (M and eta frozen);
    local_steps : K from the next round on (None: unchanged; every round from here runs it);
    measurement : the local-step phase's new state (:mod:`~fedlangevin.warmup.local_steps`;
    :data:`KEEP`: unchanged, None: ended); local_bias : its finished record
    (``trace.local_step_bias``; None: none new); companions : the companion chains' new state
    (:mod:`~fedlangevin.warmup.companions`; :data:`KEEP`: unchanged, None: ended)."""

    preconditioner: Any = KEEP
    step_size: float | None = None
    theta: torch.Tensor | None = None
    correction: dict | None = None
    floats_down: float = 0.0
    floats_up: float = 0.0
    rounds: dict = {}
    finished: bool = False
    local_steps: int | None = None
    measurement: Any = KEEP
    local_bias: Any = None
    companions: Any = KEEP


def auto_schedule(step_size, problem):
    """(adapt_step, schedule) for a sampler's ``step_size``: "auto", an :class:`AutoStep` (or a
    resumed :class:`AdaptedSteps`) is estimated in warm-up; anything else is a schedule, checked now."""
    if isinstance(step_size, AdaptedSteps):
        return True, step_size
    if isinstance(step_size, AutoStep) or isinstance(step_size, str) and step_size == "auto":
        return True, AdaptedSteps()
    schedule = as_schedule(step_size, problem)
    step_sizes(schedule, 0, 1)  # fail now on an invalid first step size
    return False, schedule


def init(sampler, warmup: int) -> tuple[Adapter, Changes]:
    """Start the adaptive warm-up of ``sampler``'s run (``warmup`` rounds) at its current iterates:
    the adapter, and the first M and eta (read from the sampler: its configuration, state, M)."""
    config = sampler.config
    # K > 1 runs each client's energy; random participation at K = 1 keeps the acceptance rule (it reads the
    # rounds' moves), and the curvature rule of a problem without an energy takes the clients' largest curvature
    random = config.participation.scheme != "full"
    per_client = config.local_steps > 1 or (random and energy_function(sampler.problem) is None)
    fixed = None if config.adapt_step else float(sampler.schedule(sampler.state.step))
    rule = config.step_rule
    target = None if rule is None or fixed is not None or config.privacy is not None else rule.target(sampler.problem.dim)
    adapter = Adapter(sampler.problem, warmup, adapt_matrix=config.adapt_matrix, fixed_step=fixed,
                      per_client=per_client, seed=config.seed, preconditioner=sampler.preconditioner,
                      privacy=config.privacy, temperature=config.temperature, target=target)
    adapter.start(sampler.state.theta)
    # the acceptance rule's uploads at the start are counted with the first round's (update)
    return adapter, proposed(adapter, sampler.preconditioner, floats_up=False)._replace(finished=adapter.finished)


def update(adapter: Adapter, theta: torch.Tensor, preconditioner: Any) -> Changes:
    """After an adaptive warm-up round: the adapter sees the broadcast iterates ``theta``; a changed
    M or eta (against the current ``preconditioner``), chains to put back and the end of warm-up."""
    changes = proposed(adapter, preconditioner) if adapter.observe(theta) else Changes()
    if adapter.reset is not None:  # a rejected approach round: the chains go back
        changes = changes._replace(theta=adapter.reset.to(device=theta.device, dtype=theta.dtype).clone())
        adapter.reset = None
    return changes._replace(finished=adapter.finished)


def final(adapter: Adapter) -> tuple[Any, float | None]:
    """The M and eta a finished warm-up froze (the adapter's current ones)."""
    return adapter.preconditioner, adapter.step_size


def proposed(adapter: Adapter, current: Any, floats_up: bool = True) -> Changes:
    """The adapter's M (where it differs from ``current``) and eta, and (``floats_up``) the
    acceptance rule's uploads not yet counted."""
    pre, eta = final(adapter)
    changed = pre is not current and preconditioner_record(pre) != preconditioner_record(current)
    up = 0.0
    if floats_up and adapter.floats_up:
        up, adapter.floats_up = adapter.floats_up, 0.0
    return Changes(preconditioner=pre if changed else KEEP, step_size=eta, floats_up=up)


def setup_changes(config, problem, map_result) -> Changes:
    """The set-up of a new sampler: a given M broadcast to every client (counted as floats down,
    not as a new M), and the rounds and floats of the mode search of ``init="map"``."""
    down = float(problem.num_clients * broadcast_floats(config.preconditioner, problem.dim))
    if map_result is None:
        return Changes(floats_down=down)
    return Changes(floats_down=down + map_result.floats_down, floats_up=map_result.floats_up,
                   rounds={"map_rounds": map_result.rounds})


def restore(problem, record: dict, settings, given=None, privacy=None):
    """A resumed sampler's (preconditioner, adapted, preconditioner_norm, adapter) from its
    checkpoint (``record``: the decoded "preconditioner", "adapted" and "adaptation" entries);
    ``given``: a preconditioner of the user's own class, given again to ``FALD.resume`` (checked
    against the record)."""
    pre = None if record.get("preconditioner") is None else preconditioner_from_record(record["preconditioner"], given)
    norm = max(spectral_norm(pre, problem.dim), float(settings.get("preconditioner_norm", 1.0)))
    adapter = (None if record.get("adaptation") is None
               else Adapter.from_record(problem, record["adaptation"], given, privacy=privacy))
    return pre, bool(record.get("adapted") or False), norm, adapter


def default_warmup(sampler, rounds, warmup):
    """(adapting, warmup) of a new run: a sampler that adapts and has not yet adapted adapts in
    this run's warm-up, which defaults to ``rounds // 2`` (Stan's convention)."""
    adapting = (sampler.adapt_step or sampler.adapt_matrix) and not sampler.adapted
    if adapting and warmup is None and isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 2:
        warmup = rounds // 2
    return adapting, warmup


def round_etas(sampler, rounds: int, measured=None):
    """The local step sizes of ``sampler``'s next ``rounds`` rounds, lazily: the rounds of an
    adaptive warm-up still to do read eta from the adapter round by round (it changes between
    rounds; a numeric schedule's own values with adapt=True), then ``measured``'s rounds while it
    yields (the local-step phase's, :func:`fedlangevin.warmup.local_steps.round_etas`: K round
    by round), the rounds after them come from the (then frozen) schedule at the K of then,
    precomputed."""
    k, adapter = sampler.local_steps, sampler.adapter
    adaptive = 0 if adapter is None else min(rounds, adapter.warmup - adapter.done)
    if adaptive:
        fixed = None if sampler.adapt_step else round_step_sizes(sampler.schedule, sampler.state.step, k, adaptive)
        for _ in range(adaptive):
            yield [adapter.step_size] * k if fixed is None else next(fixed)
    rest = rounds - adaptive
    while rest > 0 and measured is not None and (etas := next(measured, None)) is not None:
        yield etas
        rest -= 1
    if rest > 0:
        yield from round_step_sizes(sampler.schedule, sampler.state.step, sampler.local_steps, rest)
