"""The privacy-utility study (docs/privacy-utility.md): utility against the target epsilon of a
private FA-LD run, beside non-private FA-LD of the same rounds and a DP point estimate
(DP-FedAvg) at the same epsilon and the same accountant, in one run.

At each target epsilon (delta = 1e-5) and clip rule, per problem (5 iid clients, K = 1, full
batch, every client every round, one chain released):

- private FA-LD: ``FALD(problem, step_size=eta, chains=1, privacy=RecordLevel(clip=C))`` with
  (eta, T) from :func:`fedlangevin.experiments.privacy_utility.plan_private_run` (the budget
  solver); ``trace.privacy(delta=1e-5, chains=1).epsilon <= target`` is asserted;
- non-private FA-LD: ``FALD(problem, chains=1)`` (defaults: adapted step and M) for the same T;
- DP-FedAvg (one full-batch local step per round, per-example clipping to C, Gaussian noise of
  std z 2C on each client's clipped sum, learning rate 1 / lambda_0, the second half of the
  iterates averaged) with the private run's T and noise multiplier z, accounted by the same
  accountant through ``equivalent_step_size`` (asserted <= target).

Regressions (posteriordb): all three start at the reference posterior mean (an oracle start,
``--start zeros`` for the public one); metrics against Stan's reference: max |mean error| / sd
and the sd ratio range (FA-LD), the point's max |error| / sd (DP-FedAvg). Classification
(digits, MNIST-5k): start at zeros; test accuracy, NLL, ECE (15 bins) and Brier of the Bayesian
model average (FA-LD, at most 50 kept draws) or of the point estimate.

Clip rules: C = a quantile (``--quantiles``, default the median and the 99th percentile) of the
per-example gradient norms at a reference point (the reference posterior mean, or the MAP for
classification): it reads the data (see the docs page).

    python benchmarks/bench_privacy_utility.py --out docs/img      # the docs' table and figure (~10 min)
    python benchmarks/bench_privacy_utility.py --quick --out /tmp   # smoke run (~1 min)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fedlangevin as fl  # noqa: E402
from fedlangevin.experiments import privacy_utility as pu  # noqa: E402
from fedlangevin.experiments.posteriordb import compare, load  # noqa: E402
from fedlangevin.experiments.scoring import scores  # noqa: E402
from fedlangevin.privacy import tight_epsilon  # noqa: E402

REGRESSIONS = ("earnings-logearn_interaction_z", "kidiq_with_mom_work-kidscore_interaction_c", "nes2000-nes",
               "diamonds-diamonds")
CLASSIFICATION = ("digits", "mnist5k")
CLIENTS = 5
MAX_DRAWS = 50  # kept draws scored per classification run (thinned evenly)
SHORT = {"earnings-logearn_interaction_z": "earnings", "kidiq_with_mom_work-kidscore_interaction_c": "kidiq_mom_work",
         "nes2000-nes": "nes2000", "diamonds-diamonds": "diamonds", "digits": "digits", "mnist5k": "MNIST-5k"}


class Problem:
    """One problem of the study: the federated ``problem``, the clip reference point, the start,
    and how draws (chains, draws, d) or a point (d,) are scored."""

    def __init__(self, name: str, start: str):
        self.name, self.kind = name, ("classification" if name in CLASSIFICATION else "regression")
        if self.kind == "regression":
            self.post = load(name, clients=CLIENTS)
            self.problem = self.post.problem
            ref_u = self.post.unconstrain(self.post.reference)
            self.reference = torch.as_tensor(ref_u.mean(0))
            self.ref_var_max = float(np.linalg.eigvalsh(np.cov(ref_u.T)).max())
            self.start = self.reference.clone() if start == "reference" else torch.zeros(self.problem.dim,
                                                                                       dtype=torch.float64)
        else:
            from fedlangevin.data import load_digits, load_mnist5k, make_partition
            from fedlangevin.problems import LogisticRegression

            data = load_digits() if name == "digits" else load_mnist5k()
            parts = make_partition("iid", data.y_train, CLIENTS, torch.Generator().manual_seed(0))
            self.problem = LogisticRegression.from_partition(data.X_train.double(), data.y_train, parts, prior_scale=1.0)
            self.reference = self.problem.mode()  # the MAP (L-BFGS on the pooled data): the clip's reference point
            self.ref_var_max = math.nan
            self.X_test, self.y_test = data.X_test.double(), data.y_test.numpy()
            self.start = torch.zeros(self.problem.dim, dtype=torch.float64)

    def score_draws(self, draws: np.ndarray, seconds: float) -> dict:
        if self.kind == "regression":
            row = compare(self.post, draws, seconds)
            return {"mean_err": row.max_mean_error, "sd_min": row.min_sd_ratio, "sd_max": row.max_sd_ratio}
        flat = torch.as_tensor(draws.reshape(-1, draws.shape[-1]))
        flat = flat[np.linspace(0, len(flat) - 1, min(MAX_DRAWS, len(flat))).round().astype(int)]
        return self._scores(self.problem.predict_proba(flat, self.X_test).mean(0).numpy())

    def score_point(self, theta: torch.Tensor) -> dict:
        if self.kind == "regression":
            return {"mean_err": pu.point_error(self.post, theta)}
        return self._scores(self.problem.predict_proba(theta[None], self.X_test)[0].numpy())

    def _scores(self, probs: np.ndarray) -> dict:
        return {k: float(v) for k, v in scores(probs, self.y_test, 15).items()}


def run_problem(prob: Problem, epsilons, quantiles, max_rounds: int, seed: int, log) -> list[dict]:
    rows = []
    for q in quantiles:
        clip = pu.gradient_norm_quantile(prob.problem, prob.reference, q)
        for eps in epsilons:
            plan = pu.plan_private_run(prob.problem, eps, clip=clip, max_rounds=max_rounds)
            common = dict(problem=prob.name, kind=prob.kind, target_epsilon=eps, quantile=q, clip=clip,
                          rounds=plan.rounds, step_size=plan.step_size, noise_multiplier=plan.noise_multiplier,
                          solved=plan.solved, time_ratio=plan.rounds * plan.step_size / prob.ref_var_max)
            # private FA-LD
            t0 = time.perf_counter()
            sampler = fl.FALD(prob.problem, step_size=plan.step_size, chains=1, seed=seed, init=prob.start,
                              privacy=fl.privacy.RecordLevel(clip=clip))
            trace = sampler.run(plan.rounds, progress=False)
            seconds = time.perf_counter() - t0
            spent = trace.privacy(delta=plan.delta, chains=1).epsilon
            assert spent <= eps, f"{prob.name}: private FA-LD spent epsilon {spent} > target {eps}"
            rows.append(dict(common, method="private FA-LD", epsilon=spent, seconds=seconds,
                             **prob.score_draws(np.asarray(trace.numpy()), seconds)))
            # DP-FedAvg: the same rounds and noise multiplier, accounted as the FA-LD step of the same z
            t0 = time.perf_counter()
            point = pu.dp_fedavg(prob.problem, clip=clip, noise_multiplier=plan.noise_multiplier, rounds=plan.rounds,
                                 learning_rate=pu.MAX_STEP_FACTOR * plan.public_step, seed=seed, init=prob.start)
            seconds = time.perf_counter() - t0
            mech = plan.mechanism(prob.problem)
            mech["eta"] = pu.equivalent_step_size(plan.noise_multiplier, sensitivity=mech["sensitivity"],
                                                  p_min=mech["p_min"])
            spent = tight_epsilon(**mech, delta=plan.delta)
            assert spent <= eps, f"{prob.name}: DP-FedAvg spent epsilon {spent} > target {eps}"
            rows.append(dict(common, method="DP-FedAvg", epsilon=spent, seconds=seconds, **prob.score_point(point)))
            log(rows[-2], rows[-1])
    # non-private FA-LD, the same rounds as each private run (of the first clip rule: the rounds do not
    # depend on C, eta_0 T being set by the budget in units of 1 / (n C^2))
    for row in [r for r in rows if r["method"] == "private FA-LD" and r["quantile"] == quantiles[0]]:
        t0 = time.perf_counter()
        trace = fl.FALD(prob.problem, chains=1, seed=seed, init=prob.start).run(row["rounds"], progress=False)
        seconds = time.perf_counter() - t0
        rows.append(dict(problem=prob.name, kind=prob.kind, target_epsilon=row["target_epsilon"], quantile=math.nan,
                         clip=math.nan, rounds=row["rounds"], step_size=math.nan, noise_multiplier=math.nan,
                         solved="", time_ratio=math.nan, method="FA-LD (non-private)", epsilon=math.inf,
                         seconds=seconds, **prob.score_draws(np.asarray(trace.numpy()), seconds)))
        log(rows[-1])
    return rows


def _cell(row: dict) -> str:
    if row["kind"] == "regression":
        if "sd_min" in row:
            return f"{row['mean_err']:.2f} ({row['sd_min']:.2f}-{row['sd_max']:.2f})"
        return f"{row['mean_err']:.2f}"
    return f"{row['accuracy']:.3f} / {row['nll']:.2f} / {row['ece']:.3f} / {row['brier']:.3f}"


def _label(row: dict) -> str:
    if row["method"].startswith("FA-LD"):
        return row["method"]
    return f"{row['method']}, C = q{row['quantile'] * 100:.0f}"


def tables(rows: list[dict], epsilons) -> str:
    """The utility table (rows: problem x method, columns: target epsilon) and the plan table."""
    head = "| problem | method | " + " | ".join(f"ε = {e:g}" for e in epsilons) + " |\n"
    head += "| --- | --- | " + " | ".join("---" for _ in epsilons) + " |\n"
    out = ["Regressions: max |mean error| / sd (sd ratio min-max); DP-FedAvg: the point's max |error| / sd.\n"
           "Classification: accuracy / NLL / ECE / Brier on the test set.\n\n", head]
    order = []
    for r in rows:
        key = (r["problem"], _label(r))
        if key not in order:
            order.append(key)
    order.sort(key=lambda k: (list(SHORT).index(k[0]), k[1] != "FA-LD (non-private)", "DP" in k[1], k[1]))
    for problem, label in order:
        cells = []
        for e in epsilons:
            hit = [r for r in rows if r["problem"] == problem and _label(r) == label and r["target_epsilon"] == e]
            cells.append(_cell(hit[0]) if hit else "")
        out.append(f"| {SHORT[problem]} | {label} | " + " | ".join(cells) + " |\n")
    out.append("\nThe private runs (one chain; DP-FedAvg: the same T and z): C, rounds T, step size η, noise "
               "multiplier z, accounted ε (tight accountant, δ = 1e-5), Langevin time ηT over the reference "
               "posterior's largest variance.\n\n")
    out.append("| problem | C rule | C | ε target | T | η | z | ε accounted | ηT / λ_max(Σ_ref) |\n"
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    for r in rows:
        if r["method"] != "private FA-LD":
            continue
        ratio = "-" if math.isnan(r["time_ratio"]) else f"{r['time_ratio']:.3g}"
        out.append(f"| {SHORT[r['problem']]} | q{r['quantile'] * 100:.0f} | {r['clip']:.3g} | {r['target_epsilon']:g} | "
                   f"{r['rounds']} | {r['step_size']:.3g}{' (solved)' if r['solved'] == 'step size' else ''} | "
                   f"{r['noise_multiplier']:.3g} | {r['epsilon']:.3f} | {ratio} |\n")
    return "".join(out)


def figure(rows: list[dict], epsilons, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    problems = list(dict.fromkeys(r["problem"] for r in rows))
    regs = [p for p in problems if p in REGRESSIONS]
    clss = [p for p in problems if p in CLASSIFICATION]
    labels = list(dict.fromkeys(_label(r) for r in rows))

    def style(label):  # FA-LD solid, DP-FedAvg dash-dot, non-private dotted; q50 circles, other clips squares
        if label == "FA-LD (non-private)":
            return dict(ls=":", marker="x")
        return dict(ls="-" if label.startswith("private") else "-.", marker="o" if label.endswith("q50") else "s",
                    mfc="none" if label.startswith("DP") else None)

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ncols = (1 if regs else 0) + len(clss)
    fig, axes = plt.subplots(2, max(ncols, 1), figsize=(4.2 * max(ncols, 1), 7), squeeze=False)

    def series(problem, label, key):
        xs, ys = [], []
        for e in epsilons:
            hit = [r for r in rows if r["problem"] == problem and _label(r) == label and r["target_epsilon"] == e]
            if hit and key in hit[0]:
                xs.append(e)
                ys.append(hit[0][key])
        return xs, ys

    col = 0
    if regs:
        for i, p in enumerate(regs):
            for lab in labels:
                for ax, key in ((axes[0, 0], "mean_err"), (axes[1, 0], "sd_min")):
                    xs, ys = series(p, lab, key)
                    if xs:
                        ax.plot(xs, ys, color=colors[i % len(colors)], **style(lab),
                                label=SHORT[p] if lab == labels[0] and key == "mean_err" else None)
        axes[0, 0].set(xscale="log", yscale="log", ylabel="max |mean error| / sd", title="posteriordb regressions")
        axes[0, 0].axhline(0.1, color="grey", lw=0.8)
        axes[1, 0].set(xscale="log", yscale="log", ylabel="min sd ratio (private and non-private FA-LD)",
                       xlabel="target ε (δ = 1e-5)")
        axes[1, 0].axhline(1.0, color="grey", lw=0.8)
        axes[0, 0].legend(fontsize=7)
        col = 1
    for j, p in enumerate(clss):
        for lab in labels:
            for ax, key in ((axes[0, col + j], "accuracy"), (axes[1, col + j], "nll")):
                xs, ys = series(p, lab, key)
                if xs:
                    ax.plot(xs, ys, color="k", **style(lab), label=lab if key == "accuracy" else None)
        axes[0, col + j].set(xscale="log", ylabel="test accuracy", title=SHORT[p])
        axes[1, col + j].set(xscale="log", ylabel="test NLL", xlabel="target ε (δ = 1e-5)")
    for ax in axes.flat:
        ax.set_xticks(list(epsilons))
        ax.set_xticklabels([f"{e:g}" for e in epsilons])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    # one legend of the line styles
    handles = [plt.Line2D([], [], color="k", **style(lab)) for lab in labels]
    fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True,
                    help="folder for privacy_utility.png, privacy_utility_tables.md.txt and privacy_utility.json")
    ap.add_argument("--quick", action="store_true", help="smoke run: earnings and digits, epsilon 1 and 8, T <= 300")
    ap.add_argument("--problems", nargs="+", default=None, help=f"of {', '.join(REGRESSIONS + CLASSIFICATION)}")
    ap.add_argument("--epsilons", nargs="+", type=float, default=None)
    ap.add_argument("--quantiles", nargs="+", type=float, default=[0.5, 0.99])
    ap.add_argument("--max-rounds", type=int, default=3000)
    ap.add_argument("--start", choices=("reference", "zeros"), default="reference",
                    help="start of the regressions' runs (classification always starts at zeros)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot-only", type=Path, default=None, help="redraw the figure and tables from a json of a run")
    args = ap.parse_args(argv)
    if args.plot_only is not None:
        rows = json.loads(args.plot_only.read_text())["rows"]
        for r in rows:
            r.update({k: float(v) for k, v in r.items() if isinstance(v, str) and v in ("inf", "nan")})
        epsilons = sorted({r["target_epsilon"] for r in rows})
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "privacy_utility_tables.md.txt").write_text(tables(rows, epsilons))
        figure(rows, epsilons, args.out / "privacy_utility.png")
        return 0
    torch.set_num_threads(1)
    problems = args.problems or (["earnings-logearn_interaction_z", "digits"] if args.quick
                                 else list(REGRESSIONS + CLASSIFICATION))
    epsilons = args.epsilons or ([1.0, 8.0] if args.quick else list(pu.EPSILONS))
    max_rounds = min(args.max_rounds, 300) if args.quick else args.max_rounds
    bad = [p for p in problems if p not in REGRESSIONS + CLASSIFICATION]
    if bad:
        ap.error(f"--problems: unknown {bad}; choose from {', '.join(REGRESSIONS + CLASSIFICATION)}")
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def log(*rows):
        for r in rows:
            print(f"[{time.perf_counter() - start:6.0f}s] {SHORT[r['problem']]:>14} eps={r['target_epsilon']:<4g} "
                  f"{_label(r):<26} T={r['rounds']:<5} {_cell(r)}", flush=True)

    rows = []
    for name in problems:
        rows += run_problem(Problem(name, args.start), epsilons, args.quantiles, max_rounds, args.seed, log)
    text = tables(rows, epsilons)
    print(text)
    (args.out / "privacy_utility_tables.md.txt").write_text(text)
    (args.out / "privacy_utility.json").write_text(json.dumps(
        dict(argv=sys.argv[1:], seconds=time.perf_counter() - start, rows=rows), indent=1, default=str))
    figure(rows, epsilons, args.out / "privacy_utility.png")
    print(f"wrote {args.out / 'privacy_utility.png'} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
