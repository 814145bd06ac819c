"""Bayesian logistic regression on real images with FA-LD (and FA-HMC beside it): Deng et al.,
Sec. 7.2 (Fig. 3 and 4).

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

FA-HMC. ``sampler="fahmc"`` runs the same study with FA-HMC (Liang et al. 2024) at the same K,
the ladder read as FA-LD's equivalent step: h = sqrt(2 eta), whose overdamped limit is FA-LD at
eta (``docs/fahmc.md``), friction ``friction`` (default 1), no drift correction, as FA-LD's
runs here. One study per sampler; :func:`~fedlangevin.experiments.classification_plots.plot_curves`
draws both in one figure.

Point estimates. Beside the BMA, the study scores single parameter vectors on the same test
set: the last sample, the plug-in of the posterior mean (mean of the after-warm-up
samples) and the MAP (:meth:`LogisticRegression.mode`, full-batch L-BFGS on pooled data —
a centralised reference).

Use :func:`run_classification` from Python or ``fedlangevin simulate classification`` from
the shell; both write the curves as CSV and the figures as PNG. The settings are
:class:`~fedlangevin.experiments.classification_settings.ClassificationSettings`, the result a
:class:`~fedlangevin.experiments.classification_report.ClassificationResult` (tables, files,
figures); the scores come from :mod:`~fedlangevin.experiments.scoring`, the figures from
:mod:`~fedlangevin.experiments.classification_plots`.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from fedlangevin.experiments.classification_report import ClassificationResult, RunRecord
from fedlangevin.experiments.classification_settings import ClassificationSettings
from fedlangevin.experiments.report import progress_bar
from fedlangevin.experiments.scoring import (
    bma_curves,
    final_validation,
    paired_bootstrap,
    point_scores,
    predict_probs,
    scores,
)

__all__ = ["ClassificationSettings", "ClassificationResult", "RunRecord", "run_classification"]


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
    bar = progress_bar(expected, f"classification ({s.dataset}, {s.sampler})", progress, unit="step", mininterval=1.0)

    def evaluate(k: int, i: int) -> RunRecord:
        eta, factor = candidates[i]
        common = dict(local_steps=k, temperature=s.temperature, chains=s.chains, batch_size=s.batch_size,
                      dtype=dtype, device=s.device, seed=s.seed, check_local_bias=False, correction=None)
        if s.sampler == "fald":  # the paper's FA-LD at its fixed K, on purpose
            sampler = fl.FALD(problem, step_size=eta, **common)
        else:  # FA-HMC at the step whose overdamped limit is FA-LD's eta (eta = h^2 / 2)
            sampler = fl.FAHMC(problem, step_size=math.sqrt(2.0 * eta), friction=s.friction, **common)
        t0 = time.perf_counter()
        try:
            trace = sampler.run(s.rounds, thin=s.thin, progress=False)
        except fl.DivergenceError as exc:
            run = RunRecord(k, eta, factor, True, time.perf_counter() - t0, message=str(exc).split(";")[0],
                            sampler=s.sampler)
            if log:
                log(f"K={k:<4} eta={eta:.3g}: diverged ({run.message})")
        else:
            seconds = time.perf_counter() - t0
            rounds, samples = trace.draw_rounds, torch.as_tensor(trace.samples).cpu()
            run = RunRecord(
                k, eta, factor, False, seconds, draw_rounds=rounds, sampler=s.sampler,
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
                if len(candidates) > 1 and start in (0, len(candidates) - 1):
                    end = "smallest" if start == 0 else "largest"
                    warnings.warn(f"{s.sampler}, K = {k}: the validation chose the {end} step size of the ladder "
                                  f"({best.step_size:.3g}); the best one may lie beyond it: extend eta_factors "
                                  "(or step_sizes)", stacklevel=2)
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
