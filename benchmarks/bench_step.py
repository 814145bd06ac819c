"""Steps per second of the vectorised FA-LD engine vs a straightforward per-client loop.

Both run the same algorithm (full participation, rho = 0, full gradients) on the paper's
Gaussian simulation, in the same process, on the same device and dtype; the reference
loops over clients in Python and computes each client's gradient from its data points,
(1/p_c) sum_i Sigma^{-1}(theta - x_ci), as a first implementation would. The printed
ratio is the speed-up measured in this run.

    python benchmarks/bench_step.py [--device cpu] [--dtype float64] [--seconds 3]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import fedlangevin as fl


def reference_steps(problem, chains: int, k: int, eta: float, steps: int, generator, dtype, device):
    """Per-client loop (chains vectorised inside each client)."""
    n, d = problem.num_clients, problem.dim
    data = problem.data.to(device, dtype)
    sizes = problem.client_sizes.tolist()
    prec = torch.linalg.inv(problem.cov).to(device, dtype)
    p = problem.weights.tolist()
    theta = torch.zeros(chains, d, device=device, dtype=dtype)
    clients = [theta.clone() for _ in range(n)]
    for step in range(steps):
        for c in range(n):
            x = data[c, : sizes[c]]
            grad = (clients[c][:, None, :] - x[None]).sum(1) @ prec / p[c]
            noise = torch.randn(chains, d, generator=generator, device=device, dtype=dtype)
            clients[c] = clients[c] - eta * grad + math.sqrt(2 * eta / p[c]) * noise
        if (step + 1) % k == 0:
            theta = sum(p[c] * clients[c] for c in range(n))
            clients = [theta.clone() for _ in range(n)]
    return theta


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(fn, seconds: float, device) -> float:
    """Calls fn(steps) with growing sizes until a call lasts >= seconds; returns steps/s."""
    steps = 10
    while True:
        _sync(device)
        t0 = time.perf_counter()
        fn(steps)
        _sync(device)
        dt = time.perf_counter() - t0
        if dt >= seconds or steps >= 1_000_000:
            return steps / dt
        steps = int(steps * min(10.0, max(2.0, 1.2 * seconds / max(dt, 1e-4))))


def bench(r: int, n: int, d: int, k: int, dtype, device, seconds: float) -> dict:
    cov = None if d == 2 else torch.eye(d, dtype=torch.float64)
    problem = fl.problems.GaussianSimulation(num_clients=n, alpha=1.0, samples_per_client=20, cov=cov, seed=0)
    eta = 0.1 / problem.smoothness
    sampler = fl.FALD(problem, step_size=eta, local_steps=k, chains=r, device=device, dtype=dtype, seed=0)

    def engine(steps):
        sampler.run(max(1, steps // k), progress=False)

    g = torch.Generator(device=device).manual_seed(0)

    def reference(steps):
        reference_steps(problem, r, k, eta, steps, g, dtype, device)

    ours = measure(engine, seconds, device) * 1.0
    ours = max(1, int(ours))  # steps/s (engine rounds * K)
    ref = measure(reference, seconds, device)
    return {"shape": (r, n, d), "K": k, "engine": ours, "reference": ref, "ratio": ours / ref}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    ap.add_argument("--seconds", type=float, default=3.0, help="minimum duration of each timed call")
    ap.add_argument("--local-steps", type=int, default=10)
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    print(f"device={device} dtype={args.dtype} torch={torch.__version__} threads={torch.get_num_threads()} K={args.local_steps}")
    print(f"{'(R, N, d)':>18} {'engine steps/s':>15} {'per-client loop':>16} {'ratio':>7}")
    for shape in [(300, 50, 2), (100, 50, 1000)]:
        res = bench(*shape, args.local_steps, dtype, device, args.seconds)
        print(f"{str(res['shape']):>18} {res['engine']:>15.1f} {res['reference']:>16.2f} {res['ratio']:>7.1f}x")


if __name__ == "__main__":
    main()
