"""The user-facing FA-LD runner: runs, checkpoints and resumes, keeps draws in memory or on disk.

One call of :meth:`FALD.run` is a *run*: rounds whose kept draws (after ``warmup``, every
``thin`` rounds) make one :class:`Trace`. Everything a run needs to continue bit for bit
lives at a round boundary (global parameters (R, d), step and round counters, the single
``torch.Generator``, a drift correction's state, the ledger, the run's plan and its draws or
their on-disk store): :meth:`FALD.run` with ``checkpoint=path`` writes exactly that, and
:meth:`FALD.resume` rebuilds the sampler from it.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch

from fedlangevin._validation import (
    check_device,
    check_dtype,
    check_fits,
    check_init,
    check_local_steps,
    check_int,
    check_memory_draws,
    check_optional_bool,
    check_real,
    check_seed,
)
from fedlangevin.fald.runner import resume as rs
from fedlangevin.fald.corrections import drift
from fedlangevin.fald.runner import loop
from fedlangevin.fald.warmup import adaptation
from fedlangevin.fald.contracts import TRANSPORT, UPLOAD_CODEC, check_conforms
from fedlangevin.fald.core.engine import build
from fedlangevin.fald.core.streams import build_per_client
from fedlangevin.fald.warmup.mode import resolve_init
from fedlangevin.fald.core.kernel import FALDState, init_state, released
from fedlangevin.fald.core.participation import Participation, as_participation
from fedlangevin.fald.runner.replay import diagnose, where
from fedlangevin.fald.runner.runs import Run, communication, continue_arguments, progress_bar, run_arguments
from fedlangevin.fald.core.schedules import check_schedule
from fedlangevin.fald.results.settings import Settings
from fedlangevin.fald.results.trace import Communication, DivergenceError, StepSizes, Trace
from fedlangevin.problems.base import FederatedProblem, check_problem, check_weights

__all__ = ["FALD"]

#: Without ``checkpoint_every``: a checkpoint after the first round this many seconds after the last
#: (defined with the round loop, :mod:`fedlangevin.fald.runner.loop`)
CHECKPOINT_SECONDS = loop.CHECKPOINT_SECONDS


class FALD:
    """Federated Averaging Langevin Dynamics (Deng et al., Alg. 1 / Alg. 4).

    Runs R independent replicate chains of a federated sampler with N clients in
    parallel: every round the server broadcasts the global model, each client takes K local
    SGLD steps on its energy f^c with injected noise of correlation rho (eq. 10), and the
    server averages the clients chosen by the participation rule.

    Parameters
    ----------
    problem : a :class:`~fedlangevin.problems.FederatedProblem`.
    step_size : ``"auto"`` (default: adapted in warm-up, ``docs/adaptation.md``); eta > 0 (as before);
        ``"paper"`` for Thm 5.8's eta_k = 1/(2L + m k/12); a sequence with one value per local
        step; or a callable k -> eta_k (k counts local steps from 0; a pure function of k).
    local_steps : K >= 1, local steps between synchronisations.
    temperature : tau > 0; the target is pi ∝ exp(-f / tau).
    correlation : rho in [0, 1] between the clients' injected noises (eq. 14). rho = 0 is
        Alg. 1 with independent noise; rho = 1 shares one noise vector (no privacy).
    participation : :func:`Full` (default), :class:`SchemeI` (S draws with replacement,
        probabilities p_c) or :class:`SchemeII` (S uniform without replacement, balanced data).
    chains : R >= 1 independent replicate chains, simulated together.
    batch_size : minibatch size per client and step (``None`` = full gradients).
    init : initial global parameter, shape (d,) or (R, d) (e.g. prior draws); default zeros;
        ``"map"``: the MAP of a federated Newton search (:mod:`fedlangevin.fald.warmup.mode`).
    device, dtype : where and in which precision the state lives (float32 or float64).
    seed : seeds the single ``torch.Generator`` that drives all randomness (noise,
        minibatches, participation); the same seed on the same device reproduces a run
        bit for bit. ``None`` picks a random seed (recorded in ``trace.settings``).
    noise_dtype : precision of the standard normals of the injected noise (float32 by
        default: about 4x faster to draw on CPU; see :mod:`fedlangevin.fald.core.noise` for why
        this does not matter statistically). ``torch.float64`` for double-precision normals.
    upload : an optional codec ``upload(beta, theta, generator) -> beta'`` applied to the client
        states (R, N, d) before the server average, e.g. quantized uploads
        (:class:`fedlangevin.compression.QuantizedUpdateUpload`, ``docs/comparison.md``); ``None``
        (default): the exact states. Runs with a codec cannot be checkpointed.
    streams : ``"single"`` (default): one generator seeded with ``seed`` drives every draw;
        ``"per_client"``: a federated deployment's layout (:mod:`fedlangevin.fald.core.streams`:
        (seed, round) and (seed, client, round) streams; slower), the samples of
        :mod:`fedlangevin.flower` with the same seed. Not with ``upload``.
    transport : a distributed run's synchronisation, e.g. :class:`fedlangevin.distributed.ProcessGroup`
        (``docs/distributed.md``): this process holds the transport's clients; only its writing
        process (rank 0) keeps draws, checkpoints and stores. ``None``: one process, every client.
    preconditioner : a fixed M, (d, d) or (d,) (diagonal) (:mod:`fedlangevin.fald.core.preconditioning`).
    adapt : adapt M in the first run's warm-up (default ``rounds // 2``), then freeze it (default:
        with ``step_size="auto"`` only, and not with ``streams="per_client"``).
    correction : a drift correction against heterogeneous clients (``docs/drift.md``):
        ``"control_variates"``, ``"conducive"``, ``"qlsd++"`` or their settings records.

    Long runs (``docs/long-runs.md``): :meth:`run` takes ``checkpoint=``/``checkpoint_every=``
    (atomic checkpoints), ``store=`` (draws appended to disk, flat memory), ``stats=``/
    ``target=`` (streaming mean, covariance and W2 instead of or besides the draws),
    ``on_divergence=`` (``"raise"`` or ``"drop"`` the diverged chains); :meth:`resume`
    continues a checkpointed run bit for bit.
    """

    def __init__(
        self,
        problem: FederatedProblem,
        step_size: float | str | Sequence[float] | Callable[[int], float] = "auto",
        local_steps: int = 1,
        temperature: float = 1.0,
        correlation: float = 0.0,
        participation: Participation | str | None = None,
        chains: int = 1,
        batch_size: int | None = None,
        init: Any = None,
        device: Any = None,
        dtype: Any = torch.float64,
        seed: int | None = None,
        noise_dtype: Any = torch.float32,
        upload: Callable[[torch.Tensor, torch.Tensor, torch.Generator | None], torch.Tensor] | None = None,
        streams: str = "single",
        transport: Any = None,
        *,
        preconditioner: Any = None,
        adapt: bool | None = None,
        correction: Any = None,
    ) -> None:
        check_problem(problem)
        self.local_steps = check_local_steps(local_steps)
        self.temperature = check_real("temperature", temperature, low=0.0, low_open=True)
        self.correlation = check_real("correlation", correlation, low=0.0, high=1.0)
        self.chains = check_int("chains", chains, 1)
        self.participation = as_participation(participation)
        weights = check_weights(problem.weights, problem.num_clients)
        self.participation.validate(weights)
        self.batch_size = problem.check_batch_size(batch_size)
        adaptation.configure(self, problem, step_size, check_optional_bool("adapt", adapt), preconditioner, upload, streams)
        self.dtype = check_dtype("dtype", dtype)
        self.noise_dtype = check_dtype("noise_dtype", noise_dtype) if noise_dtype is not None else self.dtype
        self.device = check_device("device", device)
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little") >> 2
        self.seed = check_seed("seed", seed)
        itemsize = torch.empty(0, dtype=self.dtype).element_size()
        check_fits("chains", self.chains * problem.num_clients * problem.dim * itemsize, self.device,
                   f"the client states of {self.chains} chains x {problem.num_clients} clients x d = {problem.dim}",
                   "use fewer chains")
        init, self.map_result = resolve_init(init, problem)  # map_result: init="map"'s mode search
        initial = check_init(init, self.chains, problem.dim, self.dtype, self.device)
        if upload is not None:
            check_conforms(upload, UPLOAD_CODEC, "upload")
        codec_gen = getattr(upload, "generator", None)
        if isinstance(codec_gen, torch.Generator) and codec_gen.device.type != self.device.type:
            raise ValueError(f"upload: the codec's generator is on {codec_gen.device}, the sampler runs on "
                             f"{self.device}; give the codec a generator on {self.device.type}")
        self.upload = upload
        if streams not in ("single", "per_client"):
            raise ValueError(f"streams must be 'single' or 'per_client'; got {streams!r}")
        if streams == "per_client" and upload is not None:
            raise ValueError("upload: an upload codec is not supported with streams='per_client'; use streams='single'")
        self.streams = streams
        if transport is not None:
            check_conforms(transport, TRANSPORT, "transport")
        if transport is not None and (upload is not None or streams == "per_client"):
            raise ValueError("transport: not supported with an upload codec or streams='per_client' (both assume "
                             "one process holding every client); use upload=None, streams='single'")
        self.transport = transport
        self.problem = problem
        self._work_problem = problem.to(device=self.device, dtype=self.dtype)
        drift.configure(self, correction)
        self._kernel = self._build(upload)
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.state: FALDState = init_state(initial)
        #: sampler indices of the chains still running (rows of ``state.theta``)
        self.active = np.arange(self.chains, dtype=np.int64)
        #: cumulative counters since the sampler was created (across runs and resumes); the one
        #: communication counter (:attr:`communication` is derived from it)
        self.ledger: dict[str, Any] = {"steps": 0, "rounds": 0, "eta_sum": 0.0, "eta_max": 0.0, "uploads": 0.0}
        #: draws of a run that stopped with an exception other than a divergence (Ctrl-C, a full disk)
        self.interrupted_trace: Trace | None = None
        self._pending: Run | None = None
        self._writer = rs.CheckpointWriter(problem)
        adaptation.account_setup(self)  # the broadcast of a given M and the mode search's rounds and floats

    def _build(self, upload):
        if self.streams == "per_client":
            return build_per_client(self.problem, self.temperature, self.correlation, self.participation,
                                    self.batch_size, seed=self.seed, dtype=self.dtype, device=self.device,
                                    noise_dtype=self.noise_dtype)
        return build(self.problem, self.temperature, self.correlation, self.participation, self.batch_size,
                     dtype=self.dtype, device=self.device, noise_dtype=self.noise_dtype, upload=upload,
                     transport=self.transport, validated=True, preconditioner=self.preconditioner,
                     correction=self.built_correction)

    def rebuild_kernel(self) -> None:  # after the preconditioner changed (warm-up adaptation)
        self._kernel = self._build(self.upload)

    @property
    def settings(self) -> Settings:
        """The typed settings record (also a read-only mapping of the original keys)."""
        return Settings(
            local_steps=self.local_steps, temperature=self.temperature, correlation=self.correlation,
            participation=repr(self.participation), scheme=self.participation.scheme,
            num_sampled=self.participation.num_sampled, chains=self.chains, num_clients=self.problem.num_clients,
            dim=self.problem.dim, batch_size=self.batch_size, step_size=repr(self.schedule), seed=self.seed,
            device=str(self.device), dtype=str(self.dtype).replace("torch.", ""),
            noise_dtype=str(self.noise_dtype).replace("torch.", ""),
            upload="exact" if self.upload is None else repr(self.upload), streams=self.streams,
            preconditioner="none" if self.preconditioner is None else repr(self.preconditioner), adapt=self.adapt_matrix,
            auto_step_size=self.adapt_step, preconditioner_norm=float(self.preconditioner_norm),
            **drift.settings_fields(self),
        )

    @property
    def communication(self) -> Communication:
        """Communication per chain since the sampler was created (from :attr:`ledger`)."""
        return communication(self.problem, self.ledger["rounds"], self.ledger["uploads"],
                             self.ledger.get("setup_floats", 0.0), self.ledger.get("setup_floats_up", 0.0),
                             drift.per_round_floats(self))

    # -- running --------------------------------------------------------------------------------
    def run(
        self,
        rounds: int | None = None,
        warmup: int | None = None,
        thin: int | None = None,
        progress: bool | None = None,
        *,
        store: str | os.PathLike | None = None,
        keep_samples: bool | None = None,
        stats: bool | None = None,
        target: Any = None,
        checkpoint: str | os.PathLike | None = None,
        checkpoint_every: int | None = None,
        on_divergence: str | None = None,
    ) -> Trace:
        """Run ``rounds`` communication rounds (``rounds * local_steps`` local steps).

        Continues the chains from where the previous call stopped. Draws (the synchronised
        global model after a round) are kept after the first ``warmup`` rounds of this call
        (default 0), every ``thin`` rounds (default 1); they are never stored and then
        dropped. ``progress``: a progress bar on stderr (default: only on a TTY).

        Long runs
        ---------
        store : a directory for an on-disk :class:`~fedlangevin.fald.io.store.SampleStore`:
            draws are appended to it in blocks, memory stays flat however long the run, and
            ``trace.samples`` is a memory-mapped view of it. Default: draws in memory.
        keep_samples : False keeps no draws at all (only counters and ``stats``).
        stats : keep streaming statistics in ``trace.stats`` (running mean and covariance
            of all kept draws; see :mod:`fedlangevin.fald.results.streaming`). Default: on when
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
        the last completed round (where rounds run in chunks, :mod:`fedlangevin.fald.runner.loop`: the last
        completed chunk, at most ``loop.CHUNK_ROUNDS`` rounds back), random stream included, and
        the draws so far are in ``sampler.interrupted_trace``.
        """
        if checkpoint is not None and self.upload is not None:
            raise ValueError("checkpoint: a run with an upload codec cannot be checkpointed (the codec and its "
                             "random stream are not part of the checkpoint); run without checkpoint=")
        if not getattr(self.transport, "writes", True):  # a distributed run: rank 0 keeps the draws and writes
            store, checkpoint, checkpoint_every, keep_samples = None, None, None, False
        if self._pending is not None:
            progress_flag = check_optional_bool("progress", progress)
            run = continue_arguments(self._pending, rounds, warmup, thin, store, keep_samples, stats, target,
                                     checkpoint, checkpoint_every, on_divergence, schedule=self.schedule,
                                     step=self.state.step, local_steps=self.local_steps, dim=self.problem.dim,
                                     dtype=self.dtype, device=self.device)
            todo = run.rounds - run.done
        else:
            adapting, warmup = adaptation.default_warmup(self, rounds, warmup)
            args = run_arguments(rounds, warmup, thin, progress, store, keep_samples, stats, target, checkpoint,
                                 checkpoint_every, on_divergence, problem=self.problem, temperature=self.temperature)
            if args.stats and args.target is not None and len(self.active) < 2:
                warnings.warn("target: the per-draw W2 needs at least 2 chains; only the pooled statistics are kept",
                              stacklevel=2)
            if args.keep_samples and args.store is None:
                check_memory_draws(Run.count_draws(args.rounds, args.warmup, args.thin), len(self.active),
                                   self.problem.dim, self.dtype, self.device)
            sent = adaptation.begin_adaptation(self, args.warmup) if adapting else 0.0
            check_schedule(self.schedule, self.state.step, args.rounds * self.local_steps)
            run = Run.start(self, args)
            run.setup_floats += sent
            todo = args.rounds
            progress_flag = args.progress
        self._pending = run
        self.interrupted_trace = None
        drift.ensure_state(self)  # a correction's one-off set-up, before the first round
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
        run.finished = True
        if run.checkpoint is not None:
            self._writer.write(run.checkpoint, self, run)
        trace = self._trace(run)
        self._pending = None
        run.close()
        return trace

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

    def _advance(self, run: Run, rounds: int, bar) -> None:
        """``rounds`` rounds of ``run`` (:func:`fedlangevin.fald.runner.loop.advance`)."""
        loop.advance(self, run, rounds, bar)

    # -- divergence -------------------------------------------------------------------------------
    def _diverged(self, run: Run, state: FALDState, gen_state: torch.Tensor, etas: list[float]) -> FALDState:
        """Handle non-finite parameters after a round: raise, or drop the diverged chains."""
        bad = ~torch.isfinite(state.theta).all(dim=1)
        bad_rows = bad.nonzero().flatten().cpu().numpy()
        chains = [int(self.active[r]) for r in bad_rows]
        replay = self._kernel if self.upload is None else self._build(None)
        steps, causes, detail = diagnose(replay.step, self.state, gen_state, etas, bad_rows, self.active,
                                         self._work_problem, num_clients=self.problem.num_clients,
                                         uses_upload=self.upload is not None)
        step = min(steps.values())
        place = where(int(state.round), step, self.state.step, self.local_steps, causes)
        shown = f"{chains[:10]}{' ...' if len(chains) > 10 else ''}"
        if run.on_divergence == "drop" and len(bad_rows) < len(self.active):
            keep = ~bad
            keep_rows = keep.cpu().numpy()
            for c in chains:
                run.dropped[c] = (int(state.round), int(steps[c]))
            run.alive = run.alive[keep_rows]
            self.active = self.active[keep_rows]
            warnings.warn(
                f"FA-LD: chain(s) {shown} diverged in {place} ({detail}); dropped, {len(self.active)} chains continue",
                RuntimeWarning, stacklevel=5,
            )
            return FALDState(theta=state.theta[keep].contiguous(), step=state.step, round=state.round,
                             correction=drift.keep_chains(self, state.correction, keep))
        # stop: the sampler stays at the last good round, with the generator as it was then
        self.generator.set_state(gen_state)
        if run.checkpoint is not None:
            self._writer.write(run.checkpoint, self, run)
        trace = self._trace(run)
        note = "" if run.on_divergence == "raise" else " (on_divergence='drop', but no chain was left)"
        raise DivergenceError(
            f"FA-LD diverged in {place}: non-finite parameters in chain(s) {shown}{note}; {detail}. "
            f"The {trace.num_draws} draws made before are kept in .trace"
            + (f" and in the checkpoint {str(run.checkpoint)!r}" if run.checkpoint is not None else "") + ".",
            trace, chains, int(state.round), int(step), steps, {c: causes[c] for c in chains},
        )

    # -- results ----------------------------------------------------------------------------------
    def _trace(self, run: Run) -> Trace:
        samples, rounds = run.draws.view()
        chain_ids = run.chain_ids
        if len(run.alive) < len(run.chain_ids):
            idx = torch.as_tensor(run.alive)
            samples = samples.index_select(0, idx)
            chain_ids = run.chain_ids[run.alive]
        return Trace(
            samples=samples,
            draw_rounds=rounds,
            draw_steps=rounds * self.local_steps,
            step_sizes=StepSizes(self.schedule, run.start_step, run.done * self.local_steps),
            communication=communication(self.problem, run.done, run.uploads, getattr(run, "setup_floats", 0.0),
                                        per_round=drift.per_round_floats(self)),
            settings=self.settings,
            problem=self.problem,
            var_names=self.problem.parameter_names(),
            chain_ids=np.asarray(chain_ids).copy(),
            dropped=dict(run.dropped),
            stats=None if run.stats is None else run.stats.result(),
            store=None if run.draws.kind != "disk" else str(run.draws.store.path),
            ledger=dict(self.ledger),
        )

    # -- resuming ----------------------------------------------------------------------------------
    @classmethod
    def resume(
        cls,
        path: str | os.PathLike,
        *,
        problem: FederatedProblem | None = None,
        step_size: Any = None,
        participation: Participation | None = None,
        device: Any = None,
        fallback: bool = False,
        transport: Any = None,
        correction: Any = None,
        preconditioner: Any = None,
    ) -> "FALD":
        """A sampler positioned where the checkpoint at ``path`` left off.

        Its random stream, step counter (the step-size schedule's position), round counter,
        active chains, communication totals and ledger are those of the checkpoint, so it
        continues bit for bit on the same device: after ``run(rounds=20, checkpoint=p)``,
        ``FALD.resume(p).run(rounds=20)`` ends on the same draw as one ``run(rounds=40)``.
        If the checkpointed run was unfinished (the process died), ``run()`` finishes it and
        returns the whole run's trace; its on-disk store is cut back to the checkpoint.

        problem, step_size, participation : needed only when the checkpoint could not store
            them (a user's own problem class or step-size function: only fedlangevin's own
            objects are stored). A problem is checked against the checkpoint's (class,
            clients, dimension, weights: ``ValueError`` on mismatch; data digest: warning).
            A ``step_size`` given here replaces the stored schedule (e.g. a smaller one
            after a divergence), with a warning where it differs.
        device : another device of the same type (e.g. ``"cuda:1"``); a different type
            (cpu <-> cuda) continues with a new random stream, with a warning.
        fallback : if the checkpoint is damaged, resume from ``<path>.prev`` (with a warning)
            instead of raising :class:`~fedlangevin.fald.io.checkpoint.CheckpointError`.
        transport : of a distributed run (every process resumes from rank 0's checkpoint with
            the same number of processes); a process that does not write (``transport.writes``
            false) continues an unfinished run without its draws or checkpoint.
        correction, preconditioner : needed only when the run used a drift correction or a
            preconditioner of your own class (:mod:`fedlangevin.fald.contracts`): no code is
            loaded from a checkpoint, so they are given again and checked against what it
            stored (the correction's ``record()``, the preconditioner's M); their state
            (tensors) comes from the checkpoint.
        """
        return rs.resume_sampler(cls, path, problem=problem, step_size=step_size, participation=participation,
                                 device=device, fallback=fallback, transport=transport, correction=correction,
                                 preconditioner=preconditioner)

