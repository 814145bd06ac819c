"""docs/fald.md: every python block runs as written and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "fald.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_kernel_blocks_run_and_print_what_they_say():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    kernel_blocks = [b for b in blocks if "build" in b]
    assert len(kernel_blocks) == 2
    namespace: dict = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in kernel_blocks:
            exec(compile(block, str(PAGE), "exec"), namespace)
    lines = out.getvalue().splitlines()
    assert lines == ["torch.Size([4, 2]) 500 50", "True", "II 5 1.0", "True", "torch.Size([4, 2])"]


def test_the_runner_example_runs():
    block = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)[0]
    block = block.replace("chains=300", "chains=20").replace("rounds=200", "rounds=20")  # the page's example, smaller
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(PAGE), "exec"), {"__name__": "__main__"})
    assert out.getvalue().startswith("torch.Size([20, 20, 2])")
