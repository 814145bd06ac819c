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
