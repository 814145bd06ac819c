"""Full MNIST with the samplers' defaults: the acceptance run of the scale work.

A multinomial logistic regression (:class:`~fedlangevin.problems.LogisticRegression`, prior
N(0, 1), d = 7,850) on the full MNIST training set (60,000 images, ``load_dataset("mnist")``,
installed as :mod:`fedlangevin.data.installed` describes) split iid over ``--clients`` clients,
``--batch-size`` records per client and step (default 200), ``--chains`` chains (default 4),
``--rounds`` rounds (default 400); every other setting the sampler's default (``step_size="auto"``,
warm-up = half the rounds, temperature 1, K = 1). Reported per sampler, each in a fresh process
(peak RSS is per process):

- ``wall s``: the run's wall, and how much of it was warm-up (``warm-up s``);
- ``peak MB``: the process's peak RSS (data included);
- accuracy, ECE (15 bins) and NLL on the 10,000 test images of the model average of every kept
  draw (all chains: the mean of the draws' predicted probabilities);
- R-hat and bulk ESS of the test log predictive (the mean over test images of log p(y | x, theta)
  at each draw; :func:`diagnostics.functionals`), and the worst R-hat of 16 random projections
  (:func:`diagnostics.projections`).

The anchor: the MAP of the same model and prior (scikit-learn ``LogisticRegression(C=1)``):
accuracy 0.9264, ECE 0.0060, NLL 0.2725.

    python benchmarks/bench_mnist.py [--samplers fald fahmc] [--clients 10 100] [--rounds 400]
        [--chains 4] [--batch-size 200] [--dataset mnist] [--threads 1] [--init map] [--device cuda]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import measure  # noqa: E402  (a configuration in a fresh process)

CHILD = textwrap.dedent("""
    import json, resource, sys, time
    import numpy as np
    import torch
    import fedlangevin as fl
    import diagnostics
    from fedlangevin.data import load_dataset, make_partition
    from fedlangevin.experiments.scoring import scores
    from fedlangevin.problems import LogisticRegression

    cfg = json.loads(sys.argv[1])
    torch.set_num_threads(cfg["threads"])
    data = load_dataset(cfg["dataset"])
    parts = make_partition("iid", data.y_train, cfg["clients"], torch.Generator().manual_seed(0))
    prob = LogisticRegression.from_partition(data.X_train, data.y_train, parts, num_classes=data.num_classes)
    cls = {"fald": fl.FALD, "fahmc": fl.FAHMC}[cfg["sampler"]]
    extra = {} if cfg.get("init") is None else {"init": cfg["init"]}
    sampler = cls(prob, chains=cfg["chains"], batch_size=cfg["batch_size"], seed=0, device=cfg.get("device"), **extra)
    t0 = time.perf_counter()
    trace = sampler.run(cfg["rounds"], progress=False)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gpu_peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else 0.0
    X, y = data.X_test.double(), data.y_test
    labels = y.numpy()
    samples = torch.as_tensor(np.asarray(trace.samples), dtype=torch.float64)  # (R, D, d)
    R, D = samples.shape[:2]
    bma = np.zeros((len(labels), data.num_classes))
    lpd = np.zeros((R, D))
    with torch.no_grad():
        for r in range(R):
            for j in range(D):
                p = prob.predict_proba(samples[r, j], X).numpy()
                bma += p
                lpd[r, j] = np.mean(np.log(np.maximum(p[np.arange(len(labels)), labels], 1e-300)))
    bma /= R * D
    s = scores(bma, labels, 15)
    f = diagnostics.functionals({"test_lpd": lpd})
    proj = diagnostics.projections(samples.numpy(), k=16, seed=0)
    timing = getattr(trace, "timing", None)
    print(json.dumps({"wall": wall, "peak_mb": peak, "gpu_peak_mb": gpu_peak,
        "draws": D, "step": float(np.mean(np.atleast_1d(
        np.asarray(getattr(sampler, "step_size", np.nan), dtype=float)))),
        "accuracy": s["accuracy"], "ece": s["ece"], "nll": s["nll"],
        "rhat_lpd": f.max_rhat, "ess_lpd": f.min_ess_bulk, "rhat_proj": proj.max_rhat,
        "lpd_chain_means": lpd.mean(1).tolist(), "friction": getattr(sampler, "friction", None),
        "noise_correction": None if getattr(sampler, "noise_correction", None) is None else {
            "max_fraction": sampler.noise_correction.max_fraction, "floored": sampler.noise_correction.floored,
            "removed_trace": float(sampler.noise_correction.removed.sum())}}))
""")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samplers", nargs="+", default=["fald", "fahmc"], choices=["fald", "fahmc"])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default=None, help="where the chains run, e.g. cuda (peak MB is then the CPU's; "
                    "the JSON rows add the GPU's, gpu_peak_mb)")
    ap.add_argument("--init", choices=["map"], default=None, help="init='map' (default: the sampler's, zeros)")
    ap.add_argument("--timeout", type=float, default=4 * 3600.0)
    ap.add_argument("--json", default=None, help="append each row as a JSON line to this file")
    args = ap.parse_args()
    print("| sampler | clients | wall s | peak MB | accuracy | ECE | NLL | R-hat lpd | ESS lpd | R-hat proj |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    for clients in args.clients:
        for sampler in args.samplers:
            cfg = {"sampler": sampler, "clients": clients, "rounds": args.rounds, "chains": args.chains,
                   "batch_size": args.batch_size, "dataset": args.dataset, "threads": args.threads, "init": args.init,
                   "device": args.device}
            res = measure(cfg, args.timeout, child=CHILD)
            name = {"fald": "FA-LD", "fahmc": "FA-HMC"}[sampler]
            if "error" in res:
                print(f"| {name} | {clients} | {res['error']} |", flush=True)
            else:
                print(f"| {name} | {clients} | {res['wall']:.0f} | {res['peak_mb']:,.0f} | {res['accuracy']:.4f} | "
                      f"{res['ece']:.4f} | {res['nll']:.4f} | {res['rhat_lpd']:.2f} | {res['ess_lpd']:.0f} | "
                      f"{res['rhat_proj']:.2f} |", flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps({**cfg, **res}) + "\n")


if __name__ == "__main__":
    main()
