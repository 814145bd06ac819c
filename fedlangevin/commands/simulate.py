"""``fedlangevin simulate <study>``: the paper's studies, each writing PNG + CSV and a table.

The simulation studies (Sec. 7.1, Fig. 1-2, Thm 5.8) are those of
:data:`fedlangevin.experiments.gaussian.STUDIES`; ``all`` runs them one after the other;
``classification`` is the Sec. 7.2 study (:mod:`fedlangevin.experiments.classification`).
:data:`STUDIES` maps each name to ``(module of the study, one-line help)``; the arguments of
each kind of study are read here and handed to the study functions as typed settings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedlangevin.experiments.gaussian import STUDIES as SIMULATIONS

_GAUSSIAN = "fedlangevin.experiments.gaussian"
_CLASSIFICATION = "fedlangevin.experiments.classification"

#: study name -> (module path, one-line help)
STUDIES: dict[str, tuple[str, str]] = {
    **{name: (_GAUSSIAN, study.help) for name, study in SIMULATIONS.items()},
    "classification": (_CLASSIFICATION,
                       "Sec. 7.2: Bayesian logistic regression on digits / MNIST-5k, accuracy, Brier, ECE vs rounds per K"),
    "all": (_GAUSSIAN, "every simulation study (Fig. 1, Fig. 2, Thm 5.8), one after the other (PNG + CSV each)"),
}


#: settings field -> the option that sets it, where the names differ (for error messages)
OPTION_ALIASES = {"num_clients": "--clients", "validation_fraction": "--val-fraction"}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="study", metavar="study")
    for name, (module, help_text) in STUDIES.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--out", default=f"simulate-output/{name}", help="output folder (default: %(default)s)")
        if module == _CLASSIFICATION:
            _configure_classification(p)
        else:
            _configure_simulation(p)


def main(args: argparse.Namespace) -> int:
    if getattr(args, "study", None) is None:
        names = ", ".join(STUDIES) or "(none registered)"
        raise ValueError(f"choose a study: fedlangevin simulate <study>, with <study> one of: {names}")
    from fedlangevin.commands._checks import check_output_dir, check_threads, require_datasets

    check_output_dir("--out", args.out)
    if getattr(args, "threads", None) is not None:
        check_threads("--threads", args.threads)
    require_datasets(f"simulate {args.study}", getattr(args, "dataset", None) or ())
    if STUDIES[args.study][0] == _CLASSIFICATION:
        return _run_classification(args)
    return _run_simulation(args.study, args)


# -- the simulation studies (Sec. 7.1) -------------------------------------------------------------


def _configure_simulation(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reduced", action="store_true",
                        help="the small settings used in CI (seconds instead of minutes; same qualitative claims)")
    parser.add_argument("--chains", type=int, default=300, help="replicate chains R (default: %(default)s, as the paper)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and sampler (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _run_simulation(name: str, args: argparse.Namespace) -> int:
    from fedlangevin._validation import check_int
    from fedlangevin.experiments.gaussian import run_study
    from fedlangevin.experiments.report import pyplot, text_table

    check_int("chains", args.chains, 2)
    check_int("seed", args.seed, 0)
    names = list(SIMULATIONS) if name == "all" else [name]
    progress = False if args.no_progress else None
    timings = []
    for study in names:
        result = run_study(study, reduced=args.reduced, chains=args.chains, seed=args.seed, progress=progress)
        png, csv_path = result.save(args.out)
        pyplot().close(result.figure)
        print(f"== {study}: {SIMULATIONS[study].help}")
        print(", ".join(f"{k}={v}" for k, v in result.settings.items()))
        print(result.table)
        print(f"time: {result.seconds:.1f} s; wrote {png} and {csv_path} ({result.num_rows} rows)\n")
        timings.append((study, result.seconds))
    if len(names) > 1:
        print(text_table(["study", "seconds"],
                         [[n, float(t)] for n, t in timings] + [["total", float(sum(t for _, t in timings))]]))
    return 0


# -- the classification study (Sec. 7.2) -----------------------------------------------------------


def _configure_classification(parser: argparse.ArgumentParser) -> None:
    from fedlangevin.data.splits import SPLITS
    from fedlangevin.experiments.classification_settings import SAMPLERS, TUNE_METRICS, ClassificationSettings

    d = ClassificationSettings()
    parser.add_argument("--dataset", nargs="+", default=["digits"],
                        help="digits, mnist5k, a folder of MNIST-format IDX files or an .npz file; several run one "
                             "after the other (default: %(default)s)")
    parser.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=[d.sampler],
                        help="fald (the paper's FA-LD) and/or fahmc (FA-HMC at h = sqrt(2 eta) of the same ladder); "
                             "several run one study each and add a figure of both (default: %(default)s)")
    parser.add_argument("--friction", type=float, default=d.friction,
                        help="FA-HMC's friction gamma (default: %(default)s)")
    parser.add_argument("--local-steps", type=int, nargs="+", default=list(d.local_steps), metavar="K",
                        help="numbers of local steps K (default: %(default)s, as the paper)")
    parser.add_argument("--rounds", type=int, default=None, help="communication rounds per run "
                        "(default: digits 1000, mnist5k 500)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up rounds left out of the second average "
                        "(default: digits 200, mnist5k 100)")
    parser.add_argument("--thin", type=int, default=d.thin, help="one sample every THIN rounds (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=d.temperature, help="tau (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=d.num_clients, help="N clients (default: %(default)s)")
    parser.add_argument("--split", choices=SPLITS, default=d.split,
                        help="federated split (default: %(default)s)")
    parser.add_argument("--classes-per-client", type=int, default=d.classes_per_client,
                        help="classes per client for --split label_skew (default: %(default)s)")
    parser.add_argument("--dirichlet-alpha", type=float, default=d.dirichlet_alpha,
                        help="alpha for --split dirichlet (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=None, help="minibatch per client (default: digits 50, mnist5k 200)")
    parser.add_argument("--prior-scale", type=float, default=d.prior_scale, help="sigma of the N(0, sigma^2 I) prior "
                        "(default: %(default)s)")
    parser.add_argument("--eta-factors", type=float, nargs="+", default=list(d.eta_factors), metavar="F",
                        help="candidate step sizes as multiples of 1/L (default: %(default)s)")
    parser.add_argument("--step-sizes", type=float, nargs="+", default=None, metavar="ETA",
                        help="candidate step sizes as absolute values (overrides --eta-factors)")
    parser.add_argument("--search", choices=("ladder", "grid"), default=d.search,
                        help="ladder: walk the candidates from --eta-start (about 3 runs per K); grid: run them all "
                             "(default: %(default)s)")
    parser.add_argument("--eta-start", type=float, default=None,
                        help="candidate the ladder starts from for the first K (default: 16, or the middle one)")
    parser.add_argument("--tune-metric", choices=TUNE_METRICS, default=d.tune_metric,
                        help="validation score that picks eta per K (default: %(default)s)")
    parser.add_argument("--val-fraction", type=float, default=d.validation_fraction,
                        help="share of the training data held out for tuning (default: %(default)s)")
    parser.add_argument("--chains", type=int, default=None, help="chains per run (default: digits 2, mnist5k 1)")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of splits and sampler (default: %(default)s)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default=d.dtype, help="(default: %(default)s)")
    parser.add_argument("--device", default=d.device, help="where the chains run, e.g. cuda (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads, at most the CPU count (default: torch's choice; 1 is fastest on a "
                             "busy machine)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _run_classification(args: argparse.Namespace) -> int:
    import torch

    from fedlangevin.experiments.classification import ClassificationSettings, run_classification
    from fedlangevin.experiments.classification_plots import plot_curves
    from fedlangevin.experiments.report import slug

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    for dataset in args.dataset:
        results = []
        for sampler in dict.fromkeys(args.samplers):
            settings = ClassificationSettings(
                dataset=dataset, sampler=sampler, friction=args.friction, local_steps=tuple(args.local_steps),
                rounds=args.rounds, warmup=args.warmup,
                thin=args.thin, temperature=args.temperature, num_clients=args.clients, split=args.split,
                classes_per_client=args.classes_per_client, dirichlet_alpha=args.dirichlet_alpha,
                batch_size=args.batch_size, prior_scale=args.prior_scale,
                eta_factors=tuple(args.eta_factors),
                step_sizes=None if args.step_sizes is None else tuple(args.step_sizes),
                search=args.search, eta_start=args.eta_start,
                tune_metric=args.tune_metric, validation_fraction=args.val_fraction, chains=args.chains,
                seed=args.seed, dtype=args.dtype, device=args.device,
            ).resolved()
            result = run_classification(settings, progress=False if args.no_progress else None,
                                        log=lambda line, name=sampler: print(f"{name}: {line}", file=sys.stderr,
                                                                             flush=True))
            results.append(result)
            paths = result.write(args.out)
            print(result.table())
            print("files: " + ", ".join(str(p) for p in paths))
            print()
        if len(results) > 1:
            path = Path(args.out) / f"{slug(results[0].dataset)}_curves_samplers.png"
            s = results[0].settings
            plot_curves([row for r in results for row in r.curve_rows()], path, warmup=s.warmup,
                        title=f"FA-LD (solid) and FA-HMC (dashed), Bayesian logistic regression on "
                              f"{results[0].dataset}: "
                              f"N = {s.num_clients} {s.split} clients, tau = {s.temperature:g}, batch "
                              f"{s.batch_size}/client, eta tuned per sampler and K on validation {s.tune_metric}")
            print(f"figure of both samplers: {path}")
    return 0
