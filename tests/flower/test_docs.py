"""docs/flower.md: every Python block runs as written (it asserts its own claim: the simulated
run equals the in-process run)."""

import re
from pathlib import Path

import pytest

pytest.importorskip("flwr")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "flower.md"


def test_flower_page_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert blocks
    namespace: dict = {"__name__": "__main__"}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)
    assert tuple(namespace["trace"].samples.shape) == (8, 5, 2)
