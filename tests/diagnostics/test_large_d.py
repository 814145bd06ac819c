"""Convergence at large d (diagnostics.large_d): R-hat / ESS of random projections, of
scalar functionals, and every coordinate's classic split R-hat; numpy only (no torch).

Tolerances. For iid draws split into m halves of n draws, the split R-hat is about
1 + (chi2_{m-1}/(m-1) - 1) / (2n) (B/W of iid halves is chi2_{m-1}/(m-1); R-hat^2 =
(n-1)/n + B/(nW)). With 4 chains of 1,000 draws, m = 8, n = 500: P(chi2_7 > 35) = 1.6e-5,
so R-hat <= 1 + (5 - 1)/1000 = 1.004 for each value with probability 1 - 1.6e-5, and for all
2 x 16 bulk/folded values of 16 projections with probability > 0.9994 (union bound): the bound
1.005 used below is not loose by luck. The seeds are fixed.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("arviz")

import diagnostics as dg  # noqa: E402

CHAINS, DRAWS, D = 4, 1000, 2000


@pytest.fixture(scope="module")
def iid():
    return np.random.default_rng(0).standard_normal((CHAINS, DRAWS, D))


def test_iid_draws_give_projection_r_hat_near_one(iid):
    c = dg.projections(iid, k=16, seed=0)
    assert c.labels == [f"proj[{i}]" for i in range(16)] and c.directions.shape == (D, 16)
    np.testing.assert_allclose(np.linalg.norm(c.directions, axis=0), 1.0, rtol=1e-12)
    assert c.max_rhat < 1.005, c.worst()  # the module docstring's bound
    assert c.converged(chains=CHAINS), c.worst()  # R-hat < 1.01 and ESS >= 100 per chain
    assert c.draws == CHAINS * DRAWS


def test_a_shifted_chain_is_flagged_by_the_projections(iid):
    """Chain 0 moved by 0.5 sd in every coordinate (random signs). In standardised coordinates a
    unit direction u sees a shift 0.5 * sum_i u_i s_i ~ 0.5 N(0, 1); R-hat > 1.05 needs a shift
    above about 0.53 sd in one of the 16 directions (one of 4 chains shifted by delta:
    R-hat^2 ~ 1 + delta^2 * 3/16), i.e. max |N(0, 1)| over 16 above 1.06: probability 1 - 0.71^16
    > 0.99."""
    x = iid.copy()
    x[0] += 0.5 * np.random.default_rng(1).choice([-1.0, 1.0], D)
    c = dg.projections(x, k=16, seed=0)
    assert c.max_rhat > 1.05, c.worst()
    assert not c.converged(chains=CHAINS)


def test_a_disagreement_in_one_coordinate_is_caught_by_split_rhat_not_by_projections(iid):
    """The limit of projections, stated in the docs: chain 0 moved by 3 sd in theta[3] alone
    weighs about 1/sqrt(2000) = 0.022 in a random direction (a shift of 0.07 sd: R-hat^2 - 1
    about 0.07^2 * 3/16 < 0.001), while that coordinate's split R-hat is about
    sqrt(1 + 13.5/7) = 1.71 (2 of 8 half-chains at 3, 6 at 0: the half-chain means' variance
    is 13.5/7, the within variance 1)."""
    x = iid.copy()
    x[0, :, 3] += 3.0
    c = dg.projections(x, k=16, seed=0)
    assert c.max_rhat < 1.01, c.worst()
    assert int(np.argmax(c.coordinate_rhat)) == 3 and c.coordinate_rhat[3] > 1.5
    assert "theta[3]" in c.worst()


def test_split_rhat_is_the_textbook_formula():
    """BDA3 eq. 11.4 on chains split in halves, written out with loops."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 11, 4)) + np.arange(3)[:, None, None] * 0.3
    got = dg.split_rhat(x)
    for j in range(4):
        n = 5
        halves = [x[c, :n, j] for c in range(3)] + [x[c, 11 - n:, j] for c in range(3)]
        means = [h.mean() for h in halves]
        w = np.mean([h.var(ddof=1) for h in halves])
        b = n * np.var(means, ddof=1)
        expected = np.sqrt(((n - 1) / n * w + b / n) / w)
        assert got[j] == pytest.approx(expected, rel=1e-12)
    assert dg.split_rhat(np.ones((4, 10, 2)))[0] == 1.0  # a constant coordinate
    assert np.isnan(dg.split_rhat(x[:1])).all()  # one chain says nothing


def test_functionals_of_the_draws(iid):
    rng = np.random.default_rng(3)
    lpd = rng.standard_normal((CHAINS, 500))
    c = dg.functionals({"test_lpd": lpd, "pred": rng.standard_normal((CHAINS, 500, 2))})
    assert c.labels == ["test_lpd", "pred[0]", "pred[1]"] and c.directions is None
    assert c.max_rhat < 1.01  # iid: m = 8, n = 250: 1 + 4/500 = 1.008 (module docstring's argument)
    np.testing.assert_allclose(c.rhat[:1], dg.rhat(lpd))
    np.testing.assert_allclose(c.ess_bulk[:1], dg.ess(lpd))
    lpd[1] += 1.0  # a chain stuck elsewhere
    assert dg.functionals(lpd).max_rhat > 1.1
    assert dg.functionals(lpd).labels == ["f"]


def test_projection_summary_rows_and_attrs(iid):
    x = iid[:, :200, :300]
    lpd = np.random.default_rng(4).standard_normal((CHAINS, 200))
    df = dg.projection_summary(x, k=5, seed=7, functionals={"test_lpd": lpd})
    assert list(df.index) == [f"proj[{i}]" for i in range(5)] + ["test_lpd"]
    assert list(df.columns) == ["mean", "sd", "eti90_lb", "eti90_ub", "mcse_mean", "mcse_sd", "ess_bulk",
                                "ess_tail", "r_hat"]
    c = dg.projections(x, k=5, seed=7)
    np.testing.assert_allclose(df["r_hat"].to_numpy()[:5], c.rhat)
    np.testing.assert_allclose(df["ess_tail"].to_numpy()[:5], c.ess_tail)
    assert df.attrs["d"] == 300 and df.attrs["k"] == 5 and df.attrs["seed"] == 7
    assert df.attrs["max_r_hat"] == df["r_hat"].max()
    assert df.attrs["max_coordinate_split_r_hat"] == pytest.approx(c.coordinate_rhat.max())
    with pytest.raises(ValueError, match="functionals must have the samples' \\(chains, draws\\)"):
        dg.projection_summary(x, k=2, functionals={"lpd": lpd[:, :100]})


def test_projections_do_not_depend_on_coordinate_scales(iid):
    """Standardised coordinates: rescaling one coordinate by 1e6 changes nothing."""
    x = iid[:, :200, :50].copy()
    y = x.copy()
    y[:, :, 0] *= 1e6
    np.testing.assert_allclose(dg.projections(x, k=4).rhat, dg.projections(y, k=4).rhat, rtol=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    (dict(k=0), "k must be"),
    (dict(seed=-1), "seed must be"),
    (dict(standardize="yes"), "standardize must be"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dg.projections(np.zeros((4, 10, 3)), **kwargs)


def test_non_finite_or_misshapen_samples_are_refused():
    x = np.zeros((4, 10, 3))
    x[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="samples must be finite"):
        dg.projections(x)
    with pytest.raises(ValueError, match="samples must have shape"):
        dg.projections(np.zeros((4, 10, 3, 2)))
    with pytest.raises(ValueError, match="values must name at least one functional"):
        dg.functionals({})
    with pytest.raises(ValueError, match="the same \\(chains, draws\\)"):
        dg.functionals({"a": np.zeros((4, 10)), "b": np.zeros((4, 12))})


def test_the_docs_example_runs_and_prints_what_it_shows():
    """docs/diagnostics.md's large-d example: its asserts pass and it prints its comments' lines."""
    import re
    from pathlib import Path

    from tests.pages import python_blocks, run_block

    page = Path(__file__).resolve().parents[2] / "docs" / "diagnostics.md"
    block = next(b for b in python_blocks(page) if "dg.projections(" in b)
    printed = run_block(block, page).splitlines()
    shown = [line[2:] for line in block.splitlines() if re.match(r"# (max R-hat| {11}mean|proj\[|test_lpd)", line)]
    assert printed == shown
