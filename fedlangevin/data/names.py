"""A data set by name or path: what ``--dataset`` and the experiments take."""

from __future__ import annotations

from pathlib import Path

from fedlangevin.data.datasets import BUNDLED, Dataset, load_mnist_folder, load_npz
from fedlangevin.data.installed import INSTALLED

__all__ = ["load_dataset"]


def load_dataset(name: str, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """A bundled data set by name (``"digits"``, ``"mnist5k"``), a full data set installed on
    the machine by name (``"mnist"``, ``"fashion-mnist"``: see :mod:`fedlangevin.data.installed`),
    a folder with the four MNIST-format IDX files, or a ``.npz`` file (``test_fraction``/``seed``
    apply to bundled data only; the full sets and files bring their own test split)."""
    if name in BUNDLED:
        return BUNDLED[name](test_fraction=test_fraction, seed=seed)
    if name in INSTALLED:
        return INSTALLED[name]()
    path = Path(name)
    if path.is_dir():
        return load_mnist_folder(path)
    if path.is_file() and path.suffix == ".npz":
        return load_npz(path)
    raise ValueError(
        f"dataset must be one of {', '.join([*BUNDLED, *INSTALLED])}, a folder with MNIST-format IDX files, or a .npz file; got {name!r}"
    )
