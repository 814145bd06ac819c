"""Plain values for checkpoints: objects encoded as tensors and plain values, decoded from an
explicit allow-list of classes, checks of a decoded record's entries, and digests of problems.

The file format itself (header, checksum, atomic writes) is :mod:`fedlangevin.runner.io.checkpoint`,
which re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["CheckpointError", "Entries", "NotEncodable", "decode", "digest", "encode", "stored_classes"]


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupted, or from an incompatible version."""


class NotEncodable(TypeError):
    """An object that a checkpoint cannot store as plain values (e.g. a user's function)."""


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
    from fedlangevin.federation.participation import Full, SchemeI, SchemeII
    from fedlangevin.federation.schedules import AdaptedSteps, Constant, PaperDecay, Polynomial, Sequence
    from fedlangevin.problems.base import ClientSubset
    from fedlangevin.problems.gaussian import CurvatureSimulation, GaussianSimulation, QuadraticProblem
    from fedlangevin.problems.logistic import LogisticRegression

    classes = (Constant, PaperDecay, Polynomial, Sequence, AdaptedSteps, Full, SchemeI, SchemeII, QuadraticProblem,
               GaussianSimulation, CurvatureSimulation, LogisticRegression, ClientSubset)
    return {cls.__qualname__: cls for cls in classes}


#: object entries of checkpoints written before the allow-list named their class by module and
#: qualified name: each (module, qualname) written then -> the name it has in stored_classes().
#: The module paths are those of that time (fald/ was flat then: fedlangevin.fald.schedules is now
#: fedlangevin.federation.schedules); they are names in old files, never imported.
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
    # settings a class gained after files were written: what those files ran with (e.g. a participation
    # rule's noise="paper", the only rule before it was a setting)
    values = {**getattr(target, "RECORD_DEFAULTS", {}), **values}
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
