"""The user-facing FA-HMC sampler: :class:`FAHMC`, the FA-HMC kernel on the shared runner.

Everything but the kernel is the runner's (:class:`fedlangevin.runner.base.Runner`): the
run's plan, kept draws in memory or on disk, streaming statistics, divergence handling (the
diverged chains' momentum rows go with them), the ledger, and checkpoints that resume bit for
bit, momentum included (:meth:`FAHMC.resume`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

import torch

from fedlangevin._validation import (
    check_bool, check_choice, check_device, check_dtype, check_fits, check_init, check_int, check_optional_bool,
    check_path, check_real,
)
from fedlangevin.fahmc import auto as hauto, budget as hbudget, local_bias as hcheck
from fedlangevin.fahmc import correction as hcorrection, private as hprivate, setting_noise as hnoise
from fedlangevin.fahmc import divergence, gradient_noise as hgn
from fedlangevin.fahmc import warmup as fahmc_warmup
from fedlangevin.fahmc import warmup_noise
from fedlangevin.warmup import setting_noise as shared_noise
from fedlangevin.fahmc.arguments import check_auto, is_auto, refuse_unbuilt
from fedlangevin.fahmc.kernel import DEFAULT_FRICTION, SPLITTINGS, FAHMCKernel, as_fahmc_preconditioner, assemble, checked_arguments
from fedlangevin.fahmc.node import NODE
from fedlangevin.fahmc.stored import stored_dtype, stored_rule
from fedlangevin.federation.contracts import TRANSPORT, check_conforms
from fedlangevin.federation.participation import Full, Participation, as_participation
from fedlangevin.federation.preconditioning import (
    broadcast_floats, is_identity, spectral_norm, preconditioner_from_record, preconditioner_record,
)
from fedlangevin.runner.io import checkpoint as ckpt
from fedlangevin.runner.io.records import check_runner_record
from fedlangevin.runner import resume as rs
from fedlangevin.runner.base import Runner
from fedlangevin.warmup import session as fald_session
from fedlangevin.federation.schedules import AdaptedSteps
from fedlangevin.warmup.acceptance import AutoStep
from fedlangevin.warmup import local_steps as kphase
from fedlangevin.warmup.local_steps import AutoLocalSteps
from fedlangevin.warmup.mode import resolve_init
from fedlangevin.warmup.session import auto_schedule
from fedlangevin.problems.base import FederatedProblem, check_problem, check_weights

__all__ = ["DEFAULT_FRICTION", "FAHMC"]


class FAHMC(Runner):
    """Federated Averaging Hamiltonian Monte Carlo: federated underdamped Langevin dynamics.

    Every round the server broadcasts (theta, v) of every chain; each client takes K local steps
    of BAOAB (or OBABO) on its energy f^c, one gradient per step, with the momentum refresh's
    noise shared across clients with correlation rho; the server averages the clients' theta and
    v with the participation rule's weights (:mod:`fedlangevin.fahmc.kernel` states the equations).
    With K = 1 a round is exactly one step of the centralised integrator.

    Parameters
    ----------
    problem : a :class:`~fedlangevin.problems.FederatedProblem`.
    step_size : ``"auto"`` (default) or an :class:`~fedlangevin.AutoStep` (its ``target_accept``):
        M, h and the friction adapted in the first run's warm-up (default ``rounds // 2``) from the
        start, then frozen (:mod:`fedlangevin.fahmc.warmup`; needs ``local_steps`` 1 or ``"auto"``; any
        participation rule and minibatches: the statistic reads the rounds' actual moves); or h > 0, a
        sequence (one value per local step) or a callable k -> h_k (as FALD's numeric step sizes):
        stable for h < 2 / sqrt(lambda_max(M H)) (H: the clients' Hessians); with M the posterior covariance, h = 0.5 is a good start.
    friction : gamma > 0, or ``"auto"`` (default): adapted in the warm-up of ``step_size="auto"``
        (a number given there is kept), 1.0 with a numeric step size, 2 sqrt(lambda_0) with a budget. Refreshed by
        a = exp(-gamma h) each step. Large gamma approaches overdamped dynamics (OBABO: exactly
        FA-LD with eta = h^2 / 2 in the limit).
    local_steps : K >= 1, or ``"auto"`` (or an :class:`~fedlangevin.AutoLocalSteps`: its ladder,
        tolerance and confidence): the largest K of the ladder whose measured bias against K = 1 stays
        within the tolerance (default 0.1 posterior sd on the worst coordinate, means and sds, at 95 %),
        chosen in the second half of the first run's warm-up (default ``rounds // 2``; at least 300
        rounds), where candidate groups of R chains run K local steps beside the sampler's K = 1 chains,
        then frozen; ``trace.local_step_bias`` holds the choice and its evidence
        (:mod:`fedlangevin.fahmc.auto`; needs chains >= 2 and one process).
    temperature : tau > 0; correlation : rho in [0, 1] of the momentum noise across clients (FA-LD's
        eq. 14); participation : Full (default), SchemeI(S) or
        SchemeII(S) (their refresh noise calibrated to the weights unless ``noise="paper"``, as
        FA-LD's); chains : R >= 1 (default 4, as FALD's: R-hat needs several); batch_size : minibatch size per client and step (None:
        full gradients); init : theta0, (d,) or (R, d) (default zeros; the momentum starts at 0), or
        ``"map"``: the MAP of FALD's federated Newton search (:mod:`fedlangevin.warmup.mode`; its rounds
        and floats counted in the ledger, ``map_result`` its result);
        device, dtype, seed, noise_dtype : as FALD's.
    preconditioner : M, a (d, d) symmetric positive-definite matrix or a (d,) positive vector
        (diagonal), or a preconditioner object; None: I. M multiplies the force and the velocity's
        stationary law is N(0, tau M): in HMC's terms M is the *inverse* mass matrix (Stan's
        ``inv_metric``), so pass the posterior covariance (or an estimate). It is FALD's
        ``preconditioner``: the same M serves both samplers. With ``step_size="auto"`` it is where
        the adaptation of M starts (and with ``adapt=False`` the M used throughout).
    adapt : adapt M in the warm-up (default: with ``step_size="auto"``; ``adapt=False`` adapts h and
        the friction only; ``adapt=True`` needs ``step_size="auto"``).
    splitting : ``"BAOAB"`` or ``"OBABO"``; default BAOAB, OBABO in a private run (BAOAB is refused there).
    transport : a distributed run's synchronisation, e.g. :class:`fedlangevin.distributed.ProcessGroup`
        (``docs/distributed.md``: this process runs its clients' local steps, theta and v are all-reduced once
        a round; ``exact=True`` gives the one-process samples; only rank 0 keeps draws, checkpoints and
        stores; ``step_size="auto"`` adapts as in one process). ``None`` (default): one process, every client.
    correction : ``None``, ``"control_variates"`` or a ``ControlVariates`` record (:mod:`fedlangevin.fahmc.correction`:
        the kernel runs on :class:`~fedlangevin.problems.CentredClients`, ``docs/realistic.md``); default ``"auto"``:
        control variates under random participation or minibatches at K = 1 in one process, not in a private run.
    gradient_noise : ``"auto"`` (default) or None: under random participation or minibatches at K = 1 in one
        process without privacy, the force's measured noise is taken out of the momentum refresh (SGHMC's
        B-hat; :mod:`fedlangevin.fahmc.gradient_noise`; ``noise_correction`` holds it) from the underdamped
        phase of ``step_size="auto"``'s warm-up on, h kept where the refresh can hold it
        (:mod:`fedlangevin.fahmc.warmup_noise`); None: never.
    privacy : :class:`fedlangevin.privacy.RecordLevel` or :class:`~fedlangevin.privacy.ClientLevel`
        (``docs/fahmc.md``, "Private FA-HMC"): every local step's likelihood gradient is clipped as
        FALD's (:class:`fedlangevin.problems.clipped.Clipped`), and ``trace.privacy(delta=...)``
        accounts each OBABO step as FA-LD's Gaussian mechanism at the equivalent step size
        h^2 / (2 tanh(gamma h / 2)) (:mod:`fedlangevin.privacy.hmc`). Needs ``splitting="OBABO"`` (a
        BAOAB upload reveals the noiseless kick), a numeric step size and K, ``check_local_bias=False``
        for K > 1 and no transport (:mod:`fedlangevin.fahmc.private` refuses the rest before any work).
        A budget ``RecordLevel(epsilon=..., delta=...)`` (clip optional) plans the start, the clip and h
        at the friction given (default 1.0) when the first run starts (:mod:`fedlangevin.fahmc.budget`;
        ``budget`` holds the plan): leave step_size "auto" and the preconditioner unset.
    check_local_bias : with a fixed K > 1 (default True, chains >= 2), R companion chains of FA-HMC at
        K = 1 with the same h run beside the sampler's (their own generator: the sampler's draws are the
        same bits), and the end of every run warns where the K chains' means or sds differ from theirs by
        more than 0.1 posterior sd on evidence (:mod:`fedlangevin.fahmc.local_bias`; the evidence is
        ``trace.local_step_bias``). Adds 1/K to the sampling's gradient work and doubles its floats per
        round (counted); False turns it off. Not run (a note in ``trace.local_step_bias``) with one
        chain, a transport or a step size that varies with the step.

    Every argument is checked before any work (``ValueError`` naming it). Communication per
    client and round: 2 d floats up (theta and v) and 2 d down (``trace.communication`` counts
    them), and in warm-up what its statistics read (the clients' energies and gradients, their
    Hessians for the Laplace M and the friction). ``trace.privacy`` accounts a private run
    (``privacy=``) and refuses any other FA-HMC trace.
    """

    #: the family as a transport with remote clients runs it (:mod:`fedlangevin.federation.nodes`)
    node = NODE
    #: the mechanism a canary audit runs (:func:`fedlangevin.privacy.audit`'s ``sampler=``)
    privacy_family = "FA-HMC"

    # The state FA-HMC adds to the runner's (fedlangevin.runner.base.Runner): its settings, and
    # what the warm-up changes (M, h through the schedule, gamma), applied in one place (_apply).
    correlation: float                 #: rho of the momentum noise
    participation: Participation       #: Full, SchemeI or SchemeII
    batch_size: int | None
    noise_dtype: torch.dtype
    splitting: str                     #: "BAOAB" or "OBABO"
    preconditioner: Any                #: the current M (None: I), a step argument of the kernel
    friction: float                    #: the current gamma, a step argument (OVERDAMPED in the warm-up's phase 1)
    given_friction: float | None       #: the user's gamma (None: "auto")
    adapt_step: bool                   #: step_size="auto": M, h and gamma adapted in the first run's warm-up
    step_rule: AutoStep | None         #: its target acceptance (None: a given h)
    adapt_matrix: bool                 #: M adapted in that warm-up
    adapted: bool                      #: the warm-up has finished (M, h and gamma frozen)
    map_result: Any = None             #: init="map"'s mode search (a MapResult; None otherwise)
    check_local_bias: bool             #: a fixed K > 1 is checked by K = 1 companions (fahmc.local_bias)
    auto_local_steps: AutoLocalSteps | None = None  #: local_steps="auto"'s rule (None: a fixed K)
    privacy: Any = None                #: RecordLevel / ClientLevel, None: not private (fahmc.private)
    correction: Any = None             #: ControlVariates or None (fahmc.correction)
    centred: Any = None                #: the kernel's problem with them (CentredClients) or None
    setting_noise: Any = None          #: the last run's check of its participation / minibatch setting
    gradient_noise: bool = False       #: take the force's noise out of the refresh (fahmc.gradient_noise)
    noise_correction: Any = None       #: the GradientNoise in use (None: none)
    _companion_kernel: Any = None      #: the companions' (or candidates') kernel, built once on first use

    def __init__(
        self,
        problem: FederatedProblem,
        step_size: float | str | Sequence[float] | Callable[[int], float] = "auto",
        friction: float | str = "auto",
        local_steps: int = 1,
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
        *,
        preconditioner: Any = None,
        adapt: bool | None = None,
        splitting: str | None = None,
        correction: Any = "auto",
        privacy: Any = None,
        transport: Any = None,
        check_local_bias: bool = True,
        gradient_noise: Any = "auto",
    ) -> None:
        check_problem(problem)
        refuse_unbuilt(step_size)
        self.gradient_noise = hgn.check_choice(gradient_noise)
        self.check_local_bias = check_bool("check_local_bias", check_local_bias)
        self.transport = None if transport is None else check_conforms(transport, TRANSPORT, "transport")
        self.given_friction = None if is_auto(friction) else check_real("friction", friction, low=0.0, low_open=True)
        local_steps, self.auto_local_steps = kphase.as_local_steps(local_steps)
        temperature = check_real("temperature", temperature, low=0.0, low_open=True)
        self.correlation = check_real("correlation", correlation, low=0.0, high=1.0)
        self.participation = as_participation(participation)
        self.participation.validate(check_weights(problem.weights, problem.num_clients))
        chains = check_int("chains", chains, 1)
        self.batch_size = problem.check_batch_size(batch_size)
        planned = hbudget.planned(privacy, step_size)  # a budget: h planned when the first run starts
        self.adapt_step, schedule = auto_schedule(hbudget.PLACEHOLDER_STEP if planned else step_size, problem)
        self.step_rule = (step_size if isinstance(step_size, AutoStep) else AutoStep()) if self.adapt_step else None
        adapt = check_optional_bool("adapt", adapt)
        if adapt and not self.adapt_step:
            raise ValueError("adapt=True adapts M in the warm-up of step_size='auto' (its overdamped phase runs FA-LD's "
                             "step rule); give step_size='auto', or a preconditioner with a numeric step size")
        self.adapt_matrix = self.adapt_step if adapt is None else adapt
        if self.adapt_step:
            check_auto(local_steps, self.auto_local_steps is not None)
            schedule.symbol = "h"
        why = "" if self.auto_local_steps is None else hcheck.unmeasurable(chains, self.transport, schedule)
        if why:
            raise ValueError(f"local_steps='auto' cannot measure the local-step bias with {why}; give a fixed K")
        if self.auto_local_steps is not None and not self.check_local_bias:
            raise ValueError("check_local_bias=False turns off the check of a fixed K; local_steps='auto' measures "
                             "the bias to choose K: give local_steps a number, or leave check_local_bias=True")
        dtype = check_dtype("dtype", dtype)
        self.noise_dtype = dtype if noise_dtype is None else check_dtype("noise_dtype", noise_dtype)
        device = check_device("device", device)
        seed = self._seeded(seed)
        default = "BAOAB" if privacy is None else "OBABO"  # BAOAB cannot be private (fedlangevin.fahmc.private)
        self.splitting = check_choice("splitting", default if splitting is None else splitting, SPLITTINGS)
        self.privacy = hprivate.check_private(
            problem, privacy, step_size=step_size, local_steps=local_steps,
            auto_local_steps=self.auto_local_steps is not None, splitting=self.splitting, transport=self.transport,
            check_local_bias=self.check_local_bias, init=init, adapt=adapt)
        #: a budgeted private run: its start ("map": the private MAP search) and, once run, its plan
        self.budget, self._budget_init = None, None
        if planned:
            if preconditioner is not None:  # the plan's sensitivity is the unpreconditioned gradient's
                raise ValueError("preconditioner: a budgeted run plans without one; leave preconditioner unset")
            self._budget_init, init = ("map", None) if init is None or isinstance(init, str) else (init, init)
        self.preconditioner = as_fahmc_preconditioner(preconditioner, problem.dim)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        check_fits("chains", 2 * chains * problem.num_clients * problem.dim * itemsize, device,
                   f"the client states (theta and v) of {chains} chains x {problem.num_clients} clients x "
                   f"d = {problem.dim}", "use fewer chains")
        if isinstance(init, str) and init != "map":
            raise ValueError(f"init must be an array of shape (d,) or ({chains}, d), None (zeros) or 'map'; got {init!r}")
        check_init(None if isinstance(init, str) else init, chains, problem.dim, dtype, device)
        init_given = init
        init, self.map_result = resolve_init(init, problem)  # init="map": the federated mode search's MAP
        self.friction = DEFAULT_FRICTION if self.given_friction is None else self.given_friction
        self.correction = hcorrection.resolve(
            correction, problem, privacy=self.privacy, participation=self.participation, batch_size=self.batch_size,
            local_steps="auto" if self.auto_local_steps else local_steps, transport=self.transport, init=init_given)
        self.centred, cost = (None, None) if self.correction is None else hcorrection.centre(self.correction, problem,
                                                                                               self.map_result)
        kernel = assemble(self.centred or hprivate.kernel_problem(problem, self.privacy), temperature=temperature,
                          correlation=self.correlation, rule=self.participation,
                          batch_size=self.batch_size, friction=self.friction, splitting=self.splitting, dtype=dtype,
                          device=device, noise_dtype=self.noise_dtype, preconditioner=self.preconditioner,
                          transport=self.transport)
        self.preconditioner = kernel.preconditioner
        self.adapted = False
        super().__init__(kernel, problem, schedule, local_steps=local_steps, chains=chains, init=init, device=device,
                         dtype=dtype, seed=seed)
        # M is broadcast to every client once (as FALD's given preconditioner)
        self.ledger["setup_floats"] = float(problem.num_clients * broadcast_floats(self.preconditioner, problem.dim))
        if self.map_result is not None:  # the mode search's rounds and floats (as FALD's init="map")
            self.ledger["setup_floats"] += self.map_result.floats_down
            self.ledger["setup_floats_up"] += self.map_result.floats_up
            self.ledger["map_rounds"] += self.map_result.rounds
        if cost is not None:  # the control variates' set-up (fedlangevin.fahmc.correction)
            self.ledger["setup_floats"] += cost.floats_down
            self.ledger["setup_floats_up"] += cost.floats_up
            self.ledger["correction_rounds"] += cost.rounds

    # -- the runner's hooks -------------------------------------------------------------------------
    def _kernel_settings(self) -> dict:
        """The kernel's settings with the M of now (an adapted one after the warm-up) and the warm-up's flags."""
        own = super()._kernel_settings()
        pre = getattr(self, "preconditioner", None)
        own.update(preconditioner="none" if pre is None else repr(pre), adapt=bool(getattr(self, "adapt_matrix", False)),
                   auto_step_size=bool(getattr(self, "adapt_step", False)),
                   check_local_bias=bool(getattr(self, "check_local_bias", False)),
                   auto_local_steps=getattr(self, "auto_local_steps", None) is not None,
                   friction=float(getattr(self, "friction", own.get("friction", 1.0))))
        setting = getattr(self, "correction", None)
        if setting is not None:
            own.update(correction=repr(setting), correction_releases=setting.releases)
        private = getattr(self, "privacy", None)
        if private is not None:  # what the accounting and a resume rebuild the mechanism from
            own.update(privacy=repr(private), adjacency=private.adjacency, privacy_spent=tuple(private.spent),
                       clip=None if private.clip is None else float(private.clip),
                       preconditioner_norm=spectral_norm(pre, self.problem.dim))
        return own

    def _fixed_uploads(self) -> float | None:
        return self.participation.fixed_uploads(self.problem.num_clients)

    def _uploads(self, info) -> float:
        return self.participation.uploads(info.weights)

    def _diagnose(self, state, gen_state, etas, bad_rows):
        """The base's account of a round that ended non-finite, unless the gradient is the cause
        (:func:`fedlangevin.fahmc.divergence.gradient_cause`)."""
        return divergence.gradient_cause(self, bad_rows, *super()._diagnose(state, gen_state, etas, bad_rows))

    def _per_round_floats(self) -> tuple[float, float]:
        """Besides theta's d floats per upload and N d down: the velocity's as many."""
        d = self.problem.dim
        return float(d), float(self.problem.num_clients * d)

    def _step_arguments(self) -> dict:
        """M and gamma are step arguments like h (the kernel is built once; the warm-up changes them)."""
        factor = None if self.noise_correction is None else self.noise_correction.factor
        return {"preconditioner": self.preconditioner, "friction": self.friction, "noise_factor": factor}

    def _round_etas(self, rounds: int):
        return fald_session.round_etas(self, rounds, kphase.round_etas(self))

    def _round_bound(self) -> int:
        return kphase.round_bound(self)

    def _check_run(self, checkpoint) -> None:
        if checkpoint is not None and getattr(self, "_budget_init", None) is not None:
            raise ValueError("checkpoint: a budgeted private run is planned for one run and is not checkpointed; "
                             "run without checkpoint=")

    def _plan_warmup(self, rounds, warmup):
        if getattr(self, "_budget_init", None) is not None:
            hbudget.apply(self, rounds, warmup)
        if self.measurement is not None:  # a run stopped in "auto"'s measurement: the next one starts afresh
            self._apply(fahmc_warmup.Changes(measurement=None, companions=None, local_steps=self.local_steps))
        adapting, warmup = fald_session.default_warmup(self, rounds, kphase.default_warmup(self, rounds, warmup))
        return adapting or kphase.due(self), warmup

    def _begin_warmup(self, warmup: int) -> float:
        """The run's warm-up: "auto"'s measurement (where due) takes its second half, the adaptation of
        M, h and gamma (where due) the rest."""
        rounds, measured = kphase.init(self, warmup) if kphase.due(self) else (warmup, fald_session.Changes())
        sent = 0.0
        if (self.adapt_step or self.adapt_matrix) and not self.adapted:
            self.adapter, changes = fahmc_warmup.init(self, rounds)
            sent = self._apply(changes)
        self._apply(hauto.converted(measured))
        return sent

    def _observing(self) -> bool:
        return self.adapter is not None or self.companions is not None or self.measurement is not None

    def _observe(self, run, theta: torch.Tensor, info=None, arguments=None) -> None:
        if self.companions is not None:  # a round beside the sampler's (h, M and gamma frozen)
            if self._companion_kernel is None:
                self._companion_kernel = hcheck.build(self)
            common = (self.preconditioner, self.friction, self.participation.uploads, self.problem.num_clients)
            if self.companions.rule is None:  # a fixed K's check
                self._apply(hcheck.update(self.companions, self._companion_kernel, theta, *common), run)
            else:  # "auto"'s candidates
                self._apply(hauto.update(self.companions, self._companion_kernel, theta, self.state.momentum,
                                         *common), run)
        if self.adapter is not None:
            self._apply(fahmc_warmup.update(self.adapter, theta, self.state.momentum, self.preconditioner), run)
            if hcheck.due(self):  # the warm-up ended here: the companions start at its last (theta, v)
                self._apply(hcheck.start(self), run)
        if self.measurement is not None:  # "auto": its candidates start, or it decides, here
            self._apply(hauto.measure(self.measurement, self), run)

    def _before_rounds(self) -> None:
        if hcheck.due(self):  # nothing adapts: the companions start with the first round
            self._apply(hcheck.start(self))

    def _end_run(self, run) -> None:
        """The companions' verdict and the setting's check (fahmc.setting_noise), each with its warning."""
        if self.companions is not None and self.companions.rule is None:
            self._apply(fahmc_warmup.Changes(local_bias=hcheck.verdict(self.companions)))
        if run.draws.kind != "none" and (not isinstance(self.participation, Full) or self.batch_size is not None):
            self.setting_noise = hnoise.check(self, run.draws.view()[0])
            shared_noise.warn(self.setting_noise, self.problem.parameter_names())

    def _record(self) -> dict:
        """The runner's entries and FA-HMC's own: the current M and gamma, the warm-up in progress."""
        return {**super()._record(), "fahmc": ckpt.encode({
            "preconditioner": None if self.preconditioner is None else preconditioner_record(self.preconditioner),
            "friction": self.friction, "given_friction": self.given_friction, "adapt_matrix": self.adapt_matrix,
            "target": None if self.step_rule is None else self.step_rule.target_accept, "adapted": self.adapted,
            "adaptation": None if self.adapter is None else self.adapter.record(),
            "local_bias": hcheck.record(self), "correction": hcorrection.record(self.correction, self.centred),
            "gradient_noise": self.gradient_noise, "noise_correction": hgn.record(self.noise_correction)})}

    # -- the one place the warm-up's and the check's values are applied -----------------------------
    def _apply(self, changes: fahmc_warmup.Changes, run=None) -> float:
        """Apply what :mod:`~fedlangevin.fahmc.warmup` (init, update) and the local-step check
        (:mod:`~fedlangevin.fahmc.local_bias`: start, update, verdict) returned: a new M (broadcast to
        every client: counted), h from the current step on, gamma from the next round on, chains put
        back, set-up floats (the statistics' uploads, the companions' rounds: in the ledger, and in
        ``run``'s totals when given), the end of the warm-up, the companions' state and a record (and
        its warning). Returns the floats of a new M's broadcast."""
        problem, sent = self.problem, 0.0
        if changes.preconditioner is not fahmc_warmup.KEEP:
            self.preconditioner = None if is_identity(changes.preconditioner) else changes.preconditioner
            sent = float(problem.num_clients * broadcast_floats(self.preconditioner, problem.dim))
        if changes.step_size is not None:
            self.schedule.set(self.state.step, changes.step_size)
        if changes.friction is not None:
            self.friction = changes.friction
        for name, floats in (("setup_floats", sent + changes.floats_down), ("setup_floats_up", changes.floats_up)):
            self._count_setup(run, name, floats)
        if changes.theta is not None:
            self.state = dataclasses.replace(self.state, theta=changes.theta)
        if changes.momentum is not None:
            self.state = dataclasses.replace(self.state, momentum=changes.momentum)
        if changes.finished:  # the force's noise out of the refresh (fahmc.warmup_noise), for good
            self.adapter, self.adapted = None, True
            self.noise_correction, floats = warmup_noise.at_end(self)
            self._count_setup(run, "setup_floats_up", floats)
        elif self.adapter is not None and self.adapter.overdamped is None and changes.step_size is not None:
            self.noise_correction, floats = warmup_noise.during(self, changes.friction is not None)
            self._count_setup(run, "setup_floats_up", floats)
        self._apply_local_steps(changes)
        return sent

    # -- resuming -----------------------------------------------------------------------------------
    @classmethod
    def resume(cls, path: str | os.PathLike, *, problem: FederatedProblem | None = None, step_size: Any = None,
               participation: Participation | None = None, preconditioner: Any = None, device: Any = None,
               fallback: bool = False, transport: Any = None) -> "FAHMC":
        """A sampler positioned where the checkpoint at ``path`` left off: chains, momentum, random
        stream, counters, ledger and an unfinished run, so that it continues bit for bit on the same
        device (``run()`` finishes an unfinished run).

        problem, step_size, participation, preconditioner : needed only when the checkpoint could not
            store them (a problem, step-size function, participation rule or preconditioner of a class
            of your own); given ones are checked against the checkpoint's (a ``step_size`` given here
            replaces the stored schedule, with a warning where it differs). device, fallback : as
            ``FALD.resume``. A warm-up in progress (M, h, friction) continues where it was.
        transport : of a distributed run, as ``FALD.resume``'s: every process resumes from rank 0's
            checkpoint (with ``exact=True`` at any number of processes, one included); a process that does
            not write continues an unfinished run without its draws or checkpoint.
        """
        path, fallback = check_path("path", path), check_bool("fallback", fallback)
        if transport is not None:
            check_conforms(transport, TRANSPORT, "transport")
        record, used = ckpt.read_file(path, fallback=fallback)
        settings = check_runner_record(record, used)
        if settings.get("sampler") != "FA-HMC":
            raise ckpt.CheckpointError(f"{str(used)!r} is not a checkpoint of FA-HMC (its sampler is "
                                       f"{settings.get('sampler')!r})")
        if "fahmc" not in record:
            raise ckpt.CheckpointError(f"{str(used)!r} was written by an FA-HMC without its warm-up (before the "
                                       "preconditioner= argument; never released): it cannot be resumed")
        with rs.reading(used):
            problem = rs.resume_problem(record, used, problem)
            stored = ckpt.decode(record["kernel"])
            own = ckpt.decode(record["fahmc"])
            _, new_device = rs.resume_device(settings, device)
        with rs.reading(used, values=True):
            privacy = rs.mechanism(settings)  # a private run's mechanism, rebuilt from its clip
        if privacy is not None and (transport is not None or isinstance(step_size, str)):
            raise ValueError(f"privacy: the checkpoint holds a private run ({privacy!r}), which resumes without a "
                             "transport and with a numeric step_size or none (fedlangevin.fahmc.private)")
        with rs.reading(used, values=True):
            rule = stored_rule(stored["participation"], participation)
            pre = (None if stored["preconditioner"] is None
                   else preconditioner_from_record(stored["preconditioner"], preconditioner))
            correction, centred = hcorrection.restore(own.get("correction"), problem)
            kernel = assemble(centred or hprivate.kernel_problem(problem, privacy), **checked_arguments(
                problem, stored["temperature"], stored["correlation"], rule, stored["batch_size"], stored["friction"],
                splitting=stored["splitting"], dtype=settings["dtype"], device=new_device,
                noise_dtype=stored_dtype(stored["noise_dtype"])), preconditioner=pre, transport=transport)
            current = (None if own["preconditioner"] is None
                       else preconditioner_from_record(own["preconditioner"], preconditioner))
            adapter = (None if own["adaptation"] is None
                       else fahmc_warmup.HMCAdapter.from_record(problem, own["adaptation"], preconditioner))

        def shell(kernel: FAHMCKernel, problem: FederatedProblem, schedule: Any, **kwargs: Any) -> "FAHMC":
            """The sampler around the rebuilt kernel (the runner's resume then puts its state back)."""
            sampler = cls.__new__(cls)
            sampler.correlation = kernel.correlation
            sampler.participation, sampler.batch_size = kernel.participation, kernel.batch_size
            sampler.noise_dtype = kernel.noise_dtype or kernel.dtype
            sampler.splitting, sampler.preconditioner = kernel.splitting, current
            sampler.friction, sampler.given_friction = float(own["friction"]), own["given_friction"]
            sampler.adapt_step = isinstance(schedule, AdaptedSteps)
            sampler.step_rule = AutoStep(own["target"]) if sampler.adapt_step else None
            sampler.adapt_matrix, sampler.adapted = bool(own["adapt_matrix"]), bool(own["adapted"])
            sampler.transport, sampler.map_result = transport, None  # the mode search ran before the checkpoint
            sampler.privacy, sampler.correction, sampler.centred = privacy, correction, centred
            sampler.gradient_noise = bool(own.get("gradient_noise", False))  # False: written before the correction
            with rs.reading(used, values=True):
                sampler.noise_correction = hgn.restore(own.get("noise_correction"))
            stored_check = own.get("local_bias")  # None: a checkpoint written before the check (it ran without)
            sampler.check_local_bias = bool(stored_check is not None and stored_check["check"])
            Runner.__init__(sampler, kernel, problem, schedule, **kwargs)
            sampler.adapter = adapter
            with rs.reading(used, values=True):
                restored = hcheck.restore(stored_check, sampler.device, sampler.dtype)
            sampler.companions, sampler.local_step_bias = restored.companions, restored.result
            sampler.auto_local_steps, sampler.measurement, sampler.anchor = (restored.rule, restored.measurement,
                                                                             restored.anchor)
            return sampler

        return rs.resume_runner(shell, path, kernel, problem=problem, step_size=step_size, device=device,
                                fallback=fallback, transport=transport)

