"""Pinned sample streams of the FA-LD engine: a few small runs whose draws are saved in
``tests/fald/data/golden_samples.npz`` and compared bit for bit by ``test_golden.py``.

The runs cover each kernel path: the demo's Gaussian simulation (coordinate-major affine
kernel, K = 1 and K = 10), scheme I and scheme II participation with correlated noise, a
minibatch logistic regression (gradient kernel, minibatch draws) and a Pyro model
(autodiff gradients). Regenerate the file (only when a change of the random stream is
intended, and say so in the change's note) with

    python -m tests.fald.golden
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

import fedlangevin as fl

PATH = Path(__file__).parent / "data" / "golden_samples.npz"


def _logistic():
    g = torch.Generator().manual_seed(3)
    clients = []
    for c, n in enumerate([12, 15, 9, 20]):
        X = torch.randn(n, 2, generator=g, dtype=torch.float64) + 0.5 * c
        y = torch.randint(0, 3, (n,), generator=g)
        clients.append((X, y))
    return fl.problems.LogisticRegression(clients, num_classes=3)


def _pyro():
    import pyro
    import pyro.distributions as dist

    def model(data):
        X, y = data
        beta = pyro.sample("beta", dist.Normal(X.new_zeros(X.shape[1]), 0.5).to_event(1))
        sigma = pyro.sample("sigma", dist.HalfNormal(X.new_tensor(2.0)))
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)

    g = torch.Generator().manual_seed(1)
    clients = []
    for c, n in enumerate([10, 15, 20]):
        X = torch.randn(n, 2, generator=g, dtype=torch.float64) + torch.tensor([0.5 * (c - 1), 0.0], dtype=torch.float64)
        y = X @ torch.tensor([0.8, -0.5], dtype=torch.float64) + torch.randn(n, generator=g, dtype=torch.float64)
        clients.append((X, y))
    return fl.problems.PyroProblem(model, clients)


def runs() -> dict:
    """name -> a function returning (samples (R, draws, d), uploads) of a fixed-seed run."""

    def demo(k):
        def fn():
            problem = fl.problems.GaussianSimulation(num_clients=50, alpha=1.0, samples_per_client=20, seed=0)
            sampler = fl.FALD(problem, step_size=2e-5, local_steps=k, chains=12, seed=0)
            return sampler.run(25, progress=False), sampler
        return fn

    def scheme(rule, rho):
        def fn():
            problem = fl.problems.GaussianSimulation(num_clients=10, alpha=0.5, samples_per_client=10, seed=2)
            sampler = fl.FALD(problem, step_size=1e-4, local_steps=4, correlation=rho, participation=rule, chains=6,
                              seed=5)
            return sampler.run(30, warmup=5, thin=2, progress=False), sampler
        return fn

    def logistic():
        sampler = fl.FALD(_logistic(), step_size=1e-3, local_steps=3, batch_size=4, chains=3, seed=7,
                          correlation=0.5)
        return sampler.run(20, progress=False), sampler

    def pyro_run():
        sampler = fl.FALD(_pyro(), step_size=2e-4, local_steps=2, chains=3, seed=11)
        return sampler.run(15, progress=False), sampler

    return {
        "demo_k1": demo(1), "demo_k10": demo(10),
        # the pinned partial-participation streams run the paper's noise (eq. 10), as when they were pinned
        "scheme_i": scheme(fl.SchemeI(3, noise="paper"), 0.3), "scheme_ii": scheme(fl.SchemeII(4, noise="paper"), 0.0),
        "logistic_minibatch": logistic, "pyro": pyro_run,
    }


def compute(names=None) -> dict[str, np.ndarray]:
    out = {}
    for name, fn in runs().items():
        if names is not None and name not in names:
            continue
        trace, sampler = fn()
        out[name] = np.asarray(trace.samples)
        out[name + ".theta"] = sampler.state.theta.numpy().copy()
        out[name + ".uploads"] = np.asarray([trace.communication.uploads])
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    data = compute()
    np.savez_compressed(PATH, **data)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes): {sorted(k for k in data if '.' not in k)}")
