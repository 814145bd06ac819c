"""run_method: any optimizer on given federated data -> per-round test metrics and cumulative bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlangevin.compression import quantized_bits
from fedlangevin.compression.dzofl import DZOFLConfig
from fedlangevin.compression.models import (
    MLP,
    MultinomialLogistic,
    classification_metrics,
)
from fedlangevin.compression.runner import METHODS, run_method


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_and_reports(method, data):
    clients, test = data
    model = MultinomialLogistic(5, 4)  # d = 24
    hist = run_method(method, clients, test, model, rounds=6, eval_every=3, seed=1)
    assert hist.method == method and hist.rounds == [3, 6]
    assert set(hist.metrics) == {"accuracy", "nll", "brier", "ece"}
    for k in ("accuracy", "ece"):
        assert all(0.0 <= v <= 1.0 for v in hist.metrics[k])
    assert all(0.0 <= v <= 2.0 for v in hist.metrics["brier"])
    # cumulative bits grow linearly: every round costs the same in these methods
    assert hist.bits_down[1] == pytest.approx(2 * hist.bits_down[0])
    assert hist.bits_up[1] == pytest.approx(2 * hist.bits_up[0])
    per_round_up = hist.bits_up[0] / 3
    expected_up = {"dzofl": 8 * 16, "fedavg": 8 * 33 * 24, "lossless": 8 * 33 * 24}.get(method, 8 * quantized_bits(24, 2))
    assert per_round_up == pytest.approx(expected_up)
    assert hist.bits_total[-1] == pytest.approx(hist.bits_down[-1] + hist.bits_up[-1])


def test_learning_happens_and_seeds_reproduce(data):
    clients, test = data
    model = MLP(5, 16, 4)
    h1 = run_method("lfl", clients, test, model, rounds=40, eval_every=40, seed=3)
    h2 = run_method("lfl", clients, test, model, rounds=40, eval_every=40, seed=3)
    assert h1.metrics == h2.metrics
    assert h1.final() > 0.85  # 4 well-separated classes, chance 0.25
    h3 = run_method("dzofl", clients, test, MultinomialLogistic(5, 4), rounds=200, eval_every=200,
                    dzofl=DZOFLConfig(alpha0=0.5, gamma0=0.05), seed=3)
    assert h3.final() > 0.6


def test_default_q1_for_ltgm_is_50(data):
    clients, test = data
    h = run_method("ltgm", clients, test, MultinomialLogistic(5, 4), rounds=1)
    assert h.bits_down[0] == pytest.approx(quantized_bits(32, 50))  # d = 24 padded to 32


def test_bad_arguments(data):
    clients, test = data
    model = MultinomialLogistic(5, 4)
    with pytest.raises(ValueError, match="method"):
        run_method("signsgd", clients, test, model, rounds=1)
    with pytest.raises(ValueError, match="dzofl"):
        run_method("lfl", clients, test, model, rounds=1, dzofl=DZOFLConfig())
    with pytest.raises(ValueError, match="loss_rate"):
        run_method("dzofl", clients, test, model, rounds=1, loss_rate=0.1)


def test_metrics_against_hand_computation():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 0, 0, 1])
    m = classification_metrics(logits, y, n_bins=10)
    p = torch.softmax(logits.double(), 1)
    assert m["accuracy"] == pytest.approx(0.5)  # argmax of a tie is class 0
    assert m["nll"] == pytest.approx(float(-torch.log(p[torch.arange(4), y]).mean()))
    onehot = torch.nn.functional.one_hot(y, 2).double()
    assert m["brier"] == pytest.approx(float(((p - onehot) ** 2).sum(1).mean()))
    conf = p.max(1).values.numpy()
    correct = np.array([1, 0, 1, 0])
    bins = np.minimum((conf * 10).astype(int), 9)
    ece = sum(abs(correct[bins == b].sum() - conf[bins == b].sum()) for b in range(10)) / 4
    assert m["ece"] == pytest.approx(ece)


def test_labels_and_test_set_are_validated(data):
    clients, test = data
    with pytest.raises(ValueError, match="classes"):
        run_method("lfl", clients, test, MultinomialLogistic(5, 3), rounds=1)  # labels 0..3
    with pytest.raises(ValueError, match="test"):
        run_method("lfl", clients, (test[0][:, :4], test[1]), MultinomialLogistic(5, 4), rounds=1)
    with pytest.raises(ValueError, match="test labels"):
        run_method("dzofl", clients, (test[0], test[1] + 4), MultinomialLogistic(5, 4), rounds=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", ["lfl", "ltgm", "dzofl", "fedavg"])
def test_cuda_device_is_honoured(method, data):
    clients, test = data
    kw = dict(clients_per_round=4, loss_rate=0.2) if method == "fedavg" else {}
    h = run_method(method, clients, test, MLP(5, 16, 4), rounds=5, eval_every=5, device="cuda", **kw)
    cpu = run_method(method, clients, test, MLP(5, 16, 4), rounds=5, eval_every=5, device="cpu", **kw)
    assert np.isfinite(h.final()) and h.bits_down == cpu.bits_down and h.bits_up == cpu.bits_up
