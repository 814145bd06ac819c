"""The client side of FA-LD (and FA-HMC) on Flower: a ``ClientApp`` whose train handler runs one client's round.

Each Flower node holds one client c of the federation: its own data (which never leaves
it), as a :class:`~fedlangevin.problems.FederatedProblem` with one client. Per round the
handler receives the global iterate theta (R, d) and runs K local steps of eq. 10 (Deng et
al.) from it with :func:`fedlangevin.fald.engine.client_round`: the shared noise from the
round seed of the message (every client draws the same normals), its private noise and
minibatches from its own stream (seeded by the node's private seed, see
:mod:`fedlangevin.federation.streams`), and replies with its local state beta (R, d). In an FA-HMC
run the message also carries the global velocity v and the handler runs the K local steps of
:func:`fedlangevin.fahmc.client.client_round` from (theta, v) on the same streams, replying with
(theta_c, v_c).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from fedlangevin.federation.streams import private_stream
from fedlangevin.flower.protocol import (
    BETA, CONFIG, DEFAULT_SAMPLER, INFO, NOISE_DTYPES, THETA, flwr_app, from_array_record, node_kernels, to_array_record,
)
from fedlangevin.problems.base import FederatedProblem

__all__ = ["NodeProblem", "client_app", "partitioned", "handle_query", "handle_train", "local_states"]


@dataclass(frozen=True)
class NodeProblem:
    """What a Flower node holds: ``problem``, client ``client`` of the federation.

    problem : a FederatedProblem with ONE client, whose energy is that client's f^c in the
        federation, f^c = (1/p_c) NLL_c + U_0 (for a Pyro or custom model built on the
        node's data alone, pass ``weight=`` to the builder or use :meth:`AutodiffProblem
        .share` once p_c is known; see docs/flower.md).
    client : the client's index c in 0..N-1 (the server orders the nodes by it; it keys the
        private stream).
    num_examples : n_c, reported to the server, which sets p_c = n_c / sum n.
    private_seed : seed of the node's private-noise stream. Keep it secret in a deployment
        (the server must not know the private noise); ``None`` draws one from os.urandom.
    """

    problem: FederatedProblem
    client: int
    num_examples: int
    private_seed: int | None = None
    _shared: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.problem, FederatedProblem) or self.problem.num_clients != 1:
            raise ValueError("problem must be a FederatedProblem holding one client (e.g. problem.clients([c]))")
        if isinstance(self.client, bool) or not isinstance(self.client, int) or self.client < 0:
            raise ValueError(f"client must be an int >= 0; got {self.client!r}")
        if isinstance(self.num_examples, bool) or not isinstance(self.num_examples, int) or self.num_examples < 1:
            raise ValueError(f"num_examples must be an int >= 1; got {self.num_examples!r}")
        if self.private_seed is None:
            object.__setattr__(self, "private_seed", int.from_bytes(os.urandom(8), "little") >> 1)

    def problem_for(self, weight: float) -> FederatedProblem:
        """The node's problem as client c of a federation in which its weight is p_c = ``weight``:
        the problem itself if its weight is p_c already, else ``problem.share(weight)`` (a model
        built on the node's data alone, :meth:`fedlangevin.problems.AutodiffProblem.share`)."""
        own = float(self.problem.weights[0])
        if math.isclose(weight, own, rel_tol=1e-12, abs_tol=0.0):
            return self.problem
        share = getattr(self.problem, "share", None)
        if share is None:
            raise ValueError(f"client {self.client}: the federation's weight p_c = {weight!r} differs from the "
                             f"problem's {own!r}, and {type(self.problem).__name__} cannot be re-weighted; build the "
                             "node's problem as client c of the federation (e.g. full_problem.clients([c]))")
        cached = self._shared.get(weight)
        if cached is None:
            cached = self._shared[weight] = share(weight)
        return cached


def partitioned(problem: FederatedProblem, private_seed: int | None = None) -> Callable[[Any], NodeProblem]:
    """A node loader for Flower's simulation engine: node with ``partition-id`` c holds client c
    of ``problem`` (``problem.clients([c])``, with n_c from ``problem.client_sizes``).

    ``private_seed``: the private streams' seed of every node (``None``: each node its own
    random one). With the seed of the in-process run, the samples equal
    ``FALD(..., streams="per_client")``'s (a test set-up: the private noise is then known).
    """
    sizes = getattr(problem, "client_sizes", None)
    if sizes is None:
        raise ValueError("problem must have client_sizes (n_c, which set the weights p_c on the server)")

    def load(context) -> NodeProblem:
        c = int(context.node_config["partition-id"])
        n_c = int(sizes[c])
        return NodeProblem(problem.clients([c]), c, n_c, private_seed)

    return load


def handle_query(node: NodeProblem, message):
    """Reply to the server's query: client index, n_c and d."""
    app = flwr_app()
    info = app.ConfigRecord({"client": node.client, "num_examples": node.num_examples, "dim": node.problem.dim})
    return app.Message(app.RecordDict({INFO: info}), reply_to=message)


#: the config entries every train message carries (a family's own options besides, e.g. FA-HMC's
#: ``friction`` and ``splitting``: its node kernel's ``option_names``)
TRAIN_KEYS = ("round", "round_seed", "step_sizes", "weight", "temperature", "correlation", "batch_size", "noise_dtype")
#: the largest round number a train message may carry (the streams' keys are 64-bit)
MAX_ROUND = 2**63 - 1


def _entry(cfg, key: str):
    if key not in cfg:
        raise ValueError(f"train message: the config has no {key!r} (a train message carries {list(TRAIN_KEYS)})")
    return cfg[key]


def _kernel(cfg, kernels):
    """The node kernel of the message's family (config ``"sampler"``, FA-LD without one)."""
    kernels = node_kernels(kernels)
    sampler = cfg["sampler"] if "sampler" in cfg else DEFAULT_SAMPLER
    if sampler not in kernels:
        raise ValueError(f"train message: sampler must be one of {list(kernels)}; got {sampler!r}")
    return kernels[sampler]


def local_states(node: NodeProblem, theta: torch.Tensor, cfg, arrays=None, kernels=None) -> dict:
    """The client's K local steps of a train message (the handler's work, without Flower): from
    theta (R, d) and the family's other arrays ``arrays`` (FA-HMC: ``{"momentum": v}``), with the
    message's config ``cfg`` (a mapping: :data:`TRAIN_KEYS`, ``sampler`` and the family's options),
    the states to send back, ``{"beta": ...}`` and the family's arrays. ``kernels``: the families
    the node runs (:func:`~fedlangevin.flower.protocol.node_kernels`; default: the package's).

    Every entry of the config is checked before any step (ValueError naming it: a missing key, a
    batch size outside [0, n_c] (0: full batch), an empty or non-positive step list, a round or
    seed out of range, an array of another shape, ...), and the local state after them (a
    non-finite one is not sent).
    """
    return _states(node, theta, cfg, arrays, _kernel(cfg, kernels))


def _states(node: NodeProblem, theta: torch.Tensor, cfg, arrays, kernel) -> dict:
    """:func:`local_states` with the message's node kernel ``kernel`` already looked up."""
    from fedlangevin._validation import check_int, check_real, check_seed, check_step_sizes

    if theta.dim() != 2 or theta.shape[1] != node.problem.dim:
        raise ValueError(f"train message: theta must have shape (R, d = {node.problem.dim}); got {tuple(theta.shape)}")
    t = check_int("train message: round", _entry(cfg, "round"), 0, MAX_ROUND)
    round_seed = check_seed("train message: round_seed", _entry(cfg, "round_seed"))
    etas = list(check_step_sizes("train message: step_sizes", _entry(cfg, "step_sizes")))
    weight = check_real("train message: weight", _entry(cfg, "weight"), low=0.0, high=1.0, low_open=True)
    temperature = check_real("train message: temperature", _entry(cfg, "temperature"), low=0.0, low_open=True)
    correlation = check_real("train message: correlation", _entry(cfg, "correlation"), low=0.0, high=1.0)
    sizes = getattr(node.problem, "client_sizes", None)
    largest = node.num_examples if sizes is None else int(sizes.min())
    batch = check_int("train message: batch_size (0: full batch)", _entry(cfg, "batch_size"), 0, largest)
    noise = _entry(cfg, "noise_dtype")
    if noise not in NOISE_DTYPES:
        raise ValueError(f"train message: noise_dtype must be one of {sorted(NOISE_DTYPES)}; got {noise!r}")
    noise_weight = None
    if "noise_weight" in cfg:  # the participation rule's calibrated private noise (protocol.py)
        noise_weight = check_real("train message: noise_weight", cfg["noise_weight"], low=0.0, low_open=True)
    arrays = dict(arrays or {})
    for name in kernel.arrays:  # the state's arrays besides theta (FA-HMC: the velocity)
        if name not in arrays or tuple(arrays[name].shape) != tuple(theta.shape):
            got = tuple(arrays[name].shape) if name in arrays else None
            raise ValueError(f"train message: {name} must have theta's shape {tuple(theta.shape)}; got {got}")
    options = {name: _entry(cfg, name) for name in kernel.option_names}
    problem = node.problem_for(weight)
    if batch:
        problem.check_batch_size(batch)
    common = dict(weight=float(problem.weights[0]), temperature=temperature, correlation=correlation,
                  shared_generator=torch.Generator().manual_seed(round_seed),
                  private_generator=private_stream(node.private_seed, node.client, t),
                  batch_size=None if batch == 0 else batch, noise_dtype=NOISE_DTYPES[noise],
                  noise_weight=noise_weight)
    out = kernel.client_round(problem, theta, etas, arrays=arrays, options=options, **common)
    states = {BETA: out["beta"], **{name: out[name] for name in kernel.arrays}}
    if not all(bool(torch.isfinite(x).all()) for x in states.values()):
        raise ValueError(f"client {node.client}, round {t}: the local state is not finite (step size too large for "
                         "this client's curvature?); not sent")
    return states


def handle_train(node: NodeProblem, message, kernels=None):
    """Run the client's K local steps from the message's theta; reply with beta (R, d). The
    message's family (config ``"sampler"``, FA-LD without one) is looked up in ``kernels``
    (:func:`~fedlangevin.flower.protocol.node_kernels`: the package's by default) and its node
    kernel runs the round. An FA-HMC message (``"sampler": "fahmc"``) also carries the velocity v
    (R, d), the kernel's array ``"momentum"``: the client runs FA-HMC's client round from (theta, v)
    and replies with both its theta_c (``"beta"``) and v_c (``"momentum"``). The work is
    :func:`local_states`.

    Raises ValueError on a malformed message and on a non-finite local state (the client
    refuses to send it; the server then treats the client as dropped for the round).
    """
    content = message.content
    theta = from_array_record(content.array_records.get(THETA), THETA, "train message")
    cfg = content.config_records.get(CONFIG)
    if cfg is None:
        raise ValueError("train message: no config record")
    kernel = _kernel(cfg, kernels)  # looked up once: its arrays are read here, its round runs in _states
    arrays = {name: from_array_record(content.array_records.get(name), name, "train message") for name in kernel.arrays}
    states = _states(node, theta, cfg, arrays, kernel)
    app = flwr_app()
    return app.Message(app.RecordDict({k: to_array_record(k, x) for k, x in states.items()}), reply_to=message)


def client_app(load: Callable[[Any], NodeProblem], kernels=None):
    """A Flower ``ClientApp`` for FA-LD and FA-HMC (the server's ``FlowerRun(sampler=...)`` chooses).
    ``load(context) -> NodeProblem`` builds the node's problem from its Flower ``Context`` (e.g. its
    ``node_config``); it is called once per node. ``kernels``: the sampler families the nodes run
    (:func:`~fedlangevin.flower.protocol.node_kernels`; default: the package's)."""
    from flwr.clientapp import ClientApp

    if not callable(load):
        raise ValueError(f"load must be a callable load(context) -> NodeProblem; got {load!r}")
    families = node_kernels(kernels)
    app = ClientApp()
    nodes: dict[int, NodeProblem] = {}

    def node_of(context) -> NodeProblem:
        key = int(context.node_id)
        if key not in nodes:
            node = load(context)
            if not isinstance(node, NodeProblem):
                raise ValueError(f"load(context) must return a NodeProblem; got {type(node).__name__}")
            nodes[key] = node
        return nodes[key]

    @app.query()
    def query(message, context):
        return handle_query(node_of(context), message)

    @app.train()
    def train(message, context):
        return handle_train(node_of(context), message, families)

    return app

