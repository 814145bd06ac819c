"""`fedlangevin privacy`: report, solver, table and figure modes; clean one-line errors."""

from __future__ import annotations

import pytest

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


# -- the mechanism of a private run: --adjacency, --clip ----------------------------------------------
def _numbers(out: str) -> dict:
    """The three epsilons the report prints, by label."""
    labels = ("epsilon (tight, PLD)", "epsilon (RDP cross-check, upper)", "epsilon (lower bound)")
    return {label: float(line.split()[-1]) for line in out.splitlines() for label in labels if label in line}


def test_clip_derives_the_sensitivity_as_twice_the_clip(capsys):
    assert main(["privacy", "--clip", "0.25", "--eta", "2e-6"]) == 0
    clipped = capsys.readouterr().out
    assert main(["privacy", "--sensitivity", "0.5", "--eta", "2e-6"]) == 0
    typed = capsys.readouterr().out
    assert "sensitivity derived: 2 x clip 0.25" in clipped and "Delta_l=0.5" in clipped
    assert "sensitivity assumed, not enforced" in typed
    assert _numbers(clipped) == _numbers(typed) and len(_numbers(clipped)) == 3


def test_client_level_reports_the_client_accountant_and_no_paper_bound(capsys):
    from fedlangevin.privacy import client_account

    assert main(["privacy", "--adjacency", "client", "--clip", "0.5", "--eta", "1e-4", "--num-sampled", "4",
                 "--delta", "1e-6"]) == 0
    out = capsys.readouterr().out
    acc = client_account(eta=1e-4, sensitivity=1.0, p_max=0.1, num_clients=10, num_sampled=4, local_steps=10,
                         iterations=1000, delta=1e-6)
    assert _numbers(out) == {"epsilon (tight, PLD)": float(f"{acc.epsilon:.6g}"),
                             "epsilon (RDP cross-check, upper)": float(f"{acc.rdp_epsilon:.6g}"),
                             "epsilon (lower bound)": float(f"{acc.lower_epsilon:.6g}")}
    assert "adjacency: client level (one client's whole data replaced); sensitivity = 1 (derived: 2 x clip 0.5)" in out
    assert "paper bound (Thm 6.1 / G.3): does not apply (the theorem is record-level)" in out
    verdict = [line for line in out.splitlines() if line.startswith("verdict:")]
    assert verdict == [f"verdict: ({acc.epsilon:.4g}, 1e-06)-DP at client level by the tight accountant; no paper "
                       "bound (record-level theorem)"]
    # the largest client weight: more weight, less private noise, more epsilon
    assert main(["privacy", "--adjacency", "client", "--clip", "0.5", "--eta", "1e-4", "--num-sampled", "4",
                 "--delta", "1e-6", "--p-max", "0.3"]) == 0
    assert _numbers(capsys.readouterr().out)["epsilon (tight, PLD)"] > acc.epsilon


@pytest.mark.parametrize("argv, option", [
    (["--clip", "0.5", "--sensitivity", "1"], "--sensitivity: with --clip 0.5 the sensitivity is derived"),
    (["--adjacency", "client"], "--adjacency client needs --clip C"),
    (["--adjacency", "client", "--sensitivity", "1"], "--adjacency client needs --clip C"),
    (["--adjacency", "client", "--clip", "1", "--gamma", "0.1"], "--gamma: client level has no minibatch amplification"),
    (["--adjacency", "client", "--clip", "1", "--p-min", "0.1"], "--p-min: the worst client at client level"),
    (["--adjacency", "client", "--clip", "1", "--delta0", "1e-6"], "--delta0/--delta1/--delta2 are the paper's"),
    (["--adjacency", "client", "--clip", "1", "--p-max", "0.05"], "--p-max must be >= 1/N = 0.1"),
    (["--p-max", "0.2"], "--p-max is the largest client weight of client-level accounting"),
    (["--adjacency", "client", "--clip", "1", "--solve", "eta", "--target-epsilon", "1", "--target-delta", "1e-5"],
     "--solve is record-level"),
    (["--adjacency", "client", "--clip", "1", "--figure", "f.png"], "--figure is record-level"),
    (["--clip", "0"], "--clip must be a finite real number in (0, "),
    (["--clip", "nan"], "--clip must be a finite real number"),
    (["--clip", "inf"], "--clip must be a finite real number"),
])
def test_a_bad_mechanism_is_refused_with_one_line_naming_the_option(argv, option, capsys, monkeypatch, tmp_path):
    import fedlangevin.privacy as fp

    def forbidden(*args, **kwargs):
        raise AssertionError("accounting ran before the options were checked")

    for name in ("account", "client_account", "paper_bound"):
        monkeypatch.setattr(fp, name, forbidden)
    monkeypatch.chdir(tmp_path)
    assert main(["privacy", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0], err


# -- --audit: a canary audit of the setting (fedlangevin.privacy.canary) -----------------------------------
def test_audit_prints_the_audited_bound_beside_the_accounted_epsilon(capsys):
    from fedlangevin.privacy import tight_epsilon

    argv = ["privacy", "--audit", "--clip", "1", "--eta", "0.5", "--iterations", "2", "--local-steps", "1",
            "--num-clients", "2", "--num-sampled", "2", "--gamma", "0.5", "--replicates", "2000", "--delta", "1e-5",
            "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # the accounted epsilon is the accountant's for the same setting (b = 1 of n_c = 2 rows, p = 1/2)
    want = tight_epsilon(eta=0.5, gamma=0.5, sensitivity=2.0, p_min=0.5, num_clients=2, num_sampled=2,
                         local_steps=1, iterations=2, delta=1e-5)
    line = next(line for line in out.splitlines() if line.startswith("audited epsilon >="))
    audited, accounted = float(line.split()[3]), float(line.split()[7])
    assert accounted == float(f"{want:.4g}") and 0.0 <= audited <= accounted
    assert "b = 1 of n_c = 2" in out and "full participation" in out and "consistent" in out


@pytest.mark.parametrize("argv, message", [
    (["--audit"], "--audit needs --clip C"),
    (["--audit", "--clip", "1", "--gamma", "0.3333"], "--gamma 0.3333 is not a fraction b / n_c"),
    (["--audit", "--clip", "1", "--p-min", "0.2"], "--p-min: the audit's clients are equal"),
    (["--audit", "--clip", "1", "--iterations", "15"], "--iterations must be a multiple of --local-steps"),
    (["--audit", "--clip", "1", "--replicates", "99"], "--replicates"),
    (["--audit", "--clip", "1", "--table"], "--audit runs one setting"),
])
def test_a_bad_audit_is_refused_before_any_run(argv, message, capsys, monkeypatch):
    import fedlangevin.privacy.canary as mod

    monkeypatch.setattr(mod, "_world", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    assert main(["privacy", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
