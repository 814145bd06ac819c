"""docs/network.md: the example runs, and its posterior average beats the MAP's test NLL as printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.pages import python_blocks, run_block

PAGE = Path(__file__).resolve().parents[1] / "docs" / "network.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_example_runs_and_the_average_beats_the_map_on_nll():
    (block,) = python_blocks(PAGE)
    printed = run_block(block, PAGE)
    scores = {m.group(1): (float(m.group(2)), float(m.group(3)))
              for m in re.finditer(r"^(\S+)\s+accuracy (\S+)\s+NLL (\S+)", printed, flags=re.M)}
    assert set(scores) == {"MAP", "FA-LD"}
    assert scores["FA-LD"][1] < scores["MAP"][1]
    assert scores["FA-LD"][0] > scores["MAP"][0] - 0.05
