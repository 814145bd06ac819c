"""The client handler (FA-LD and FA-HMC messages) called directly, without a Flower run."""

import time

import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Message, MessageType, Metadata, RecordDict  # noqa: E402

from fedlangevin.fahmc.client import client_round as fahmc_client_round  # noqa: E402
from fedlangevin.fald.engine import client_round  # noqa: E402
from fedlangevin.federation.streams import SHARED, private_stream, shared_stream, stream_seed  # noqa: E402
from fedlangevin.flower import NodeProblem, handle_query, handle_train  # noqa: E402
from fedlangevin.flower.protocol import BETA, CONFIG, MOMENTUM, THETA, from_array_record, to_array_record  # noqa: E402
from fedlangevin.problems import GaussianSimulation  # noqa: E402


def _incoming(content, message_type):
    """A message as a node receives it from the server (Flower fills the metadata)."""
    meta = Metadata(run_id=1, message_id="m1", src_node_id=0, dst_node_id=7, reply_to_message_id="", group_id="",
                    created_at=time.time(), ttl=3600.0, message_type=message_type)
    return Message(content, metadata=meta)


def _train(theta, weight, *, round=3, seed=11, etas=(1e-3, 1e-3), batch=0):
    config = ConfigRecord({"round": round, "round_seed": stream_seed(seed, SHARED, round), "step_sizes": list(etas),
                           "weight": weight, "temperature": 1.0, "correlation": 0.5, "batch_size": batch,
                           "noise_dtype": "float32"})
    content = RecordDict({THETA: to_array_record(THETA, theta), CONFIG: config})
    return _incoming(content, MessageType.TRAIN)


def test_train_handler_runs_the_clients_round():
    full = GaussianSimulation(num_clients=4, seed=0)
    node = NodeProblem(full.clients([2]), client=2, num_examples=20, private_seed=5)
    theta = torch.randn(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    reply = handle_train(node, _train(theta, float(full.weights[2])))
    beta = from_array_record(reply.content.array_records[BETA], BETA, "reply")
    # the same K steps run in process from the same streams: equal bit for bit
    expected = client_round(full.clients([2]), theta, [1e-3, 1e-3], weight=float(full.weights[2]), correlation=0.5,
                            shared_generator=shared_stream(11, 3), private_generator=private_stream(5, 2, 3))
    assert torch.equal(beta, expected)
    assert not torch.equal(beta, theta)


def test_query_reports_index_size_and_dimension():
    full = GaussianSimulation(num_clients=4, seed=0)
    node = NodeProblem(full.clients([1]), client=1, num_examples=20)
    query = _incoming(RecordDict({"info": ConfigRecord({"fald": 1})}), MessageType.QUERY)
    info = handle_query(node, query).content.config_records["info"]
    assert (info["client"], info["num_examples"], info["dim"]) == (1, 20, 2)


def test_train_handler_refuses_bad_input():
    full = GaussianSimulation(num_clients=4, seed=0)
    node = NodeProblem(full.clients([0]), client=0, num_examples=20, private_seed=5)
    with pytest.raises(ValueError, match="theta must have shape"):
        handle_train(node, _train(torch.zeros(2, 3, dtype=torch.float64), float(full.weights[0])))
    with pytest.raises(ValueError, match="cannot be re-weighted"):
        handle_train(node, _train(torch.zeros(2, 2, dtype=torch.float64), 0.5))
    with pytest.raises(ValueError, match="not finite"):  # a step far too large for the curvature
        handle_train(node, _train(torch.zeros(2, 2, dtype=torch.float64), float(full.weights[0]), etas=[1e4] * 200))


def test_node_problem_checks_its_fields():
    full = GaussianSimulation(num_clients=4, seed=0)
    with pytest.raises(ValueError, match="one client"):
        NodeProblem(full, client=0, num_examples=1)
    with pytest.raises(ValueError, match="num_examples"):
        NodeProblem(full.clients([0]), client=0, num_examples=0)
    with pytest.raises(ValueError, match="client must be"):
        NodeProblem(full.clients([0]), client=-1, num_examples=3)


def _hmc_train(theta, v, weight, *, round=3, seed=11, etas=(0.1, 0.1), with_v=True):
    config = ConfigRecord({"round": round, "round_seed": stream_seed(seed, SHARED, round), "step_sizes": list(etas),
                           "weight": weight, "temperature": 1.0, "correlation": 0.5, "batch_size": 0,
                           "noise_dtype": "float32", "sampler": "fahmc", "friction": 0.8, "splitting": "OBABO"})
    arrays = {THETA: to_array_record(THETA, theta)}
    if with_v:
        arrays[MOMENTUM] = to_array_record(MOMENTUM, v)
    return _incoming(RecordDict({**arrays, CONFIG: config}), MessageType.TRAIN)


def test_fahmc_train_handler_runs_the_clients_fahmc_round():
    full = GaussianSimulation(num_clients=4, seed=0)
    node = NodeProblem(full.clients([2]), client=2, num_examples=20, private_seed=5)
    gen = torch.Generator().manual_seed(0)
    theta, v = torch.randn(3, 2, dtype=torch.float64, generator=gen), torch.randn(3, 2, dtype=torch.float64, generator=gen)
    reply = handle_train(node, _hmc_train(theta, v, float(full.weights[2])))
    beta = from_array_record(reply.content.array_records[BETA], BETA, "reply")
    v_c = from_array_record(reply.content.array_records[MOMENTUM], MOMENTUM, "reply")
    expected = fahmc_client_round(full.clients([2]), theta, v, [0.1, 0.1], weight=float(full.weights[2]), friction=0.8,
                                  splitting="OBABO", correlation=0.5, shared_generator=shared_stream(11, 3),
                                  private_generator=private_stream(5, 2, 3))
    assert torch.equal(beta, expected[0]) and torch.equal(v_c, expected[1])
    assert not torch.equal(v_c, v)


def test_fahmc_train_handler_refuses_a_message_without_v_or_of_another_sampler():
    full = GaussianSimulation(num_clients=4, seed=0)
    node = NodeProblem(full.clients([0]), client=0, num_examples=20, private_seed=5)
    theta = torch.zeros(2, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="no array 'momentum'"):
        handle_train(node, _hmc_train(theta, None, float(full.weights[0]), with_v=False))
    with pytest.raises(ValueError, match="momentum must have theta's shape"):
        handle_train(node, _hmc_train(theta, torch.zeros(3, 2, dtype=torch.float64), float(full.weights[0])))
    message = _hmc_train(theta, theta, float(full.weights[0]))
    message.content.config_records[CONFIG]["sampler"] = "sghmc"
    with pytest.raises(ValueError, match="sampler must be one of"):
        handle_train(node, message)
