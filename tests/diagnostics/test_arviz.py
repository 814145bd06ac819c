"""ArviZ bridge: structure of the exported data, summary numbers against an independent
reference (the same frozen numbers for ArviZ 0.x and 1.x), R-hat / ESS against theory.

Runs with whichever ArviZ family is installed (0.x on Python 3.11, 1.x on Python >= 3.12 in
the CI leg .ci/arviz1_leg.sh); needs no torch.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

az = pytest.importorskip("arviz")
xr = pytest.importorskip("xarray")

import diagnostics as dg  # noqa: E402
from tests.diagnostics import _reference as ref  # noqa: E402

FAMILY = dg.arviz_family()


# -- export structure -----------------------------------------------------------------------


def test_family_matches_installed_version_and_native_type():
    x = np.random.default_rng(0).standard_normal((2, 10, 3))
    data = dg.to_arviz(x)
    if FAMILY == 0:
        assert int(az.__version__.split(".")[0]) == 0
        assert type(data).__name__ == "InferenceData"
    else:
        assert int(az.__version__.split(".")[0]) >= 1
        assert isinstance(data, xr.DataTree)


def test_default_layout_is_one_vector_variable():
    x = np.arange(2 * 5 * 3, dtype=float).reshape(2, 5, 3)
    post = dg.posterior_dataset(dg.to_arviz(x))
    assert list(post.data_vars) == ["theta"]
    assert dict(post["theta"].sizes) == {"chain": 2, "draw": 5, "theta_dim_0": 3}
    assert list(post["theta_dim_0"].values) == [0, 1, 2]
    np.testing.assert_array_equal(post["theta"].values, x)


def test_label_style_names_round_trip_and_scalars_split_out():
    x = np.random.default_rng(1).standard_normal((3, 8, 3))
    data = dg.to_arviz(x, ["mu[0]", "mu[1]", "sigma"])
    post = dg.posterior_dataset(data)
    assert set(post.data_vars) == {"mu", "sigma"}
    assert post["sigma"].dims == ("chain", "draw")
    np.testing.assert_array_equal(post["mu"].values, x[:, :, :2])
    np.testing.assert_array_equal(post["sigma"].values, x[:, :, 2])
    flat, labels = dg.flatten_posterior(data)
    assert labels == ["mu[0]", "mu[1]", "sigma"]
    np.testing.assert_array_equal(flat, x)
    assert list(dg.summary(data).index) == ["mu[0]", "mu[1]", "sigma"]


def test_multi_index_names_become_an_array_variable():
    """Names ``W[i,j]`` (as models with matrix parameters report them) covering a full grid,
    in any column order, give a (chain, draw, 3, 2) variable; a partial grid stays 1-d."""
    rng = np.random.default_rng(9)
    w = rng.standard_normal((2, 5, 3, 2))
    b = rng.standard_normal((2, 5))
    order = [(2, 1), (0, 0), (1, 1), (0, 1), (2, 0), (1, 0)]
    x = np.stack([w[:, :, i, j] for i, j in order] + [b], axis=2)
    names = [f"W[{i},{j}]" for i, j in order] + ["b"]
    post = dg.posterior_dataset(dg.to_arviz(x, names))
    assert post["W"].dims == ("chain", "draw", "W_dim_0", "W_dim_1")
    assert list(post["W_dim_0"].values) == [2, 0, 1] and list(post["W_dim_1"].values) == [1, 0]
    np.testing.assert_array_equal(post["W"].sel(W_dim_0=1, W_dim_1=0).values, w[:, :, 1, 0])
    labels = list(dg.summary(dg.to_arviz(x, names)).index)
    assert "W[1, 0]" in labels and labels[-1] == "b" and len(labels) == 7
    renamed = dg.posterior_dataset(dg.to_arviz(x, names, dims={"W": ["feature", "cls"]}))
    assert renamed["W"].dims == ("chain", "draw", "feature", "cls")
    partial = dg.posterior_dataset(dg.to_arviz(x[:, :, :3], names[:3]))
    assert partial["W"].dims == ("chain", "draw", "W_dim_0")
    with pytest.raises(ValueError, match="dims"):
        dg.to_arviz(x, names, dims={"W": ["only_one"]})


def test_dims_and_coords_are_applied():
    x = np.zeros((2, 4, 2)) + np.arange(2)
    data = dg.to_arviz(x, "beta", dims={"beta": ["feature"]}, coords={"feature": ["age", "dose"]})
    post = dg.posterior_dataset(data)
    assert post["beta"].dims == ("chain", "draw", "feature")
    assert list(post["feature"].values) == ["age", "dose"]
    assert list(dg.summary(data).index) == ["beta[age]", "beta[dose]"]


def test_two_dimensional_input_is_one_scalar():
    x = np.random.default_rng(2).standard_normal((2, 6))
    post = dg.posterior_dataset(dg.to_arviz(x, ["tau"]))
    assert list(post.data_vars) == ["tau"] and post["tau"].dims == ("chain", "draw")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"samples": np.zeros((2, 3, 4, 5))}, "samples"),
        ({"samples": np.zeros(5)}, "samples"),
        ({"samples": np.zeros((2, 0, 3))}, "samples"),
        ({"samples": np.array([[[0.0], [np.nan]]])}, "finite"),
        ({"samples": np.zeros((2, 3, 2)), "var_names": ["a"]}, "var_names"),
        ({"samples": np.zeros((2, 3, 2)), "var_names": ["a", "a"]}, "unique"),
        ({"samples": np.zeros((2, 3, 2)), "var_names": ["a", "a[0]"]}, "scalar"),
        ({"samples": np.zeros((2, 3, 2)), "var_names": ["a", 3]}, "var_names"),
        ({"samples": np.zeros((2, 3, 2)), "dims": {"nope": ["x"]}}, "dims"),
        ({"samples": np.zeros((2, 3, 2)), "coords": {"theta_dim_0": [1, 2, 3]}}, "coords"),
        ({"samples": np.zeros((2, 3, 2)), "coords": {"other": [1, 2]}}, "coords"),
        ({"samples": "abc"}, "samples"),
    ],
)
def test_to_arviz_rejects_bad_input(kwargs, match):
    samples = kwargs.pop("samples")
    with pytest.raises(ValueError, match=match):
        dg.to_arviz(samples, **kwargs)


# -- summary numbers: both families against one frozen independent reference -------------------


def test_reference_json_matches_the_independent_implementation():
    """The frozen reference (data/arviz_reference.json) is what tests/diagnostics/_reference.py
    computes here and now, from the platform-independent fixed input.

    Tolerance 1e-12 relative: same code, only libm's last bits (log/cos of Box-Muller) can
    differ between machines."""
    doc = json.loads(ref.REFERENCE_JSON.read_text())
    x = ref.fixed_input()
    assert list(x.shape) == doc["shape"]
    assert x.sum() == pytest.approx(doc["checksum_sum"], rel=1e-12)
    values, margin = ref.reference_summary(x)
    for col in ref.COLUMNS:
        np.testing.assert_allclose(values[col], doc["values"][col], rtol=1e-12, err_msg=col)
    # Geyer's truncation is a discrete decision; the smallest pair sum it compared with 0 is
    # ~1e-3, nine orders of magnitude above round-off, so no decision can flip between codes.
    assert margin > 1e-6


def test_summary_agrees_with_frozen_reference_in_this_arviz_family():
    """Cross-family agreement scheme.

    Python 3.11 only gets ArviZ 0.x and ArviZ 1.x needs Python >= 3.12, so the two families
    never run in the same process. Instead each CI leg (the main suite with 0.x, and
    .ci/arviz1_leg.sh with 1.x) checks ``diagnostics.summary`` against the same frozen
    numbers, written by an independent numpy implementation of Vehtari et al. (2021) (see
    tests/diagnostics/_reference.py) on a platform-independent input. If both legs pass,
    the families agree with each other within 2 x the tolerance.

    Tolerance: 1e-10 relative. The algorithms are the same, so only round-off differs (FFT
    versus direct autocovariance sums, summation order): the observed difference is about
    3e-15 with both 0.23 and 1.3. Any convention difference is orders of magnitude larger on
    this input: the tail ESS at ArviZ 1.x's default 11%/89% quantiles differs from the
    5%/95% one by 9% to 88% per entry (checked below), ArviZ 0.x's default 94% HDI from the
    90% ETI by over 20%, an sd with ddof = 0 by 6e-4.
    """
    doc = json.loads(ref.REFERENCE_JSON.read_text())
    df = dg.summary(ref.fixed_input())
    assert list(df.columns) == list(ref.COLUMNS)
    assert list(df.index) == doc["labels"]
    for col in ref.COLUMNS:
        np.testing.assert_allclose(df[col].to_numpy(), doc["values"][col], rtol=1e-10, err_msg=col)
    assert df.attrs["tail_prob"] == (0.05, 0.95) and df.attrs["ci_prob"] == 0.90


def test_summary_same_from_array_and_from_native_object():
    x = ref.fixed_input()
    a = dg.summary(x)
    b = dg.summary(dg.to_arviz(x))
    c = dg.summary(dg.posterior_dataset(dg.to_arviz(x)))
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
    np.testing.assert_array_equal(a.to_numpy(), c.to_numpy())


def test_tail_prob_is_passed_explicitly():
    x = ref.fixed_input()
    ours = dg.ess(x, method="tail")
    at_11_89 = dg.ess(x, method="tail", tail_prob=(0.11, 0.89))
    np.testing.assert_allclose(ours, dg.summary(x)["ess_tail"].to_numpy(), rtol=0)
    assert np.max(np.abs(at_11_89 / ours - 1.0)) > 0.10  # the convention matters on this input
    ds = dg.posterior_dataset(dg.to_arviz(x))
    default = az.ess(ds, method="tail")
    if hasattr(default, "to_dataset"):
        default = default.to_dataset()
    default = default["theta"].values
    # What each family does when not told: 0.x uses 5%/95%, 1.x its ci_prob 0.89 (11%/89%).
    expected_default = ours if FAMILY == 0 else at_11_89
    np.testing.assert_allclose(default, expected_default, rtol=1e-12)


def test_summary_selection_rounding_and_intervals():
    x = ref.fixed_input()
    full = dg.summary(x)
    sub = dg.summary(x, var_names=["theta[2]", "theta[0]"])
    assert list(sub.index) == ["theta[2]", "theta[0]"]
    np.testing.assert_allclose(sub.loc["theta[2]"].to_numpy(), full.loc["theta[2]"].to_numpy(), rtol=1e-13)
    assert list(dg.summary(x, var_names="theta").index) == list(full.index)
    assert dg.summary(x, round_to=2)["mean"].iloc[0] == round(full["mean"].iloc[0], 2)
    eti80 = dg.summary(x, ci_prob=0.8)
    assert "eti80_lb" in eti80.columns
    np.testing.assert_allclose(eti80["eti80_lb"].to_numpy(), np.quantile(x.reshape(-1, 4), 0.1, axis=0))
    with pytest.raises(ValueError, match="var_names"):
        dg.summary(x, var_names=["theta[9]"])


def test_hdi_is_close_to_eti_for_a_symmetric_unimodal_sample():
    # For N(0, 1) both 90% intervals are +-1.645; with 8000 draws the sample quantiles have a
    # standard error of about 0.025, so 0.1 is a 4-sigma tolerance.
    x = np.random.default_rng(3).standard_normal((4, 2000, 1))
    hdi = dg.summary(x, ci_kind="hdi")
    assert hdi["hdi90_lb"].iloc[0] == pytest.approx(-1.645, abs=0.1)
    assert hdi["hdi90_ub"].iloc[0] == pytest.approx(1.645, abs=0.1)
    width = hdi["hdi90_ub"].iloc[0] - hdi["hdi90_lb"].iloc[0]
    eti = dg.summary(x)
    assert width <= eti["eti90_ub"].iloc[0] - eti["eti90_lb"].iloc[0] + 1e-12  # HDI is the shortest


def test_one_chain_has_nan_rhat_but_finite_ess():
    x = np.random.default_rng(4).standard_normal((1, 400, 2))
    df = dg.summary(x)
    assert df["r_hat"].isna().all()
    assert np.isfinite(df["ess_bulk"]).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ci_prob": 1.0}, "ci_prob"),
        ({"ci_prob": True}, "ci_prob"),
        ({"ci_kind": "hpd"}, "ci_kind"),
        ({"tail_prob": (0.9, 0.1)}, "tail_prob"),
        ({"tail_prob": 0.05}, "tail_prob"),
        ({"round_to": -1}, "round_to"),
    ],
)
def test_summary_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dg.summary(np.zeros((2, 10, 1)) + np.arange(10)[None, :, None], **kwargs)


def test_ess_rejects_bad_method():
    with pytest.raises(ValueError, match="method"):
        dg.ess(np.zeros((2, 10, 1)), method="mean")


@pytest.mark.filterwarnings("ignore:More chains:UserWarning")  # ArviZ 0.x on to_arviz of (4, 3, 3)
@pytest.mark.parametrize("shape", [(4, 1, 3), (4, 3, 3), (1, 3, 2), (2, 2)])
@pytest.mark.parametrize("name", ["rhat", "ess", "summary"])
def test_too_few_draws_are_refused_naming_the_minimum(name, shape):
    """Both ArviZ families return NaN (with only a log line) below 4 draws per chain: each half
    of a split chain needs 2 draws. Refused by name instead; 4 draws give numbers."""
    fn = getattr(dg, name)
    x = np.random.default_rng(9).standard_normal(shape)
    with pytest.raises(ValueError, match=rf"samples have {shape[1]} draws per chain; {name} needs at least 4"):
        fn(x)
    with pytest.raises(ValueError, match="at least 4 draws"):
        fn(dg.to_arviz(x))  # ArviZ data too, not only raw arrays
    enough = np.random.default_rng(9).standard_normal((shape[0], 4, *shape[2:]))
    result = fn(enough)
    values = result["ess_bulk"].to_numpy() if name == "summary" else result
    if name == "rhat" and shape[0] == 1:
        assert np.isnan(values).all()  # R-hat needs 2 chains (documented NaN, as in ArviZ)
    else:
        assert np.isfinite(values).all()


@pytest.mark.parametrize("relative", ["yes", 1, 0, None, np.array([True])])
def test_ess_relative_must_be_a_bool(relative):
    with pytest.raises(ValueError, match="relative must be True or False"):
        dg.ess(np.random.default_rng(0).standard_normal((2, 10, 1)), relative=relative)
    x = np.random.default_rng(0).standard_normal((2, 10, 1))
    assert dg.ess(x, relative=np.bool_(True)) == pytest.approx(dg.ess(x) / 20)


# -- R-hat and ESS against theory ------------------------------------------------------------


def test_rhat_near_one_for_iid_chains():
    """For iid chains, n draws per split chain and m split chains, B/W ~ F(m - 1, m(n - 1))
    and R-hat^2 = (n - 1)/n + (B/W)/n, so R-hat - 1 ~ (B/W - 1) / (2n). P(F(7, inf) > 3.5)
    = P(chi2_7 > 24.5) < 1e-3, so R-hat < 1 + 2.5 / (2n) holds for every one of the 5 seeds
    (for the folded version too) except with probability < 1e-2."""
    chains, draws = 4, 1000
    n = draws // 2
    for seed in range(5):
        x = np.random.default_rng(seed).standard_normal((chains, draws, 3))
        r = dg.rhat(x)
        assert np.all(r >= 1.0 - 1.0 / n) and np.all(r < 1.0 + 2.5 / (2 * n)), (seed, r)


def test_rhat_flags_chains_with_different_means():
    """Chain 0 shifted by 2 sd: in rank space the split-chain means differ by ~1.4 sd, so
    R-hat^2 ~ 1 + var(split means) / W ~ 1.3; any value above 1.1 shows the flag works."""
    x = np.random.default_rng(5).standard_normal((4, 500, 2))
    x[0] += 2.0
    assert np.all(dg.rhat(x) > 1.1)
    assert dg.summary(x)["r_hat"].min() > 1.1


def test_ess_matches_ar1_theory():
    """AR(1) chains x_t = phi x_{t-1} + sqrt(1 - phi^2) e_t have integrated autocorrelation
    time (1 + phi) / (1 - phi), so ESS ~ S (1 - phi) / (1 + phi); phi = 0 is the iid case.
    With 4 chains x 5000 draws the estimator's ratio to theory had mean 0.99 and standard
    deviation 0.018 (phi = 0) and 0.044 (phi = 0.5) over 150 replicate runs (not part of
    the test), so the tolerances 0.08 and 0.18 are about 4 standard deviations."""
    rng = np.random.default_rng(6)
    chains, draws = 4, 5000
    for phi, tol in ((0.0, 0.08), (0.5, 0.18)):
        e = rng.standard_normal((chains, draws))
        x = np.empty_like(e)
        x[:, 0] = e[:, 0]
        for t in range(1, draws):
            x[:, t] = phi * x[:, t - 1] + math.sqrt(1 - phi * phi) * e[:, t]
        expected = chains * draws * (1 - phi) / (1 + phi)
        bulk = dg.ess(x[:, :, None], method="bulk")[0]
        assert bulk == pytest.approx(expected, rel=tol), (phi, bulk, expected)
        rel = dg.ess(x[:, :, None], relative=True)[0]
        assert rel == pytest.approx(bulk / (chains * draws))


# -- plots -----------------------------------------------------------------------------------


def _is_png(path) -> bool:
    return path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_and_rank_plots_write_png(tmp_path):
    x = np.random.default_rng(7).standard_normal((4, 200, 3))
    x[0, :, 1] += 2.0
    fig = dg.trace_plot(x, path=tmp_path / "trace.png")
    assert _is_png(tmp_path / "trace.png")
    assert len(fig.axes) == 6 and fig.axes[1].get_ylabel() == "theta[0]"
    fig = dg.rank_plot(dg.to_arviz(x, ["a", "b", "c"]), path=tmp_path / "rank.png")
    assert _is_png(tmp_path / "rank.png")
    assert [ax.get_title(loc="left") for ax in fig.axes if ax.get_visible()] == ["a", "b", "c"]


def test_plots_cap_entries_and_chains():
    x = np.random.default_rng(8).standard_normal((20, 30, 12))
    fig = dg.trace_plot(x, max_vars=3, max_chains=5)
    assert "first 3 of 12 entries" in fig._suptitle.get_text()
    assert "first 5 of 20 chains" in fig._suptitle.get_text()
    assert len(fig.axes[1].lines) == 5
    fig = dg.rank_plot(x, var_names=["theta[4]"])
    assert fig.axes[0].get_title(loc="left") == "theta[4]"
    with pytest.raises(ValueError, match="max_vars"):
        dg.trace_plot(x, max_vars=0)
    with pytest.raises(ValueError, match="bins"):
        dg.rank_plot(x, bins=0)


@pytest.mark.parametrize("plot", ["trace_plot", "rank_plot"])
@pytest.mark.parametrize("path", [".", "", "sub/", "sub", "sub/.", "sub/.."])
def test_plot_path_must_name_a_file(plot, path, tmp_path, monkeypatch):
    """A folder (or a path whose file name is empty, "." or "..") is refused by name; matplotlib
    would write a hidden '.png' into it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    x = np.random.default_rng(10).standard_normal((2, 20, 1))
    with pytest.raises(ValueError, match=r"^path .* (is a folder|names no file)"):
        getattr(dg, plot)(x, path=path)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sub"]  # nothing written
    getattr(dg, plot)(x, path="sub/plot.png")
    assert _is_png(tmp_path / "sub" / "plot.png")


# -- too few chains to judge convergence ------------------------------------------------------


@pytest.mark.parametrize("chains", [1, 2, 3])
def test_rhat_and_summary_of_fewer_than_four_chains_warn_naming_chains(chains):
    x = np.random.default_rng(0).standard_normal((chains, 50, 2))
    with pytest.warns(UserWarning, match=rf"chains: R-hat from {chains} chain\(s\) cannot judge convergence"):
        dg.rhat(x)
    with pytest.warns(UserWarning, match=r"chains >= 4"):
        dg.summary(x)


def test_four_chains_do_not_warn():
    import warnings

    x = np.random.default_rng(0).standard_normal((4, 50, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        dg.rhat(x)
        dg.summary(x)


def test_mcse_sd_works_where_arviz_would_use_numba(monkeypatch):
    """ArviZ 0.x with Numba installed computes mcse_sd through float() of a one-element array, which
    NumPy >= 2.4 refuses (seen on a GPU machine's image: every summary failed). The flag is switched
    off for that call only: the same numbers as without Numba, and the flag is back afterwards."""
    az = pytest.importorskip("arviz")
    if not hasattr(az, "Numba"):
        pytest.skip("ArviZ 1.x has no Numba flag")
    x = np.random.default_rng(0).standard_normal((4, 100, 3))
    plain = dg.summary(x)["mcse_sd"].to_numpy()
    monkeypatch.setattr(az.Numba, "numba_flag", True)  # as ArviZ sets it where numba imports
    with_flag = dg.summary(x)["mcse_sd"].to_numpy()
    np.testing.assert_array_equal(with_flag, plain)
    assert az.Numba.numba_flag is True
