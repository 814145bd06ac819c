"""Federated NUTS: a benchmark baseline, not a private sampler.

The server runs the No-U-Turn sampler (Hoffman & Gelman 2014; Pyro's
:class:`pyro.infer.mcmc.NUTS` with its warm-up adaptation: dual averaging of the step size
towards ``target_accept``, a diagonal or dense mass matrix from windowed covariance estimates)
on the global energy of a :class:`~fedlangevin.problems.FederatedProblem`,

    U(theta) = sum_c p_c f^c(theta)        (Deng et al., eq. 7: the negative log posterior),

and asks the clients for it: every evaluation of U and grad U that NUTS makes is **one round**
(the server broadcasts theta, d floats to each of the N clients; client c returns f^c(theta)
and grad f^c(theta), d + 1 floats). The rounds are counted (:class:`RoundCounter`), warm-up
included, so that "rounds" means for NUTS what it means for FA-LD (one exchange of the
parameter and the clients' gradients), and a benchmark can compare effective samples per round.

Why it is a baseline only: its queries are exact (no noise is added, no gradient is clipped),
so a run releases the clients' energies and gradients at every point NUTS visits; it has no
privacy accounting and must not run on private data. It is the yardstick a federated sampler
is measured against: NUTS is what a non-federated user would run, and counting one round per
leapfrog step (Pyro's one potential-and-gradient evaluation) prices it in communication.

Chains run one after the other (Pyro's multi-chain mode would start processes), each a fresh
NUTS kernel seeded ``seed + chain``, from ``init`` (default zeros: a data-independent start,
as FA-LD's). Pyro draws from the global random number generators; they are restored afterwards.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedlangevin._validation import check_bool, check_fits, check_init, check_int, check_real

__all__ = ["NUTSResult", "RoundCounter", "RoundLimitError", "federated_nuts"]

#: host memory per kept draw besides its 2 d floats (the draw and its stacked copy): Pyro keeps each
#: draw as a tensor of its own (a Python object of about half a kilobyte)
BYTES_PER_DRAW = 512


class RoundLimitError(RuntimeError):
    """A run reached its ``max_rounds`` (:func:`federated_nuts`): ``rounds`` made by all chains
    together when it stopped, ``chain`` the chain that was running, ``seconds`` of wall time."""

    def __init__(self, rounds: int, chain: int, seconds: float) -> None:
        super().__init__(f"federated NUTS stopped at max_rounds = {rounds:,} rounds (in chain {chain})")
        self.rounds, self.chain, self.seconds = rounds, chain, seconds


class RoundCounter:
    """The server's view of a federation queried without noise: :meth:`query` broadcasts theta (d,)
    to every client and sums what they return, f(theta) = sum_c p_c f^c(theta) and its gradient
    sum_c p_c grad f^c(theta), counting one round per call (``rounds``) and the floats sent
    (``floats_down`` = N d per round, server to clients) and received (``floats_up`` = N (d + 1):
    a gradient and an energy per client).

    ``problem`` must expose its energy (``global_energy`` of autodiff problems, ``energy`` of the
    quadratic and logistic problems; :func:`fedlangevin.warmup.mode.global_energy`), else a
    ValueError naming ``problem``. It is used in float64 on the CPU.
    """

    def __init__(self, problem: Any) -> None:
        from fedlangevin.warmup.mode import global_energy
        from fedlangevin.problems.base import check_problem

        check_problem(problem)
        self.problem = problem.to(dtype=torch.float64)
        self._energy = global_energy(self.problem)
        if self._energy is None:
            raise ValueError(
                f"problem: federated NUTS needs the clients' energies f^c (for its accept/reject and U-turn "
                f"decisions), and {type(problem).__name__} exposes none (no global_energy() or energy()); use a "
                "problem of fedlangevin.problems (CustomProblem, PyroProblem, QuadraticProblem, LogisticRegression)"
            )
        self.num_clients, self.dim = int(self.problem.num_clients), int(self.problem.dim)
        self.weights = self.problem.weights.to(torch.float64)
        self.rounds = 0
        #: :meth:`query` refuses a round beyond this many (``None``: no limit), raising ``_Limit``
        self.limit: int | None = None
        #: a chain's start: the next query checks that U and grad U are finite there (``_BadStart``)
        self.start: torch.Tensor | None = None

    @property
    def floats_down(self) -> int:
        return self.rounds * self.num_clients * self.dim

    @property
    def floats_up(self) -> int:
        return self.rounds * self.num_clients * (self.dim + 1)

    def query(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        """One round at theta (d,): (f(theta), grad f(theta) (d,)), float64. A theta of another size
        is a ValueError naming ``theta`` (no round)."""
        if not isinstance(theta, torch.Tensor) or theta.numel() != self.dim:
            raise ValueError(f"theta must be a tensor of d = {self.dim} entries; got "
                             f"{tuple(theta.shape) if isinstance(theta, torch.Tensor) else type(theta).__name__}")
        if self.limit is not None and self.rounds >= self.limit:
            raise _Limit
        self.rounds += 1
        theta = theta.detach().to(torch.float64).reshape(self.dim)
        grads = self.problem.grad(theta.expand(1, self.num_clients, self.dim).clone())[0]  # (N, d): grad f^c
        energy, grad = self._energy(theta), self.weights @ grads
        start, self.start = self.start, None
        if (start is not None and torch.equal(theta, start.to(theta))
                and not (math.isfinite(energy) and bool(torch.isfinite(grad).all()))):
            raise _BadStart(energy)  # Pyro's first round, at the chain's start: the start is refused
        return energy, grad

    def potential(self, theta: torch.Tensor) -> torch.Tensor:
        """f(theta) as a differentiable scalar (autograd gets grad f from the same round): what
        Pyro's ``potential_fn`` calls; one round per call, whether or not the gradient is used."""
        return _Round.apply(theta, self)


class _Limit(Exception):
    """Raised inside Pyro's run by a counter at its limit (federated_nuts turns it into RoundLimitError)."""


class _BadStart(Exception):
    """Raised inside Pyro's run at a chain's start where U or grad U is not finite (federated_nuts turns
    it into a ValueError naming ``init``)."""

    def __init__(self, energy: float) -> None:
        super().__init__(energy)
        self.energy = energy


class _Round(torch.autograd.Function):
    """One round: forward returns f(theta); backward the gradient the clients sent with it."""

    @staticmethod
    def forward(ctx, theta, counter):
        with torch.enable_grad():  # autograd turns grad mode off in forward; a problem's grad may use autograd
            energy, grad = counter.query(theta)
        ctx.save_for_backward(grad.to(theta.dtype))
        return theta.new_tensor(energy)

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        return grad_output * grad, None


@dataclass(frozen=True)
class NUTSResult:
    """A federated NUTS run (:func:`federated_nuts`).

    ``samples``: (chains, draws, d) post-warm-up draws of theta (the problem's own space);
    ``rounds_per_chain``: the rounds each chain paid, warm-up included (one per evaluation of
    U and grad U), and ``warmup_rounds_per_chain`` the part of them spent in warm-up (Pyro's
    initial step-size search and the adaptation); ``step_sizes``: each chain's adapted step;
    ``divergences``: divergent transitions per chain after warm-up; ``floats_down`` /
    ``floats_up``: floats sent to / received from the clients, all chains; ``seconds``: wall time.
    """

    samples: np.ndarray
    rounds_per_chain: tuple[int, ...]
    warmup_rounds_per_chain: tuple[int, ...]
    step_sizes: tuple[float, ...]
    divergences: tuple[int, ...]
    floats_down: int
    floats_up: int
    seconds: float

    @property
    def rounds(self) -> int:
        """Rounds of all chains together, warm-up included (NUTS's gradient evaluations)."""
        return int(sum(self.rounds_per_chain))

    def min_ess_bulk(self) -> float:
        """The smallest bulk ESS over the d coordinates (:func:`diagnostics.ess`, rank-normalised
        split chains); needs >= 4 draws per chain."""
        import diagnostics as dg

        return float(np.min(dg.ess(self.samples, method="bulk")))

    def ess_per_round(self) -> float:
        """min bulk ESS / :attr:`rounds` (all chains, warm-up included): NUTS's ESS per gradient
        evaluation, the figure compared with a federated sampler's min bulk ESS / (chains x rounds)."""
        return self.min_ess_bulk() / self.rounds


def federated_nuts(
    problem: Any,
    *,
    chains: int = 4,
    draws: int = 1000,
    warmup: int = 1000,
    seed: int = 0,
    init: Any = None,
    dense_mass: bool = False,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    max_rounds: int | None = None,
) -> NUTSResult:
    """Run federated NUTS on ``problem`` (a :class:`~fedlangevin.problems.FederatedProblem` with
    an energy; see the module docstring: a non-private benchmark baseline) and count its rounds.

    Parameters
    ----------
    chains : number of chains (>= 1), run one after the other.
    draws, warmup : draws kept per chain (>= 1) and warm-up iterations per chain (>= 1: Pyro's
        step-size and mass-matrix adaptation run during it).
    seed : integer in [0, 2**32 - 1 - chains]; chain r uses ``seed + r``.
    init : None (zeros), or theta of shape (d,) or (chains, d), finite.
    dense_mass : adapt a dense mass matrix (True) or a diagonal one (False).
    target_accept : the acceptance probability the step-size adaptation aims at, in (0, 1).
    max_tree_depth : the largest tree depth (>= 1): at most 2**max_tree_depth - 1 rounds per draw.
    max_rounds : None (no limit), or the most rounds all chains together may make (>= 1): the run
        stops at the round that would exceed it with :class:`RoundLimitError` (a benchmark's cost
        cap: where NUTS's trees saturate, a run costs up to 2**max_tree_depth - 1 rounds per draw).

    Every bad argument is a ValueError naming it, raised before any round.
    """
    counter = RoundCounter(problem)
    chains = check_int("chains", chains, 1, 2**32 - 1)  # chain r is seeded seed + r, a 32-bit seed
    draws = check_int("draws", draws, 1)
    warmup = check_int("warmup", warmup, 1)
    seed = check_int("seed", seed, 0, 2**32 - 1 - chains)  # pyro.set_rng_seed seeds numpy too: at most 2**32 - 1
    dense_mass = check_bool("dense_mass", dense_mass)
    target_accept = check_real("target_accept", target_accept, low=0.0, high=1.0, low_open=True, high_open=True)
    max_tree_depth = check_int("max_tree_depth", max_tree_depth, 1, 30)
    counter.limit = None if max_rounds is None else check_int("max_rounds", max_rounds, 1)
    check_fits("chains, draws", chains * draws * (2 * 8 * counter.dim + BYTES_PER_DRAW), "cpu",
               f"keeping {chains} chains x {draws} draws of d = {counter.dim} (Pyro keeps each draw as a tensor)",
               "use fewer chains or draws")
    starts = check_init(init, chains, counter.dim, torch.float64, "cpu")

    import pyro
    from pyro.infer import MCMC, NUTS

    states = random.getstate(), np.random.get_state()
    start = time.perf_counter()
    samples, rounds, warm, steps, divergent = [], [], [], [], []
    try:
        with torch.random.fork_rng(devices=[]):
            for r in range(chains):
                pyro.set_rng_seed(seed + r)
                before, marks = counter.rounds, []

                def hook(kernel, params, stage, i, marks=marks):
                    if stage.startswith("Warmup") and i == warmup - 1:
                        marks.append(counter.rounds)

                kernel = NUTS(potential_fn=lambda z: counter.potential(z["theta"]), full_mass=dense_mass,
                              target_accept_prob=target_accept, max_tree_depth=max_tree_depth)
                mcmc = MCMC(kernel, num_samples=draws, warmup_steps=warmup, initial_params={"theta": starts[r]},
                            hook_fn=hook, disable_progbar=True)
                counter.start = starts[r]
                try:
                    mcmc.run()
                except _Limit:
                    raise RoundLimitError(counter.rounds, r, time.perf_counter() - start) from None
                except _BadStart as bad:
                    raise ValueError(f"init: the energy or its gradient at the start of chain {r} is not finite "
                                     f"(U = {bad.energy:.4g}); start where both are finite") from None
                samples.append(mcmc.get_samples()["theta"].detach().numpy().reshape(draws, counter.dim))
                rounds.append(counter.rounds - before)
                warm.append(marks[0] - before)
                steps.append(float(kernel.step_size))
                # the divergences Pyro records (what mcmc.diagnostics() reports, without its ESS, undefined
                # for a single draw)
                divergent.append(len(mcmc._diagnostics[0]["divergences"]))
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
    return NUTSResult(
        samples=np.stack(samples), rounds_per_chain=tuple(rounds), warmup_rounds_per_chain=tuple(warm),
        step_sizes=tuple(steps), divergences=tuple(divergent), floats_down=counter.floats_down,
        floats_up=counter.floats_up, seconds=time.perf_counter() - start,
    )

