"""Trace.summary: one row per parameter up to SUMMARY_LIMIT, random projections above it,
so that the summary of a large trace is fast and small."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

pytest.importorskip("arviz")

import diagnostics.arviz as dga  # noqa: E402
from fedlangevin.runner.results.trace import SUMMARY_LIMIT, Communication, Trace  # noqa: E402


def _trace(d: int, chains: int = 4, draws: int = 200, seed: int = 0) -> Trace:
    x = torch.as_tensor(np.random.default_rng(seed).standard_normal((chains, draws, d)))
    return Trace(samples=x, draw_rounds=np.arange(draws), draw_steps=np.arange(draws), step_sizes=np.zeros(draws),
                 communication=Communication(draws, 0.0, 0.0, 0.0), settings={})


def test_a_large_trace_is_summarised_by_projections_fast_and_small(monkeypatch):
    trace = _trace(2000)
    widths = []
    inner = dga._diagnostic

    def recording(x, what, prob=None):
        widths.append(x.shape[2])
        return inner(x, what, prob)

    monkeypatch.setattr(dga, "_diagnostic", recording)
    lpd = np.random.default_rng(1).standard_normal((4, 200))
    dga.summary(np.zeros((4, 8, 1)) + np.arange(8)[None, :, None])  # ArviZ imported before the clock starts
    widths.clear()
    start = time.perf_counter()
    df = trace.summary(functionals={"test_lpd": lpd})
    wall = time.perf_counter() - start
    assert df.shape == (17, 9) and list(df.index)[-1] == "test_lpd"
    assert df.attrs["d"] == 2000 and df.attrs["k"] == 16
    # the per-coordinate diagnostics are never computed: every ArviZ call sees 16 projections or 1 functional
    assert widths and max(widths) <= 16, widths
    # a per-coordinate table of 2,000 entries takes about 25 s here (6 s for 500); projections 0.5 s:
    # 10 s leaves room for a loaded machine and still fails a per-coordinate table
    assert wall < 10.0, wall


def test_small_traces_keep_one_row_per_parameter_and_either_form_on_request():
    small = _trace(3)
    df = small.summary()
    assert list(df.index) == ["theta[0]", "theta[1]", "theta[2]"]
    lpd = np.random.default_rng(2).standard_normal((4, 200))
    both = small.summary(functionals={"test_lpd": lpd})
    assert list(both.index) == ["theta[0]", "theta[1]", "theta[2]", "test_lpd"]
    assert list(small.summary(per_coordinate=False, k=2).index) == ["proj[0]", "proj[1]"]
    big = _trace(SUMMARY_LIMIT + 1, draws=20)
    assert len(big.summary()) == 16
    assert len(big.summary(per_coordinate=True)) == SUMMARY_LIMIT + 1


def test_bad_per_coordinate_is_named():
    with pytest.raises(ValueError, match="per_coordinate must be None"):
        _trace(3).summary(per_coordinate="yes")
