"""docs/gradient-noise.md: the page's example runs as written and prints what the page shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pages import printed_and_shown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "gradient-noise.md"


@pytest.mark.usefixtures("one_torch_thread")
def test_example_runs_and_prints_the_page_output():
    printed, shown = printed_and_shown(PAGE)
    assert printed == shown
