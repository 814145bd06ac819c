"""``fedlangevin diagnose``: summary, checks, plots and clean errors on saved samples.

The command needs no torch, but importing the ``fedlangevin`` package does (the FA-LD
engine), hence the skip on the torch-free CI leg."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("arviz")

from fedlangevin.cli import main  # noqa: E402


def _samples(shift: float = 0.0, chains: int = 4, draws: int = 500, d: int = 3) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((chains, draws, d))
    x[0, :, 1] += shift
    return x


def test_npy_summary_checks_and_plots(tmp_path, capsys):
    path = tmp_path / "s.npy"
    np.save(path, _samples(shift=2.0))
    code = main(["diagnose", str(path), "--plots", str(tmp_path / "plots"), "--csv", str(tmp_path / "t.csv")])
    assert code == 0
    out = capsys.readouterr().out
    assert "4 chains x 500 draws, 3 entries" in out
    for col in ("mean", "eti90_lb", "ess_bulk", "ess_tail", "r_hat", "theta[2]"):
        assert col in out
    assert "R-hat < 1.01: 2/3 ok; failing: theta[1]" in out
    for name in ("trace.png", "rank.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import pandas as pd

    table = pd.read_csv(tmp_path / "t.csv", index_col=0)
    assert list(table.index) == ["theta[0]", "theta[1]", "theta[2]"]
    assert table.loc["theta[1]", "r_hat"] > 1.1


def test_strict_exit_status_and_worst_rows_first(tmp_path, capsys):
    path = tmp_path / "s.npy"
    np.save(path, _samples(shift=2.0))
    assert main(["diagnose", str(path), "--strict"]) == 1
    capsys.readouterr()
    np.save(path, _samples(shift=0.0, draws=2000))
    assert main(["diagnose", str(path), "--strict"]) == 0
    capsys.readouterr()
    np.save(path, _samples(shift=2.0))
    main(["diagnose", str(path), "--max-rows", "1"])
    out = capsys.readouterr().out
    assert "1 of 3 entries shown" in out
    table_lines = [ln for ln in out.splitlines() if ln.startswith("theta[")]
    assert table_lines[0].startswith("theta[1]") and len(table_lines) == 1


def test_npz_with_names_and_key(tmp_path, capsys):
    path = tmp_path / "run.npz"
    np.savez(path, samples=_samples(), var_names=np.array(["mu[0]", "mu[1]", "sigma"]))
    assert main(["diagnose", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mu[0]" in out and "sigma" in out
    two = tmp_path / "two.npz"
    np.savez(two, a=_samples(), b=_samples()[:, :, :1])
    assert main(["diagnose", str(two), "--key", "b", "--var-names", "tau"]) == 0
    assert "tau" in capsys.readouterr().out


@pytest.mark.parametrize(
    "setup, args, match",
    [
        (None, ["missing.npy"], "not found"),
        ("txt", ["s.txt"], ".npy or .npz"),
        ("two", ["two.npz"], "--key"),
        ("two", ["two.npz", "--key", "c"], "'c' not in"),
        ("bad_shape", ["s.npy"], "s.npy must have shape (chains, draws, d)"),
        ("npy", ["s.npy", "--var-names", "a,b"], "--var-names"),
        ("npy", ["s.npy", "--ci-prob", "1.5"], "--ci-prob"),
        ("npy", ["s.npy", "--max-rows", "0"], "max-rows"),
    ],
)
def test_bad_input_is_one_clean_line(tmp_path, capsys, setup, args, match):
    if setup == "txt":
        (tmp_path / "s.txt").write_text("1 2 3")
    elif setup == "two":
        np.savez(tmp_path / "two.npz", a=_samples(), b=_samples())
    elif setup == "bad_shape":
        np.save(tmp_path / "s.npy", np.zeros(5))
    elif setup == "npy":
        np.save(tmp_path / "s.npy", _samples())
    args = [str(tmp_path / args[0]), *args[1:]]
    assert main(["diagnose", *args]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_error_from_the_console_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fedlangevin", "diagnose", str(tmp_path / "missing.npy")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "not found" in proc.stderr and "Traceback" not in proc.stderr
