"""docs/fald.md: every python block runs as written and prints what its comments say."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pages import python_blocks, run_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "fald.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_kernel_blocks_run_and_print_what_they_say():
    kernel_blocks = [b for b in python_blocks(PAGE) if "build(" in b and "class " not in b]
    assert len(kernel_blocks) == 2
    namespace: dict = {"__name__": "__main__"}
    lines = "".join(run_block(block, PAGE, namespace) for block in kernel_blocks).splitlines()
    assert lines == ["torch.Size([4, 2]) 500 50", "True", "II 5 1.0", "True", "torch.Size([4, 2])"]


def test_the_runner_example_runs():
    block = python_blocks(PAGE)[0]
    block = block.replace("chains=300", "chains=20").replace("rounds=200", "rounds=20")  # the page's example, smaller
    assert run_block(block, PAGE).startswith("torch.Size([20, 20, 2])")


def test_the_write_your_own_block_runs_and_prints_what_it_says(tmp_path, monkeypatch):
    """The preconditioner, correction and transport written on the page conform, give the built-in
    preconditioner's samples, are accounted, and resume from their checkpoint."""
    monkeypatch.chdir(tmp_path)
    (block,) = [b for b in python_blocks(PAGE) if "class ScaledIdentity" in b]
    lines = run_block(block, PAGE).splitlines()
    assert lines == ["[True, True, True]", "True 30", "ShrinkToAverage(0.5) 660.0", "True"]


def test_the_write_your_own_kernel_block_runs_and_prints_what_it_says(tmp_path, monkeypatch):
    """The kernel written on the page runs through fl.fald.Runner, samples the posterior mean and
    resumes its momentum from the checkpoint."""
    monkeypatch.chdir(tmp_path)
    (block,) = [b for b in python_blocks(PAGE) if "class Underdamped" in b]
    lines = run_block(block, PAGE).splitlines()
    assert lines == ["BAOAB torch.Size([200, 50, 2])", "True", "True"]


def test_the_partial_participation_block_prints_what_it_says():
    """The exact long-run law has no inflation under the calibrated noise and N/S + 1 - 1/S = 2.8
    (scheme I) or N/S = 2 (scheme II) under the paper's; the runs' sds follow (2000 chains: a sd's
    relative standard error is 1/sqrt(2 x 2000) = 1.6 %)."""
    (block,) = [b for b in python_blocks(PAGE) if 'noise="paper"' in b]
    lines = run_block(block, PAGE).splitlines()
    assert lines == ["I calibrated [1.    1.001] [1.   1.01]", "I paper [2.801 2.803] [1.67 1.68]",
                     "II calibrated [1.    1.001] [1.01 0.99]", "II paper [2.001 2.002] [1.42 1.41]"]
