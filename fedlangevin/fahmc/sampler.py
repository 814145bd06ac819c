"""The user-facing FA-HMC sampler: :class:`FAHMC`, the FA-HMC kernel on the shared runner.

Everything but the kernel is the runner's (:class:`fedlangevin.fald.runner.base.Runner`): the
run's plan, kept draws in memory or on disk, streaming statistics, divergence handling (the
diverged chains' momentum rows go with them), the ledger, and checkpoints that resume bit for
bit, momentum included (:meth:`FAHMC.resume`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import torch

from fedlangevin._validation import (
    check_bool, check_device, check_dtype, check_fits, check_init, check_int, check_local_steps, check_path, check_real,
)
from fedlangevin.fahmc.kernel import SPLITTINGS, FAHMCKernel, as_mass, build
from fedlangevin.fald.core.participation import Participation, as_participation
from fedlangevin.fald.core.preconditioning import broadcast_floats, preconditioner_from_record
from fedlangevin.fald.core.schedules import as_schedule
from fedlangevin.fald.io import checkpoint as ckpt
from fedlangevin.fald.io.records import check_runner_record
from fedlangevin.fald.runner import resume as rs
from fedlangevin.fald.runner.base import Runner
from fedlangevin.problems.base import FederatedProblem, check_problem, check_weights

__all__ = ["FAHMC"]


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
    step_size : h > 0, a sequence (one value per local step) or a callable k -> h_k (as FALD's
        numeric step sizes). Stable for h < 2 / sqrt(lambda_max(M H)) (H: the clients' Hessians);
        with M the posterior covariance, h = 0.5 is a good start. ``"auto"`` is refused: the warm-up
        adaptation of FA-HMC is not built yet.
    friction : gamma > 0; the momentum is refreshed by a = exp(-gamma h) each step. Large gamma
        approaches overdamped dynamics (OBABO: exactly FA-LD with eta = h^2 / 2 in the limit).
    local_steps : K >= 1; temperature : tau > 0; correlation : rho in [0, 1] of the momentum
        noise across clients (FA-LD's eq. 14); participation : Full (default), SchemeI(S) or
        SchemeII(S); chains : R >= 1; batch_size : minibatch size per client and step (None:
        full gradients); init : theta0, (d,) or (R, d) (default zeros; the momentum starts at 0);
        device, dtype, seed, noise_dtype : as FALD's.
    mass : M, a (d, d) symmetric positive-definite matrix or a (d,) positive vector (diagonal), or
        a preconditioner object; None: I. M multiplies the force and the velocity's stationary law
        is N(0, tau M): in HMC's terms M is the *inverse* mass matrix (Stan's ``inv_metric``), so
        pass the posterior covariance (or an estimate), as FALD's ``preconditioner``.
    splitting : ``"BAOAB"`` (default) or ``"OBABO"``.
    correction, privacy : refused (``None`` only): drift corrections and privacy accounting of
        FA-HMC are not built yet.

    Every argument is checked before any work (``ValueError`` naming it). Communication per
    client and round: 2 d floats up (theta and v) and 2 d down (``trace.communication`` counts
    them). ``trace.privacy`` refuses an FA-HMC trace (its accountant is FA-LD's).
    """

    friction: float                    #: gamma
    correlation: float                 #: rho of the momentum noise
    participation: Participation       #: Full, SchemeI or SchemeII
    batch_size: int | None
    noise_dtype: torch.dtype
    splitting: str                     #: "BAOAB" or "OBABO"
    mass: Any                          #: the preconditioner object of M (None: I)

    def __init__(
        self,
        problem: FederatedProblem,
        step_size: float | Sequence[float] | Callable[[int], float],
        friction: float = 1.0,
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
        *,
        mass: Any = None,
        splitting: str = "BAOAB",
        correction: Any = None,
        privacy: Any = None,
    ) -> None:
        check_problem(problem)
        _refuse_unbuilt(step_size, init, correction, privacy)
        self.friction = check_real("friction", friction, low=0.0, low_open=True)
        local_steps = check_local_steps(local_steps)
        temperature = check_real("temperature", temperature, low=0.0, low_open=True)
        self.correlation = check_real("correlation", correlation, low=0.0, high=1.0)
        self.participation = as_participation(participation)
        self.participation.validate(check_weights(problem.weights, problem.num_clients))
        chains = check_int("chains", chains, 1)
        self.batch_size = problem.check_batch_size(batch_size)
        schedule = as_schedule(step_size, problem)
        dtype = check_dtype("dtype", dtype)
        self.noise_dtype = dtype if noise_dtype is None else check_dtype("noise_dtype", noise_dtype)
        device = check_device("device", device)
        seed = self._seeded(seed)
        if splitting not in SPLITTINGS:
            raise ValueError(f"splitting must be one of {', '.join(map(repr, SPLITTINGS))}; got {splitting!r}")
        self.splitting = splitting
        self.mass = as_mass(mass, problem.dim)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        check_fits("chains", 2 * chains * problem.num_clients * problem.dim * itemsize, device,
                   f"the client states (theta and v) of {chains} chains x {problem.num_clients} clients x "
                   f"d = {problem.dim}", "use fewer chains")
        check_init(init, chains, problem.dim, dtype, device)
        kernel = build(problem, temperature, self.correlation, self.participation, self.batch_size, self.friction,
                       mass=self.mass, splitting=splitting, dtype=dtype, device=device,
                       noise_dtype=self.noise_dtype, validated=True)
        self.mass = kernel.preconditioner
        super().__init__(kernel, problem, schedule, local_steps=local_steps, chains=chains, init=init, device=device,
                         dtype=dtype, seed=seed)
        # M is broadcast to every client once (as FALD's given preconditioner)
        self.ledger["setup_floats"] = float(problem.num_clients * broadcast_floats(self.mass, problem.dim))

    # -- the runner's hooks -------------------------------------------------------------------------
    def _fixed_uploads(self) -> float | None:
        return self.participation.fixed_uploads(self.problem.num_clients)

    def _uploads(self, info) -> float:
        return self.participation.uploads(info.weights)

    def _per_round_floats(self) -> tuple[float, float]:
        """Besides theta's d floats per upload and N d down: the velocity's as many."""
        d = self.problem.dim
        return float(d), float(self.problem.num_clients * d)

    # -- resuming -----------------------------------------------------------------------------------
    @classmethod
    def resume(cls, path: str | os.PathLike, *, problem: FederatedProblem | None = None, step_size: Any = None,
               participation: Participation | None = None, mass: Any = None, device: Any = None,
               fallback: bool = False) -> "FAHMC":
        """A sampler positioned where the checkpoint at ``path`` left off: chains, momentum, random
        stream, counters, ledger and an unfinished run, so that it continues bit for bit on the same
        device (``run()`` finishes an unfinished run).

        problem, step_size, participation, mass : needed only when the checkpoint could not store them
            (a problem, step-size function, participation rule or mass of a class of your own); given
            ones are checked against the checkpoint's (a ``step_size`` given here replaces the stored
            schedule, with a warning where it differs). device, fallback : as ``FALD.resume``.
        """
        path, fallback = check_path("path", path), check_bool("fallback", fallback)
        record, used = ckpt.read_file(path, fallback=fallback)
        settings = check_runner_record(record, used)
        if settings.get("sampler") != "FA-HMC":
            raise ckpt.CheckpointError(f"{str(used)!r} is not a checkpoint of FA-HMC (its sampler is "
                                       f"{settings.get('sampler')!r})")
        with rs.reading(used):
            problem = rs.resume_problem(record, used, problem)
            stored = ckpt.decode(record["kernel"])
            _, new_device = rs.resume_device(settings, device)
        with rs.reading(used, values=True):
            rule = _stored_rule(stored["participation"], participation)
            pre = None if stored["mass"] is None else preconditioner_from_record(stored["mass"], mass)
            kernel = build(problem, stored["temperature"], stored["correlation"], rule, stored["batch_size"],
                           stored["friction"], mass=pre, splitting=stored["splitting"], dtype=settings["dtype"],
                           device=new_device, noise_dtype=_dtype(stored["noise_dtype"]), validated=True)

        def shell(kernel: FAHMCKernel, problem: FederatedProblem, schedule: Any, **kwargs: Any) -> "FAHMC":
            """The sampler around the rebuilt kernel (the runner's resume then puts its state back)."""
            sampler = cls.__new__(cls)
            sampler.friction, sampler.correlation = kernel.friction, kernel.correlation
            sampler.participation, sampler.batch_size = kernel.participation, kernel.batch_size
            sampler.noise_dtype = kernel.noise_dtype or kernel.dtype
            sampler.splitting, sampler.mass = kernel.splitting, kernel.preconditioner
            Runner.__init__(sampler, kernel, problem, schedule, **kwargs)
            return sampler

        return rs.resume_runner(shell, path, kernel, problem=problem, step_size=step_size, device=device,
                                fallback=fallback)


def _dtype(name: str | None) -> torch.dtype | None:
    return None if name is None else check_dtype("noise_dtype", getattr(torch, name.replace("torch.", ""), name))


def _stored_rule(stored: Any, given: Participation | None) -> Participation:
    """The checkpoint's participation rule: a built-in one as stored; one of your own (stored as its
    repr) given again and checked by its repr."""
    if not isinstance(stored, str):
        if given is not None and given != stored:
            raise ValueError(f"participation: {given!r} differs from the checkpoint's {stored!r}")
        return stored
    if given is None:
        raise ValueError(f"participation: the checkpoint ran with a rule of your own ({stored}); give it again: "
                         "FAHMC.resume(path, participation=...)")
    rule = as_participation(given)
    if repr(rule) != stored:
        raise ValueError(f"participation: {rule!r} differs from the checkpoint's {stored}")
    return rule


def _refuse_unbuilt(step_size: Any, init: Any, correction: Any, privacy: Any) -> None:
    """What FA-HMC does not do yet, refused before any work with the reason."""
    if isinstance(step_size, str):
        if step_size == "auto":
            raise ValueError("step_size='auto': the warm-up adaptation of FA-HMC (step size, mass, friction) is not "
                             "built yet; give a number (h = 0.5 with mass = the posterior covariance is a good "
                             "start), a sequence or a callable k -> h_k")
        raise ValueError(f"step_size must be a number, a sequence or a callable k -> h_k for FA-HMC; got {step_size!r} "
                         "(FA-LD's 'paper' rule is Thm 5.8 of the FA-LD paper, not a rule for FA-HMC)")
    if isinstance(init, str):
        raise ValueError(f"init={init!r}: FA-HMC starts from zeros or a given array (d,) or (R, d); the mode search "
                         "of FALD's init='map' is not built for FA-HMC yet")
    if correction is not None:
        raise ValueError("correction: drift corrections for FA-HMC are not built yet (a control variate would add "
                         "to the force of every kick; its set-up and accounting are FA-LD's only); use correction=None")
    if privacy is not None:
        raise ValueError("privacy: privacy accounting of FA-HMC's momentum noise is not built yet (FA-LD's "
                         "accountant covers its Langevin noise only); use privacy=None")
