"""docs/diagnostics.md: the convergence example runs as printed and passes its own checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "diagnostics.md"

pytest.importorskip("arviz")
pytest.importorskip("torch")  # the example runs the FA-LD sampler (the ArviZ 1.x leg has no torch)


def test_convergence_example_runs_and_passes_its_checks(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    block = next(b for b in blocks if "fl.FALD(" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(PAGE), "exec"), {"__name__": "docs_diagnostics"})  # its assert is the check
    out = capsys.readouterr().out
    # both tables print every column the page's comment lists (no pandas '...' elision)
    columns = ["mean", "sd", "eti90_lb", "eti90_ub", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat"]
    headers = [line.split() for line in out.splitlines() if "r_hat" in line]
    assert headers == [columns, columns]
    assert "..." not in out
    assert (tmp_path / "trace.png").exists() and (tmp_path / "rank.png").exists()
