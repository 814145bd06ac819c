"""FA-LD's server on the package's runner: a round over remote clients as a kernel.

The Flower server is one more sampler kernel (:data:`fedlangevin.federation.contracts.KERNEL`) run by
the shared :class:`~fedlangevin.runner.base.Runner`, which owns everything else as for
``FALD``: the plan (rounds, warm-up, thinning), the kept draws, the ledger and communication,
the settings record, checkpoints in the package's format (checksum, atomic write, weights-only
load, a lock against a second server on the same file) and resume.

:class:`ServerKernel` ``step(state, step_sizes, generator)`` is round t = ``state.round`` of
Deng et al.'s Alg. 1 / Alg. 4 with the randomness layout of :mod:`fedlangevin.federation.streams`
(so the same seed gives the samples of ``FALD(..., streams="per_client")``; the runner's
generator is not used): the participating clients drawn from the server's (seed, t) stream,
theta and the round seed sent to them and their local states beta_c received through an
*exchange* (:class:`fedlangevin.flower.server.FlowerExchange` over a Flower grid; anything with
``node_ids`` and ``round(t, theta, step_sizes, clients) -> Replies``), then the weighted average.

Dropped clients (no reply, an error reply, a refused update) are left out of the round as the
participation rule says for the clients that are left: their weights removed and each chain's
remaining weights renormalised to sum 1 (full participation: p_c / sum_{replied} p_c; schemes
I and II: the mean over the draws that replied). A chain none of whose sampled clients replied
keeps its iterate. Each drop is warned about and recorded (``trace.dropouts``). With
renormalised weights the averaged private noise has variance 2 eta tau (1 - rho^2) /
sum_{replied} p_c, above the target's: rare drops barely move the law, frequent ones heat it up.

:class:`FlowerRunner` adds to the runner what only a remote server has: the bytes carried, the
drops and the wall time per round (checkpointed with the run), the trace as a
:class:`~fedlangevin.flower.trace.FlowerTrace`, and :func:`serve`: a run of ``FlowerRun``'s plan,
started afresh or continued from its checkpoint (a server restarted with the same settings
draws exactly what the uninterrupted one would have: clients keep no state between rounds).

FA-HMC (``FlowerRun(sampler="fahmc")``): the state is FAHMC's own
:class:`~fedlangevin.fahmc.kernel.FAHMCState` (theta and the velocity v, zero at the start); v
is sent with theta and each client's v_c comes back with its theta_c; the server averages both
with the same weights (dropped clients as above, for v too: a chain with no client left keeps its
theta and v), and the runner checkpoints v with theta.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from typing import Any, Callable, NamedTuple

import torch

from fedlangevin._validation import check_fits
from fedlangevin.federation.rounds import aggregate
from fedlangevin.federation.streams import participation_stream
from fedlangevin.runner.io import checkpoint as ckpt
from fedlangevin.runner.io.records import check_runner_record
from fedlangevin.runner import resume as rs
from fedlangevin.runner.base import Runner
from fedlangevin.flower.protocol import DEFAULT_SAMPLER, MOMENTUM, node_kernels
from fedlangevin.flower.trace import Federation, FlowerCommunication, FlowerTrace, dropouts_from, dropouts_record, read_record

__all__ = ["FlowerRunner", "Replies", "ServerKernel", "ServerRound", "ServerState", "serve"]


class Replies(NamedTuple):
    """What an exchange returns for one round: ``betas`` {client: local state (R, d)} of the
    clients whose update was received, ``refused`` {client: why} of the others, the bytes sent
    down and up, and for FA-HMC ``momenta`` {client: local velocity v_c (R, d)} (the same clients
    as ``betas``)."""

    betas: dict
    refused: dict
    bytes_down: int
    bytes_up: int
    momenta: dict | None = None


@dataclasses.dataclass(frozen=True)
class ServerState:
    """The server's iterate theta (R, d) after round ``round`` (local steps so far: ``step``)."""

    theta: torch.Tensor
    step: int = 0
    round: int = 0


@dataclasses.dataclass(frozen=True)
class ServerRound:
    """What one server round reports (the kernel's ``info``): its number j = t + 1, the
    participation weights, the uploads received (per chain), the clients dropped, the bytes
    and the wall time."""

    round: int
    weights: torch.Tensor
    uploads: float
    dropped: tuple[int, ...]
    bytes_down: int
    bytes_up: int
    seconds: float


def _without(w: torch.Tensor, dropped: list[int], normalise: bool = True) -> torch.Tensor:
    """The weights with the dropped clients removed, each chain's row renormalised to sum 1
    (a chain with nothing left keeps zeros: it keeps its iterate)."""
    w = w.clone()
    w[..., dropped] = 0.0
    if normalise:
        total = w.sum(-1, keepdim=True)
        w = torch.where(total > 0, w / torch.where(total > 0, total, torch.ones_like(total)), w)
    return w


class ServerKernel:
    """The server round over remote clients of the family ``run.node`` (a
    :class:`~fedlangevin.federation.nodes.NodeKernel`: FA-LD, or FA-HMC with ``run.sampler == "fahmc"``; module
    docstring), a :data:`~fedlangevin.federation.contracts.KERNEL`. ``exchange``: the clients' side of a round;
    ``problem``: the :class:`~fedlangevin.flower.trace.Federation` (p_c); ``run``: the
    :class:`~fedlangevin.flower.server.FlowerRun` (seed, K, tau, rho, participation, ...);
    ``on_round(j)``: called after round j's average (before the runner keeps it). ``step`` does not
    use the runner's generator: its randomness is the (seed, t) streams the clients open too."""

    def __init__(self, exchange: Any, problem: Federation, run: Any,
                 on_round: Callable[[int], None] | None = None) -> None:
        self.exchange, self.problem, self.run, self.on_round = exchange, problem, run, on_round
        self.p = problem.weights.to(torch.float64)
        self.node = getattr(run, "node", None) or node_kernels()[getattr(run, "sampler", DEFAULT_SAMPLER)]
        if not set(self.node.arrays) <= {MOMENTUM}:
            raise ValueError(f"sampler {self.node.name!r}: its state's arrays {list(self.node.arrays)} are not all "
                             f"carried by the Flower protocol (theta and {MOMENTUM!r})")
        self.name = self.node.label

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(int(i) for i in self.exchange.node_ids)

    def init(self, theta0: torch.Tensor):
        if self.node.state is None:
            return ServerState(theta=theta0)
        return self.node.state(theta0, **({} if self.node.initial is None else self.node.initial(theta0)))

    def step(self, state, step_sizes, generator=None):
        began = time.perf_counter()
        theta, t = state.theta, int(state.round)
        r, n = theta.shape[0], self.problem.num_clients
        w = self.run.participation.weights(self.p, r, participation_stream(self.run.seed, t))
        taking_part = ((w != 0) if w.dim() == 1 else (w != 0).any(dim=0)).nonzero().flatten().tolist()
        arrays = {name: getattr(state, name) for name in self.node.arrays}  # FA-HMC: the velocity v
        replies = self.exchange.round(t, theta, list(step_sizes), taking_part, **arrays)
        dropped = sorted(int(c) for c in replies.refused)
        for c in dropped:
            warnings.warn(f"round {t + 1}: client {c} dropped: {replies.refused[c]}", stacklevel=2)
        new_theta = self._average(replies.betas, theta, w, dropped)
        received = {MOMENTUM: replies.momenta or {}}  # the arrays a reply carries besides beta
        # each averaged with theta's weights (FA-HMC's v: what its kernel averages)
        new = {name: self._average(received[name], arrays[name], w, dropped) for name in self.node.arrays}
        if w.dim() == 1:
            uploads = float(len(taking_part) - len(dropped))
        else:
            alive = torch.ones(n, dtype=torch.bool)
            alive[dropped] = False
            uploads = float(((w != 0) & alive).sum()) / r
        if self.on_round is not None:
            self.on_round(t + 1)
        info = ServerRound(t + 1, w, uploads, tuple(dropped), int(replies.bytes_down), int(replies.bytes_up),
                           time.perf_counter() - began)
        if self.node.state is None:
            return ServerState(new_theta, state.step + len(step_sizes), t + 1), info
        return self.node.state(new_theta, state.step + len(step_sizes), t + 1, **new), info

    def _average(self, received: dict, current: torch.Tensor, w: torch.Tensor, dropped: list[int]) -> torch.Tensor:
        """sum_c w_rc x_c over the clients' ``received`` states with the dropped clients' weights
        removed and renormalised; a chain with no client left keeps ``current``."""
        r, (n, d) = current.shape[0], (self.problem.num_clients, self.problem.dim)
        local = torch.zeros(r, n, d, dtype=current.dtype)
        for c, got in received.items():
            local[:, c] = got
        if not dropped:
            return aggregate(local, current, w, None)
        new = aggregate(local, current, _without(w, dropped), None)
        mass = _without(w, dropped, normalise=False)
        stuck = (mass.sum(-1) == 0) if mass.dim() == 2 else (mass.sum().expand(r) == 0)
        new[stuck] = current[stuck]
        return new

    def uploads(self, info: ServerRound) -> float:
        return info.uploads

    def settings(self) -> dict:
        rule, run = self.run.participation, self.run
        return {"temperature": float(run.temperature), "correlation": float(run.correlation),
                "participation": repr(rule), "scheme": rule.scheme, "num_sampled": rule.num_sampled,
                "batch_size": run.batch_size, "noise_dtype": run.noise_dtype, "upload": "exact",
                "streams": "per_client"}

    def record(self) -> dict:
        """What makes a checkpoint this run's (compared on resume): the seed, R, K, the sampler's
        settings and the clients' sizes."""
        run = self.run
        return {"seed": int(run.seed), "chains": int(run.chains), "local_steps": int(run.local_steps),
                "temperature": float(run.temperature), "correlation": float(run.correlation),
                "participation": repr(run.participation), "batch_size": run.batch_size,
                "noise_dtype": run.noise_dtype, "client_sizes": [int(s) for s in self.problem.client_sizes.tolist()],
                **({} if self.node.name == DEFAULT_SAMPLER else  # FA-LD's record as it was
                   {"sampler": self.node.name, **{name: getattr(run, name) for name in self.node.option_names}})}


class FlowerRunner(Runner):
    """The shared runner with a remote server's own accounts, declared here: ``bytes_up``,
    ``bytes_down`` (message contents, all chains), ``dropouts`` {round: [clients]}, ``seconds``
    (wall time of the rounds). They are checkpointed with the run (entry ``"flower"``) and go
    into the trace (:class:`~fedlangevin.flower.trace.FlowerTrace`)."""

    bytes_up: int
    bytes_down: int
    dropouts: dict
    seconds: float

    def _start(self) -> None:
        super()._start()
        self.bytes_up, self.bytes_down, self.dropouts, self.seconds = 0, 0, {}, 0.0

    def _uploads(self, info: ServerRound) -> float:
        self.bytes_up += info.bytes_up
        self.bytes_down += info.bytes_down
        self.seconds += info.seconds
        if info.dropped:
            self.dropouts[info.round] = list(info.dropped)
        return info.uploads

    def _per_round_floats(self) -> tuple[float, float]:
        """Besides theta's d floats per upload and N d down, as many per array of the family's state
        (FA-HMC: the velocity, as FAHMC's)."""
        extra = len(getattr(getattr(self._kernel, "node", None), "arrays", ()))
        if not extra:
            return super()._per_round_floats()
        d = self.problem.dim
        return float(extra * d), float(extra * self.problem.num_clients * d)

    def _record(self) -> dict:
        return {**super()._record(), "flower": {"bytes_up": int(self.bytes_up), "bytes_down": int(self.bytes_down),
                                                "dropouts": dropouts_record(self.dropouts),
                                                "seconds": float(self.seconds)}}

    def _trace(self, run) -> FlowerTrace:
        trace = super()._trace(run)
        comm = trace.communication
        values = {f.name: getattr(trace, f.name) for f in dataclasses.fields(trace)}
        values["communication"] = FlowerCommunication(*dataclasses.astuple(comm), bytes_up=int(self.bytes_up),
                                                      bytes_down=int(self.bytes_down))
        return FlowerTrace(**values, dropouts={int(j): list(c) for j, c in self.dropouts.items()},
                           seconds_per_round=self.seconds / max(int(self.state.round), 1),
                           node_ids=getattr(self._kernel, "node_ids", ()))

    @classmethod
    def continued(cls, path, kernel: ServerKernel) -> "FlowerRunner":
        """The runner of the checkpoint at ``path`` with its run to continue (also a run that had
        finished: a server given more rounds extends it). ValueError if the checkpoint belongs
        to another run (the kernel's ``record()`` differs) or is past ``rounds``;
        :class:`~fedlangevin.runner.io.checkpoint.CheckpointError` if it is not a Flower server's
        checkpoint, is damaged or holds wrong entries."""
        run = kernel.run
        record, e = read_record(path, "Flower FA-LD server checkpoint")
        if record.get("kind") == "fedlangevin-flower-checkpoint":
            e.fail("it is a Flower server checkpoint of an earlier version (before the server ran on the package's "
                   "runner); it cannot be continued: start the run again with a new checkpoint path")
        check_runner_record(record, e.path)
        stored = ckpt.decode(record["kernel"])
        if stored != kernel.record():
            raise ValueError(f"checkpoint: {str(path)!r} belongs to another run ({stored}); this one is "
                             f"{kernel.record()}")
        if record["round"] > run.rounds:
            raise ValueError(f"checkpoint: {str(path)!r} is at round {record['round']}, past rounds = {run.rounds}")
        flower = e.dict("flower", record.get("flower"), ("bytes_up", "bytes_down", "dropouts", "seconds"))
        accounts = (e.int("flower['bytes_up']", flower["bytes_up"]), e.int("flower['bytes_down']", flower["bytes_down"]),
                    dropouts_from(e, flower["dropouts"]), e.real("flower['seconds']", flower["seconds"], low=0.0))
        # the record read above, not the file a second time (it could have changed in between)
        runner = rs.resume_runner(cls, path, kernel, problem=kernel.problem, step_size=run.step_size,
                                  read=(record, e.path))
        if runner._pending is None:  # a finished run: continued (its draws kept) when rounds is larger
            runner._pending = rs.pending_run(runner, dict(record["run"], finished=False), rs.main_path(e.path),
                                             e.path, None)
        runner.bytes_up, runner.bytes_down, runner.dropouts, runner.seconds = accounts
        return runner


def serve(exchange: Any, problem: Federation, run: Any, on_round: Callable[[int], None] | None = None) -> FlowerTrace:
    """Run ``run`` (a :class:`~fedlangevin.flower.server.FlowerRun`) over ``exchange``'s clients of
    ``problem``: from its checkpoint where ``run.checkpoint`` exists, else from the start. The
    participation rule and the batch size are checked against the federation first (ValueError
    naming them: e.g. scheme II's S larger than the number of clients), before any message."""
    run.participation.validate(problem.weights)
    problem.check_batch_size(run.batch_size)
    n, d = problem.num_clients, problem.dim
    check_fits("chains", 8 * run.chains * d * (n + 4), "cpu", f"a round's states of {run.chains} chains x "
               f"{n} clients x d = {d} on the server", "use fewer chains")
    kernel = ServerKernel(exchange, problem, run, on_round)
    if run.checkpoint is not None and os.path.lexists(run.checkpoint):  # (a link loop is reported by the reader)
        runner = FlowerRunner.continued(run.checkpoint, kernel)
        left = run.rounds - runner.unfinished["done"]
        try:
            if left == 0:  # at the end already: its trace, no round
                return runner._trace(runner._pending)
            return runner.run(left, warmup=run.warmup, thin=run.thin, checkpoint_every=run.checkpoint_every)
        finally:
            runner.discard_unfinished()  # the checkpoint's lock let go, also when the plan was refused
    runner = FlowerRunner(kernel, problem, run.step_size, local_steps=run.local_steps, chains=run.chains,
                          init=run.init, seed=run.seed)
    return runner.run(run.rounds, warmup=run.warmup, thin=run.thin, checkpoint=run.checkpoint,
                      checkpoint_every=None if run.checkpoint is None else run.checkpoint_every)
