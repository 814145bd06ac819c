"""Effective samples per communication round: the benchmark behind ``benchmarks/bench_rounds.py``
(``docs/rounds.md``).

In a federated deployment every gradient of the global energy costs one round, so samplers are
compared by what a round buys. Per validation posterior (the posteriordb ones found under
:data:`~fedlangevin.experiments.posteriordb.SHARED` and the breast cancer logistic regression of
:mod:`~fedlangevin.experiments.logistic_posterior`) and per sampler of :data:`SAMPLERS`, a row
(:class:`RoundsRow`) holds:

- **rounds to the acceptance**: the budgets of the sampler's grid are run from the smallest up,
  each a fresh run from the sampler's default start, until one passes the acceptance of the
  validation (max |mean - mean_ref| <= 0.1 sd_ref, every sd / sd_ref in [0.9, 1.1]:
  :meth:`~fedlangevin.experiments.posteriordb.ValidationRow.passes`); the rounds of that run
  (a federation running all chains at once waits that many rounds), or ``None``;
- of the **headline run** (the largest budget): the acceptance figures, the min bulk ESS (over the
  reference's parameters, :func:`~fedlangevin.experiments.posteriordb.compare`), the **ESS per
  chain-round** = min bulk ESS / rounds paid by all chains together, warm-up included (FA-LD:
  chains x rounds; federated NUTS: its gradient evaluations, so the figure is NUTS's ESS per
  gradient), the bits sent both ways (all chains, 64 bits a float) and the wall time.

Samplers (:data:`SAMPLERS`, a registry: a new row is one :class:`SamplerSpec`):

- ``"fald"``: FA-LD as a user gets it, ``FALD(problem, local_steps=1, chains=R, seed=s)`` and
  ``run(budget)``: every default (start, step size, warm-up = half the rounds, M), so a rerun
  picks up changed defaults;
- ``"nuts"``: :func:`~fedlangevin.baselines.federated_nuts` (Pyro's NUTS with a dense mass matrix,
  from zeros), a budget n being n iterations per chain, n / 2 of them warm-up; its "rounds" are
  the largest count of any chain (the chains run in parallel in a federation);
- ``"consensus"``: one-shot consensus Monte Carlo (:func:`~fedlangevin.baselines.consensus_monte_carlo`,
  ``docs/consensus.md``): NUTS on every client's sub-posterior, a budget n being n iterations per
  chain and client (n / 2 warm-up), the draws combined once: always one round, its accuracy is
  that of the combination.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Callable

import numpy as np

from fedlangevin._validation import check_bool, check_int

__all__ = [
    "Attempt", "Budgets", "QUICK", "RoundsRow", "SAMPLERS", "SamplerSpec", "available", "figure", "load_posterior",
    "measure", "merge_rows", "read_rows", "summary_table", "table", "write_json",
]

BITS_PER_FLOAT = 64  # every float exchanged is a float64


@dataclass(frozen=True)
class Budgets:
    """The benchmark's settings: chains and budget grids per sampler (budgets: FA-LD rounds; NUTS
    iterations per chain), the seed of every run, NUTS's mass matrix (dense or diagonal) and its
    cost cap: the most rounds (gradient evaluations) the chains of one NUTS run may make together
    (``None``: no cap). Where NUTS's trees saturate (1,023 rounds per iteration at depth 10) a run
    stops there and fails; its row says so."""

    fald_chains: int = 32
    fald_rounds: tuple[int, ...] = (250, 500, 1000, 2000)
    nuts_chains: int = 4
    nuts_iterations: tuple[int, ...] = (250, 500, 1000, 2000)
    nuts_dense_mass: bool = True
    nuts_max_rounds: int | None = 1_000_000
    consensus_chains: int = 4
    consensus_iterations: tuple[int, ...] = (250, 1000)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("fald_chains", "nuts_chains", "consensus_chains"):
            check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0, 2**32 - 1 - self.nuts_chains)
        if self.nuts_max_rounds is not None:
            check_int("nuts_max_rounds", self.nuts_max_rounds, 1)
        check_bool("nuts_dense_mass", self.nuts_dense_mass)
        # >= 4 draws per chain for the split ESS
        for name, low in (("fald_rounds", 2), ("nuts_iterations", 8), ("consensus_iterations", 8)):
            grid = getattr(self, name)
            if not isinstance(grid, tuple) or not grid:
                raise ValueError(f"{name} must be a non-empty tuple of integers >= {low}; got {grid!r}")
            object.__setattr__(self, name, tuple(sorted({check_int(name, b, low) for b in grid})))


#: ``--quick``: small grids and few chains (a smoke run, not a measurement)
QUICK = Budgets(fald_chains=8, fald_rounds=(100, 200), nuts_chains=2, nuts_iterations=(60, 120),
                nuts_max_rounds=100_000, consensus_chains=2, consensus_iterations=(60, 120))


@dataclass(frozen=True)
class Attempt:
    """One run of a sampler at one budget: ``samples`` (chains, draws, d) in the problem's space
    (``None`` when the run diverged), ``rounds`` the federation waited (chains in parallel),
    ``chain_rounds`` paid by all chains together (warm-up included), ``bits`` sent both ways (all
    chains), ``seconds`` of wall time, ``note`` (e.g. why there are no samples); ``capped``: the
    run stopped at a cost cap."""

    budget: int
    samples: np.ndarray | None
    rounds: int
    chain_rounds: int
    bits: float
    seconds: float
    note: str = ""
    capped: bool = False


@dataclass(frozen=True)
class SamplerSpec:
    """A row of the benchmark: ``label`` in the tables, ``run(post, budget, budgets) -> Attempt``,
    which fields of :class:`Budgets` hold its grid and its chain count, and what a budget counts
    (``unit``, for the tables)."""

    label: str
    run: Callable[[Any, int, Budgets], Attempt]
    grid: str
    chains: str
    unit: str = "rounds"


def _run_fald_defaults(post, budget: int, budgets: Budgets) -> Attempt:
    """FA-LD with every default (no init, no step size): what a user passing the problem, K = 1
    and the chains gets."""
    import torch

    import fedlangevin as fl

    start = time.perf_counter()
    sampler = fl.FALD(post.problem, local_steps=1, chains=budgets.fald_chains, seed=budgets.seed)
    try:
        samples, note = sampler.run(budget, progress=False).numpy(), ""
    except fl.DivergenceError as exc:
        samples, note = None, f"diverged in round {exc.round}"
    seconds = time.perf_counter() - start
    com = sampler.communication
    bits = (com.floats_up + com.floats_down) * budgets.fald_chains * torch.finfo(sampler.dtype).bits
    return Attempt(budget, samples, int(com.rounds), int(com.rounds) * budgets.fald_chains, float(bits), seconds, note)


def _run_federated_nuts(post, budget: int, budgets: Budgets) -> Attempt:
    """Federated NUTS (a non-private baseline): ``budget`` iterations per chain, half warm-up."""
    from fedlangevin.baselines import RoundLimitError, federated_nuts

    warmup = budget // 2
    problem = post.problem
    try:
        res = federated_nuts(problem, chains=budgets.nuts_chains, draws=budget - warmup, warmup=warmup,
                             seed=budgets.seed, dense_mass=budgets.nuts_dense_mass, max_rounds=budgets.nuts_max_rounds)
    except RoundLimitError as exc:  # every round: d floats down and d + 1 up per client
        bits = exc.rounds * problem.num_clients * (2 * problem.dim + 1) * BITS_PER_FLOAT
        return Attempt(budget, None, exc.rounds, exc.rounds, float(bits), exc.seconds,
                       f"stopped at the cap of {exc.rounds:,} rounds (chain {exc.chain + 1} of {budgets.nuts_chains})",
                       capped=True)
    return Attempt(budget, res.samples, max(res.rounds_per_chain), res.rounds,
                   float(res.floats_up + res.floats_down) * BITS_PER_FLOAT, res.seconds)


def _run_consensus(post, budget: int, budgets: Budgets) -> Attempt:
    """One-shot consensus Monte Carlo (:func:`~fedlangevin.baselines.consensus_monte_carlo`): every
    client runs NUTS on its sub-posterior, ``budget`` iterations per chain (half warm-up), and uploads
    its draws once; one round. ``chain_rounds``: one per chain (chains x rounds, as FA-LD's); the
    local gradient evaluations are not communication. A client's run stopped at ``nuts_max_rounds``
    local evaluations fails the row."""
    from fedlangevin.baselines import RoundLimitError, consensus_monte_carlo

    warmup, chains, problem = budget // 2, budgets.consensus_chains, post.problem
    start = time.perf_counter()
    try:
        res = consensus_monte_carlo(problem, chains=chains, draws=budget - warmup, warmup=warmup, seed=budgets.seed,
                                    max_evaluations=budgets.nuts_max_rounds)
    except RoundLimitError as exc:
        return Attempt(budget, None, 1, chains, 0.0, time.perf_counter() - start,
                       f"client {getattr(exc, 'client', '?')}'s NUTS stopped at the cap of {exc.rounds:,} evaluations",
                       capped=True)
    return Attempt(budget, res.samples, res.rounds, res.rounds * chains,
                   float(res.floats_up + res.floats_down) * BITS_PER_FLOAT, res.seconds)


#: the samplers benchmarked, by name (``--samplers``); add a :class:`SamplerSpec` for a new row
SAMPLERS: dict[str, SamplerSpec] = {
    "fald": SamplerSpec("FA-LD defaults", _run_fald_defaults, "fald_rounds", "fald_chains"),
    "nuts": SamplerSpec("federated NUTS", _run_federated_nuts, "nuts_iterations", "nuts_chains", "iterations"),
    "consensus": SamplerSpec("consensus MC", _run_consensus, "consensus_iterations", "consensus_chains", "iterations"),
}


@dataclass(frozen=True)
class RoundsRow:
    """One posterior and sampler (see the module docstring). ``tried``: (budget, rounds, passes)
    of every run made, in order; ``ess_per_round``: min bulk ESS / ``chain_rounds``."""

    posterior: str
    sampler: str
    dim: int
    chains: int
    rounds_to_accept: int | None
    rounds: int
    chain_rounds: int
    max_mean_error: float
    min_sd_ratio: float
    max_sd_ratio: float
    passes: bool
    min_ess_bulk: float
    ess_per_round: float
    bits: float
    seconds: float
    tried: tuple = field(default=())
    note: str = ""

    HEADER = ("| posterior | d | sampler | chains | rounds to acceptance | max mean err / sd | sd ratio min-max | "
              "min bulk ESS | ESS per chain-round | rounds per chain | Mbit sent | kbit per ESS | time s |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def markdown(self, limit: str = "no") -> str:
        """The row in :attr:`HEADER`'s columns; ``limit``: what the "rounds to acceptance" cell
        says when no budget passed (:func:`table`: "not within" the largest budget)."""
        reach = f"{self.rounds_to_accept:,}" if self.rounds_to_accept is not None else limit
        if self.note:
            return (f"| {self.posterior} | {self.dim} | {self.sampler} | {self.chains} | {reach} | {self.note} | - | - "
                    f"| - | {self.rounds:,} | {self.bits / 1e6:,.1f} | - | {self.seconds:.1f} |")
        flag = "" if self.passes else " (fails)"
        return (f"| {self.posterior} | {self.dim} | {self.sampler} | {self.chains} | {reach} | "
                f"{self.max_mean_error:.3f}{flag} | {self.min_sd_ratio:.2f}-{self.max_sd_ratio:.2f} | "
                f"{self.min_ess_bulk:.0f} | {self.ess_per_round:.2g} | {self.rounds:,} | {self.bits / 1e6:,.1f} | "
                f"{self.bits / 1e3 / self.min_ess_bulk:,.0f} | {self.seconds:.1f} |")


def _row(post, spec: SamplerSpec, attempt: Attempt, chains: int, reach: int | None, tried) -> RoundsRow:
    from fedlangevin.experiments.posteriordb import compare

    common = dict(posterior=post.name, sampler=spec.label, dim=int(post.problem.dim), chains=chains,
                  rounds_to_accept=reach, rounds=attempt.rounds, chain_rounds=attempt.chain_rounds, bits=attempt.bits,
                  seconds=attempt.seconds, tried=tuple(tried))
    if attempt.samples is None:
        nan = math.nan
        return RoundsRow(**common, max_mean_error=nan, min_sd_ratio=nan, max_sd_ratio=nan, passes=False,
                         min_ess_bulk=nan, ess_per_round=nan, note=attempt.note or "no samples")
    v = compare(post, attempt.samples, attempt.seconds)
    return RoundsRow(**common, max_mean_error=v.max_mean_error, min_sd_ratio=v.min_sd_ratio,
                     max_sd_ratio=v.max_sd_ratio, passes=v.passes(), min_ess_bulk=v.min_ess_bulk,
                     ess_per_round=v.min_ess_bulk / attempt.chain_rounds, note=attempt.note)


def _passes(post, attempt: Attempt) -> bool:
    from fedlangevin.experiments.posteriordb import compare

    return attempt.samples is not None and compare(post, attempt.samples, attempt.seconds).passes()


def measure(post, sampler: str, budgets: Budgets = Budgets(),
            progress: Callable[[str], None] | None = None) -> RoundsRow:
    """The row of ``sampler`` (a key of :data:`SAMPLERS`) on ``post`` (a
    :class:`~fedlangevin.experiments.posteriordb.Posterior`): its grid from the smallest budget up
    until a run passes, then the largest budget's run (reused when it was the one that passed)
    for the headline figures. A run stopped at a cost cap fails; the search goes on (a larger
    budget can cost fewer rounds: NUTS's longer warm-up adapts a mass matrix that shortens its
    trees). ``progress`` gets a line per run."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got {sampler!r}")
    if not isinstance(budgets, Budgets):
        raise ValueError(f"budgets must be a Budgets record; got {budgets!r}")
    spec = SAMPLERS[sampler]
    grid, chains = getattr(budgets, spec.grid), getattr(budgets, spec.chains)
    tried, reach, last = [], None, None
    for budget in grid:
        last = spec.run(post, budget, budgets)
        ok = _passes(post, last)
        tried.append((budget, last.rounds, ok))
        if progress is not None:
            progress(f"  {post.name} {spec.label} budget {budget}: {last.rounds:,} rounds, "
                     f"{'passes' if ok else 'fails'}{', ' + last.note if last.note else ''} ({last.seconds:.1f} s)")
        if ok:
            reach = last.rounds
            break
    headline = last if last.budget == grid[-1] else spec.run(post, grid[-1], budgets)
    if headline is not last:
        tried.append((grid[-1], headline.rounds, _passes(post, headline)))
        if progress is not None:
            progress(f"  {post.name} {spec.label} budget {grid[-1]} (headline): {headline.rounds:,} rounds "
                     f"({headline.seconds:.1f} s)")
    return _row(post, spec, headline, chains, reach, tried)


# -- posteriors ---------------------------------------------------------------------------------
def available(root=None) -> list[str]:
    """The validation posteriors whose data are found: the posteriordb names with a folder under
    ``root`` (default :data:`~fedlangevin.experiments.posteriordb.SHARED`), then the logistic
    regression (shipped with the package)."""
    from pathlib import Path

    from fedlangevin.experiments import posteriordb
    from fedlangevin.experiments.logistic_posterior import NAME

    base = Path(posteriordb.SHARED if root is None else root)
    return [n for n in posteriordb.POSTERIORS if (base / n / "reference_draws.json.zip").is_file()] + [NAME]


def load_posterior(name: str, root=None):
    """A validation posterior by name: a posteriordb one (:func:`~fedlangevin.experiments.posteriordb.load`,
    10 clients) or :data:`~fedlangevin.experiments.logistic_posterior.NAME`."""
    from fedlangevin.experiments import posteriordb
    from fedlangevin.experiments.logistic_posterior import NAME, load_logistic

    if name == NAME:
        return load_logistic()
    if name not in posteriordb.POSTERIORS:
        raise ValueError(f"name must be one of {', '.join(posteriordb.POSTERIORS + (NAME,))}; got {name!r}")
    return posteriordb.load(name, root)


# -- tables, JSON, figure -----------------------------------------------------------------------
def table(rows: list[RoundsRow], budgets: Budgets = Budgets()) -> str:
    """The markdown table of ``rows`` (:attr:`RoundsRow.HEADER`)."""
    limits = {spec.label: f"not within {getattr(budgets, spec.grid)[-1]:,} {spec.unit}" for spec in SAMPLERS.values()}
    return "\n".join([RoundsRow.HEADER] + [r.markdown(limits.get(r.sampler, "no")) for r in rows])


def summary_table(rows: list[RoundsRow], fald: str = "FA-LD defaults", nuts: str = "federated NUTS",
                  max_rounds: int = 2000) -> str:
    """Per posterior, the issue's two targets for ``fald`` against ``nuts``: ESS per chain-round
    >= NUTS's ESS per gradient (met only where ``fald``'s run also passes the acceptance), and the
    acceptance within ``max_rounds`` rounds (K = 1)."""
    lines = ["| posterior | FA-LD ESS per chain-round | NUTS ESS per gradient | FA-LD / NUTS | target 1: ESS per round "
             "| FA-LD rounds to acceptance | target 2: acceptance within 2,000 rounds |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    by = {(r.posterior, r.sampler): r for r in rows}
    for name in dict.fromkeys(r.posterior for r in rows):
        f, n = by.get((name, fald)), by.get((name, nuts))
        if f is None or n is None:
            continue
        ratio = f.ess_per_round / n.ess_per_round if n.ess_per_round > 0 else math.nan
        # an ESS of draws that fail the acceptance (chains far from the bulk) counts for nothing
        met1 = ("met" if ratio >= 1 else "not met") if f.passes else "not met (fails the acceptance)"
        if f.passes and not math.isfinite(n.ess_per_round):
            met1 = f"no NUTS figure: {n.note}"
        reach = f.rounds_to_accept
        met2 = "met" if reach is not None and reach <= max_rounds else "not met"
        cells = [f"{v:.2g}" if math.isfinite(v) else "-" for v in (f.ess_per_round, n.ess_per_round, ratio)]
        lines.append(f"| {name} | {' | '.join(cells)} | {met1} | "
                     f"{'-' if reach is None else f'{reach:,}'} | {met2} |")
    return "\n".join(lines)


def write_json(rows: list[RoundsRow], path, *, budgets: Budgets, seconds: float, command: str) -> None:
    """The rows, the settings, the command and its total time, as JSON (NaN written as null)."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    out = {"command": command, "seconds": round(seconds, 1), "budgets": asdict(budgets),
           "rows": [{k: clean(v) for k, v in asdict(r).items()} for r in rows]}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def merge_rows(*runs: list[RoundsRow]) -> list[RoundsRow]:
    """The rows of several runs as one list: a (posterior, sampler) row of a later run replaces the
    same row of an earlier one, in place; new rows are appended."""
    merged: dict[tuple[str, str], RoundsRow] = {}
    for rows in runs:
        for r in rows:
            merged[(r.posterior, r.sampler)] = r
    return list(merged.values())


def read_rows(path) -> tuple[list[RoundsRow], Budgets]:
    """The rows and settings of a JSON written by :func:`write_json` (to redraw without rerunning)."""
    with open(path) as f:
        data = json.load(f)
    names = {f.name for f in fields(RoundsRow)}
    rows = []
    for d in data["rows"]:
        d = {k: (math.nan if v is None and k not in ("rounds_to_accept",) else v) for k, v in d.items() if k in names}
        d["tried"] = tuple(tuple(t) for t in d.get("tried", ()))
        rows.append(RoundsRow(**d))
    b = data["budgets"]
    budgets = replace(Budgets(), **{k: tuple(v) if isinstance(v, list) else v for k, v in b.items()})
    return rows, budgets


def figure(rows: list[RoundsRow], path) -> None:
    """ESS per chain-round (log scale) per posterior, one bar per sampler; a hatched bar: that run
    fails the acceptance; a cross at the bottom: no samples (diverged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.posterior for r in rows))
    labels = list(dict.fromkeys(r.sampler for r in rows))
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) + 2), 4.5))
    finite = [r.ess_per_round for r in rows if np.isfinite(r.ess_per_round) and r.ess_per_round > 0]
    floor = min(finite) / 3 if finite else 1e-4
    for i, lab in enumerate(labels):
        pick = {r.posterior: r for r in rows if r.sampler == lab}
        for j, name in enumerate(names):
            r = pick.get(name)
            if r is None:
                continue
            x = j + (i - (len(labels) - 1) / 2) * width
            if not (np.isfinite(r.ess_per_round) and r.ess_per_round > 0):
                ax.plot([x], [floor], "x", color=f"C{i}", ms=8)
                continue
            ax.bar(x, r.ess_per_round, width, color=f"C{i}", hatch=None if r.passes else "//", edgecolor="k",
                   linewidth=0.5)
    ax.set_yscale("log")
    ax.set_ylabel("min bulk ESS per chain-round\n(NUTS: per gradient; warm-up included)")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.split("-")[0] for n in names], rotation=40, ha="right")
    for i, lab in enumerate(labels):  # one legend entry per sampler, whether or not it has a bar
        ax.bar([0], [np.nan], width, color=f"C{i}", edgecolor="k", linewidth=0.5, label=lab)
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(labels), frameon=False,
              title="hatched: the run fails the acceptance; x: no draws (diverged, or stopped at the cost cap)",
              title_fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
