"""FA-LD on torch.distributed (gloo, CPU): W in {1, 2, 3} spawned ranks against one process.

One launch per W runs every case in the same processes (starting a process costs seconds).
Equality tolerance: the distributed run adds the ranks' partial sums sum_{c held} w_c beta_c
(then the all-reduce adds the W partials), the single process sums all clients at once; the
two differ only by the order of floating-point additions, a relative error of a few ulp per
round (float64: ~1e-16) carried by a contracting chain, so 1e-12 (relative and absolute)
over 12 rounds of O(1) parameters leaves a 1000x margin while any wrong draw (O(1)) fails.
"""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin.distributed import ProcessGroup, Workers, launch, split_clients
from fedlangevin.experiments.exact import exact_moments
from tests.distributed import _cases as C

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOL = dict(rtol=1e-12, atol=1e-12)
LIMIT = 150.0  # seconds: hard bound on one launch (processes are killed after it)


def _gone(pids: list[int]) -> bool:
    """No process of ``pids`` is left (a zombie not yet reaped by its parent counts as gone)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        if state != "Z":
            return False
    return True


def _launch(fn, world_size: int, *args, strict: bool = True) -> list:
    with Workers(fn, world_size, args, timeout=60, limit=LIMIT) as workers:
        pids = workers.pids
        try:
            results = workers.join(strict)
            return results if strict else (results, workers.errors)
        finally:
            workers.close()
            deadline = time.monotonic() + 10
            while not _gone(pids) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _gone(pids), f"processes {pids} outlived the launch"


@pytest.fixture(scope="module")
def reference() -> dict:
    torch.set_num_threads(1)
    return {name: torch.as_tensor(C.sampler(name).run(C.ROUNDS).samples) for name in C.CASES}


@pytest.fixture(scope="module")
def w1():
    return _launch(C.equality_cases, 1)


@pytest.fixture(scope="module")
def w2(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("w2") / "run.ckpt")
    return _launch(C.w2_launch, 2, path)


@pytest.fixture(scope="module")
def w3(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("w3") / "run.ckpt")
    results, errors = _launch(C.w3_launch, 3, path, strict=False)
    return path, results, errors


def _check_equal(results: list[dict], reference: dict, world_size: int) -> None:
    blocks = split_clients(6, world_size)
    for name, want in reference.items():
        got = results[0][name]["samples"]
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, **TOL, msg=lambda m: f"{name}, W={world_size}: {m}")
        assert not torch.equal(want[:, 0], want[:, -1])  # the chains move: equality is not trivial
        for rank, res in enumerate(results):
            assert res[name]["clients"] == blocks[rank]
            assert torch.equal(res[name]["theta"], results[0][name]["theta"])  # every rank holds the same iterate
            if rank:  # rank 0 keeps the draws; the others' traces hold none
                assert res[name]["samples"] == (want.shape[0], 0, want.shape[2])


def test_one_rank_equals_the_single_process_run(w1, reference):
    _check_equal(w1, reference, 1)


def test_two_ranks_equal_the_single_process_run(w2, reference):
    _check_equal([r["equal"] for r in w2], reference, 2)


def test_three_ranks_equal_the_single_process_run(w3, reference):
    results = w3[1][:2]
    _check_equal([r["equal"] for r in results], reference, 3)  # rank 2 is killed later in this launch


def test_checkpoint_at_two_ranks_resumes_at_two_ranks(w2):
    want = torch.as_tensor(C.sampler("full_rho07").run(20).samples)
    got = w2[0]["resume"]["samples"]
    torch.testing.assert_close(got, want, **TOL)
    assert not w2[1]["resume"]["written"]  # rank 1 wrote no checkpoint
    assert torch.equal(w2[1]["resume"]["theta"], w2[0]["resume"]["theta"])


def test_a_killed_rank_stops_the_others_with_an_error_naming_it(w3):
    path, results, errors = w3
    # the launcher reports the killed rank (and only it) without raising: strict=False
    assert list(errors) == [2] and errors[2] == "died with exit code 17 before reporting a result", errors
    for rank in (0, 1):
        message = results[rank]["killed"]
        assert message.startswith("RankFailure ranks=[2]"), message
        assert re.search(r"rank 2 \(pid \d+ on .*\) stopped", message), message
    # the last checkpoint (round 10, written before rank 2 died in round 12) finishes the run
    # in one process: exact mode does not depend on W
    resumed = fl.FALD.resume(path)
    assert resumed.unfinished["done"] == 10
    got = torch.as_tensor(resumed.run().samples)
    want = torch.as_tensor(C.sampler("full_rho07").run(30).samples)
    torch.testing.assert_close(got, want, **TOL)


def _exits(rank: int, world_size: int) -> int:
    if rank == 1:
        os._exit(17)
    return rank


@pytest.mark.parametrize("name", ["full_rho07", "schemeI_rho0"])
def test_inexact_mode_has_the_exact_law(w2, name):
    """exact=False at W = 2: mean and covariance after 8 rounds match the exact moments.

    Tolerance: 5 Monte Carlo standard errors of each entry, estimated from the R = 4000
    draws themselves (mean: sqrt(var / R); second moments: sqrt(var(x_i x_j) / R)); the law is
    a mixture under scheme I, so no Gaussian formula is assumed. 5 errors fail with
    probability < 1e-5 per entry if the law is right.
    """
    x = w2[0]["inexact"][name].numpy()
    kwargs = {"full_rho07": dict(correlation=0.7), "schemeI_rho0": dict(participation=fl.SchemeI(2))}[name]
    means, covs = exact_moments(C.quadratic_problem(), [[0.1] * 3] * C.INEXACT_ROUNDS, **kwargs)
    mean, cov = means[-1], covs[-1]
    r = x.shape[0]
    assert r == C.INEXACT_CHAINS
    se_mean = np.sqrt(x.var(axis=0) / r)
    assert np.all(np.abs(x.mean(axis=0) - mean) < 5 * se_mean), (x.mean(axis=0), mean, se_mean)
    centred = x - mean
    prods = centred[:, :, None] * centred[:, None, :]
    se_cov = np.sqrt(prods.reshape(r, -1).var(axis=0) / r).reshape(2, 2)
    assert np.all(np.abs(prods.mean(axis=0) - cov) < 5 * se_cov), (prods.mean(axis=0), cov, se_cov)
    # and it is another stream than the exact mode's (per-rank private noise)
    exact = fl.FALD(C.quadratic_problem(), step_size=0.1, local_steps=3, chains=C.INEXACT_CHAINS, seed=5, **kwargs)
    exact.run(C.INEXACT_ROUNDS, keep_samples=False)
    assert not np.allclose(exact.state.theta.numpy(), x)


def test_process_group_needs_an_initialised_group():
    with pytest.raises(ValueError, match="initialised torch.distributed process group"):
        ProcessGroup()


def test_split_clients_is_tensor_split_and_checks_its_arguments():
    assert split_clients(7, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_clients(2, 1) == [[0, 1]]
    with pytest.raises(ValueError, match=r"world_size must be an integer in \[1, num_clients = 2\]"):
        split_clients(2, 3)
    with pytest.raises(ValueError, match="num_clients"):
        split_clients(0, 1)


def test_launch_checks_its_arguments():
    with pytest.raises(ValueError, match="world_size"):
        launch(_exits, 0)
    with pytest.raises(ValueError, match="limit"):
        launch(_exits, 1, limit=-1)
    with pytest.raises(ValueError, match="backend"):
        launch(_exits, 1, backend="mpi")


@pytest.mark.parametrize("kwargs, match", [
    (dict(exact=1), "exact must be True or False"),
    (dict(timeout=0), "timeout must be a number of seconds > 0"),
    (dict(timeout=float("inf")), "timeout must be a number of seconds > 0"),
    (dict(timeout=10, heartbeat=10), r"heartbeat must be a number of seconds in \(0, timeout = 10\)"),
])
def test_process_group_checks_its_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ProcessGroup(**kwargs)


def test_fald_rejects_an_upload_codec_with_a_transport():
    class Held:  # a transport holding every client (the protocol's minimum)
        clients = None

        def reduce(self, partial):
            return partial

    problem = C.gaussian_problem()
    with pytest.raises(ValueError, match="transport: not supported with an upload codec or streams='per_client'"):
        fl.FALD(problem, step_size=0.01, transport=Held(), upload=lambda beta, theta, g: beta)
    with pytest.raises(ValueError, match="transport: not supported with an upload codec or streams='per_client'"):
        fl.FALD(problem, step_size=0.01, transport=Held(), streams="per_client")
    with pytest.raises(ValueError, match=r"transport: object does not implement the transport contract .*"
                                         r"missing reduce\(partial\)"):
        fl.FALD(problem, step_size=0.01, transport=object())


class _DictStore:
    """The three store calls the heartbeat uses, over a dict (torch's HashStore has them too,
    but this one lets the test freeze a rank's heartbeat without a thread)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)


def test_a_survivor_that_exits_after_seeing_the_failure_is_not_named():
    from fedlangevin.distributed.transport import _Heartbeat

    store = _DictStore()
    watcher = _Heartbeat(store, 0, 0.02)
    watcher.stop()  # rank 0 beats from the test only
    # rank 1 saw the failure and exited (its heartbeat frozen); rank 2 died silently; rank 3 is alive
    store.set("fedlangevin/hb/1", "5 12 pid 11 on host")
    store.set("fedlangevin/noticed/1", "round 12")
    store.set("fedlangevin/looked/1", "1")
    store.set("fedlangevin/hb/2", "3 0 pid 12 on host")
    alive = _Heartbeat(store, 3, 0.005)
    try:
        stopped, info = watcher.stopped(4)
    finally:
        alive.stop()
    assert stopped == [2], info
    assert info[1] == "pid 11 on host, saw the failure in round 12" and "last seen in round 0" in info[2], info
    assert "alive" in info[3], info


# -- FA-HMC (fedlangevin.fahmc) over torch.distributed: the W = 2 launch runs its cases too ------
@pytest.fixture(scope="module")
def hmc_reference() -> dict:
    torch.set_num_threads(1)
    out = {}
    for name in C.HMC_CASES:
        s = C.hmc_sampler(name)
        trace = s.run(C.hmc_rounds(name))
        out[name] = {"samples": torch.as_tensor(trace.samples), "momentum": s.state.momentum.clone(),
                     "adapted": (float(s.schedule(s.state.step)), s.friction)}
    return out


@pytest.mark.parametrize("name", list(C.HMC_CASES))
def test_fahmc_two_ranks_equal_the_single_process_run(w2, hmc_reference, name):
    """Draws and velocities of W = 2 against one process, to TOL (the module docstring's argument: the
    partial sums of theta and v are added in another order, nothing else differs). With
    step_size="auto" the warm-up's M, h and gamma are continuous functions of the broadcast (theta, v),
    which every rank holds bit for bit: every rank adapts the same values, and the single process
    (whose iterates differ by a few ulp) adapts the same values to TOL."""
    want = hmc_reference[name]
    results = [r["hmc"][name] for r in w2]
    got = results[0]["samples"]
    assert got.shape == want["samples"].shape
    torch.testing.assert_close(got, want["samples"], **TOL)
    torch.testing.assert_close(results[0]["momentum"], want["momentum"], **TOL)
    np.testing.assert_allclose(results[0]["adapted"], want["adapted"], rtol=1e-12)
    assert not torch.equal(got[:, 0], got[:, -1])  # the chains move: equality is not trivial
    for rank, res in enumerate(results):
        assert res["clients"] == split_clients(6, 2)[rank]
        assert torch.equal(res["theta"], results[0]["theta"]) and torch.equal(res["momentum"], results[0]["momentum"])
        assert res["adapted"] == results[0]["adapted"]  # every rank adapted the same h and gamma
        if rank:
            assert res["samples"] == (got.shape[0], 0, got.shape[2])


def test_fahmc_checkpoint_at_two_ranks_resumes_at_two_ranks(w2):
    """A checkpoint written at W = 2 and resumed at W = 2 (every rank) continues the uninterrupted
    one-process run, momentum and random stream included; so does an unfinished run stopped in every
    rank in round 13 and resumed from the round-10 checkpoint (run() finishes it: rank 0's trace
    holds the whole run's draws). Only rank 0 writes checkpoints."""
    name = "hmc_k3_rho07_preconditioned"
    whole = C.hmc_sampler(name)
    want = torch.as_tensor(whole.run(20).samples)
    rank0, rank1 = w2[0]["hmc_resume"], w2[1]["hmc_resume"]
    torch.testing.assert_close(rank0["samples"], want, **TOL)
    torch.testing.assert_close(rank0["finished"], want, **TOL)
    assert rank0["unfinished_done"] == rank1["unfinished_done"] == 10
    assert rank1["finished"] == (want.shape[0], 0, want.shape[2])  # rank 1 continues without draws
    assert not rank1["written"] and not rank1["stopped_written"]  # rank 1 wrote no checkpoint
    assert torch.equal(rank1["theta"], rank0["theta"]) and torch.equal(rank1["finished_theta"], rank0["finished_theta"])
    torch.testing.assert_close(rank0["finished_theta"], whole.state.theta, **TOL)


@pytest.mark.parametrize("name", ["full_rho07", "schemeI_rho0"])
def test_fahmc_inexact_mode_has_the_exact_law(w2, name):
    """exact=False at W = 2: mean and covariance of the stacked (theta, v) after 8 rounds match
    fedlangevin.fahmc.exact's exact moments. Tolerance as test_inexact_mode_has_the_exact_law's:
    5 Monte Carlo standard errors of each entry from the R = 4000 draws themselves (a mixture under
    scheme I: no Gaussian formula assumed); each entry fails with probability < 1e-5 if the law is right."""
    from fedlangevin.fahmc.exact import exact_moments as hmc_moments

    x = w2[0]["hmc_inexact"][name].numpy()
    kwargs = {"full_rho07": dict(correlation=0.7), "schemeI_rho0": dict(participation=fl.SchemeI(2))}[name]
    means, covs = hmc_moments(C.quadratic_problem(), [[C.HMC_INEXACT_STEP] * 3] * C.INEXACT_ROUNDS, 1.0, **kwargs)
    mean, cov = means[-1], covs[-1]
    r, k = x.shape
    assert r == C.INEXACT_CHAINS and k == 4
    se_mean = np.sqrt(x.var(axis=0) / r)
    assert np.all(np.abs(x.mean(axis=0) - mean) < 5 * se_mean), (x.mean(axis=0), mean, se_mean)
    centred = x - mean
    prods = centred[:, :, None] * centred[:, None, :]
    se_cov = np.sqrt(prods.reshape(r, -1).var(axis=0) / r).reshape(k, k)
    assert np.all(np.abs(prods.mean(axis=0) - cov) < 5 * se_cov), (prods.mean(axis=0), cov, se_cov)
    # another stream than the exact mode's (per-rank private noise and minibatches)
    exact = fl.FAHMC(C.quadratic_problem(), step_size=C.HMC_INEXACT_STEP, friction=1.0, local_steps=3,
                     chains=C.INEXACT_CHAINS, seed=5, **kwargs)
    exact.run(C.INEXACT_ROUNDS, keep_samples=False)
    assert not np.allclose(exact.state.theta.numpy(), x[:, :2])


def test_fahmc_refuses_a_bad_transport_before_reading_anything(tmp_path):
    class Inexact:  # exact = False without a private stream
        clients, exact = None, False

        def reduce(self, partial):
            return partial

    problem = C.gaussian_problem()
    with pytest.raises(ValueError, match=r"transport: object does not implement the transport contract .*"
                                         r"missing reduce\(partial\)"):
        fl.FAHMC(problem, step_size=0.03, transport=object())
    with pytest.raises(ValueError, match="transport: Inexact .* exact = False must have private_stream"):
        fl.FAHMC(problem, step_size=0.03, transport=Inexact())
    with pytest.raises(ValueError, match=r"transport: object does not implement the transport contract"):
        fl.FAHMC.resume(tmp_path / "absent.ckpt", transport=object())  # refused before the file is read
