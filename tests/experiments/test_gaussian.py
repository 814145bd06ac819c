"""The simulation study (Sec. 7.1) at its reduced CI settings: the paper's qualitative claims.

Each study runs once per module (reduced settings from ``STUDIES``, R = 300 chains as the
paper); the assertions are the claims of the issue, each of which can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlangevin.cli import main
from fedlangevin.experiments import STUDIES, CurvatureSimulation, run_study, simulation_problem
from fedlangevin.experiments.curves import exact_first_below
from fedlangevin.problems import GaussianSimulation


@pytest.fixture(scope="module")
def k_result():
    return run_study("k-study", reduced=True, progress=False)


@pytest.fixture(scope="module")
def participation_result():
    return run_study("participation", reduced=True, progress=False)


def _rows(result, **where):
    cols = result.columns
    n = result.num_rows
    keep = [i for i in range(n) if all(cols[k][i] == v for k, v in where.items())]
    return {k: [cols[k][i] for i in keep] for k in cols}


def test_k_study_has_a_u_shape_with_an_interior_optimum(k_result):
    """Rounds to W2 <= eps fall like 1/K, then the local-step bias (per-client curvature)
    stops the run from reaching eps: the best K is neither the smallest nor the largest
    tried, and it saves several-fold over K = 1."""
    rows = _rows(k_result, setup="per-client curvature")
    ks, rounds = rows["K"], rows["rounds_mc"]
    reached = {k: t for k, t in zip(ks, rounds) if t is not None}
    best = min(reached, key=reached.get)
    assert ks[0] < best < ks[-1]
    assert reached[best] * 5 < rounds[0]
    assert rounds[-1] is None or rounds[-1] > reached[best]


def test_k_study_monte_carlo_crossings_agree_with_the_exact_law(k_result):
    """The R = 300 fitted W2 is about sqrt(W2^2 + floor^2) and jitters by about the floor's
    sd (~0.0025 here), so it crosses eps = 0.02 when the exact W2 is within +-25% of eps:
    the Monte Carlo round must lie between the exact rounds for eps * 1.25 and eps * 0.75."""
    s = k_result.settings
    problem = simulation_problem(s["alphas"][0], s["curvature_spread"], seed=s["seed"])
    rows = _rows(k_result, setup="per-client curvature")
    checked = 0
    for k, t in zip(rows["K"], rows["rounds_mc"]):
        if t is None:
            continue
        early = exact_first_below(problem, s["step_size"], k, s["eps"] * 1.25)
        late = exact_first_below(problem, s["step_size"], k, s["eps"] * 0.75, max_rounds=10 * t)
        assert early <= t and (late is None or t <= late), (k, early, t, late)
        checked += 1
    assert checked >= 3


def test_paper_setup_has_no_k_dependence(k_result):
    """Identical client Hessians: the exact law after k local steps is the same for every K,
    so the local steps needed to reach eps do not depend on K (up to a whole round)."""
    rows = _rows(k_result, setup="paper (identical Hessians)")
    steps = dict(zip(rows["K"], rows["steps_exact"]))
    t1 = steps[1]
    for k, t in steps.items():
        assert t1 <= t < t1 + k


def test_partial_participation_floor_is_above_full_and_grows_as_s_falls(participation_result):
    """Fig. 2: for every eta the long-run W2 of schemes I and II is above that of full
    devices, grows as S falls from 40 to 30, scheme II beats scheme I at S = 40, and the
    partial-device bias stays well above the exact-draw floor at the smaller eta."""
    res = participation_result
    floor = res.summary["floor"]
    level = {k: v["mc_floor"] for k, v in res.summary["curves"].items()}
    factors = res.settings["step_factors"]
    for c in factors:
        full = level[("full", 50, c)]
        for scheme in ("I", "II"):
            assert level[(scheme, 40, c)] > full
            assert level[(scheme, 30, c)] > level[(scheme, 40, c)]
        assert level[("II", 40, c)] < level[("I", 40, c)]
    smallest = min(factors)
    assert level[("II", 40, smallest)] > 2 * floor
    assert level[("full", 50, smallest)] < 1.6 * floor  # full devices reach the floor


def test_partial_participation_monte_carlo_matches_exact_moments(participation_result):
    """The long-run level of each Monte Carlo curve (mean of the last 25% of rounds) agrees
    with the exact moments' W2 within 30% + the exact-draw floor (fitted W2 of R = 300 is
    ~sqrt(W2^2 + floor^2); the round-to-round jitter of partial participation adds more)."""
    res = participation_result
    floor = res.summary["floor"]
    for key, v in res.summary["curves"].items():
        assert abs(v["mc_floor"] - v["exact_end"]) < 0.3 * v["exact_end"] + floor, key


def test_correlation_does_not_change_the_law_in_the_paper_setup():
    res = run_study("correlation", reduced=True, progress=False)
    assert res.summary["max_exact_difference"] < 1e-10
    assert res.num_rows == len(res.settings["correlations"]) * res.settings["rounds"]


def test_heterogeneity_study_runs_and_larger_alpha_is_slower():
    res = run_study("heterogeneity", reduced=True, progress=False)
    curves = res.summary["curves"]
    assert curves[("paper", 100.0)]["final_exact"] > curves[("paper", 0.0)]["final_exact"]
    assert set(res.columns) >= {"setup", "alpha", "round", "w2_mc", "w2_exact"}


def test_step_size_study_decays_faster_than_the_bound():
    """Gaussian target: the exact W2 under eta_k = 1/(2L + m k/12) decays like 1/k, faster
    than Thm 5.8's k^(-1/2) bound; minibatch noise makes the constant step visibly worse."""
    res = run_study("step-size", reduced=True, progress=False)
    for gradient, slopes in res.summary["slopes"].items():
        assert list(slopes.values())[-1] < -0.75, gradient
    mc = res.summary["mc"]
    tail = lambda w: float(np.mean(w[-len(w) // 5 :]))  # noqa: E731
    assert tail(mc[("decay (Thm 5.8)", "minibatch b=1")]) < tail(mc[("constant 1/(2L)", "minibatch b=1")])


def test_curvature_simulation_with_spread_one_is_the_paper_generator():
    a = CurvatureSimulation(num_clients=6, alpha=3.0, samples_per_client=5, curvature_spread=1.0, seed=4)
    b = GaussianSimulation(num_clients=6, alpha=3.0, samples_per_client=5, seed=4)
    torch.testing.assert_close(a.shifts, b.shifts, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(a.global_hessian, b.global_hessian, rtol=1e-12, atol=0)
    c = CurvatureSimulation(num_clients=6, alpha=3.0, samples_per_client=5, curvature_spread=2.0, seed=4)
    torch.testing.assert_close(c.centres, b.centres)
    ratios = c.hessians[:, 0, 0] / b.hessians[0, 0]
    torch.testing.assert_close(ratios, 2.0 ** -torch.linspace(-1, 1, 6, dtype=torch.float64))
    assert isinstance(simulation_problem(1.0, 1.0), GaussianSimulation)
    with pytest.raises(ValueError, match="curvature_spread"):
        simulation_problem(1.0, 0.5)


def test_cli_lists_every_study_and_writes_png_and_csv(tmp_path, capsys):
    from fedlangevin.commands.simulate import STUDIES as REGISTRY

    gaussian = {name for name, (module, _) in REGISTRY.items() if module == "fedlangevin.experiments.gaussian"}
    assert set(STUDIES) | {"all"} == gaussian
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    for name in REGISTRY:
        assert name in out
    assert main(["simulate", "density", "--reduced", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "FA-LD samples" in out and "exact" in out
    png, csv = tmp_path / "density.png", tmp_path / "density.csv"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = csv.read_text().splitlines()[0]
    assert header == "chain,round,theta0,theta1"


def test_cli_bad_argument_is_a_clear_error(tmp_path, capsys):
    assert main(["simulate", "density", "--chains", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "chains" in err and "Traceback" not in err
    assert not (tmp_path / "density.png").exists()


def test_partial_participation_limit_is_the_noise_inflation(participation_result):
    """As eta -> 0 (alpha = 0), the only bias left is the injected noise's inflation: the
    aggregated private noise has variance E[sum_c w_c^2] / sum_c p_c^2 times that of full
    devices, f = N/S for scheme II and N/S + 1 - 1/S for scheme I, so the long-run law is
    N(m, f Sigma_post) and W2 -> (sqrt(f) - 1) sqrt(tr Sigma_post). The exact stationary law
    at the smallest step size agrees within 3% (the rest vanishes linearly in eta)."""
    res = participation_result
    problem = simulation_problem(0.0, 1.0)
    scale = float(np.sqrt(np.trace(problem.posterior(1.0)[1].numpy())))
    n = problem.num_clients
    for (scheme, s), values in res.summary["limits"].items():
        if scheme == "full":
            assert values[0] < 1e-3 * scale  # full devices: the bias vanishes with eta
            continue
        f = n / s if scheme == "II" else n / s + 1 - 1 / s
        assert values[0] == pytest.approx((np.sqrt(f) - 1) * scale, rel=0.03), (scheme, s)
