"""docs/privacy.md: its examples run and print what the page says; the package docstring too."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import fedlangevin.privacy
from tests.pages import run_block

PAGE = Path(__file__).resolve().parents[2] / "docs" / "privacy.md"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def _blocks(text: str):
    """(language, body) of every fenced block, in order."""
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


def _run(code: str) -> list[str]:
    return run_block(code, PAGE, name="__docs__").splitlines()


def _close(shown: str, got: float) -> bool:
    """Equal to the digits shown (a trailing 'x' factor or rounding to the shown precision)."""
    value = float(shown)
    digits = len(shown.split("e")[0].replace("-", "").replace(".", "").lstrip("0")) or 1
    return got == pytest.approx(value, rel=0.6 * 10 ** (1 - digits))


def test_first_example_prints_the_commented_values():
    blocks = [body for lang, body in _blocks(PAGE.read_text()) if lang == "python" and "paper_bound(**setting" in body]
    code = blocks[0]
    printed = _run(code)
    expected = [line.split("#", 1)[1] for line in code.splitlines() if line.startswith("print(") and "#" in line]
    assert len(printed) == len(expected) == 5
    for got_line, comment in zip(printed, expected):
        if "True" in comment:
            assert got_line.split() == comment.split()
            continue
        shown = _NUMBER.findall(comment.split(":")[0].replace(" · ", "e"))
        got = [float(x) for x in _NUMBER.findall(got_line)]
        for s, g in zip(shown, got):
            assert _close(s, g), (comment, got_line)


def test_trace_example_prints_the_shown_summary():
    blocks = _blocks(PAGE.read_text())
    i = next(k for k, (lang, body) in enumerate(blocks)
             if lang == "python" and "trace.privacy" in body and "load_digits" not in body)
    printed = _run(blocks[i][1])
    assert printed == blocks[i + 1][1].strip().splitlines()


def test_package_docstring_example():
    result = doctest.testmod(fedlangevin.privacy, verbose=False)
    assert result.attempted >= 3 and result.failed == 0


def test_bounded_work_example_prints_what_the_page_says():
    blocks = [body for lang, body in _blocks(PAGE.read_text()) if lang == "python" and "discretization=1e-9" in body]
    assert len(blocks) == 1
    printed = _run(blocks[0])
    assert printed[0] == "True pld"
    assert printed[1].startswith("discretization=1e-09 needs about 7.81e+07 grid points")


def test_clipping_example_prints_what_its_comments_say():
    blocks = [body for lang, body in _blocks(PAGE.read_text()) if lang == "python" and "private_grad" in body]
    assert len(blocks) == 1
    printed = _run(blocks[0])
    expected = [line.split("#", 1)[1].strip() for line in blocks[0].splitlines()
                if line.startswith("print(") and "#" in line]
    assert printed == expected


def test_private_run_example_prints_what_its_comments_say():
    blocks = [body for lang, body in _blocks(PAGE.read_text()) if lang == "python" and "RecordLevel(clip=1.0))" in body]
    assert len(blocks) == 1
    assert _run(blocks[0]) == ["2.0 RecordLevel(clip=1.0)", "True"]


def test_client_level_example_prints_what_its_comments_say():
    blocks = [body for lang, body in _blocks(PAGE.read_text()) if lang == "python" and "ClientLevel(clip=0.5)" in body]
    assert len(blocks) == 1
    lines = blocks[0].splitlines()
    expected = [line.split("#", 1)[1].strip() for line in lines if line.startswith("print(") and "#" in line]
    assert lines[-1].startswith("# adjacency: ")  # the summary's second line, shown under the code
    assert _run(blocks[0]) == expected + [lines[-1][2:]]


def test_end_to_end_private_run_prints_what_its_comments_say():
    """The page's opening run: digits, record-level clip 0.1, the default private warm-up. The
    accuracy and epsilon are those of this seed (the run is deterministic on the CPU); the summary's
    adjacency line is shown under the code."""
    blocks = [body for lang, body in _blocks(PAGE.read_text()) if lang == "python" and "load_digits" in body]
    assert len(blocks) == 1
    lines = blocks[0].splitlines()
    printed = _run(blocks[0])
    accuracy, (epsilon, sensitivity) = float(printed[0]), printed[1].split()
    assert accuracy == float(lines[[i for i, l in enumerate(lines) if "test accuracy" in l][0]].split(":")[-1])
    shown = [l for l in lines if l.startswith("print(round(report.epsilon")][0].split("#")[1].split()
    assert [epsilon, sensitivity] == shown
    assert printed[2] == lines[-1][2:]


def test_audit_example_prints_what_its_comments_say():
    blocks = [body for lang, body in _blocks(PAGE.read_text()) if lang == "python" and "privacy.audit(" in body]
    assert len(blocks) == 1
    lines = blocks[0].splitlines()
    expected = [line.split("#", 1)[1].strip() for line in lines if line.startswith("print(") and "#" in line]
    assert _run(blocks[0]) == expected + [lines[-1][2:]]


def test_budget_example_prints_what_its_comments_say():
    """The budgeted run of "A budget in, a private run out": epsilon <= the budget for everything released."""
    blocks = [body for lang, body in _blocks(PAGE.read_text()) if lang == "python" and "RecordLevel(epsilon=2.0" in body]
    assert len(blocks) == 1
    expected = [line.split("#", 1)[1].split(":")[0].strip() for line in blocks[0].splitlines()
                if line.startswith("print(") and "#" in line]
    with pytest.warns(UserWarning, match="the budget, not stability, sets the step"):
        printed = _run(blocks[0])
    assert printed == expected
