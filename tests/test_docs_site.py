"""The documentation site (mkdocs.yml): every page is in the navigation, every package has an API
page, and the strict build renders every name of every package's ``__all__``.

The build test needs the ``docs`` extra (mkdocs, Material, mkdocstrings); without it that one
test is skipped, and ``.ci/run`` runs it in its docs leg.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import types
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"

# Every package with a public API; each has a page docs/api/<page>.md rendering it.
PACKAGES = {
    "fedlangevin": "fedlangevin",
    "fedlangevin.fald": "fald",
    "fedlangevin.fahmc": "fahmc",
    "fedlangevin.federation": "federation",
    "fedlangevin.warmup": "warmup",
    "fedlangevin.corrections": "corrections",
    "fedlangevin.runner": "runner",
    "fedlangevin.problems": "problems",
    "fedlangevin.data": "data",
    "fedlangevin.privacy": "privacy",
    "fedlangevin.compression": "compression",
    "fedlangevin.experiments": "experiments",
    "fedlangevin.baselines": "baselines",
    "fedlangevin.flower": "flower",
    "fedlangevin.distributed": "distributed",
    "diagnostics": "diagnostics",
}
#: subpackages that are not a public API (the command-line implementation)
NOT_API = {"fedlangevin.commands"}


def test_every_subpackage_is_in_the_api_reference():
    found = {f"fedlangevin.{p.parent.name}" for p in (ROOT / "fedlangevin").glob("*/__init__.py")}
    assert found - NOT_API - set(PACKAGES) == set(), "add a docs/api page and a PACKAGES entry"


def _nav_pages() -> set[str]:
    """The .md paths named in mkdocs.yml's nav (a plain text scan: no YAML parser needed)."""
    nav = MKDOCS_YML.read_text().split("\nnav:", 1)[1]
    return set(re.findall(r":\s*([\w./-]+\.md)\s*$", nav, flags=re.M))


def test_every_docs_page_is_in_the_navigation():
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    nav = _nav_pages()
    assert pages - nav == set(), "pages missing from mkdocs.yml nav"
    assert nav - pages == set(), "nav entries without a page"


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_package_has_an_api_page(package):
    page = DOCS / "api" / f"{PACKAGES[package]}.md"
    assert page.is_file(), page
    assert re.search(rf"^::: {re.escape(package)}\s*$", page.read_text(), flags=re.M), (
        f"{page} must render ::: {package}"
    )


def _inventory(path: Path) -> set[str]:
    """Object names in a Sphinx v2 inventory (the objects.inv mkdocstrings writes)."""
    raw = path.read_bytes()
    header_end = 0
    for _ in range(4):  # four '#' header lines, then the zlib body
        header_end = raw.index(b"\n", header_end) + 1
    body = zlib.decompress(raw[header_end:]).decode()
    return {line.split(" ", 1)[0] for line in body.splitlines() if line.strip()}


def _public_modules() -> dict[str, object]:
    """The packages above and every module any of them exports in ``__all__`` (such as
    ``fedlangevin.compression.wireless``), by dotted name."""
    modules = {name: importlib.import_module(name) for name in PACKAGES}
    queue = list(modules.values())
    while queue:
        module = queue.pop()
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType) and obj.__name__ not in modules:
                modules[obj.__name__] = obj
                queue.append(obj)
    return modules


def _undocumented(inventory: set[str]) -> list[str]:
    """Names of some public module's ``__all__`` that the inventory does not hold, under that
    module or, for a re-export, under another public module exporting the very same object."""
    modules = _public_modules()
    missing = []
    for package, module in modules.items():
        for name in getattr(module, "__all__", ()):
            if f"{package}.{name}" in inventory:
                continue
            obj = getattr(module, name)
            homes = [
                other for other, mod in modules.items()
                if f"{other}.{name}" in inventory and getattr(mod, name, None) is obj
            ]
            if not homes:
                missing.append(f"{package}.{name}")
    return missing


def test_strict_build_documents_every_public_name(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    inventory = _inventory(site / "objects.inv")
    assert _undocumented(inventory) == []
