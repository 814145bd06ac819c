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


def _subparsers():
    import argparse

    from fedlangevin.cli import COMMANDS, build_parser

    parser = build_parser(load=list(COMMANDS))
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_option_of_every_command_has_help():
    """--seed, --target-epsilon and --target-delta had none; no option may go without."""
    bare = [(name, action.option_strings) for name, sub in _subparsers().items() for action in sub._actions
            if action.option_strings and not action.help]
    assert bare == []


def test_validate_root_help_says_what_the_folder_holds_and_the_default():
    root = next(a for a in _subparsers()["validate"]._actions if "--root" in a.option_strings)
    assert "description" not in root.help
    assert "posterior.json" in root.help and "FEDLANGEVIN_POSTERIORDB" in root.help and "package ships" in root.help


def test_validate_names_missing_from_root_is_one_line_before_the_table(tmp_path, capsys):
    """A posterior named in --names whose folder is not under the root: a clear error naming
    --names and --root, and no table header printed before it."""
    (tmp_path / "kilpisjarvi_mod-kilpisjarvi").mkdir()
    code = main(["validate", "--root", str(tmp_path), "--names", "diamonds-diamonds", "--rounds", "40"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--names" in err and "diamonds-diamonds" in err and "--root" in err


def test_validate_runs_on_the_shipped_data_with_a_passes_column(capsys, monkeypatch):
    """Without --root (and without $FEDLANGEVIN_POSTERIORDB) the shipped posteriors are read; the
    table's last column says whether a row meets the acceptance (a 40-round run of 2 chains is
    far too short to: 'no' is not asserted, only that the cell is yes or no)."""
    import fedlangevin.experiments.posteriordb as pdb

    monkeypatch.setattr(pdb, "SHARED", pdb.SHIPPED)
    code = main(["validate", "--names", "kilpisjarvi_mod-kilpisjarvi", "--rounds", "40", "--chains", "2",
                 "--local-steps", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0].endswith("| passes |") and len(lines) == 3
    assert lines[2].startswith("| kilpisjarvi_mod-kilpisjarvi |") and lines[2].rsplit("|", 2)[1].strip() in ("yes", "no")


def test_demo_figure_legend_covers_no_curve(tmp_path, monkeypatch):
    """The legend sat inside the W2 axes over the K = 1 curve; it is below the axes now."""
    import matplotlib.pyplot as plt

    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    assert main(["demo", "--out", str(tmp_path), "--rounds", "12", "--chains", "40", "--local-steps", "1", "5",
                 "--no-progress"]) == 0
    fig = figures[-1]
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.y1 <= ax.get_window_extent().y0  # wholly below the plotting area
    assert legend.y0 >= 0  # and inside the saved figure
    real_close(fig)
