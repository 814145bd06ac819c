"""The package's module graph: every module imports on its own, no import circle, fald/ modules stay small."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "fedlangevin"
MODULES = sorted(
    ".".join(("fedlangevin",) + p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in ROOT.rglob("*.py")
)


def _imports(module: str) -> set[str]:
    """fedlangevin modules imported anywhere in ``module`` (deferred imports inside functions
    included: they are a circle too, only a hidden one). Importing a package's __init__ is left
    out: a package that re-exports its modules is not a circle between modules."""
    path = ROOT.joinpath(*module.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out.update(n for n in names if n in MODULES and n != module and not _is_package(n))
    return out


def _is_package(module: str) -> bool:
    return ROOT.joinpath(*module.split(".")[1:]).is_dir()


def test_no_import_circle_between_modules():
    graph = {m: _imports(m) for m in MODULES if not _is_package(m)}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith("fedlangevin.fald")])
def test_every_engine_module_imports_on_its_own(module):
    importlib.import_module(module)


def test_no_fald_module_is_longer_than_about_500_lines():
    long = {p.name: n for p in (ROOT / "fald").glob("*.py") if (n := len(p.read_text().splitlines())) > 520}
    assert not long, long


def test_no_private_name_is_imported_across_fald_modules():
    bad = []
    for p in (ROOT / "fald").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedlangevin"):
                bad += [f"{p.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, bad


# The layers of fedlangevin/fald (docs/fald.md, "Architecture"): a module imports only from its own
# layer and the layers listed for it; every module of the package is in exactly one layer.
LAYERS = {
    "contracts": {"contracts"},
    "core": {"noise", "participation", "local", "steppers", "kernel", "engine", "streams", "schedules", "extensions",
             "preconditioning"},
    "warm-up and corrections": {"curvature", "adaptation", "mode", "corrections", "control_variates", "conducive", "qlsd", "drift"},
    "io and results": {"store", "checkpoint", "encoding", "records", "streaming", "trace", "settings"},
    "runner": {"sampler", "loop", "runs", "resume", "replay"},
}
MAY_IMPORT = {
    "contracts": set(),
    "core": {"contracts"},
    "warm-up and corrections": {"contracts", "core"},
    "io and results": {"contracts"},
    "runner": {"contracts", "core", "warm-up and corrections", "io and results"},
}


# The one declared exception: the checkpoint decoder's allow-list (encoding.stored_classes) names the
# classes a checkpoint may rebuild (schedules, participation rules, adapted step sizes), so it imports
# them, inside that one function; everything else of io and results stays free of the sampler.
ALLOWED_UPWARD = {"encoding": {"fedlangevin.fald.participation", "fedlangevin.fald.schedules",
                               "fedlangevin.fald.adaptation"}}


def test_every_fald_module_has_a_layer():
    modules = {p.stem for p in (ROOT / "fald").glob("*.py") if p.stem != "__init__"}
    placed = [m for layer in LAYERS.values() for m in layer]
    assert sorted(placed) == sorted(set(placed)), "a module is in two layers"
    assert modules == set(placed), {"without a layer": modules - set(placed), "gone": set(placed) - modules}


def test_fald_modules_import_only_from_their_own_and_lower_layers():
    """The kernel core imports nothing from the warm-up, the corrections, the runner or io; io and
    results import no part of the sampler; the contracts import nothing of fald."""
    layer_of = {m: layer for layer, ms in LAYERS.items() for m in ms}
    bad = []
    for module, layer in layer_of.items():
        for dep in _imports(f"fedlangevin.fald.{module}"):
            if not dep.startswith("fedlangevin.fald."):
                continue
            target = layer_of[dep.split(".")[2]]
            if target != layer and target not in MAY_IMPORT[layer] and dep not in ALLOWED_UPWARD.get(module, ()):
                bad.append(f"{module} ({layer}) imports {dep} ({target})")
    assert not bad, bad


# split by a parallel change (issue 24): these two are still longer than 500 lines on this branch;
# the list is removed when that change is merged
LONG_MODULES_ALLOWED = {"fedlangevin/problems/pyro.py", "fedlangevin/privacy/accountant.py"}


def test_no_module_in_the_package_is_longer_than_500_lines():
    """One job per module, readable in one sitting: every module of the package, subpackages included."""
    long = {}
    for p in ROOT.rglob("*.py"):
        name = p.relative_to(ROOT.parent).as_posix()
        if (n := len(p.read_text().splitlines())) > 500 and name not in LONG_MODULES_ALLOWED:
            long[name] = n
    assert not long, long
