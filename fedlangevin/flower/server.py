"""The server side of FA-LD on Flower: a ``ServerApp`` that runs the sampler over real clients.

The server is the package's runner (:class:`fedlangevin.runner.base.Runner`) running the
server-round kernel of :mod:`fedlangevin.flower.runner` over the Flower grid: it waits for the
nodes, asks each for its client index, n_c and d (:func:`discover`: the
:class:`~fedlangevin.flower.trace.Federation` it samples, p_c = n_c / sum n), and every round
sends the global iterate theta (R, d) and the round seed to the participating clients
(:class:`FlowerExchange`, ``Grid.send_and_receive``) and averages their replies. The plan,
draws, ledger, settings, checkpoints and resume are the runner's, as for ``FALD``; the
randomness layout is :mod:`fedlangevin.federation.streams`', so a run with the same seed gives
the samples of ``FALD(..., streams="per_client")``. Dropped clients: see
:mod:`fedlangevin.flower.runner`. ``FlowerRun(sampler="fahmc")`` runs FA-HMC the same way, the
velocity v travelling and averaged with theta (:mod:`fedlangevin.flower.protocol`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from fedlangevin.federation.participation import Participation, as_participation
from fedlangevin.federation.schedules import as_schedule, check_schedule
from fedlangevin.federation.streams import SHARED, stream_seed
from fedlangevin.flower.protocol import (
    BETA, CONFIG, DEFAULT_SAMPLER, INFO, NOISE_DTYPES, THETA, flwr_app, from_array_record, message_bytes, node_kernels,
    to_array_record,
)
from fedlangevin.flower.runner import Replies, serve
from fedlangevin.flower.trace import Federation, FlowerTrace, save_trace

__all__ = ["MAX_LOCAL_STEPS", "FlowerExchange", "FlowerRun", "discover", "run_server", "server_app", "wait_for_nodes"]

#: the largest K of a Flower run: a train message carries the round's K step sizes (8 bytes each, 128 MiB
#: at this K, a quarter of Flower's 512 MiB limit on a message)
MAX_LOCAL_STEPS = 2**24


@dataclass(frozen=True)
class FlowerRun:
    """The settings of a federated FA-LD or FA-HMC run on Flower (validated at construction).

    rounds : communication rounds T >= 1; step_size : eta (a number, a sequence or a
    callable k -> eta_k, as :class:`fedlangevin.FALD`); local_steps : K; temperature : tau;
    correlation : rho; participation : Full (default), SchemeI(S) or SchemeII(S); chains :
    R (default 4, as :class:`fedlangevin.FALD`: R-hat needs several chains); seed : of the server's streams (round seeds, participation); warmup, thin : which
    rounds' iterates are kept (as ``FALD.run``); batch_size : per client and step (None:
    full gradients); noise_dtype : "float32" or "float64"; init : theta_0, (d,) or (R, d)
    (default zeros); num_nodes : N, the nodes to wait for; node_timeout : seconds to wait
    for them; round_timeout : seconds to wait for the replies of a round (None: Flower's
    default, no limit); checkpoint : a file the server writes every ``checkpoint_every``
    rounds and at the end, and continues from when it exists (the runner's checkpoint:
    ``<checkpoint>.prev`` and ``<checkpoint>.lock`` beside it; ``docs/long-runs.md``).

    sampler : ``"fald"`` (default) or ``"fahmc"``: FA-HMC's K local steps of underdamped Langevin
    dynamics (:mod:`fedlangevin.fahmc.kernel`, M = I), the server broadcasting and averaging both
    theta and the velocity v (zero at the start), which its checkpoints carry too; step_size is
    then h. friction : gamma > 0 (FA-HMC only; default 1.0); splitting : ``"BAOAB"`` (default) or
    ``"OBABO"`` (FA-HMC only). The warm-up's ``"auto"`` (of the step size or the friction) is not
    available on Flower: give numbers (``ValueError`` naming the argument). kernels : the sampler
    families ``sampler`` may name (:func:`~fedlangevin.flower.protocol.node_kernels`; default: the
    package's, ``fl.FALD.node`` and ``fl.FAHMC.node``); the family's node kernel is ``run.node``.
    """

    rounds: int
    step_size: Any
    num_nodes: int
    local_steps: int = 1
    temperature: float = 1.0
    correlation: float = 0.0
    participation: Participation | None = None
    chains: int = 4
    seed: int = 0
    warmup: int = 0
    thin: int = 1
    batch_size: int | None = None
    noise_dtype: str = "float32"
    init: Any = None
    node_timeout: float = 120.0
    round_timeout: float | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 10
    sampler: str = "fald"
    friction: Any = None
    splitting: str | None = None
    kernels: Any = None

    def __post_init__(self) -> None:
        from fedlangevin._validation import (
            check_checkpoint_path, check_choice, check_fits, check_int, check_real, check_seed,
        )

        kernels = node_kernels(self.kernels)
        check_choice("sampler", self.sampler, tuple(kernels))
        node = kernels[self.sampler]
        for name in ("step_size", "friction"):
            if isinstance(getattr(self, name), str) and getattr(self, name) == "auto":
                raise ValueError(f"{name}='auto' (adapted in a warm-up) is not available on Flower: give {name} as "
                                 "a number > 0" + (", a sequence or a callable" if name == "step_size" else ""))
        given = {name: getattr(self, name) for name in ("friction", "splitting") if getattr(self, name) is not None}
        for name, value in given.items():
            if name not in node.option_names:
                takes = [k for k, v in kernels.items() if name in v.option_names]
                raise ValueError(f"{name} applies to sampler={takes[0] if takes else '?'!r} only; got {name}={value!r} "
                                 f"with sampler={self.sampler!r}")
        for name, value in node.options(given).items():  # the family's options, checked, with their defaults
            object.__setattr__(self, name, value)
        object.__setattr__(self, "node", node)

        def keep(name, value):  # the checked value, normalised (a numpy or 0-d form becomes the Python number)
            object.__setattr__(self, name, value)
            return value

        for name, low in (("rounds", 1), ("num_nodes", 1), ("chains", 1), ("warmup", 0), ("thin", 1),
                          ("checkpoint_every", 1)):
            keep(name, check_int(name, getattr(self, name), low))
        if keep("local_steps", check_int("local_steps", self.local_steps, 1)) > MAX_LOCAL_STEPS:
            raise ValueError(f"local_steps must be at most {MAX_LOCAL_STEPS} on Flower (every train message carries "
                             f"the round's K step sizes); got {self.local_steps}: use fewer local steps per round")
        check_fits("chains", 2 * 8 * self.chains, "cpu", f"the server's iterate and average of {self.chains} chains "
                   "(at d = 1)", "use fewer chains")
        if self.warmup >= self.rounds:
            raise ValueError(f"warmup must be < rounds = {self.rounds}; got {self.warmup}")
        keep("temperature", check_real("temperature", self.temperature, low=0.0, low_open=True))
        keep("correlation", check_real("correlation", self.correlation, low=0.0, high=1.0))
        keep("seed", check_seed("seed", self.seed))
        keep("node_timeout", check_real("node_timeout", self.node_timeout, low=0.0, low_open=True))
        if self.round_timeout is not None:
            keep("round_timeout", check_real("round_timeout", self.round_timeout, low=0.0, low_open=True))
        if self.batch_size is not None:
            keep("batch_size", check_int("batch_size", self.batch_size, 1))
        if self.noise_dtype not in NOISE_DTYPES:
            raise ValueError(f"noise_dtype must be one of {sorted(NOISE_DTYPES)}; got {self.noise_dtype!r}")
        if self.checkpoint is not None:
            check_checkpoint_path(self.checkpoint)
        object.__setattr__(self, "participation", as_participation(self.participation))
        if self.participation.scheme == "II" and self.participation.num_sampled > self.num_nodes:
            raise ValueError(f"participation: SchemeII draws S distinct clients of the num_nodes = {self.num_nodes} "
                             f"nodes (S in [1, {self.num_nodes}]); got num_sampled = {self.participation.num_sampled}")
        schedule = as_schedule(self.step_size)
        check_schedule(schedule, 0, self.rounds * self.local_steps)


def wait_for_nodes(grid, count: int, timeout: float) -> list[int]:
    """The ids of the registered nodes once there are at least ``count`` (Flower registers
    simulated and deployed nodes asynchronously); RuntimeError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        ids = sorted(int(i) for i in grid.get_node_ids())
        if len(ids) >= count:
            return ids
        if time.monotonic() >= deadline:
            raise RuntimeError(f"only {len(ids)} of num_nodes = {count} Flower nodes registered within "
                               f"{timeout:g} s; start the nodes or lower num_nodes")
        time.sleep(0.2)


def discover(grid, node_ids: list[int], timeout: float) -> tuple[tuple[int, ...], Federation]:
    """Ask every node for its client index, n_c and d: (the node of each client 0..N-1, the
    :class:`~fedlangevin.flower.trace.Federation`)."""
    app = flwr_app()
    messages = [app.Message(app.RecordDict({INFO: app.ConfigRecord({"fald": 1})}), dst_node_id=i,
                            message_type=app.MessageType.QUERY) for i in node_ids]
    replies = list(grid.send_and_receive(messages, timeout=timeout))
    found = {}
    for reply in replies:
        if reply.has_error():
            raise RuntimeError(f"node {reply.metadata.src_node_id} failed the FA-LD query: {reply.error.reason}")
        info = reply.content.config_records[INFO]
        found[int(reply.metadata.src_node_id)] = (int(info["client"]), int(info["num_examples"]), int(info["dim"]))
    missing = sorted(set(node_ids) - set(found))
    if missing:
        raise RuntimeError(f"nodes {missing} did not answer the FA-LD query within {timeout:g} s")
    order = sorted(found, key=lambda i: found[i][0])
    clients = [found[i][0] for i in order]
    if clients != list(range(len(order))):
        raise RuntimeError(f"the nodes' client indices must be 0..{len(order) - 1}, one per node; got {sorted(clients)}")
    dims = {found[i][2] for i in order}
    if len(dims) != 1:
        raise RuntimeError(f"the nodes disagree on the dimension d: {sorted(dims)}")
    return tuple(order), Federation([found[i][1] for i in order], dims.pop())


def _train_message(app, node: int, theta, t: int, etas, weight: float, run: FlowerRun, arrays=None,
                   noise_weight: float | None = None):
    config = {
        "round": t, "round_seed": stream_seed(run.seed, SHARED, t), "step_sizes": [float(e) for e in etas],
        "weight": weight, "temperature": float(run.temperature), "correlation": float(run.correlation),
        "batch_size": 0 if run.batch_size is None else int(run.batch_size), "noise_dtype": run.noise_dtype,
    }
    if noise_weight is not None and noise_weight != weight:  # the participation's calibrated private noise
        config["noise_weight"] = float(noise_weight)
    records = {THETA: to_array_record(THETA, theta)}
    if run.sampler != DEFAULT_SAMPLER:  # FA-LD's messages stay as they were (no sampler key: FA-LD)
        config.update(sampler=run.sampler, **{name: getattr(run, name) for name in run.node.option_names})
    for name in run.node.arrays:  # the state's arrays besides theta (FA-HMC: the velocity v)
        records[name] = to_array_record(name, arrays[name])
    content = app.RecordDict({**records, CONFIG: app.ConfigRecord(config)})
    return app.Message(content, dst_node_id=node, message_type=app.MessageType.TRAIN)


def _received(reply, shape, client: int, names=(BETA,)) -> tuple[list | None, str]:
    """The client's arrays ``names`` (beta; and v for FA-HMC), or None and why they are refused."""
    if reply is None:
        return None, "no reply"
    if reply.has_error():
        return None, f"error reply: {reply.error.reason}"
    got = []
    for name in names:
        try:
            array = from_array_record(reply.content.array_records.get(name), name, f"reply of client {client}")
        except ValueError as exc:
            return None, str(exc)
        if tuple(array.shape) != tuple(shape):
            return None, f"an update of shape {tuple(array.shape)}, expected {tuple(shape)}"
        if not bool(torch.isfinite(array).all()):
            return None, "a non-finite update (refused)"
        got.append(array)
    return got, ""


class FlowerExchange:
    """The clients' side of a server round over a Flower grid (the exchange of
    :class:`fedlangevin.flower.runner.ServerKernel`): train messages with theta (and for FA-HMC the
    velocity v), the round seed, the K step sizes and p_c to the nodes of the participating
    clients, their replies beta (and v_c) received within ``round_timeout`` and checked (shape
    (R, d), finite), the bytes counted."""

    def __init__(self, grid, node_ids: tuple[int, ...], problem: Federation, run: FlowerRun) -> None:
        self.grid, self.node_ids, self.run = grid, tuple(node_ids), run
        self.weights = [float(p) for p in problem.weights.tolist()]
        self.noise_weights = [float(q) for q in run.participation.noise_weights(problem.weights).tolist()]
        self.timeout = 3600.0 if run.round_timeout is None else float(run.round_timeout)

    def round(self, t: int, theta: torch.Tensor, step_sizes, clients, momentum: torch.Tensor | None = None) -> Replies:
        app = flwr_app()
        arrays = {} if momentum is None else {"momentum": momentum}
        messages = [_train_message(app, self.node_ids[c], theta, t, step_sizes, self.weights[c], self.run, arrays,
                                   self.noise_weights[c])
                    for c in clients]
        down = sum(message_bytes(m.content) for m in messages)
        replies = {int(m.metadata.src_node_id): m for m in self.grid.send_and_receive(messages, timeout=self.timeout)}
        names = (BETA, *self.run.node.arrays)
        betas, momenta, refused, up = {}, {}, {}, 0
        for c in clients:
            reply = replies.get(self.node_ids[c])
            if reply is not None and not reply.has_error():
                up += message_bytes(reply.content)
            got, why = _received(reply, tuple(theta.shape), c, names)
            if got is None:
                refused[c] = f"node {self.node_ids[c]}: {why}"
            else:
                betas[c] = got[0].to(theta.dtype)
                if len(got) > 1:
                    momenta[c] = got[1].to(theta.dtype)
        return Replies(betas, refused, down, up, momenta)


def run_server(grid, run: FlowerRun, *, on_round: Callable[[int], None] | None = None) -> FlowerTrace:
    """Run ``run`` over the nodes of ``grid`` on the package's runner
    (:func:`fedlangevin.flower.runner.serve`): from ``run.checkpoint`` where it exists. Returns the
    trace (the API of ``FALD.run``'s). ``on_round(j)`` is called after round j's average, before the
    runner keeps it and checkpoints (an exception there stops the run at round j - 1, as a kill)."""
    node_ids, problem = discover(grid, wait_for_nodes(grid, run.num_nodes, run.node_timeout), run.node_timeout)
    return serve(FlowerExchange(grid, node_ids, problem, run), problem, run, on_round)


def server_app(run: FlowerRun | Callable[[Any], FlowerRun], *, on_trace: Callable[[FlowerTrace], None] | None = None,
               output: str | None = None):
    """A Flower ``ServerApp`` running ``run`` (or ``run(context)``, built from the app's
    ``context.run_config``). ``on_trace(trace)`` receives the trace (same process, e.g. in
    ``run_simulation``); ``output``: a file the trace is saved to (:func:`save_trace`)."""
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        settings = run(context) if callable(run) else run
        trace = run_server(grid, settings)
        if output is not None:
            save_trace(trace, output)
        if on_trace is not None:
            on_trace(trace)

    return app
