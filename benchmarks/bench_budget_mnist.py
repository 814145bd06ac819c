"""A budgeted private FA-LD (or FA-HMC) run on the full MNIST: the acceptance of a budget in, a private run out.

Full MNIST (``fl.data.load_dataset("mnist")``, installed locally: see fedlangevin.data.installed),
split iid into 10 clients, a multinomial logistic regression with an N(0, 1) prior, 4 chains, 400
rounds, ``privacy=RecordLevel(epsilon=2, delta=1e-5)`` with no clip given (the run plans its
private start, its clip at a private quantile of the gradient norms and its step size). Prints the
plan, ``trace.privacy(delta=1e-5)``'s epsilon (for everything released: the start and all four
chains), and the test accuracy, NLL and ECE of the model average (the mean predictive of the
second half of every chain's draws) and of the private start alone. The target: epsilon <= 2,
accuracy >= 0.88, ECE <= 0.03. ``--sampler fahmc``: the same with FA-HMC (OBABO, h planned at the
critical friction of the public curvature unless ``--friction`` is given).

    python benchmarks/bench_budget_mnist.py [--sampler fald|fahmc] [--friction G] [--rounds 400] [--chains 4]
        [--epsilon 2] [--threads 1] [--device cpu] [--dataset mnist] [--start-rounds 50]
"""

from __future__ import annotations

import argparse
import time

import torch

import fedlangevin as fl
from fedlangevin.data import make_partition
from fedlangevin.experiments.scoring import predict_probs, scores
from fedlangevin.problems import LogisticRegression


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--epsilon", type=float, default=2.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dataset", default="mnist",
                    help="mnist (default), fashion-mnist, or an MNIST-format .npz file or IDX folder")
    ap.add_argument("--sampler", choices=("fald", "fahmc"), default="fald")
    ap.add_argument("--friction", type=float, default=None, help="FA-HMC's gamma (default: critical, planned)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--start-rounds", type=int, default=None,
                    help="the private start's rounds (RecordLevel's start_rounds; default: its default, 50)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    data = fl.data.load_dataset(args.dataset)
    parts = make_partition("iid", data.y_train, 10, torch.Generator().manual_seed(0))
    problem = LogisticRegression.from_partition(data.X_train.double(), data.y_train, parts, prior_scale=1.0)
    extra = {} if args.start_rounds is None else {"start_rounds": args.start_rounds}
    budget = fl.privacy.RecordLevel(epsilon=args.epsilon, delta=args.delta, **extra)
    if args.sampler == "fahmc":
        friction = "auto" if args.friction is None else args.friction
        sampler = fl.FAHMC(problem, chains=args.chains, seed=0, privacy=budget, friction=friction, device=args.device)
    else:
        sampler = fl.FALD(problem, chains=args.chains, seed=0, privacy=budget, device=args.device)
    trace = sampler.run(rounds=args.rounds, progress=False)
    print(sampler.budget.summary())
    report = trace.privacy(delta=args.delta)
    print(f"trace.privacy(delta={args.delta:g}).epsilon = {report.epsilon:.4f} (<= {args.epsilon:g}: "
          f"{report.epsilon <= args.epsilon})")
    x_test, labels = data.X_test.double(), data.y_test.numpy()
    draws = trace.samples[:, trace.samples.shape[1] // 2:].reshape(-1, problem.dim).cpu()
    probs = sum(predict_probs(problem, theta, x_test) for theta in draws) / draws.shape[0]
    print("model average:", {k: round(v, 4) for k, v in scores(probs, labels, 15).items()})
    start = predict_probs(problem, sampler.budget.start.theta, x_test)
    print("private start:", {k: round(v, 4) for k, v in scores(start, labels, 15).items()})
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
