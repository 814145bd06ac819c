"""The README's set-up commands are the ones CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    line = next(l for l in ci.splitlines() if l.startswith("TEST_COMMAND="))
    command = line.split("=", 1)[1].strip("'")
    assert command in readme


def test_readme_has_exactly_two_setup_commands_on_its_first_screen():
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:30])
    commands = [l for l in first_screen.splitlines() if l.startswith("python3 -m venv")]
    assert len(commands) == 2
    assert "fedlangevin demo" in commands[0] and "pytest" in commands[1]


def test_the_readme_script_example_runs_and_prints_what_the_readme_shows():
    """The README's Python block runs as printed, and what it prints is the output the README
    shows below it (seeded: the same draws on every CPU; printed to 4 decimals)."""
    import contextlib
    import io
    import re

    import pytest

    pytest.importorskip("torch")
    text = (ROOT / "README.md").read_text()
    block, shown = re.search(r"```python\n(.*?)```\n\nprints\n\n```text\n(.*?)```", text, flags=re.S).groups()
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), namespace)
    assert out.getvalue() == shown
    trace = namespace["trace"]
    assert tuple(trace.samples.shape) == (300, 150, 2)
    assert trace.communication.rounds == 200


def test_no_readme_paragraph_is_longer_than_ten_lines():
    """The README is a front door: details live in docs/. Counted outside code blocks; a
    paragraph is a run of non-blank lines (a list counts as one)."""
    longest, run, fenced = 0, 0, False
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            fenced, run = not fenced, 0
            continue
        run = 0 if (fenced or not line.strip() or line.startswith("#")) else run + 1
        longest = max(longest, run)
    assert longest <= 10


def test_readme_commands_keep_the_venv_prefix():
    """Every pip / mkdocs / fedlangevin command in the README's inline code runs from the venv
    the set-up made (.venv/bin/...), as the set-up commands do."""
    import re

    text = (ROOT / "README.md").read_text()
    commands = re.findall(r"`((?:\S*/)?(?:pip|mkdocs) [^`]*)`", text)
    assert commands and all(c.startswith(".venv/bin/") for c in commands), commands
    assert all(re.search(r"(^|&& )\.venv/bin/mkdocs", c) for c in commands if "mkdocs" in c)
