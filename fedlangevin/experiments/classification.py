"""Bayesian logistic regression on real images with FA-LD: Deng et al., Sec. 7.2 (Fig. 3 and 4).

The study. A data set with a held-out test split (``digits``, ``mnist5k``, or the user's
MNIST-format files) is split into N clients (the paper: iid, N = 10); a validation set is
carved from the *training* data first and held out of every client. For each number of local
steps K (the paper: 1, 10, 20, 50, 100), FA-LD samples the posterior of a multinomial
logistic regression (:class:`~fedlangevin.problems.LogisticRegression`, prior N(0, sigma^2 I))
at temperature tau = 0.05 with minibatch gradients (the paper: 200 points per client), for the
same number of communication rounds, with several step sizes eta. One sample is kept every 10
rounds and the Bayesian model average (BMA) of all samples so far — the mean of their
predicted probabilities (:class:`diagnostics.PosteriorPredictive`) — is scored by accuracy,
Brier score and ECE (:func:`diagnostics.brier`, :func:`diagnostics.ece`) on the test set
after every sample: once averaging every sample from the start (Fig. 3) and once leaving
out the samples of a warm-up period (Fig. 4; the paper: 500 rounds).

Step size. For each K, eta is chosen by the validation score (default: the NLL of the
after-warm-up BMA at the last round, mean over chains); the test set is never used for the
choice, and the reported test curves are those of the chosen runs. The candidates form a
ladder of factors times 1/L (L = ``problem.smoothness``); ``search="grid"`` runs every
candidate, ``search="ladder"`` (default, for CPU budgets) walks the ladder: the first K
starts at ``eta_start``, every later K at the previous K's choice, tries one rung down, and
keeps stepping in the direction that improves the validation score until it stops improving
(so each K costs at least three runs, and the choice is a local optimum on the ladder).

Point estimates. Beside the BMA, the study scores single parameter vectors on the same test
set: the last FA-LD sample, the plug-in of the posterior mean (mean of the after-warm-up
samples) and the MAP (:meth:`LogisticRegression.mode`, full-batch L-BFGS on pooled data —
a centralised reference).

Use :func:`run_classification` from Python or ``fedlangevin simulate classification`` from
the shell; both write the curves as CSV and the figures as PNG.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.experiments.classification_plots import plot_curves, reliability_figure
from fedlangevin.experiments.report import progress_bar, slug, write_csv
from fedlangevin.experiments.scoring import (
    METRICS,
    bma_curves,
    final_validation,
    paired_bootstrap,
    point_scores,
    predict_probs,
    scores,
)

__all__ = [
    "ClassificationSettings",
    "ClassificationResult",
    "RunRecord",
    "DATASET_DEFAULTS",
    "METRICS",
    "paired_bootstrap",
    "plot_curves",
    "run_classification",
    "TUNE_METRICS",
]

#: the paper's numbers of local steps (Sec. 7.2)
PAPER_LOCAL_STEPS = (1, 10, 20, 50, 100)

#: validation scores that can choose eta per K (test statistics: :data:`~fedlangevin.experiments.scoring.METRICS`)
TUNE_METRICS = ("nll", "brier", "accuracy", "ece")

#: per data set defaults of the settings left as ``None``, sized for a CPU: with one thread on
#: 2 cores, digits took 13 minutes (machine under load) and mnist5k 14 minutes (machine idle);
#: docs/classification.md reports both runs.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "digits": dict(batch_size=50, rounds=1000, warmup=200, chains=2),
    "mnist5k": dict(batch_size=200, rounds=500, warmup=100, chains=1),
}
_GENERIC_DEFAULTS = dict(batch_size=200, rounds=500, warmup=100, chains=1)

#: default ladder of step sizes, as multiples of 1/L
ETA_FACTORS = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)


@dataclass(frozen=True)
class ClassificationSettings:
    """Settings of the study (``None``: the data set's default in :data:`DATASET_DEFAULTS`).

    Parameters
    ----------
    dataset : ``"digits"``, ``"mnist5k"``, a folder with the four MNIST-format IDX files, or
        an ``.npz`` file (see :func:`fedlangevin.data.load_dataset`).
    local_steps : the values of K compared (the paper: 1, 10, 20, 50, 100).
    rounds : communication rounds per run (the same for every K: an equal budget).
    warmup : rounds whose samples the "with warm-up" average leaves out (the paper: 500).
    thin : keep one sample every ``thin`` rounds (the paper: 10).
    temperature : tau (the paper: 0.05).
    num_clients, split : N clients and the split (``"iid"``, ``"label_skew"`` with
        ``classes_per_client``, ``"dirichlet"`` with ``dirichlet_alpha``).
    batch_size : minibatch per client and local step (the paper: 200; at most the smallest
        client's size).
    prior_scale : sigma of the N(0, sigma^2 I) prior.
    eta_factors : the candidate step sizes as multiples of 1/L, L = ``problem.smoothness``
        (an upper bound on the clients' smoothness, so usable steps are larger than 1/L);
        ``step_sizes`` gives the candidates as absolute values instead.
    search : ``"ladder"`` (walk the sorted candidates from ``eta_start``, see the module
        docstring) or ``"grid"`` (run every candidate for every K).
    eta_start : the candidate (a factor, or an absolute step with ``step_sizes``) the ladder
        starts from for the first K (default: 16 with the default factors, else the middle).
    tune_metric : validation score that picks eta per K (``"nll"``, ``"brier"``,
        ``"accuracy"``, ``"ece"``), of the after-warm-up BMA at the last round.
    validation_fraction : share of each class of the training data held out for tuning.
    test_fraction : test share for the bundled data sets (files bring their own test split).
    chains : independent chains per run (curves are chain means).
    seed : seeds the data split, the validation split and the sampler.
    dtype : ``"float32"`` (default, about 2x faster on CPU) or ``"float64"``.
    n_bins : ECE bins (equal width, Guo et al. 2017).
    """

    dataset: str = "digits"
    local_steps: tuple[int, ...] = PAPER_LOCAL_STEPS
    rounds: int | None = None
    warmup: int | None = None
    thin: int = 10
    temperature: float = 0.05
    num_clients: int = 10
    split: str = "iid"
    classes_per_client: int = 2
    dirichlet_alpha: float = 0.5
    batch_size: int | None = None
    prior_scale: float = 1.0
    eta_factors: tuple[float, ...] = ETA_FACTORS
    step_sizes: tuple[float, ...] | None = None
    search: str = "ladder"
    eta_start: float | None = None
    tune_metric: str = "nll"
    validation_fraction: float = 0.15
    test_fraction: float = 0.2
    chains: int | None = None
    seed: int = 0
    dtype: str = "float32"
    n_bins: int = 15

    def resolved(self) -> "ClassificationSettings":
        """Fill the ``None`` fields from the data set's defaults and validate everything."""
        defaults = DATASET_DEFAULTS.get(self.dataset, _GENERIC_DEFAULTS)
        s = replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})
        ks = tuple(check_int("local_steps", k, 1) for k in s.local_steps)
        if not ks or len(set(ks)) != len(ks):
            raise ValueError(f"local_steps must be a non-empty list of distinct integers >= 1; got {s.local_steps}")
        rounds = check_int("rounds", s.rounds, 1)
        thin = check_int("thin", s.thin, 1, rounds)
        warmup = check_int("warmup", s.warmup, 0, rounds - thin)
        check_real("temperature", s.temperature, low=0.0, low_open=True)
        check_int("num_clients", s.num_clients, 1)
        if s.split not in ("iid", "label_skew", "dirichlet"):
            raise ValueError(f"split must be one of iid, label_skew, dirichlet; got {s.split!r}")
        check_int("classes_per_client", s.classes_per_client, 1)
        check_real("dirichlet_alpha", s.dirichlet_alpha, low=0.0, low_open=True)
        if s.batch_size is not None:
            check_int("batch_size", s.batch_size, 1)
        check_real("prior_scale", s.prior_scale, low=0.0, low_open=True)
        name, values = ("step_sizes", s.step_sizes) if s.step_sizes is not None else ("eta_factors", s.eta_factors)
        grid = tuple(sorted({check_real(name, e, low=0.0, low_open=True) for e in values}))
        if not grid:
            raise ValueError(f"{name} must hold at least one value")
        s = replace(s, **{name: grid})
        if s.search not in ("ladder", "grid"):
            raise ValueError(f"search must be 'ladder' or 'grid'; got {s.search!r}")
        if s.eta_start is None:
            start = 16.0 if s.step_sizes is None and 16.0 in grid else grid[(len(grid) - 1) // 2]
            s = replace(s, eta_start=start)
        elif s.eta_start not in grid:
            raise ValueError(f"eta_start must be one of the {name} {list(grid)}; got {s.eta_start!r}")
        if s.tune_metric not in TUNE_METRICS:
            raise ValueError(f"tune_metric must be one of {', '.join(TUNE_METRICS)}; got {s.tune_metric!r}")
        check_real("validation_fraction", s.validation_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
        check_real("test_fraction", s.test_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
        check_int("chains", s.chains, 1)
        check_int("seed", s.seed, 0)
        if s.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64'; got {s.dtype!r}")
        check_int("n_bins", s.n_bins, 1)
        return replace(s, local_steps=ks, rounds=rounds, thin=thin, warmup=warmup)


@dataclass
class RunRecord:
    """One FA-LD run (one K, one eta, all chains).

    ``draw_rounds`` (D,): the rounds of the kept samples. ``test_curves[mode][metric]`` is a
    (chains, D) array of the test score of the BMA after each sample, for ``mode`` ``"all"``
    (every sample from the start, Fig. 3) and ``"after_warmup"`` (NaN until the first sample
    after the warm-up, Fig. 4). ``validation[metric]``: per-chain scores of the final
    after-warm-up BMA on the validation set. ``point[name][metric]``: per-chain test scores of
    the single-parameter predictors ``"last_draw"`` and ``"posterior_mean"``.
    """

    local_steps: int
    step_size: float
    factor: float | None
    diverged: bool
    seconds: float
    draw_rounds: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    test_curves: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    validation: dict[str, np.ndarray] = field(default_factory=dict)
    point: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    message: str = ""
    selected: bool = False

    def final(self, mode: str = "after_warmup") -> dict[str, float]:
        """Chain-mean test scores of the BMA at the last round."""
        return {m: float(np.mean(self.test_curves[mode][m][:, -1])) for m in METRICS}

    def validation_score(self, metric: str) -> float:
        return float(np.mean(self.validation[metric]))


@dataclass
class ClassificationResult:
    """What :func:`run_classification` returns: settings, data summary, every run, the eta
    chosen per K, and the MAP's test scores."""

    settings: ClassificationSettings
    dataset: str
    sizes: dict[str, int]
    smoothness: float
    runs: list[RunRecord]
    chosen: dict[int, RunRecord]
    map_scores: dict[str, float]
    seconds: float
    #: per K: ECE(BMA) - ECE(MAP) and ECE(BMA) - ECE(single sample) on the test set (chain 0)
    #: with 90% paired-bootstrap intervals over test points
    bootstrap: dict[int, dict[str, float]] = field(default_factory=dict)
    #: test-set probabilities behind the reliability figure ({"labels", "probs": {name: (n, C)}})
    reliability: dict[str, Any] | None = field(default=None, repr=False)

    # -- tables -------------------------------------------------------------------------------
    def final_rows(self) -> list[dict[str, Any]]:
        """One row per K: chosen eta and the final test scores of the BMA (with and without
        warm-up) and of the single-parameter predictors (chain means)."""
        rows = []
        for k in self.settings.local_steps:
            run = self.chosen.get(k)
            if run is None:
                rows.append({"dataset": self.dataset, "K": k, "step_size": float("nan"), "status": "all step sizes diverged"})
                continue
            row: dict[str, Any] = {"dataset": self.dataset, "K": k, "step_size": run.step_size,
                                   "eta_factor": run.factor, "status": "ok"}
            for mode, tag in (("after_warmup", "bma"), ("all", "bma_nowarmup")):
                for m, v in run.final(mode).items():
                    row[f"{tag}_{m}"] = v
            for name in ("single_draw", "posterior_mean", "last_draw"):
                for m in METRICS:
                    row[f"{name}_{m}"] = float(np.mean(run.point[name][m]))
            for key, value in self.bootstrap.get(k, {}).items():
                row[key] = value
            rows.append(row)
        return rows

    def tuning_rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            row: dict[str, Any] = {"dataset": self.dataset, "K": run.local_steps, "step_size": run.step_size,
                                   "eta_factor": run.factor, "diverged": run.diverged, "selected": run.selected,
                                   "seconds": round(run.seconds, 2)}
            for m in METRICS:
                row[f"val_{m}"] = run.validation_score(m) if not run.diverged else float("nan")
            for m in METRICS:
                row[f"test_{m}"] = run.final()[m] if not run.diverged else float("nan")
            rows.append(row)
        return rows

    def curve_rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            if run.diverged:
                continue
            for mode in ("all", "after_warmup"):
                curves = run.test_curves[mode]
                for j, r in enumerate(run.draw_rounds):
                    if mode == "after_warmup" and r <= self.settings.warmup:
                        continue
                    row: dict[str, Any] = {"dataset": self.dataset, "K": run.local_steps, "step_size": run.step_size,
                                           "selected": run.selected, "mode": mode, "warmup": self.settings.warmup,
                                           "round": int(r)}
                    for m in METRICS:
                        row[m] = float(np.mean(curves[m][:, j]))
                    rows.append(row)
        return rows

    def table(self) -> str:
        """Plain-text summary: chosen eta and final test scores per K, then the MAP."""
        s = self.settings
        head = (f"{self.dataset}: n_train={self.sizes['train']} (N={s.num_clients} {s.split} clients), "
                f"n_val={self.sizes['validation']}, n_test={self.sizes['test']}, d={self.sizes['dim']}, "
                f"tau={s.temperature:g}, batch={s.batch_size}, {s.rounds} rounds, warm-up {s.warmup}, "
                f"one sample / {s.thin} rounds, {s.chains} chain(s), eta chosen by validation {s.tune_metric}")
        cols = (f"{'K':>4} {'eta':>9} | {'acc':>6} {'Brier':>6} {'ECE':>6} {'NLL':>6} | {'acc':>6} {'Brier':>6} "
                f"{'ECE':>6} | {'acc':>6} {'Brier':>6} {'ECE':>6} {'NLL':>6} | {'acc':>6} {'ECE':>6} | {'ECE(BMA) - ECE(MAP)':>27}")
        top = (f"{'':>4} {'':>9} | {'BMA after warm-up':<27} | {'BMA, no warm-up':<20} | "
               f"{'one sample (mean over samples)':<27} | {'post. mean':<13} | {'test, 90% paired bootstrap':>27}")
        lines = [head, "", top, cols, "-" * len(cols)]
        for row in self.final_rows():
            if row["status"] != "ok":
                lines.append(f"{row['K']:>4} {'-':>9} | {row['status']}")
                continue
            boot = ""
            if "ece_bma_minus_map" in row:
                boot = (f"{row['ece_bma_minus_map']:+.4f} [{row['ece_bma_minus_map_lo90']:+.4f}, "
                        f"{row['ece_bma_minus_map_hi90']:+.4f}]")
            lines.append(
                f"{row['K']:>4} {row['step_size']:>9.3g} | {row['bma_accuracy']:>6.4f} {row['bma_brier']:>6.4f} "
                f"{row['bma_ece']:>6.4f} {row['bma_nll']:>6.4f} | {row['bma_nowarmup_accuracy']:>6.4f} "
                f"{row['bma_nowarmup_brier']:>6.4f} {row['bma_nowarmup_ece']:>6.4f} | "
                f"{row['single_draw_accuracy']:>6.4f} {row['single_draw_brier']:>6.4f} {row['single_draw_ece']:>6.4f} "
                f"{row['single_draw_nll']:>6.4f} | {row['posterior_mean_accuracy']:>6.4f} "
                f"{row['posterior_mean_ece']:>6.4f} | {boot:>27}"
            )
        m = self.map_scores
        lines.append(f"MAP (L-BFGS, pooled data): acc {m['accuracy']:.4f}, Brier {m['brier']:.4f}, "
                     f"ECE {m['ece']:.4f}, NLL {m['nll']:.4f}")
        lines.append(f"total time {self.seconds:.0f} s")
        return "\n".join(lines)

    # -- files --------------------------------------------------------------------------------
    def write(self, out: str | Path) -> list[Path]:
        """Write ``<dataset>_{final,tuning,curves}.csv``, ``<dataset>_curves.png`` and
        ``<dataset>_reliability.png`` into ``out``; returns the paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        stem = slug(self.dataset)
        paths = []
        for name, rows in (("final", self.final_rows()), ("tuning", self.tuning_rows()), ("curves", self.curve_rows())):
            path = out / f"{stem}_{name}.csv"
            write_csv(path, rows)
            paths.append(path)
        paths.append(self.curves_figure(out / f"{stem}_curves.png"))
        if self.reliability is not None:
            paths.append(self.reliability_figure(out / f"{stem}_reliability.png"))
        return paths

    def curves_figure(self, path: str | Path) -> Path:
        """Accuracy, Brier and ECE of the test BMA against communication rounds, one line per K
        (its chosen eta): top row without warm-up (Fig. 3), bottom row with (Fig. 4)."""
        s = self.settings
        title = (f"FA-LD, Bayesian logistic regression on {self.dataset}: N = {s.num_clients} {s.split} clients, "
                 f"tau = {s.temperature:g}, batch {s.batch_size}/client, one sample every {s.thin} rounds, "
                 f"{s.chains} chain(s), eta tuned per K on validation {s.tune_metric}")
        return plot_curves(self.curve_rows(), path, title=title, warmup=s.warmup)

    def reliability_figure(self, path: str | Path) -> Path:
        """Reliability diagrams on the test set: the after-warm-up BMA of the K with the best
        validation score, its posterior-mean plug-in, and the MAP."""
        return reliability_figure(self.reliability, self.dataset, self.settings.n_bins, path)


# -- the study -------------------------------------------------------------------------------------


def run_classification(
    settings: ClassificationSettings | None = None,
    *,
    progress: bool | None = None,
    log=None,
    **overrides: Any,
) -> ClassificationResult:
    """Run the study (see the module docstring); keyword arguments override ``settings``.

    ``progress``: a progress bar over all local steps on stderr (default: only on a TTY);
    ``log``: a callable receiving one line per finished run (e.g. ``print``).
    """
    import fedlangevin as fl
    from fedlangevin.data import load_dataset, make_partition
    from fedlangevin.problems import LogisticRegression

    t_start = time.perf_counter()
    settings = replace(settings or ClassificationSettings(), **overrides).resolved()
    s = settings
    data = load_dataset(s.dataset, test_fraction=s.test_fraction, seed=s.seed)
    train, (X_val, y_val) = data.validation_split(s.validation_fraction, seed=s.seed)
    parts = make_partition(s.split, train.y_train, s.num_clients, torch.Generator().manual_seed(s.seed),
                           classes_per_client=s.classes_per_client, alpha=s.dirichlet_alpha,
                           min_size=s.batch_size or 1)
    problem = LogisticRegression.from_partition(train.X_train, train.y_train, parts,
                                                num_classes=data.num_classes, prior_scale=s.prior_scale)
    smallest = int(problem.client_sizes.min())
    if s.batch_size is not None and s.batch_size > smallest:
        raise ValueError(f"batch_size={s.batch_size} is larger than the smallest client ({smallest} points); "
                         f"choose batch_size <= {smallest}")
    scoring = problem.to(dtype=torch.float64)
    L = problem.smoothness
    if s.step_sizes is not None:
        candidates = [(eta, None) for eta in s.step_sizes]
        start = s.step_sizes.index(s.eta_start)
    else:
        candidates = [(f / L, f) for f in s.eta_factors]
        start = s.eta_factors.index(s.eta_start)
    dtype = torch.float32 if s.dtype == "float32" else torch.float64
    sign = -1.0 if s.tune_metric == "accuracy" else 1.0

    runs: list[RunRecord] = []
    samples_of: dict[int, torch.Tensor] = {}
    chosen: dict[int, RunRecord] = {}
    expected = (len(candidates) if s.search == "grid" else min(3, len(candidates))) * s.rounds * sum(s.local_steps)
    bar = progress_bar(expected, f"classification ({s.dataset})", progress, unit="step", mininterval=1.0)

    def evaluate(k: int, i: int) -> RunRecord:
        eta, factor = candidates[i]
        sampler = fl.FALD(problem, step_size=eta, local_steps=k, temperature=s.temperature,
                          chains=s.chains, batch_size=s.batch_size, dtype=dtype, seed=s.seed)
        t0 = time.perf_counter()
        try:
            trace = sampler.run(s.rounds, thin=s.thin, progress=False)
        except fl.DivergenceError as exc:
            run = RunRecord(k, eta, factor, True, time.perf_counter() - t0, message=str(exc).split(";")[0])
            if log:
                log(f"K={k:<4} eta={eta:.3g}: diverged ({run.message})")
        else:
            seconds = time.perf_counter() - t0
            rounds, samples = trace.draw_rounds, trace.samples
            run = RunRecord(
                k, eta, factor, False, seconds, draw_rounds=rounds,
                test_curves=bma_curves(scoring, samples, rounds, s.warmup, data.X_test, data.y_test, s.n_bins),
                validation=final_validation(scoring, samples, rounds, s.warmup, X_val, y_val, s.n_bins),
                point=point_scores(scoring, samples, rounds, s.warmup, data.X_test, data.y_test, s.n_bins),
            )
            samples_of[id(run)] = samples  # kept for the reliability figure
            if log:
                v, t = run.validation, run.final()
                log(f"K={k:<4} eta={eta:.3g}: val {s.tune_metric} {np.mean(v[s.tune_metric]):.4f} | "
                    f"test acc {t['accuracy']:.4f} Brier {t['brier']:.4f} ECE {t['ece']:.4f} ({seconds:.1f} s)")
        runs.append(run)
        if bar is not None:
            bar.update(s.rounds * k)
        return run

    def score(run: RunRecord) -> float:
        return math.inf if run.diverged else sign * run.validation_score(s.tune_metric)

    try:
        for k in s.local_steps:
            tried: dict[int, RunRecord] = {}

            def at(i: int) -> float:
                if i not in tried:
                    tried[i] = evaluate(k, i)
                return score(tried[i])

            if s.search == "grid":
                for i in range(len(candidates)):
                    at(i)
            else:
                i = start
                at(i)
                if i > 0 and at(i - 1) < at(i):
                    i -= 1
                    while i > 0 and at(i - 1) < at(i):
                        i -= 1
                else:
                    while i + 1 < len(candidates) and at(i + 1) < at(i):
                        i += 1
            finite = [j for j in tried if math.isfinite(score(tried[j]))]
            if finite:
                best = tried[min(finite, key=lambda j: (score(tried[j]), j))]
                best.selected = True
                chosen[k] = best
                start = min(finite, key=lambda j: (score(tried[j]), j))  # the next K starts here
    finally:
        if bar is not None:
            bar.close()

    theta_map = problem.mode()
    map_probs = predict_probs(scoring, theta_map, data.X_test)
    map_scores = scores(map_probs, data.y_test.numpy(), s.n_bins)
    result = ClassificationResult(
        settings=s, dataset=data.name,
        sizes={"train": problem.num_data, "validation": int(len(y_val)), "test": int(len(data.y_test)), "dim": problem.dim},
        smoothness=L, runs=runs, chosen=chosen, map_scores=map_scores, seconds=0.0,
    )
    labels = data.y_test.numpy()
    for k, run in chosen.items():
        keep = run.draw_rounds > s.warmup
        draws = predict_probs(scoring, samples_of[id(run)][0, keep], data.X_test)  # (D, n, C), chain 0
        bma = draws.mean(0)
        d_map = paired_bootstrap(bma, map_probs, labels, "ece", s.n_bins, seed=s.seed)
        # a single sample: the middle after-warm-up sample of chain 0
        d_one = paired_bootstrap(bma, draws[len(draws) // 2], labels, "ece", s.n_bins, seed=s.seed)
        result.bootstrap[k] = {
            "ece_bma_minus_map": d_map[0], "ece_bma_minus_map_lo90": d_map[1], "ece_bma_minus_map_hi90": d_map[2],
            "ece_bma_minus_one_draw": d_one[0], "ece_bma_minus_one_draw_lo90": d_one[1],
            "ece_bma_minus_one_draw_hi90": d_one[2],
        }
    if chosen:
        best = min(chosen.values(), key=lambda r: sign * r.validation_score(s.tune_metric))
        keep = best.draw_rounds > s.warmup
        samples = samples_of[id(best)]
        result.reliability = {
            "labels": data.y_test.numpy(),
            "probs": {
                f"BMA after warm-up, K = {best.local_steps}": predict_probs(scoring, samples[0, keep], data.X_test).mean(0),
                f"posterior-mean plug-in, K = {best.local_steps}": predict_probs(scoring, samples[0, keep].mean(0), data.X_test),
                "MAP (L-BFGS)": map_probs,
            },
        }
    result.seconds = time.perf_counter() - t_start
    return result
