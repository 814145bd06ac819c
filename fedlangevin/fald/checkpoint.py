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

import dataclasses
import hashlib
import io
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlangevin.fald.store import fsync_dir

__all__ = ["CheckpointError", "write_file", "read_file", "checkpoint_info", "encode", "decode", "NotEncodable", "digest"]

MAGIC = b"FEDLANGEVIN-CKPT"
VERSION = 2
#: the format versions read: 1 (checksum of the payload), 2 (checksum of header fields and payload)
VERSIONS = (1, 2)
_HEADER = struct.Struct("<16sIQ32s")
PREV_SUFFIX = ".prev"
TMP_SUFFIX = ".tmp"
PROBLEM_SUFFIX = ".problem"


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupted, or from an incompatible version."""


class NotEncodable(TypeError):
    """An object that a checkpoint cannot store as plain values (e.g. a user's function)."""


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


class CheckpointLock:
    """An exclusive lock on ``<checkpoint>.lock`` for the run that writes ``checkpoint``.

    Two runs writing one checkpoint path would leave a checkpoint of neither; the second one
    now stops before any work with a ``ValueError`` naming the path. The lock is an
    ``fcntl.flock`` on an open file, so the operating system releases it when the holder
    exits in any way (``kill -9`` included): no stale lock blocks the resume. On systems
    without ``fcntl`` (Windows) runs are not locked.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(f"{path}.lock")
        self._file = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX
            return
        f = open(self.path, "a+b")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise ValueError(f"checkpoint {str(path)!r} is in use by another run (it holds {str(self.path)!r}); "
                             "wait for it to finish or give another checkpoint path") from None
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor releases the flock
            self._file = None


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


def read_file(path: str | os.PathLike, fallback: bool = False) -> tuple[dict, Path]:
    """Load a checkpoint; returns (record, the path actually read).

    On a damaged file, raises :class:`CheckpointError` whose message says whether the
    previous checkpoint ``<path>.prev`` is intact; ``fallback=True`` reads it instead (with
    a warning).
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
            raise CheckpointError(
                f"{exc}. The previous checkpoint {str(prev)!r} ({where}) is intact: resume from it with "
                f"FALD.resume({str(prev)!r}) or FALD.resume({str(path)!r}, fallback=True)"
            ) from exc
        warnings.warn(f"{exc}; resuming from the previous checkpoint {str(prev)!r} ({where})", stacklevel=3)
        return record, prev


def checkpoint_info(path: str | os.PathLike) -> dict:
    """Plain facts of an FA-LD checkpoint without building a sampler: round, step, run progress,
    settings. A file that is not one (or whose entries are not valid) is a :class:`CheckpointError`."""
    from fedlangevin._validation import check_path
    from fedlangevin.fald.resume import load_record

    record, _, settings = load_record(Path(check_path("path", path)), fallback=False)
    run = record["run"]
    return {
        "round": record["round"],
        "step": record["step"],
        "settings": settings,
        "run": None if run is None else {k: run[k] for k in ("rounds", "done", "warmup", "thin", "finished")},
    }


# -- checks of a record's contents ----------------------------------------------------------
class Entries:
    """Checks of a decoded checkpoint record's entries, for the readers of the two runners.

    A file with a valid checksum may still hold the wrong things (written by another program,
    or by hand): every check raises :class:`CheckpointError` naming the file and the entry
    (``round``, ``run['done']``, ...) and what it must be, instead of a ``KeyError`` or a
    ``TypeError`` later. The scalar checks are the package's (:func:`fedlangevin._validation.check_int`, ...).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def fail(self, what: str):
        raise CheckpointError(f"checkpoint {str(self.path)!r} is not a valid record: {what}")

    def _checked(self, check, name: str, value: Any, *args, **kwargs) -> Any:
        try:
            return check(name, value, *args, **kwargs)
        except ValueError as exc:
            self.fail(str(exc))

    def dict(self, name: str, value: Any, keys: tuple = ()) -> dict:
        """``value`` is a dict holding ``keys``."""
        if not isinstance(value, dict):
            self.fail(f"{name} must be a dictionary; got {type(value).__name__}")
        missing = [k for k in keys if k not in value]
        if missing:
            self.fail(f"{name} lacks the entries {', '.join(map(repr, missing))}")
        return value

    def int(self, name: str, value: Any, low: int | None = 0, high: int | None = None) -> int:
        from fedlangevin._validation import check_int

        if not isinstance(value, int):  # a stored integer is a Python int: no floats, strings or bools
            self.fail(f"{name} must be an integer; got {type(value).__name__} {value!r:.60}")
        return self._checked(check_int, name, value, low, high)

    def real(self, name: str, value: Any, **interval) -> float:
        from fedlangevin._validation import check_real

        if not isinstance(value, (int, float)):
            self.fail(f"{name} must be a real number; got {type(value).__name__} {value!r:.60}")
        return self._checked(check_real, name, value, **interval)

    def bool(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            self.fail(f"{name} must be True or False; got {type(value).__name__} {value!r:.60}")
        return value

    def str(self, name: str, value: Any, choices: tuple | None = None) -> str:
        if not isinstance(value, str):
            self.fail(f"{name} must be a string; got {type(value).__name__} {value!r:.60}")
        if choices is not None and value not in choices:
            self.fail(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r:.60}")
        return value

    def list(self, name: str, value: Any) -> list:
        if not isinstance(value, list):
            self.fail(f"{name} must be a list; got {type(value).__name__}")
        return value

    def tensor(self, name: str, value: Any, ndim: int | None = None, kind: str | None = None) -> torch.Tensor:
        """A tensor of ``ndim`` dimensions; ``kind``: "float" (floating point), "int" (integers) or "uint8"."""
        if not isinstance(value, torch.Tensor):
            self.fail(f"{name} must be a tensor; got {type(value).__name__}")
        if ndim is not None and value.dim() != ndim:
            self.fail(f"{name} must be a {ndim}-d tensor; got shape {tuple(value.shape)}")
        ok = {None: True, "float": value.is_floating_point(), "uint8": value.dtype == torch.uint8,
              "int": not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool}[kind]
        if not ok:
            self.fail(f"{name} must be a tensor of {kind} values; got {value.dtype}")
        return value


# -- plain-value encoding ---------------------------------------------------------------------
_KIND = "__kind__"


def stored_classes() -> dict[str, type]:
    """The classes a checkpoint stores as class name + attribute values, by the name it records.

    An explicit allow-list: decoding rebuilds an object only of these classes (looked up in this
    table, never imported by a name the file gives); any other object is not stored (it must
    be given again on resume) and a checkpoint naming another class is refused.
    """
    from fedlangevin.fald.adaptation import AdaptedSteps
    from fedlangevin.fald.participation import Full, SchemeI, SchemeII
    from fedlangevin.fald.schedules import Constant, PaperDecay, Polynomial, Sequence
    from fedlangevin.problems.base import ClientSubset
    from fedlangevin.problems.gaussian import CurvatureSimulation, GaussianSimulation, QuadraticProblem
    from fedlangevin.problems.logistic import LogisticRegression

    classes = (Constant, PaperDecay, Polynomial, Sequence, AdaptedSteps, Full, SchemeI, SchemeII, QuadraticProblem,
               GaussianSimulation, CurvatureSimulation, LogisticRegression, ClientSubset)
    return {cls.__qualname__: cls for cls in classes}


#: object entries of checkpoints written before the allow-list named their class by module and
#: qualified name: each (module, qualname) written then -> the name it has in stored_classes()
_ALIASES = {
    ("fedlangevin.fald.schedules", "Constant"): "Constant",
    ("fedlangevin.fald.schedules", "PaperDecay"): "PaperDecay",
    ("fedlangevin.fald.schedules", "Polynomial"): "Polynomial",
    ("fedlangevin.fald.schedules", "Sequence"): "Sequence",
    ("fedlangevin.fald.adaptation", "AdaptedSteps"): "AdaptedSteps",
    ("fedlangevin.fald.participation", "Full"): "Full",
    ("fedlangevin.fald.participation", "SchemeI"): "SchemeI",
    ("fedlangevin.fald.participation", "SchemeII"): "SchemeII",
    ("fedlangevin.problems.gaussian", "QuadraticProblem"): "QuadraticProblem",
    ("fedlangevin.problems.gaussian", "GaussianSimulation"): "GaussianSimulation",
    ("fedlangevin.problems.gaussian", "CurvatureSimulation"): "CurvatureSimulation",
    ("fedlangevin.problems.logistic", "LogisticRegression"): "LogisticRegression",
    ("fedlangevin.problems.base", "ClientSubset"): "ClientSubset",
}


def _plain_tensor(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    whole = t.untyped_storage().nbytes() == t.numel() * t.element_size()
    return t if (t.is_contiguous() and t.storage_offset() == 0 and whole) else t.clone()


def encode(obj: Any, where: str = "value") -> Any:
    """Plain values (tensors, numbers, strings, lists, dicts) for ``obj``, or :class:`NotEncodable`."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        return _plain_tensor(obj)
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise NotEncodable(f"{where}: numpy arrays of objects cannot be stored")
        return {_KIND: "ndarray", "data": torch.from_numpy(np.ascontiguousarray(obj).copy())}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, torch.dtype):
        return {_KIND: "dtype", "name": str(obj).replace("torch.", "")}
    if isinstance(obj, torch.device):
        return {_KIND: "device", "name": str(obj)}
    if isinstance(obj, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, tuple):
        return {_KIND: "tuple", "items": [encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, dict):
        return {_KIND: "dict", "items": [[encode(k, f"{where} key"), encode(v, f"{where}[{k!r}]")] for k, v in obj.items()]}
    cls = type(obj)
    name = cls.__qualname__
    if stored_classes().get(name) is cls and hasattr(obj, "__dict__"):
        state = {k: encode(v, f"{where}.{k}") for k, v in vars(obj).items()}
        return {_KIND: "object", "class": name, "state": state}
    raise NotEncodable(f"{where}: an object of type {cls.__module__}.{cls.__qualname__} cannot be stored as plain values")


def decode(obj: Any) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    kind = obj.get(_KIND)
    if kind == "ndarray":
        return obj["data"].numpy()
    if kind == "dtype":
        dtype = getattr(torch, obj["name"], None)
        if not isinstance(dtype, torch.dtype):
            raise CheckpointError(f"checkpoint names an unknown torch dtype {obj['name']!r}")
        return dtype
    if kind == "device":
        return torch.device(obj["name"])
    if kind == "tuple":
        return tuple(decode(v) for v in obj["items"])
    if kind == "dict":
        return {decode(k): decode(v) for k, v in obj["items"]}
    if kind == "object":
        return _decode_object(obj)
    if kind is None:
        return {k: decode(v) for k, v in obj.items()}
    raise CheckpointError(f"checkpoint holds an unknown value kind {kind!r}")


def _decode_object(obj: dict) -> Any:
    """An object of a class of :func:`stored_classes` from its entry (never any other class)."""
    classes = stored_classes()
    if "class" in obj:
        name = obj["class"]
        shown = repr(name)
    else:  # the entry of a checkpoint written before the allow-list: (module, qualname)
        module, qualname = obj.get("module"), obj.get("qualname")
        name = _ALIASES.get((module, qualname)) if isinstance(module, str) and isinstance(qualname, str) else None
        shown = f"{module}.{qualname}" if isinstance(module, str) and isinstance(qualname, str) else repr(obj.get("module"))
    if not isinstance(name, str) or name not in classes:
        raise CheckpointError(f"checkpoint names class {shown}, which is not one a checkpoint stores "
                              f"(only {', '.join(sorted(classes))}); the file was not written by fedlangevin")
    target, state = classes[name], obj.get("state")
    if not isinstance(state, dict) or not all(
            isinstance(k, str) and k.isidentifier() and not k.startswith("__") for k in state):
        raise CheckpointError(f"checkpoint: the stored {name} has no valid attribute record (a dict of names)")
    values = {k: decode(v) for k, v in state.items()}
    if dataclasses.is_dataclass(target):  # a record of a few settings: rebuilt by its constructor, which checks them
        fields = {f.name: f for f in dataclasses.fields(target) if f.init}
        required = {n for n, f in fields.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        if not required <= set(values) <= set(fields):
            raise CheckpointError(f"checkpoint: the stored {name} has the attributes {sorted(values)}; "
                                  f"{name} takes {sorted(fields)} (required: {sorted(required)})")
        try:
            return target(**values)
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"checkpoint: the stored {name} is invalid: {exc}") from None
    inst = target.__new__(target)
    for key, value in values.items():
        object.__setattr__(inst, key, value)
    return inst


# -- digests of problems --------------------------------------------------------------------
def digest(obj: Any) -> str:
    """SHA-256 over an object's tensors, arrays and plain attributes (recursively).

    Functions and other opaque members contribute their qualified names only. Used to check
    that a problem given on resume is the one the checkpointed run sampled.
    """
    h = hashlib.sha256()
    _feed(h, obj, set())
    return h.hexdigest()


def _feed(h, obj: Any, seen: set) -> None:
    if obj is None or isinstance(obj, (bool, int, float, str)):
        h.update(repr(obj).encode())
    elif isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"tensor{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, np.ndarray) and obj.dtype != object:
        a = np.ascontiguousarray(obj)
        h.update(f"ndarray{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(obj, np.generic):
        h.update(repr(obj.item()).encode())
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}{len(obj)}".encode())
        for v in obj:
            _feed(h, v, seen)
    elif isinstance(obj, dict):
        h.update(f"dict{len(obj)}".encode())
        for k in sorted(obj, key=repr):
            h.update(repr(k).encode())
            _feed(h, obj[k], seen)
    elif id(obj) in seen:
        h.update(b"<cycle>")
    elif hasattr(obj, "__dict__") and not callable(obj) and not isinstance(obj, type):
        seen.add(id(obj))
        h.update(f"{type(obj).__module__}.{type(obj).__qualname__}".encode())
        _feed(h, {k: v for k, v in vars(obj).items() if not k.startswith("_cache")}, seen)
    else:
        h.update(f"<{type(obj).__module__}.{getattr(type(obj), '__qualname__', '?')}>".encode())
