"""The sample store a run writes: made under the store's own lock (a killed run's leftovers
cleared there, a store another run holds never), and on resume checked against the checkpoint's
privacy mechanism."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from fedlangevin.runner.io import checkpoint as ckpt
from fedlangevin.runner.io.store import SampleStore, StoreLock

__all__ = ["create_store", "leftover_store", "same_mechanism"]


def leftover_store(store: Path, checkpoint: Any) -> bool:
    """Whether ``store`` holds only what a run killed before its first checkpoint left: a sample
    store with no committed draws (draws are committed at checkpoints), or the empty data files of
    a store whose creation was killed before its ``meta.json`` (:meth:`SampleStore.created_partly`),
    for a ``checkpoint`` path that does not exist yet. Rerunning that run (the resume recipe of docs/long-runs.md,
    after a kill at any moment) then starts afresh in the same folder instead of stopping at
    "not empty". A run still writing the store holds the store's lock (whatever its checkpoint
    path), so :func:`create_store` takes that lock and checks again before it clears the folder: a
    store a running process holds is never cleared."""
    if not isinstance(checkpoint, (str, os.PathLike)) or Path(checkpoint).exists():
        return False
    if not (Path(store) / "meta.json").is_file():  # a store killed in its creation, before meta.json
        return SampleStore.created_partly(store)
    try:
        old = SampleStore.open(store)
    except ValueError:  # not a store, or a damaged one: never cleared
        return False
    names = {p.name for p in Path(store).iterdir()}
    return old.draws == 0 and names <= SampleStore.FILES


def create_store(path: Path, checkpoint: Any, chain_ids: Sequence[int], dim: int, dtype: Any,
                 var_names: Sequence[str] | None, settings: dict) -> SampleStore:
    """A new store at ``path`` for a run checkpointing at ``checkpoint``, holding its lock: taken
    first (another run writing the store stops this one here, with a ``ValueError`` naming it),
    then a killed run's leftovers (:func:`leftover_store`, checked again under the lock) cleared."""
    lock = StoreLock(path)
    try:
        if leftover_store(path, checkpoint):
            SampleStore.discard(path, lock)
        return SampleStore.create(path, chain_ids, dim, dtype, var_names, settings=settings, lock=lock)
    except BaseException:
        lock.release()
        raise


def same_mechanism(store: SampleStore, settings: Any, checkpoint: Path) -> None:
    """The store a resumed run continues was written by a run of the checkpoint's privacy mechanism
    (its ``meta.json`` records the settings it was made with): a checkpoint whose privacy record was
    removed or changed is refused here too, never continued with another mechanism."""
    made = store.meta.get("settings", {}).get("privacy")
    now = getattr(settings, "privacy", "none")
    if made is not None and made != now:
        raise ckpt.CheckpointError(
            f"checkpoint {str(checkpoint)!r} records the privacy mechanism {now!r:.60}, but its store "
            f"{str(store.path)!r} was made by a run with {made!r:.60}: the checkpoint's privacy record was altered")
