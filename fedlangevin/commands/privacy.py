"""``fedlangevin privacy``: differential privacy of an FA-LD setting under both accountants.

Prints the paper's bound (Thm 6.1 / G.3) with every intermediate quantity, the tight
accountant's epsilon at the same delta (with its RDP cross-check and lower bound) and a
one-line verdict. The defaults are the worked example of docs/privacy.md (eta = 1e-6,
gamma = 0.02, N = S = 10, K = 10, T = 1000, scheme II, delta_0 = delta_1 = delta_2 = 1e-6).

Other modes: ``--solve eta|iterations|num-sampled|rho`` with ``--target-epsilon`` and
``--target-delta`` (largest value within the budget, both accountants); ``--table`` (both
accountants on a fixed set of settings, the table of docs/privacy.md); ``--figure PATH``
(epsilon against T for both accountants); ``--audit`` (a canary audit of the setting:
:mod:`fedlangevin.privacy.canary`, the audited lower bound printed beside the accounted epsilon).

The mechanism of a private run (``FALD(..., privacy=RecordLevel(clip=C) | ClientLevel(clip=C))``):
``--adjacency record|client`` and ``--clip C``, whose sensitivity 2C is derived (a typed
``--sensitivity`` beside ``--clip`` is refused); without ``--clip`` the sensitivity is an assumption
(``--sensitivity``, default 1), as for a run without ``privacy=``. Client level
(:func:`fedlangevin.privacy.client_account`) needs ``--clip``, has no minibatch amplification (no
``--gamma``), takes the largest client weight ``--p-max`` (default 1/N) instead of ``--p-min``, and
reports the tight accountant only (the paper's theorem is record-level); ``--solve`` and ``--figure``
are record-level.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

WORKED_EXAMPLE = dict(eta=1e-6, tau=1.0, rho=0.0, gamma=0.02, sensitivity=1.0, p_min=0.1, num_clients=10,
                      num_sampled=10, local_steps=10, iterations=1000, scheme="II")
PAPER_DELTAS = dict(delta0=1e-6, delta1=1e-6, delta2=1e-6)

#: (label, changes to the worked example) for --table.
TABLE_SETTINGS = [
    ("worked example (Thm 6.1)", {}),
    ("S = 5 of N = 10", dict(num_sampled=5)),
    ("scheme I, S = 10", dict(scheme="I")),
    ("T = 10^4", dict(iterations=10_000)),
    ("eta = 2.5e-6 (near eq. 59)", dict(eta=2.5e-6)),
    ("rho = 0.5", dict(rho=0.5)),
    ("K = 1", dict(local_steps=1)),
    ("gamma = 1 (full batch)", dict(gamma=1.0)),
    ("N = 100, S = 10, p = 0.01, eta = 2e-7", dict(num_clients=100, num_sampled=10, p_min=0.01, eta=2e-7)),
    ("eta = 1e-5 (outside eq. 59)", dict(eta=1e-5)),
]


def configure(parser: argparse.ArgumentParser) -> None:
    d = WORKED_EXAMPLE
    g = parser.add_argument_group("mechanism (defaults: the worked example)")
    g.add_argument("--eta", type=float, default=d["eta"], help="step size (default: %(default)s)")
    g.add_argument("--tau", type=float, default=d["tau"], help="temperature (default: %(default)s)")
    g.add_argument("--rho", type=float, default=d["rho"], help="noise correlation in [0, 1) (default: %(default)s)")
    g.add_argument("--gamma", type=float, default=None,
                   help=f"data fraction per local step (default: {d['gamma']}; record level only)")
    g.add_argument("--sensitivity", type=float, default=None,
                   help=f"an assumed Delta_l of Assumption G.1, not enforced (default: {d['sensitivity']}); "
                        "refused beside --clip, whose sensitivity 2C is derived")
    g.add_argument("--p-min", type=float, default=None,
                   help=f"smallest client weight (default: {d['p_min']}; record level only)")
    g.add_argument("--num-clients", type=int, default=d["num_clients"], help="N (default: %(default)s)")
    g.add_argument("--num-sampled", type=int, default=d["num_sampled"], help="S per round (default: %(default)s)")
    g.add_argument("--local-steps", type=int, default=d["local_steps"], help="K (default: %(default)s)")
    g.add_argument("--iterations", type=int, default=d["iterations"], help="T, a multiple of K (default: %(default)s)")
    g.add_argument("--scheme", default=d["scheme"], choices=["I", "II"], help="device sampling (default: %(default)s)")
    v = parser.add_argument_group("privacy mechanism (a private run's privacy=RecordLevel(clip=C) / ClientLevel(clip=C))")
    v.add_argument("--adjacency", choices=["record", "client"], default="record",
                   help="neighbours differ in one record, or in one client's whole data (default: %(default)s)")
    v.add_argument("--clip", type=float, default=None,
                   help="the clipping norm C of the run: sensitivity derived as 2C (needed for --adjacency client)")
    v.add_argument("--p-max", type=float, default=None,
                   help="largest client weight, the worst client at client level (default: 1/N; client level only)")
    p = parser.add_argument_group("accounting")
    for name in ("delta0", "delta1", "delta2"):
        p.add_argument(f"--{name}", type=float, default=None,
                       help=f"the paper's {name} (default: 1e-6 each, or split from --delta / --target-delta)")
    p.add_argument("--delta", type=float, default=None,
                   help="delta of the tight accountant (default: the paper's delta)")
    p.add_argument("--discretization", type=float, default=None, help="PLD loss grid (default: automatic)")
    m = parser.add_argument_group("modes")
    m.add_argument("--solve", choices=["eta", "iterations", "num-sampled", "rho"],
                   help="largest value of this parameter within --target-epsilon / --target-delta")
    m.add_argument("--target-epsilon", type=float, default=None,
                   help="the epsilon budget --solve stays within (> 0; needed with --solve)")
    m.add_argument("--target-delta", type=float, default=None,
                   help="the delta of the budget --solve stays within, in (0, 1) (needed with --solve; "
                        "the paper's delta0 = delta1 = delta2 are a third of it unless given)")
    m.add_argument("--table", action="store_true", help="both accountants on a fixed set of settings (markdown)")
    m.add_argument("--figure", metavar="PATH", default=None, help="plot epsilon against T for both accountants")
    m.add_argument("--no-progress", action="store_true",
                   help="hide the progress bar of --figure and --audit (shown on stderr when it is a terminal)")
    m.add_argument("--audit", action="store_true",
                   help="run a canary audit of this setting (needs --clip): the package's private FA-LD run on "
                        "a dataset with and without a canary, an empirical lower bound on epsilon printed beside "
                        "the accounted one (fedlangevin.privacy.canary)")
    a = parser.add_argument_group("audit (with --audit)")
    a.add_argument("--replicates", type=int, default=10_000,
                   help="independent runs per world (chains; >= 100; default: %(default)s)")
    a.add_argument("--confidence", type=float, default=0.95,
                   help="confidence of the audited lower bound (default: %(default)s)")
    a.add_argument("--seed", type=int, default=0, help="seed of the audit's runs (default: %(default)s)")
    a.add_argument("--max-rows", type=int, default=1000,
                   help="largest n_c used to realise --gamma as b / n_c (default: %(default)s)")


def _sensitivity(args) -> tuple[float, str]:
    """(sensitivity, how it is known): 2C from ``--clip``, else the assumed ``--sensitivity`` (default 1)."""
    from fedlangevin._validation import check_real
    from fedlangevin.commands._checks import UsageError
    from fedlangevin.privacy.mechanism import MAX_CLIP

    if args.clip is None:
        if args.adjacency == "client":
            raise UsageError("--adjacency client needs --clip C: a client-level run clips each client's data term to "
                             "norm C, and its sensitivity 2C is derived from it")
        value = WORKED_EXAMPLE["sensitivity"] if args.sensitivity is None else args.sensitivity
        return check_real("--sensitivity", value, low=0.0, low_open=True), "assumed, not enforced"
    if args.sensitivity is not None:
        raise UsageError(f"--sensitivity: with --clip {args.clip:g} the sensitivity is derived (2C = {2 * args.clip:g}); "
                         "give --clip or --sensitivity, not both")
    clip = check_real("--clip", args.clip, low=0.0, high=MAX_CLIP, low_open=True)
    return 2.0 * clip, f"derived: 2 x clip {clip:g}"


def _setting(args) -> dict:
    """The mechanism's arguments: :func:`fedlangevin.privacy.account`'s (record level) or
    :func:`fedlangevin.privacy.client_account`'s (client level: ``p_max``, no ``gamma``)."""
    from fedlangevin._validation import check_int, check_real
    from fedlangevin.commands._checks import UsageError

    sensitivity, _ = _sensitivity(args)
    common = dict(eta=args.eta, tau=args.tau, rho=args.rho, sensitivity=sensitivity, num_clients=args.num_clients,
                  num_sampled=args.num_sampled, local_steps=args.local_steps, iterations=args.iterations,
                  scheme=args.scheme)
    if args.adjacency == "client":
        for option, value, why in (("--gamma", args.gamma, "client level has no minibatch amplification (every row "
                                    "of the client may change)"),
                                   ("--p-min", args.p_min, "the worst client at client level is the one with the "
                                    "largest weight: give --p-max")):
            if value is not None:
                raise UsageError(f"{option}: {why}; leave {option} out with --adjacency client")
        if any(getattr(args, name) is not None for name in ("delta0", "delta1", "delta2")):
            raise UsageError("--delta0/--delta1/--delta2 are the paper's deltas, and the paper's theorem is "
                             "record-level; with --adjacency client give --delta")
        n = check_int("--num-clients", args.num_clients, 1)
        if args.p_max is None:
            return dict(common, p_max=1.0 / n)
        p_max = check_real("--p-max", args.p_max, low=0.0, high=1.0, low_open=True)
        if p_max < (1.0 / n) * (1 - 1e-12):
            raise UsageError(f"--p-max must be >= 1/N = {1.0 / n:g} (the largest of N = {n} weights summing to 1); "
                             f"got {p_max:g}")
        return dict(common, p_max=p_max)
    if args.p_max is not None:
        raise UsageError("--p-max is the largest client weight of client-level accounting (--adjacency client); "
                         "record level uses --p-min")
    d = WORKED_EXAMPLE
    return dict(common, gamma=d["gamma"] if args.gamma is None else args.gamma,
                p_min=d["p_min"] if args.p_min is None else args.p_min)


def _paper_deltas(args, setting, target=None) -> dict:
    from fedlangevin.privacy import paper_delta_split

    given = [getattr(args, n) for n in ("delta0", "delta1", "delta2")]
    if all(v is not None for v in given):
        return dict(zip(("delta0", "delta1", "delta2"), given))
    if any(v is not None for v in given):
        raise ValueError("give all of --delta0, --delta1, --delta2 or none of them")
    if target is not None:
        d0, d1, d2 = paper_delta_split(target, **{k: setting[k] for k in (
            "gamma", "num_clients", "num_sampled", "local_steps", "iterations", "scheme")})
        return dict(delta0=d0, delta1=d1, delta2=d2)
    return dict(PAPER_DELTAS)


def verdict(bound, acc) -> str:
    """One line comparing the two accountants."""
    if not bound.within_theorem:
        paper = f"the paper gives no guarantee (eta above eq. 59's {bound.eta_max:.3g})"
    elif bound.vacuous:
        paper = f"the paper's bound is vacuous (delta = {bound.delta_formula:.3g} >= 1)"
    else:
        ratio = bound.epsilon / acc.epsilon if acc.epsilon > 0 else math.inf
        paper = f"{ratio:.3g}x below the paper's {bound.epsilon:.4g}"
    return f"verdict: ({acc.epsilon:.4g}, {acc.delta:.3g})-DP by the tight accountant; {paper}"


def _evaluate(setting: dict, deltas: dict, delta: float | None, discretization=None):
    from fedlangevin.privacy import account, paper_bound

    bound = paper_bound(**setting, **deltas)
    if delta is None:
        delta = bound.delta_formula if 0 < bound.delta_formula < 1 else 1e-5
    acc = account(**setting, delta=delta, discretization=discretization)
    return bound, acc


def _report(args) -> None:
    setting = _setting(args)
    if args.adjacency == "client":
        _client_report(args, setting)
        return
    deltas = _paper_deltas(args, setting, args.delta)
    bound, acc = _evaluate(setting, deltas, args.delta, args.discretization)
    s = setting
    print(f"FA-LD: eta={s['eta']:g}, tau={s['tau']:g}, rho={s['rho']:g}, gamma={s['gamma']:g}, "
          f"Delta_l={s['sensitivity']:g}, p_min={s['p_min']:g}, N={s['num_clients']}, S={s['num_sampled']} "
          f"(scheme {s['scheme']}), K={s['local_steps']}, T={s['iterations']}")
    print(f"adjacency: record level (one record of one client substituted); sensitivity {_sensitivity(args)[1]}")
    print(f"\npaper bound (Thm 6.1 / G.3) with delta0={deltas['delta0']:.3g}, delta1={deltas['delta1']:.3g}, "
          f"delta2={deltas['delta2']:.3g}:")
    print(bound.summary())
    _print_tight(acc)
    print("\n" + verdict(bound, acc))


def _print_tight(acc) -> None:
    print(f"\ntight accountant (PLD, dominating pair; see docs/privacy.md) at delta = {acc.delta:.4g}:")
    print(f"  noise multiplier z = {acc.noise_multiplier:.6g}, client inclusion q = {acc.q:.4g}, "
          f"rounds T/K = {acc.rounds}, loss grid {acc.discretization:.3g}")
    print(f"  {'epsilon (tight, PLD)':<44}{acc.epsilon:.6g}")
    print(f"  {'epsilon (RDP cross-check, upper)':<44}{acc.rdp_epsilon:.6g}")
    print(f"  {'epsilon (lower bound)':<44}{acc.lower_epsilon:.6g}")


def _client_report(args, s: dict) -> None:
    """Client level: the tight accountant only (the paper's theorem is record-level)."""
    from fedlangevin.privacy import client_account

    delta = 1e-5 if args.delta is None else args.delta
    acc = client_account(**s, delta=delta, discretization=args.discretization)
    print(f"FA-LD: eta={s['eta']:g}, tau={s['tau']:g}, rho={s['rho']:g}, p_max={s['p_max']:g}, "
          f"N={s['num_clients']}, S={s['num_sampled']} (scheme {s['scheme']}), K={s['local_steps']}, "
          f"T={s['iterations']}")
    print(f"adjacency: client level (one client's whole data replaced); sensitivity = {s['sensitivity']:g} "
          f"({_sensitivity(args)[1]}); each local step a Gaussian mechanism without minibatch amplification, "
          "z = sqrt(2 tau (1 - rho^2) / (p_max eta)) / sensitivity")
    print("\npaper bound (Thm 6.1 / G.3): does not apply (the theorem is record-level)")
    _print_tight(acc)
    print(f"\nverdict: ({acc.epsilon:.4g}, {acc.delta:.3g})-DP at client level by the tight accountant; "
          "no paper bound (record-level theorem)")


def _solve(args) -> None:
    from fedlangevin.privacy import budget

    if args.target_epsilon is None or args.target_delta is None:
        raise ValueError("--solve needs --target-epsilon and --target-delta")
    setting = _setting(args)
    name = args.solve
    drop = {"eta": "eta", "iterations": "iterations", "num-sampled": "num_sampled", "rho": "rho"}[name]
    fn = {"eta": budget.largest_step_size, "iterations": budget.largest_iterations,
          "num-sampled": budget.largest_num_sampled, "rho": budget.largest_correlation}[name]
    kw = {k: v for k, v in setting.items() if k != drop}
    given = [getattr(args, n) for n in ("delta0", "delta1", "delta2")]
    deltas = dict(zip(("delta0", "delta1", "delta2"), given)) if all(v is not None for v in given) else {}
    print(f"largest {drop} with epsilon <= {args.target_epsilon:g}, delta <= {args.target_delta:g} "
          f"(other parameters as given):")
    for acc in ("tight", "paper"):
        try:
            sol = fn(target_epsilon=args.target_epsilon, target_delta=args.target_delta, accountant=acc,
                     discretization=args.discretization if acc == "tight" else None, **kw, **deltas)
        except ValueError as exc:
            print(f"  {acc:<6} infeasible: {exc}")
            continue
        extra = "" if sol.deltas is None else " with delta0, delta1, delta2 = " + ", ".join(f"{d:.3g}" for d in sol.deltas)
        print(f"  {acc:<6} {drop} = {sol.value:.6g}  (epsilon = {sol.epsilon:.4g}, delta = {sol.delta:.3g}{extra})")


def table(settings=TABLE_SETTINGS, discretization=None) -> list[dict]:
    """Both accountants on each setting (paper deltas 1e-6; tight at the paper's delta)."""
    rows = []
    for label, change in settings:
        s = dict(WORKED_EXAMPLE, **change)
        bound, acc = _evaluate(s, PAPER_DELTAS, None, discretization)
        rows.append(dict(label=label, setting=s, bound=bound, acc=acc))
    return rows


def format_table(rows) -> str:
    head = ("| setting | z | q | paper eps | paper delta | paper status | tight eps | RDP eps | lower eps | "
            "paper / tight |")
    lines = [head, "|" + " --- |" * 10]
    for r in rows:
        b, a = r["bound"], r["acc"]
        status = "inside" if b.within_theorem and not b.vacuous else ("vacuous delta" if b.within_theorem else "outside eq. 59")
        ratio = f"{b.epsilon_formula / a.epsilon:.3g}" if b.within_theorem and not b.vacuous else "—"
        lines.append(f"| {r['label']} | {a.noise_multiplier:.4g} | {a.q:.3g} | {b.epsilon_formula:.4g} | "
                     f"{b.delta_formula:.3g} | {status} | {a.epsilon:.4g} | {a.rdp_epsilon:.4g} | "
                     f"{a.lower_epsilon:.4g} | {ratio} |")
    lines.append("")
    lines.append("Changes are relative to the worked example (eta = 1e-6, tau = 1, rho = 0, gamma = 0.02, "
                 "Delta_l = 1, p = 0.1, N = S = 10, K = 10, T = 1000, scheme II); paper deltas "
                 "delta0 = delta1 = delta2 = 1e-6; the tight, RDP and lower epsilons are at the paper's delta "
                 "(1e-5 where that is >= 1).")
    return "\n".join(lines)


def figure(path, setting=None, deltas=None, iterations=None, progress: bool | None = None):
    """epsilon against T (log-log) for both accountants, the tight one at the paper's delta.

    progress: a bar on stderr per accounted setting; None shows it when stderr is a terminal.
    """
    import sys

    import matplotlib
    from tqdm.auto import tqdm

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from fedlangevin.privacy import account, paper_bound

    base = dict(WORKED_EXAMPLE if setting is None else setting)
    deltas = dict(PAPER_DELTAS if deltas is None else deltas)
    k = base["local_steps"]
    if iterations is None:
        iterations = sorted({int(k * max(1, round(r))) for r in np.geomspace(1, 10_000, 17)})
    n, s0 = base["num_clients"], base["num_sampled"]
    variants = [(f"S = {s0} of N = {n}", {})]
    if max(1, n // 5) != s0:
        variants.append((f"S = {max(1, n // 5)} of N = {n}", dict(num_sampled=max(1, n // 5))))
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colours = ("C0", "C3")
    bar = tqdm(total=len(variants) * len(iterations), desc="privacy figure", unit="setting", file=sys.stderr,
               disable=None if progress is None else not progress)
    for (label, change), colour in zip(variants, colours):
        paper, tight, rdp, lower = [], [], [], []
        for t in iterations:
            bar.update(1)
            s = dict(base, iterations=t, **change)
            b = paper_bound(**s, **deltas)
            delta = b.delta_formula if 0 < b.delta_formula < 1 else math.nan
            paper.append(b.epsilon if b.delta < 1 else math.nan)
            if math.isnan(delta):
                tight.append(math.nan), rdp.append(math.nan), lower.append(math.nan)
                continue
            a = account(**s, delta=delta)
            tight.append(a.epsilon), rdp.append(a.rdp_epsilon), lower.append(a.lower_epsilon)
        ax.plot(iterations, paper, "-", color=colour, lw=2, label=f"paper, Thm 6.1 ({label})")
        ax.plot(iterations, tight, "--", color=colour, lw=2, label=f"tight PLD ({label})")
        ax.plot(iterations, rdp, ":", color=colour, lw=1, label=f"RDP cross-check ({label})")
        ax.fill_between(iterations, lower, tight, color=colour, alpha=0.15, lw=0,
                        label=f"lower bound to tight ({label})")
    bar.close()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("iterations T (local steps; K = %d per round)" % k)
    ax.set_ylabel("epsilon at the paper's delta(T)")
    ax.set_title(f"FA-LD privacy: eta={base['eta']:g}, gamma={base['gamma']:g}, K={k}, scheme {base['scheme']}, "
                 f"delta0=delta1=delta2={deltas['delta0']:g}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def audit_setting(args):
    """The :class:`~fedlangevin.privacy.canary.AuditSetting` of the command's mechanism options:
    --clip (needed), --adjacency, --eta, --tau, --rho, --num-clients, --num-sampled (scheme II, or
    full participation when S = N; --scheme I keeps scheme I), --local-steps, --iterations (rounds
    T/K), --gamma realised as b / n_c with the smallest n_c <= --max-rows. The audit's clients are
    equal (p_c = 1/N): a --p-min or --p-max other than 1/N is refused."""
    from fractions import Fraction

    from fedlangevin._validation import check_int, check_real
    from fedlangevin.commands._checks import UsageError
    from fedlangevin.federation.participation import SchemeI, SchemeII
    from fedlangevin.privacy import ClientLevel, RecordLevel
    from fedlangevin.privacy.canary import AuditSetting

    if args.clip is None:
        raise UsageError("--audit needs --clip C: the audit runs the package's private FA-LD, which clips to C and "
                         "derives its sensitivity 2C")
    s = _setting(args)
    n = s["num_clients"]
    for option, name in (("--p-min", "p_min"), ("--p-max", "p_max")):
        if getattr(args, name) is not None and abs(s[name] * n - 1.0) > 1e-9:
            raise UsageError(f"{option}: the audit's clients are equal (p_c = 1/N = {1.0 / n:g}); got {s[name]:g}")
    k = check_int("--local-steps", s["local_steps"], 1)
    t = check_int("--iterations", s["iterations"], 1)
    if t % k:
        raise UsageError(f"--iterations must be a multiple of --local-steps (K = {k}); got {t}")
    max_rows = check_int("--max-rows", args.max_rows, 1)
    gamma = check_real("--gamma", s.get("gamma", 1.0), low=0.0, high=1.0, low_open=True)
    frac = Fraction(gamma).limit_denominator(max_rows)
    if abs(float(frac) - gamma) > 1e-12 * gamma:
        raise UsageError(f"--gamma {gamma:g} is not a fraction b / n_c with n_c <= --max-rows = {max_rows}: "
                         "give such a fraction or a larger --max-rows")
    rows, batch = frac.denominator, frac.numerator
    num_sampled = check_int("--num-sampled", s["num_sampled"], 1)
    # eq. 10's private noise (noise="paper"): the mechanism the accountant's options describe
    if s["scheme"] == "I":
        participation = SchemeI(num_sampled, noise="paper")
    else:
        participation = "full" if num_sampled == n else SchemeII(num_sampled, noise="paper")
    privacy = (ClientLevel if args.adjacency == "client" else RecordLevel)(clip=args.clip)
    return AuditSetting(privacy=privacy, step_size=s["eta"], local_steps=k, rounds=t // k, correlation=s["rho"],
                        num_clients=n, participation=participation, rows=rows,
                        batch_size=None if batch == rows else batch, temperature=s["tau"])


def _audit(args) -> int:
    """Run the audit and print its summary; exit status 1 when the audited lower bound exceeds the
    accounted epsilon (a violation: the accounting or the code is wrong)."""
    from fedlangevin._validation import check_int, check_real
    from fedlangevin.privacy.canary import MIN_REPLICATES, audit

    setting = audit_setting(args)
    replicates = check_int("--replicates", args.replicates, MIN_REPLICATES)
    confidence = check_real("--confidence", args.confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    delta = 1e-5 if args.delta is None else args.delta
    t0 = time.perf_counter()
    result = audit(setting, replicates=replicates, delta=delta, confidence=confidence, seed=args.seed,
                   progress=False if args.no_progress else None)
    print(result.summary())
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    return 0 if result.consistent else 1


def main(args: argparse.Namespace) -> int:
    from fedlangevin._validation import check_real
    from fedlangevin.commands._checks import UsageError, check_output_file, require

    if args.figure is not None:
        check_output_file("--figure", args.figure)
    for name in ("delta", "target_delta", "delta0", "delta1", "delta2"):
        if getattr(args, name) is not None:
            check_real(f"--{name.replace('_', '-')}", getattr(args, name), low=0.0, high=1.0, low_open=True,
                       high_open=True)
    if args.target_epsilon is not None:
        check_real("--target-epsilon", args.target_epsilon, low=0.0, low_open=True)
    _setting(args)  # the mechanism's options, checked before any work
    if args.adjacency == "client" and (args.solve or args.figure is not None):
        raise UsageError(f"{'--solve' if args.solve else '--figure'} is record-level (the paper's bound beside the "
                         "tight accountant); with --adjacency client report one setting, or use "
                         "fedlangevin.privacy.client_account")
    require("privacy", "dp_accounting", purpose="(the tight accountant)")
    if args.audit:
        if args.solve or args.table or args.figure is not None:
            raise UsageError("--audit runs one setting: leave out --solve, --table and --figure")
        audit_setting(args)  # every option checked before the runs
        return _audit(args)
    if args.table:
        t0 = time.perf_counter()
        print(format_table(table(discretization=args.discretization)))
        print(f"\n({time.perf_counter() - t0:.1f} s)")
        return 0
    if args.figure is not None:
        setting = _setting(args)
        path = figure(args.figure, setting, _paper_deltas(args, setting),
                      progress=False if args.no_progress else None)
        print(f"figure: {path}")
        return 0
    if args.solve:
        _solve(args)
        return 0
    _report(args)
    return 0
