"""FA-LD steps per second: the engine against baselines and a roofline, measured in one run.

For each shape (R chains, N clients, d) and dtype the script times, in the same process:

- engine:      ``FALD.run`` on the paper's Gaussian simulation (affine fast path of
               :mod:`fedlangevin.fald.steppers`), including the per-round synchronisation
               and bookkeeping;
- general:     the same problem behind a plain ``grad`` callable (no affine structure), so
               the engine takes its general path (``GradientStepper``);
- vectorised:  the straightforward vectorised form, ``fald_round`` without a round kernel
               (one ``local_step`` per step: fresh gradient tensor, noise through ``add_noise_``);
- loop:        a straightforward first implementation: a Python loop over clients, each
               gradient computed from the client's data points;
- roofline:    the work a step cannot avoid, timed bare on this machine: drawing the R N d
               standard normals (float32, the engine's default noise precision) plus, when
               d > SMALL_DIM, one (R N x d) @ (d x d) product in the state's dtype, or else
               one pass over the state (a copy).

Ratios (engine / loop, engine / roofline) are measured within one run, so they hold on a
busy machine where absolute numbers do not. Small rounds run single-threaded in the engine
(see ``fedlangevin.fald.steppers.round_threads``); the roofline is timed the same way.

    python benchmarks/bench_step.py [--seconds 2] [--shapes 300,50,2 300,1,2 100,50,1000] [--local-steps 10 1]
                                    [--dtypes float64 float32]
    python benchmarks/bench_step.py --crossover     # coordinate-major vs matrix-product kernel by d
    python benchmarks/bench_step.py --engine-only   # the engine column only (compare two checkouts)

Rows: every shape at K = 10 and K = 1 local steps. At K = 1 every step is a round, so the
K = 1 / K = 10 ratio printed after each shape is the share of a step the per-round work
(participation draw, synchronisation, bookkeeping) leaves; the (300, 1, 2) row (N = 1) is
almost nothing but that per-round work. ``--engine-only`` times only ``FALD.run`` with the
interleaved best-of passes; it runs against any checkout of the package
(``PYTHONPATH=<checkout> python benchmarks/bench_step.py --engine-only``), so two versions can
be compared alternately in one session.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import fedlangevin as fl
from fedlangevin.fald.kernel import FALDState, fald_round
from fedlangevin.fald.noise import noise_scales
from fedlangevin.fald.steppers import SMALL_DIM, make_stepper, round_threads


class GradientOnly(fl.problems.FederatedProblem):
    """A problem that exposes only ``grad``: the engine cannot see that it is affine."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.num_clients, self.dim, self.weights = inner.num_clients, inner.dim, inner.weights

    def grad(self, theta, *, batch_size=None, generator=None):
        return self.inner.grad(theta, batch_size=batch_size, generator=generator)

    def to(self, device=None, dtype=None):
        return GradientOnly(self.inner.to(device, dtype))


def make_problem(n: int, d: int, seed: int = 0):
    """The paper's simulation for d = 2; for larger d a dense, well-conditioned Sigma (so that
    the affine map is a genuine d x d product, not a diagonal one)."""
    if d == 2:
        return fl.problems.GaussianSimulation(num_clients=n, alpha=1.0, samples_per_client=20, seed=seed)
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    cov = (q * torch.logspace(0, 1, d, dtype=torch.float64)) @ q.T
    return fl.problems.GaussianSimulation(num_clients=n, alpha=1.0, samples_per_client=20, cov=0.5 * (cov + cov.T),
                                          seed=seed)


def loop_steps(problem, chains: int, k: int, eta: float, steps: int, generator, dtype):
    """Straightforward implementation: per-client Python loop, gradients from data points."""
    n, d = problem.num_clients, problem.dim
    data = problem.data.to(dtype)
    sizes = problem.client_sizes.tolist()
    prec = torch.linalg.inv(problem.cov).to(dtype)
    p = problem.weights.tolist()
    theta = torch.zeros(chains, d, dtype=dtype)
    clients = [theta.clone() for _ in range(n)]
    for step in range(steps):
        for c in range(n):
            x = data[c, : sizes[c]]
            grad = (clients[c][:, None, :] - x[None]).sum(1) @ prec / p[c]
            noise = torch.randn(chains, d, generator=generator, dtype=dtype)
            clients[c] = clients[c] - eta * grad + math.sqrt(2 * eta / p[c]) * noise
        if (step + 1) % k == 0:
            theta = sum(p[c] * clients[c] for c in range(n))
            clients = [theta.clone() for _ in range(n)]
    return theta


def rate(fn, seconds: float, start: int, repeats: int = 3) -> float:
    """Steps/s of fn(steps): grows steps (multiples of ``start``) until one call lasts
    >= seconds / repeats, then keeps the best of ``repeats`` such calls (as timeit does: on a
    shared machine the fastest call is the one least disturbed by other processes)."""
    steps, target = start, seconds / repeats
    while True:
        t0 = time.perf_counter()
        fn(steps)
        dt = time.perf_counter() - t0
        if dt >= target or steps >= 10_000_000:
            break
        steps = max(steps + start, int(steps * min(10.0, max(2.0, 1.2 * target / max(dt, 1e-4)))))
        steps = start * math.ceil(steps / start)
    best = dt
    for _ in range(repeats - 1):
        t0 = time.perf_counter()
        fn(steps)
        best = min(best, time.perf_counter() - t0)
    return steps / best


def _single_threaded_if_small(numel, fn, *args):
    """The loop gets the engine's thread policy too, so the ratio compares implementations,
    not OpenMP contention."""
    with round_threads(numel):
        return fn(*args)


def roofline(r: int, n: int, d: int, dtype, seconds: float) -> dict:
    g = torch.Generator().manual_seed(1)
    noise = torch.empty(r, n, d, dtype=torch.float32)
    state = torch.randn(r * n, d, dtype=dtype)
    out = torch.empty_like(state)
    m = torch.randn(d, d, dtype=dtype)

    def timed(op):
        def fn(steps):
            with round_threads(r * n * d):
                for _ in range(steps):
                    op()
        return 1.0 / rate(fn, seconds, 1, repeats=2)

    t_noise = timed(lambda: noise.normal_(generator=g))
    if d > SMALL_DIM:
        t_map, what = timed(lambda: torch.mm(state, m, out=out)), "matmul"
    else:
        t_map, what = timed(lambda: out.copy_(state)), "copy"
    return {"steps_per_s": 1.0 / (t_noise + t_map), "noise_us": 1e6 * t_noise, "map_us": 1e6 * t_map, "map": what}


def engine_rate(r: int, n: int, d: int, k: int, dtype, seconds: float, passes: int = 3) -> float:
    """Steps/s of ``FALD.run`` alone (best of ``passes``)."""
    problem = make_problem(n, d)
    engine = fl.FALD(problem, step_size=0.1 / problem.smoothness, local_steps=k, chains=r, dtype=dtype, seed=0)
    return max(rate(lambda s: engine.run(s // k, progress=False), seconds, k, repeats=2) for _ in range(passes))


def bench(r: int, n: int, d: int, k: int, dtype, seconds: float, passes: int = 2) -> dict:
    problem = make_problem(n, d)
    eta = 0.1 / problem.smoothness
    engine = fl.FALD(problem, step_size=eta, local_steps=k, chains=r, dtype=dtype, seed=0)
    general = fl.FALD(GradientOnly(problem), step_size=eta, local_steps=k, chains=r, dtype=dtype, seed=0)
    work = problem.to(dtype=dtype)
    scales = noise_scales(problem.weights, 1.0, 0.0, dtype=dtype, noise_dtype=torch.float32)
    p = problem.weights.to(dtype)
    g = torch.Generator().manual_seed(0)
    state = [FALDState(theta=torch.zeros(r, d, dtype=dtype))]

    def vectorised(steps):
        for _ in range(steps // k):
            state[0], _ = fald_round(state[0], work, [eta] * k, scales, fl.Full(), p, g)

    timed = {
        "engine": lambda: rate(lambda s: engine.run(s // k, progress=False), seconds, k, repeats=2),
        "general": lambda: rate(lambda s: general.run(s // k, progress=False), seconds, k, repeats=2),
        "vectorised": lambda: rate(vectorised, seconds, k, repeats=2),
        "roofline": lambda: roofline(r, n, d, dtype, seconds),
    }
    # Interleaved passes (the order rotates), best of all: the load of a shared machine
    # changes over minutes, and a ratio of two numbers measured at different moments would
    # carry that change.
    res: dict = {}
    names = list(timed)
    for i in range(passes):
        for name in names[i % len(names):] + names[: i % len(names)]:
            value = timed[name]()
            if name == "roofline":
                if name not in res or value["steps_per_s"] > res[name]["steps_per_s"]:
                    res[name] = value
            else:
                res[name] = max(res.get(name, 0.0), value)
    res["loop"] = rate(lambda s: _single_threaded_if_small(r * n * d, loop_steps, problem, r, k, eta, s, g, dtype),
                       seconds, 1, repeats=1 if d > 100 else 3)
    return res


def crossover(seconds: float) -> None:
    from fedlangevin.problems import QuadraticProblem

    r, n = 300, 50
    print(f"coordinate-major ('small') vs matrix-product ('dense') affine kernel, (R, N) = ({r}, {n}), float64, K=10")
    print(f"{'d':>4} {'hessian':>10} {'small steps/s':>14} {'dense steps/s':>14}")
    for d in (2, 3, 4, 5, 6, 8, 10):
        gen = torch.Generator().manual_seed(d)
        for per_client in (False, True):
            shape = (n, d, d) if per_client else (d, d)
            q = torch.randn(shape, generator=gen, dtype=torch.float64)
            a = q @ q.transpose(-1, -2) / d + torch.eye(d, dtype=torch.float64)
            problem = QuadraticProblem(a, torch.randn(n, d, generator=gen, dtype=torch.float64), torch.full((n,), 1 / n, dtype=torch.float64))
            scales = noise_scales(problem.weights, 1.0, 0.0, dtype=torch.float64, noise_dtype=torch.float32)
            theta = torch.zeros(r, d, dtype=torch.float64)
            out = []
            for kernel in ("small", "dense"):
                st = make_stepper(problem, torch.float64, "cpu", kernel=kernel)

                def fn(steps, st=st):
                    with round_threads(r * n * d):
                        for _ in range(steps // 10):
                            st.local_steps(theta, [1e-3] * 10, scales, g)

                g = torch.Generator().manual_seed(0)
                out.append(rate(fn, seconds, 10))
            print(f"{d:>4} {'per-client' if per_client else 'shared':>10} {out[0]:>14.0f} {out[1]:>14.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="minimum duration of each timed call")
    ap.add_argument("--local-steps", type=int, nargs="+", default=[10, 1], help="values of K (default: %(default)s)")
    ap.add_argument("--shapes", nargs="+", default=["300,50,2", "300,1,2", "100,50,1000"], help="R,N,d shapes")
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    ap.add_argument("--passes", type=int, default=2, help="interleaved measurement passes, best kept (default: %(default)s)")
    ap.add_argument("--crossover", action="store_true", help="time the two affine kernels for d = 2..10 instead")
    ap.add_argument("--engine-only", action="store_true", help="time only the engine column (FALD.run)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, K in {args.local_steps}, CPU, "
          f"fedlangevin from {fl.__file__}")
    if args.crossover:
        crossover(args.seconds)
        return
    if args.engine_only:
        print(f"{'(R, N, d)':>16} {'dtype':>8} {'K':>4} {'engine steps/s':>15}")
        for text in args.shapes:
            r, n, d = (int(v) for v in text.split(","))
            for name in args.dtypes:
                for k in args.local_steps:
                    value = engine_rate(r, n, d, k, getattr(torch, name), args.seconds, args.passes)
                    print(f"{str((r, n, d)):>16} {name:>8} {k:>4} {value:>15.4g}", flush=True)
        return
    head = (f"{'(R, N, d)':>16} {'dtype':>8} {'K':>4} {'engine':>9} {'general':>9} {'vectorised':>10} {'loop':>8} "
            f"{'roofline':>9} {'eng/loop':>9} {'eng/roof':>9} {'gen/roof':>9}   roofline parts (us/step)")
    print("steps per second (local steps of all chains and clients)")
    print(head)
    print("-" * len(head))
    for text in args.shapes:
        r, n, d = (int(v) for v in text.split(","))
        for name in args.dtypes:
            engine = {}
            for k in args.local_steps:
                res = bench(r, n, d, k, getattr(torch, name), args.seconds, args.passes)
                engine[k] = res["engine"]
                roof = res["roofline"]
                print(f"{str((r, n, d)):>16} {name:>8} {k:>4} {res['engine']:>9.4g} {res['general']:>9.4g} "
                      f"{res['vectorised']:>10.4g} {res['loop']:>8.3g} {roof['steps_per_s']:>9.4g} "
                      f"{res['engine'] / res['loop']:>8.1f}x {res['engine'] / roof['steps_per_s']:>9.2f} "
                      f"{res['general'] / roof['steps_per_s']:>9.2f}   "
                      f"noise {roof['noise_us']:.0f} + {roof['map']} {roof['map_us']:.0f}", flush=True)
            if 1 in engine and len(engine) > 1:
                top = max(engine)
                print(f"{'':>16} {'':>8} engine steps/s at K = 1 / at K = {top}: {engine[1] / engine[top]:.2f}", flush=True)


if __name__ == "__main__":
    main()
