"""FA-LD in Flower's simulation engine: 10 simulated clients on the Gaussian problem give the
samples of the in-process engine with the same seed (per-client streams), bit for bit; schemes
I and II; a client that drops out of a round; a server that resumes from its checkpoint (a
shorter finished run extended, and a server killed mid-run continued bit for bit). FA-HMC
(``FlowerRun(sampler="fahmc")``) over the same nodes: theta and v through Flower's messages give
the rounds of a server written by hand over ``fahmc.client.client_round`` (whose law is checked
against ``fahmc.exact`` in tests/fahmc/test_client.py), bit for bit, also with a dropped client.

One ``run_simulation`` (one Ray start, the slow part) serves every run: the ServerApp runs
them one after the other over the same 10 nodes.
"""

import warnings

import pytest
import torch

pytest.importorskip("flwr")

from flwr.clientapp import ClientApp  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from fedlangevin.fahmc.client import client_round as fahmc_client_round  # noqa: E402
from fedlangevin.fald import FALD, SchemeI, SchemeII  # noqa: E402
from fedlangevin.fald.engine import client_round  # noqa: E402
from fedlangevin.fald.kernel import aggregate  # noqa: E402
from fedlangevin.federation.streams import SHARED, participation_stream, private_stream, shared_stream, stream_seed  # noqa: E402
from fedlangevin.fald.per_client import build_per_client  # noqa: E402
from fedlangevin.flower import FlowerRun, handle_query, handle_train, partitioned, run_server  # noqa: E402
from fedlangevin.flower.protocol import CONFIG  # noqa: E402
from fedlangevin.problems import GaussianSimulation  # noqa: E402
from tests.fahmc.test_client import THETA0, per_client_rounds  # noqa: E402

N, CHAINS, K, ETA, ROUNDS = 10, 4, 3, 1e-3, 6
PROBLEM = GaussianSimulation(num_clients=N, samples_per_client=[20 + 2 * c for c in range(N)], seed=1)
SEED, DROP_SEED, DROP_CLIENT, DROP_ROUND = 7, 8, 3, 2  # DROP_ROUND counts rounds from 1
DROP_SEED_I = 11  # with SchemeI(1), chain 2 (only) samples client DROP_CLIENT in round DROP_ROUND
SCHEMES = {"full": None, "I": SchemeI(4), "II": SchemeII(3, allow_unbalanced=True)}
KILL_ROUND = 5  # the server dies in this round; its last checkpoint is at round 4
H, FRICTION = 0.01, 0.8  # FA-HMC's h (stable: h < 2 / sqrt(1450), the clients' largest curvature) and gamma
HMC_SCHEMES = {"fahmc": None, "fahmc I": SchemeI(4)}


class Killed(Exception):
    """The server process dies (raised from on_round)."""


def _client_app():
    """The FA-LD ClientApp, except that client DROP_CLIENT fails in round DROP_ROUND of the runs
    seeded with DROP_SEED and DROP_SEED_I (its message carries that round's seed)."""
    load = partitioned(PROBLEM, private_seed=None)
    app, nodes = ClientApp(), {}

    def node_of(context):
        if context.node_id not in nodes:
            node = load(context)
            nodes[context.node_id] = type(node)(node.problem, node.client, node.num_examples, SEED)
        return nodes[context.node_id]

    @app.query()
    def query(message, context):
        return handle_query(node_of(context), message)

    @app.train()
    def train(message, context):
        node = node_of(context)
        seed = message.content.config_records[CONFIG]["round_seed"]
        if node.client == DROP_CLIENT and seed in [stream_seed(s, SHARED, DROP_ROUND - 1) for s in (DROP_SEED, DROP_SEED_I)]:
            raise RuntimeError("simulated dropout")
        return handle_train(node, message)

    return app


def _run(seed=SEED, participation=None, rounds=ROUNDS, **kw):
    return FlowerRun(rounds=rounds, step_size=ETA, local_steps=K, num_nodes=N, chains=CHAINS, seed=seed,
                     correlation=0.5, participation=participation, node_timeout=300, **kw)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    from flwr.serverapp import ServerApp

    ckpt = str(tmp_path_factory.mktemp("flower") / "server.ckpt")
    runs = {name: _run(participation=rule) for name, rule in SCHEMES.items()}
    runs["drop"] = _run(seed=DROP_SEED)
    runs["drop I"] = _run(seed=DROP_SEED_I, participation=SchemeI(1))
    runs["first half"] = _run(rounds=ROUNDS // 2, checkpoint=ckpt, checkpoint_every=1)
    runs["resumed"] = _run(checkpoint=ckpt, checkpoint_every=1)
    killed = _run(checkpoint=str(tmp_path_factory.mktemp("flower") / "killed.ckpt"), checkpoint_every=2)
    for name, rule in HMC_SCHEMES.items():
        runs[name] = _hmc_run(participation=rule)
    runs["fahmc drop"] = _hmc_run(seed=DROP_SEED)
    out = {}
    server = ServerApp()

    def dies(j):
        if j == KILL_ROUND:
            raise Killed

    @server.main()
    def main(grid, context):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for name, run in runs.items():
                out[name] = run_server(grid, run)
            try:
                run_server(grid, killed, on_round=dies)
            except Killed:
                out["killed"] = True
            out["continued"] = run_server(grid, killed)
        out["warnings"] = [str(w.message) for w in caught]

    run_simulation(server_app=server, client_app=_client_app(), num_supernodes=N,
                   backend_config={"client_resources": {"num_cpus": 1}})
    assert set(runs) | {"killed", "continued"} <= set(out), "the ServerApp did not finish every run"
    return out


def _hmc_run(seed=SEED, participation=None):
    return FlowerRun(rounds=ROUNDS, step_size=H, local_steps=K, num_nodes=N, chains=CHAINS, seed=seed, correlation=0.5,
                     participation=participation, node_timeout=300, init=THETA0, sampler="fahmc", friction=FRICTION,
                     splitting="OBABO")


def _in_process(participation=None, seed=SEED, rounds=ROUNDS):
    return FALD(PROBLEM, step_size=ETA, local_steps=K, chains=CHAINS, seed=seed, correlation=0.5,
                participation=participation, streams="per_client").run(rounds)


@pytest.mark.filterwarnings("ignore:SchemeII assumes balanced")  # unequal n_c: allowed on purpose here
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_simulation_equals_the_in_process_engine(traces, scheme):
    trace, ref = traces[scheme], _in_process(SCHEMES[scheme])
    assert torch.equal(trace.samples, ref.samples)  # bit for bit: the same functions on the same streams
    assert (trace.draw_rounds == ref.draw_rounds).all()
    assert trace.communication.uploads == ref.communication.uploads
    assert trace.settings.scheme == ref.settings.scheme and trace.dropouts == {}
    assert trace.communication.bytes_down > 0 and trace.communication.bytes_up > 0
    if scheme == "full":  # every node sends (R, d) float64 back each round, plus framing
        assert trace.communication.bytes_up >= ROUNDS * N * CHAINS * PROBLEM.dim * 8


def test_trace_api_matches_the_in_process_trace(traces):
    trace, ref = traces["full"], _in_process()
    report, expected = trace.privacy(delta=1e-5, sensitivity=1.0), ref.privacy(delta=1e-5, sensitivity=1.0)
    assert report.epsilon == expected.epsilon
    assert trace.to_arviz().posterior.sizes["draw"] == ROUNDS


def test_dropped_client_is_left_out_and_the_weights_renormalised(traces):
    trace = traces["drop"]
    assert trace.dropouts == {DROP_ROUND: [DROP_CLIENT]}
    assert any(f"client {DROP_CLIENT}" in w and "dropped" in w for w in traces["warnings"])
    # before the drop: the in-process kernel with the nodes' private seed (SEED) and the run's seed
    kernel = build_per_client(PROBLEM, correlation=0.5, seed=DROP_SEED, private_seeds=[SEED] * N)
    state = kernel.init(torch.zeros(CHAINS, PROBLEM.dim, dtype=torch.float64))
    for _ in range(DROP_ROUND - 1):
        state, _ = kernel.step(state, [ETA] * K, None)
    assert torch.equal(trace.samples[:, DROP_ROUND - 2], state.theta)
    # the drop round by hand: full participation over the clients that replied, p_c renormalised
    theta, t = state.theta, DROP_ROUND - 1
    beta = torch.zeros(CHAINS, N, PROBLEM.dim, dtype=torch.float64)
    for c in range(N):
        if c != DROP_CLIENT:
            beta[:, c] = client_round(PROBLEM.clients([c]), theta, [ETA] * K, weight=float(PROBLEM.weights[c]),
                                      correlation=0.5, shared_generator=shared_stream(DROP_SEED, t),
                                      private_generator=private_stream(SEED, c, t))
    w = PROBLEM.weights.clone()
    w[DROP_CLIENT] = 0.0
    torch.testing.assert_close(trace.samples[:, DROP_ROUND - 1], aggregate(beta, theta, w / w.sum(), None),
                               rtol=0, atol=1e-14)  # the renormalisation may round differently: 1e-14 >> ulps
    assert trace.communication.uploads == ROUNDS * N - 1


def test_server_resumes_from_its_checkpoint(traces):
    assert traces["first half"].samples.shape[1] == ROUNDS // 2
    assert torch.equal(traces["resumed"].samples, traces["full"].samples)
    assert traces["resumed"].communication.uploads == traces["full"].communication.uploads


def test_a_killed_server_continues_bit_for_bit(traces):
    assert traces["killed"] is True
    continued, full = traces["continued"], traces["full"]
    assert torch.equal(continued.samples, full.samples) and (continued.draw_rounds == full.draw_rounds).all()
    assert continued.communication == full.communication  # bytes included: the same messages
    assert continued.ledger == full.ledger and continued.settings == full.settings


def test_chain_whose_only_sampled_client_dropped_keeps_its_iterate(traces):
    trace, t = traces["drop I"], DROP_ROUND - 1
    w = SchemeI(1).weights(PROBLEM.weights.clone(), CHAINS, participation_stream(DROP_SEED_I, t))
    stuck = (w[:, DROP_CLIENT] > 0).nonzero().flatten().tolist()
    assert stuck == [2] and trace.dropouts == {DROP_ROUND: [DROP_CLIENT]}
    before, after = trace.samples[:, DROP_ROUND - 2], trace.samples[:, DROP_ROUND - 1]
    assert torch.equal(after[stuck], before[stuck])
    moved = [c for c in range(CHAINS) if c not in stuck]
    assert (after[moved] != before[moved]).all()


@pytest.mark.parametrize("name", sorted(HMC_SCHEMES))
def test_fahmc_through_flower_equals_the_hand_built_server(traces, name):
    trace = traces[name]
    ref = per_client_rounds(PROBLEM, ROUNDS, K, H, CHAINS, SEED, rho=0.5, participation=HMC_SCHEMES[name],
                            friction=FRICTION, splitting="OBABO")
    assert torch.equal(trace.samples, torch.from_numpy(ref[:, :, :PROBLEM.dim]))  # theta and v crossed Flower intact
    assert trace.settings.sampler == "FA-HMC" and trace.dropouts == {}
    if name == "fahmc":  # theta and v, each (R, d) float64, up from every node each round, plus framing
        assert trace.communication.bytes_up >= ROUNDS * N * 2 * CHAINS * PROBLEM.dim * 8
        assert trace.communication.bytes_up > traces["full"].communication.bytes_up


def test_a_dropped_fahmc_client_is_left_out_of_theta_and_v(traces):
    trace, t = traces["fahmc drop"], DROP_ROUND - 1
    assert trace.dropouts == {DROP_ROUND: [DROP_CLIENT]}
    before = per_client_rounds(PROBLEM, t, K, H, CHAINS, DROP_SEED, rho=0.5, friction=FRICTION, splitting="OBABO",
                               private_seed=SEED)[:, -1]
    theta, v = torch.from_numpy(before[:, :PROBLEM.dim]), torch.from_numpy(before[:, PROBLEM.dim:])
    assert torch.equal(trace.samples[:, t - 1], theta)
    xs = torch.zeros(CHAINS, N, PROBLEM.dim, dtype=torch.float64)
    for c in range(N):
        if c != DROP_CLIENT:
            xs[:, c] = fahmc_client_round(PROBLEM.clients([c]), theta, v, [H] * K, weight=float(PROBLEM.weights[c]),
                                          friction=FRICTION, splitting="OBABO", correlation=0.5,
                                          shared_generator=shared_stream(DROP_SEED, t),
                                          private_generator=private_stream(SEED, c, t))[0]
    w = PROBLEM.weights.clone()
    w[DROP_CLIENT] = 0.0
    torch.testing.assert_close(trace.samples[:, t], aggregate(xs, theta, w / w.sum(), None),
                               rtol=0, atol=1e-14)  # the renormalisation may round differently: 1e-14 >> ulps
