"""The user-facing FA-LD runner: runs, checkpoints and resumes, keeps draws in memory or on disk.

One call of :meth:`FALD.run` is a *run*: rounds whose kept draws (after ``warmup``, every
``thin`` rounds) make one :class:`Trace`. Everything a run needs to continue bit for bit
lives at a round boundary (global parameters (R, d), step and round counters, the single
``torch.Generator``, a drift correction's state, the ledger, the run's plan and its draws or
their on-disk store): :meth:`FALD.run` with ``checkpoint=path`` writes exactly that, and
:meth:`FALD.resume` rebuilds the sampler from it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Sequence

import numpy as np
import torch

from fedlangevin._validation import check_init
from fedlangevin.fald.engine import assemble
from fedlangevin.fald.kernel import FALDState, init_state
from fedlangevin.fald.node import NODE
from fedlangevin.federation.noise import NoiseTally
from fedlangevin.federation.participation import Full, Participation
from fedlangevin.federation.preconditioning import broadcast_floats, spectral_norm
from fedlangevin.fald.per_client import build_per_client
from fedlangevin.corrections import drift
from fedlangevin.runner.results.settings import Settings
from fedlangevin.runner import loop
from fedlangevin.fald import resume as rs
from fedlangevin.fald import setting_noise
from fedlangevin.runner.base import Runner
from fedlangevin.fald.config import Config
from fedlangevin.runner.replay import diagnose, where
from fedlangevin.runner.runs import Run
from fedlangevin.warmup import auto_groups
from fedlangevin.warmup import companions as kcheck
from fedlangevin.warmup import local_steps as kphase
from fedlangevin.warmup import session
from fedlangevin.warmup.mode import resolve_init
from fedlangevin.problems.base import FederatedProblem, check_problem
from fedlangevin.problems.clipped import Clipped

__all__ = ["FALD"]

#: Without ``checkpoint_every``: a checkpoint after the first round this many seconds after the last
#: (defined with the round loop, :mod:`fedlangevin.runner.loop`)
CHECKPOINT_SECONDS = loop.CHECKPOINT_SECONDS


class FALD(Runner):
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
    local_steps : K >= 1, local steps between synchronisations; ``"auto"`` (or
        :class:`~fedlangevin.warmup.local_steps.AutoLocalSteps` with its ladder, tolerance and
        confidence): the largest K of the ladder 1, 2, 5, 10, 20, 50 whose local-step bias,
        measured in the warm-up against K = 1, is within 0.1 posterior sd at 95 % confidence,
        frozen for the rest of the run (``docs/adaptation.md``, "Local steps"; needs chains >= 2).
    temperature : tau > 0; the target is pi ∝ exp(-f / tau).
    correlation : rho in [0, 1] between the clients' injected noises (eq. 14). rho = 0 is
        Alg. 1 with independent noise; rho = 1 shares one noise vector (no privacy).
    participation : :func:`Full` (default), :class:`SchemeI` (S draws with replacement,
        probabilities p_c) or :class:`SchemeII` (S uniform without replacement, balanced data).
        Their private noise is calibrated to the random weights by default (``noise="calibrated"``;
        ``noise="paper"``: eq. 10's, which inflates the temperature by E[sum_c w_c^2 / p_c]; see
        :mod:`fedlangevin.federation.participation`).
    chains : R >= 1 independent replicate chains, simulated together (default 4: R-hat and the
        warm-up's adaptation from the chains' spread need several; one chain gives a NaN R-hat,
        and diagnostics of fewer than 4 warn, ``docs/adaptation.md``, "How many chains").
        Privacy: every chain is a release (``trace.privacy`` counts them all).
    batch_size : minibatch size per client and step (``None`` = full gradients). With random
        participation or minibatches, the end of every run with 50 or more kept draws measures the
        noise they add to the averaged drift and warns where it widens a posterior sd by more than
        5 % (:mod:`fedlangevin.fald.setting_noise`, ``sampler.setting_noise``; ``docs/realistic.md``).
    init : initial global parameter, shape (d,) or (R, d) (e.g. prior draws); default zeros;
        ``"map"``: the MAP of a federated Newton search (:mod:`fedlangevin.warmup.mode`).
    device, dtype : where and in which precision the state lives (float32 or float64).
    seed : seeds the single ``torch.Generator`` that drives all randomness (noise,
        minibatches, participation); the same seed on the same device reproduces a run
        bit for bit. ``None`` picks a random seed (recorded in ``trace.settings``).
    noise_dtype : precision of the standard normals of the injected noise (float32 by
        default: about 4x faster to draw on CPU; see :mod:`fedlangevin.federation.noise` for why
        this does not matter statistically). ``torch.float64`` for double-precision normals.
    upload : an optional codec ``upload(beta, theta, generator) -> beta'`` applied to the client
        states (R, N, d) before the server average, e.g. quantized uploads
        (:class:`fedlangevin.compression.QuantizedUpdateUpload`, ``docs/comparison.md``); ``None``
        (default): the exact states. Runs with a codec cannot be checkpointed.
    streams : ``"single"`` (default): one generator seeded with ``seed`` drives every draw;
        ``"per_client"``: a federated deployment's layout (:mod:`fedlangevin.federation.streams`:
        (seed, round) and (seed, client, round) streams; slower), the samples of
        :mod:`fedlangevin.flower` with the same seed. Not with ``upload``.
    transport : a distributed run's synchronisation, e.g. :class:`fedlangevin.distributed.ProcessGroup`
        (``docs/distributed.md``): this process holds the transport's clients; only its writing
        process (rank 0) keeps draws, checkpoints and stores. ``None``: one process, every client.
    preconditioner : a fixed M, (d, d) or (d,) (diagonal) (:mod:`fedlangevin.federation.preconditioning`).
    adapt : adapt M in the first run's warm-up (default ``rounds // 2``), then freeze it (default:
        with ``step_size="auto"`` only, and not with ``streams="per_client"``).
    correction : a drift correction against heterogeneous clients (``docs/drift.md``):
        ``"control_variates"``, ``"conducive"``, ``"qlsd++"``, their settings records or None. Control
        variates also remove most of the client-sampling noise of random participation and, with
        ``batch_size``, centre each client's minibatch gradient at the reference point
        (``docs/realistic.md``). Default ``"auto"``: control variates under random participation or
        minibatches at K = 1 in one process, not in a private run, none otherwise
        (:func:`fedlangevin.corrections.drift.auto_choice`; ``sampler.correction`` says which).
    check_local_bias : with a fixed K > 1 (default True, chains >= 2), two groups of R K = 1
        companion chains (one step of K eta, two of K eta / 2 per round, coupled to the sampler's
        round noise) run beside the sampler's once M and eta are frozen (after the warm-up, which
        adapts as without the check; the sampler's draws are the same bits): at the end of every
        run with 50 or more kept rounds, a ``UserWarning`` where K's means are further than 0.1
        posterior sd from the companions' extrapolation to step 0 on evidence
        (:mod:`fedlangevin.warmup.companions`; the evidence is ``trace.local_step_bias``).
        Adds 3/K to the sampling's gradient work and four times its floats per round. False: no
        check (e.g. a paper's fixed K).
    privacy : :class:`fedlangevin.privacy.RecordLevel` or :class:`~fedlangevin.privacy.ClientLevel`
        (``docs/privacy.md``): every local step's likelihood gradient is clipped (per example, or
        each client's sum) and minibatches are drawn without replacement, so the sensitivity the
        accountant uses is derived from the clip (``trace.privacy(delta=...)`` takes none). The
        kernel sees only the clipped gradients (:class:`fedlangevin.problems.clipped.Clipped`).
        A private run's warm-up reads only the broadcast iterates (``step_size="auto"`` from their
        spread across chains, M from their covariance scaled to lambda_max(M) = 1:
        :mod:`fedlangevin.warmup.iterates`); ``step_size="paper"``, ``init="map"`` and a
        ``correction`` would query client data without noise and are refused before any work.

    Long runs (``docs/long-runs.md``): :meth:`run` takes ``checkpoint=``/``checkpoint_every=``
    (atomic checkpoints), ``store=`` (draws appended to disk, flat memory), ``stats=``/
    ``target=`` (streaming mean, covariance and W2 instead of or besides the draws),
    ``on_divergence=`` (``"raise"`` or ``"drop"`` the diverged chains); :meth:`resume`
    continues a checkpointed run bit for bit.
    """

    #: the family as a transport with remote clients runs it (:mod:`fedlangevin.federation.nodes`)
    node = NODE

    # The state FA-LD adds to the runner's (declared in fedlangevin.runner.base.Runner), all here:
    # the configuration (validated once, frozen) and what changes during runs, set by __init__ and
    # applied in one place (_apply: the warm-up's M, eta and chain resets; the correction's state).
    config: Config                     #: the arguments, validated once (fedlangevin.fald.config)
    map_result: Any                    #: init="map"'s mode search (None otherwise)
    preconditioner: Any                #: the current M (None: the identity), a step argument of the kernel
    preconditioner_norm: float         #: the largest lambda_max(M) run with (privacy accounting)
    adapted: bool                      #: an adaptive warm-up has finished (M and eta frozen)
    built_correction: Any              #: the correction's kernel side, what its build() returned (None without one)
    measurement: Any                   #: the local-step phase in progress (warmup.local_steps), or None
    local_step_bias: Any               #: its record once made (trace.local_step_bias), or None
    companions: Any                    #: a fixed K's companion chains (warmup.companions), or None
    setting_noise: Any = None          #: the last run's check of its participation / minibatch setting (fald.setting_noise)
    _work_problem: FederatedProblem    #: the problem on the run's device and dtype

    def __init__(
        self,
        problem: FederatedProblem,
        step_size: float | str | Sequence[float] | Callable[[int], float] = "auto",
        local_steps: int | str = 1,
        temperature: float = 1.0,
        correlation: float = 0.0,
        participation: Participation | str | None = None,
        chains: int = 4,
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
        correction: Any = "auto",
        privacy: Any = None,
        check_local_bias: bool = True,
    ) -> None:
        check_problem(problem)
        self.config = config = Config.of(
            problem, step_size=step_size, local_steps=local_steps, temperature=temperature, correlation=correlation,
            participation=participation, chains=chains, batch_size=batch_size, dtype=dtype, seed=self._seeded(seed),
            noise_dtype=noise_dtype, upload=upload, streams=streams, transport=transport,
            preconditioner=preconditioner, adapt=adapt, correction=correction, privacy=privacy, device=device,
            init=init, check_local_bias=check_local_bias)
        self.problem = problem
        self.local_steps, self.temperature, self.chains = config.local_steps, config.temperature, config.chains
        self.dtype, self.device, self.seed, self.transport = config.dtype, config.device, config.seed, config.transport
        self.schedule = config.schedule
        self.preconditioner = config.preconditioner
        self.preconditioner_norm = spectral_norm(config.preconditioner, problem.dim)
        self.adapter, self.adapted = None, False
        self.measurement, self.local_step_bias, self.anchor = None, None, (0, 0)
        self.companions, self._companion_kernel = None, None
        #: a budgeted private run: its start ("map": the private MAP search) and, once run, its plan
        self.budget, self._budget_init = None, None
        if self.privacy is not None and self.privacy.budgeted:
            self._budget_init = "map" if init is None or isinstance(init, str) else init
            init = None if isinstance(init, str) else init
        init, self.map_result = resolve_init(init, problem)  # map_result: init="map"'s mode search
        initial = check_init(init, self.chains, problem.dim, self.dtype, self.device)
        #: what the kernel queries: the problem itself, or in a private run only its clipped gradients
        self._kernel_problem = problem if self.privacy is None else Clipped(problem, self.privacy)
        self._work_problem = self._kernel_problem.to(device=self.device, dtype=self.dtype)
        self.built_correction = drift.build(config.correction, problem, config.dtype, config.device, config.upload)
        self._kernel = self._build(config.upload)
        self.state: FALDState = init_state(initial)
        self._start()
        self._apply(session.setup_changes(config, problem, self.map_result))  # a given M, the mode search

    # the configuration's fields FA-LD's modules read (fedlangevin.fald.config.Config)
    correlation = property(lambda self: self.config.correlation, doc="rho (eq. 14)")
    participation = property(lambda self: self.config.participation, doc="Full, SchemeI or SchemeII")
    batch_size = property(lambda self: self.config.batch_size, doc="per client and step (None: full gradients)")
    noise_dtype = property(lambda self: self.config.noise_dtype, doc="of the injected normals")
    upload = property(lambda self: self.config.upload, doc="the upload codec (None: exact states)")
    streams = property(lambda self: self.config.streams, doc='"single" or "per_client"')
    adapt_step = property(lambda self: self.config.adapt_step, doc='step_size="auto": eta adapted in warm-up')
    step_rule = property(lambda self: self.config.step_rule, doc="the AutoStep of an adapted eta (None: a given eta)")
    adapt_matrix = property(lambda self: self.config.adapt_matrix, doc="M adapted in the first run's warm-up")
    correction = property(lambda self: self.config.correction, doc="the drift correction's settings (None: none)")
    privacy = property(lambda self: self.config.privacy, doc="RecordLevel / ClientLevel, None: not private")
    auto_local_steps = property(lambda self: self.config.auto_local_steps,
                                doc='local_steps="auto"\'s AutoLocalSteps (None: a fixed K)')

    def _build(self, upload):
        if self.streams == "per_client":
            return build_per_client(self._kernel_problem, self.temperature, self.correlation, self.participation,
                                    self.batch_size, seed=self.seed, dtype=self.dtype, device=self.device,
                                    noise_dtype=self.noise_dtype)
        return assemble(self._kernel_problem, self.temperature, self.correlation, self.participation,
                        self.batch_size, dtype=self.dtype, device=self.device, noise_dtype=self.noise_dtype,
                        upload=upload, transport=self.transport, correction=self.built_correction)

    @property
    def settings(self) -> Settings:
        """The typed settings record (also a read-only mapping of the original keys), derived from
        :attr:`config` and the schedule and M of now."""
        return self.config.settings(self.problem, schedule=self.schedule, preconditioner=self.preconditioner,
                                    preconditioner_norm=self.preconditioner_norm,
                                    correction_active=self.built_correction is not None, local_steps=self.local_steps)

    # -- FA-LD's hooks into the runner (fedlangevin.runner.base) ------------------------------
    def _fixed_uploads(self) -> float | None:
        return self.participation.fixed_uploads(self.problem.num_clients)

    def _uploads(self, info) -> float:
        return self.participation.uploads(info.weights)

    def _step_arguments(self) -> dict:
        """M is a step argument like eta (the kernel is built once; warm-up changes M between rounds);
        while a fixed K's coupled companions run, a fresh tally of the round's normals."""
        if self.streams == "per_client":
            return {}
        coupled = self.companions is not None and self.companions.extrapolates
        return {"preconditioner": self.preconditioner, **({"tally": NoiseTally(self.local_steps)} if coupled else {})}

    def _round_etas(self, rounds: int):
        return session.round_etas(self, rounds, kphase.round_etas(self))

    def _round_bound(self) -> int:
        return kphase.round_bound(self)

    def _observing(self) -> bool:
        return self.adapter is not None or self.measurement is not None or self.companions is not None

    def _observe(self, run: Run, theta: torch.Tensor, info=None, arguments=None) -> None:
        if self.companions is not None:  # a round beside the sampler's (M and eta frozen)
            if self._companion_kernel is None:  # the sampler's FA-LD (M given per round), built once
                self._companion_kernel = assemble(
                    self._kernel_problem, self.temperature, self.correlation, self.participation, self.batch_size,
                    dtype=self.dtype, device=self.device, noise_dtype=self.noise_dtype)
            tally = (arguments or {}).get("tally")
            coupling = None if tally is None else (tally, info.weights)
            look = None if self.companions.rule is None else auto_groups.look
            self._apply(kcheck.update(self.companions, self._companion_kernel, theta, self.preconditioner,
                                      self.participation.uploads, self.problem.num_clients, coupling, look,
                                      state_of=init_state), run)
        if self.adapter is not None:
            self._apply(session.update(self.adapter, theta, self.preconditioner), run)
            if kcheck.due(self):  # the warm-up ended here: the companions start at its last iterates
                self._apply(kcheck.start(self), run)
        if self.measurement is not None:  # "auto": its companions start, or decide, here
            self._apply(auto_groups.measure(self.measurement, self), run)

    def _plan_budget(self, rounds, warmup) -> None:
        """A budgeted run's plan (:mod:`fedlangevin.fald.budget`), made when its first run starts:
        the private start and clip, the step size; applied to the sampler."""
        from fedlangevin.fald import budget as fb
        from fedlangevin.warmup.session import auto_schedule

        total, gen = fb.run_length(self, rounds, warmup)
        plan = fb.plan(self.problem, self.privacy, rounds=total, chains=self.chains, local_steps=self.local_steps,
                       batch_size=self.batch_size, participation=self.participation, temperature=self.temperature,
                       correlation=self.correlation, init=self._budget_init, generator=gen)
        _, schedule = auto_schedule(plan.step_size, self.problem)
        privacy = fb.resolved(self.privacy, plan)
        self.config = dataclasses.replace(self.config, privacy=privacy, schedule=schedule)
        self.schedule, self.budget = schedule, plan
        self._kernel_problem = Clipped(self.problem, privacy)
        self._work_problem = self._kernel_problem.to(device=self.device, dtype=self.dtype)
        self._kernel = self._build(self.upload)
        if plan.start is not None and isinstance(self._budget_init, str):
            theta = plan.start.theta.to(device=self.device, dtype=self.dtype)
            self.state = dataclasses.replace(self.state, theta=theta.expand_as(self.state.theta).clone())

    def _plan_warmup(self, rounds, warmup):
        if self._budget_init is not None:
            self._plan_budget(rounds, warmup)
        if self.measurement is not None:  # a run stopped in the measurement: the next one starts afresh
            self._apply(session.Changes(measurement=None, companions=None, local_steps=self.local_steps))
        adapting, warmup = session.default_warmup(self, rounds, kphase.default_warmup(self, rounds, warmup))
        return adapting or kphase.due(self), warmup

    def _begin_warmup(self, warmup: int) -> float:
        """The run's warm-up: the local-step phase (where due) takes its second half, an adaptive
        warm-up (where due) the rest."""
        adapting = (self.adapt_step or self.adapt_matrix) and not self.adapted
        rounds, measured = kphase.init(self, warmup) if kphase.due(self) else (warmup, session.Changes())
        sent = 0.0
        if adapting:
            self.adapter, changes = session.init(self, rounds)
            sent = self._apply(changes)
        self._apply(measured)
        return sent

    def _before_rounds(self) -> None:
        """A correction's one-off set-up, before the first round (a resumed sampler has its state)."""
        if self.built_correction is not None and self.state.correction is None:
            self._apply(drift.init(self.built_correction, self.state.theta, self.map_result))
        if kcheck.due(self):  # nothing adapts: the companions start with the first round
            self._apply(kcheck.start(self))

    def _end_run(self, run: Run) -> None:
        """The companions' verdict (and its warning) from everything kept so far."""
        if self.companions is not None and self.companions.rule is None:
            self._apply(session.Changes(local_bias=kcheck.verdict(self.companions)))
        if run.draws.kind != "none" and (not isinstance(self.participation, Full) or self.batch_size is not None):
            draws = run.draws.view()[0]
            self.setting_noise = setting_noise.check(self, draws)
            setting_noise.warn(self.setting_noise, self.problem.parameter_names())

    def _check_run(self, checkpoint) -> None:
        if checkpoint is not None and self._budget_init is not None:
            raise ValueError("checkpoint: a budgeted private run is planned for one run and is not checkpointed; "
                             "run without checkpoint=")
        if checkpoint is not None and self.upload is not None:
            raise ValueError("checkpoint: a run with an upload codec cannot be checkpointed (the codec and its "
                             "random stream are not part of the checkpoint); run without checkpoint=")

    def _per_round_floats(self) -> tuple[float, float]:
        return drift.per_round_floats(self.correction, self.built_correction, self.problem.num_clients,
                                      self.problem.dim)

    def _keep_field(self, name: str, value, keep: torch.Tensor):
        if name == "correction":
            return drift.keep_chains(self.built_correction, value, keep)
        return super()._keep_field(name, value, keep)

    def _diagnose(self, state: FALDState, gen_state: torch.Tensor, etas: list[float], bad_rows: np.ndarray):
        """Replay the round step by step (:mod:`fedlangevin.runner.replay`)."""
        replay = self._kernel if self.upload is None else self._build(None)
        self._round_k = len(etas)  # the K of the round that diverged (a measurement's may differ from local_steps)
        return diagnose(functools.partial(replay.step, **self._step_arguments()), self.state, gen_state, etas,
                        bad_rows, self.active, self._work_problem, num_clients=self.problem.num_clients,
                        uses_upload=self.upload is not None)

    def _where(self, round: int, step: int, causes: dict) -> str:
        return where(round, step, self.state.step, getattr(self, "_round_k", self.local_steps), causes)

    def _record(self) -> dict:
        return rs.fald_record(self)

    # -- the one place the warm-up's and the correction's values are applied ---------------------------
    def _apply(self, changes: session.Changes, run: Run | None = None) -> float:
        """Apply what :mod:`~fedlangevin.warmup.session` (init, update) or a correction's set-up
        (:func:`~fedlangevin.corrections.drift.init`) returned: a new M (broadcast to every
        client: counted), eta from the current step on, chains put back, a correction's state, the
        set-up's rounds and floats (in the ledger, and in ``run``'s totals when given), the end of
        the warm-up, the local-step phase's state, K from the next round on and the measured bias
        (with its warning). Returns the floats of a new M's broadcast."""
        led, problem, sent = self.ledger, self.problem, 0.0
        if changes.preconditioner is not session.KEEP:
            self.preconditioner = changes.preconditioner
            self.preconditioner_norm = max(self.preconditioner_norm, spectral_norm(self.preconditioner, problem.dim))
            sent = float(problem.num_clients * broadcast_floats(self.preconditioner, problem.dim))
        if changes.step_size is not None and self.adapt_step:
            self.schedule.set(self.state.step, changes.step_size)
        for name, floats in (("setup_floats", sent), ("setup_floats", changes.floats_down),
                             ("setup_floats_up", changes.floats_up)):
            self._count_setup(run, name, floats)
        for name, rounds in changes.rounds.items():
            led[name] += rounds
        if changes.theta is not None:
            self.state = dataclasses.replace(self.state, theta=changes.theta)
        if changes.correction is not None:
            self.state = dataclasses.replace(self.state, correction=changes.correction)
        if changes.finished:
            self.adapter, self.adapted = None, True
        self._apply_local_steps(changes)
        return sent

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
            instead of raising :class:`~fedlangevin.runner.io.checkpoint.CheckpointError`.
        transport : of a distributed run (every process resumes from rank 0's checkpoint with
            the same number of processes); a process that does not write (``transport.writes``
            false) continues an unfinished run without its draws or checkpoint.
        correction, preconditioner : needed only when the run used a drift correction or a
            preconditioner of your own class (:mod:`fedlangevin.federation.contracts`): no code is
            loaded from a checkpoint, so they are given again and checked against what it
            stored (the correction's ``record()``, the preconditioner's M); their state
            (tensors) comes from the checkpoint.
        """
        return rs.resume_sampler(cls, path, problem=problem, step_size=step_size, participation=participation,
                                 device=device, fallback=fallback, transport=transport, correction=correction,
                                 preconditioner=preconditioner)

