"""On-disk sample store: draws appended as the run goes, memory-mapped when read.

A long run that keeps its draws in memory grows by chains x d numbers per draw; with a
store the draws go to disk in blocks and memory stays flat however long the run. The
format is plain so that any tool can read it (numpy, or ``np.fromfile`` in a pinch):

    <store>/meta.json        {"format": "fedlangevin-store", "version": 1, "chains": R,
                              "dim": d, "dtype": "<f8", "chain_ids": [...],
                              "var_names": [...], "draws": committed draws,
                              "crc32": {"samples": ..., "draw_rounds": ...},
                              "dropped": {"chain id": [round, step], ...}}
    <store>/samples.bin      raw values, C order, shape (draws, chains, d)
    <store>/draw_rounds.bin  raw little-endian int64, shape (draws,): the round of each draw
    <store>/lock             empty: the run writing the store holds an ``flock`` on it

A store belongs to one run at a time: the run that creates or reopens it for writing locks
``<store>/lock`` (:class:`StoreLock`) until it ends, and any other writer (another process, or
another run in this one) is refused with a ``ValueError`` naming the store. The operating
system releases the lock when its holder dies (``kill -9`` included), so a killed run's store
can be taken up again; a store a running process holds never can.

Draws are appended along the first axis, so the file layout is draw-major; readers get a
(chains, draws, d) view without copying (:meth:`SampleStore.samples`). ``draws`` in
``meta.json`` counts the rows written completely; bytes after them (a write cut short by a
crash) are ignored by readers and cut off when a run resumes. The CRC-32 values cover the
committed bytes; :meth:`SampleStore.truncate` checks them before a resumed run appends.

Chains that a run dropped after a divergence (``on_divergence="drop"``) keep their column:
their values are NaN from the round they were dropped, and ``meta["dropped"]`` says when.

>>> store = open_store("run/samples")            # doctest: +SKIP
>>> store.samples().shape                         # (chains, draws, d), memory-mapped
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fedlangevin._validation import check_path
from fedlangevin.runner.io.locks import ExclusiveLock

__all__ = ["SampleStore", "StoreError", "StoreLock", "open_store"]

FORMAT = "fedlangevin-store"
VERSION = 1
_SAMPLES = "samples.bin"
_ROUNDS = "draw_rounds.bin"
_META = "meta.json"
_LOCK = "lock"
_CRC_BLOCK = 1 << 24  # bytes read at a time when checking a CRC
#: the largest meta.json read (it holds names and ids: a few bytes per chain and coordinate)
META_MAX_BYTES = 1 << 28


class StoreError(ValueError):
    """A sample store is missing, damaged, or does not match what a checkpoint recorded."""


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temporary file, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class StoreLock(ExclusiveLock):
    """The exclusive lock of the store ``path`` (an ``flock`` on ``<path>/lock``; the folder is
    made if missing), held by the run that writes it; a ``ValueError`` naming the store if another
    holds it."""

    def __init__(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        super().__init__(path / _LOCK, f"store {str(path)!r} is in use by another run (it holds "
                                       f"{str(path / _LOCK)!r}); its draws are never cleared while it runs: wait "
                                       "for it to finish or give another store directory")


class SampleStore:
    """Append-only store of draws (chains x d per draw) in a directory; see the module docstring.

    Create one with :meth:`create` (the sampler does this for ``run(store=...)``) or open
    an existing one with :func:`open_store`. Writing: :meth:`write` appends a block of
    draws, :meth:`sync` makes them durable (flush + fsync + ``meta.json``). Reading:
    :meth:`samples` and :meth:`draw_rounds` are memory-mapped, so opening a large store
    costs no memory until values are touched. A writable store holds its :class:`StoreLock`
    from :meth:`create` or :meth:`open` until :meth:`close`, and takes it again before it
    writes after that.
    """

    def __init__(self, path: Path, meta: dict, writable: bool, lock: StoreLock | None = None) -> None:
        self.path = path
        self.meta = meta
        self.writable = writable
        self.lock = lock
        self.dtype = np.dtype(meta["dtype"])
        self.chains = int(meta["chains"])
        self.dim = int(meta["dim"])
        self._row_bytes = self.chains * self.dim * self.dtype.itemsize
        self._files: tuple[Any, Any] | None = None

    # -- creating and opening ---------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        chain_ids: Sequence[int],
        dim: int,
        dtype: Any,
        var_names: Sequence[str] | None = None,
        settings: dict | None = None,
        lock: StoreLock | None = None,
    ) -> "SampleStore":
        """A new, empty store at ``path`` (a directory that must not exist or be empty, but for its
        lock file), locked for this writer: ``lock``, the store's lock already taken (default: taken here)."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise ValueError(f"store must be a directory path; {str(path)!r} is a file")

        def check_empty() -> None:
            if path.is_dir() and any(p.name != _LOCK for p in path.iterdir()):
                raise ValueError(
                    f"store directory {str(path)!r} is not empty; give a new directory (a store holds "
                    "the draws of one run; resume an interrupted run with FALD.resume(checkpoint))"
                )

        own = lock is None
        if own:
            check_empty()  # a used folder is refused before a lock file is put in it
            lock = StoreLock(path)
        try:
            check_empty()  # again under the lock
        except BaseException:
            if own:
                lock.release()
            raise
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "chains": len(chain_ids),
            "dim": int(dim),
            "dtype": np.dtype(dtype).newbyteorder("<").str,
            "chain_ids": [int(c) for c in chain_ids],
            "var_names": list(var_names) if var_names is not None else None,
            "draws": 0,
            "crc32": {"samples": 0, "draw_rounds": 0},
            "dropped": {},
            "settings": settings or {},
        }
        for name in (_SAMPLES, _ROUNDS):
            with open(path / name, "wb") as f:
                os.fsync(f.fileno())
        write_json_atomic(path / _META, meta)
        return cls(path, meta, writable=True, lock=lock)

    #: the files a store folder holds (meta.json is replaced atomically through meta.json.tmp)
    FILES = frozenset({_META, _SAMPLES, _ROUNDS, _META + ".tmp", _LOCK})

    @classmethod
    def created_partly(cls, path: str | os.PathLike) -> bool:
        """Whether ``path`` holds what a :meth:`create` killed before ``meta.json`` left: no ``meta.json``,
        and nothing but the empty data files (and a ``meta.json.tmp``), plain files. Such a folder holds
        no draws (none is written before ``meta.json`` exists), so a restarted run may clear it."""
        path = Path(path)
        if not path.is_dir() or path.is_symlink() or (path / _META).exists():
            return False
        entries = list(path.iterdir())
        if not entries or not {p.name for p in entries} <= cls.FILES - {_META}:
            return False
        plain = all(p.is_file() and not p.is_symlink() for p in entries)
        return plain and all(p.stat().st_size == 0 for p in entries if p.name in (_SAMPLES, _ROUNDS))

    @classmethod
    def discard(cls, path: str | os.PathLike, lock: StoreLock) -> None:
        """Delete a store's files (only those: the folder and anything else in it stay), under its
        ``lock`` (held by the caller: a store another run holds is never discarded). The lock file
        stays."""
        if lock.path != Path(path) / _LOCK:
            raise ValueError(f"discarding store {str(path)!r} needs its own lock, not {str(lock.path)!r}")
        for name in cls.FILES - {_LOCK}:
            (Path(path) / name).unlink(missing_ok=True)

    @classmethod
    def open(cls, path: str | os.PathLike, writable: bool = False) -> "SampleStore":
        """An existing store; ``writable``: for a run that appends to it, which holds its lock
        (taken here, before anything is read: a ``ValueError`` if another run holds it)."""
        if not writable:
            return cls._open(Path(path), False, None)
        lock = StoreLock(path)
        try:
            return cls._open(Path(path), True, lock)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _open(cls, path: Path, writable: bool, lock: StoreLock | None) -> "SampleStore":
        from fedlangevin._paths import check_input_file

        path = Path(path)
        meta_path = path / _META
        # every file is checked before it is opened: a FIFO, a device or a link loop is refused, never read
        check_input_file(f"sample store {str(path)!r}: {_META}", meta_path, max_bytes=META_MAX_BYTES,
                         error=StoreError, missing=f"{str(path)!r} is not a sample store (no {_META})")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(f"sample store {str(path)!r}: {_META} is unreadable ({exc})") from exc
        if not isinstance(meta, dict):
            raise StoreError(f"sample store {str(path)!r}: {_META} must hold a JSON object; got {type(meta).__name__}")
        if meta.get("format") != FORMAT:
            raise StoreError(f"{str(path)!r} is not a fedlangevin sample store (format {meta.get('format')!r})")
        if meta.get("version") != VERSION:
            raise StoreError(f"sample store {str(path)!r} has version {meta.get('version')}; this fedlangevin reads {VERSION}")
        _check_meta(path, meta)
        for name in (_SAMPLES, _ROUNDS):
            check_input_file(f"sample store {str(path)!r}: {name}", path / name, error=StoreError,
                             missing=f"sample store {str(path)!r} is missing {name}")
        return cls(path, meta, writable, lock)

    # -- sizes ------------------------------------------------------------------------------
    @property
    def draws(self) -> int:
        """Draws committed (written completely and recorded in ``meta.json``)."""
        return int(self.meta["draws"])

    def _readable_draws(self) -> int:
        """Complete rows present in both files (at least ``draws`` unless damaged)."""
        n_samples = (self.path / _SAMPLES).stat().st_size // max(self._row_bytes, 1) if self._row_bytes else self.draws
        n_rounds = (self.path / _ROUNDS).stat().st_size // 8
        return int(min(n_samples, n_rounds))

    # -- writing ------------------------------------------------------------------------------
    def _open_files(self):
        if not self.writable:
            raise ValueError(f"sample store {str(self.path)!r} was opened read-only")
        if self.lock is None:  # closed, then written again: locked again first
            self.lock = StoreLock(self.path)
        if self._files is None:
            samples = open(self.path / _SAMPLES, "r+b")
            rounds = open(self.path / _ROUNDS, "r+b")
            samples.seek(self.draws * self._row_bytes)
            rounds.seek(self.draws * 8)
            samples.truncate()
            rounds.truncate()
            self._files = (samples, rounds)
        return self._files

    def write(self, block: np.ndarray, rounds: np.ndarray) -> None:
        """Append ``block`` (n, chains, d) with the round of each draw ``rounds`` (n,).

        The bytes reach the files at once; :meth:`sync` makes them durable and commits
        them in ``meta.json``.
        """
        block = np.ascontiguousarray(block, dtype=self.dtype)
        rounds = np.ascontiguousarray(rounds, dtype="<i8")
        if block.ndim != 3 or block.shape[1:] != (self.chains, self.dim) or rounds.shape != (block.shape[0],):
            raise ValueError(
                f"a block of draws must have shape (n, {self.chains}, {self.dim}) with n rounds; "
                f"got {block.shape} and {rounds.shape}"
            )
        if block.shape[0] == 0:
            return
        f_samples, f_rounds = self._open_files()
        data, rdata = memoryview(block).cast("B"), memoryview(rounds).cast("B")
        f_samples.write(data)
        f_rounds.write(rdata)
        crc = self.meta["crc32"]
        crc["samples"] = zlib.crc32(data, crc["samples"])
        crc["draw_rounds"] = zlib.crc32(rdata, crc["draw_rounds"])
        self.meta["draws"] = self.draws + block.shape[0]

    def sync(self, dropped: dict | None = None) -> None:
        """Flush and fsync the data, then record the committed draws in ``meta.json``."""
        if dropped is not None:
            self.meta["dropped"] = {str(k): list(v) for k, v in dropped.items()}
        if self._files is not None:
            for f in self._files:
                f.flush()
                os.fsync(f.fileno())
        write_json_atomic(self.path / _META, self.meta)

    def close(self) -> None:
        """Close the files and let the store's lock go (a later write takes it again)."""
        self._close_files()
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def _close_files(self) -> None:
        if self._files is not None:
            for f in self._files:
                f.close()
            self._files = None

    def verify(self) -> None:
        """Check the committed draws against the CRC-32 values of ``meta.json``.

        Raises :class:`StoreError` naming the file whose bytes changed (a flipped bit on disk,
        an edit by another program): the values read from it would not be those written.
        """
        n = self.draws
        crc = self.meta.get("crc32", {})
        for name, size, key in ((_SAMPLES, n * self._row_bytes, "samples"), (_ROUNDS, n * 8, "draw_rounds")):
            got = _file_crc(self.path / name, size)
            if key not in crc or got != int(crc[key]):
                want = f"{int(crc[key]):#010x}" if key in crc else "none recorded"
                raise StoreError(
                    f"sample store {str(self.path)!r}: {name} does not match its CRC-32 over the {n} committed draws "
                    f"(got {got:#010x}, expected {want}); the file was altered or damaged after it was written. "
                    "open_store(path, verify=False) reads it anyway"
                )

    def truncate(self, draws: int, crc32: dict) -> None:
        """Cut the store back to its first ``draws`` draws after checking their CRC-32.

        A resumed run calls this with the values its checkpoint recorded, so the draws made
        after the checkpoint (and before the interruption) are dropped and made again.
        """
        self._close_files()
        available = self._readable_draws()
        if available < draws:
            raise StoreError(
                f"sample store {str(self.path)!r} holds {available} complete draws but the checkpoint recorded "
                f"{draws}: the store was truncated or replaced after the checkpoint was written"
            )
        got = {
            "samples": _file_crc(self.path / _SAMPLES, draws * self._row_bytes),
            "draw_rounds": _file_crc(self.path / _ROUNDS, draws * 8),
        }
        for key in ("samples", "draw_rounds"):
            if got[key] != int(crc32[key]):
                raise StoreError(
                    f"sample store {str(self.path)!r}: the first {draws} draws do not match the checkpoint "
                    f"({key} CRC-32 {got[key]:#010x}, expected {int(crc32[key]):#010x}); the store is corrupted "
                    "or belongs to another run"
                )
        for name, size in ((_SAMPLES, draws * self._row_bytes), (_ROUNDS, draws * 8)):
            with open(self.path / name, "r+b") as f:
                f.truncate(size)
                os.fsync(f.fileno())
        self.meta["draws"] = int(draws)
        self.meta["crc32"] = got
        write_json_atomic(self.path / _META, self.meta)

    # -- reading ------------------------------------------------------------------------------
    def samples(self) -> np.ndarray:
        """The committed draws as a (chains, draws, d) memory-mapped view (copy-on-write)."""
        n = self.draws
        if n == 0 or self._row_bytes == 0:
            return np.zeros((self.chains, n, self.dim), dtype=self.dtype)
        self._check_size(n)
        mm = np.memmap(self.path / _SAMPLES, dtype=self.dtype, mode="c", shape=(n, self.chains, self.dim))
        return mm.transpose(1, 0, 2)

    def draw_rounds(self) -> np.ndarray:
        """Round of each committed draw, int64 (draws,), memory-mapped."""
        n = self.draws
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        self._check_size(n)
        return np.memmap(self.path / _ROUNDS, dtype="<i8", mode="c", shape=(n,))

    def _check_size(self, n: int) -> None:
        if self._files is not None:
            for f in self._files:
                f.flush()
        if self._readable_draws() < n:
            raise StoreError(
                f"sample store {str(self.path)!r} records {n} draws but its files hold only "
                f"{self._readable_draws()}: the files were truncated"
            )

    @property
    def chain_ids(self) -> list[int]:
        return list(self.meta["chain_ids"])

    @property
    def dropped(self) -> dict[int, tuple[int, int]]:
        return {int(k): (int(v[0]), int(v[1])) for k, v in self.meta.get("dropped", {}).items()}

    def __repr__(self) -> str:
        return f"SampleStore({str(self.path)!r}, chains={self.chains}, draws={self.draws}, dim={self.dim}, dtype={self.dtype})"


#: the value types a store holds (little-endian floats)
DTYPES = ("<f2", "<f4", "<f8")


def _check_meta(path: Path, meta: dict) -> None:
    """``meta.json``'s entries have their types and ranges; a StoreError naming the entry otherwise."""
    from fedlangevin._validation import check_int

    def fail(what: str):
        raise StoreError(f"sample store {str(path)!r}: {_META}{what}")

    for key in ("chains", "dim", "dtype", "chain_ids", "draws", "crc32"):
        if key not in meta:
            fail(f" lacks {key!r}: it is damaged")
    for key, low in (("chains", 1), ("dim", 1), ("draws", 0)):
        try:
            meta[key] = check_int(key, meta[key], low)
        except ValueError as exc:
            fail(f": {exc}")
    chains, dim = meta["chains"], meta["dim"]
    if meta["dtype"] not in DTYPES:
        fail(f": dtype must be one of {', '.join(map(repr, DTYPES))}; got {meta['dtype']!r:.60}")
    ids = meta["chain_ids"]
    if not (isinstance(ids, list) and len(ids) == chains and all(type(c) is int for c in ids)):
        fail(f": chain_ids must be a list of {chains} integers (one per chain); got {ids!r:.60}")
    names = meta.get("var_names")
    if names is not None and not (isinstance(names, list) and len(names) == dim and all(isinstance(n, str) for n in names)):
        fail(f": var_names must be null or a list of {dim} strings; got {names!r:.60}")
    crc = meta["crc32"]
    if not (isinstance(crc, dict) and all(type(crc.get(k)) is int and 0 <= crc[k] < 2**32 for k in ("samples", "draw_rounds"))):
        fail(f": crc32 must be {{'samples': ..., 'draw_rounds': ...}}, two integers in [0, 2**32); got {crc!r:.60}")
    dropped = meta.get("dropped", {})
    if not (isinstance(dropped, dict) and all(
            isinstance(k, str) and k.lstrip("-").isdigit() and isinstance(v, list) and len(v) == 2
            and all(type(x) is int for x in v) for k, v in dropped.items())):
        fail(f": dropped must be {{'chain id': [round, step], ...}}; got {dropped!r:.60}")
    if not isinstance(meta.get("settings", {}), dict):
        fail(f": settings must be an object; got {type(meta['settings']).__name__}")


def _file_crc(path: Path, size: int) -> int:
    crc = 0
    with open(path, "rb") as f:
        left = size
        while left > 0:
            chunk = f.read(min(_CRC_BLOCK, left))
            if not chunk:
                break
            crc = zlib.crc32(chunk, crc)
            left -= len(chunk)
    return crc


def open_store(path: str | os.PathLike, verify: bool = True) -> SampleStore:
    """Open a sample store for reading.

    ``meta.json`` is checked first (a damaged one — not a JSON object, a count that is not an
    integer >= 0, entries of the wrong types — is a :class:`StoreError` naming it). The files
    must hold every draw ``meta.json`` commits: if the process that wrote them was killed they
    may hold more (the tail after the last sync is not committed, and readers see the committed
    draws); if they hold fewer (a file truncated or emptied, or a count in ``meta.json`` that
    was changed), the store is refused with a :class:`StoreError` naming ``meta.json``, the
    short file and both counts — never read with fewer draws.

    ``verify`` (default ``True``): check the committed draws against the CRC-32 values in
    ``meta.json`` before returning, so a flipped byte on disk is a :class:`StoreError` naming
    the file instead of altered values. It reads the whole store once (at disk speed, about
    1 s per GB here); ``verify=False`` skips it for very large stores (the sizes are checked
    either way).
    """
    from fedlangevin._validation import check_bool

    verify = check_bool("verify", verify)
    store = SampleStore.open(check_path("path", path), writable=False)
    n = store.draws
    for name, row in ((_SAMPLES, store._row_bytes), (_ROUNDS, 8)):
        size = (store.path / name).stat().st_size
        if size // row < n:
            raise StoreError(
                f"sample store {str(store.path)!r}: {_META} records {n} committed draws but {name} holds "
                f"{size // row} complete ones ({size} bytes; {n * row} needed): {name} was truncated, or "
                f"{_META} is damaged"
            )
    if verify:
        store.verify()
    return store
