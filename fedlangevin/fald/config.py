"""FA-LD's configuration, validated once: :class:`Config`.

``FALD(problem, ...)``'s arguments are checked here, once, before any work (a ``ValueError``
naming the argument and its allowed range), and become one frozen record. The runner reads its
settings from it, builds its kernel from it (no second validation: :func:`~fedlangevin.fald.engine.assemble`)
and derives the :class:`~fedlangevin.runner.results.settings.Settings` of every trace, checkpoint
and store from it (:meth:`Config.settings`), together with what changes during a run: the
step-size schedule (adapted in warm-up), the current M and the largest lambda_max(M) run with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedlangevin._validation import (
    check_bool, check_device, check_dtype, check_fits, check_int, check_optional_bool, check_real, check_seed,
)
from fedlangevin.federation.contracts import TRANSPORT, UPLOAD_CODEC, check_conforms
from fedlangevin.federation.participation import Participation, as_participation
from fedlangevin.federation.preconditioning import as_preconditioner
from fedlangevin.corrections import drift
from fedlangevin.corrections.drift import QLSDPlusPlus
from fedlangevin.runner.results.settings import Settings
from fedlangevin.warmup.acceptance import AutoStep
from fedlangevin.warmup.local_steps import AutoLocalSteps, as_local_steps, eligible
from fedlangevin.warmup.session import auto_schedule
from fedlangevin.problems.base import FederatedProblem, check_weights

__all__ = ["Config"]


@dataclass(frozen=True)
class Config:
    """What an FA-LD sampler runs with, validated once (:meth:`of`; the arguments are those of
    :class:`fedlangevin.FALD`, which documents them).

    ``schedule`` is the step-size schedule the sampler starts with (for ``step_size="auto"`` an
    :class:`~fedlangevin.federation.schedules.AdaptedSteps` that warm-up fills in: the sampler's
    ``schedule`` is this object); ``adapt_step``: eta is estimated in warm-up, by ``step_rule``
    (the :class:`~fedlangevin.warmup.acceptance.AutoStep`; None for a given eta);
    ``adapt_matrix``: M is adapted in the first run's warm-up; ``preconditioner``: the M given
    (None: I); ``correction``: the drift correction's settings record (None: none); ``privacy``:
    the mechanism (None: the run clips nothing); ``local_steps``: the K the sampler starts with (1
    for ``"auto"``, whose rule is ``auto_local_steps``: an
    :class:`~fedlangevin.warmup.local_steps.AutoLocalSteps`, None for a fixed K);
    ``check_local_bias``: a fixed K > 1 is measured against K = 1 in warm-up (and warns).
    """

    local_steps: int
    temperature: float
    correlation: float
    participation: Participation
    chains: int
    batch_size: int | None
    dtype: torch.dtype
    noise_dtype: torch.dtype
    device: torch.device
    seed: int
    upload: Any
    streams: str
    transport: Any
    schedule: Any
    adapt_step: bool
    step_rule: AutoStep | None
    adapt_matrix: bool
    preconditioner: Any
    correction: Any
    privacy: Any
    auto_local_steps: AutoLocalSteps | None = None
    check_local_bias: bool = False

    @classmethod
    def of(cls, problem: FederatedProblem, *, step_size: Any = "auto", local_steps: Any = 1, temperature: Any = 1.0,
           correlation: Any = 0.0, participation: Any = None, chains: Any = 1, batch_size: Any = None,
           dtype: Any = torch.float64, seed: int, noise_dtype: Any = torch.float32, upload: Any = None,
           streams: Any = "single", transport: Any = None, preconditioner: Any = None, adapt: Any = None,
           correction: Any = "auto", privacy: Any = None, device: Any = None, init: Any = None,
           check_local_bias: Any = True) -> "Config":
        """Every argument checked, in the order a user reads them; the combinations that are not
        supported refused by name, before any work (``seed`` is the one already drawn; ``init`` is
        not part of the record, only checked against ``privacy``: the sampler resolves the start)."""
        privacy = None if privacy is None else problem.check_privacy(privacy)
        if privacy is not None and privacy.budgeted:
            check_budgeted(step_size, init, correction, adapt, local_steps, streams, transport, upload, preconditioner)
            step_size, adapt = PLACEHOLDER_STEP, False  # planned when the run starts (fedlangevin.fald.budget)
        elif privacy is not None:
            check_private(step_size, init, correction)
        local_steps, auto_local_steps = as_local_steps(local_steps)
        check_local_bias = check_bool("check_local_bias", check_local_bias)
        if auto_local_steps is not None and not check_local_bias:
            raise ValueError("check_local_bias=False turns off the check of a fixed K; local_steps='auto' measures "
                             "the bias to choose K: give local_steps a number, or leave check_local_bias=True")
        temperature = check_real("temperature", temperature, low=0.0, low_open=True)
        correlation = check_real("correlation", correlation, low=0.0, high=1.0)
        chains = check_int("chains", chains, 1)
        participation = as_participation(participation)
        participation.validate(check_weights(problem.weights, problem.num_clients))
        batch_size = problem.check_batch_size(batch_size)
        adapt = check_optional_bool("adapt", adapt)
        adapt_step, schedule = auto_schedule(step_size, problem)
        step_rule = (step_size if isinstance(step_size, AutoStep) else AutoStep()) if adapt_step else None
        adapt_matrix = (adapt_step and streams != "per_client") if adapt is None else adapt
        if streams == "per_client" and (adapt_matrix or preconditioner is not None):
            raise ValueError("preconditioner / adapt: a preconditioner is not available with streams='per_client'; "
                             "use streams='single', or adapt=False without a preconditioner")
        if adapt_matrix and upload is not None:
            raise ValueError("adapt: warm-up adaptation is not available with an upload codec; pass adapt=False "
                             "and a numeric step_size")
        preconditioner = None if preconditioner is None else as_preconditioner(preconditioner, problem.dim,
                                                                               "preconditioner")
        dtype = check_dtype("dtype", dtype)
        noise_dtype = check_dtype("noise_dtype", noise_dtype) if noise_dtype is not None else dtype
        device = check_device("device", device)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        check_fits("chains", chains * problem.num_clients * problem.dim * itemsize, device,
                   f"the client states of {chains} chains x {problem.num_clients} clients x d = {problem.dim}",
                   "use fewer chains")
        if upload is not None:
            check_conforms(upload, UPLOAD_CODEC, "upload")
        codec_gen = getattr(upload, "generator", None)
        if isinstance(codec_gen, torch.Generator) and codec_gen.device.type != device.type:
            raise ValueError(f"upload: the codec's generator is on {codec_gen.device}, the sampler runs on "
                             f"{device}; give the codec a generator on {device.type}")
        if streams not in ("single", "per_client"):
            raise ValueError(f"streams must be 'single' or 'per_client'; got {streams!r}")
        if streams == "per_client" and upload is not None:
            raise ValueError("upload: an upload codec is not supported with streams='per_client'; use streams='single'")
        if transport is not None:
            check_conforms(transport, TRANSPORT, "transport")
        if transport is not None and (upload is not None or streams == "per_client"):
            raise ValueError("transport: not supported with an upload codec or streams='per_client' (both assume "
                             "one process holding every client); use upload=None, streams='single'")
        correction = drift.resolve(correction, problem, private=privacy is not None, participation=participation,
                                   batch_size=batch_size, local_steps="auto" if auto_local_steps else local_steps,
                                   one_process=transport is None and streams == "single", init=init)
        if correction is not None and (transport is not None or streams != "single"):
            raise ValueError("correction: drift corrections run in one process with streams='single' (not with a "
                             "transport or streams='per_client')")
        if isinstance(correction, QLSDPlusPlus) and upload is not None and not hasattr(upload, "bits"):
            raise ValueError("correction='qlsd++' with an upload codec needs a quantising codec of the form "
                             "theta + Q(beta - theta) with bits(d) (e.g. QuantizedUpdateUpload)")
        config = cls(local_steps=local_steps, temperature=temperature, correlation=correlation,
                     participation=participation, chains=chains, batch_size=batch_size, dtype=dtype,
                     noise_dtype=noise_dtype, device=device, seed=check_seed("seed", seed), upload=upload,
                     streams=streams, transport=transport, schedule=schedule, adapt_step=adapt_step,
                     step_rule=step_rule, adapt_matrix=adapt_matrix, preconditioner=preconditioner,
                     correction=correction, privacy=privacy, auto_local_steps=auto_local_steps,
                     check_local_bias=check_local_bias)
        if auto_local_steps is not None and (why := eligible(config)):
            raise ValueError(f"local_steps='auto' measures the local-step bias in warm-up, which is not available "
                             f"with {why}; give local_steps a number")
        return config

    def settings(self, problem: FederatedProblem, *, schedule: Any, preconditioner: Any, preconditioner_norm: float,
                 correction_active: bool, local_steps: int | None = None) -> Settings:
        """The :class:`Settings` record of a sampler with this configuration, now: its ``schedule``
        (eta, adapted in warm-up), its current M (``preconditioner``), the largest lambda_max(M) it
        has run with, whether the correction is active (not switched off) and its K now
        (``local_steps``: ``"auto"``'s choice once made; default: the configured one)."""
        rule, private = self.participation, self.privacy
        return Settings(
            local_steps=self.local_steps if local_steps is None else int(local_steps),
            auto_local_steps=self.auto_local_steps is not None, check_local_bias=self.check_local_bias, temperature=self.temperature, correlation=self.correlation,
            participation=repr(rule), scheme=rule.scheme, num_sampled=rule.num_sampled, chains=self.chains,
            participation_noise=str(rule.noise),
            num_clients=problem.num_clients, dim=problem.dim, batch_size=self.batch_size, step_size=repr(schedule),
            seed=self.seed, device=str(self.device), dtype=str(self.dtype).replace("torch.", ""),
            noise_dtype=str(self.noise_dtype).replace("torch.", ""),
            upload="exact" if self.upload is None else repr(self.upload), streams=self.streams,
            preconditioner="none" if preconditioner is None else repr(preconditioner), adapt=self.adapt_matrix,
            auto_step_size=self.adapt_step, preconditioner_norm=float(preconditioner_norm),
            correction="none" if self.correction is None else repr(self.correction),
            correction_releases=self.correction.releases if correction_active else "",
            privacy="none" if private is None else repr(private),
            adjacency="" if private is None else private.adjacency,
            clip=None if private is None or private.clip is None else float(private.clip),
            privacy_spent=() if private is None else tuple(private.spent),
        )


#: a budgeted run's step size before its plan (never run: the plan replaces it before the first round)
PLACEHOLDER_STEP = 1e-300


def check_budgeted(step_size, init, correction, adapt, local_steps, streams, transport, upload,
                   preconditioner=None) -> None:
    """What a budgeted private run (``privacy=RecordLevel(epsilon=..., delta=...)``) plans itself,
    refused when given: the step size (planned), adaptation and a preconditioner (M scales the
    sensitivity by sqrt(lambda_max(M)), which the plan, made for M = I, does not count), a drift
    correction, the local-step search, per-client streams, a transport and an upload codec."""
    from fedlangevin.privacy.runplan import check_planned

    check_planned(step_size, adapt, init)
    if preconditioner is not None:
        raise ValueError("preconditioner: a budgeted run plans its step for M = I (a preconditioner scales the "
                         "sensitivity by sqrt(lambda_max(M)) and would spend more than the budget); leave it unset, "
                         "or give a clip and a step size of your own with it (trace.privacy then reports what it spends)")
    drift.check_private(correction)
    if isinstance(local_steps, str):
        raise ValueError("privacy: a budgeted run needs a numeric local_steps (the plan counts K steps a round)")
    if streams != "single" or transport is not None or upload is not None:
        raise ValueError("privacy: a budgeted run is planned for streams='single' without transport or upload codec")


def check_private(step_size: Any, init: Any, correction: Any) -> None:
    """Refuse, before any work, what would query client data without noise in a private run
    (``step_size="auto"`` and ``adapt`` are private there: they read the broadcast iterates only,
    :mod:`fedlangevin.warmup.iterates`)."""
    if isinstance(step_size, AutoStep) and step_size.target_accept != "auto":
        raise ValueError(f"privacy: step_size={step_size!r} aims at an acceptance computed from the clients' exact "
                         "energies and gradients, outside the private mechanism; use step_size='auto' (a private "
                         "run adapts eta from the broadcast iterates), a number, a sequence or a schedule")
    if isinstance(step_size, str) and step_size != "auto":
        raise ValueError(
            f"privacy: step_size={step_size!r} is computed from the smoothness and convexity constants of the data "
            "without noise, outside the private mechanism; use 'auto' (adapted from the broadcast iterates), a "
            "number, a sequence or a schedule")
    from fedlangevin.privacy.runplan import check_unplanned_init

    check_unplanned_init(init)
    drift.check_private(correction)
