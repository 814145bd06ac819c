"""``simulate heterogeneity-correction`` at its reduced settings: the claims of the study."""

from __future__ import annotations

import pytest

from fedlangevin.experiments import run_study


@pytest.fixture(scope="module")
def result():
    return run_study("heterogeneity-correction", reduced=True, progress=False)


def test_fald_bias_grows_with_k_and_every_correction_cuts_it_fivefold(result):
    st = result.summary["stationary"]
    assert st["FA-LD K=1"] < st["FA-LD K=10"] < st["FA-LD K=50"]
    for v in ("control_variates", "conducive", "qlsd++"):
        assert st[f"{v} K=1"] == pytest.approx(st["FA-LD K=1"], rel=1e-6)  # K = 1: the corrections sum to zero
        for k in (10, 50):
            assert st[f"{v} K={k}"] <= st[f"FA-LD K={k}"] / 5


def test_monte_carlo_curves_follow_the_exact_ones(result):
    """After 300 rounds the corrected chains sit at the exact-draw floor (R = 100 chains) and
    FA-LD's far above it, where its exact law says."""
    end, floor = result.summary["mc_end"], result.summary["floor"]
    for v in ("control_variates", "conducive", "qlsd++"):
        assert end[v] < 3 * floor
    assert end["FA-LD"] > 10 * floor


def test_cli_writes_png_and_csv(tmp_path, capsys):
    from fedlangevin.cli import main

    assert main(["simulate", "heterogeneity-correction", "--reduced", "--chains", "50", "--no-progress",
                 "--out", str(tmp_path)]) == 0
    assert (tmp_path / "heterogeneity-correction.png").exists()
    assert "control_variates / FA-LD" in capsys.readouterr().out
