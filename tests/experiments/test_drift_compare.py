"""Corrected FA-LD in ``compare``: held to FA-LD's bits, and on label-skewed digits at K = 10
the control variates beat FA-LD's NLL (benchmarks/bench_drift_compare.py measures the gap closed)."""

from __future__ import annotations

import pytest

from fedlangevin.experiments.comparison import fald_bits_per_round, run_comparison

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def result():
    return run_comparison(datasets=("digits",), splits=("label_skew",), methods=("fald", "fald_cv", "fald_qlsd"),
                          rounds=200, evaluations=4, seed=0)


def test_corrected_runs_stay_within_fald_bits(result):
    runs = {r.method: r for r in result.runs}
    budget = runs["fald"].bits_total[-1]
    d, n = runs["fald"].final_probs.shape[1] * 65, 10
    up, down = fald_bits_per_round(d, n)
    for key, per_round in (("fald_cv", up + down), ("fald_qlsd", 2 * up + 2 * down)):
        run = runs[key]
        assert run.bits_total[-1] <= budget
        assert run.bits_total[-1] > budget - per_round  # the budget is used up to less than one round
        assert run.bits_total[-1] == pytest.approx(run.info["setup_bits"] + per_round * run.info["rounds"])
    assert runs["fald_qlsd"].info["rounds"] == 100  # twice FA-LD's bits per round, no set-up
    assert runs["fald_cv"].info["setup_rounds"] >= 1


def test_control_variates_beat_fald_on_label_skew(result):
    """Measured: NLL 0.135 against FA-LD's 0.292 (iid FA-LD: 0.129); the test asks for a third of
    the gap to the iid value, far outside the run-to-run spread of a fixed seed."""
    runs = {r.method: r for r in result.runs}
    assert runs["fald_cv"].final()["nll"] < runs["fald"].final()["nll"] - 0.05
