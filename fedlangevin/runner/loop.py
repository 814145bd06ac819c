"""The runner's round loop: ``rounds`` rounds of a run, with the least Python per round.

:func:`advance` runs a run's rounds for any :class:`~fedlangevin.runner.base.Runner` (FA-LD's
and a kernel of your own): step sizes precomputed (an
adaptive warm-up's round by round), constant uploads where the participation rule fixes them, a
one-reduction finiteness check, the thread setting and (affine kernels) inference mode set once
for the whole loop; divergences go to the sampler's ``_diverged``, checkpoints are written where
due, the progress bar moves. Where the kernel runs several rounds in one call
(:attr:`fedlangevin.fald.engine.Kernel.rounds`) and no round needs observing in between (a fixed
K's companions observe the chunk's rounds after it), rounds run in chunks (see :func:`advance`).
"""

from __future__ import annotations

import itertools
import math
import time

import torch

from fedlangevin.runner.runs import Run
from fedlangevin.federation.rounds import RoundInfo, round_threads

__all__ = ["CHECKPOINT_SECONDS", "CHUNK_NUMBERS", "CHUNK_ROUNDS", "advance"]

#: Without ``checkpoint_every``: a checkpoint after the first round this many seconds after the last
#: (where rounds run in chunks, :data:`CHUNK_ROUNDS`, after the chunk in which the time ran out).
CHECKPOINT_SECONDS = 60.0

#: Most rounds :func:`advance` runs in one chunk (one kernel call, one saved generator state,
#: one finiteness check, one copy of the kept draws), and most numbers of parameters (R d) the
#: chunk's rounds hold together.
CHUNK_ROUNDS = 256
CHUNK_NUMBERS = 1 << 18
#: Most numbers a chunk's tallies of normals (a fixed K's coupled companions: R N d per stretch of
#: local steps and round, :class:`~fedlangevin.federation.noise.NoiseTally`) hold together.
TALLY_NUMBERS = 1 << 20


def advance(sampler, run: Run, rounds: int, bar) -> None:
    """``rounds`` rounds of ``run`` with minimal per-round Python: precomputed step sizes (an adaptive
    warm-up's round by round; the family's further step arguments, e.g. FA-LD's M, read each round),
    constant uploads where the rule fixes them, a one-reduction finiteness
    check, the thread setting and (affine kernels) inference mode set once for the whole loop.

    Where the kernel runs several rounds in one call (:attr:`Kernel.rounds`: the small affine kernel
    with full participation) and no round needs observing before the next (no adaptive warm-up; a
    fixed K's companions alone take each round's noise tally in the chunk and advance round by round
    after it, :func:`_chunk`) or takes a further step argument (no preconditioner), rounds run in
    chunks of up to :data:`CHUNK_ROUNDS` that end at every ``checkpoint_every`` boundary: one saved
    generator state, one finiteness check and one copy of the kept draws per chunk. A chunk with a
    non-finite value is run again round by round from its start (same generator state, so the same
    stream and the same outcome: the divergence is found, raised or dropped at its round)."""
    fixed = sampler._fixed_uploads()
    uploads_of = sampler._uploads
    clock = [time.monotonic()]  # the last checkpoint's time
    numel = len(sampler.active) * sampler.problem.num_clients * sampler.problem.dim
    kernel = sampler._kernel
    fast = getattr(kernel, "autograd_free", False) and not _differentiates(sampler)  # see engine.Kernel
    step_sizes = sampler._round_etas(rounds)
    left = rounds
    with round_threads(numel, sampler.device), torch.inference_mode(fast):
        while left > 0:
            observed = sampler._observing()
            alone = observed and _companions_alone(sampler)  # they advance round by round after the chunk
            plain = (not observed or alone) and fixed is not None and not any(
                v is not None for k, v in sampler._step_arguments().items() if k != "tally")  # e.g. no preconditioner
            fused = getattr(sampler._kernel, "rounds", None) if plain else None
            if alone and getattr(fused, "weights", None) is None:  # the companions need each round's weights
                fused = None
            if fused is not None:
                size = _chunk_size(sampler, run, left, clock[0])
                if alone:  # the tallies of normals live until the chunk ends
                    size = min(size, max(1, TALLY_NUMBERS // (2 * numel)))
                chunk = list(itertools.islice(step_sizes, size))
                if _chunk(sampler, run, fused, chunk, fixed, alone):
                    left -= len(chunk)
                    _after(sampler, run, len(chunk), bar, clock)
                    continue
            else:
                chunk = [next(step_sizes)]
            for etas in chunk:  # one round, or a chunk with a non-finite value again round by round
                _round(sampler, run, etas, fixed, uploads_of)
                left -= 1
                _after(sampler, run, 1, bar, clock)


def _differentiates(sampler) -> bool:
    """Whether something observing the rounds may need autograd: a warm-up adapter or a local-step
    measurement. A fixed K's companions alone do not (they run the sampler's own autograd-free kernel
    and sum iterates), so their rounds, too, run under ``torch.inference_mode``."""
    return sampler._observing() and not _companions_alone(sampler)


def _companions_alone(sampler) -> bool:
    """Whether a fixed K's companions (:mod:`fedlangevin.warmup.companions`) are all that observes the
    rounds: no warm-up adapter, no local-step measurement."""
    companions = getattr(sampler, "companions", None)
    return (getattr(sampler, "adapter", None) is None and getattr(sampler, "measurement", None) is None
            and companions is not None and companions.rule is None)


def _chunk_size(sampler, run: Run, left: int, saved: float) -> int:
    """Rounds of the next chunk: at most :data:`CHUNK_ROUNDS` (and :data:`CHUNK_NUMBERS` numbers
    of parameters), ending at the next ``checkpoint_every`` boundary; one round when a checkpoint
    by the clock is due already (the last one was written at ``saved``)."""
    size = min(left, CHUNK_ROUNDS, max(1, CHUNK_NUMBERS // (len(sampler.active) * sampler.problem.dim)))
    if run.checkpoint is not None:
        every = run.checkpoint_every
        if every is not None:
            size = min(size, every - run.done % every)
        elif time.monotonic() - saved >= CHECKPOINT_SECONDS:
            size = 1
    return size


def _round(sampler, run: Run, etas: list[float], fixed: float | None, uploads_of) -> None:
    """One round through ``kernel.step``: the generator state is saved first, a divergence
    handled (:meth:`FALD._diverged`), the draw kept, the ledger and the adapter updated."""
    generator = sampler.generator
    gen_state = generator.get_state()
    committed = False
    try:
        arguments = sampler._step_arguments()
        state, info = sampler._kernel.step(sampler.state, etas, generator, **arguments)
        if not math.isfinite(state.theta.sum()) and not bool(torch.isfinite(state.theta).all()):
            state = sampler._diverged(run, state, gen_state, etas)
        uploads = fixed if fixed is not None else uploads_of(info)
        j = run.done + 1
        if run.keeps(j):
            run.add(state.theta, state.round)
        sampler.state = state
        run.done = j
        run.uploads += uploads
        committed = True
    finally:
        if not committed:
            generator.set_state(gen_state)
    _account(sampler.ledger, [etas], uploads)
    if sampler._observing():
        sampler._observe(run, state.theta, info, arguments)


def _chunk(sampler, run: Run, rounds, chunk: list[list[float]], uploads: float, observed: bool = False) -> bool:
    """The rounds ``chunk`` (their step sizes) in one ``rounds`` call (:attr:`Kernel.rounds`).
    Returns False, with nothing changed and the generator as it was, where a parameter came out
    non-finite (the caller runs the chunk again round by round). ``observed``: a fixed K's
    companions alone observe the rounds; each round's tally of normals (where the sampler's step
    arguments hold one) is taken in the chunk, and the companions advance round by round after it,
    as after each of :func:`_round`'s rounds (their own generator: the same bits)."""
    generator, led = sampler.generator, sampler.ledger
    gen_state = generator.get_state()
    committed = False
    arguments = [sampler._step_arguments() for _ in chunk] if observed else None
    tallies = None if arguments is None or "tally" not in arguments[0] else [a["tally"] for a in arguments]
    try:
        state, thetas = (rounds(sampler.state, chunk, generator) if tallies is None
                         else rounds(sampler.state, chunk, generator, tallies=tallies))
        if not math.isfinite(thetas.sum()) and not bool(torch.isfinite(thetas).all()):
            return False
        start, count = run.done, len(chunk)
        first = run.first_kept(start)  # the chunk's rounds j = start + 1, ..., start + count
        if first <= start + count:
            run.add_rows(thetas[first - start - 1:: run.thin], range(sampler.state.round + first - start,
                                                                      state.round + 1, run.thin))
        sampler.state = state
        run.done = start + count
        total = run.uploads
        for _ in chunk:  # one addition a round, as round by round: the same float sums
            total += uploads
        run.uploads = total
        committed = True
    finally:
        if not committed:
            generator.set_state(gen_state)
    _account(led, chunk, uploads)
    if observed:
        info = RoundInfo(weights=rounds.weights)
        for theta, args in zip(thetas, arguments):
            if sampler._observing():
                sampler._observe(run, theta, info, args)
    return True


def _account(led, chunk: list[list[float]], uploads: float) -> None:
    """The ledger (:class:`~fedlangevin.runner.results.ledger.Ledger`) after the rounds ``chunk``
    (their step sizes: as many local steps as values, whatever K each round ran), ``uploads``
    each: one addition a round, in round order (so a chunk sums the same floats as its rounds one
    by one)."""
    led.steps += sum(map(len, chunk))
    led.rounds += len(chunk)
    eta_sum, eta_max, total = led.eta_sum, led.eta_max, led.uploads
    for etas in chunk:
        eta_sum += sum(etas)
        eta_max = max(eta_max, max(etas))
        total += uploads
    led.eta_sum, led.eta_max, led.uploads = eta_sum, eta_max, total


def _after(sampler, run: Run, rounds: int, bar, clock: list[float]) -> None:
    """After ``rounds`` rounds: a checkpoint where one is due, the progress bar."""
    if run.checkpoint is not None and run.done < run.rounds:
        every = run.checkpoint_every
        if (run.done % every == 0) if every is not None else (time.monotonic() - clock[0] >= CHECKPOINT_SECONDS):
            sampler._writer.write(run.checkpoint, sampler, run)
            clock[0] = time.monotonic()
    if bar is not None:
        bar.update(rounds)
