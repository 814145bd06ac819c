"""docs/adaptation.md: the example runs as written and shows what the page says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pages import python_blocks, run_block

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adaptation.md"


@pytest.mark.usefixtures("one_torch_thread")
def test_example_runs_and_prints_the_page_output():
    (code,) = python_blocks(PAGE)
    printed = run_block(code, PAGE).strip().splitlines()
    shown = [line.strip() for line in PAGE.read_text().split("prints", 1)[1].splitlines() if line.startswith("    ")]
    assert printed == shown
