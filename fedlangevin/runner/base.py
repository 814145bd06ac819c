"""The runner every federated sampler family shares: :class:`Runner`.

A sampler family is a pure kernel (:data:`fedlangevin.federation.contracts.KERNEL`):
``init(theta0) -> state`` and ``step(state, step_sizes, generator) -> (state, info)`` over a frozen
state (a dataclass with ``theta`` (R, d), ``step`` and ``round`` counters, and any further fields
that are tensors with a leading chain axis, or ``None``). FA-LD's is one
(:func:`fedlangevin.fald.engine.build`); ``docs/fald.md`` ("Write your own kernel") writes
another. The runner owns everything else, for any kernel: the run's plan (rounds, warm-up,
thinning), the round loop (:mod:`fedlangevin.runner.loop`, chunks of rounds where the kernel
has ``rounds``), kept draws in memory or on disk, streaming statistics, divergence handling (stop
with the draws so far, or drop the diverged chains), the progress bar, the ledger, and
checkpoints that resume bit for bit (:meth:`Runner.resume`).

A family adds what only it has by overriding the hooks below (``FALD`` does: its adaptive
warm-up, participation, drift corrections, replay of a diverged round); a plain kernel needs none.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import numpy as np
import torch

from fedlangevin._validation import check_device, check_dtype, check_init, check_int, check_memory_draws, check_optional_bool, check_seed
from fedlangevin.federation.contracts import KERNEL, check_conforms
from fedlangevin.federation.rounds import released
from fedlangevin.federation.schedules import as_schedule, check_schedule, round_step_sizes
from fedlangevin.runner.results.ledger import Ledger
from fedlangevin.runner.results.settings import Settings
from fedlangevin.runner.results.trace import Communication, DivergenceError, StepSizes, Trace
from fedlangevin.runner import loop
from fedlangevin.runner import resume as rs
from fedlangevin.runner.runs import Run, communication, continue_arguments, progress_bar, run_arguments
from fedlangevin.warmup.local_steps import warn as warn_local_bias
from fedlangevin.warmup.session import KEEP
from fedlangevin.problems.base import FederatedProblem, check_problem

__all__ = ["Runner"]


class Runner:
    """Runs any sampler kernel: plans, the round loop, draws, checkpoints, resume, divergence, ledger.

    Parameters
    ----------
    kernel : an object implementing :data:`~fedlangevin.federation.contracts.KERNEL` (``init``, ``step``;
        optionally ``rounds``, ``autograd_free``, ``name``, ``settings()``, ``uploads(info)``,
        ``record()``), checked before any work.
    problem : the :class:`~fedlangevin.problems.FederatedProblem` it samples (for the trace,
        its dimension, and ``target="posterior"``).
    step_size : eta > 0, a sequence (one value per step) or a callable k -> eta_k (as FALD).
    local_steps : K >= 1, steps per round (``len(step_sizes)`` of every ``step`` call).
    chains : R >= 1; init : theta0, (d,) or (R, d) (default zeros); device, dtype; seed : of the
        single ``torch.Generator`` that drives every draw (``None``: a random one, recorded).

    :meth:`run` is the same for every family (``docs/long-runs.md``): warm-up, thinning, store,
    statistics, checkpoints, ``on_divergence``. The state this runner holds is declared here:
    """

    problem: FederatedProblem          #: the problem sampled
    _kernel: Any                       #: the (init, step) kernel (FA-LD's: built from its settings)
    schedule: Any                      #: k -> eta_k
    local_steps: int                   #: K, steps per round
    chains: int                        #: R, chains at the start
    dtype: torch.dtype
    device: torch.device
    seed: int
    generator: torch.Generator         #: the single random stream
    state: Any                         #: the kernel's frozen state after the last completed round
    active: np.ndarray                 #: sampler indices of the chains still running (rows of state.theta)
    ledger: Ledger                     #: cumulative counters (rounds, steps, uploads, set-up floats)
    interrupted_trace: Trace | None    #: draws of a run stopped by an exception other than a divergence
    transport: Any = None              #: a distributed run's synchronisation (FA-LD), None in one process
    adapter: Any = None                #: an adaptive warm-up in progress (FA-LD), None otherwise
    temperature: float = 1.0           #: tau of the target (target="posterior"): the kernel's settings()["temperature"]
    anchor: tuple[int, int] = (0, 0)   #: (round, step) since which every round ran local_steps steps ("auto" moves it)
    local_step_bias: Any = None        #: the local-step bias measured (fixed K's check, "auto"), None otherwise
    companions: Any = None             #: companion chains (a fixed K's check) or "auto"'s candidates running, or None
    measurement: Any = None            #: "auto"'s measurement in progress, or None

    def __init__(self, kernel: Any, problem: FederatedProblem, step_size: Any, local_steps: int = 1, chains: int = 1,
                 init: Any = None, device: Any = None, dtype: Any = torch.float64, seed: int | None = None) -> None:
        check_problem(problem)
        check_conforms(kernel, KERNEL, "kernel")
        self.local_steps = check_int("local_steps", local_steps, 1)
        self.chains = check_int("chains", chains, 1)
        self.dtype = check_dtype("dtype", dtype)
        self.device = check_device("device", device)
        self.schedule = as_schedule(step_size, problem)
        self.problem, self._kernel = problem, kernel
        self.temperature = float(self._kernel_settings().get("temperature", 1.0))
        self.seed = self._seeded(seed)
        self.state = kernel.init(check_init(init, self.chains, problem.dim, self.dtype, self.device))
        self._start()

    @staticmethod
    def _seeded(seed: int | None) -> int:
        return check_seed("seed", int.from_bytes(os.urandom(8), "little") >> 2 if seed is None else seed)

    def _start(self) -> None:
        """What every family starts with (after ``seed``, ``device`` and the problem are set): the
        generator, the chains, the ledger, no run yet."""
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.active = np.arange(self.chains, dtype=np.int64)
        self.ledger = Ledger()
        self.interrupted_trace = None
        self._pending: Run | None = None
        self._writer = rs.CheckpointWriter(self.problem)

    @property
    def kernel(self) -> Any:
        """The kernel this runner runs."""
        return self._kernel

    # -- what a family may override ---------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        """The typed settings record: the runner's own fields and the kernel's ``settings()``."""
        own = dict(local_steps=self.local_steps, temperature=self.temperature, correlation=0.0,
                   participation="Full()", scheme="full", num_sampled=None, chains=self.chains,
                   num_clients=self.problem.num_clients, dim=self.problem.dim, batch_size=None,
                   step_size=repr(self.schedule), seed=self.seed, device=str(self.device),
                   dtype=str(self.dtype).replace("torch.", ""), noise_dtype=str(self.dtype).replace("torch.", ""),
                   sampler=str(getattr(self._kernel, "name", type(self._kernel).__name__)))
        return Settings(**{**own, **self._kernel_settings()})

    def _kernel_settings(self) -> dict:
        """The Settings fields the kernel sets (its optional ``settings()``)."""
        settings = getattr(self._kernel, "settings", None)
        return {} if settings is None else dict(settings())

    def _fixed_uploads(self) -> float | None:
        """Uploads per round when they do not depend on the round (None: ``_uploads(info)`` each round)."""
        return None if hasattr(self._kernel, "uploads") else float(self.problem.num_clients)

    def _uploads(self, info: Any) -> float:
        """A round's uploads from the kernel's ``info`` (where :meth:`_fixed_uploads` is None): called
        once per round, in round order, after ``step`` and the divergence check; a family may account more of ``info``
        here (the Flower server: bytes carried, dropped clients)."""
        return float(self._kernel.uploads(info))

    def _round_etas(self, rounds: int):
        """The step sizes of the next ``rounds`` rounds, a list of K per round."""
        return round_step_sizes(self.schedule, self.state.step, self.local_steps, rounds)

    def _round_bound(self) -> int:
        """The most local steps a round may take from now on (the schedule is checked that far)."""
        return self.local_steps

    def _observing(self) -> bool:
        """Whether the rounds ahead are observed one by one (:meth:`_observe`): an adaptive warm-up."""
        return self.adapter is not None

    def _count_setup(self, run: Run | None, name: str, floats: float) -> None:
        """Set-up floats outside the rounds (``name``: "setup_floats" down, "setup_floats_up" up) in
        the ledger and, when ``run`` is given, in that run's totals (a family's warm-up counts here)."""
        if floats:
            self.ledger[name] += floats
            if run is not None:
                setattr(run, name, getattr(run, name, 0.0) + floats)

    def _apply_local_steps(self, changes: Any) -> None:
        """The local-step fields of a family's warm-up changes (FA-LD's and FA-HMC's ``Changes`` both carry
        them; :data:`~fedlangevin.warmup.session.KEEP`: unchanged): the companions' and "auto"'s
        measurement's new state, K from the next round on (every round from here runs it: the trace's
        steps count from here) and the record (stamped with the round, its warning issued)."""
        if changes.companions is not KEEP:
            self.companions = changes.companions
        if changes.measurement is not KEEP:
            self.measurement = changes.measurement
        if changes.local_steps is not None:
            self.local_steps, self.anchor = int(changes.local_steps), (int(self.state.round), int(self.state.step))
        if changes.local_bias is not None:
            self.local_step_bias = dataclasses.replace(changes.local_bias, round=int(self.state.round))
            warn_local_bias(changes.local_bias, self.problem.parameter_names())

    def _step_arguments(self) -> dict:
        """The kernel's further ``step`` arguments for the next round (FA-LD: its current M, an
        argument like the step sizes); rounds run in chunks only while every value is None."""
        return {}

    def _observe(self, run: Run, theta: torch.Tensor, info=None, arguments=None) -> None:
        """After a round of an adaptive warm-up (only while :meth:`_observing`): its broadcast
        iterates, the kernel's round info and the step arguments it ran with."""

    def _plan_warmup(self, rounds: int | None, warmup: int | None) -> tuple[bool, int | None]:
        """(whether this run adapts in warm-up, its warm-up rounds)."""
        return False, warmup

    def _begin_warmup(self, warmup: int) -> float:
        """Start an adaptive warm-up of ``warmup`` rounds; the floats it broadcasts."""
        return 0.0

    def _before_rounds(self) -> None:
        """A family's one-off set-up before the first round (FA-LD: a drift correction's)."""

    def _end_run(self, run: Run) -> None:
        """After a run's last round, before its final checkpoint and trace (FA-LD: the companions' verdict)."""

    def _check_run(self, checkpoint: Any) -> None:
        """Refuse a run the family cannot do (before any work)."""

    def _per_round_floats(self) -> tuple[float, float]:
        return (0.0, 0.0)

    def _keep_field(self, name: str, value: Any, keep: torch.Tensor) -> Any:
        """A state field other than a per-chain tensor, for the chains ``keep`` (a family's own kind)."""
        raise TypeError(f"the kernel state's field {name!r} is neither a tensor with a chain axis nor None")

    def _diagnose(self, state: Any, gen_state: torch.Tensor, etas: list[float], bad_rows: np.ndarray):
        """({chain: step}, {chain: cause}, a sentence) for a round that ended non-finite. A plain
        kernel cannot be replayed step by step: the round's last step is named."""
        steps = {int(self.active[r]): int(self.state.step) + len(etas) for r in bad_rows}
        return (steps, {c: "parameters" for c in steps},
                f"the parameters became non-finite (eta = {etas[0]:.3g} here; a smaller step_size may keep them finite)")

    def _where(self, round: int, step: int, causes: dict) -> str:
        return f"round {round}, by local step {step}"

    # -- running ----------------------------------------------------------------------------------
    def run(self, rounds: int | None = None, warmup: int | None = None, thin: int | None = None,
            progress: bool | None = None, *, store: str | os.PathLike | None = None, keep_samples: bool | None = None,
            stats: bool | None = None, target: Any = None, checkpoint: str | os.PathLike | None = None,
            checkpoint_every: int | None = None, on_divergence: str | None = None) -> Trace:
        """Run ``rounds`` communication rounds (``rounds * local_steps`` local steps).

        Continues the chains from where the previous call stopped. Draws (the synchronised
        global model after a round) are kept after the first ``warmup`` rounds of this call,
        every ``thin`` rounds (default 1); they are never stored and then dropped. ``warmup``'s
        default: half the rounds (``rounds // 2``, Stan's convention) in a run that adapts (the
        samplers' default ``step_size="auto"``, or ``adapt=True``, until the first run has
        adapted; and ``local_steps="auto"`` until K is chosen), else 0 (a numeric step
        size without adaptation, or a later run of an adapted sampler). ``progress``: a progress
        bar on stderr (default: only on a TTY).

        Long runs
        ---------
        store : a directory for an on-disk :class:`~fedlangevin.runner.io.store.SampleStore`:
            draws are appended to it in blocks, memory stays flat however long the run, and
            ``trace.samples`` is a memory-mapped view of it. Default: draws in memory.
        keep_samples : False keeps no draws at all (only counters and ``stats``).
        stats : keep streaming statistics in ``trace.stats`` (running mean and covariance
            of all kept draws; see :mod:`fedlangevin.runner.results.streaming`). Default: on when
            ``target`` is given.
        target : ``"posterior"`` (the problem's exact one) or ``(mean, cov)``: also the W2
            of the chains' fitted Gaussian to it at every kept draw, without keeping draws.
        checkpoint : a file path: the run writes an atomic checkpoint there (the previous
            one kept as ``<path>.prev``) every ``checkpoint_every`` rounds (default: about
            every 60 seconds), at the end, and when it stops on a divergence.
        on_divergence : ``"raise"`` (default): non-finite parameters stop the run with a
            :class:`DivergenceError` naming the round, step and chains, whose ``.trace``
            keeps every draw made before. ``"drop"``: the diverged chains are removed and
            the others continue; the trace's chain axis then holds the surviving chains
            only (``trace.chain_ids``, ``trace.dropped``), later runs sample them alone.

        A sampler from :meth:`resume` whose checkpointed run was unfinished continues that
        run: ``run()`` finishes it, ``run(rounds=r)`` runs r more rounds of it; its warm-up,
        thinning, store and statistics carry on, and the trace holds the whole run's draws,
        identical to an uninterrupted run.

        If the run stops on another exception (Ctrl-C, a full disk), the sampler stays at
        the last completed round (where rounds run in chunks, :mod:`fedlangevin.runner.loop`: the last
        completed chunk, at most ``loop.CHUNK_ROUNDS`` rounds back), random stream included, and
        the draws so far are in ``sampler.interrupted_trace``.
        """
        self._check_run(checkpoint)
        if not getattr(self.transport, "writes", True):  # a distributed run: rank 0 keeps the draws and writes
            store, checkpoint, checkpoint_every, keep_samples = None, None, None, False
        if self._pending is not None:
            progress_flag = check_optional_bool("progress", progress)
            run = continue_arguments(self._pending, rounds, warmup, thin, store, keep_samples, stats, target,
                                     checkpoint, checkpoint_every, on_divergence, schedule=self.schedule,
                                     step=self.state.step, local_steps=self._round_bound(), dim=self.problem.dim,
                                     dtype=self.dtype, device=self.device)
            todo = run.rounds - run.done
        else:
            adapting, warmup = self._plan_warmup(rounds, warmup)
            args = run_arguments(rounds, warmup, thin, progress, store, keep_samples, stats, target, checkpoint,
                                 checkpoint_every, on_divergence, problem=self.problem, temperature=self.temperature,
                                 private=getattr(self, "privacy", None) is not None)
            if args.stats and args.target is not None and len(self.active) < 2:
                warnings.warn("target: the per-draw W2 needs at least 2 chains; only the pooled statistics are kept",
                              stacklevel=2)
            if args.keep_samples and args.store is None:
                check_memory_draws(Run.count_draws(args.rounds, args.warmup, args.thin), len(self.active),
                                   self.problem.dim, self.dtype, self.device)
            sent = self._begin_warmup(args.warmup) if adapting else 0.0
            check_schedule(self.schedule, self.state.step, args.rounds * self._round_bound())
            run = Run.start(self, args)
            run.setup_floats += sent
            todo = args.rounds
            progress_flag = args.progress
        self._pending = run
        self.interrupted_trace = None
        self._before_rounds()
        bar = progress_bar(todo, progress_flag)
        try:
            self._advance(run, todo, bar)
        except BaseException as error:
            self._pending = None
            if not isinstance(error, DivergenceError):  # a DivergenceError carries its own trace
                try:
                    self.interrupted_trace = self._trace(run)
                except Exception:  # the trace is a courtesy; never mask the original error
                    self.interrupted_trace = None
            run.close()
            raise
        finally:
            self.state = released(self.state)
            if bar is not None:
                bar.close()
        self._end_run(run)
        run.finished = True
        if run.checkpoint is not None:
            self._writer.write(run.checkpoint, self, run)
        trace = self._trace(run)
        self._pending = None
        run.close()
        return trace

    def _advance(self, run: Run, rounds: int, bar) -> None:
        """``rounds`` rounds of ``run`` (:func:`fedlangevin.runner.loop.advance`)."""
        loop.advance(self, run, rounds, bar)

    @property
    def unfinished(self) -> dict[str, Any] | None:
        """The unfinished run this sampler continues (after :meth:`resume`), or ``None``."""
        run = self._pending
        return None if run is None else {"rounds": run.rounds, "done": run.done, "warmup": run.warmup, "thin": run.thin,
                "draws": run.draws.count, "store": None if run.draws.kind != "disk" else str(run.draws.store.path)}

    def discard_unfinished(self) -> None:
        """Forget the unfinished run of a resumed checkpoint (the chains stay where they are)."""
        self._pending, pending = None, self._pending
        if pending is not None:
            pending.close()

    # -- divergence -------------------------------------------------------------------------------
    def _diverged(self, run: Run, state: Any, gen_state: torch.Tensor, etas: list[float]) -> Any:
        """Handle non-finite parameters after a round: raise, or drop the diverged chains."""
        bad = ~torch.isfinite(state.theta).all(dim=1)
        bad_rows = bad.nonzero().flatten().cpu().numpy()
        chains = [int(self.active[r]) for r in bad_rows]
        steps, causes, detail = self._diagnose(state, gen_state, etas, bad_rows)
        step = min(steps.values())
        place = self._where(int(state.round), step, causes)
        shown = f"{chains[:10]}{' ...' if len(chains) > 10 else ''}"
        name = self.settings.sampler
        if run.on_divergence == "drop" and len(bad_rows) < len(self.active):
            keep = ~bad
            keep_rows = keep.cpu().numpy()
            for c in chains:
                run.dropped[c] = (int(state.round), int(steps[c]))
            run.alive = run.alive[keep_rows]
            self.active = self.active[keep_rows]
            warnings.warn(f"{name}: chain(s) {shown} diverged in {place} ({detail}); dropped, {len(self.active)} "
                          "chains continue", RuntimeWarning, stacklevel=5)
            return self._keep_chains(state, keep)
        # stop: the sampler stays at the last good round, with the generator as it was then
        self.generator.set_state(gen_state)
        if run.checkpoint is not None:
            self._writer.write(run.checkpoint, self, run)
        trace = self._trace(run)
        note = "" if run.on_divergence == "raise" else " (on_divergence='drop', but no chain was left)"
        raise DivergenceError(
            f"{name} diverged in {place}: non-finite parameters in chain(s) {shown}{note}; {detail}. "
            f"The {trace.num_draws} draws made before are kept in .trace"
            + (f" and in the checkpoint {str(run.checkpoint)!r}" if run.checkpoint is not None else "") + ".",
            trace, chains, int(state.round), int(step), steps, {c: causes[c] for c in chains},
        )

    def _keep_chains(self, state: Any, keep: torch.Tensor) -> Any:
        """``state`` for the chains ``keep`` (bool, one per row): every per-chain tensor field indexed,
        counters kept, a family's own fields through :meth:`_keep_field`."""
        values = {}
        for f in dataclasses.fields(state):
            value = getattr(state, f.name)
            if f.name in ("step", "round") or value is None:
                values[f.name] = value
            elif isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == keep.shape[0]:
                values[f.name] = value[keep].contiguous()
            else:
                values[f.name] = self._keep_field(f.name, value, keep)
        return dataclasses.replace(state, **values)

    # -- results ----------------------------------------------------------------------------------
    @property
    def communication(self) -> Communication:
        """Communication per chain since the sampler was created (from :attr:`ledger`)."""
        return communication(self.problem, self.ledger["rounds"], self.ledger["uploads"],
                             self.ledger.get("setup_floats", 0.0), self.ledger.get("setup_floats_up", 0.0),
                             self._per_round_floats())

    def _trace(self, run: Run) -> Trace:
        samples, rounds = run.draws.view()
        chain_ids = run.chain_ids
        if len(run.alive) < len(run.chain_ids):
            idx = torch.as_tensor(run.alive)
            samples = samples.index_select(0, idx)
            chain_ids = run.chain_ids[run.alive]
        first_round, first_step = self.anchor  # every round since ran local_steps steps (draws are kept after it)
        return Trace(
            samples=samples, draw_rounds=rounds, draw_steps=first_step + (rounds - first_round) * self.local_steps,
            step_sizes=StepSizes(self.schedule, run.start_step, int(self.state.step) - run.start_step),
            communication=communication(self.problem, run.done, run.uploads, getattr(run, "setup_floats", 0.0),
                                        getattr(run, "setup_floats_up", 0.0), per_round=self._per_round_floats()),
            settings=self.settings, problem=self.problem, var_names=self.problem.parameter_names(),
            chain_ids=np.asarray(chain_ids).copy(), dropped=dict(run.dropped),
            stats=None if run.stats is None else run.stats.result(),
            store=None if run.draws.kind != "disk" else str(run.draws.store.path), ledger=dict(self.ledger),
            local_step_bias=self.local_step_bias,
        )

    # -- checkpoints ------------------------------------------------------------------------------
    def _record(self) -> dict:
        """What a checkpoint holds besides the runner's own entries: the kernel's state fields
        beyond theta and the counters (tensors with a chain axis), and the kernel's ``record()``."""
        return rs.kernel_record(self._kernel, self.state)

    @classmethod
    def resume(cls, path: str | os.PathLike, kernel: Any, *, problem: FederatedProblem | None = None,
               step_size: Any = None, device: Any = None, fallback: bool = False) -> "Runner":
        """A runner positioned where the checkpoint at ``path`` left off (bit for bit on the same
        device), for ``kernel`` given again (no code is loaded from a file): it is checked against
        the checkpoint's kernel record, and its state's tensors come from the checkpoint."""
        return rs.resume_runner(cls, path, kernel, problem=problem, step_size=step_size, device=device,
                                fallback=fallback)

