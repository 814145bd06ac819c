"""The model examples (examples/blr_pyro.py, robust_pyro.py, mlp_custom.py) run at their reduced
settings (--quick) and print their ArviZ summary and calibration / coverage check (the
full-settings output is shown in docs/models.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("pyro")
pytest.importorskip("arviz")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors (tests/conftest.py)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bring_your_own_model_examples_exist():
    assert {"blr_pyro", "mlp_custom", "robust_pyro"} <= {p.stem for p in EXAMPLES.glob("*.py")}


def test_blr_pyro(capsys):
    assert _load("blr_pyro").main(["--quick"]) == 0
    out = capsys.readouterr().out
    table = out.split("ArviZ summary")[1].split("\n\n")[0].splitlines()[2:]
    rows = {line.split()[0] for line in table}
    assert rows == {"beta[0]", "beta[1]", "beta[2]", "beta[3]", "sigma", "sigma2"}  # the model's sites, not theta[i]
    assert "coverage of the 90% posterior predictive interval" in out


def test_robust_pyro(capsys):
    assert _load("robust_pyro").main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "ArviZ summary, Student-t model" in out and "\nnu " in out
    assert "coverage of central posterior predictive intervals" in out
    assert "closer to nominal at" in out


def test_mlp_custom(capsys, tmp_path):
    png = tmp_path / "mlp.png"
    assert _load("mlp_custom").main(["--quick", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "ArviZ summary of the network's output" in out and "f[+0.6]" in out
    assert "coverage of central predictive intervals" in out
    assert png.stat().st_size > 10_000
