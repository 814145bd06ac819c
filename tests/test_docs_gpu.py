"""docs/gpu.md: the example runs as written (on the GPU where there is one, else on the CPU) and
prints what the page shows."""

from __future__ import annotations

from pathlib import Path

from tests.pages import python_blocks, run_block

PAGE = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"


def test_the_example_prints_what_the_page_shows():
    (code,) = python_blocks(PAGE)
    shown = code.split("# ")[-1].strip()  # the comment after the print: its expected output
    assert run_block(code, PAGE).strip() == shown
