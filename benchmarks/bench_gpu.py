"""FA-LD and FA-HMC on a GPU against the CPU of the same machine, measured in one run.

For each case, sampler, dtype and device the script builds the sampler once, runs one round to
warm up (CUDA context, allocator, first-call kernels), then times ``sampler.run(rounds)`` (the
round count grown until a call lasts ``--seconds``; best of two calls; CUDA synchronised before
the clock stops) and prints seconds per local step and per round. Cases (R chains, N clients, d):

- ``gauss-300x50x2``: the paper's Gaussian simulation (Sec. 7.1), K = 10;
- ``gauss-1000x100x1000``: a dense, well-conditioned Gaussian of d = 1,000 (the affine kernel is an
  (R N x d) @ (d x d) product per local step), K = 10;
- ``mnist-64x100x7850``: multinomial logistic regression of the full MNIST's size (60,000 records
  of 784 features, 10 classes, d = 7,850) over 100 clients, minibatches of 200 per client, K = 10.
  The records are synthetic (uniform pixels in [0, 1], random labels): the cost of a round does not
  depend on the values, and the machine running it has no data set installed;
- ``private-*``: the same with ``privacy=RecordLevel(clip=1)``: per-example gradients clipped in
  every local step (FA-LD; FA-HMC refuses privacy).

Every run uses a fixed step size and ``check_local_bias=False``: the kernel's own cost, without the
warm-up or the K > 1 check, which run on the same kernel.

``--roofline`` adds, right after the d = 1,000 case on the GPU, what a local step cannot avoid, each timed
bare: the device's copy bandwidth (a 1 GiB device-to-device copy), drawing the R N d standard
normals, one (R N x d) @ (d x d) product in the state's dtype, and the fraction of the copy
bandwidth a local step reaches counting the state's and the noise's one read and one write; then
a ``torch.profiler`` table of one round (the kernels by CUDA time), which shows what bounds it.

    python benchmarks/bench_gpu.py [--devices cpu cuda] [--dtypes float32 float64] [--cases ...]
                                   [--samplers fald fahmc] [--seconds 1.0] [--roofline] [--tf32] [--json out.json]

``--tf32`` lets float32 matrix products run on TF32 tensor cores (10 mantissa bits instead of 23;
PyTorch leaves it off by default): the d = 1,000 kernel is bound by its (R N x d) @ (d x d) product.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

import fedlangevin as fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import make_problem  # noqa: E402  (the dense Gaussian of bench_step's d > 2 rows)

K = 10
CASES = ("gauss-300x50x2", "gauss-1000x100x1000", "mnist-64x100x7850", "private-gauss-300x50x2",
         "private-mnist-64x100x7850")


def mnist_sized(num_clients: int, records: int = 60_000, features: int = 784, classes: int = 10, seed: int = 0):
    """A logistic regression of the full MNIST's shape (synthetic values, see the module)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(records, features, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (records,), generator=g)
    per = records // num_clients
    clients = [(x[i * per:(i + 1) * per], y[i * per:(i + 1) * per]) for i in range(num_clients)]
    return fl.problems.LogisticRegression(clients, num_classes=classes)


def build(case: str, sampler: str, device: str, dtype):
    """(sampler object, local steps per round), or None where the sampler refuses the case."""
    private = case.startswith("private-")
    shape = case.removeprefix("private-")
    r, n, d = (int(v) for v in shape.split("-")[1].split("x"))
    kw = dict(local_steps=K, chains=r, device=device, dtype=dtype, seed=0, check_local_bias=False)
    if shape.startswith("gauss"):
        problem = make_problem(n, d)
        eta = 0.1 / problem.smoothness
    else:
        problem = mnist_sized(n)
        eta, kw["batch_size"] = 1e-5, 200
    if private:
        if sampler == "fahmc":
            return None
        kw["privacy"] = fl.privacy.RecordLevel(clip=1.0)
    if sampler == "fald":
        return fl.FALD(problem, step_size=eta, **kw)
    return fl.FAHMC(problem, step_size=eta, friction=1.0, **kw)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def seconds_per_round(s, device: str, seconds: float) -> tuple[float, int]:
    """(best seconds per round, rounds per timed call)."""
    s.run(1, progress=False)  # warm-up: first-call costs stay out of the timing
    synchronize(device)
    rounds = 1
    while True:
        t0 = time.perf_counter()
        s.run(rounds, progress=False)
        synchronize(device)
        dt = time.perf_counter() - t0
        if dt >= seconds / 2 or rounds >= 4096:
            break
        rounds = min(4096, max(rounds * 2, math.ceil(rounds * seconds / 2 / max(dt, 1e-6))))
    t0 = time.perf_counter()
    s.run(rounds, progress=False)
    synchronize(device)
    return min(dt, time.perf_counter() - t0) / rounds, rounds


def bare(op, device: str, repeats: int = 20) -> float:
    """Best seconds of ``op()`` over ``repeats`` calls (after two warm calls)."""
    for _ in range(2):
        op()
    synchronize(device)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        op()
        synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return best


def roofline(dtype, rows: list[dict]) -> dict:
    """What one local step of gauss-1000x100x1000 on the GPU cannot avoid (see the module)."""
    r, n, d = 1000, 100, 1000
    dev = "cuda"
    size = torch.tensor([], dtype=dtype).element_size()
    big = torch.empty(2**28, dtype=torch.float32, device=dev)
    out = torch.empty_like(big)
    copy_bw = 2 * big.numel() * 4 / bare(lambda: out.copy_(big), dev)
    del big, out
    g = torch.Generator(device=dev).manual_seed(0)
    noise = torch.empty(r * n, d, dtype=torch.float32, device=dev)
    state = torch.randn(r * n, d, dtype=dtype, device=dev)
    result = torch.empty_like(state)
    m = torch.randn(d, d, dtype=dtype, device=dev)
    t_noise = bare(lambda: noise.normal_(generator=g), dev)
    t_mm = bare(lambda: torch.mm(state, m, out=result), dev)
    t_axpy = bare(lambda: result.add_(state, alpha=0.5).add_(noise, alpha=0.1), dev)
    flops = 2 * r * n * d * d
    step = [x for x in rows if x["case"] == "gauss-1000x100x1000" and x["device"] == "cuda"
            and x["dtype"] == str(dtype).removeprefix("torch.")]
    minimal_bytes = r * n * d * (2 * size + 2 * 4)  # state read + write, noise write + read
    out = {"dtype": str(dtype).removeprefix("torch."), "copy_GBps": copy_bw / 1e9, "noise_s": t_noise, "matmul_s": t_mm,
           "matmul_TFLOPs": flops / t_mm / 1e12, "axpy_s": t_axpy, "bare_step_s": t_noise + t_mm + t_axpy}
    for x in step:
        out[f"{x['sampler']}_step_s"] = x["s_per_step"]
        out[f"{x['sampler']}_bandwidth_fraction"] = minimal_bytes / x["s_per_step"] / copy_bw
        out[f"{x['sampler']}_vs_bare_step"] = x["s_per_step"] / (t_noise + t_mm + t_axpy)
    return out


def profile_round(dtype) -> str:
    """The CUDA kernels of one FA-LD round of gauss-1000x100x1000 by self CUDA time."""
    from torch.profiler import ProfilerActivity, profile

    s = build("gauss-1000x100x1000", "fald", "cuda", dtype)
    s.run(1, progress=False)
    synchronize("cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        s.run(1, progress=False)
        synchronize("cuda")
    return prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--samplers", nargs="+", default=["fald", "fahmc"], choices=["fald", "fahmc"])
    ap.add_argument("--seconds", type=float, default=1.0, help="length of one timed call (default 1 s)")
    ap.add_argument("--roofline", action="store_true", help="the d = 1,000 GPU kernel against its bare work")
    ap.add_argument("--tf32", action="store_true",
                    help="let float32 matrix products use TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)
    if "cuda" in args.devices and not torch.cuda.is_available():
        raise SystemExit("--devices cuda: no CUDA device is visible to torch")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    if "cuda" in args.devices:
        print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, TF32 matmul {args.tf32}", flush=True)
    print(f"CPU threads: {torch.get_num_threads()}", flush=True)
    rows: list[dict] = []
    report: dict = {"rows": rows}
    print(f"{'case':>28} {'sampler':>7} {'dtype':>8} {'device':>6} {'s/round':>10} {'s/step':>10} {'rounds':>6}",
          flush=True)
    for case in args.cases:
        for sampler in args.samplers:
            for name in args.dtypes:
                for device in args.devices:
                    s = build(case, sampler, device, getattr(torch, name))
                    if s is None:
                        continue
                    per_round, rounds = seconds_per_round(s, device, args.seconds)
                    del s
                    if device == "cuda":
                        torch.cuda.empty_cache()
                    row = dict(case=case, sampler=sampler, dtype=name, device=device, s_per_round=per_round,
                               s_per_step=per_round / K, rounds=rounds)
                    rows.append(row)
                    print(f"{case:>28} {sampler:>7} {name:>8} {device:>6} {per_round:>10.3e} {per_round / K:>10.3e} "
                          f"{rounds:>6}", flush=True)
                pair = {x["device"]: x["s_per_round"] for x in rows
                        if (x["case"], x["sampler"], x["dtype"]) == (case, sampler, name)}
                if "cpu" in pair and "cuda" in pair:
                    print(f"{'':>28} {'':>7} {name:>8} speed-up cuda / cpu: {pair['cpu'] / pair['cuda']:.1f}x",
                          flush=True)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        if case == "gauss-1000x100x1000" and args.roofline and "cuda" in args.devices:
            report["roofline"] = [roofline(getattr(torch, name), rows) for name in args.dtypes]
            for line in report["roofline"]:
                print("roofline " + json.dumps({k: (round(v, 6) if isinstance(v, float) else v)
                                                for k, v in line.items()}), flush=True)
            print(profile_round(getattr(torch, args.dtypes[0])), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
