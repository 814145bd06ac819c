"""The package's module graph: every module imports on its own, no import circle (package __init__s
included), the layering of the shared machinery and the samplers, modules stay small."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "fedlangevin"


def _modules(root: Path) -> dict[str, Path]:
    """{dotted name: file} of every module and package (its __init__) under ``root``."""
    out = {}
    for p in root.rglob("*.py"):
        name = ".".join((root.name,) + p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        out[name] = p
    return out


MODULES = _modules(ROOT)
PACKAGES = {m for m, p in MODULES.items() if p.name == "__init__.py"}


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (never imported at run time)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def imports_of(source: str, module: str, modules) -> set[str]:
    """The modules and packages of ``modules`` that importing ``module`` (its ``source``) runs:
    every import statement, deferred ones inside functions included (a circle through them is a
    circle too, only a hidden one), each with the package __init__s it runs first: the target's
    parent packages, except those ``module`` lies in (already initialised when it runs). A
    ``from package import name`` runs the package's __init__ (and the module ``name``, if one)."""
    out = set()
    for node in _runtime_nodes(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for target in targets:
            if target in modules:
                out.update(p for p in _ancestors(target) + [target] if p in modules and not module.startswith(p + "."))
    out.discard(module)
    return out


def graph_of(root: Path) -> dict[str, set[str]]:
    modules = _modules(root)
    return {m: imports_of(p.read_text(), m, modules) for m, p in modules.items()}


def _imports(module: str) -> set[str]:
    return GRAPH[module]


GRAPH = graph_of(ROOT)


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` ({module: modules it imports}) as a path, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_circle():
    circle = find_circle(GRAPH)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_a_circle_through_a_package_init_is_found():
    """A module that imports a package whose __init__ imports what imports the module back (deferred,
    inside a function), the shape of the circle that went through ``privacy/__init__``, is reported;
    without the __init__'s import, or with the closing import for type checkers only, there is none."""
    modules = {"p": 0, "p.trace": 0, "q": 0, "q.report": 0, "q.audit": 0, "s": 0, "s.runner": 0}
    sources = {
        "p.trace": "def f():\n    from q import report\n",
        "q": "from q.report import report\nfrom q.audit import audit\n",
        "q.audit": "def audit():\n    from s.runner import Runner\n",
        "s.runner": "from p.trace import Trace\n",
    }

    def circle(**changed):
        graph = {m: imports_of({**sources, **changed}.get(m, ""), m, modules) for m in modules}
        return find_circle(graph)

    assert circle() == ["p.trace", "q", "q.audit", "s.runner", "p.trace"]
    # importing q.report alone still runs q's __init__ first (its parent package): the same circle
    assert circle(**{"p.trace": "def f():\n    from q.report import report\n"}) == [
        "p.trace", "q", "q.audit", "s.runner", "p.trace"]
    assert circle(q="from q.report import report\n") is None
    assert circle(**{"s.runner": "import typing\nif typing.TYPE_CHECKING:\n    from p.trace import Trace\n"}) is None


def test_the_hidden_circle_of_the_old_layout_is_found():
    """The circle the layout used to hide, trace -> privacy/__init__ -> privacy.canary -> (deferred)
    the FA-LD sampler -> ... -> trace, with the old modules' imports written out."""
    modules = {m: 0 for m in ("f", "f.fald", "f.fald.runner", "f.fald.runner.sampler", "f.fald.results",
                              "f.fald.results.trace", "f.privacy", "f.privacy.canary", "f.privacy.report")}
    sources = {
        "f.fald.results.trace": "def privacy(self):\n    from f.privacy import trace_privacy\n",
        "f.privacy": "from f.privacy.report import trace_privacy\nfrom f.privacy.canary import audit\n",
        "f.privacy.canary": "def _world():\n    from f.fald.runner.sampler import FALD\n",
        "f.fald.runner.sampler": "from f.fald.results.trace import Trace\n",
    }
    graph = {m: imports_of(sources.get(m, ""), m, modules) for m in modules}
    circle = find_circle(graph)
    assert circle is not None and "f.privacy" in circle and "f.privacy.canary" in circle, circle


# -- layering: the shared machinery, the samplers, the transports and the audit --------------------
#: one package per sampler family; they never import each other
SAMPLERS = ("fedlangevin.fald", "fedlangevin.fahmc")
#: what every sampler shares, what carries rounds to other processes or machines, and the privacy
#: accounting and audit: none of them imports a sampler package (the sampler is handed to them: a
#: kernel, a node kernel, a sampler factory)
SHARED = ("fedlangevin.federation", "fedlangevin.warmup", "fedlangevin.corrections", "fedlangevin.runner")
TRANSPORTS = ("fedlangevin.flower", "fedlangevin.distributed")
NO_SAMPLER = SHARED + TRANSPORTS + ("fedlangevin.privacy",)


def _under(module: str, packages) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, deps in sorted(graph.items()):
        own, home = _under(module, SAMPLERS), _under(module, NO_SAMPLER)
        for dep in sorted(deps):
            other = _under(dep, SAMPLERS)
            if other is None:
                continue
            if own is not None and other != own:
                bad.append(f"{module} (sampler {own}) imports {dep} (sampler {other})")
            if home is not None:
                bad.append(f"{module} ({home}) imports {dep} (sampler {other})")
    return bad


def test_every_layered_package_exists():
    for package in SAMPLERS + NO_SAMPLER:
        assert package in PACKAGES, package


def test_no_sampler_imports_another_and_the_shared_packages_transports_and_privacy_import_none():
    bad = layering_violations(GRAPH)
    assert not bad, bad


def test_the_shared_packages_import_no_transport():
    """The transports sit above the machinery they carry: nothing of the shared packages imports
    fedlangevin.flower or fedlangevin.distributed (a transport is handed to the kernel: ``transport=``)."""
    bad = [f"{m} imports {d}" for m, deps in sorted(GRAPH.items()) if _under(m, SHARED)
           for d in sorted(deps) if _under(d, TRANSPORTS)]
    assert not bad, bad


@pytest.mark.parametrize("module, dep, match", [
    ("fedlangevin.fahmc.kernel", "fedlangevin.fald.kernel", r"fahmc.kernel \(sampler fedlangevin.fahmc\) imports "
                                                            r"fedlangevin.fald.kernel \(sampler fedlangevin.fald\)"),
    ("fedlangevin.fald.sampler", "fedlangevin.fahmc", "imports fedlangevin.fahmc "),
    ("fedlangevin.federation.participation", "fedlangevin.fald.engine", r"participation \(fedlangevin.federation\)"),
    ("fedlangevin.warmup.companions", "fedlangevin.fald", r"companions \(fedlangevin.warmup\) imports fedlangevin.fald "),
    ("fedlangevin.runner.results.trace", "fedlangevin.fald.sampler", r"\(fedlangevin.runner\) imports"),
    ("fedlangevin.flower.client", "fedlangevin.fahmc.client", r"\(fedlangevin.flower\) imports fedlangevin.fahmc"),
    ("fedlangevin.distributed.transport", "fedlangevin.fald.kernel", r"\(fedlangevin.distributed\)"),
    ("fedlangevin.privacy.canary", "fedlangevin.fald.sampler", r"canary \(fedlangevin.privacy\) imports"),
])
def test_the_layering_rule_catches_a_forbidden_import(module, dep, match):
    """The rule can fail: the package's own graph with one forbidden import added is reported."""
    graph = {**GRAPH, module: GRAPH[module] | {dep}}
    bad = layering_violations(graph)
    assert len(bad) == 1 and re.search(match, bad[0]), bad


# The layers of the shared machinery (docs/fald.md, "Architecture"): a module imports only from its
# own layer and the layers listed for it (longest package prefix decides a module's layer).
MAY_IMPORT = {
    "fedlangevin.federation": set(),
    "fedlangevin.warmup": {"fedlangevin.federation"},
    "fedlangevin.corrections": {"fedlangevin.federation", "fedlangevin.warmup"},
    "fedlangevin.runner.results": {"fedlangevin.federation"},
    "fedlangevin.runner.io": {"fedlangevin.runner.results"},
    "fedlangevin.runner": {"fedlangevin.federation", "fedlangevin.warmup", "fedlangevin.corrections",
                           "fedlangevin.runner.io", "fedlangevin.runner.results"},
}
LAYERS = sorted(MAY_IMPORT, key=len, reverse=True)
# The one declared exception: the checkpoint decoder's allow-list (runner/io/encoding.stored_classes)
# names the classes a checkpoint may rebuild (schedules, adapted step sizes, participation rules), so
# it imports them (and the package they lie in), inside that one function; everything else of io stays free of the sampler.
ALLOWED_UPWARD = {"fedlangevin.runner.io.encoding": {"fedlangevin.federation", "fedlangevin.federation.participation",
                                                      "fedlangevin.federation.schedules"}}


def _layer(module: str) -> str | None:
    return _under(module, LAYERS)


def test_the_shared_layers_import_only_from_their_own_and_lower_layers():
    """The federation layer imports nothing of the warm-up, the corrections or the runner; results and
    io import no part of the round machinery (but for the allow-list); the warm-up knows no runner."""
    bad = []
    for module, deps in sorted(GRAPH.items()):
        layer = _layer(module)
        if layer is None:
            continue
        for dep in sorted(deps):
            target = _layer(dep)
            if (target is not None and target != layer and target not in MAY_IMPORT[layer]
                    and dep not in ALLOWED_UPWARD.get(module, ())):
                bad.append(f"{module} ({layer}) imports {dep} ({target})")
    assert not bad, bad


def test_the_layer_rule_catches_an_upward_import(monkeypatch):
    """The rule can fail: the federation layer importing the runner is reported."""
    monkeypatch.setitem(GRAPH, "fedlangevin.federation.participation",
                        GRAPH["fedlangevin.federation.participation"] | {"fedlangevin.runner.base"})
    with pytest.raises(AssertionError, match=r"federation.participation \(fedlangevin.federation\) imports "
                                             r"fedlangevin.runner.base"):
        test_the_shared_layers_import_only_from_their_own_and_lower_layers()


LAYERED = [m for m in MODULES if _under(m, SAMPLERS + SHARED)]


@pytest.mark.parametrize("module", LAYERED)
def test_every_engine_module_imports_on_its_own(module):
    importlib.import_module(module)


def test_no_private_name_is_imported_across_the_engine_modules():
    bad = []
    for module in LAYERED:
        for node in ast.walk(ast.parse(MODULES[module].read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedlangevin"):
                bad += [f"{module}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, bad


def test_no_module_in_the_package_is_longer_than_500_lines():
    """One job per module, readable in one sitting: every module of the package, subpackages included."""
    long = {}
    for p in ROOT.rglob("*.py"):
        name = p.relative_to(ROOT.parent).as_posix()
        if (n := len(p.read_text().splitlines())) > 500:
            long[name] = n
    assert not long, long


#: the experiments sit above the samplers and the shared machinery (they run them); the one module of
#: those that reads them is FA-HMC's exact moments, built on FA-LD's (fedlangevin.experiments.exact)
EXPERIMENTS = "fedlangevin.experiments"
READS_EXPERIMENTS = {"fedlangevin.fahmc.exact"}


def experiments_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} imports {d}" for m, deps in sorted(graph.items())
            if _under(m, SAMPLERS + SHARED) and m not in READS_EXPERIMENTS for d in sorted(deps) if _under(d, (EXPERIMENTS,))]


def test_no_sampler_or_shared_module_imports_the_experiments():
    """A sampler's module (e.g. its run-end setting check) reads the participation rules' own closed forms,
    not fedlangevin.experiments; the rule can fail (one such import added is reported)."""
    assert experiments_imports(GRAPH) == []
    module = "fedlangevin.fald.setting_noise"
    graph = {**GRAPH, module: GRAPH[module] | {"fedlangevin.experiments.exact"}}
    assert experiments_imports(graph) == [f"{module} imports fedlangevin.experiments.exact"]
