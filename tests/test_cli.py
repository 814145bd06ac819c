"""Command line: help, the demo end to end (reduced), clean errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedlangevin.cli import main


def test_help_lists_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in ("demo", "simulate", "privacy", "compare", "diagnose"):
        assert name in out


def test_demo_reduced_writes_figure_and_table(tmp_path, capsys):
    code = main(["demo", "--out", str(tmp_path), "--rounds", "12", "--chains", "40",
                 "--local-steps", "1", "5", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "K=1" in out and "K=5" in out and "exact-draw floor" in out
    png = tmp_path / "demo.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_bad_argument_is_one_clean_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fedlangevin", "demo", "--out", str(tmp_path), "--chains", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "chains" in proc.stderr and "Traceback" not in proc.stderr


def test_run_demo_refuses_two_chains_before_any_work(tmp_path):
    """Two chains gave scipy's 'singular data covariance' after the runs (a density of two 2-d
    points); run_demo names chains and its minimum first."""
    from fedlangevin.commands.demo import run_demo

    with pytest.raises(ValueError, match=r"chains must be an integer >= 3.*d \+ 1 = 3"):
        run_demo(out=tmp_path / "o", rounds=2, chains=2, local_steps=(1,), progress=False)
    assert not (tmp_path / "o").exists()
