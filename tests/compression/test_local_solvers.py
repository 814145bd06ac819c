"""The devices' local steps of LFL and its baselines (eq. 5), batched over devices."""

from __future__ import annotations

import torch

from fedlangevin.compression.local_solvers import LocalSGD, local_train
from fedlangevin.compression.models import MLP, StackedClients
from tests.compression.test_lfl import _gen, _small_clients


def test_local_train_equals_per_device_loop_full_batch():
    clients, _ = _small_clients()
    stacked = StackedClients.from_list(clients, dtype=torch.float64)
    model = MLP(6, 8, 5)
    theta = model.init(_gen(15), dtype=torch.float64)
    solver = LocalSGD(lr=0.3, steps=3, batch_size=10_000)  # batch >= data: full-batch GD
    out, _ = local_train(theta, stacked, model, solver, None, _gen(16))
    for m, (X, y) in enumerate(clients):
        th = theta.clone()
        for _ in range(3):
            th = th.detach().requires_grad_(True)
            loss = torch.nn.functional.cross_entropy(model.logits(th, X.double()), y)
            (g,) = torch.autograd.grad(loss, th)
            th = th - 0.3 * g
        assert torch.allclose(out[m], th.detach(), atol=1e-12)
