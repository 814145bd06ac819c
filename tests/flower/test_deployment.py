"""A localhost deployment: a SuperLink and two SuperNodes as subprocesses on 127.0.0.1
(insecure), the template app submitted with ``flwr run``; bounded in time, and no process
is left behind. Runs when Flower is installed (``pip install 'fedlangevin[flower]'``)."""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")
pytest.importorskip("pyro")

from fedlangevin.fald import FALD  # noqa: E402
from fedlangevin.flower import load_trace  # noqa: E402
from fedlangevin.flower.localhost import LocalDeployment, process_alive  # noqa: E402
from fedlangevin.problems import PyroProblem  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "examples" / "flower_app"
SEED = 5


def test_localhost_deployment_runs_the_template_app(tmp_path):
    out = tmp_path / "trace.pt"
    config = {"rounds": 2, "warmup": 0, "local-steps": 2, "chains": 2, "seed": SEED, "step-size": 1e-3,
              "output": str(out)}
    # private-seed = the run's seed only to compare with the in-process run below (a test set-up)
    nodes = [{"partition-id": c, "private-seed": SEED} for c in range(2)]
    deployment = LocalDeployment(nodes)
    try:
        deployment.start()
        result = deployment.run_app(APP, config, timeout=540)
        assert result.returncode == 0, result.stdout[-3000:]
    finally:
        started = set(deployment.pids)
        deployment.stop()
    assert not [p for p in deployment.pids | started if process_alive(p)]  # nothing left behind

    trace = load_trace(out, step_size=1e-3)
    assert trace.samples.shape == (2, 2, 3) and trace.communication.rounds == 2
    assert trace.communication.bytes_up > 0 and trace.communication.bytes_down > 0
    # the deployed nodes built their problems from their own data alone (weight 1) and were
    # re-weighted by the server's p_c (PyroProblem.share); the in-process run holds both clients
    # in one problem: same samples, up to the rounding of vmapping the gradient over 1 or 2
    # clients (a few ulps per step; 1e-9 is far above that and far below the noise, ~1e-2)
    sys.path.insert(0, str(APP))
    try:
        from fald_app.model import load_partition, model
    finally:
        sys.path.remove(str(APP))
    problem = PyroProblem(model, [load_partition({"partition-id": c}) for c in range(2)])
    ref = FALD(problem, step_size=1e-3, local_steps=2, chains=2, seed=SEED, streams="per_client").run(2)
    torch.testing.assert_close(trace.samples, ref.samples, rtol=0, atol=1e-9)
