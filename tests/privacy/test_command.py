"""`fedlangevin privacy`: report, solver, table and figure modes; clean one-line errors."""

from __future__ import annotations

from fedlangevin.cli import main
from fedlangevin.commands import privacy as cmd


def test_default_report_is_the_worked_example(capsys):
    assert main(["privacy"]) == 0
    out = capsys.readouterr().out
    assert "0.023697" in out and "18.793" in out and "0.000121" in out
    assert "epsilon (tight, PLD)" in out and "RDP" in out and "lower bound" in out
    verdict = [line for line in out.splitlines() if line.startswith("verdict:")]
    assert len(verdict) == 1 and "below the paper's 18.79" in verdict[0]


def test_outside_the_theorem_is_said(capsys):
    assert main(["privacy", "--eta", "1e-5", "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "OUTSIDE THE THEOREM" in out and "no guarantee" in out


def test_solver_prints_both_accountants(capsys):
    assert main(["privacy", "--solve", "num-sampled", "--eta", "1e-5", "--target-epsilon", "0.5",
                 "--target-delta", "1e-5", "--discretization", "5e-4"]) == 0
    out = capsys.readouterr().out
    assert "tight  num_sampled = 2" in out
    assert "paper" in out


def test_table_and_figure_helpers(tmp_path):
    rows = cmd.table(settings=cmd.TABLE_SETTINGS[:2], discretization=5e-4)
    text = cmd.format_table(rows)
    assert text.count("\n| ") == 3  # header separator + two rows
    assert "worked example" in text
    png = cmd.figure(tmp_path / "eps.png", iterations=[10, 20])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_argument_is_one_clean_line(capsys):
    assert main(["privacy", "--rho", "1"]) == 2
    err = capsys.readouterr().err
    assert "rho" in err and len(err.strip().splitlines()) == 1


def test_a_large_step_size_prints_a_lower_bound_not_nan(capsys):
    """issue 31: `--eta 2.5` printed "epsilon (lower bound) nan" (no tight grid below 1 nat)."""
    assert main(["privacy", "--eta", "2.5"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "epsilon (lower bound)" in line)
    tight = next(line for line in out.splitlines() if "epsilon (tight" in line)
    assert 0.0 < float(line.split()[-1]) <= float(tight.split()[-1])
