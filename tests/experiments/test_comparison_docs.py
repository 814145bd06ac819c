"""docs/comparison.md: its Python examples run and print what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "comparison.md"

pytest.importorskip("sklearn")


def _python_blocks() -> list[str]:
    return [body for lang, body in re.findall(r"```(\w*)\n(.*?)```", PAGE.read_text(), flags=re.S) if lang == "python"]


def _run(code: str) -> list[str]:
    out = io.StringIO()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(PAGE), "exec"), {"__name__": "__docs__"})
    finally:
        torch.set_num_threads(threads)
    return out.getvalue().splitlines()


def test_python_api_example():
    lines = _run(_python_blocks()[0])
    assert any("FA-LD (BMA), exact uploads" in line for line in lines)
    bits, nll = (float(v) for v in lines[-1].split())
    # LFL: 10 rounds x (R_Q(650, 2) down + 10 R_Q(650, 2) up)
    assert bits == pytest.approx(10 * 11 * (64 + 650 * (1 + 1.584962500721156)))
    assert 0 < nll < 2.31  # better than the uniform predictive, log 10


def test_quantized_upload_example_prints_the_bits_stated():
    lines = _run(_python_blocks()[1])
    shown = re.search(r"R_Q\(650, 2\) = ([\d.]+)", _python_blocks()[1]).group(1)
    assert float(lines[-1]) == pytest.approx(float(shown), abs=0.05)
