"""``fedlangevin simulate <study>``: the paper's studies, each writing PNG + CSV and a table.

Studies are registered in :data:`STUDIES` as ``name -> (module, one-line help)``. A study
module provides two functions:

- ``cli_configure(name, parser)``: add the study's arguments to its ``argparse`` sub-parser
  (an ``--out`` folder is added here for every study);
- ``cli_run(name, args) -> int``: run it, write the files into ``args.out``, print a table.

Modules are imported when ``simulate`` itself is configured, so ``fedlangevin simulate
--help`` lists every study with its help line.
"""

from __future__ import annotations

import argparse
import importlib

#: study name -> (module path, one-line help)
STUDIES: dict[str, tuple[str, str]] = {
    "k-study": ("fedlangevin.experiments.gaussian", "Fig. 1a: communication rounds to W2 <= eps against K, per alpha"),
    "heterogeneity": ("fedlangevin.experiments.gaussian", "Fig. 1b: W2 against rounds for several alpha (K = 10)"),
    "correlation": ("fedlangevin.experiments.gaussian", "Fig. 1c: W2 against rounds for rho in {0, 0.3, 0.7, 1}"),
    "density": ("fedlangevin.experiments.gaussian", "Fig. 1d/1e: exact vs empirical posterior density"),
    "participation": ("fedlangevin.experiments.gaussian", "Fig. 2: full devices vs schemes I/II, S = 40 and 30 of 50"),
    "step-size": ("fedlangevin.experiments.gaussian", "Thm 5.8: decaying step size vs constant, W2 rate"),
    "classification": ("fedlangevin.experiments.classification",
                       "Sec. 7.2: Bayesian logistic regression on digits / MNIST-5k, accuracy, Brier, ECE vs rounds per K"),
    "all": ("fedlangevin.experiments.gaussian", "every simulation study (Fig. 1, Fig. 2, Thm 5.8), one after the other (PNG + CSV each)"),
}


#: settings field -> the option that sets it, where the names differ (for error messages)
OPTION_ALIASES = {"num_clients": "--clients", "validation_fraction": "--val-fraction"}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="study", metavar="study")
    for name, (module, help_text) in STUDIES.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--out", default=f"simulate-output/{name}", help="output folder (default: %(default)s)")
        importlib.import_module(module).cli_configure(name, p)


def main(args: argparse.Namespace) -> int:
    if getattr(args, "study", None) is None:
        names = ", ".join(STUDIES) or "(none registered)"
        raise ValueError(f"choose a study: fedlangevin simulate <study>, with <study> one of: {names}")
    from fedlangevin.commands._checks import check_output_dir, require_datasets

    check_output_dir("--out", args.out)
    require_datasets(f"simulate {args.study}", getattr(args, "dataset", None) or ())
    module = importlib.import_module(STUDIES[args.study][0])
    return int(module.cli_run(args.study, args) or 0)
