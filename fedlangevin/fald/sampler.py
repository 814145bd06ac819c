"""The user-facing FA-LD runner: runs, checkpoints and resumes, keeps draws in memory or on disk.

One call of :meth:`FALD.run` is a *run*: a number of communication rounds whose kept draws
(after ``warmup``, every ``thin`` rounds) make one :class:`Trace`. Everything a run needs to
continue bit for bit lives at a round boundary — the global parameters (R, d) (clients start
every round from the broadcast, so they hold no other state), the step counter k (which is
the step-size schedule's position), the round counter, the single ``torch.Generator``
(noise, minibatches and participation all draw from it), the communication totals, the
cumulative ledger, the run's plan and the draws so far (in the checkpoint, or their location
in an on-disk store). :meth:`FALD.run` with ``checkpoint=path`` writes exactly that, and
:meth:`FALD.resume` rebuilds the sampler from it.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from fedlangevin._validation import (
    RunArguments,
    check_bool,
    check_checkpoint_path,
    check_choice,
    check_device,
    check_dtype,
    check_fits,
    check_init,
    check_local_steps,
    check_path,
    check_int,
    check_memory_draws,
    check_optional_bool,
    check_real,
    check_schedule,
    check_seed,
    run_arguments,
)
from fedlangevin.fald import checkpoint as ckpt
from fedlangevin.fald.kernel import FALDState, fald_round, init_state, make_stepper
from fedlangevin.fald.noise import noise_scales
from fedlangevin.fald.participation import Participation, as_participation
from fedlangevin.fald.schedules import as_schedule, step_sizes
from fedlangevin.fald.store import SampleStore
from fedlangevin.fald.streaming import StreamingStats
from fedlangevin.fald.trace import Communication, DivergenceError, StepSizes, Trace
from fedlangevin.problems.base import FederatedProblem, check_weights

__all__ = ["FALD"]

#: Without ``checkpoint_every``, a checkpoint is written after the first round that ends
#: at least this many seconds after the previous one (and at the end of the run).
CHECKPOINT_SECONDS = 60.0
#: On-disk stores receive draws in blocks of about this many bytes (fewer disk writes).
STORE_BLOCK_BYTES = 4 << 20
_RECORD_KIND = "fedlangevin.FALD"
_RECORD_VERSION = 1


class FALD:
    """Federated Averaging Langevin Dynamics (Deng et al., Alg. 1 / Alg. 4).

    Runs R independent replicate chains of a federated sampler with N clients in
    parallel: every round the server broadcasts the global model, each client takes K local
    SGLD steps on its energy f^c with injected noise of correlation rho (eq. 10), and the
    server averages the clients chosen by the participation rule.

    Parameters
    ----------
    problem : a :class:`~fedlangevin.problems.FederatedProblem`.
    step_size : eta > 0; ``"paper"`` for Thm 5.8's eta_k = 1/(2L + m k/12); a sequence with
        one value per local step; or a callable k -> eta_k (k counts local steps from 0; it
        must be a pure function of k: the runner evaluates it more than once).
    local_steps : K >= 1, local steps between synchronisations.
    temperature : tau > 0; the target is pi ∝ exp(-f / tau).
    correlation : rho in [0, 1] between the clients' injected noises (eq. 14). rho = 0 is
        Alg. 1 with independent noise; rho = 1 shares one noise vector (no privacy).
    participation : :func:`Full` (default), :class:`SchemeI` (S draws with replacement,
        probabilities p_c) or :class:`SchemeII` (S uniform without replacement, balanced data).
    chains : R >= 1 independent replicate chains, simulated together.
    batch_size : minibatch size per client and step (``None`` = full gradients).
    init : initial global parameter, shape (d,) or (R, d); default zeros.
    device, dtype : where and in which precision the state lives (float32 or float64).
    seed : seeds the single ``torch.Generator`` that drives all randomness (noise,
        minibatches, participation); the same seed on the same device reproduces a run
        bit for bit. ``None`` picks a random seed (recorded in ``trace.settings``).
    noise_dtype : precision of the standard normals of the injected noise (float32 by
        default: about 4x faster to draw on CPU; see :mod:`fedlangevin.fald.noise` for why
        this does not matter statistically). ``torch.float64`` for double-precision normals.
    upload : an optional codec ``upload(beta, theta, generator) -> beta'`` applied to the
        client states (R, N, d) after the local steps and before the server average, e.g.
        :class:`fedlangevin.compression.QuantizedUpdateUpload` for quantized uploads
        (``docs/comparison.md``). ``None`` (default) averages the exact states at no cost.
        Runs with a codec cannot be checkpointed.

    Long runs (``docs/long-runs.md``): :meth:`run` takes ``checkpoint=``/``checkpoint_every=``
    (atomic checkpoints), ``store=`` (draws appended to disk, flat memory), ``stats=``/
    ``target=`` (streaming mean, covariance and W2 instead of or besides the draws),
    ``on_divergence=`` (``"raise"`` or ``"drop"`` the diverged chains); :meth:`resume`
    continues a checkpointed run bit for bit.
    """

    def __init__(
        self,
        problem: FederatedProblem,
        step_size: float | str | Sequence[float] | Callable[[int], float],
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
    ) -> None:
        if not isinstance(problem, FederatedProblem):
            raise ValueError(f"problem must be a fedlangevin FederatedProblem; got {type(problem).__name__}")
        self.local_steps = check_local_steps(local_steps)
        self.temperature = check_real("temperature", temperature, low=0.0, low_open=True)
        self.correlation = check_real("correlation", correlation, low=0.0, high=1.0)
        self.chains = check_int("chains", chains, 1)
        self.participation = as_participation(participation)
        weights = check_weights(problem.weights, problem.num_clients)
        self.participation.validate(weights)
        self.batch_size = problem.check_batch_size(batch_size)
        self.schedule = as_schedule(step_size, problem)
        step_sizes(self.schedule, 0, 1)  # fail now on an invalid first step size
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
        initial = check_init(init, self.chains, problem.dim, self.dtype, self.device)
        if upload is not None and not callable(upload):
            raise ValueError(f"upload must be None or a callable codec(beta, theta, generator); got {upload!r}")
        codec_gen = getattr(upload, "generator", None)
        if isinstance(codec_gen, torch.Generator) and codec_gen.device.type != self.device.type:
            raise ValueError(f"upload: the codec's generator is on {codec_gen.device}, the sampler runs on "
                             f"{self.device}; give the codec a generator on {self.device.type}")
        self.upload = upload

        self.problem = problem
        self._work_problem = problem.to(device=self.device, dtype=self.dtype)
        self._p = weights.to(device=self.device, dtype=self.dtype)
        self._scales = noise_scales(
            weights, self.temperature, self.correlation, device=self.device, dtype=self.dtype, noise_dtype=self.noise_dtype
        )
        self._stepper = make_stepper(self._work_problem, self.dtype, self.device, self.batch_size)
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.state: FALDState = init_state(initial)
        #: sampler indices of the chains still running (rows of ``state.theta``)
        self.active = np.arange(self.chains, dtype=np.int64)
        self.communication = Communication(0, 0.0, 0.0, 0.0)
        #: cumulative counters since the sampler was created (across runs and resumes)
        self.ledger: dict[str, Any] = {"steps": 0, "rounds": 0, "eta_sum": 0.0, "eta_max": 0.0, "uploads": 0.0}
        #: draws of a run that stopped with an exception other than a divergence (Ctrl-C, a full disk)
        self.interrupted_trace: Trace | None = None
        self._pending: _Run | None = None
        self._problem_digest: str | None = None
        self._sidecars: set[tuple[str, str]] = set()

    @property
    def settings(self) -> dict[str, Any]:
        return {
            "local_steps": self.local_steps,
            "temperature": self.temperature,
            "correlation": self.correlation,
            "participation": repr(self.participation),
            "chains": self.chains,
            "num_clients": self.problem.num_clients,
            "dim": self.problem.dim,
            "batch_size": self.batch_size,
            "step_size": repr(self.schedule),
            "seed": self.seed,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "noise_dtype": str(self.noise_dtype).replace("torch.", ""),
            "upload": "exact" if self.upload is None else repr(self.upload),
        }

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
        store : a directory for an on-disk :class:`~fedlangevin.fald.store.SampleStore`:
            draws are appended to it in blocks, memory stays flat however long the run, and
            ``trace.samples`` is a memory-mapped view of it. Default: draws in memory.
        keep_samples : False keeps no draws at all (only counters and ``stats``).
        stats : keep streaming statistics in ``trace.stats`` (running mean and covariance
            of all kept draws; see :mod:`fedlangevin.fald.streaming`). Default: on when
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
        the last completed round and the draws so far are in ``sampler.interrupted_trace``.
        """
        if checkpoint is not None and self.upload is not None:
            raise ValueError("checkpoint: a run with an upload codec cannot be checkpointed (the codec and its "
                             "random stream are not part of the checkpoint); run without checkpoint=")
        if self._pending is not None:
            progress_flag = check_optional_bool("progress", progress)
            run = self._continue(self._pending, rounds, warmup, thin, store, keep_samples, stats, target,
                                 checkpoint, checkpoint_every, on_divergence)
            todo = run.rounds - run.done
        else:
            args = run_arguments(rounds, warmup, thin, progress, store, keep_samples, stats, target, checkpoint,
                                 checkpoint_every, on_divergence, problem=self.problem, temperature=self.temperature)
            if args.stats and args.target is not None and len(self.active) < 2:
                warnings.warn("target: the per-draw W2 needs at least 2 chains; only the pooled statistics are kept",
                              stacklevel=2)
            if args.keep_samples and args.store is None:
                check_memory_draws(_Run.count_draws(args.rounds, args.warmup, args.thin), len(self.active),
                                   self.problem.dim, self.dtype, self.device)
            check_schedule(self.schedule, self.state.step, args.rounds * self.local_steps)
            run = _Run.start(self, args)
            todo = args.rounds
            progress_flag = args.progress
        self._pending = run
        self.interrupted_trace = None
        bar = _progress(todo, progress_flag)
        try:
            self._advance(run, todo, bar)
        except BaseException as error:
            self._pending = None
            self.communication = self.communication + _communication(self.problem, run.done, run.uploads)
            if not isinstance(error, DivergenceError):  # a DivergenceError carries its own trace
                try:
                    self.interrupted_trace = self._trace(run)
                except Exception:  # the trace is a courtesy; never mask the original error
                    self.interrupted_trace = None
            run.close()
            raise
        finally:
            if bar is not None:
                bar.close()
        run.finished = True
        if run.checkpoint is not None:
            self._write_checkpoint(run)
        trace = self._trace(run)
        self.communication = self.communication + trace.communication
        self._pending = None
        run.close()
        return trace

    def _continue(self, run: "_Run", rounds, warmup, thin, store, keep_samples, stats, target, checkpoint,
                  checkpoint_every, on_divergence) -> "_Run":
        """Check the arguments of a call that continues the unfinished run from a checkpoint."""
        hint = (f"this sampler continues the unfinished run of its checkpoint (round {run.done} of {run.rounds}); "
                "call run() to finish it or run(rounds=r) to run r more rounds of it, or call "
                "discard_unfinished() first to start a new run")
        keep_samples = check_optional_bool("keep_samples", keep_samples)
        stats = check_optional_bool("stats", stats)
        if on_divergence is not None:
            on_divergence = check_choice("on_divergence", on_divergence, ("raise", "drop"))
        same = {
            "warmup": (warmup, run.warmup), "thin": (thin, run.thin), "keep_samples": (keep_samples, run.keep_samples),
            "stats": (stats, run.stats is not None), "on_divergence": (on_divergence, run.on_divergence),
        }
        for name, (given, actual) in same.items():
            if given is not None and given != actual:
                raise ValueError(f"{name}={given!r} differs from the run being continued ({name}={actual!r}); {hint}")
        if store is not None:
            path = Path(store).resolve()
            if run.draws.kind != "disk" or path != run.draws.store.path.resolve():
                raise ValueError(f"store={str(store)!r} differs from the run being continued; {hint}")
        if target is not None:
            raise ValueError(f"target cannot be changed when continuing a run (it keeps its own); {hint}")
        if checkpoint is not None:
            checkpoint = check_checkpoint_path(checkpoint, run.draws.store.path if run.draws.kind == "disk" else None)
        if checkpoint_every is not None:
            checkpoint_every = check_int("checkpoint_every", checkpoint_every, 1)
        if rounds is not None:
            rounds = check_int("rounds", rounds, 1)
            if run.draws.kind == "memory":
                check_memory_draws(run.count_draws(run.done + rounds, run.warmup, run.thin), len(run.chain_ids),
                                   self.problem.dim, self.dtype, self.device)
            check_schedule(self.schedule, self.state.step, rounds * self.local_steps)
        else:
            check_schedule(self.schedule, self.state.step, (run.rounds - run.done) * self.local_steps)
        # every argument is valid: now change the plan
        if rounds is not None:
            run.extend(run.done + rounds)
        if checkpoint is not None:
            run.checkpoint = checkpoint
        if checkpoint_every is not None:
            run.checkpoint_every = checkpoint_every
        return run

    @property
    def unfinished(self) -> dict[str, Any] | None:
        """The unfinished run this sampler continues (after :meth:`resume`), or ``None``."""
        run = self._pending
        if run is None:
            return None
        return {"rounds": run.rounds, "done": run.done, "warmup": run.warmup, "thin": run.thin,
                "draws": run.draws.count, "store": None if run.draws.kind != "disk" else str(run.draws.store.path)}

    def discard_unfinished(self) -> None:
        """Forget the unfinished run of a resumed checkpoint (the chains stay where they are)."""
        if self._pending is not None:
            self._pending.close()
        self._pending = None

    def _advance(self, run: "_Run", rounds: int, bar) -> None:
        k = self.local_steps
        schedule = self.schedule
        last_save = time.monotonic()
        for _ in range(rounds):
            step0 = self.state.step
            etas = [float(schedule(s)) for s in range(step0, step0 + k)]
            gen_state = self.generator.get_state()
            committed = False
            try:
                state, w = fald_round(
                    self.state, self._work_problem, etas, self._scales, self.participation,
                    self._p, self.generator, self.batch_size, self._stepper, upload=self.upload,
                )
                if not bool(torch.isfinite(state.theta).all()):
                    state = self._diverged(run, state, gen_state, etas)
                uploads = self.participation.uploads(w)
                j = run.done + 1
                if run.keeps(j):
                    run.add(state.theta, state.round)
                self.state = state
                run.done = j
                run.uploads += uploads
                committed = True
            finally:
                if not committed:
                    self.generator.set_state(gen_state)
            led = self.ledger
            led["steps"] += k
            led["rounds"] += 1
            led["eta_sum"] += sum(etas)
            led["eta_max"] = max(led["eta_max"], max(etas))
            led["uploads"] += uploads
            if run.checkpoint is not None and run.done < run.rounds:
                every = run.checkpoint_every
                if (run.done % every == 0) if every is not None else (time.monotonic() - last_save >= CHECKPOINT_SECONDS):
                    self._write_checkpoint(run)
                    last_save = time.monotonic()
            if bar is not None:
                bar.update(1)

    # -- divergence -------------------------------------------------------------------------------
    def _diverged(self, run: "_Run", state: FALDState, gen_state: torch.Tensor, etas: list[float]) -> FALDState:
        """Handle non-finite parameters after a round: raise, or drop the diverged chains."""
        bad = ~torch.isfinite(state.theta).all(dim=1)
        bad_rows = bad.nonzero().flatten().cpu().numpy()
        chains = [int(self.active[r]) for r in bad_rows]
        steps, causes, detail = self._diagnose(gen_state, etas, bad_rows)
        step = min(steps.values())
        k = self.local_steps
        in_round = step - self.state.step
        where = (f"round {state.round}, local step {step} (step {in_round} of {k} in the round)" if in_round <= k
                 else f"round {state.round}, at its {'upload' if 'upload' in causes.values() else 'synchronisation'} "
                      f"(after local step {self.state.step + k})")
        shown = f"{chains[:10]}{' ...' if len(chains) > 10 else ''}"
        if run.on_divergence == "drop" and len(bad_rows) < len(self.active):
            keep = ~bad
            keep_rows = keep.cpu().numpy()
            for c in chains:
                run.dropped[c] = (int(state.round), int(steps[c]))
            run.alive = run.alive[keep_rows]
            self.active = self.active[keep_rows]
            warnings.warn(
                f"FA-LD: chain(s) {shown} diverged in {where} ({detail}); dropped, {len(self.active)} chains continue",
                RuntimeWarning, stacklevel=4,
            )
            return replace(state, theta=state.theta[keep].contiguous())
        # stop: the sampler stays at the last good round, with the generator as it was then
        self.generator.set_state(gen_state)
        if run.checkpoint is not None:
            self._write_checkpoint(run)
        trace = self._trace(run)
        note = "" if run.on_divergence == "raise" else " (on_divergence='drop', but no chain was left)"
        raise DivergenceError(
            f"FA-LD diverged in {where}: non-finite parameters in chain(s) {shown}{note}; {detail}. "
            f"The {trace.num_draws} draws made before are kept in .trace"
            + (f" and in the checkpoint {str(run.checkpoint)!r}" if run.checkpoint is not None else "") + ".",
            trace, chains, int(state.round), int(step), steps, {c: causes[c] for c in chains},
        )

    def _diagnose(self, gen_state: torch.Tensor, etas: list[float], bad_rows: np.ndarray):
        """Replay the diverged round step by step (same random stream) to find the first bad step.

        Returns ({chain: step}, {chain: cause}, a sentence for the message).
        """
        k = self.local_steps
        gen = torch.Generator(device=self.device)
        gen.set_state(gen_state)
        r = self.state.theta.shape[0]
        first = np.full(r, -1, dtype=np.int64)
        before = {}  # row -> client states (N, d) before its first bad step
        last = [self.state.theta.unsqueeze(1).expand(r, self._p.numel(), -1).clone()]

        def hook(i: int, theta: torch.Tensor) -> None:
            ok = torch.isfinite(theta).flatten(1).all(1).cpu().numpy()
            for row in np.flatnonzero(~ok & (first < 0)):
                first[row] = i
                before[int(row)] = last[0][row].clone()
            last[0] = theta.clone()

        # the upload codec is not replayed (it may have side effects): a row whose exact-upload
        # replay ends finite went non-finite in the codec
        replayed, _ = fald_round(self.state, self._work_problem, etas, self._scales, self.participation, self._p,
                                 gen, self.batch_size, self._stepper, on_step=hook)
        steps, causes = {}, {}
        grad_bad, grown, moderate = [], [], []
        # Below sqrt(max float) no quadratic or softmax-type energy overflows: a non-finite
        # gradient there points at the problem (log(0), 0/0, ...); above it the parameters
        # themselves have blown up and the gradient overflows with them.
        large = float(torch.finfo(self.dtype).max) ** 0.5
        for row in bad_rows:
            c = int(self.active[row])
            if first[row] < 0:
                codec = self.upload is not None and bool(torch.isfinite(replayed.theta[row]).all())
                steps[c], causes[c] = self.state.step + k + 1, "upload" if codec else "synchronisation"
                continue
            steps[c] = self.state.step + int(first[row]) + 1
            prev = before[int(row)]
            size = float(prev.abs().max())
            grad_ok = bool(torch.isfinite(self._work_problem.grad(prev.unsqueeze(0))).all())
            if grad_ok or size >= large:
                causes[c] = "parameters"
                grown.append(size)
            else:
                causes[c] = "gradient"
                grad_bad.append(c)
                moderate.append(size)
        parts = []
        if grown:
            parts.append(f"the parameters grew without bound (|theta| reached {max(grown):.3g} before the step): a "
                         f"smaller step_size (eta = {etas[0]:.3g} here) keeps them finite")
        if grad_bad:
            parts.append(f"the problem's gradient was NaN/inf at moderate, finite parameters (|theta| <= "
                         f"{max(moderate):.3g}) in chain(s) {grad_bad[:10]}: check the energy and its gradient there")
        if any(v == "synchronisation" for v in causes.values()):
            parts.append("every client state was finite but their average overflowed")
        if any(v == "upload" for v in causes.values()):
            parts.append("every client state was finite but the upload codec returned non-finite values")
        return steps, causes, "; ".join(parts)

    # -- results and checkpoints ------------------------------------------------------------------
    def _trace(self, run: "_Run") -> Trace:
        samples, rounds = run.draws.view()
        chain_ids = run.chain_ids
        if len(run.alive) < len(run.chain_ids):
            idx = torch.as_tensor(run.alive)
            samples = samples.index_select(0, idx)
            chain_ids = run.chain_ids[run.alive]
        comm = _communication(self.problem, run.done, run.uploads)
        return Trace(
            samples=samples,
            draw_rounds=rounds,
            draw_steps=rounds * self.local_steps,
            step_sizes=StepSizes(self.schedule, run.start_step, run.done * self.local_steps),
            communication=comm,
            settings=self.settings,
            problem=self.problem,
            var_names=self.problem.parameter_names(),
            chain_ids=np.asarray(chain_ids).copy(),
            dropped=dict(run.dropped),
            stats=None if run.stats is None else run.stats.result(),
            store=None if run.draws.kind != "disk" else str(run.draws.store.path),
            ledger=dict(self.ledger),
        )

    def _write_checkpoint(self, run: "_Run") -> None:
        run.sync()
        path = Path(run.checkpoint)
        record = {
            "kind": _RECORD_KIND,
            "version": _RECORD_VERSION,
            "versions": {"torch": str(torch.__version__), "numpy": str(np.__version__)},
            "round": int(self.state.round),
            "step": int(self.state.step),
            "settings": ckpt.encode(self._plain_settings()),
            "schedule": _encoded_or_none(self.schedule),
            "schedule_repr": repr(self.schedule),
            "schedule_probe": self._schedule_probe(),
            "participation": _encoded_or_none(self.participation),
            "participation_repr": repr(self.participation),
            "problem": self._problem_record(path),
            "theta": self.state.theta.detach().cpu().clone(),
            "active": torch.as_tensor(self.active, dtype=torch.int64),
            "generator": self.generator.get_state(),
            "communication": [self.communication.rounds, self.communication.uploads,
                              self.communication.floats_up, self.communication.floats_down],
            "ledger": ckpt.encode(dict(self.ledger)),
            "run": run.describe(),
        }
        ckpt.write_file(path, record)

    def _plain_settings(self) -> dict[str, Any]:
        return {
            "local_steps": self.local_steps, "temperature": self.temperature, "correlation": self.correlation,
            "chains": self.chains, "batch_size": self.batch_size, "seed": self.seed, "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""), "noise_dtype": str(self.noise_dtype).replace("torch.", ""),
            "num_clients": self.problem.num_clients, "dim": self.problem.dim,
        }

    def _schedule_probe(self) -> list[list[float]]:
        probe = []
        for k in sorted({0, max(self.state.step - 1, 0), self.state.step, self.state.step + self.local_steps - 1}):
            try:
                probe.append([k, float(self.schedule(k))])
            except (ValueError, TypeError, IndexError):
                pass
        return probe

    def _problem_record(self, path: Path) -> dict:
        if self._problem_digest is None:
            self._problem_digest = ckpt.digest(self.problem)
        sidecar = path.with_name(path.name + ckpt.PROBLEM_SUFFIX)
        stored = True
        if (str(sidecar), self._problem_digest) not in self._sidecars:
            try:
                encoded = ckpt.encode(self.problem, "problem")
            except ckpt.NotEncodable:
                stored = False
            else:
                ckpt.write_file(sidecar, {"kind": "fedlangevin.problem", "digest": self._problem_digest,
                                          "problem": encoded}, keep_previous=False)
                self._sidecars.add((str(sidecar), self._problem_digest))
        return {
            "file": sidecar.name if stored else None,
            "digest": self._problem_digest,
            "class": f"{type(self.problem).__module__}.{type(self.problem).__qualname__}",
            "num_clients": self.problem.num_clients,
            "dim": self.problem.dim,
            "weights": torch.as_tensor(self.problem.weights, dtype=torch.float64).cpu().clone(),
        }

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
            instead of raising :class:`~fedlangevin.fald.checkpoint.CheckpointError`.
        """
        path = check_path("path", path)
        fallback = check_bool("fallback", fallback)
        record, used = ckpt.read_file(path, fallback=fallback)
        if record.get("kind") != _RECORD_KIND:
            raise ckpt.CheckpointError(f"{str(used)!r} is not a checkpoint of an FA-LD sampler")
        if int(record.get("version", 0)) > _RECORD_VERSION:
            raise ckpt.CheckpointError(f"{str(used)!r} was written by a newer fedlangevin (record version {record['version']})")
        settings = ckpt.decode(record["settings"])
        problem = _resume_problem(record, used, problem)
        schedule = _resume_schedule(record, step_size, problem)
        rule = _resume_participation(record, participation)
        saved_device = torch.device(settings["device"])
        new_device = saved_device if device is None else check_device("device", device)
        if device is None and saved_device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"the checkpoint was written on {saved_device} but CUDA is not available here; pass device='cpu' "
                "to continue on the CPU (with a new random stream)"
            )
        sampler = cls(
            problem, step_size=schedule, local_steps=settings["local_steps"], temperature=settings["temperature"],
            correlation=settings["correlation"], participation=rule, chains=settings["chains"],
            batch_size=settings["batch_size"], device=new_device, dtype=settings["dtype"], seed=settings["seed"],
            noise_dtype=settings["noise_dtype"],
        )
        active = record["active"].numpy().astype(np.int64)
        theta = record["theta"].to(device=sampler.device, dtype=sampler.dtype)
        if theta.shape != (len(active), problem.dim):
            raise ckpt.CheckpointError(f"checkpoint {str(used)!r}: parameters of shape {tuple(theta.shape)} do not match "
                                       f"{len(active)} chains x d = {problem.dim}")
        sampler.state = FALDState(theta=theta, step=int(record["step"]), round=int(record["round"]))
        sampler.active = active
        if new_device.type == saved_device.type:
            sampler.generator.set_state(record["generator"])
        else:
            warnings.warn(
                f"resuming a {saved_device.type} run on {new_device.type}: the random stream cannot carry over, the "
                f"chains continue with a new one (seeded from seed and round)", stacklevel=2,
            )
            sampler.generator.manual_seed((sampler.seed + 1_000_003 * int(record["round"])) % 2**64)
        sampler.communication = Communication(*record["communication"])
        sampler.ledger = ckpt.decode(record["ledger"])
        # a run resumed from <path>.prev goes on writing its checkpoints to <path>
        main_path = used.with_name(used.name.removesuffix(ckpt.PREV_SUFFIX)) if used.name.endswith(ckpt.PREV_SUFFIX) else used
        if record["problem"]["file"] is not None:
            sampler._problem_digest = record["problem"]["digest"]
            sampler._sidecars.add((str(main_path.with_name(main_path.name + ckpt.PROBLEM_SUFFIX)), record["problem"]["digest"]))
        rec_run = record["run"]
        if rec_run is not None and not rec_run["finished"]:
            sampler._pending = _Run.from_record(sampler, rec_run, main_path)
        elif rec_run is not None:  # "communication" holds the totals before that run
            sampler.communication = sampler.communication + _communication(
                problem, int(rec_run["done"]), float(rec_run["uploads"]))
        return sampler


def _communication(problem: FederatedProblem, rounds: int, uploads: float) -> Communication:
    """Per-chain communication of ``rounds`` rounds with ``uploads`` client uploads: d floats per
    upload, a broadcast of d floats to each of the N clients per round."""
    n, d = problem.num_clients, problem.dim
    return Communication(rounds, uploads, uploads * d, float(rounds * n * d))


def _encoded_or_none(obj: Any) -> Any:
    try:
        return ckpt.encode(obj)
    except ckpt.NotEncodable:
        return None


def _resume_problem(record: dict, used: Path, problem: Any) -> FederatedProblem:
    info = record["problem"]
    if problem is None:
        if info["file"] is None:
            raise ValueError(
                f"the checkpoint's problem ({info['class']}) is not one fedlangevin can store; pass it again: "
                "FALD.resume(path, problem=...)"
            )
        sidecar = used.with_name(info["file"])
        if not sidecar.exists():  # read from <path>.prev: the problem file is named after <path>
            sidecar = used.with_name(used.name.removesuffix(ckpt.PREV_SUFFIX) + ckpt.PROBLEM_SUFFIX)
        side, _ = ckpt.read_file(sidecar)
        if side.get("digest") != info["digest"]:
            raise ckpt.CheckpointError(
                f"the problem file {str(sidecar)!r} belongs to another run (digest differs); pass the problem: "
                "FALD.resume(path, problem=...)"
            )
        problem = ckpt.decode(side["problem"])
        if not isinstance(problem, FederatedProblem):
            raise ckpt.CheckpointError(f"{str(sidecar)!r} does not hold a federated problem")
        return problem
    if not isinstance(problem, FederatedProblem):
        raise ValueError(f"problem must be a fedlangevin FederatedProblem; got {type(problem).__name__}")
    name = f"{type(problem).__module__}.{type(problem).__qualname__}"
    weights = torch.as_tensor(problem.weights, dtype=torch.float64).cpu()
    if (name, problem.num_clients, problem.dim) != (info["class"], info["num_clients"], info["dim"]) or not torch.equal(
        weights, info["weights"]
    ):
        raise ValueError(
            f"problem does not match the checkpoint's: got {name} with N={problem.num_clients}, d={problem.dim}; "
            f"the checkpoint sampled {info['class']} with N={info['num_clients']}, d={info['dim']} "
            "(and its client weights must be equal)"
        )
    if ckpt.digest(problem) != info["digest"]:
        warnings.warn(
            "problem: its data differ from the checkpointed run's (digest mismatch); the resumed chains sample the "
            "problem given here", stacklevel=3,
        )
    return problem


def _resume_schedule(record: dict, step_size: Any, problem: FederatedProblem):
    stored = record["schedule"]
    if step_size is None:
        if stored is None:
            raise ValueError(
                f"the checkpoint's step size ({record['schedule_repr']}) is a function fedlangevin cannot store; "
                "pass it again: FALD.resume(path, step_size=...)"
            )
        return ckpt.decode(stored)
    schedule = as_schedule(step_size, problem)
    differs = []
    for k, eta in record["schedule_probe"]:
        try:
            if float(schedule(int(k))) != eta:
                differs.append(int(k))
        except (ValueError, TypeError, IndexError):
            differs.append(int(k))
    if differs:
        warnings.warn(
            f"step_size differs from the checkpointed run's at step(s) {differs}: the resumed run uses the new one "
            "(it does not continue the original run bit for bit)", stacklevel=3,
        )
    return schedule


def _resume_participation(record: dict, participation: Any) -> Participation:
    stored = record["participation"]
    if participation is None:
        if stored is None:
            raise ValueError(
                f"the checkpoint's participation rule ({record['participation_repr']}) cannot be stored; pass it "
                "again: FALD.resume(path, participation=...)"
            )
        return ckpt.decode(stored)
    rule = as_participation(participation)
    if repr(rule) != record["participation_repr"]:
        warnings.warn(
            f"participation {rule!r} differs from the checkpointed run's ({record['participation_repr']})", stacklevel=3
        )
    return rule


# -- one run: plan, progress and draws ------------------------------------------------------------
class _MemoryDraws:
    kind = "memory"

    def __init__(self, chains: int, capacity: int, dim: int, device, dtype) -> None:
        self.buf = torch.empty(chains, capacity, dim, device=device, dtype=dtype)
        self.rounds = np.empty(capacity, dtype=np.int64)
        self.count = 0

    def reserve(self, capacity: int) -> None:
        if capacity > self.buf.shape[1]:
            buf = torch.empty(self.buf.shape[0], capacity, self.buf.shape[2], device=self.buf.device, dtype=self.buf.dtype)
            buf[:, : self.count] = self.buf[:, : self.count]
            rounds = np.empty(capacity, dtype=np.int64)
            rounds[: self.count] = self.rounds[: self.count]
            self.buf, self.rounds = buf, rounds

    def add(self, row: torch.Tensor, round: int) -> None:
        self.buf[:, self.count] = row
        self.rounds[self.count] = round
        self.count += 1

    def sync(self, dropped: dict) -> None:
        pass

    def view(self) -> tuple[torch.Tensor, np.ndarray]:
        return self.buf[:, : self.count].detach().cpu(), self.rounds[: self.count].copy()

    def record(self, checkpoint: Path | None = None) -> dict:
        return {"kind": "memory", "samples": self.buf[:, : self.count].detach().cpu().clone(),
                "rounds": torch.from_numpy(self.rounds[: self.count].copy())}

    def close(self, dropped: dict | None = None) -> None:
        pass


class _DiskDraws:
    kind = "disk"

    def __init__(self, store: SampleStore, device, dtype) -> None:
        self.store = store
        per_draw = store.chains * store.dim * torch.tensor([], dtype=dtype).element_size()
        block = int(max(1, min(4096, STORE_BLOCK_BYTES // max(per_draw, 1))))
        self.block = torch.empty(block, store.chains, store.dim, device=device, dtype=dtype)
        self.block_rounds = np.empty(block, dtype=np.int64)
        self.waiting = 0

    @property
    def count(self) -> int:
        return self.store.draws + self.waiting

    def reserve(self, capacity: int) -> None:
        pass

    def add(self, row: torch.Tensor, round: int) -> None:
        self.block[self.waiting] = row
        self.block_rounds[self.waiting] = round
        self.waiting += 1
        if self.waiting == self.block.shape[0]:
            self._write()

    def _write(self) -> None:
        if self.waiting:
            self.store.write(self.block[: self.waiting].cpu().numpy(), self.block_rounds[: self.waiting])
            self.waiting = 0

    def sync(self, dropped: dict) -> None:
        self._write()
        self.store.sync(dropped)

    def view(self) -> tuple[torch.Tensor, np.ndarray]:
        self._write()
        return torch.from_numpy(self.store.samples()), np.asarray(self.store.draw_rounds())

    def record(self, checkpoint: Path | None = None) -> dict:
        path = self.store.path.resolve()
        rel = None if checkpoint is None else os.path.relpath(path, Path(checkpoint).resolve().parent)
        return {"kind": "disk", "path": str(path), "relative": rel, "draws": self.store.draws,
                "crc32": dict(self.store.meta["crc32"])}

    def close(self, dropped: dict | None = None) -> None:
        try:
            self._write()
            self.store.sync(dropped)
        finally:
            self.store.close()


class _NoDraws:
    kind = "none"
    count = 0

    def __init__(self, chains: int, dim: int, dtype) -> None:
        self.shape = (chains, 0, dim)
        self.dtype = dtype

    def reserve(self, capacity: int) -> None:
        pass

    def add(self, row, round) -> None:
        pass

    def sync(self, dropped: dict) -> None:
        pass

    def view(self):
        return torch.zeros(self.shape, dtype=self.dtype), np.zeros(0, dtype=np.int64)

    def record(self, checkpoint: Path | None = None) -> dict:
        return {"kind": "none"}

    def close(self, dropped: dict | None = None) -> None:
        pass


class _Run:
    """One run in progress: its plan (rounds, warm-up, thinning), progress and draws.

    A draw is kept at round j = 1, 2, ... of the run when j > warmup and (j - warmup) is a
    multiple of thin. The draws' chain axis holds the chains running at the start of the run
    (``chain_ids``); ``alive`` are the positions among them still running.
    """

    def __init__(self) -> None:
        self.finished = False

    @staticmethod
    def count_draws(rounds: int, warmup: int, thin: int) -> int:
        return max(0, (rounds - warmup) // thin)

    def keeps(self, j: int) -> bool:
        return j > self.warmup and (j - self.warmup) % self.thin == 0

    @classmethod
    def start(cls, sampler: FALD, args: RunArguments) -> "_Run":
        run = cls()
        run.rounds, run.done = args.rounds, 0
        run.warmup, run.thin = args.warmup, args.thin
        run.start_round, run.start_step = sampler.state.round, sampler.state.step
        run.keep_samples, run.on_divergence = args.keep_samples, args.on_divergence
        run.checkpoint, run.checkpoint_every = args.checkpoint, args.checkpoint_every
        run.chain_ids = sampler.active.copy()
        run.alive = np.arange(len(run.chain_ids), dtype=np.int64)
        run.dropped, run.uploads = {}, 0.0
        r, d = len(run.chain_ids), sampler.problem.dim
        if not args.keep_samples:
            run.draws = _NoDraws(r, d, sampler.dtype)
        elif args.store is not None:
            store = SampleStore.create(args.store, run.chain_ids, d, torch.empty(0, dtype=sampler.dtype).numpy().dtype,
                                       sampler.problem.parameter_names(), settings=sampler.settings)
            run.draws = _DiskDraws(store, sampler.device, sampler.dtype)
        else:
            run.draws = _MemoryDraws(r, cls.count_draws(args.rounds, args.warmup, args.thin), d, sampler.device,
                                     sampler.dtype)
        run.stats = StreamingStats(d, args.target, sampler.device) if args.stats else None
        return run

    def extend(self, rounds: int) -> None:
        self.rounds = rounds
        self.draws.reserve(self.count_draws(rounds, self.warmup, self.thin))

    def sync(self) -> None:
        self.draws.sync(self.dropped)
        if self.stats is not None:
            self.stats.flush()

    def close(self) -> None:
        self.draws.close(self.dropped)

    def add(self, theta: torch.Tensor, round: int) -> None:
        if self.stats is not None:
            self.stats.update(theta, round)
        if self.draws.kind == "none":
            return
        if len(self.alive) == len(self.chain_ids):
            row = theta
        else:
            row = torch.full((len(self.chain_ids), theta.shape[1]), float("nan"), device=theta.device, dtype=theta.dtype)
            row[torch.as_tensor(self.alive, device=theta.device)] = theta
        self.draws.add(row, round)

    def describe(self) -> dict:
        return {
            "rounds": self.rounds, "done": self.done, "warmup": self.warmup, "thin": self.thin,
            "start_round": self.start_round, "start_step": self.start_step, "keep_samples": self.keep_samples,
            "on_divergence": self.on_divergence, "checkpoint_every": self.checkpoint_every,
            "chain_ids": torch.as_tensor(self.chain_ids, dtype=torch.int64),
            "alive": torch.as_tensor(self.alive, dtype=torch.int64),
            "dropped": [[int(c), int(r), int(s)] for c, (r, s) in self.dropped.items()],
            "uploads": float(self.uploads),
            "draws": self.draws.record(self.checkpoint),
            "stats": None if self.stats is None else self.stats.state_dict(),
            "target": None if self.stats is None or self.stats.target is None
            else [torch.from_numpy(self.stats.target[0]), torch.from_numpy(self.stats.target[1])],
            "finished": bool(self.finished),
        }

    @classmethod
    def from_record(cls, sampler: FALD, rec: dict, checkpoint: Path) -> "_Run":
        run = cls()
        for key in ("rounds", "done", "warmup", "thin", "start_round", "start_step"):
            setattr(run, key, int(rec[key]))
        run.keep_samples, run.on_divergence = bool(rec["keep_samples"]), str(rec["on_divergence"])
        run.checkpoint_every = None if rec["checkpoint_every"] is None else int(rec["checkpoint_every"])
        run.checkpoint = checkpoint
        run.chain_ids = rec["chain_ids"].numpy().astype(np.int64)
        run.alive = rec["alive"].numpy().astype(np.int64)
        run.dropped = {int(c): (int(r), int(s)) for c, r, s in rec["dropped"]}
        run.uploads = float(rec["uploads"])
        r, d = len(run.chain_ids), sampler.problem.dim
        draws = rec["draws"]
        if draws["kind"] == "memory":
            mem = _MemoryDraws(r, cls.count_draws(run.rounds, run.warmup, run.thin), d, sampler.device, sampler.dtype)
            n = draws["samples"].shape[1]
            mem.buf[:, :n] = draws["samples"].to(device=sampler.device, dtype=sampler.dtype)
            mem.rounds[:n] = draws["rounds"].numpy()
            mem.count = n
            run.draws = mem
        elif draws["kind"] == "disk":
            path = Path(draws["path"])
            if not path.exists() and draws.get("relative"):  # the run's folder was moved: look beside the checkpoint
                path = checkpoint.resolve().parent / draws["relative"]
            store = SampleStore.open(path, writable=True)
            store.truncate(int(draws["draws"]), draws["crc32"])
            run.draws = _DiskDraws(store, sampler.device, sampler.dtype)
        else:
            run.draws = _NoDraws(r, d, sampler.dtype)
        run.stats = None
        if rec["stats"] is not None:
            target = None if rec["target"] is None else (rec["target"][0].numpy(), rec["target"][1].numpy())
            run.stats = StreamingStats(d, target, sampler.device)
            run.stats.load_state_dict(rec["stats"])
        run.finished = False
        return run


def _progress(total: int, progress: bool | None):
    if progress is None:
        progress = sys.stderr.isatty() and total >= 50
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="FA-LD", unit="round", mininterval=0.5, leave=False)
