"""docs/models.md: the per-group parameter block runs and prints what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.pages import python_blocks, run_block

PAGE = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def test_the_per_group_parameter_block_prints_what_its_comments_say():
    pytest.importorskip("pyro")
    block = next(b for b in python_blocks(PAGE) if "GROUPS = 3" in b)
    printed = run_block(block, PAGE).splitlines()
    said = [re.search(r"# (.*?):", line).group(1) for line in block.splitlines() if line.startswith("print(")]
    assert printed == said
