"""No file the package reads runs code (issue 31).

A pickle is planted in every file type fedlangevin reads: the checkpoints of both runners
(FA-LD's and the runner's fedlangevin.runner.io.checkpoint, the Flower server's, which is the
runner's, read by a restarted server, and the Flower trace file), ``<path>.prev``, ``<path>.problem``, a sample store's ``meta.json`` and data files
(read by ``open_store`` and by a resumed run), ``.npy`` / ``.npz`` given to ``fedlangevin
diagnose``, the data sets' ``.npz`` and IDX files and the full MNIST's pickle (its hash checked
first; the arrays-only unpickler behind it is tested in tests/data/test_installed.py), and the logistic regression's reference draws. Unpickling the planted object creates a
marker file; each case checks that a clear error (the module's own error class, or the CLI's
one line and exit status 2) is raised and that the marker does not exist.

Planted two ways where the format has a frame: as the whole file (a bare ``torch.save`` or
``pickle.dumps``) and inside a well-formed frame, header and SHA-256 valid, so that only the
decoding can refuse it.
"""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlangevin as fl
from fedlangevin import data as fd
from fedlangevin.experiments.logistic_posterior import read_reference
from fedlangevin.runner.io.checkpoint import _HEADER, MAGIC, CheckpointError
from fedlangevin.runner.io.store import StoreError
from fedlangevin.flower import load_trace


class Planted:
    """Unpickling this object calls ``open(marker, "w")``: it creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _framed(payload: bytes, version: int) -> bytes:
    """``payload`` in a checkpoint frame whose header and checksum are valid (format ``version``)."""
    import hashlib

    h = hashlib.sha256()
    if version >= 2:
        h.update(_HEADER.pack(MAGIC, version, len(payload), bytes(32))[:-32])
    h.update(payload)
    return _HEADER.pack(MAGIC, version, len(payload), h.digest()) + payload


def test_the_planted_pickle_runs_code_when_unpickled(tmp_path):
    """The plant is live: plain unpickling (what the package must never do) creates the marker."""
    marker = tmp_path / "PWNED"
    pickle.loads(pickle.dumps(Planted(marker))).close()
    assert marker.exists()
    marker.unlink()
    torch.load(io.BytesIO(_torch_bytes(Planted(marker))), weights_only=False).close()
    assert marker.exists()


# -- the files -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fald_run(tmp_path_factory):
    """A checkpointed FA-LD run with a store: c (round 20, finished), c.prev (round 10: resuming it
    continues the run in its store), c.problem, s/meta.json, s/samples.bin, s/draw_rounds.bin."""
    folder = tmp_path_factory.mktemp("fald")
    problem = fl.problems.GaussianSimulation(num_clients=3, samples_per_client=5, seed=0)
    fl.FALD(problem, step_size=1e-3, chains=2, seed=1).run(
        20, store=folder / "s", checkpoint=folder / "c", checkpoint_every=10, progress=False)
    return folder


def _copy(folder: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(folder, to, symlinks=True)
    for lock in to.glob("*.lock"):
        lock.unlink()
    return to


def _plant(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    path.write_bytes(data)


def _flower_server(path: Path):
    """A Flower server (in-process clients) restarted with its checkpoint at ``path``: it reads the file."""
    from tests.flower.test_runner import _run, _serve

    return _serve(_run(checkpoint=str(path)))


def _cli(argv: list[str], capsys) -> None:
    from fedlangevin import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"fedlangevin {argv[0]}: error:"), err
    raise ValueError(err[0])  # the clear error the case expects


def _object_array(marker: Path) -> np.ndarray:
    a = np.empty(4, dtype=object)
    a[:] = [Planted(marker)] * 4
    return a


def _cases():
    """name -> (plant(folder, marker), read(folder, capsys), expected error, message)."""
    bare = lambda m: _torch_bytes({"kind": "fedlangevin.FALD", "round": Planted(m)})  # noqa: E731
    inner = lambda m, kind="fedlangevin.FALD": _torch_bytes({"kind": kind, "x": Planted(m)})  # noqa: E731
    resume = lambda f, c: fl.FALD.resume(f / "c")  # noqa: E731
    cases = {
        "FA-LD checkpoint, bare torch.save": (lambda f, m: _plant(f / "c", bare(m)), resume, CheckpointError,
                                              "not a fedlangevin checkpoint"),
        "FA-LD checkpoint, framed v2": (lambda f, m: _plant(f / "c", _framed(inner(m), 2)), resume, CheckpointError,
                                        "cannot be decoded"),
        "FA-LD checkpoint, framed v1": (lambda f, m: _plant(f / "c", _framed(inner(m), 1)), resume, CheckpointError,
                                        "cannot be decoded"),
        "checkpoint_info": (lambda f, m: _plant(f / "c", _framed(inner(m), 2)),
                            lambda f, c: fl.fald.checkpoint_info(f / "c"), CheckpointError, "cannot be decoded"),
        ".prev": (lambda f, m: (_plant(f / "c", b"damaged"), _plant(f / "c.prev", _framed(inner(m), 2))),
                  lambda f, c: fl.FALD.resume(f / "c", fallback=True), CheckpointError,
                  "previous checkpoint is unusable too: .*cannot be decoded"),
        ".problem": (lambda f, m: _plant(f / "c.problem", _framed(inner(m, "fedlangevin.problem"), 2)), resume,
                     CheckpointError, "c.problem' cannot be decoded"),
        "store meta.json, resumed run": (lambda f, m: _plant(f / "s" / "meta.json", pickle.dumps(Planted(m))),
                                         lambda f, c: fl.FALD.resume(f / "c.prev"), StoreError, "meta.json is unreadable"),
        "store meta.json, open_store": (lambda f, m: _plant(f / "s" / "meta.json", pickle.dumps(Planted(m))),
                                        lambda f, c: fl.open_store(f / "s"), StoreError, "meta.json is unreadable"),
    }
    for name in ("samples.bin", "draw_rounds.bin"):  # the pickle over the first bytes, the size kept
        def plant(f, m, name=name):
            path = f / "s" / name
            data = pickle.dumps(Planted(m))
            size = path.stat().st_size
            assert size >= len(data)
            _plant(path, data + path.read_bytes()[len(data):])
        cases[f"store {name}"] = (plant, lambda f, c: fl.open_store(f / "s"), StoreError, "does not match its CRC-32")
    flower_ckpt = lambda f, c: _flower_server(f / "server.ckpt")  # noqa: E731
    flower_trace = lambda f, c: load_trace(f / "trace.pt", 1e-3)  # noqa: E731
    cases.update({
        "Flower checkpoint, bare torch.save": (lambda f, m: _plant(f / "server.ckpt", _torch_bytes(Planted(m))),
                                               flower_ckpt, CheckpointError, "could run code"),
        "Flower checkpoint, framed": (lambda f, m: _plant(f / "server.ckpt", _framed(
            inner(m, "fedlangevin.Runner"), 2)), flower_ckpt, CheckpointError, "cannot be decoded"),
        "Flower trace, bare torch.save": (lambda f, m: _plant(f / "trace.pt", _torch_bytes(Planted(m))), flower_trace,
                                          CheckpointError, "could run code"),
        "Flower trace, framed": (lambda f, m: _plant(f / "trace.pt", _framed(inner(m, "fedlangevin-flower-trace"), 2)),
                                 flower_trace, CheckpointError, "cannot be decoded"),
        "diagnose .npy": (lambda f, m: np.save(f / "x.npy", _object_array(m), allow_pickle=True),
                          lambda f, c: _cli(["diagnose", str(f / "x.npy")], c), ValueError, "not a .npy/.npz array"),
        "diagnose .npz": (lambda f, m: np.savez(f / "x.npz", samples=_object_array(m)),
                          lambda f, c: _cli(["diagnose", str(f / "x.npz")], c), ValueError, "not a .npy/.npz array"),
        "data set .npz": (lambda f, m: np.savez(f / "d.npz", x_train=_object_array(m), y_train=np.zeros(4),
                                                 x_test=_object_array(m), y_test=np.zeros(4)),
                          lambda f, c: fd.load_dataset(str(f / "d.npz")), ValueError, "d.npz"),
        "logistic reference .npz": (lambda f, m: np.savez(f / "ref.npz", draws=_object_array(m), info=np.array("{}")),
                                    lambda f, c: read_reference(f / "ref.npz"), ValueError, "ref.npz"),
        "data set IDX folder": (lambda f, m: [_plant(f / "mnist" / n, pickle.dumps(Planted(m))) for n in (
            "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")],
                                lambda f, c: fd.load_dataset(str(f / "mnist")), ValueError, "not an IDX file"),
        "full MNIST .pkl.gz": (lambda f, m: _plant(f / "mnist.pkl.gz", gzip.compress(pickle.dumps(Planted(m)))),
                               lambda f, c: fd.load_mnist(f / "mnist.pkl.gz"), ValueError, "SHA-256"),
    })
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", list(CASES))
def test_a_planted_pickle_never_runs(case, fald_run, tmp_path, capsys):
    plant, read, error, message = CASES[case]
    folder = _copy(fald_run, tmp_path / "run")
    (folder / "mnist").mkdir()
    marker = tmp_path / "PWNED"
    plant(folder, marker)
    assert not marker.exists()
    with pytest.raises(error, match=message):
        read(folder, capsys)
    assert not marker.exists(), f"{case}: reading the file ran the planted code"
