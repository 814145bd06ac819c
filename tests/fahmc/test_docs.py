"""docs/fahmc.md: every python block runs as written and prints what its comments say."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pages import python_blocks, run_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "fahmc.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_page_blocks_run_and_print_what_their_comments_say(tmp_path, monkeypatch):
    """The defaults example, the numeric example with the exact law, the checkpoint and "auto" blocks, in
    order in one namespace (each builds on the one before); every printed line is the one its
    comment gives."""
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(PAGE)
    assert len(blocks) == 4
    namespace: dict = {"__name__": "__main__"}
    lines = "".join(run_block(block, PAGE, namespace) for block in blocks).splitlines()
    assert lines == ["torch.Size([32, 200, 2])", "True", "True True", "FA-HMC", "40.0", "True True", "True", "True",
                     "5 5", "5", "True"]
    assert (tmp_path / "fahmc.ckpt").is_file()
