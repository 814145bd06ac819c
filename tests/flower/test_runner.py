"""The Flower server on the package's runner (fedlangevin.flower.runner), without Flower.

The clients' side of a round is an in-process exchange here (:class:`LocalExchange`: what a
Flower node's handler runs, ``client_round`` on the shared (seed, t) stream and the client's own
private stream), so the server round, its draws, checkpoints, resume and dropouts are tested in
the main suite; tests/flower/test_simulation.py runs the same server over Flower's grid.
The planted-pickle tests of the checkpoint and trace files are in tests/test_no_code_execution.py.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

from fedlangevin.fahmc.client import client_round as fahmc_client_round
from fedlangevin.fald import FALD, SchemeI, SchemeII
from fedlangevin.federation.contracts import KERNEL, conformance
from fedlangevin.fald.engine import client_round
from fedlangevin.federation.rounds import aggregate
from fedlangevin.federation.streams import participation_stream, private_stream, shared_stream
from fedlangevin.runner.io.checkpoint import MAGIC, CheckpointError, read_file, write_file
from fedlangevin.flower.runner import Replies, ServerKernel, serve
from fedlangevin.flower.server import FlowerRun
from fedlangevin.flower.trace import Federation
from fedlangevin.problems import GaussianSimulation
from tests.fahmc.test_client import per_client_rounds

N, R, K, ETA, ROUNDS, SEED = 3, 4, 2, 1e-2, 8, 7
PROBLEM = GaussianSimulation(num_clients=N, samples_per_client=[10, 14, 20], seed=1)
FED = Federation(PROBLEM.client_sizes, PROBLEM.dim)


class Stop(Exception):
    """The server process dies (raised by on_round)."""


class LocalExchange:
    """Client c of PROBLEM on node 100 + c, in this process; ``fail``: {(round j, client): why}
    rounds in which a client does not reply."""

    def __init__(self, run: FlowerRun, fail: dict | None = None) -> None:
        self.run, self.fail, self.calls = run, dict(fail or {}), 0
        self.node_ids = tuple(100 + c for c in range(N))
        # each client's private-noise weight q_c, as the Flower exchange sends it (the rule's noise_weights)
        self.noise_weights = [float(q) for q in run.participation.noise_weights(PROBLEM.weights.double())]

    def round(self, t, theta, step_sizes, clients) -> Replies:
        self.calls += 1
        betas, refused = {}, {}
        for c in clients:
            if (t + 1, c) in self.fail:
                refused[c] = self.fail[(t + 1, c)]
                continue
            betas[c] = client_round(PROBLEM.clients([c]), theta, step_sizes, weight=float(PROBLEM.weights[c]),
                                    noise_weight=self.noise_weights[c], temperature=self.run.temperature, correlation=self.run.correlation,
                                    shared_generator=shared_stream(self.run.seed, t),
                                    private_generator=private_stream(SEED, c, t))
        return Replies(betas, refused, 100 * len(clients), 10 * len(betas))


def _run(rounds=ROUNDS, **kw) -> FlowerRun:
    kw = {"seed": SEED, "correlation": 0.5, **kw}
    return FlowerRun(rounds=rounds, step_size=ETA, local_steps=K, num_nodes=N, chains=R, **kw)


def _serve(run, fail=None, on_round=None):
    exchange = LocalExchange(run, fail)
    return serve(exchange, FED, run, on_round), exchange


def _in_process(participation=None, rounds=ROUNDS, warmup=0, thin=1):
    return FALD(PROBLEM, step_size=ETA, local_steps=K, chains=R, seed=SEED, correlation=0.5,
                participation=participation, streams="per_client").run(rounds, warmup=warmup, thin=thin)


def test_the_server_round_is_a_kernel_and_its_problem_has_no_data():
    run = _run()
    kernel = ServerKernel(LocalExchange(run), FED, run)
    assert conformance(kernel, KERNEL) == []
    assert FED.num_clients == N and torch.equal(FED.weights, PROBLEM.weights.double())
    with pytest.raises(ValueError, match="no gradients on the server"):
        FED.grad(torch.zeros(1, N, PROBLEM.dim))
    with pytest.raises(ValueError, match="client_sizes"):
        Federation([3, 0], 2)


@pytest.mark.filterwarnings("ignore:SchemeII assumes balanced")
@pytest.mark.parametrize("rule", [None, SchemeI(2), SchemeII(2, allow_unbalanced=True)], ids=["full", "I", "II"])
def test_the_server_gives_the_samples_of_the_in_process_per_client_engine(rule):
    trace, _ = _serve(_run(participation=rule, warmup=2, thin=2))
    ref = _in_process(rule, warmup=2, thin=2)
    assert torch.equal(trace.samples, ref.samples)  # the same functions on the same streams: bit for bit
    assert (trace.draw_rounds == ref.draw_rounds).all() and (trace.draw_steps == ref.draw_steps).all()
    assert trace.communication.uploads == ref.communication.uploads
    assert trace.communication.floats_down == ref.communication.floats_down
    assert trace.settings.scheme == ref.settings.scheme and trace.settings.streams == "per_client"
    assert trace.settings.sampler == "FA-LD" and trace.dropouts == {} and trace.node_ids == (100, 101, 102)
    assert trace.ledger == dict(ref.ledger)
    full = rule is None  # every participating client's message is 100 bytes down, 10 up (LocalExchange)
    assert trace.communication.bytes_up == (ROUNDS * N * 10 if full else trace.communication.bytes_up)
    assert trace.communication.bytes_down >= trace.communication.bytes_up > 0


def test_a_killed_server_continues_bit_for_bit_from_its_checkpoint(tmp_path):
    path = tmp_path / "server.ckpt"
    whole, _ = _serve(_run(warmup=1, thin=2, participation=SchemeI(2)))

    def dies(j):
        if j == 7:
            raise Stop

    with pytest.raises(Stop):
        _serve(_run(warmup=1, thin=2, participation=SchemeI(2), checkpoint=str(path), checkpoint_every=3),
               on_round=dies)
    assert path.read_bytes()[:16] == MAGIC and not (tmp_path / "server.ckpt.tmp").exists()
    record, _ = read_file(path)
    assert record["kind"] == "fedlangevin.Runner" and record["round"] == 6  # the last checkpoint before the kill
    trace, exchange = _serve(_run(warmup=1, thin=2, participation=SchemeI(2), checkpoint=str(path),
                                  checkpoint_every=3))
    assert exchange.calls == ROUNDS - 6  # only the rounds after the checkpoint ran again
    assert torch.equal(trace.samples, whole.samples) and (trace.draw_rounds == whole.draw_rounds).all()
    assert trace.communication == whole.communication and trace.ledger == whole.ledger
    record, _ = read_file(path)
    assert record["round"] == ROUNDS and record["run"]["finished"]
    assert not os.path.exists(f"{path}.lock") or _unlocked(f"{path}.lock")


def _unlocked(lock: str) -> bool:
    import fcntl

    with open(lock, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if a run still holds it
    return True


def test_a_finished_run_is_extended_by_a_server_given_more_rounds(tmp_path):
    path = str(tmp_path / "server.ckpt")
    half, _ = _serve(_run(rounds=ROUNDS // 2, checkpoint=path, checkpoint_every=1))
    assert half.samples.shape[1] == ROUNDS // 2
    trace, exchange = _serve(_run(checkpoint=path, checkpoint_every=1))
    assert exchange.calls == ROUNDS - ROUNDS // 2
    ref = _in_process()
    assert torch.equal(trace.samples, ref.samples) and trace.communication.uploads == ref.communication.uploads
    again, exchange = _serve(_run(checkpoint=path))  # at the end already: the trace, no round
    assert exchange.calls == 0 and torch.equal(again.samples, ref.samples)
    with pytest.raises(ValueError, match="warmup=1 differs from the run being continued"):
        _serve(_run(rounds=ROUNDS + 2, warmup=1, checkpoint=path))


def test_a_dropped_client_is_warned_about_recorded_and_checkpointed(tmp_path):
    path = tmp_path / "server.ckpt"
    fail = {(2, 1): "node 101: no reply"}
    with pytest.warns(UserWarning, match=r"round 2: client 1 dropped: node 101: no reply"):
        trace, _ = _serve(_run(checkpoint=str(path), checkpoint_every=2), fail=fail)
    assert trace.dropouts == {2: [1]} and trace.communication.uploads == ROUNDS * N - 1
    # round 2 by hand: the clients that replied, p_c renormalised over them
    theta = trace.samples[:, 0]
    beta = torch.zeros(R, N, PROBLEM.dim, dtype=torch.float64)
    for c in (0, 2):
        beta[:, c] = client_round(PROBLEM.clients([c]), theta, [ETA] * K, weight=float(PROBLEM.weights[c]),
                                  correlation=0.5, shared_generator=shared_stream(SEED, 1),
                                  private_generator=private_stream(SEED, c, 1))
    w = PROBLEM.weights.double().clone()
    w[1] = 0.0
    assert torch.equal(trace.samples[:, 1], aggregate(beta, theta, w / w.sum(), None))
    record, _ = read_file(path)
    assert record["flower"]["dropouts"] == [[2, [1]]] and record["flower"]["bytes_up"] == trace.communication.bytes_up


def test_a_chain_whose_only_sampled_client_dropped_keeps_its_iterate():
    run = _run(participation=SchemeI(1), rounds=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace, _ = _serve(run, fail={(j, c): "gone" for j in (2,) for c in range(N)})
    w = SchemeI(1).weights(PROBLEM.weights.double(), R, participation_stream(SEED, 1))  # round 2's draw
    assert trace.dropouts == {2: (w != 0).any(dim=0).nonzero().flatten().tolist()}
    assert torch.equal(trace.samples[:, 1], trace.samples[:, 0])  # nobody replied: every chain kept theta


def test_a_checkpoint_of_another_run_or_past_the_end_is_refused(tmp_path):
    path = str(tmp_path / "server.ckpt")
    _serve(_run(rounds=4, checkpoint=path))
    with pytest.raises(ValueError, match="belongs to another run"):
        _serve(_run(seed=SEED + 1, checkpoint=path))
    with pytest.raises(ValueError, match="belongs to another run"):
        serve(LocalExchange(_run(checkpoint=path)), Federation([10, 14, 21], PROBLEM.dim), _run(checkpoint=path))
    with pytest.raises(ValueError, match="is at round 4, past rounds = 3"):
        _serve(_run(rounds=3, checkpoint=path))
    FALD(PROBLEM, step_size=ETA, seed=0).run(2, checkpoint=tmp_path / "fald.ckpt")
    with pytest.raises(CheckpointError, match="not a checkpoint of a Runner"):
        _serve(_run(checkpoint=str(tmp_path / "fald.ckpt")))


def _rewrap(path, change):
    record, _ = read_file(path)
    change(record)
    write_file(path, record, keep_previous=False)


@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop("flower"), r"flower must be a dictionary"),
    (lambda r: r["flower"].pop("bytes_up"), r"flower lacks the entries 'bytes_up'"),
    (lambda r: r["flower"].__setitem__("dropouts", {3: [1]}), r"dropouts must be a list"),
    (lambda r: r["flower"].__setitem__("seconds", -1.0), r"seconds"),
    (lambda r: r.__setitem__("theta", torch.zeros(R, PROBLEM.dim + 1, dtype=torch.float64)), r"theta|parameters"),
    (lambda r: r.__setitem__("kind", "fedlangevin-flower-checkpoint"), r"of an earlier version"),
])
def test_a_valid_checksum_over_wrong_entries_is_a_checkpoint_error(change, message, tmp_path):
    path = tmp_path / "server.ckpt"
    _serve(_run(rounds=4, checkpoint=str(path)))
    _rewrap(path, change)
    with pytest.raises(CheckpointError, match=message):
        _serve(_run(checkpoint=str(path)))


def test_a_damaged_special_or_old_checkpoint_is_refused(tmp_path):
    path = tmp_path / "server.ckpt"
    _serve(_run(rounds=4, checkpoint=str(path)))  # one checkpoint, at the end: no .prev
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        _serve(_run(checkpoint=str(path)))
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(CheckpointError, match="FIFO"):
        _serve(_run(checkpoint=str(path)))
    path.unlink()
    torch.save({"kind": "fedlangevin-flower-checkpoint", "round": 1}, path)  # an earlier version's bare torch.save
    with pytest.raises(CheckpointError, match="wrong file signature.*is not read, since loading it could run code"):
        _serve(_run(checkpoint=str(path)))


def test_flower_run_refuses_bad_settings_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="warmup must be < rounds"):
        _run(rounds=3, warmup=3)
    with pytest.raises(ValueError, match="noise_dtype"):
        _run(noise_dtype="float16")
    with pytest.raises(ValueError, match="checkpoint: the directory"):
        _run(checkpoint=str(tmp_path / "missing" / "server.ckpt"))
    with pytest.raises(ValueError, match="batch_size"):
        FED.check_batch_size(11)  # larger than the smallest client (n_c = 10): run_server refuses it
    with pytest.raises(ValueError, match="init must have shape"):
        _serve(_run(init=torch.zeros(PROBLEM.dim + 1)))


@pytest.mark.parametrize("kw, match", [(dict(participation=SchemeII(4)), "num_sampled .*N=3"),
                                       (dict(batch_size=11), "batch_size")])
def test_serve_refuses_what_the_federation_cannot_run_before_any_round(kw, match):
    """Scheme II with S = 4 of N = 3 nodes (weights summing to 3/4: theta shrinks every round) and a
    minibatch larger than a client are refused by the server itself, as in process, before a message."""
    # (a run told of 5 nodes: the federation that answered has 3)
    run = _run(**kw) if "batch_size" in kw else FlowerRun(rounds=ROUNDS, step_size=ETA, num_nodes=5, **kw)
    exchange = LocalExchange(run)
    with pytest.raises(ValueError, match=match):
        serve(exchange, FED, run)
    assert exchange.calls == 0
    with pytest.raises(ValueError, match="participation: SchemeII .*num_nodes = 3"):  # known at construction
        _run(participation=SchemeII(4))


@pytest.mark.parametrize("kw, match", [(dict(local_steps=10**9), "local_steps must be at most 16777216"),
                                       (dict(chains=10**12), "chains: the server's iterate and average of")])
def test_flower_run_refuses_a_k_or_chains_it_cannot_send_or_hold(kw, match):
    with pytest.raises(ValueError, match=match):
        FlowerRun(rounds=ROUNDS, step_size=ETA, num_nodes=N, **kw)


def test_serve_refuses_chains_whose_round_does_not_fit_in_memory(monkeypatch):
    monkeypatch.setattr("fedlangevin._validation.memory_bytes", lambda device="cpu": 4 * 2**20)
    run = FlowerRun(rounds=ROUNDS, step_size=ETA, num_nodes=N, chains=10**5)  # 1.6 MB at d = 1 passes; the round's states at N = 3, d = 2 need 11 MB
    exchange = LocalExchange(run)
    with pytest.raises(ValueError, match="chains: a round's states of 100000 chains x 3 clients"):
        serve(exchange, FED, run)
    assert exchange.calls == 0


# -- FA-HMC on the same server (FlowerRun(sampler="fahmc")) -------------------------------------------
THETA0 = [1.0, -1.0]  # the start of tests/fahmc/test_client.per_client_rounds (the velocity starts at 0)


class HMCExchange(LocalExchange):
    """LocalExchange for FA-HMC: client c runs fahmc.client.client_round from (theta, v) on the
    shared (seed, t) stream and its private (SEED, c, t) stream, as a Flower node's handler does."""

    def round(self, t, theta, step_sizes, clients, momentum=None) -> Replies:
        self.calls += 1
        betas, momenta, refused = {}, {}, {}
        for c in clients:
            if (t + 1, c) in self.fail:
                refused[c] = self.fail[(t + 1, c)]
                continue
            betas[c], momenta[c] = fahmc_client_round(
                PROBLEM.clients([c]), theta, momentum, step_sizes, weight=float(PROBLEM.weights[c]),
                noise_weight=self.noise_weights[c], friction=self.run.friction, splitting=self.run.splitting, temperature=self.run.temperature,
                correlation=self.run.correlation, shared_generator=shared_stream(self.run.seed, t),
                private_generator=private_stream(SEED, c, t))
        return Replies(betas, refused, 100 * len(clients), 10 * len(betas), momenta)


def _hmc_run(rounds=ROUNDS, **kw) -> FlowerRun:
    kw = {"friction": 0.8, "splitting": "BAOAB", **kw}
    return _run(rounds=rounds, sampler="fahmc", init=THETA0, **kw)


def _hmc_serve(run, fail=None, on_round=None):
    exchange = HMCExchange(run, fail)
    return serve(exchange, FED, run, on_round), exchange


@pytest.mark.filterwarnings("ignore:SchemeII assumes balanced")
@pytest.mark.parametrize("rule,splitting", [(None, "BAOAB"), (SchemeI(2), "OBABO"),
                                            (SchemeII(2, allow_unbalanced=True), "BAOAB")], ids=["full", "I", "II"])
def test_the_fahmc_server_averages_theta_and_v_as_the_hand_built_rounds(rule, splitting):
    """The server's FA-HMC rounds equal a server written by hand over fahmc.client.client_round
    (tests/fahmc/test_client.per_client_rounds, whose law is checked against fahmc.exact there),
    bit for bit: theta (the draws) and v (the final state)."""
    run = _hmc_run(participation=rule, splitting=splitting)
    trace, _ = _hmc_serve(run)
    ref = per_client_rounds(PROBLEM, ROUNDS, K, ETA, R, SEED, rho=0.5, participation=rule, friction=0.8,
                            splitting=splitting)
    d = PROBLEM.dim
    assert np.array_equal(trace.samples.numpy(), ref[:, :, :d])
    assert trace.settings.sampler == "FA-HMC" and trace.settings.streams == "per_client"
    comm = trace.communication  # theta and v: 2 d floats per upload, 2 N d down per round
    assert comm.floats_up == comm.uploads * 2 * d and comm.floats_down == ROUNDS * N * 2 * d
    with pytest.raises(ValueError, match="privacy accounting is FA-LD's|FA-HMC"):
        trace.privacy(delta=1e-5, sensitivity=1.0)


def test_a_killed_fahmc_server_continues_bit_for_bit_with_its_velocity(tmp_path):
    path = tmp_path / "server.ckpt"
    whole, _ = _hmc_serve(_hmc_run(participation=SchemeI(2)))
    ref = per_client_rounds(PROBLEM, ROUNDS, K, ETA, R, SEED, rho=0.5, participation=SchemeI(2), friction=0.8)

    def dies(j):
        if j == 7:
            raise Stop

    with pytest.raises(Stop):
        _hmc_serve(_hmc_run(participation=SchemeI(2), checkpoint=str(path), checkpoint_every=3), on_round=dies)
    record, _ = read_file(path)
    assert record["round"] == 6  # the checkpoint holds round 6's velocity, not zeros
    assert np.array_equal(record["state"]["momentum"].numpy(), ref[:, 5, PROBLEM.dim:])
    trace, exchange = _hmc_serve(_hmc_run(participation=SchemeI(2), checkpoint=str(path), checkpoint_every=3))
    assert exchange.calls == ROUNDS - 6
    assert torch.equal(trace.samples, whole.samples) and trace.communication == whole.communication
    record, _ = read_file(path)
    assert np.array_equal(record["state"]["momentum"].numpy(), ref[:, -1, PROBLEM.dim:])


def test_a_dropped_fahmc_client_leaves_theta_and_v_averaged_over_the_others(tmp_path):
    path = tmp_path / "server.ckpt"
    with pytest.warns(UserWarning, match=r"round 2: client 1 dropped"):
        trace, _ = _hmc_serve(_hmc_run(rounds=2, checkpoint=str(path)), fail={(2, 1): "no reply"})
    assert trace.dropouts == {2: [1]}
    ref = per_client_rounds(PROBLEM, 1, K, ETA, R, SEED, rho=0.5, friction=0.8)[:, 0]  # round 1, nobody dropped
    theta, v = torch.from_numpy(ref[:, :2]), torch.from_numpy(ref[:, 2:])
    assert torch.equal(trace.samples[:, 0], theta)
    xs, us = torch.zeros(R, N, 2, dtype=torch.float64), torch.zeros(R, N, 2, dtype=torch.float64)
    for c in (0, 2):  # round 2 by hand: the clients that replied, p_c renormalised over them, for theta and v
        xs[:, c], us[:, c] = fahmc_client_round(PROBLEM.clients([c]), theta, v, [ETA] * K,
                                                weight=float(PROBLEM.weights[c]), friction=0.8, correlation=0.5,
                                                shared_generator=shared_stream(SEED, 1),
                                                private_generator=private_stream(SEED, c, 1))
    w = PROBLEM.weights.double().clone()
    w[1] = 0.0
    assert torch.equal(trace.samples[:, 1], aggregate(xs, theta, w / w.sum(), None))
    record, _ = read_file(path)
    assert torch.equal(record["state"]["momentum"], aggregate(us, v, w / w.sum(), None))


def test_a_fald_checkpoint_is_not_continued_as_fahmc_nor_the_other_way(tmp_path):
    fald_path, hmc_path = str(tmp_path / "fald.ckpt"), str(tmp_path / "hmc.ckpt")
    _serve(_run(rounds=2, checkpoint=fald_path, init=THETA0))
    _hmc_serve(_hmc_run(rounds=2, checkpoint=hmc_path))
    with pytest.raises(ValueError, match="belongs to another run"):
        _hmc_serve(_hmc_run(checkpoint=fald_path))
    with pytest.raises(ValueError, match="belongs to another run"):
        _serve(_run(checkpoint=hmc_path, init=THETA0))
    with pytest.raises(ValueError, match="belongs to another run"):  # another friction
        _hmc_serve(_hmc_run(checkpoint=hmc_path, friction=0.9))


@pytest.mark.parametrize("kw,name", [
    ({"sampler": "fahmc", "friction": 0.0}, "friction"), ({"sampler": "fahmc", "friction": -1.0}, "friction"),
    ({"sampler": "fahmc", "friction": float("nan")}, "friction"),
    ({"sampler": "fahmc", "friction": float("inf")}, "friction"),
    ({"sampler": "fahmc", "friction": "1.0"}, "friction"), ({"sampler": "fahmc", "friction": "auto"}, "friction='auto'"),
    ({"sampler": "fahmc", "step_size": "auto"}, "step_size='auto'"), ({"step_size": "auto"}, "step_size='auto'"),
    ({"sampler": "fahmc", "splitting": "ABOBA"}, "splitting"), ({"sampler": "hmc"}, "sampler"),
    ({"friction": 1.0}, "friction applies to sampler='fahmc' only"),
    ({"splitting": "OBABO"}, "splitting applies to sampler='fahmc' only"),
])
def test_flower_run_refuses_bad_fahmc_settings_by_name(kw, name):
    kw = {"rounds": 3, "step_size": ETA, "num_nodes": N, **kw}
    with pytest.raises(ValueError, match=name):
        FlowerRun(**kw)
    assert FlowerRun(rounds=3, step_size=ETA, num_nodes=N, sampler="fahmc").friction == 1.0  # FAHMC's default


def test_the_server_runs_the_node_kernel_it_is_given():
    """The transport takes the sampler family through its node kernel (fedlangevin.federation.nodes): a
    family of one's own, given with ``kernels``, runs under its name and label; the package's are the
    default (FALD.node, FAHMC.node); names not given, bad kernels and arrays the protocol does not carry
    are refused by name."""
    import dataclasses

    from fedlangevin.fahmc import FAHMC
    from fedlangevin.federation.nodes import NodeKernel
    from fedlangevin.flower.protocol import node_kernels

    assert node_kernels() == {"fald": FALD.node, "fahmc": FAHMC.node}
    assert _run().node is FALD.node and _run(sampler="fahmc").node is FAHMC.node
    mine = dataclasses.replace(FALD.node, name="mine", label="FA-LD (mine)")
    run = _run(sampler="mine", kernels=[mine])
    trace, _ = _serve(run)
    assert run.node is mine and trace.settings.sampler == "FA-LD (mine)"
    assert torch.equal(trace.samples, _serve(_run())[0].samples)  # the same client rounds (LocalExchange's)
    with pytest.raises(ValueError, match="sampler"):
        _run(sampler="fahmc", kernels=[mine])
    with pytest.raises(ValueError, match="kernels must hold node kernels"):
        _run(kernels=["fald"])
    odd = NodeKernel(name="odd", label="odd", client_round=mine.client_round, arrays=("velocity",))
    with pytest.raises(ValueError, match=r"arrays \['velocity'\] are not all carried by the Flower protocol"):
        ServerKernel(LocalExchange(_run()), FED, _run(sampler="odd", kernels=[odd]))
