"""The pieces of the rounds benchmark (experiments/rounds.py, benchmarks/bench_rounds.py): the budget
search, the per-round figures and bits of both samplers' runs, the targets' table, the JSON round
trip, the figure and the command line. Every run here is tiny: the measurement itself is the
benchmark's (docs/rounds.md), never a test."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import fedlangevin as fl
from fedlangevin.experiments import rounds as rd
from fedlangevin.experiments.posteriordb import POSTERIORS, SHIPPED, Posterior

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = SHIPPED


def _gaussian_posterior(d: int = 2) -> Posterior:
    """A posterior record whose reference is 8,000 iid N(0, I) draws (no problem needed by a fake sampler)."""
    ref = np.random.default_rng(0).standard_normal((8000, d))
    ident = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    return Posterior("gauss", SimpleNamespace(dim=d), [f"x[{i}]" for i in range(d)], ident, ident, ref, None)


def _fake_spec(calls: list, good_from: int, diverge_below: int = 0) -> rd.SamplerSpec:
    """A sampler whose runs at budget >= good_from are 4 chains of iid N(0, I) draws (they pass: with
    4 x 500 draws the mean's error is 0.022 sd per coordinate, the sd's about 1.6 %), below it the same
    shifted by 1 sd (they fail), below diverge_below no samples; 3 chain-rounds per budget unit."""

    def run(post, budget, budgets):
        calls.append(budget)
        if budget < diverge_below:
            return rd.Attempt(budget, None, budget, 4 * budget, 64.0 * budget, 0.1, "diverged in round 3")
        x = np.random.default_rng(budget).standard_normal((4, 500, post.problem.dim))
        return rd.Attempt(budget, x + (budget < good_from), budget, 3 * budget, 64.0 * budget, 0.1)

    return rd.SamplerSpec("fake", run, "fald_rounds", "fald_chains")


@pytest.mark.parametrize("good_from, expected_calls, reach", [
    (10, [10, 40], 10),          # the smallest passes: then the largest, for the headline figures
    (20, [10, 20, 40], 20),
    (40, [10, 20, 40], 40),      # the largest is the one that passed: run once
    (99, [10, 20, 40], None),    # none passes: every budget tried, the largest is the headline
])
def test_measure_searches_the_grid_upwards_and_reports_the_largest_run(monkeypatch, good_from, expected_calls, reach):
    calls = []
    monkeypatch.setitem(rd.SAMPLERS, "fake", _fake_spec(calls, good_from))
    budgets = rd.Budgets(fald_chains=4, fald_rounds=(40, 10, 20, 20))  # sorted and deduplicated
    assert budgets.fald_rounds == (10, 20, 40)
    lines = []
    row = rd.measure(_gaussian_posterior(), "fake", budgets, progress=lines.append)
    assert calls == expected_calls and len(lines) == len(calls)  # a progress line per run
    assert row.rounds_to_accept == reach
    assert row.rounds == 40 and row.chain_rounds == 120 and row.bits == 64.0 * 40 and row.chains == 4
    assert row.passes == (good_from <= 40)
    assert [t[0] for t in row.tried] == calls and [t[2] for t in row.tried][-1] == row.passes
    assert row.ess_per_round == pytest.approx(row.min_ess_bulk / 120)
    assert 1000 < row.min_ess_bulk <= 2000 * 1.2  # iid draws: ESS near the 2,000 draws


def test_a_diverged_run_is_a_row_without_figures(monkeypatch):
    monkeypatch.setitem(rd.SAMPLERS, "fake", _fake_spec([], good_from=99, diverge_below=99))
    row = rd.measure(_gaussian_posterior(), "fake", rd.Budgets(fald_rounds=(10, 20)))
    assert row.note == "diverged in round 3" and not row.passes and math.isnan(row.ess_per_round)
    assert row.rounds_to_accept is None
    assert "diverged in round 3" in row.markdown() and rd.table([row], rd.Budgets(fald_rounds=(10, 20))).endswith(
        "| gauss | 2 | fake | 32 | not within 20 rounds | diverged in round 3 | - | - | - | 20 | 0.0 | - | 0.1 |")


def test_fald_defaults_run_counts_rounds_chains_and_bits():
    from fedlangevin.experiments.posteriordb import load

    post = load("kilpisjarvi_mod-kilpisjarvi", BUNDLED)
    budgets = rd.Budgets(fald_chains=3, fald_rounds=(20,))
    attempt = rd.SAMPLERS["fald"].run(post, 20, budgets)
    assert attempt.samples.shape == (3, 10, post.problem.dim)  # warm-up: the default half of the rounds
    assert attempt.rounds == 20 and attempt.chain_rounds == 60
    n, d = post.problem.num_clients, post.problem.dim
    # every round broadcasts d floats to each client and each uploads d floats back (64 bits each, per chain);
    # a warm-up may add set-up floats (an adapted M, energies): at least this much
    assert attempt.bits >= 20 * 3 * 2 * n * d * 64


def test_fald_defaults_run_is_the_users_default_sampler(monkeypatch):
    """No init, no step size: exactly FALD(problem, local_steps=1, chains=R, seed=s)."""
    seen = {}
    real = fl.FALD

    def spy(problem, *args, **kwargs):
        seen.update(kwargs, args=args)
        return real(problem, *args, **kwargs)

    monkeypatch.setattr(fl, "FALD", spy)
    from fedlangevin.experiments.posteriordb import load

    rd.SAMPLERS["fald"].run(load("kilpisjarvi_mod-kilpisjarvi", BUNDLED), 4, rd.Budgets(fald_chains=2, seed=5))
    assert seen == {"args": (), "local_steps": 1, "chains": 2, "seed": 5}


def test_fahmc_defaults_run_is_the_users_default_sampler_with_fald_s_grid_and_chains(monkeypatch):
    """No init, step size, friction or preconditioner: exactly FAHMC(problem, local_steps=1, chains=R,
    seed=s), run with FA-LD's grid and chain count (same chains, same rounds); its bits count theta and
    the velocity both ways."""
    seen = {}
    real = fl.FAHMC

    def spy(problem, *args, **kwargs):
        seen.update(kwargs, args=args)
        return real(problem, *args, **kwargs)

    monkeypatch.setattr(fl, "FAHMC", spy)
    from fedlangevin.experiments.posteriordb import load

    post = load("kilpisjarvi_mod-kilpisjarvi", BUNDLED)
    spec = rd.SAMPLERS["fahmc"]
    assert (spec.label, spec.grid, spec.chains) == ("FA-HMC defaults", "fald_rounds", "fald_chains")
    attempt = spec.run(post, 20, rd.Budgets(fald_chains=3, seed=5))
    assert seen == {"args": (), "local_steps": 1, "chains": 3, "seed": 5}
    assert attempt.samples.shape == (3, 10, post.problem.dim) and attempt.chain_rounds == 60
    n, d = post.problem.num_clients, post.problem.dim
    assert attempt.bits >= 20 * 3 * 4 * n * d * 64             # 2 d floats up and 2 d down per client and round


def test_versus_table_marks_the_hardest_posterior_and_the_targets():
    """The hardest posterior is the one with the lowest baseline ESS per chain-round (a failing baseline
    too); the ESS target is judged there only (3x, and the sampler must pass); the acceptance target
    on every posterior."""
    rows = [_row("a", "FA-LD defaults", 0.02), _row("a", "FA-HMC defaults", 0.1),
            _row("b", "FA-LD defaults", 0.001, passes=False, reach=None), _row("b", "FA-HMC defaults", 0.004),
            _row("c", "FA-LD defaults", 0.01), _row("c", "FA-HMC defaults", 0.5, passes=False, reach=None),
            _row("d", "federated NUTS", 0.01)]
    lines = rd.versus_table(rows).splitlines()[2:]
    assert len(lines) == 3                                         # d has no FA-HMC row
    assert lines[0] == "| a | 0.1 | 0.02 | 5 | yes / yes | - | 500 | met |"
    assert lines[1] == "| **b** (hardest) | 0.004 | 0.001 | 4 | yes / no | met | 500 | met |"
    assert lines[2] == "| c | 0.5 | 0.01 | 50 | no / yes | (fails the acceptance) | - | not met |"
    worse = [r if r.posterior != "b" or r.sampler != "FA-HMC defaults" else _row("b", "FA-HMC defaults", 0.0025)
             for r in rows]
    assert "| **b** (hardest) | 0.0025 | 0.001 | 2.5 | yes / no | not met |" in rd.versus_table(worse)


def test_federated_nuts_run_counts_every_chains_gradients():
    problem = fl.problems.GaussianSimulation(num_clients=3, alpha=1.0, seed=0)
    post = SimpleNamespace(problem=problem)
    attempt = rd.SAMPLERS["nuts"].run(post, 16, rd.Budgets(nuts_chains=2, nuts_iterations=(16,)))
    assert attempt.samples.shape == (2, 8, problem.dim)  # half the iterations kept
    n, d = problem.num_clients, problem.dim
    assert attempt.chain_rounds >= attempt.rounds >= 16  # at least one gradient per iteration
    assert attempt.chain_rounds <= 2 * attempt.rounds
    # one round: d floats down to each client, d + 1 (gradient and energy) back, 64 bits each
    assert attempt.bits == attempt.chain_rounds * n * (2 * d + 1) * 64


def test_consensus_run_is_one_round_and_counts_the_draws_uploaded():
    """Consensus MC: one round whatever the budget, one chain-round per chain; up, every client's
    draws (chains x draws x d floats), down, every client's weight p_c (1 float)."""
    problem = fl.problems.GaussianSimulation(num_clients=3, alpha=1.0, seed=0)
    post = SimpleNamespace(problem=problem)
    budgets = rd.Budgets(consensus_chains=2, consensus_iterations=(16,))
    attempt = rd.SAMPLERS["consensus"].run(post, 16, budgets)
    n, d = problem.num_clients, problem.dim
    assert attempt.samples.shape == (2, 8, d) and attempt.rounds == 1 and attempt.chain_rounds == 2
    assert attempt.bits == (n * 2 * 8 * d + n) * 64 and not attempt.capped


def test_a_consensus_run_over_the_cap_fails_and_says_which_client():
    problem = fl.problems.GaussianSimulation(num_clients=3, alpha=1.0, seed=0)
    post = Posterior("g", problem, ["a", "b"], lambda a: a, lambda a: a, np.zeros((10, 2)), None)
    budgets = rd.Budgets(consensus_chains=2, consensus_iterations=(16,), nuts_max_rounds=5)
    attempt = rd.SAMPLERS["consensus"].run(post, 16, budgets)
    assert attempt.samples is None and attempt.capped and attempt.rounds == 1
    assert attempt.note == "client 0's NUTS stopped at the cap of 5 evaluations"
    row = rd.measure(post, "consensus", budgets)
    assert "| consensus MC | 2 | not within 16 iterations | client 0's NUTS stopped" in rd.table([row], budgets)


def _row(name, sampler, ess_per_round, passes=True, reach=500, note=""):
    return rd.RoundsRow(name, sampler, 3, 4, reach, 2000, 8000, 0.05, 0.95, 1.05, passes, 800.0, ess_per_round,
                        1e6, 1.0, ((2000, 2000, passes),), note)


def test_summary_marks_the_targets_per_posterior():
    rows = [_row("a", "FA-LD defaults", 0.02), _row("a", "federated NUTS", 0.01),
            _row("b", "FA-LD defaults", 0.5, passes=False, reach=None), _row("b", "federated NUTS", 0.01),
            _row("c", "FA-LD defaults", 0.005, reach=2000), _row("c", "federated NUTS", 0.01),
            _row("d", "FA-LD defaults", math.nan, passes=False, reach=None, note="diverged in round 3"),
            _row("d", "federated NUTS", 0.01),
            _row("e", "FA-LD defaults", 0.02), _row("e", "federated NUTS", math.nan, False, None, "stopped at the cap")]
    lines = rd.summary_table(rows).splitlines()[2:]
    assert lines[0].endswith("| 2 | met | 500 | met |")
    # a high ESS of wrong draws counts for nothing
    assert "| not met (fails the acceptance) | - | not met |" in lines[1]
    assert lines[2].endswith("| 0.5 | not met | 2,000 | met |")
    assert "not met (fails the acceptance)" in lines[3] and lines[3].endswith("| - | not met |")
    assert lines[4].endswith("| 0.02 | - | - | no NUTS figure: stopped at the cap | 500 | met |")
    assert lines[3].startswith("| d | - | 0.01 | - | not met (fails the acceptance)")
    assert rd.table(rows).count("\n") == 1 + len(rows)


def test_json_round_trip_keeps_the_rows_and_budgets(tmp_path):
    rows = [_row("a", "FA-LD defaults", 0.02), _row("d", "FA-LD defaults", math.nan, False, None, "diverged")]
    budgets = rd.Budgets(fald_chains=8, nuts_iterations=(100, 300))
    path = tmp_path / "r.json"
    rd.write_json(rows, path, budgets=budgets, seconds=12.34, command="python benchmarks/bench_rounds.py")
    data = json.loads(path.read_text())  # strict JSON: NaN written as null
    assert data["seconds"] == 12.3 and data["rows"][1]["ess_per_round"] is None
    back, b2 = rd.read_rows(path)
    assert b2 == budgets
    assert back[0] == rows[0]
    assert math.isnan(back[1].ess_per_round) and back[1].rounds_to_accept is None and back[1].note == "diverged"


def test_figure_is_written(tmp_path):
    rows = [_row("a", "FA-LD defaults", 0.02), _row("a", "federated NUTS", 0.01, passes=False),
            _row("b", "FA-LD defaults", math.nan, False, None, "diverged")]
    rd.figure(rows, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("kwargs, match", [
    (dict(fald_chains=0), "fald_chains"), (dict(nuts_chains=1.5), "nuts_chains"),
    (dict(fald_rounds=()), "fald_rounds must be a non-empty tuple"), (dict(fald_rounds=[100]), "fald_rounds"),
    (dict(fald_rounds=(1,)), "fald_rounds"), (dict(nuts_iterations=(4,)), "nuts_iterations"),
    (dict(seed=-1), "seed"), (dict(fald_rounds=(float("nan"),)), "fald_rounds"),
    (dict(nuts_max_rounds=0), "nuts_max_rounds"), (dict(nuts_dense_mass="yes"), "nuts_dense_mass"),
    (dict(consensus_chains=0), "consensus_chains"), (dict(consensus_iterations=(4,)), "consensus_iterations"),
    (dict(consensus_iterations=()), "consensus_iterations"),
])
def test_bad_budgets_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rd.Budgets(**kwargs)


def test_bad_names_are_refused_before_any_run():
    with pytest.raises(ValueError, match="sampler must be one of fald, fahmc, nuts"):
        rd.measure(_gaussian_posterior(), "hmc")
    with pytest.raises(ValueError, match="budgets must be a Budgets"):
        rd.measure(_gaussian_posterior(), "fald", {"fald_chains": 2})
    with pytest.raises(ValueError, match="name must be one of"):
        rd.load_posterior("nope")


def test_available_lists_the_folders_found_and_the_logistic_regression(tmp_path):
    from fedlangevin.experiments.logistic_posterior import NAME

    assert rd.available(tmp_path) == [NAME]
    assert rd.available(BUNDLED) == [*POSTERIORS, NAME]  # the package ships all eleven


def _bench():
    spec = importlib.util.spec_from_file_location("bench_rounds", ROOT / "benchmarks" / "bench_rounds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_redraws_tables_and_figure_from_its_json(tmp_path, capsys):
    rows = [_row("a", "FA-LD defaults", 0.02), _row("a", "federated NUTS", 0.01)]
    rd.write_json(rows, tmp_path / "r.json", budgets=rd.Budgets(), seconds=1.0, command="x")
    assert _bench().main(["--from-json", str(tmp_path / "r.json"), "--figure", str(tmp_path / "f.png")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(rd.RoundsRow.HEADER) and "| a | 0.02 | 0.01 | 2 | met | 500 | met |" in out
    assert (tmp_path / "f.png").is_file()


def test_bench_refuses_an_unknown_posterior(capsys):
    with pytest.raises(SystemExit) as exc:
        _bench().main(["--posteriors", "nope", "--quick"])
    assert exc.value.code == 2 and "--posteriors: not found: nope" in capsys.readouterr().err


def test_docs_rounds_python_blocks_run():
    from tests.pages import python_blocks, run_block

    page = ROOT / "docs" / "rounds.md"
    first, second = python_blocks(page)
    lines = run_block(first, page).splitlines()
    assert lines[0] == rd.RoundsRow.HEADER.splitlines()[0] and lines[2].startswith("| breast_cancer-logistic | 22 |")
    out = run_block(second, page).split()
    assert out[:2] == ["FA-LD", "init=map"] and int(out[2]) > 200 and out[3] in ("True", "False")  # search rounds added
    assert "fald_map" not in rd.SAMPLERS


def test_a_nuts_run_over_the_cap_fails_and_says_so():
    """nuts_max_rounds stops a run at exactly that many rounds (all chains together); it fails and the
    search goes on (a larger budget can cost fewer rounds), the largest budget's capped run is the row."""
    problem = fl.problems.GaussianSimulation(num_clients=3, alpha=1.0, seed=0)
    post = Posterior("g", problem, ["a", "b"], lambda a: a, lambda a: a, np.zeros((10, 2)), None)
    budgets = rd.Budgets(nuts_chains=2, nuts_iterations=(16, 32, 64), nuts_max_rounds=25)
    lines = []
    row = rd.measure(post, "nuts", budgets, progress=lines.append)
    assert [t[0] for t in row.tried] == [16, 32, 64] and len(lines) == 3 and not row.passes
    assert row.chain_rounds == 25 and row.bits == 25 * 3 * (2 * 2 + 1) * 64
    assert row.note.startswith("stopped at the cap of 25 rounds") and math.isnan(row.ess_per_round)
    assert "| not within 64 iterations | stopped at the cap of 25 rounds" in rd.table([row], budgets)


def test_merged_runs_replace_rows_in_place(tmp_path, capsys):
    first = [_row("a", "FA-LD defaults", 0.02), _row("a", "federated NUTS", 0.01), _row("b", "FA-LD defaults", 0.03)]
    second = [_row("a", "federated NUTS", 0.04), _row("c", "federated NUTS", 0.05)]
    merged = rd.merge_rows(first, second)
    assert [(r.posterior, r.sampler, r.ess_per_round) for r in merged] == [
        ("a", "FA-LD defaults", 0.02), ("a", "federated NUTS", 0.04), ("b", "FA-LD defaults", 0.03),
        ("c", "federated NUTS", 0.05)]
    for name, rows, command in (("1.json", first, "run one"), ("2.json", second, "run two")):
        rd.write_json(rows, tmp_path / name, budgets=rd.Budgets(), seconds=10.0, command=command)
    assert _bench().main(["--from-json", str(tmp_path / "1.json"), str(tmp_path / "2.json"), "--figure",
                          str(tmp_path / "f.png"), "--json", str(tmp_path / "m.json")]) == 0
    assert "| a | 0.02 | 0.04 | 0.5 | not met | 500 | met |" in capsys.readouterr().out
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["command"] == "run one && run two" and data["seconds"] == 20.0 and len(data["rows"]) == 4
    rd.write_json(second, tmp_path / "3.json", budgets=rd.Budgets(fald_chains=8), seconds=1.0, command="x")
    with pytest.raises(SystemExit, match="different settings"):
        _bench().main(["--from-json", str(tmp_path / "1.json"), str(tmp_path / "3.json"), "--figure",
                       str(tmp_path / "f.png")])
