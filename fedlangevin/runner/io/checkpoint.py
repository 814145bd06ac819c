"""Checkpoint files of FA-LD runs: atomic writes, checksums, safe loading.

A checkpoint is one file:

    bytes 0-15   b"FEDLANGEVIN-CKPT"
    bytes 16-19  format version (uint32, little endian): 2
    bytes 20-27  payload length (uint64, little endian)
    bytes 28-59  SHA-256 of bytes 0-27 followed by the payload (signature, version and length
                 are covered: a changed version byte is detected like any other damage)
    bytes 60-    payload: ``torch.save`` of a dict of tensors and plain values

Format version 1 (written before) is the same except that its SHA-256 covers the payload
alone; it is still read. A version-2 file whose version byte changed to 1 (or the reverse)
fails its checksum, and any other version is refused.

and is loaded with ``torch.load(..., weights_only=True)``: no pickled code runs, only
tensors, numbers, strings, lists and dicts come back. Objects of an explicit allow-list of
fedlangevin's classes (:func:`stored_classes`: the built-in problems, schedules, participation
rules) are stored as their class name and attribute values and rebuilt from that table (the
settings records through their constructors, which check them); a file naming any other class
is refused, nothing is imported by a name read from a file. Any other object (a user's
problem or step-size function) is not stored and must be given again on resume.

Writes are atomic: the new checkpoint goes to ``<path>.tmp``, is fsynced, the current file
is kept as ``<path>.prev`` (a hard link, or a copy where links are not supported) and the
temporary file is renamed over ``<path>``. A kill at any moment leaves ``<path>`` either
the old or the new complete checkpoint, and ``<path>.prev`` the one before. A truncated or
corrupted file is detected by its length and checksum and reported with
:class:`CheckpointError`, which names the previous checkpoint when it is intact.

The problem is written once per run beside the checkpoint, as ``<path>.problem`` (same
format), since its data can be large; the checkpoint records its digest.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import struct
from pathlib import Path

import torch

from fedlangevin.runner.io.encoding import CheckpointError, Entries, NotEncodable, decode, digest, encode, stored_classes
from fedlangevin.runner.io.locks import ExclusiveLock
from fedlangevin.runner.io.records import check_fald_record
from fedlangevin.runner.io.store import fsync_dir

__all__ = ["CheckpointError", "Entries", "write_file", "read_file", "checkpoint_info", "encode", "decode", "NotEncodable",
           "digest", "stored_classes"]

MAGIC = b"FEDLANGEVIN-CKPT"
VERSION = 2
#: the format versions read: 1 (checksum of the payload), 2 (checksum of header fields and payload)
VERSIONS = (1, 2)
_HEADER = struct.Struct("<16sIQ32s")
PREV_SUFFIX = ".prev"
TMP_SUFFIX = ".tmp"
PROBLEM_SUFFIX = ".problem"


# -- the file format ------------------------------------------------------------------------
def _payload_bytes(obj: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def check_target(path: Path) -> Path:
    """``path`` may receive checkpoints: its folder is writable now (not at the first checkpoint,
    an hour into the run), and an existing file there is a fedlangevin checkpoint, never an
    unrelated file that would be overwritten. ``ValueError`` naming ``checkpoint`` otherwise."""
    from fedlangevin._paths import check_output_file

    check_output_file("checkpoint", path)
    if os.path.lexists(path) and not path.is_file():
        try:
            os.stat(path)
        except FileNotFoundError:  # a dangling link: replaced by the checkpoint, like a missing file
            pass
        except OSError as exc:  # a link loop
            raise ValueError(f"checkpoint {str(path)!r} cannot be used: {exc.strerror or exc}") from None
        else:  # a FIFO, a device, a socket
            raise ValueError(f"checkpoint {str(path)!r} exists and is not a regular file; it would be replaced: "
                             "give the path of a file")
    if path.is_file():
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
        if head != MAGIC:
            raise ValueError(f"checkpoint {str(path)!r} exists and is not a fedlangevin checkpoint; it would be "
                             "overwritten: give a new path (or delete the file)")
    return path


class CheckpointLock(ExclusiveLock):
    """An exclusive lock on ``<checkpoint>.lock`` for the run that writes ``checkpoint``.

    Two runs writing one checkpoint path would leave a checkpoint of neither; the second one
    now stops before any work with a ``ValueError`` naming the path. The lock is an
    ``fcntl.flock`` on an open file (:class:`~fedlangevin.runner.io.locks.ExclusiveLock`), so the
    operating system releases it when the holder exits in any way (``kill -9`` included): no
    stale lock blocks the resume. On systems without ``fcntl`` (Windows) runs are not locked.
    """

    def __init__(self, path: Path) -> None:
        lock = Path(f"{path}.lock")
        super().__init__(lock, f"checkpoint {str(path)!r} is in use by another run (it holds {str(lock)!r}); "
                               "wait for it to finish or give another checkpoint path")


def write_file(path: str | os.PathLike, obj: dict, keep_previous: bool = True) -> None:
    """Write ``obj`` to ``path`` atomically (temporary file, fsync, rename); see the module docstring."""
    path = Path(path)
    payload = _payload_bytes(obj)
    header = _HEADER.pack(MAGIC, VERSION, len(payload), _checksum(VERSION, len(payload), payload))
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if keep_previous and path.exists() and _intact(path):  # never keep a damaged file as the fallback
            prev = path.with_name(path.name + PREV_SUFFIX)
            prev_tmp = path.with_name(path.name + PREV_SUFFIX + TMP_SUFFIX)
            if prev_tmp.exists():
                prev_tmp.unlink()
            try:
                os.link(path, prev_tmp)
            except OSError:  # no hard links on this file system: copy
                shutil.copyfile(path, prev_tmp)
                with open(prev_tmp, "rb+") as f:
                    os.fsync(f.fileno())
            os.replace(prev_tmp, prev)
        os.replace(tmp, path)
        fsync_dir(path.parent)
        stamp = _stamp(path)
        if stamp is not None:
            _WRITTEN[_key(path)] = stamp
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OSError(
            exc.errno,
            f"could not write checkpoint {str(path)!r} ({exc.strerror or exc}); the previous checkpoint, if any, is intact",
        ) from exc


#: (size, mtime_ns) of the files this process wrote, by path: those need no re-reading
_WRITTEN: dict[str, tuple[int, int]] = {}


def _key(path: Path) -> str:
    """The key of ``path`` in :data:`_WRITTEN` (its resolved path; a link loop resolves to nothing)."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # RuntimeError: a symbolic-link loop (Python < 3.13)
        return str(path.absolute())


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _intact(path: Path) -> bool:
    """Whether ``path`` holds a complete checkpoint whose checksum matches (no decoding).

    A file this process wrote and nobody changed since (same size and modification time) is
    taken as intact without reading it again.
    """
    stamp = _stamp(path)
    if stamp is not None and _WRITTEN.get(_key(path)) == stamp:
        return True
    try:
        _payload(path)
    except CheckpointError:
        return False
    return True


def _checksum(version: int, length: int, payload) -> bytes:
    """The SHA-256 a header of format ``version`` records: over the signature, version and length
    fields and the payload (version 2), or over the payload alone (version 1, read only)."""
    h = hashlib.sha256()
    if version >= 2:
        h.update(_HEADER.pack(MAGIC, version, length, bytes(32))[:-32])
    h.update(payload)
    return h.digest()


def _size_limit() -> int | None:
    """The largest checkpoint file read: this machine's memory (a larger one could not be loaded)."""
    from fedlangevin._validation import cpu_memory_bytes

    return cpu_memory_bytes()


def _payload(path: Path) -> memoryview:
    """The checked payload of the checkpoint file ``path``: a regular file (checked before it is
    opened: a FIFO, a device or a link loop is refused, never read), no larger than this
    machine's memory, of the length its header gives, whose checksum matches."""
    from fedlangevin._paths import check_input_file

    size = check_input_file("checkpoint", path, max_bytes=_size_limit(), error=CheckpointError,
                            missing=f"no checkpoint file at {str(path)!r}").st_size
    if size < _HEADER.size:
        raise CheckpointError(
            f"checkpoint {str(path)!r} is truncated: {size} bytes, shorter than the {_HEADER.size}-byte header"
        )
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
            magic, version, length, digest = _HEADER.unpack_from(head)
            if magic != MAGIC:
                raise CheckpointError(f"{str(path)!r} is not a fedlangevin checkpoint (wrong file signature)")
            if version > VERSION:
                raise CheckpointError(f"checkpoint {str(path)!r} has format version {version}; this fedlangevin "
                                      f"reads up to {VERSION} (upgrade it, or the file is corrupted)")
            if version not in VERSIONS:
                raise CheckpointError(f"checkpoint {str(path)!r} is corrupted: format version {version} does not "
                                      f"exist (versions {', '.join(map(str, VERSIONS))} do)")
            present = size - _HEADER.size
            if present < length:
                raise CheckpointError(
                    f"checkpoint {str(path)!r} is truncated: {present} of {length} payload bytes present"
                )
            if present > length:
                raise CheckpointError(
                    f"checkpoint {str(path)!r} is corrupted: {present - length} unexpected bytes at the end"
                )
            data = f.read(length + 1)
    except OSError as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read: {exc}") from exc
    if len(data) != length:  # changed while it was read
        raise CheckpointError(f"checkpoint {str(path)!r} changed while it was read ({len(data)} of {length} bytes)")
    if _checksum(version, length, data) != digest:
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupted: its SHA-256 checksum does not match its contents")
    return memoryview(data)


def _read_raw(path: Path) -> dict:
    payload = _payload(path)
    try:
        obj = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as exc:  # the checksum matched, so this is a format problem, not damage
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be decoded: {exc}") from exc
    if not isinstance(obj, dict) or "kind" not in obj:
        raise CheckpointError(f"checkpoint {str(path)!r} does not hold a fedlangevin checkpoint record")
    return obj


def read_file(path: str | os.PathLike, fallback: bool = False, *, resume_hint: str | None = None) -> tuple[dict, Path]:
    """Load a checkpoint; returns (record, the path actually read).

    On a damaged file, raises :class:`CheckpointError` whose message says whether the
    previous checkpoint ``<path>.prev`` is intact; ``fallback=True`` reads it instead (with
    a warning). ``resume_hint``: how the reader's user continues from that previous file
    (``{prev}`` and ``{path}`` are filled in); default: ``FALD.resume``'s two ways.
    """
    import warnings

    path = Path(path)
    try:
        return _read_raw(path), path
    except CheckpointError as exc:
        _WRITTEN.pop(_key(path), None)  # found damaged: never trusted without reading again
        prev = path.with_name(path.name + PREV_SUFFIX)
        if not os.path.lexists(prev):  # (a link loop is reported, not taken for a missing file)
            raise
        try:
            record = _read_raw(prev)
        except CheckpointError as prev_exc:
            raise CheckpointError(f"{exc}; the previous checkpoint is unusable too: {prev_exc}") from exc
        where = f"round {record.get('round', '?')}"
        if not fallback:
            hint = (f"resume from it with FALD.resume({str(prev)!r}) or FALD.resume({str(path)!r}, fallback=True)"
                    if resume_hint is None else resume_hint.format(prev=repr(str(prev)), path=repr(str(path))))
            raise CheckpointError(f"{exc}. The previous checkpoint {str(prev)!r} ({where}) is intact: {hint}") from exc
        warnings.warn(f"{exc}; resuming from the previous checkpoint {str(prev)!r} ({where})", stacklevel=3)
        return record, prev


def checkpoint_info(path: str | os.PathLike) -> dict:
    """Plain facts of an FA-LD checkpoint without building a sampler: round, step, run progress,
    settings. A file that is not one (or whose entries are not valid) is a :class:`CheckpointError`."""
    from fedlangevin._validation import check_path

    record, used = read_file(check_path("path", path))
    settings = check_fald_record(record, used)
    run = record["run"]
    return {
        "round": record["round"],
        "step": record["step"],
        "settings": settings,
        "run": None if run is None else {k: run[k] for k in ("rounds", "done", "warmup", "thin", "finished")},
    }
