"""``fedlangevin diagnose SAMPLES``: convergence diagnostics of saved MCMC samples.

Reads samples of shape (chains, draws, d) (or (chains, draws) for one scalar; a 2-D array is
always read this way, so one chain of d entries is saved as shape (1, draws, d)), with at least
4 draws per chain, from a
``.npy`` file, or from a ``.npz`` file (the array named by ``--key``, else ``samples``, else
the only array; an optional string array ``var_names`` of length d names the columns), and
prints the posterior summary of :func:`diagnostics.summary` (mean, sd, 90% equal-tailed
interval, MCSE, bulk and tail ESS at the 5%/95% quantiles, rank-normalised split R-hat),
followed by the convergence checks of Vehtari et al. (2021): R-hat < 1.01 and bulk and tail
ESS of at least 100 per chain. With ``--plots DIR`` it also writes ``trace.png`` and
``rank.png``; with ``--csv FILE`` the full table.

Save an FA-LD run with ``numpy.save("samples.npy", trace.numpy())`` (or
``numpy.savez("run.npz", samples=trace.numpy(), var_names=trace.var_names)``).
"""

from __future__ import annotations

import argparse
import zipfile
import zlib
from pathlib import Path

import numpy as np

#: Vehtari et al. (2021), Sec. 5 recommendations.
RHAT_MAX = 1.01
ESS_PER_CHAIN = 100


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("samples", help="a .npy or .npz file with samples of shape (chains, draws, d), at least "
                                        "4 draws per chain; a 2-D array is read as (chains, draws) of one scalar "
                                        "(save one chain of d entries as shape (1, draws, d))")
    parser.add_argument("--key", default=None, help="array name inside a .npz file (default: 'samples' or the only array)")
    parser.add_argument("--var-names", default=None,
                        help="comma-separated names of the d columns, none empty, e.g. 'mu[0],mu[1],sigma' "
                             "(default: the file's var_names, else theta[0], ...)")
    parser.add_argument("--ci-prob", type=float, default=0.90, help="credible-interval mass (default: %(default)s)")
    parser.add_argument("--ci-kind", choices=("eti", "hdi"), default="eti",
                        help="equal-tailed or highest-density interval (default: %(default)s)")
    parser.add_argument("--max-rows", type=int, default=40,
                        help="print at most this many rows, largest R-hat first when there are more (default: %(default)s)")
    parser.add_argument("--csv", default=None, help="write the full summary table to this CSV file")
    parser.add_argument("--plots", default=None, metavar="DIR", help="write trace.png and rank.png into this folder")
    parser.add_argument("--max-vars", type=int, default=6,
                        help="entries per plot, largest R-hat first when there are more (default: %(default)s)")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a convergence check fails")


def load_samples(path: str | Path, key: str | None = None) -> tuple[np.ndarray, list[str] | None]:
    """Samples (and column names if the file has them) from a .npy or .npz file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"samples file not found: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            if key is not None:
                raise ValueError("--key applies to .npz files only")
            return _numeric(np.load(path, allow_pickle=False), path.name), None
        if suffix != ".npz":
            raise ValueError(f"samples must be a .npy or .npz file; got {path.name}")
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            if key is None:
                arrays = [n for n in names if n != "var_names"]
                key = "samples" if "samples" in names else (arrays[0] if len(arrays) == 1 else None)
                if key is None:
                    raise ValueError(f"{path.name} holds several arrays {names}: choose one with --key")
            if key not in names:
                raise ValueError(f"--key {key!r} not in {path.name}; it holds {names}")
            members = {n: z[n] for n in {key, "var_names"} & set(names)}
            if not all(isinstance(m, np.ndarray) for m in members.values()):
                raise OSError("not a .npy member")  # numpy gives a member without the .npy header as raw bytes
            x = _numeric(members[key], f"{path.name}[{key!r}]")
            var_names = [str(v) for v in np.atleast_1d(members["var_names"]).tolist()] if "var_names" in names else None
            return x, var_names
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error) as exc:
        # not a numpy file, a damaged zip (.npz), corrupt, or pickled objects
        if isinstance(exc, ValueError) and not _is_format_error(exc):
            raise
        raise ValueError(f"{path.name} is not a .npy/.npz array of numbers (numpy cannot read it without "
                         "pickle, or the file is damaged)") from None


def _is_format_error(exc: ValueError) -> bool:
    """numpy's errors for a file that is not an array (our own messages pass through)."""
    text = str(exc)
    return "pickle" in text or "magic string" in text or "format" in text or "header" in text


def _numeric(x: np.ndarray, label: str) -> np.ndarray:
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ValueError(f"{label} must hold real numbers; it holds dtype {x.dtype}")
    return x


#: fewest draws per chain the split R-hat and ESS estimators work with (each half-chain needs >= 2)
MIN_DRAWS = 4


def check_shape(x: np.ndarray, label: str) -> None:
    """Samples are (chains, draws, d), or (chains, draws) for one scalar, with >= MIN_DRAWS draws.

    A 2-D array is always read as (chains, draws) of one scalar; one chain of d entries must be
    given as shape (1, draws, d), e.g. ``x[None]``.
    """
    if x.ndim not in (2, 3):
        raise ValueError(f"{label} must have shape (chains, draws, d) or (chains, draws); got {x.shape}")
    if x.shape[0] < 1 or x.shape[1] < MIN_DRAWS or (x.ndim == 3 and x.shape[2] < 1):
        hint = (" (a 2-D array is read as (chains, draws) of one scalar; save one chain of d entries "
                "as shape (1, draws, d), e.g. x[None])" if x.ndim == 2 else "")
        raise ValueError(f"{label} has {x.shape[0]} chains x {x.shape[1]} draws; diagnostics need at least "
                         f"{MIN_DRAWS} draws per chain{hint}")


def _worst_first(df, k: int) -> list[str]:
    order = df["r_hat"].fillna(np.inf).sort_values(ascending=False, kind="stable")
    return list(order.index[:k])


def checks(df, chains: int) -> list[str]:
    """Lines reporting the R-hat and ESS checks over every row of a summary table."""
    lines = []
    rows = len(df)
    if chains < 2:
        lines.append("R-hat: needs at least 2 chains (not computed)")
    else:
        bad = df.index[~(df["r_hat"] < RHAT_MAX)]
        lines.append(f"R-hat < {RHAT_MAX}: {rows - len(bad)}/{rows} ok" + (_list(df, bad, "r_hat") if len(bad) else ""))
    need = ESS_PER_CHAIN * chains
    for col in ("ess_bulk", "ess_tail"):
        bad = df.index[~(df[col] >= need)]
        lines.append(f"{col} >= {ESS_PER_CHAIN} per chain ({need}): {rows - len(bad)}/{rows} ok"
                     + (_list(df, bad, col) if len(bad) else ""))
    return lines


def _list(df, labels, col: str, k: int = 5) -> str:
    shown = ", ".join(f"{lab} ({df.loc[lab, col]:.4g})" for lab in list(labels)[:k])
    more = f", ... ({len(labels) - k} more)" if len(labels) > k else ""
    return f"; failing: {shown}{more}"


def main(args: argparse.Namespace) -> int:
    from fedlangevin.commands._checks import check_output_dir, check_output_file, require

    require("diagnose", "arviz")
    from fedlangevin._validation import check_real

    check_real("--ci-prob", args.ci_prob, low=0.0, high=1.0, low_open=True, high_open=True)
    if args.csv is not None:
        check_output_file("--csv", args.csv)
    if args.plots is not None:
        check_output_dir("--plots", args.plots)
    import diagnostics as dg

    for name in ("max_rows", "max_vars"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be an integer >= 1; got {getattr(args, name)}")
    given_names = None if args.var_names is None else [s.strip() for s in args.var_names.split(",")]
    if given_names is not None and not all(given_names):
        raise ValueError(f"--var-names must be comma-separated non-empty names, one per column; got {args.var_names!r}")
    x, file_names = load_samples(args.samples, args.key)
    check_shape(x, Path(args.samples).name)
    names = given_names if given_names is not None else file_names
    data = dg.to_arviz(x, names)
    df = dg.summary(data, ci_prob=args.ci_prob, ci_kind=args.ci_kind)
    chains, draws = df.attrs["chains"], df.attrs["draws"]
    print(f"{args.samples}: {chains} chains x {draws} draws, {len(df)} entries (ArviZ {df.attrs['arviz']}; "
          f"tail ESS at the {df.attrs['tail_prob'][0]:g}/{df.attrs['tail_prob'][1]:g} quantiles)\n")
    shown = df if len(df) <= args.max_rows else df.loc[_worst_first(df, args.max_rows)]
    print(shown.to_string(float_format=lambda v: f"{v:.4g}"))
    if len(shown) < len(df):
        print(f"({args.max_rows} of {len(df)} entries shown, largest R-hat first; --csv writes all)")
    print("\nconvergence checks (Vehtari et al. 2021):")
    lines = checks(df, chains)
    for line in lines:
        print("  " + line)
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.csv)
        print(f"table: {args.csv}")
    if args.plots:
        out = Path(args.plots)
        out.mkdir(parents=True, exist_ok=True)
        chosen = list(df.index) if len(df) <= args.max_vars else _worst_first(df, args.max_vars)
        dg.trace_plot(data, chosen, max_vars=args.max_vars, path=out / "trace.png")
        dg.rank_plot(data, chosen, max_vars=args.max_vars, path=out / "rank.png")
        print(f"plots: {out / 'trace.png'}, {out / 'rank.png'}")
    failed = any("failing" in line or "not computed" in line for line in lines)
    return 1 if (args.strict and failed) else 0
