"""Paths checked before any work: the command line's options and the library's ``store=`` /
``checkpoint=`` arguments share these checks (nothing is created by them); and files the
package reads (checkpoints, ``.prev``, ``.problem``, a store's files), checked before they are
opened (:func:`check_input_file`).

A failed output check is a ``ValueError`` whose message starts with the argument's name as the
user wrote it (``--out``, ``store``, ...).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["check_input_file", "check_output_dir", "check_output_file"]

#: file systems whose files are not data (writing there is never what an output option means)
_VIRTUAL = (Path("/proc"), Path("/sys"), Path("/dev"))


def _existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_writable_dir(option: str, given, folder: Path) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {given}: folder {str(folder)!r} is not writable")
    try:  # os.access trusts permission bits; a read-only mount or /proc says no only when tried
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ValueError(f"{option} {given}: cannot write into {str(folder)!r} ({exc.strerror})") from None


def _limit(folder: Path, name: str, default: int) -> int:
    """``os.pathconf(folder, name)``, or ``default`` where the system does not say."""
    try:
        value = os.pathconf(folder, name)
    except (AttributeError, OSError, ValueError):  # no pathconf (Windows), or no answer for this folder
        return default
    return value if value is not None and value > 0 else default


def _short(text: str, keep: int = 40) -> str:
    return text if len(text) <= keep else text[: keep - 3] + "..."


def _check_lengths(option: str, given: str, p: Path) -> None:
    """The whole path fits the system's longest path (PC_PATH_MAX) and every name in it the
    longest name (PC_NAME_MAX) of the file system of the nearest existing folder above it:
    refused here, not as ``OSError: File name too long`` when the file is written."""
    size = len(os.fsencode(str(p)))
    limit = _limit(Path(p.anchor), "PC_PATH_MAX", 4096)
    if size >= limit:  # PATH_MAX counts the terminating NUL
        raise ValueError(f"{option} {_short(given)}: the path is too long ({size} bytes; at most {limit - 1})")
    folder = Path(p.anchor)
    for part in p.parts[1:]:
        size, limit = len(os.fsencode(part)), _limit(folder, "PC_NAME_MAX", 255)
        if size > limit:
            raise ValueError(f"{option} {_short(given)}: the name {_short(part, 24)!r} is too long ({size} bytes; "
                             f"this file system allows at most {limit})")
        if (folder / part).is_dir():
            folder = folder / part


def _common(option: str, path) -> tuple[str, Path]:
    given = repr(str(path))
    if str(path).strip() == "":
        raise ValueError(f"{option} must be a path; got an empty string")
    p = Path(path).expanduser().absolute()
    _check_lengths(option, given, p)
    for root in _VIRTUAL:
        if p == root or root in p.parents:
            raise ValueError(f"{option} {given} is under {root}, which holds no ordinary files")
    return given, p


def _check_folder(option: str, given: str, folder: Path) -> None:
    """``folder`` is a writable folder, or a missing one that can be made (nothing is created)."""
    base = folder if folder.exists() else _existing_ancestor(folder)
    if not base.is_dir():
        raise ValueError(f"{option} {given}: {str(base)!r} is a file, so no folder can be made under it")
    _check_writable_dir(option, given, base)


def check_output_dir(option: str, path) -> Path:
    """``path`` can be a folder we write into: an existing writable folder, or creatable.

    Nothing is created; the folder is made by the command when it writes.
    """
    given, p = _common(option, path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{option} {given} exists and is not a folder")
    _check_folder(option, given, p)
    return p


def check_output_file(option: str, path) -> Path:
    """``path`` can be a file we write: not a folder, writable if it exists, in a folder we can make."""
    given, p = _common(option, path)
    if p.is_dir():
        raise ValueError(f"{option} {given} is a folder; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"{option} {given} exists and is not writable")
    if p.parent.exists() and not p.parent.is_dir():
        raise ValueError(f"{option} {given}: {str(p.parent)!r} is a file, not a folder")
    _check_folder(option, given, p.parent)
    return p


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_input_file(what: str, path, *, max_bytes: int | None = None, error: type[Exception] = ValueError,
                     missing: str | None = None) -> os.stat_result:
    """``path`` is a regular file of at most ``max_bytes`` bytes (``None``: no limit), checked
    with ``os.stat`` before anything opens it, so that a FIFO (which would block the open), a
    device such as ``/dev/zero`` (endless), a folder or a symbolic-link loop is refused at once.

    Returns the file's ``os.stat_result``. Raises ``error`` (``ValueError`` or a subclass such as
    :class:`~fedlangevin.runner.io.checkpoint.CheckpointError`) whose message starts with ``what``
    and names the path; ``missing``: the message for a missing file (default: "no file at").
    """
    given = repr(str(path))
    try:
        st = os.stat(path)  # follows symbolic links: a loop is ELOOP, a dangling link "missing"
    except FileNotFoundError:
        raise error(missing or f"{what}: no file at {given}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"{what} {given} is a symbolic link loop (too many levels of links), not a file") from None
        raise error(f"{what} {given} cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {given} is {_kind(st.st_mode)}, not a regular file; give the path of a file")
    if max_bytes is not None and st.st_size > max_bytes:
        from fedlangevin._validation import gib

        raise error(f"{what} {given} is {gib(st.st_size)} ({st.st_size} bytes), more than the {gib(max_bytes)} "
                    f"({max_bytes} bytes) such a file can be; it is not one, or it is damaged")
    return st
