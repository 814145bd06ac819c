"""DP-SGD (Opacus) on the full MNIST with the model of ``bench_budget_mnist.py``: the baseline of the
privacy-utility comparison (docs/privacy.md, "A budget in, a private run out").

The same multinomial logistic regression (784 pixels plus a bias, 10 classes: d = 7,850), the same
N(0, 1) prior (weight decay 1/n on the mean loss), trained by Opacus's DP-SGD with
``make_private_with_epsilon`` (Poisson sampling, per-example clipping to ``--clip``, its PRV
accountant) at (epsilon, delta); prints the test accuracy, NLL and ECE (15 bins) of the last iterate,
scored by the package's own ``fedlangevin.experiments.scoring.scores``. Several learning rates may be
given: each is one private run at the full epsilon, so picking the best on the test set is what
DP-SGD papers report and favours the baseline (its tuning is not accounted).

Adjacency: Opacus accounts add/remove-one neighbours; the package's ``RecordLevel`` accounts
substitution (sensitivity 2C), the stronger notion: at the same epsilon the comparison favours DP-SGD.

Opacus is a benchmark dependency only: ``pip install --no-deps opacus==1.6.0`` (its own
dependencies, torch, numpy, scipy and opt_einsum, are the package's).

    python benchmarks/bench_dpsgd_mnist.py [--epsilon 2] [--lr 0.25 1.0] [--epochs 5 15] [--batch 1000] [--clip 1.0]
"""

from __future__ import annotations

import argparse
import time

import torch

import fedlangevin as fl
import fedlangevin.data  # noqa: F401  (fl.data.load_dataset)
from fedlangevin.experiments.scoring import scores


def run(data, epsilon: float, delta: float, lr: float, epochs: int, batch: int, clip: float, seed: int) -> dict:
    """One DP-SGD run; returns its epsilon and test scores."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    x, y = data.X_train.float(), data.y_train.long()
    n = x.shape[0]
    model = torch.nn.Linear(x.shape[1], 10)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1.0 / n)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)
    engine = PrivacyEngine(accountant="prv")
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader, target_epsilon=epsilon, target_delta=delta,
        epochs=epochs, max_grad_norm=clip)
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.time()
    for _ in range(epochs):
        for xb, yb in loader:
            if xb.shape[0] == 0:
                continue
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
    with torch.no_grad():
        probs = torch.softmax(model(data.X_test.float()).double(), dim=1).numpy()
    out = {k: round(v, 4) for k, v in scores(probs, data.y_test.numpy(), 15).items()}
    return dict(epsilon=round(float(engine.get_epsilon(delta)), 4), lr=lr, seconds=round(time.time() - t0), **out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilon", type=float, nargs="+", default=[2.0])
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--lr", type=float, nargs="+", default=[0.25, 1.0])
    ap.add_argument("--epochs", type=int, nargs="+", default=[5, 15])
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dataset", default="mnist",
                    help="mnist (default), fashion-mnist, or an MNIST-format .npz file or IDX folder")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = fl.data.load_dataset(args.dataset)
    for eps in args.epsilon:
        for epochs in args.epochs:
            for lr in args.lr:
                print(f"DP-SGD epsilon target {eps:g}, {epochs} epochs:",
                      run(data, eps, args.delta, lr, epochs, args.batch, args.clip, args.seed), flush=True)


if __name__ == "__main__":
    main()
