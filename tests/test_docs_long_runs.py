"""docs/long-runs.md: every code block runs as written; the resume recipe survives an interruption."""

from __future__ import annotations

import contextlib
import io
import os
import re
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "long-runs.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def _recipe() -> str:
    (block,) = [b for b in _blocks() if b.startswith('"""long_run.py')]
    return block


def _exec(code: str, where: Path) -> tuple[dict, str]:
    namespace: dict = {"__name__": "__main__"}
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(where)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(PAGE), "exec"), namespace)
    finally:
        os.chdir(cwd)
    return namespace, out.getvalue()


def _run_dying_in_round(dies_in: int, where: Path, monkeypatch) -> None:
    """Run the recipe in ``where`` with kernels whose round ``dies_in`` (counted over all of them)
    dies: the process stops there and nothing after that point survives."""
    import fedlangevin.fald.sampler as S

    real, calls = S.assemble, [0]

    def dying_kernels(*args, **kwargs):
        kernel = real(*args, **kwargs)

        def dies(*a, **k):
            calls[0] += 1
            if calls[0] == dies_in:
                raise KeyboardInterrupt
            return kernel.step(*a, **k)

        return kernel._replace(step=dies)

    monkeypatch.setattr(S, "assemble", dying_kernels)
    with pytest.raises(KeyboardInterrupt):
        _exec(_recipe(), where)
    monkeypatch.setattr(S, "assemble", real)


def test_resume_recipe_continues_an_interrupted_run_exactly(tmp_path, monkeypatch):
    (tmp_path / "whole").mkdir()
    (tmp_path / "cut").mkdir()
    whole, _ = _exec(_recipe(), tmp_path / "whole")

    _run_dying_in_round(240, tmp_path / "cut", monkeypatch)
    again, printed = _exec(_recipe(), tmp_path / "cut")
    assert "resuming: {'rounds': 400, 'done': 200, 'warmup': 100, 'thin': 5, 'draws': 20" in printed
    assert torch.equal(again["trace"].samples, whole["trace"].samples)
    assert tuple(again["trace"].samples.shape) == (20, 60, 2)
    with pytest.raises(SystemExit, match="complete"):
        _exec(_recipe(), tmp_path / "cut")


@pytest.mark.parametrize("dies_in", [1, 50])
def test_resume_recipe_works_after_a_kill_before_the_first_checkpoint(tmp_path, monkeypatch, dies_in):
    """Killed after the store was made and before the first checkpoint (round 100), the recipe
    used to stop at "store directory ... is not empty"; now it starts the run afresh there."""
    (tmp_path / "whole").mkdir()
    (tmp_path / "cut").mkdir()
    whole, _ = _exec(_recipe(), tmp_path / "whole")
    _run_dying_in_round(dies_in, tmp_path / "cut", monkeypatch)
    assert (tmp_path / "cut" / "long-run" / "samples" / "meta.json").is_file()
    assert not (tmp_path / "cut" / "long-run" / "run.ckpt").exists()
    again, _ = _exec(_recipe(), tmp_path / "cut")
    assert torch.equal(again["trace"].samples, whole["trace"].samples)


def test_resume_recipe_works_after_a_kill_between_the_stores_data_files_and_its_meta(tmp_path, monkeypatch):
    """Killed inside the store's creation, after samples.bin and draw_rounds.bin were made (empty) and
    before meta.json: the recipe used to stop at "store directory ... is not empty"; it starts afresh."""
    import fedlangevin.runner.io.store as st

    (tmp_path / "whole").mkdir()
    (tmp_path / "cut").mkdir()
    whole, _ = _exec(_recipe(), tmp_path / "whole")

    def killed(path, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(st, "write_json_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        _exec(_recipe(), tmp_path / "cut")
    monkeypatch.undo()
    folder = tmp_path / "cut" / "long-run" / "samples"
    # the empty data files, and the store's lock file (taken before anything is written in it)
    assert {p.name for p in folder.iterdir()} == {"samples.bin", "draw_rounds.bin", "lock"}
    again, _ = _exec(_recipe(), tmp_path / "cut")
    assert torch.equal(again["trace"].samples, whole["trace"].samples)


def test_other_blocks_run_and_print_what_the_page_says(tmp_path):
    outputs = []
    for block in _blocks():
        if block.startswith('"""long_run.py'):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            outputs.append(_exec(block, tmp_path)[1])
    text = "\n".join(outputs)
    assert "torch.Size([50, 0, 2]) 200 10000" in text
    assert "81 324 [0, 1, 2] {0: 'parameters', 1: 'parameters', 2: 'parameters'}" in text
    assert "torch.Size([3, 80, 2])\n80" in text
    assert "torch.Size([2, 30, 1]) [2 3] {1: (1, 1), 0: (2, 6)}\n[2 3]" in text
