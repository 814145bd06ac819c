"""docs/realistic.md: the example runs as written and prints what the page shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pages import python_blocks, run_block

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "realistic.md"


@pytest.mark.usefixtures("one_torch_thread")
def test_example_runs_and_prints_the_page_output():
    (code,) = python_blocks(PAGE)
    printed = [line.strip() for line in run_block(code, PAGE).strip().splitlines()]
    block = PAGE.read_text().split("prints", 1)[1].split("\n## ", 1)[0]
    shown = [line.strip() for line in block.splitlines() if line.startswith("    ")]
    assert printed == shown
