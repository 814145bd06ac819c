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


def test_the_readme_script_example_runs_and_says_what_its_comments_say():
    """The README's Python block runs as printed; its shape comment is checked."""
    import re

    import pytest

    pytest.importorskip("torch")
    pytest.importorskip("dp_accounting")
    block = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    trace = namespace["trace"]
    assert tuple(trace.samples.shape) == (300, 150, 2)
    assert trace.communication.rounds == 200
