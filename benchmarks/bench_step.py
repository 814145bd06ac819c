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
(see ``fedlangevin.federation.rounds.round_threads``); the roofline is timed the same way.

    python benchmarks/bench_step.py [--seconds 2] [--shapes 300,50,2 300,1,2 100,50,1000] [--local-steps 10 1]
                                    [--dtypes float64 float32]
    python benchmarks/bench_step.py --crossover     # coordinate-major vs matrix-product kernel by d
    python benchmarks/bench_step.py --engine-only   # the engine column only (compare two checkouts)
    python benchmarks/bench_step.py --engine-only --against <checkout>   # ... alternately in one process
    python benchmarks/bench_step.py --blackjax      # N = 1: K = 1 against K = 10 and BlackJAX's SGLD

Rows: every shape at K = 10 and K = 1 local steps. At K = 1 every step is a round, so the
K = 1 / K = 10 ratio printed after each shape is the share of a step the per-round work
(participation draw, synchronisation, bookkeeping) leaves; the (300, 1, 2) row (N = 1) is
almost nothing but that per-round work. ``--engine-only`` times only ``FALD.run`` with the
interleaved best-of passes; it runs against any checkout of the package
(``PYTHONPATH=<checkout> python benchmarks/bench_step.py --engine-only``), so two versions can
be compared alternately in one session; ``--against <checkout>`` times that checkout's engine in the
same process (imported from a renamed copy, ``fedlangevin_old``), alternating pass by pass.

``--blackjax`` measures the cost of a round where it is largest, N = 1 (300 chains, d = 2, one
client with 50 points of the paper's Gaussian simulation, float64, one thread), in one run with
alternating, interleaved passes, best call of each kept: the engine at K = 1 against K = 10 per
local step (goal >= 0.7x) and against BlackJAX's SGLD (``blackjax.sgld``, jit-compiled,
``jax.lax.scan`` over the steps, the chains ``jax.vmap``-ed, float64; goal >= 1x). Both sample
the same posterior N(A^{-1} b, A^{-1}) (A = n Sigma^{-1}, b = n Sigma^{-1} xbar: the one client's
quadratic form; BlackJAX gets the closed-form gradient b - A theta of the log density), with the
same step size 0.1 / L, keep every step's draw of every chain, and the script prints both
samples' means and variances next to the exact ones. BlackJAX is not a dependency: the benchmark
makes its own virtual environment, ``benchmarks/.venv-blackjax`` (git-ignored; ``python3 -m venv``,
then ``pip install jax blackjax``: jax on CPU; ``--blackjax-venv DIR`` puts it elsewhere, an
existing one is reused), writes its worker script there and runs it as a subprocess that
compiles once and then times on request, so its passes alternate with the engine's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

import fedlangevin as fl
from fedlangevin.fald.kernel import FALDState, fald_round
from fedlangevin.federation.noise import noise_scales
from fedlangevin.fald.steppers import SMALL_DIM, make_stepper
from fedlangevin.federation.rounds import round_threads


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


def renamed_copy(checkout: str) -> object:
    """The fedlangevin package of another checkout, imported under the name ``fedlangevin_old``
    (a copy in a temporary folder with its imports renamed), so that it runs in this process
    beside the current one and the two can be timed alternately."""
    import importlib
    import re
    import shutil
    import tempfile

    source = Path(checkout) / "fedlangevin"
    if not (source / "__init__.py").is_file():
        raise SystemExit(f"--against: {checkout} holds no fedlangevin package")
    target = Path(tempfile.mkdtemp(prefix="bench_step_")) / "fedlangevin_old"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.rglob("*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"\bfedlangevin(?=[.\s]|$)", "fedlangevin_old", text, flags=re.M))
    sys.path.insert(0, str(target.parent))
    return importlib.import_module("fedlangevin_old")


def engine_against(args) -> None:
    """``--engine-only --against CHECKOUT``: this package's and CHECKOUT's engine, alternately in one process."""
    old = renamed_copy(args.against)
    print(f"against {old.__file__} (a renamed copy of {args.against})")
    print(f"{'(R, N, d)':>16} {'dtype':>8} {'K':>4} {'this':>11} {'against':>11} {'this/against':>13}")
    for text in args.shapes:
        r, n, d = (int(v) for v in text.split(","))
        for name in args.dtypes:
            dtype = getattr(torch, name)
            for k in args.local_steps:
                engines = []
                for package in (fl, old):
                    problem = package.problems.GaussianSimulation(num_clients=n, alpha=1.0, samples_per_client=20, seed=0)
                    if d != 2:
                        raise SystemExit("--against: d = 2 shapes only")
                    engines.append(package.FALD(problem, step_size=0.1 / problem.smoothness, local_steps=k, chains=r,
                                                dtype=dtype, seed=0))
                best = [0.0, 0.0]
                for i in range(args.passes):
                    for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                        engine = engines[j]
                        best[j] = max(best[j], rate(lambda s: engine.run(s // k, progress=False), args.seconds, k,
                                                    repeats=2))
                print(f"{str((r, n, d)):>16} {name:>8} {k:>4} {best[0]:>11.4g} {best[1]:>11.4g} "
                      f"{best[0] / best[1]:>12.2f}x", flush=True)


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


BLACKJAX_WORKER = r"""
# Written and run by benchmarks/bench_step.py --blackjax in its own virtual environment.
import json
import sys
import time

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)
import blackjax  # noqa: E402

cfg = json.loads(sys.argv[1])
A = jnp.asarray(cfg["hessian"], dtype=jnp.float64)  # grad f = A theta - b: the energy's gradient
b = jnp.asarray(cfg["shift"], dtype=jnp.float64)
chains, dim, eta, steps = cfg["chains"], len(cfg["shift"]), cfg["step_size"], cfg["steps"]


def grad_estimator(position, minibatch):  # closed form: grad log pi(theta) = b - A theta
    return b - A @ position


sgld = blackjax.sgld(grad_estimator)


def one_step(positions, key):  # every chain's SGLD step, each with its own key
    keys = jax.random.split(key, chains)
    new = jax.vmap(lambda k, x: sgld.step(k, x, None, eta))(keys, positions)
    return new, new  # keep every step's draws, as the engine does


@jax.jit
def run(key, positions):
    return jax.lax.scan(one_step, positions, jax.random.split(key, steps))


key = jax.random.PRNGKey(cfg["seed"])
positions = jnp.zeros((chains, dim), dtype=jnp.float64)
key, sub = jax.random.split(key)
positions, draws = jax.block_until_ready(run(sub, positions))  # compile, and start from a warm state
print(json.dumps({"ready": True, "jax": jax.__version__, "blackjax": blackjax.__version__,
                  "devices": [str(d) for d in jax.devices()]}), flush=True)
for line in sys.stdin:
    repeats = int(line)
    best = float("inf")
    for _ in range(repeats):
        key, sub = jax.random.split(key)
        t0 = time.perf_counter()
        positions, draws = jax.block_until_ready(run(sub, positions))
        best = min(best, time.perf_counter() - t0)
    x = draws.reshape(-1, dim)
    print(json.dumps({"steps_per_s": steps / best, "mean": x.mean(0).tolist(), "var": x.var(0).tolist()}), flush=True)
"""


def blackjax_python(venv: Path) -> Path:
    """The interpreter of ``venv``, made first (``python -m venv`` and ``pip install jax blackjax``) if missing."""
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        print(f"making {venv} (python -m venv, pip install jax blackjax) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "jax", "blackjax"], check=True)
    return python


def blackjax_compare(args) -> None:
    """N = 1, (R, d) = (300, 2), float64: engine K = 1 and K = 10 against BlackJAX's SGLD, alternating."""
    r, steps = 300, args.steps
    problem = fl.problems.GaussianSimulation(num_clients=1, alpha=1.0, samples_per_client=50, seed=0)
    form = problem.quadratic()
    eta = 0.1 / problem.smoothness
    venv = Path(args.blackjax_venv) if args.blackjax_venv else Path(__file__).resolve().parent / ".venv-blackjax"
    python = blackjax_python(venv)
    script = venv / "bench_step_worker.py"
    script.write_text(BLACKJAX_WORKER)
    cfg = {"hessian": form.hessian.tolist(), "shift": form.shift[0].tolist(), "chains": r, "step_size": eta,
           "steps": steps, "seed": 0}
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_cpu_multi_thread_eigen=false",
               OMP_NUM_THREADS="1")
    worker = subprocess.Popen([str(python), str(script), json.dumps(cfg)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    ready = json.loads(worker.stdout.readline())
    samplers = {k: fl.FALD(problem, step_size=eta, local_steps=k, chains=r, dtype=torch.float64, seed=0) for k in (1, 10)}
    for sampler in samplers.values():
        sampler.run(1000, progress=False)  # warm: buffers made, chains near the posterior

    def engine(k: int, repeats: int) -> tuple[float, torch.Tensor]:
        best, trace = float("inf"), None
        for _ in range(repeats):
            t0 = time.perf_counter()
            trace = samplers[k].run(steps // k, progress=False)  # keeps every round's draw
            best = min(best, time.perf_counter() - t0)
        return steps / best, trace.samples

    def blackjax(repeats: int) -> tuple[float, dict]:
        worker.stdin.write(f"{repeats}\n")
        worker.stdin.flush()
        reply = json.loads(worker.stdout.readline())
        return reply["steps_per_s"], reply

    names = ["engine K=1", "engine K=10", "BlackJAX"]
    best = dict.fromkeys(names, 0.0)
    runs = {name: [] for name in names}
    last = {}
    try:
        for i in range(args.passes):
            for name in names[i % 3:] + names[: i % 3]:  # the order rotates: no contestant always first
                rate_, last[name] = (engine(1, args.repeats) if name == "engine K=1" else
                                     engine(10, args.repeats) if name == "engine K=10" else blackjax(args.repeats))
                runs[name].append(rate_)
                best[name] = max(best[name], rate_)
    finally:
        worker.stdin.close()
        worker.wait()
    print(f"torch {torch.__version__} (fedlangevin from {fl.__file__}, {torch.get_num_threads()} threads, "
          f"rounds of <= 2^18 numbers on 1); jax {ready['jax']}, blackjax {ready['blackjax']} on {ready['devices']} "
          f"(XLA_FLAGS=--xla_cpu_multi_thread_eigen=false)")
    print(f"N = 1, R = {r} chains, d = 2, 50 points, float64, eta = 0.1 / L = {eta:.4g}; {steps} steps a call, "
          f"best of {args.repeats} calls x {args.passes} alternating passes")
    mean, cov = problem.posterior()

    def numbers(values) -> str:
        return "(" + ", ".join(f"{v:.4f}" for v in values) + ")"

    print(f"{'exact':>12}: posterior mean {numbers(mean.tolist())}, variances {numbers(cov.diagonal().tolist())}")
    for name in names:  # the draws of each sampler's last timed call, all chains
        if name == "BlackJAX":
            m, v = last[name]["mean"], last[name]["var"]
        else:
            x = last[name].reshape(-1, 2)
            m, v = x.mean(0).tolist(), x.var(0).tolist()
        print(f"{name:>12}: sample mean    {numbers(m)}, variances {numbers(v)}")
    print()
    print(f"| {'engine K=1 steps/s':>18} | {'engine K=10 steps/s':>19} | {'BlackJAX steps/s':>16} | "
          f"{'K=1 / K=10 (goal >= 0.7x)':>25} | {'K=1 / BlackJAX (goal >= 1x)':>27} |")
    print(f"| {'---':>18} | {'---':>19} | {'---':>16} | {'---':>25} | {'---':>27} |")
    k1, k10, bj = best["engine K=1"], best["engine K=10"], best["BlackJAX"]
    ratio_k, ratio_bj = k1 / k10, k1 / bj
    print(f"| {k1:>18.4g} | {k10:>19.4g} | {bj:>16.4g} | "
          f"{f'{ratio_k:.2f}x ' + ('met' if ratio_k >= 0.7 else 'NOT met'):>25} | "
          f"{f'{ratio_bj:.2f}x ' + ('met' if ratio_bj >= 1.0 else 'NOT met'):>27} |")
    print()
    print("every pass (steps/s): " + "; ".join(f"{n}: " + ", ".join(f"{v:.4g}" for v in runs[n]) for n in names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="minimum duration of each timed call")
    ap.add_argument("--local-steps", type=int, nargs="+", default=[10, 1], help="values of K (default: %(default)s)")
    ap.add_argument("--shapes", nargs="+", default=["300,50,2", "300,1,2", "100,50,1000"], help="R,N,d shapes")
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    ap.add_argument("--passes", type=int, default=2, help="interleaved measurement passes, best kept (default: %(default)s)")
    ap.add_argument("--crossover", action="store_true", help="time the two affine kernels for d = 2..10 instead")
    ap.add_argument("--engine-only", action="store_true", help="time only the engine column (FALD.run)")
    ap.add_argument("--against", default=None, metavar="CHECKOUT",
                    help="--engine-only: also time CHECKOUT's engine, alternately in this process (a renamed copy)")
    ap.add_argument("--blackjax", action="store_true",
                    help="N = 1: engine K = 1 against K = 10 and BlackJAX's SGLD (makes benchmarks/.venv-blackjax)")
    ap.add_argument("--blackjax-venv", default=None, help="the BlackJAX virtual environment (default: %(default)s = "
                    "benchmarks/.venv-blackjax, made when missing)")
    ap.add_argument("--steps", type=int, default=20000, help="--blackjax: local steps a timed call (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=3, help="--blackjax: timed calls a pass (default: %(default)s)")
    args = ap.parse_args()
    if args.blackjax:
        if args.passes == 2 and "--passes" not in sys.argv:
            args.passes = 5
        blackjax_compare(args)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, K in {args.local_steps}, CPU, "
          f"fedlangevin from {fl.__file__}")
    if args.crossover:
        crossover(args.seconds)
        return
    if args.engine_only and args.against:
        engine_against(args)
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
