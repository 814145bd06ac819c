"""Cost growth: a sampling round against a minimal hand-written torch loop doing the same work.

For each configuration (sampler, d, N clients, R chains, dtype) the script compares, per
communication round, ``fl.FALD``'s or ``fl.FAHMC``'s sampling (a fixed step size, K = 1, every
client, minibatches of ``--batch`` rows per client, or all n / N where fewer, drawn with
replacement, no drift correction, draws not kept: the kernel's own cost) with a loop written
directly in torch that does the same arithmetic and nothing else:

- draw b row indices per chain and client, gather the rows, the minibatch gradient of the client's
  energy, (n / b) sum_i grad l_i(theta_c) + theta_c / sigma^2 (every client holds n / N rows,
  p_c = 1 / N),
- FA-LD: one local step of Deng et al.'s eq. 10 (rho = 0, K = 1), theta_c <- theta_c - eta grad f^c
  + sqrt(2 eta / p_c) xi_c, the noise drawn in float32 (the sampler's default ``noise_dtype``), then
  the server's average theta <- sum_c p_c theta_c (Alg. 1), broadcast to every client;
- FA-HMC (``--samplers fahmc``; friction ``--friction``, M = I, no gradient-noise correction): the
  local step B(h) A(h/2) O A(h/2) of :mod:`fedlangevin.fahmc.kernel` (BAOAB, the default splitting;
  h = ``--eta``), v <- v - h grad f^c, theta <- theta + (h/2) v, v <- a v + sqrt((1 - a^2) / p_c)
  xi_c (a = exp(-gamma h)), theta <- theta + (h/2) v, then theta and v averaged.

Two models: ``logistic``, a multinomial logistic regression with 10 classes (d = 10 (p + 1), p
features; d = 7,850 is MNIST's) whose minimal gradient is the closed form (S - Y) X_b; ``network``,
an MLP (784 - hidden - 10, ReLU) whose minimal gradient is ``torch.func.vmap(grad(loss))`` over the
R N (chain, client) pairs. The records are synthetic (uniform pixels in [0, 1], random labels): a
round's cost does not depend on the values. There are ``--records`` of them (default 60,000, MNIST's
count), fewer where the features would take more than ``--data-mb`` (the largest d).

Every configuration runs in three fresh processes:

- ``time``: both loops built once, one round each to warm up, then ``--reps`` timed calls of each,
  alternating (sampler, minimal, sampler, ...), each call ``rounds`` rounds long with ``rounds``
  grown until a call lasts ``--seconds``; per round: the median over the calls; ``ratio``: sampler /
  minimal;
- ``sampler`` and ``minimal``: each loop built alone, then a few rounds: the peak resident memory of
  those rounds (``VmHWM``, reset after the build, so that building the data once in float64 does not
  count) less the process's before the data was built (Python and torch), beside ``need``: the
  features and labels in the run's dtype, the chains' state R N d (FA-HMC: twice, theta and v) and
  the gathered minibatches R N b (p + 1) (what any implementation holds).

    python benchmarks/bench_cost.py [--samplers fald fahmc] [--dims 100 7850] [--clients 10] [--chains 4]
        [--dtypes float64] [--network] [--hidden 100] [--records 60000] [--batch 200] [--reps 5]
        [--seconds 1] [--threads 1] [--json out.json]

``--samplers``, ``--dims``, ``--clients`` and ``--chains`` take several values: every combination
runs. ``--network`` adds the MLP at each (sampler, clients, chains, dtype). A configuration that
fails prints its reason in the table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import gc, json, math, statistics, sys, time
    import torch
    import fedlangevin as fl
    from fedlangevin.problems import LogisticRegression, NetworkProblem

    cfg = json.loads(sys.argv[1])
    torch.set_num_threads(cfg["threads"])
    dtype = getattr(torch, cfg["dtype"])
    def status(key):  # MB, from /proc/self/status (VmRSS: now, VmHWM: the peak since the last reset)
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith(key + ":")) / 1024.0

    def reset_peak():  # Linux: writing 5 to clear_refs resets VmHWM to the current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    base = status("VmRSS")
    R, N, b, eta = cfg["chains"], cfg["clients"], cfg["batch"], cfg["eta"]
    g = torch.Generator().manual_seed(0)
    n, p = cfg["records"], cfg["features"]
    m = n // N  # rows per client (iid, equal)
    n = m * N
    X = torch.rand(N, m, p, generator=g, dtype=torch.float64)
    Y = torch.randint(0, 10, (N, m), generator=g)
    b = min(b, m)  # the sampler refuses a minibatch larger than a client
    data_bytes = X.numel() * X.element_size() + Y.numel() * 8
    problem = None
    if cfg["model"] == "network":
        torch.manual_seed(0)
        hidden = cfg["hidden"]
        net = torch.nn.Sequential(torch.nn.Linear(p, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
        net = net.double()
        d = sum(q.numel() for q in net.parameters())
        if cfg["mode"] != "minimal":
            problem = NetworkProblem(net, [(X[c], Y[c]) for c in range(N)])
    else:
        d = 10 * (p + 1)
        if cfg["mode"] != "minimal":
            problem = LogisticRegression([(X[c], Y[c]) for c in range(N)], num_classes=10)
    if problem is not None:  # the problem in the run's dtype (held once: the float64 build is dropped)
        problem = problem.to(dtype=dtype)

    hmc = cfg["sampler"] == "fahmc"
    gamma = cfg["friction"]

    def make_sampler():
        if hmc:
            return fl.FAHMC(problem, step_size=eta, friction=gamma, chains=R, batch_size=b, correction=None,
                            check_local_bias=False, gradient_noise=None, dtype=dtype, seed=0)
        return fl.FALD(problem, step_size=eta, chains=R, batch_size=b, correction=None, check_local_bias=False,
                       dtype=dtype, seed=0)

    def sampler_rounds(s, rounds):
        s.run(rounds, keep_samples=False, stats=False, progress=False)

    # -- the minimal loop ---------------------------------------------------------------------
    def build_minimal(X):
        # the minimal loop on the features X (N, m, p), float64; returns rounds -> None
        gen = torch.Generator().manual_seed(1)
        scale = n / b  # (1 / p_c)(n_c / b) with p_c = 1 / N, n_c = n / N
        noise_sd = math.sqrt(2.0 * eta * N)  # sqrt(2 eta / p_c)
        if cfg["model"] == "logistic":
            Xb1 = torch.cat([X, torch.ones(N, m, 1, dtype=torch.float64)], -1).to(dtype)  # the bias column
            flat_x, flat_y = Xb1.reshape(N * m, p + 1), Y.reshape(N * m)
            offsets = (torch.arange(N) * m)[None, :, None]

            def minimal_grad(w):  # w (R, N, 10, p + 1)
                rows = (torch.rand(R, N, b, generator=gen, dtype=torch.float64) * m).long() + offsets
                rows = rows.reshape(-1)
                xb = flat_x.index_select(0, rows).view(R, N, b, p + 1)
                yb = flat_y.index_select(0, rows).view(R, N, 1, b)
                s = torch.softmax(torch.matmul(w, xb.transpose(-1, -2)), dim=-2)
                s.scatter_add_(-2, yb, torch.full_like(s[..., :1, :], -1.0))
                return torch.matmul(s, xb).mul_(scale).add_(w)

            shape = (R, N, 10, p + 1)
        else:
            from torch.func import functional_call, grad, vmap

            module = net.to(dtype)
            for q in module.parameters():
                q.requires_grad_(False)
            names = [k for k, _ in module.named_parameters()]
            shapes = [tuple(q.shape) for q in module.parameters()]
            sizes = [math.prod(s) for s in shapes]
            Xd = X.to(dtype)
            flat_x, flat_y = Xd.reshape(N * m, p), Y.reshape(N * m)
            offsets = (torch.arange(N) * m)[None, :, None]

            def loss(flat, xb, yb):
                parts = torch.split(flat, sizes)
                params = {k: v.view(s) for k, v, s in zip(names, parts, shapes)}
                return torch.nn.functional.cross_entropy(functional_call(module, params, (xb,)), yb, reduction="sum")

            per_pair = vmap(vmap(grad(loss)))

            def minimal_grad(w):  # w (R, N, d)
                rows = ((torch.rand(R, N, b, generator=gen, dtype=torch.float64) * m).long() + offsets).reshape(-1)
                xb = flat_x.index_select(0, rows).view(R, N, b, p)
                yb = flat_y.index_select(0, rows).view(R, N, b)
                return per_pair(w, xb, yb).mul_(scale).add_(w)

            shape = (R, N, d)

        state = {"w": torch.zeros(shape, dtype=dtype)}

        a = math.exp(-gamma * eta)
        refresh_sd = math.sqrt((1.0 - a * a) * N)  # sqrt(tau (1 - a^2) / p_c)
        state["v"] = torch.zeros(shape, dtype=dtype) if hmc else None  # FA-LD's loop holds no velocity

        def minimal_rounds(rounds):
            w, v = state["w"], state["v"]
            for _ in range(rounds):
                gr = minimal_grad(w)
                xi = torch.randn(shape, generator=gen, dtype=torch.float32)
                if hmc:  # BAOAB's local step B(h) A(h/2) O A(h/2), then (theta, v) averaged
                    v = v - eta * gr
                    w = w + 0.5 * eta * v
                    v = a * v + refresh_sd * xi.to(dtype)
                    w = w + 0.5 * eta * v
                    v = v.mean(1, keepdim=True).expand(shape).contiguous()
                else:
                    w = w - eta * gr + noise_sd * xi.to(dtype)
                w = w.mean(1, keepdim=True).expand(shape).contiguous()  # Alg. 1 with p_c = 1 / N, broadcast
            state["w"], state["v"] = w, v

        return minimal_rounds

    out = dict(d=d, records=n, batch=b)
    width = torch.finfo(dtype).bits / 8  # bytes per float
    rows = R * N * b * (p + 1) * width  # the gathered minibatch of every chain and client
    need = data_bytes * width / 8 + R * N * d * width * (2 if hmc else 1) + rows  # FA-HMC: theta and v
    out["need_mb"] = need / 2**20
    if cfg["mode"] == "time":
        s = make_sampler()
        minimal_rounds = build_minimal(X)
        del X
        sampler_rounds(s, 1)
        minimal_rounds(1)
        rounds = 1
        while True:
            t = time.perf_counter(); minimal_rounds(rounds); dt = time.perf_counter() - t
            if dt >= cfg["seconds"] or rounds >= 4096:
                break
            rounds = min(4096, max(rounds * 2, int(rounds * cfg["seconds"] / max(dt, 1e-9)) + 1))
        ts, tm = [], []
        for _ in range(cfg["reps"]):
            t = time.perf_counter(); sampler_rounds(s, rounds); ts.append((time.perf_counter() - t) / rounds)
            t = time.perf_counter(); minimal_rounds(rounds); tm.append((time.perf_counter() - t) / rounds)
        out.update(rounds=rounds, sampler_s=statistics.median(ts), minimal_s=statistics.median(tm),
                   sampler_all=ts, minimal_all=tm)
        out["ratio"] = out["sampler_s"] / out["minimal_s"]
    elif cfg["mode"] == "sampler":
        del X
        s = make_sampler()
        gc.collect(); reset_peak()
        sampler_rounds(s, 3)
        out["peak_mb"] = status("VmHWM") - base
    else:
        minimal_rounds = build_minimal(X)
        del X
        gc.collect(); reset_peak()
        minimal_rounds(3)
        out["peak_mb"] = status("VmHWM") - base
    print("RESULT " + json.dumps(out))
""")


def child(cfg: dict, timeout: float) -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {timeout:g} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:160]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samplers", nargs="+", default=["fald"], choices=["fald", "fahmc"])
    ap.add_argument("--friction", type=float, default=1.0, help="FA-HMC's gamma (the cost does not depend on it)")
    ap.add_argument("--dims", type=int, nargs="*", default=[100, 7850])
    ap.add_argument("--clients", type=int, nargs="+", default=[10])
    ap.add_argument("--chains", type=int, nargs="+", default=[4])
    ap.add_argument("--dtypes", nargs="+", default=["float64"], choices=["float64", "float32"])
    ap.add_argument("--network", action="store_true", help="add the MLP (784-hidden-10) at each clients x chains")
    ap.add_argument("--hidden", type=int, default=100)
    ap.add_argument("--records", type=int, default=60000)
    ap.add_argument("--data-mb", type=float, default=2048.0, help="at most this much float64 feature data")
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--eta", type=float, default=1e-6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    configs = []
    for sampler, d, n_clients, r, dt in itertools.product(args.samplers, args.dims, args.clients, args.chains,
                                                          args.dtypes):
        if d % 10 or d < 20:
            raise SystemExit(f"--dims: d = 10 (p + 1) with p >= 1 features; got {d}")
        p = d // 10 - 1
        records = min(args.records, int(args.data_mb * 2**20 / (8 * (p + 1))))
        configs.append(dict(sampler=sampler, model="logistic", features=p, records=records, clients=n_clients,
                            chains=r, dtype=dt))
    if args.network:
        for sampler, n_clients, r, dt in itertools.product(args.samplers, args.clients, args.chains, args.dtypes):
            configs.append(dict(sampler=sampler, model="network", features=784, hidden=args.hidden,
                                records=args.records, clients=n_clients, chains=r, dtype=dt))
    rows = []
    print("| sampler | model | d | clients | chains | dtype | sampler s/round | minimal s/round | ratio | sampler MB | "
          "minimal MB | need MB |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for cfg in configs:
        cfg.update(batch=args.batch, eta=args.eta, friction=args.friction, reps=args.reps, seconds=args.seconds,
                   threads=args.threads)
        row = dict(cfg)
        row.update(child(dict(cfg, mode="time"), args.timeout))
        row["sampler_mb"] = child(dict(cfg, mode="sampler"), args.timeout).get("peak_mb")
        row["minimal_mb"] = child(dict(cfg, mode="minimal"), args.timeout).get("peak_mb")
        rows.append(row)
        if "error" in row:
            print(f"| {cfg['sampler']} | {cfg['model']} | | {cfg['clients']} | {cfg['chains']} | {cfg['dtype']} | "
                  f"{row['error']} |")
            continue
        fmt = lambda v: "n/a" if v is None else f"{v:,.0f}"  # noqa: E731
        print(f"| {cfg['sampler']} | {cfg['model']} | {row['d']:,} | {cfg['clients']} | {cfg['chains']} | "
              f"{cfg['dtype']} | {row['sampler_s']:.4g} | {row['minimal_s']:.4g} | {row['ratio']:.2f} | "
              f"{fmt(row['sampler_mb'])} | {fmt(row['minimal_mb'])} | {fmt(row['need_mb'])} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
