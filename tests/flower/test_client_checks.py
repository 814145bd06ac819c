"""The checks of a node's train message (:func:`fedlangevin.flower.client.local_states`, the work of
``handle_train``), without Flower: a config the node cannot run is refused naming the entry, before
any local step."""

import pytest
import torch

from fedlangevin.fald.engine import client_round
from fedlangevin.federation.streams import SHARED, private_stream, shared_stream, stream_seed
from fedlangevin.flower import NodeProblem
from fedlangevin.flower.client import local_states
from fedlangevin.flower.protocol import BETA, MOMENTUM
from fedlangevin.problems import GaussianSimulation

FULL = GaussianSimulation(num_clients=4, seed=0)  # 20 rows per client
THETA = torch.randn(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def _node() -> NodeProblem:
    return NodeProblem(FULL.clients([2]), client=2, num_examples=20, private_seed=5)


def _config(**change):
    cfg = {"round": 3, "round_seed": stream_seed(11, SHARED, 3), "step_sizes": [1e-3, 1e-3],
           "weight": float(FULL.weights[2]), "temperature": 1.0, "correlation": 0.5, "batch_size": 0,
           "noise_dtype": "float32"}
    cfg.update(change)
    return {k: v for k, v in cfg.items() if v is not None}


def test_local_states_are_the_clients_round():
    beta = local_states(_node(), THETA, _config())[BETA]
    expected = client_round(FULL.clients([2]), THETA, [1e-3, 1e-3], weight=float(FULL.weights[2]), correlation=0.5,
                            shared_generator=shared_stream(11, 3), private_generator=private_stream(5, 2, 3))
    assert torch.equal(beta, expected)


class Counting(GaussianSimulation):
    calls = 0

    def grad(self, theta, **kw):
        Counting.calls += 1
        return super().grad(theta, **kw)


@pytest.mark.parametrize("change, match", [
    (dict(step_sizes=[]), "step_sizes must be a number or a non-empty"),  # was: theta sent back unchanged
    (dict(step_sizes=[1e-3, -1.0]), "step_sizes at step 1"),
    (dict(step_sizes="1e-3"), "step_sizes must hold real numbers"),
    (dict(batch_size=-1), r"batch_size .*in \[0, 20\]"),
    (dict(batch_size=10**9), r"batch_size .*in \[0, 20\]"),
    (dict(round=10**30), "round must be"),
    (dict(round=-1), "round must be"),
    (dict(round_seed=-5), "round_seed"),
    (dict(weight=0.0), "weight"),
    (dict(temperature="1"), "temperature"),
    (dict(correlation=2.0), "correlation"),
    (dict(noise_dtype="float16"), "noise_dtype"),
    (dict(step_sizes=None), "the config has no 'step_sizes'"),
    (dict(batch_size=None), "the config has no 'batch_size'"),
    (dict(round=None), "the config has no 'round'"),
    (dict(sampler="hmc"), "sampler must be one of"),
    (dict(sampler="fahmc"), "the config has no 'friction'"),
    (dict(sampler="fahmc", friction=1.0, splitting="ABA"), "splitting"),
])
def test_a_train_config_the_node_cannot_run_is_refused_by_name_before_any_step(change, match):
    Counting.calls = 0
    node = NodeProblem(Counting(num_clients=4, seed=0).clients([2]), client=2, num_examples=20, private_seed=5)
    with pytest.raises(ValueError, match=match):
        local_states(node, THETA, _config(**change), {"momentum": torch.zeros_like(THETA)})
    assert Counting.calls == 0
    local_states(node, THETA, _config(batch_size=5))  # the count does count a round's gradients
    assert Counting.calls == 2


def test_an_fahmc_config_needs_the_velocity_of_thetas_shape():
    cfg = _config(sampler="fahmc", friction=0.8, splitting="BAOAB")
    with pytest.raises(ValueError, match="momentum must have theta's shape"):
        local_states(_node(), THETA, cfg, {"momentum": torch.zeros(2, 2, dtype=torch.float64)})
    states = local_states(_node(), THETA, cfg, {"momentum": torch.zeros_like(THETA)})
    assert set(states) == {BETA, MOMENTUM} and all(bool(torch.isfinite(x).all()) for x in states.values())


class _Array:
    """An ArrayRecord's array as handle_train reads it (``.numpy()``)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def numpy(self):
        return self.tensor.numpy()


def test_a_train_message_looks_its_node_kernel_up_once(monkeypatch):
    """handle_train resolves the message's sampler family once (its arrays and its round use the same kernel)
    and replies with local_states' states. The message and Flower's records are stood in for (duck types),
    so this runs without Flower."""
    from types import SimpleNamespace

    from fedlangevin.flower import client as node_client
    from fedlangevin.flower.protocol import CONFIG, node_kernels
    from fedlangevin.flower.protocol import THETA as THETA_RECORD

    calls = []

    def counting(kernels=None):
        calls.append(kernels)
        return node_kernels(kernels)

    monkeypatch.setattr(node_client, "node_kernels", counting)
    monkeypatch.setattr(node_client, "flwr_app", lambda: SimpleNamespace(RecordDict=dict,
                                                                          Message=lambda content, reply_to: content))
    monkeypatch.setattr(node_client, "to_array_record", lambda name, x: x)
    momentum = torch.randn(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for cfg, arrays in ((_config(), {}), (_config(sampler="fahmc", friction=0.8, splitting="BAOAB"), {"momentum": momentum})):
        records = {name: {name: _Array(x)} for name, x in {THETA_RECORD: THETA, **arrays}.items()}
        message = SimpleNamespace(content=SimpleNamespace(array_records=records, config_records={CONFIG: cfg}))
        calls.clear()
        reply = node_client.handle_train(_node(), message)
        assert len(calls) == 1
        want = local_states(_node(), THETA, cfg, arrays)
        assert set(reply) == set(want) and all(torch.equal(reply[k], want[k]) for k in want)
