"""What a sampler does with its warm-up :class:`~fedlangevin.fald.warmup.adaptation.Adapter`: set up its
step rule and M (``configure``), count a given M and the mode search (``account_setup``), start
an adaptive warm-up (``begin_adaptation``), read eta round by round (``round_etas``), let the
adapter see each round's iterates and install a new M or eta, or put chains back where the
adapter says (``observe``, ``install``), and restore it from a checkpoint (``restore``)."""

from __future__ import annotations

from dataclasses import replace

from fedlangevin.fald.core.preconditioning import (
    as_preconditioner, broadcast_floats, preconditioner_from_record, preconditioner_record, spectral_norm,
)
from fedlangevin.fald.core.schedules import AdaptedSteps, as_schedule, round_step_sizes, step_sizes
from fedlangevin.fald.warmup.acceptance import AutoStep
from fedlangevin.fald.warmup.adaptation import Adapter

__all__ = ["account_setup", "auto_schedule", "begin_adaptation", "configure", "default_warmup", "install", "observe",
           "restore", "round_etas"]


# -- the runner's side (fedlangevin.FALD): what a sampler does at the start of an adaptive warm-up
# and when the adapter changes M or eta --------------------------------------------------------------
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


def begin_adaptation(sampler, warmup: int) -> float:
    """Start the adaptive warm-up of ``sampler``'s run (``warmup`` rounds): the first M and eta at
    its current iterates; returns the floats broadcast (a new M to every client)."""
    per_client = sampler.local_steps > 1 or sampler.participation.scheme != "full"
    fixed = None if sampler.adapt_step else float(sampler.schedule(sampler.state.step))
    rule = sampler.step_rule
    target = None if rule is None or fixed is not None or sampler.privacy is not None else rule.target(sampler.problem.dim)
    adapter = Adapter(sampler.problem, warmup, adapt_matrix=sampler.adapt_matrix, fixed_step=fixed,
                      per_client=per_client, seed=sampler.seed, preconditioner=sampler.preconditioner,
                      privacy=sampler.privacy, temperature=sampler.temperature, target=target)
    adapter.start(sampler.state.theta)
    sampler.adapter = adapter
    sent = install(sampler, adapter, None)
    if adapter.finished:  # no warm-up rounds: the first estimate is the frozen one
        sampler.adapter, sampler.adapted = None, True
    return sent


def install(sampler, adapter: Adapter, run) -> float:
    """Put the adapter's M and eta into ``sampler``'s kernel and schedule; a new M is broadcast to
    every client (counted in the ledger and the run); returns the floats sent."""
    pre, floats = adapter.preconditioner, 0.0
    dim = sampler.problem.dim
    if pre is not sampler.preconditioner and preconditioner_record(pre) != preconditioner_record(sampler.preconditioner):
        sampler.preconditioner = pre
        sampler.preconditioner_norm = max(sampler.preconditioner_norm, spectral_norm(pre, dim))
        floats = float(sampler.problem.num_clients * broadcast_floats(pre, dim))
        sampler.ledger["setup_floats"] = sampler.ledger.get("setup_floats", 0.0) + floats
        if run is not None:
            run.setup_floats = getattr(run, "setup_floats", 0.0) + floats
    if sampler.adapt_step:
        sampler.schedule.set(sampler.state.step, adapter.step_size)
    if run is not None and adapter.floats_up:  # the acceptance rule's energies and gradients (per chain)
        sampler.ledger["setup_floats_up"] = sampler.ledger.get("setup_floats_up", 0.0) + adapter.floats_up
        run.setup_floats_up = getattr(run, "setup_floats_up", 0.0) + adapter.floats_up
        adapter.floats_up = 0.0
    return floats


def configure(sampler, problem, step_size, adapt: bool | None, preconditioner, upload, streams="single") -> None:
    """Set a new sampler's ``adapt_step`` (step_size="auto"), ``schedule``, ``adapt_matrix`` (warm-up
    adapts M; default: with "auto" only, so a numeric step size runs exactly as before, and not
    with ``streams="per_client"``, whose kernel takes no preconditioner: there only eta adapts),
    ``step_rule`` (the :class:`AutoStep` of an estimated eta), ``preconditioner`` (None: I), ``preconditioner_norm`` (the largest lambda_max(M) it runs with:
    privacy), ``adapter`` (the adaptation in progress) and ``adapted`` (one has finished)."""
    sampler.adapt_step, sampler.schedule = auto_schedule(step_size, problem)
    sampler.step_rule = (step_size if isinstance(step_size, AutoStep) else AutoStep()) if sampler.adapt_step else None
    sampler.adapt_matrix = (sampler.adapt_step and streams != "per_client") if adapt is None else adapt
    if streams == "per_client" and (sampler.adapt_matrix or preconditioner is not None):
        raise ValueError("preconditioner / adapt: a preconditioner is not available with streams='per_client'; "
                         "use streams='single', or adapt=False without a preconditioner")
    if sampler.adapt_matrix and upload is not None:
        raise ValueError("adapt: warm-up adaptation is not available with an upload codec; pass adapt=False "
                         "and a numeric step_size")
    sampler.preconditioner = (None if preconditioner is None
                              else as_preconditioner(preconditioner, problem.dim, "preconditioner"))
    sampler.preconditioner_norm = spectral_norm(sampler.preconditioner, problem.dim)
    sampler.adapter, sampler.adapted = None, False


def account_setup(sampler) -> None:
    """Ledger entries of a new sampler: a given M broadcast to every client, and the rounds and
    floats of the mode search of ``init="map"`` (``sampler.map_result``)."""
    led, problem = sampler.ledger, sampler.problem
    led["setup_floats"] = float(problem.num_clients * broadcast_floats(sampler.preconditioner, problem.dim))
    found = getattr(sampler, "map_result", None)
    if found is not None:
        led["map_rounds"] = found.rounds
        led["setup_floats"] += found.floats_down
        led["setup_floats_up"] = found.floats_up


def restore(sampler, record: dict, settings, given=None) -> None:
    """A resumed sampler's preconditioner, adaptation state and privacy norm from its checkpoint
    (``record``: the decoded "preconditioner", "adapted" and "adaptation" entries); ``given``: a
    preconditioner of the user's own class, given again to ``FALD.resume`` (checked against the record)."""
    if record.get("preconditioner") is not None:
        sampler.preconditioner = preconditioner_from_record(record["preconditioner"], given)
    sampler.adapted = bool(record.get("adapted") or False)
    sampler.preconditioner_norm = max(spectral_norm(sampler.preconditioner, sampler.problem.dim),
                                      float(settings.get("preconditioner_norm", 1.0)))
    if record.get("adaptation") is not None:
        sampler.adapter = Adapter.from_record(sampler.problem, record["adaptation"], given,
                                              privacy=getattr(sampler, "privacy", None))


def default_warmup(sampler, rounds, warmup):
    """(adapting, warmup) of a new run: a sampler that adapts and has not yet adapted adapts in
    this run's warm-up, which defaults to ``rounds // 2`` (Stan's convention)."""
    adapting = (sampler.adapt_step or sampler.adapt_matrix) and not sampler.adapted
    if adapting and warmup is None and isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 2:
        warmup = rounds // 2
    return adapting, warmup


def round_etas(sampler, rounds: int):
    """The local step sizes of ``sampler``'s next ``rounds`` rounds, lazily: the rounds of an
    adaptive warm-up still to do read eta from the adapter round by round (it changes between
    rounds; a numeric schedule's own values with adapt=True), the rounds after it come from the
    (then frozen) schedule, precomputed."""
    k, adapter = sampler.local_steps, sampler.adapter
    adaptive = 0 if adapter is None else min(rounds, adapter.warmup - adapter.done)
    if adaptive:
        fixed = None if sampler.adapt_step else round_step_sizes(sampler.schedule, sampler.state.step, k, adaptive)
        for _ in range(adaptive):
            yield [adapter.step_size] * k if fixed is None else next(fixed)
    if rounds > adaptive:
        yield from round_step_sizes(sampler.schedule, sampler.state.step, k, rounds - adaptive)


def observe(sampler, run, theta) -> None:
    """After an adaptive warm-up round: the adapter sees the broadcast iterates; a changed M or
    eta is installed, and at the end of warm-up the adaptation is frozen."""
    adapter = sampler.adapter
    if adapter.observe(theta):
        install(sampler, adapter, run)
    if adapter.reset is not None:  # a rejected approach round: the chains go back
        sampler.state = replace(sampler.state, theta=adapter.reset.to(device=theta.device, dtype=theta.dtype).clone())
        adapter.reset = None
    if adapter.finished:
        sampler.adapter, sampler.adapted = None, True
