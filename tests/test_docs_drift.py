"""docs/drift.md and docs/realistic.md: each page's example runs as written and prints what the page shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pages import printed_and_shown

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("page", ["drift.md", "realistic.md"])
def test_example_runs_and_prints_the_page_output(page):
    printed, shown = printed_and_shown(ROOT / "docs" / page)
    assert printed == shown
