"""Exclusive locks that the operating system releases when their holder dies.

A run locks the files it writes (its checkpoint path, its sample store) for its whole life
with ``fcntl.flock`` on an open lock file. The lock belongs to the open file, so it goes
away when the holder exits in any way (``kill -9`` included): a file left by a dead run is
never mistaken for one in use, and one in use is never mistaken for a dead run's. On systems
without ``fcntl`` (Windows) nothing is locked.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ExclusiveLock"]


class ExclusiveLock:
    """An exclusive, non-blocking ``flock`` on the file ``path`` (created if missing) until
    :meth:`release`. ``busy``: the message of the ``ValueError`` raised when another open
    file (another process, or another run of this one) holds it."""

    def __init__(self, path: Path, busy: str) -> None:
        self.path = Path(path)
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
            raise ValueError(busy) from None
        self._file = f

    def release(self) -> None:
        """Let the lock go (closing the descriptor releases the flock); the lock file stays, so that
        a process waiting on it never locks a file another has just replaced."""
        if self._file is not None:
            self._file.close()
            self._file = None
