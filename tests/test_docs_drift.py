"""docs/drift.md: the example runs as written and prints what the page shows."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "drift.md"


@pytest.mark.usefixtures("one_torch_thread")
def test_example_runs_and_prints_the_page_output():
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    out = io.StringIO()
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(PAGE), "exec"), namespace)
    printed = [line.strip() for line in out.getvalue().strip().splitlines()]
    block = PAGE.read_text().split("prints", 1)[1].split("\n## ", 1)[0]
    shown = [line.strip() for line in block.splitlines() if line.startswith("    ")]
    assert printed == shown
