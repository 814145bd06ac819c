"""``fedlangevin compare``: FA-LD (sampling) beside quantized-communication FL optimizers on the
same federated data, scored against the bits communicated.

Runs :func:`fedlangevin.experiments.comparison.run_comparison`: for every data set and split,
FA-LD (BMA of its samples), FA-LD with quantized uploads, FedAvg, LB, LFL, LGM, LTGM and DZOFL;
writes ``comparison_{final,curves,differences,masking}.csv`` and one figure per data set and
split (accuracy, Brier, ECE and NLL against total bits, log axis) into ``--out``, and prints a
table of final metrics and total bits. Defaults: digits and MNIST-5k, iid and label-skew
splits over 10 clients, 200 rounds of 10 local steps (a few minutes on two CPU cores;
``--quick`` for a smaller run). See docs/comparison.md.
"""

from __future__ import annotations

import argparse
import sys

#: settings field -> the option that sets it, where the names differ (for error messages)
OPTION_ALIASES = {"num_clients": "--clients", "fald_q_levels": "--fald-q"}

#: what --quick changes (options given explicitly still win)
QUICK = dict(datasets=("digits",), rounds=40, dzofl_rounds=800, evaluations=8, bootstrap=300)


def configure(parser: argparse.ArgumentParser) -> None:
    from fedlangevin.data.splits import SPLITS
    from fedlangevin.experiments.comparison import METHODS, ComparisonSettings

    d = ComparisonSettings()
    parser.add_argument("--out", default="compare-output", help="output folder (default: %(default)s)")
    g = parser.add_argument_group("data")
    g.add_argument("--datasets", nargs="+", default=None, metavar="DATA",
                   help=f"digits, mnist5k, MNIST-format folders or .npz files (default: {' '.join(d.datasets)})")
    g.add_argument("--splits", nargs="+", default=list(d.splits), choices=SPLITS,
                   help="federated splits (default: %(default)s)")
    g.add_argument("--clients", type=int, default=d.num_clients, help="N clients (default: %(default)s)")
    g.add_argument("--classes-per-client", type=int, default=d.classes_per_client,
                   help="classes per client of the label_skew split (default: %(default)s)")
    g.add_argument("--dirichlet-alpha", type=float, default=d.dirichlet_alpha,
                   help="alpha of the dirichlet split (default: %(default)s)")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of splits, samplers, optimizers (default: %(default)s)")
    r = parser.add_argument_group("runs")
    r.add_argument("--methods", nargs="+", default=list(d.methods), choices=METHODS,
                   help="methods; fald_q runs one quantized FA-LD per --fald-q level; fald_cv, fald_conducive and "
                        "fald_qlsd are FA-LD with a drift correction at FA-LD's bits (default: all but these)")
    r.add_argument("--rounds", type=int, default=None, help=f"communication rounds (default: {d.rounds})")
    r.add_argument("--local-steps", type=int, default=d.local_steps, help="K local steps per round (default: %(default)s)")
    r.add_argument("--batch-size", type=int, default=d.batch_size, help="minibatch per client (default: %(default)s)")
    r.add_argument("--evaluations", type=int, default=None,
                   help=f"test evaluations per run (default: {d.evaluations})")
    r.add_argument("--quick", action="store_true",
                   help="a small run (under a minute): digits only, 40 rounds, DZOFL 800 rounds, 8 evaluations, "
                        "300 bootstrap resamples, unless given explicitly")
    f = parser.add_argument_group("FA-LD")
    f.add_argument("--temperature", type=float, default=d.temperature, help="tau (default: %(default)s)")
    f.add_argument("--prior-scale", type=float, default=d.prior_scale, help="prior sigma (default: %(default)s)")
    f.add_argument("--eta-factor", type=float, default=d.eta_factor, help="eta = FACTOR / L (default: %(default)s)")
    f.add_argument("--warmup-fraction", type=float, default=d.warmup_fraction,
                   help="share of the samples the BMA leaves out (default: %(default)s)")
    f.add_argument("--fald-q", type=int, nargs="+", default=list(d.fald_q_levels), metavar="Q",
                   help="quantization levels of the quantized-upload FA-LD runs (default: %(default)s)")
    o = parser.add_argument_group("optimizers")
    o.add_argument("--lr", type=float, default=None,
                   help="local SGD learning rate (default: eta n, the same drift per step as FA-LD)")
    o.add_argument("--q1", type=int, default=d.q1, help="broadcast level of LFL and LGM (default: %(default)s)")
    o.add_argument("--q1-ltgm", type=int, default=d.q1_ltgm, help="broadcast level of LTGM (default: %(default)s)")
    o.add_argument("--q2", type=int, default=d.q2, help="upload level of LB, LFL, LGM, LTGM (default: %(default)s)")
    o.add_argument("--dzofl-rounds", type=int, default=None, help=f"DZOFL rounds (default: {d.dzofl_rounds})")
    o.add_argument("--dzofl-alpha0", type=float, default=d.dzofl_alpha0, help="DZOFL alpha0 (default: %(default)s)")
    o.add_argument("--dzofl-gamma0", type=float, default=d.dzofl_gamma0, help="DZOFL gamma0 (default: %(default)s)")
    b = parser.add_argument_group("bits")
    b.add_argument("--bits-per-entry", type=int, default=d.bits_per_entry,
                   help="bits of an exact entry (default: %(default)s, the LFL paper's R_LB = 33 d)")
    b.add_argument("--downlink", choices=("broadcast", "per_client"), default=d.downlink,
                   help="count a broadcast once per round or once per client (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads, at most the CPU count (default: %(default)s: every tensor here is "
                             "small, and on a busy 2-core machine FedAvg ran 6-9x slower with 2 threads than with 1)")


def main(args: argparse.Namespace) -> int:
    from fedlangevin.commands._checks import check_output_dir, check_threads, require_datasets

    check_output_dir("--out", args.out)
    threads = check_threads("--threads", args.threads)
    import torch

    from fedlangevin.experiments.comparison import ComparisonSettings, run_comparison

    torch.set_num_threads(threads)
    base = ComparisonSettings()
    given = {"datasets": None if args.datasets is None else tuple(args.datasets), "rounds": args.rounds,
             "dzofl_rounds": args.dzofl_rounds, "evaluations": args.evaluations}
    sized = {k: v if v is not None else (QUICK[k] if args.quick else getattr(base, k)) for k, v in given.items()}
    settings = ComparisonSettings(
        splits=tuple(args.splits), methods=tuple(args.methods),
        num_clients=args.clients, classes_per_client=args.classes_per_client, dirichlet_alpha=args.dirichlet_alpha,
        local_steps=args.local_steps, batch_size=args.batch_size,
        temperature=args.temperature, prior_scale=args.prior_scale, eta_factor=args.eta_factor,
        warmup_fraction=args.warmup_fraction, fald_q_levels=tuple(args.fald_q), lr=args.lr, q1=args.q1,
        q1_ltgm=args.q1_ltgm, q2=args.q2, dzofl_alpha0=args.dzofl_alpha0,
        dzofl_gamma0=args.dzofl_gamma0, bits_per_entry=args.bits_per_entry, downlink=args.downlink, seed=args.seed,
        bootstrap=QUICK["bootstrap"] if args.quick else base.bootstrap, **sized,
    )
    require_datasets("compare", settings.datasets)
    result = run_comparison(settings.resolved(), log=lambda line: print(line, file=sys.stderr, flush=True))
    paths = result.write(args.out)
    print(result.table())
    print("files: " + ", ".join(str(p) for p in paths))
    return 0
