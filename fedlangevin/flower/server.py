"""The server side of FA-LD on Flower: a ``ServerApp`` that runs the sampler over real clients.

Round t (Deng et al., Alg. 1 / Alg. 4): draw the participating clients with the server's
own stream (Full / SchemeI / SchemeII over the clients, ordered by the index each node
reports), send the global iterate theta (R, d) and the round seed to them
(``Grid.send_and_receive``), average their replies beta_c with the participation weights
(p_c = n_c / sum n from the sizes the clients reported), keep the draw. The randomness
layout is :mod:`fedlangevin.fald.core.streams`', so a run with the same seed gives the samples
of ``FALD(..., streams="per_client")``.

Dropped clients (no reply within ``round_timeout``, an error reply, or a refused update:
wrong shape or non-finite values) are handled as the participation rule says for the
clients that are left: the weights of the dropped ones are removed and each chain's
remaining weights renormalised to sum 1 -- full participation averages the replies with
p_c / sum_{replied} p_c, schemes I and II take the mean over the draws that replied (a
smaller S that round). A chain none of whose sampled clients replied keeps its iterate for
the round. Each drop is recorded (``trace.dropouts``) and warned about. Note: with
renormalised weights the averaged private noise has variance 2 eta tau (1 - rho^2) /
sum_{replied} p_c, above the target's; rare drops barely move the law, frequent ones heat
it up.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from fedlangevin.fald.core.kernel import aggregate
from fedlangevin.fald.core.participation import Participation, as_participation
from fedlangevin.fald.core.schedules import as_schedule, check_schedule, round_step_sizes
from fedlangevin.fald.results.settings import Settings
from fedlangevin.fald.core.streams import SHARED, participation_stream, stream_seed
from fedlangevin.fald.results.trace import StepSizes
from fedlangevin.flower.checkpoint import load_checkpoint, save_checkpoint
from fedlangevin.flower.trace import Federation, FlowerCommunication, FlowerTrace
from fedlangevin.flower.protocol import BETA, CONFIG, INFO, NOISE_DTYPES, THETA, flwr_app, from_array_record, message_bytes, to_array_record

__all__ = ["FlowerRun", "run_server", "server_app", "wait_for_nodes", "discover"]


@dataclass(frozen=True)
class FlowerRun:
    """The settings of a federated FA-LD run on Flower (validated at construction).

    rounds : communication rounds T >= 1; step_size : eta (a number, a sequence or a
    callable k -> eta_k, as :class:`fedlangevin.FALD`); local_steps : K; temperature : tau;
    correlation : rho; participation : Full (default), SchemeI(S) or SchemeII(S); chains :
    R; seed : of the server's streams (round seeds, participation); warmup, thin : which
    rounds' iterates are kept (as ``FALD.run``); batch_size : per client and step (None:
    full gradients); noise_dtype : "float32" or "float64"; init : theta_0, (d,) or (R, d)
    (default zeros); num_nodes : N, the nodes to wait for; node_timeout : seconds to wait
    for them; round_timeout : seconds to wait for the replies of a round (None: Flower's
    default, no limit); checkpoint : a file the server writes every ``checkpoint_every``
    rounds and resumes from when it exists.
    """

    rounds: int
    step_size: Any
    num_nodes: int
    local_steps: int = 1
    temperature: float = 1.0
    correlation: float = 0.0
    participation: Participation | None = None
    chains: int = 1
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

    def __post_init__(self) -> None:
        from fedlangevin._validation import check_int, check_real, check_seed

        for name, low in (("rounds", 1), ("num_nodes", 1), ("local_steps", 1), ("chains", 1), ("warmup", 0),
                          ("thin", 1), ("checkpoint_every", 1)):
            check_int(name, getattr(self, name), low)
        if self.warmup >= self.rounds:
            raise ValueError(f"warmup must be < rounds = {self.rounds}; got {self.warmup}")
        check_real("temperature", self.temperature, low=0.0, low_open=True)
        check_real("correlation", self.correlation, low=0.0, high=1.0)
        check_seed("seed", self.seed)
        check_real("node_timeout", self.node_timeout, low=0.0, low_open=True)
        if self.round_timeout is not None:
            check_real("round_timeout", self.round_timeout, low=0.0, low_open=True)
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, 1)
        if self.noise_dtype not in NOISE_DTYPES:
            raise ValueError(f"noise_dtype must be one of {sorted(NOISE_DTYPES)}; got {self.noise_dtype!r}")
        object.__setattr__(self, "participation", as_participation(self.participation))
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


def discover(grid, node_ids: list[int], timeout: float) -> Federation:
    """Ask every node for its client index, n_c and d; order the nodes by client index."""
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
    sizes = torch.tensor([found[i][1] for i in order], dtype=torch.int64)
    return Federation(tuple(order), sizes, sizes.double() / int(sizes.sum()), dims.pop())


def _train_message(app, node: int, theta, t: int, etas, weight: float, run: FlowerRun):
    config = app.ConfigRecord({
        "round": t, "round_seed": stream_seed(run.seed, SHARED, t), "step_sizes": [float(e) for e in etas],
        "weight": weight, "temperature": float(run.temperature), "correlation": float(run.correlation),
        "batch_size": 0 if run.batch_size is None else int(run.batch_size), "noise_dtype": run.noise_dtype,
    })
    content = app.RecordDict({THETA: to_array_record(THETA, theta), CONFIG: config})
    return app.Message(content, dst_node_id=node, message_type=app.MessageType.TRAIN)


def _received(reply, shape, client: int, t: int) -> tuple[torch.Tensor | None, str]:
    """The client's beta, or None and why it is refused."""
    if reply is None:
        return None, "no reply"
    if reply.has_error():
        return None, f"error reply: {reply.error.reason}"
    try:
        beta = from_array_record(reply.content.array_records.get(BETA), BETA, f"reply of client {client}")
    except ValueError as exc:
        return None, str(exc)
    if tuple(beta.shape) != tuple(shape):
        return None, f"an update of shape {tuple(beta.shape)}, expected {tuple(shape)}"
    if not bool(torch.isfinite(beta).all()):
        return None, "a non-finite update (refused)"
    return beta, ""


def run_server(grid, run: FlowerRun, *, on_round: Callable[[int], None] | None = None) -> FlowerTrace:
    """Run ``run`` over the nodes of ``grid``; returns the trace (the API of ``FALD.run``'s)."""
    app = flwr_app()
    fed = discover(grid, wait_for_nodes(grid, run.num_nodes, run.node_timeout), run.node_timeout)
    n, d, r = fed.num_clients, fed.dim, run.chains
    rule = run.participation
    rule.validate(fed.weights)
    schedule = as_schedule(run.step_size)
    p = fed.weights.clone()
    state = load_checkpoint(run.checkpoint, run, fed) if run.checkpoint is not None else None
    if state is None:
        theta = torch.zeros(r, d, dtype=torch.float64) if run.init is None else \
            torch.as_tensor(run.init, dtype=torch.float64).expand(r, d).clone()
        state = {"round": 0, "theta": theta, "draws": [], "draw_rounds": [], "uploads": 0.0, "bytes_up": 0,
                 "bytes_down": 0, "dropouts": {}, "seconds": 0.0}
    start = state["round"]
    timeout = 3600.0 if run.round_timeout is None else float(run.round_timeout)
    for j, etas in enumerate(round_step_sizes(schedule, start * run.local_steps, run.local_steps, run.rounds - start),
                             start=start + 1):
        began = time.perf_counter()
        t, theta = j - 1, state["theta"]
        w = rule.weights(p, r, participation_stream(run.seed, t))
        taking_part = ((w != 0) if w.dim() == 1 else (w != 0).any(dim=0)).nonzero().flatten().tolist()
        messages = [_train_message(app, fed.node_ids[c], theta, t, etas, float(p[c]), run) for c in taking_part]
        state["bytes_down"] += sum(message_bytes(m.content) for m in messages)
        replies = {int(m.metadata.src_node_id): m for m in grid.send_and_receive(messages, timeout=timeout)}
        beta = torch.zeros(r, n, d, dtype=torch.float64)
        dropped = []
        for c in taking_part:
            reply = replies.get(fed.node_ids[c])
            if reply is not None and not reply.has_error():
                state["bytes_up"] += message_bytes(reply.content)
            got, why = _received(reply, (r, d), c, t)
            if got is None:
                dropped.append(c)
                warnings.warn(f"round {j}: client {c} (node {fed.node_ids[c]}) dropped: {why}", stacklevel=2)
            else:
                beta[:, c] = got
        new_theta = aggregate(beta, theta, _without(w, dropped), None) if dropped else aggregate(beta, theta, w, None)
        if dropped:
            state["dropouts"][j] = dropped
            mass = _without(w, dropped, normalise=False)
            stuck = (mass.sum(-1) == 0) if mass.dim() == 2 else (mass.sum().expand(r) == 0)
            new_theta[stuck] = theta[stuck]
        state["uploads"] += float(len(taking_part) - len(dropped)) if w.dim() == 1 else \
            float(((w != 0) & _alive(n, dropped)).sum()) / r
        state["theta"], state["round"] = new_theta, j
        if j > run.warmup and (j - run.warmup) % run.thin == 0:
            state["draws"].append(new_theta.clone())
            state["draw_rounds"].append(j)
        state["seconds"] += time.perf_counter() - began
        if run.checkpoint is not None and (j % run.checkpoint_every == 0 or j == run.rounds):
            save_checkpoint(run.checkpoint, run, fed, state)
        if on_round is not None:
            on_round(j)
    return _trace(run, fed, state, schedule)


def _alive(n: int, dropped: list[int]) -> torch.Tensor:
    alive = torch.ones(n, dtype=torch.bool)
    alive[dropped] = False
    return alive


def _without(w: torch.Tensor, dropped: list[int], normalise: bool = True) -> torch.Tensor:
    """The weights with the dropped clients removed, each chain's row renormalised to sum 1
    (a chain with nothing left keeps zeros: it keeps its iterate)."""
    w = w.clone()
    w[..., dropped] = 0.0
    if normalise:
        total = w.sum(-1, keepdim=True)
        w = torch.where(total > 0, w / torch.where(total > 0, total, torch.ones_like(total)), w)
    return w


def _trace(run: FlowerRun, fed: Federation, state: dict, schedule) -> FlowerTrace:
    rounds, k, r, d = state["round"], run.local_steps, run.chains, fed.dim
    samples = torch.stack(state["draws"], dim=1) if state["draws"] else torch.empty(r, 0, d, dtype=torch.float64)
    draw_rounds = np.asarray(state["draw_rounds"], dtype=np.int64)
    etas = StepSizes(schedule, 0, rounds * k)
    uploads = state["uploads"]
    comm = FlowerCommunication(rounds, uploads, uploads * d, float(rounds * fed.num_clients * d),
                               bytes_up=int(state["bytes_up"]), bytes_down=int(state["bytes_down"]))
    rule = run.participation
    settings = Settings(
        local_steps=k, temperature=float(run.temperature), correlation=float(run.correlation),
        participation=repr(rule), scheme=rule.scheme, num_sampled=rule.num_sampled, chains=r,
        num_clients=fed.num_clients, dim=d, batch_size=run.batch_size, step_size=repr(schedule), seed=int(run.seed),
        device="cpu", dtype="float64", noise_dtype=run.noise_dtype, upload="exact", streams="per_client",
    )
    eta_values = np.asarray(etas, dtype=np.float64)
    ledger = {"steps": rounds * k, "rounds": rounds, "eta_sum": float(eta_values.sum()),
              "eta_max": float(eta_values.max()) if eta_values.size else 0.0, "uploads": uploads}
    return FlowerTrace(samples=samples, draw_rounds=draw_rounds, draw_steps=draw_rounds * k, step_sizes=etas,
                       communication=comm, settings=settings, problem=fed, ledger=ledger,
                       dropouts={int(a): list(b) for a, b in state["dropouts"].items()},
                       seconds_per_round=state["seconds"] / max(rounds, 1))


def server_app(run: FlowerRun | Callable[[Any], FlowerRun], *, on_trace: Callable[[FlowerTrace], None] | None = None,
               output: str | None = None):
    """A Flower ``ServerApp`` running ``run`` (or ``run(context)``, built from the app's
    ``context.run_config``). ``on_trace(trace)`` receives the trace (same process, e.g. in
    ``run_simulation``); ``output``: a file the trace is saved to (:func:`save_trace`)."""
    from flwr.serverapp import ServerApp

    from fedlangevin.flower.checkpoint import save_trace

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
