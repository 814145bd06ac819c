"""The optimizer runners' shared base: one list of methods, the same checks, evaluate and run."""

from __future__ import annotations

import math

import pytest
import torch

from fedlangevin.compression import METHODS
from fedlangevin.compression.dzofl import DZOFLOptimizer
from fedlangevin.compression.lfl import LFLOptimizer
from fedlangevin.compression.lfl_codecs import CODEC_METHODS
from fedlangevin.compression.models import MultinomialLogistic
from fedlangevin.compression.optimizer import FederatedOptimizer


def _optimizers(clients, **kw):
    model = MultinomialLogistic(5, 4)
    return [LFLOptimizer(model, clients, method="lfl", **kw), DZOFLOptimizer(model, clients, **kw)]


def test_methods_are_one_list_and_the_codec_methods_are_its_lfl_subset():
    assert METHODS == (*CODEC_METHODS, "dzofl")


def test_both_runners_share_the_base_checks(data):
    clients, _ = data
    for cls, kw in ((LFLOptimizer, {"method": "lfl"}), (DZOFLOptimizer, {})):
        assert issubclass(cls, FederatedOptimizer)
        with pytest.raises(ValueError, match="features"):
            cls(MultinomialLogistic(4, 4), clients, **kw)
        with pytest.raises(ValueError, match="classes"):
            cls(MultinomialLogistic(5, 3), clients, **kw)
        with pytest.raises(ValueError, match=r"theta0 must have shape \(24,\)"):
            cls(MultinomialLogistic(5, 4), clients, theta0=torch.zeros(3), **kw)


def test_same_seed_same_run_and_the_start_is_drawn_from_the_seeded_generator(data):
    clients, test = data
    for a, b in zip(_optimizers(clients, seed=3), _optimizers(clients, seed=3)):
        assert torch.equal(a.state.theta, b.state.theta)
        ha, hb = a.run(4, test, eval_every=2), b.run(4, test, eval_every=2)
        assert ha.rounds == [2, 4] and ha.metrics == hb.metrics and ha.bits_up == hb.bits_up
        assert a.evaluate(*test) == {m: v[-1] for m, v in ha.metrics.items()}  # the last round is recorded
        assert torch.equal(a.state.theta, b.state.theta)


def test_a_non_finite_model_stops_the_run_with_nan_metrics(data):
    clients, test = data
    # lossless LFL (FedAvg): the quantizers (LFL's and DZOFL's 16-bit scalars) refuse a
    # non-finite vector themselves, before the run's check; both runners share this loop
    opt = LFLOptimizer(MultinomialLogistic(5, 4), clients, method="fedavg", theta0=torch.full((24,), float("nan")))
    hist = opt.run(5, test)
    assert hist.diverged_at == 1 and hist.rounds == [1]
    assert all(math.isnan(v[-1]) for v in hist.metrics.values())
