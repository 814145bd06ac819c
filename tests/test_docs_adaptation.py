"""docs/adaptation.md: the examples run as written and show what the page says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pages import python_blocks, run_block

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adaptation.md"


def _shown(n: int) -> list[str]:
    """The indented lines after the page's ``n``-th "prints" (0-based), up to the next section."""
    after = PAGE.read_text().split("\nprints", n + 1)[n + 1].split("\n## ", 1)[0]
    return [line.strip() for line in after.splitlines() if line.startswith("    ")]


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("n", [0, 1], ids=["adaptation", "local steps"])
def test_example_runs_and_prints_the_page_output(n):
    blocks = python_blocks(PAGE)
    assert len(blocks) == 2
    printed = run_block(blocks[n], PAGE).strip().splitlines()
    assert printed == _shown(n)
