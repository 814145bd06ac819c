"""docs/comparison.md: its Python examples run and print what the page says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.pages import python_blocks, run_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "comparison.md"

pytest.importorskip("sklearn")


def _run(code: str) -> list[str]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_block(code, PAGE, name="__docs__").splitlines()
    finally:
        torch.set_num_threads(threads)


def test_python_api_example():
    lines = _run(python_blocks(PAGE)[0])
    assert any("FA-LD (BMA), exact uploads" in line for line in lines)
    bits, nll = (float(v) for v in lines[-1].split())
    # LFL: 10 rounds x (R_Q(650, 2) down + 10 R_Q(650, 2) up)
    assert bits == pytest.approx(10 * 11 * (64 + 650 * (1 + 1.584962500721156)))
    assert 0 < nll < 2.31  # better than the uniform predictive, log 10


def test_quantized_upload_example_prints_the_bits_stated():
    lines = _run(python_blocks(PAGE)[1])
    shown = re.search(r"R_Q\(650, 2\) = ([\d.]+)", python_blocks(PAGE)[1]).group(1)
    assert float(lines[-1]) == pytest.approx(float(shown), abs=0.05)
