"""Checks every command runs before its work: output paths and optional extras.

A failed check raises :class:`UsageError` (a ``ValueError``) whose message names the option
the user typed; :func:`fedlangevin.cli.main` prints it as one line and exits with status 2.
"""

from __future__ import annotations

import importlib.util
import os

from fedlangevin import _paths

#: top-level module -> (distribution to install, extra of fedlangevin that brings it)
EXTRAS: dict[str, tuple[str, str]] = {
    "dp_accounting": ("dp-accounting", "privacy"),
    "arviz": ("ArviZ", "arviz"),
    "pyro": ("pyro-ppl", "pyro"),
    "sklearn": ("scikit-learn", "data"),
    "mlxtend": ("mlxtend", "data"),
}

class UsageError(ValueError):
    """Invalid command-line input, found before any work started."""


def check_output_dir(option: str, path):
    """:func:`fedlangevin._paths.check_output_dir` (shared with the library's ``store=``) as a UsageError."""
    try:
        return _paths.check_output_dir(option, path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_output_file(option: str, path):
    """:func:`fedlangevin._paths.check_output_file` (shared with the library's ``checkpoint=``) as a UsageError."""
    try:
        return _paths.check_output_file(option, path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

def check_threads(option: str, value) -> int:
    """A torch CPU thread count in [1, os.cpu_count()]: more threads than CPUs only slow a run
    down, and torch.set_num_threads(100000) ends in a MemoryError or a crash."""
    from fedlangevin._validation import check_int

    try:
        return check_int(option, value, 1, os.cpu_count() or 1)
    except ValueError as exc:
        raise UsageError(f"{exc} (at most this machine's CPU count)") from None


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


#: bundled data sets -> module that provides them (see fedlangevin.data.datasets)
DATASET_MODULES = {"digits": "sklearn", "mnist5k": "mlxtend"}


def require_datasets(command: str, datasets) -> None:
    """UsageError naming the ``data`` extra when a bundled data set's package is missing, or
    saying how to install a full data set (``mnist``, ``fashion-mnist``) that is absent."""
    from fedlangevin.data.installed import INSTALLED, DatasetNotInstalled, check_installed

    for name in datasets:
        module = DATASET_MODULES.get(str(name).lower())
        if module is not None:
            require(command, module, purpose=f"(data set {name!r})")
        if name in INSTALLED:
            try:
                check_installed(name)
            except DatasetNotInstalled as exc:
                raise UsageError(f"{command} (data set {name!r}): {exc}") from None
