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


def test_no_private_name_is_imported_across_fald_modules():
    bad = []
    for p in (ROOT / "fald").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedlangevin"):
                bad += [f"{p.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, bad


# The layers of fedlangevin/fald (docs/fald.md, "Architecture"): each subpackage is one layer (the
# contracts are the one top-level module); a module imports only from its own layer and the layers
# listed for it; every module of fald is in exactly one layer.
LAYERS = ("contracts", "core", "warmup", "corrections", "io", "results", "runner")
MAY_IMPORT = {
    "contracts": set(),
    "core": {"contracts"},
    "warmup": {"contracts", "core"},
    "corrections": {"contracts", "core", "warmup"},
    "results": {"contracts"},
    "io": {"contracts", "results"},
    "runner": {"contracts", "core", "warmup", "corrections", "io", "results"},
}


# The one declared exception: the checkpoint decoder's allow-list (io/encoding.stored_classes) names the
# classes a checkpoint may rebuild (schedules, participation rules, adapted step sizes), so it imports
# them, inside that one function; everything else of io stays free of the sampler.
ALLOWED_UPWARD = {"fedlangevin.runner.io.encoding": {"fedlangevin.federation.participation", "fedlangevin.federation.schedules",
                                                   "fedlangevin.warmup.adaptation"}}
FALD_MODULES = [m for m in MODULES if m.startswith("fedlangevin.fald.") and not _is_package(m)]


def _layer(module: str) -> str:
    return module.split(".")[2]


def test_every_fald_module_has_a_layer():
    assert {_layer(m) for m in FALD_MODULES} <= set(LAYERS), {_layer(m) for m in FALD_MODULES} - set(LAYERS)
    top = [m for m in FALD_MODULES if m.count(".") == 2]
    assert top == ["fedlangevin.federation.contracts"], f"fald modules outside a layer's subpackage: {top}"
    assert all(m.count(".") == 3 for m in FALD_MODULES if m not in top), "layers are one level deep"


def test_fald_modules_import_only_from_their_own_and_lower_layers():
    """The kernel core imports nothing from the warm-up, the corrections, the runner or io; io and
    results import no part of the sampler; the contracts import nothing of fald."""
    bad = []
    for module in FALD_MODULES:
        layer = _layer(module)
        for dep in _imports(module):
            if not dep.startswith("fedlangevin.fald."):
                continue
            target = _layer(dep)
            if target != layer and target not in MAY_IMPORT[layer] and dep not in ALLOWED_UPWARD.get(module, ()):
                bad.append(f"{module} ({layer}) imports {dep} ({target})")
    assert not bad, bad


def test_the_layer_rule_catches_an_upward_import(monkeypatch):
    """The rule can fail: the kernel core importing the runner is reported."""
    real = _imports
    monkeypatch.setitem(globals(), "_imports", lambda m: real(m) | ({"fedlangevin.fald.sampler"} if m == "fedlangevin.fald.kernel" else set()))
    with pytest.raises(AssertionError, match="core.kernel .core. imports fedlangevin.fald.sampler"):
        test_fald_modules_import_only_from_their_own_and_lower_layers()


def test_no_module_in_the_package_is_longer_than_500_lines():
    """One job per module, readable in one sitting: every module of the package, subpackages included."""
    long = {}
    for p in ROOT.rglob("*.py"):
        name = p.relative_to(ROOT.parent).as_posix()
        if (n := len(p.read_text().splitlines())) > 500:
            long[name] = n
    assert not long, long
