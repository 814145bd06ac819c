"""``python -m fedlangevin.distributed`` as torchrun starts it (env:// rendezvous), at W = 1 in
this process: the saved draws equal the single-process sampler's; bad options fail early."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

import fedlangevin as fl
from fedlangevin.distributed import cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sampler", ["fald", "fahmc"])
def test_the_torchrun_entry_saves_rank_0s_draws(tmp_path, monkeypatch, capsys, sampler):
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0",
                       "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "draws.pt"
    try:
        assert cli.main(["--sampler", sampler, "--friction", "0.7", "--clients", "6", "--chains", "3",
                         "--rounds", "7", "--local-steps", "2", "--step-size", "0.01", "--correlation", "0.5",
                         "--participation", "II:3", "--out", str(out)]) == 0
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert capsys.readouterr().out == f"1 rank(s), clients split [6], draws (3, 7, 2) -> {out}\n"
    saved = torch.load(out)
    problem = fl.problems.GaussianSimulation(num_clients=6, alpha=1.0, seed=0)
    family, extra = (fl.FAHMC, {"friction": 0.7}) if sampler == "fahmc" else (fl.FALD, {})
    want = family(problem, step_size=0.01, local_steps=2, correlation=0.5, participation=fl.SchemeII(3),
                  chains=3, seed=0, **extra).run(7).samples
    torch.testing.assert_close(saved["samples"], torch.as_tensor(want), rtol=1e-12, atol=1e-12)
    assert saved["world_size"] == 1 and saved["exact"] is True


@pytest.mark.parametrize("argv, match", [
    (["--participation", "III:2"], "--participation must be full, I:S or II:S"),
    (["--resume"], "--resume needs --checkpoint"),
    (["--sampler", "fahmc", "--friction", "0"], "--friction must be a finite number > 0"),
    (["--sampler", "fahmc", "--friction", "nan"], "--friction must be a finite number > 0"),
    (["--sampler", "nuts"], ""),
])
def test_bad_options_fail_before_any_process_starts(argv, match):
    with pytest.raises((SystemExit, ValueError), match=match):
        cli.main(argv)
