"""The user-facing FA-LD runner: runs, checkpoints and resumes, keeps draws in memory or on disk.

One call of :meth:`FALD.run` is a *run*: rounds whose kept draws (after ``warmup``, every
``thin`` rounds) make one :class:`Trace`. Everything a run needs to continue bit for bit
lives at a round boundary (global parameters (R, d), step and round counters, the single
``torch.Generator``, a drift correction's state, the ledger, the run's plan and its draws or
their on-disk store): :meth:`FALD.run` with ``checkpoint=path`` writes exactly that, and
:meth:`FALD.resume` rebuilds the sampler from it.
"""

from __future__ import annotations

import functools
import os
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
    check_optional_bool,
    check_real,
)
from fedlangevin.fald.runner import resume as rs
from fedlangevin.fald.corrections import drift
from fedlangevin.fald.runner import loop
from fedlangevin.fald.warmup import session
from fedlangevin.fald.contracts import TRANSPORT, UPLOAD_CODEC, check_conforms
from fedlangevin.fald.core.engine import build
from fedlangevin.fald.core.streams import build_per_client
from fedlangevin.fald.warmup.acceptance import AutoStep
from fedlangevin.fald.warmup.mode import resolve_init
from fedlangevin.fald.core.kernel import FALDState, init_state
from fedlangevin.fald.core.participation import Participation, as_participation
from fedlangevin.fald.runner.replay import diagnose, where
from fedlangevin.fald.runner.base import Runner
from fedlangevin.fald.runner.runs import Run
from fedlangevin.fald.results.settings import Settings
from fedlangevin.problems.base import FederatedProblem, check_problem, check_weights
from fedlangevin.problems.clipped import Clipped

__all__ = ["FALD"]

#: Without ``checkpoint_every``: a checkpoint after the first round this many seconds after the last
#: (defined with the round loop, :mod:`fedlangevin.fald.runner.loop`)
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
    privacy : :class:`fedlangevin.privacy.RecordLevel` or :class:`~fedlangevin.privacy.ClientLevel`
        (``docs/privacy.md``): every local step's likelihood gradient is clipped (per example, or
        each client's sum) and minibatches are drawn without replacement, so the sensitivity the
        accountant uses is derived from the clip (``trace.privacy(delta=...)`` takes none). The
        kernel sees only the clipped gradients (:class:`fedlangevin.problems.clipped.Clipped`).
        A private run's warm-up reads only the broadcast iterates (``step_size="auto"`` from their
        spread across chains, M from their covariance scaled to lambda_max(M) = 1:
        :mod:`fedlangevin.fald.warmup.iterates`); ``step_size="paper"``, ``init="map"`` and a
        ``correction`` would query client data without noise and are refused before any work.

    Long runs (``docs/long-runs.md``): :meth:`run` takes ``checkpoint=``/``checkpoint_every=``
    (atomic checkpoints), ``store=`` (draws appended to disk, flat memory), ``stats=``/
    ``target=`` (streaming mean, covariance and W2 instead of or besides the draws),
    ``on_divergence=`` (``"raise"`` or ``"drop"`` the diverged chains); :meth:`resume`
    continues a checkpointed run bit for bit.
    """

    # The state FA-LD adds to the runner's (declared in fedlangevin.fald.runner.base.Runner), all here:
    # set in __init__, the warm-up's by session.configure / install / observe, the correction's by
    # drift.configure.
    correlation: float                 #: rho (eq. 14)
    participation: Participation       #: Full, SchemeI or SchemeII
    batch_size: int | None             #: per client and step (None: full gradients)
    noise_dtype: torch.dtype           #: of the injected normals
    upload: Any                        #: the upload codec (None: exact states)
    streams: str                       #: "single" or "per_client"
    map_result: Any                    #: init="map"'s mode search (None otherwise)
    adapt_step: bool                   #: step_size="auto": eta adapted in warm-up
    step_rule: Any                     #: its AutoStep (the target acceptance), None for a given eta
    adapt_matrix: bool                 #: M adapted in the first run's warm-up
    preconditioner: Any                #: the current M (None: the identity)
    preconditioner_norm: float         #: the largest lambda_max(M) run with (privacy accounting)
    adapted: bool                      #: an adaptive warm-up has finished (M and eta frozen)
    correction: Any                    #: the drift correction's settings record (None without one)
    privacy: Any                       #: RecordLevel / ClientLevel (clipped gradients), None: not private
    built_correction: Any              #: what its build() returned (None without one)
    _work_problem: FederatedProblem    #: the problem on the run's device and dtype

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
        privacy: Any = None,
    ) -> None:
        check_problem(problem)
        self.privacy = None if privacy is None else problem.check_privacy(privacy)
        if self.privacy is not None:
            _check_private(step_size, init, correction)
        self.local_steps = check_local_steps(local_steps)
        self.temperature = check_real("temperature", temperature, low=0.0, low_open=True)
        self.correlation = check_real("correlation", correlation, low=0.0, high=1.0)
        self.chains = check_int("chains", chains, 1)
        self.participation = as_participation(participation)
        weights = check_weights(problem.weights, problem.num_clients)
        self.participation.validate(weights)
        self.batch_size = problem.check_batch_size(batch_size)
        session.configure(self, problem, step_size, check_optional_bool("adapt", adapt), preconditioner, upload, streams)
        self.dtype = check_dtype("dtype", dtype)
        self.noise_dtype = check_dtype("noise_dtype", noise_dtype) if noise_dtype is not None else self.dtype
        self.device = check_device("device", device)
        self.seed = self._seeded(seed)
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
        #: what the kernel queries: the problem itself, or in a private run only its clipped gradients
        self._kernel_problem = problem if self.privacy is None else Clipped(problem, self.privacy)
        self._work_problem = self._kernel_problem.to(device=self.device, dtype=self.dtype)
        drift.configure(self, correction)
        self._kernel = self._build(upload)
        self.state: FALDState = init_state(initial)
        self._start()
        session.account_setup(self)  # the broadcast of a given M and the mode search's rounds and floats

    def _build(self, upload):
        if self.streams == "per_client":
            return build_per_client(self._kernel_problem, self.temperature, self.correlation, self.participation,
                                    self.batch_size, seed=self.seed, dtype=self.dtype, device=self.device,
                                    noise_dtype=self.noise_dtype)
        return build(self._kernel_problem, self.temperature, self.correlation, self.participation, self.batch_size,
                     dtype=self.dtype, device=self.device, noise_dtype=self.noise_dtype, upload=upload,
                     transport=self.transport, validated=True, correction=self.built_correction)

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
            privacy="none" if self.privacy is None else repr(self.privacy),
            adjacency="" if self.privacy is None else self.privacy.adjacency,
            clip=None if self.privacy is None else float(self.privacy.clip),
        )

    # -- FA-LD's hooks into the runner (fedlangevin.fald.runner.base) ------------------------------
    def _fixed_uploads(self) -> float | None:
        return self.participation.fixed_uploads(self.problem.num_clients)

    def _uploads(self, info) -> float:
        return self.participation.uploads(info.weights)

    def _step_arguments(self) -> dict:
        """M is a step argument like eta (the kernel is built once; warm-up changes M between rounds)."""
        return {} if self.streams == "per_client" else {"preconditioner": self.preconditioner}

    def _round_etas(self, rounds: int):
        return session.round_etas(self, rounds)

    def _observe(self, run: Run, theta: torch.Tensor) -> None:
        session.observe(self, run, theta)

    def _plan_warmup(self, rounds, warmup):
        return session.default_warmup(self, rounds, warmup)

    def _begin_warmup(self, warmup: int) -> float:
        return session.begin_adaptation(self, warmup)

    def _before_rounds(self) -> None:
        drift.ensure_state(self)  # a correction's one-off set-up, before the first round

    def _check_run(self, checkpoint) -> None:
        if checkpoint is not None and self.upload is not None:
            raise ValueError("checkpoint: a run with an upload codec cannot be checkpointed (the codec and its "
                             "random stream are not part of the checkpoint); run without checkpoint=")

    def _per_round_floats(self) -> tuple[float, float]:
        return drift.per_round_floats(self)

    def _keep_field(self, name: str, value, keep: torch.Tensor):
        if name == "correction":
            return drift.keep_chains(self, value, keep)
        return super()._keep_field(name, value, keep)

    def _diagnose(self, state: FALDState, gen_state: torch.Tensor, etas: list[float], bad_rows: np.ndarray):
        """Replay the round step by step (:mod:`fedlangevin.fald.runner.replay`)."""
        replay = self._kernel if self.upload is None else self._build(None)
        return diagnose(functools.partial(replay.step, **self._step_arguments()), self.state, gen_state, etas, bad_rows, self.active, self._work_problem,
                        num_clients=self.problem.num_clients, uses_upload=self.upload is not None)

    def _where(self, round: int, step: int, causes: dict) -> str:
        return where(round, step, self.state.step, self.local_steps, causes)

    def _record(self) -> dict:
        return rs.fald_record(self)

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


def _check_private(step_size: Any, init: Any, correction: Any) -> None:
    """Refuse, before any work, what would query client data without noise in a private run
    (``step_size="auto"`` and ``adapt`` are private there: they read the broadcast iterates only,
    :mod:`fedlangevin.fald.warmup.iterates`)."""
    if isinstance(step_size, AutoStep) and step_size.target_accept != "auto":
        raise ValueError(f"privacy: step_size={step_size!r} aims at an acceptance computed from the clients' exact "
                         "energies and gradients, outside the private mechanism; use step_size='auto' (a private "
                         "run adapts eta from the broadcast iterates), a number, a sequence or a schedule")
    if isinstance(step_size, str) and step_size != "auto":
        raise ValueError(
            f"privacy: step_size={step_size!r} is computed from the smoothness and convexity constants of the data "
            "without noise, outside the private mechanism; use 'auto' (adapted from the broadcast iterates), a "
            "number, a sequence or a schedule")
    if isinstance(init, str):
        raise ValueError(f"privacy: init={init!r} searches the mode with noiseless gradients and Hessians; start "
                         "from zeros, prior draws or a value of your own")
    if correction is not None:
        raise ValueError("privacy: a drift correction releases noiseless data-dependent quantities (reference "
                         "gradients, surrogates, memories); run without correction=")
