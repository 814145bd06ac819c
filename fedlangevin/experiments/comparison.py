"""What sampling costs and buys: FA-LD beside quantized-communication FL optimizers on the same
federated data, scored against the bits communicated.

For every data set (``digits``, ``mnist5k``, or the user's MNIST-format files) and every
federated split (iid and a non-iid one: label skew or Dirichlet) the same clients and the same
test set are given to

* **FA-LD** (Deng et al., Alg. 1): Bayesian multinomial logistic regression
  (:class:`~fedlangevin.problems.LogisticRegression`, prior N(0, sigma^2 I), temperature tau),
  K local SGLD steps per round with minibatches, full participation, one chain; scored by the
  Bayesian model average (BMA) of its samples after a warm-up. At an evaluation after r
  rounds the BMA averages the predicted probabilities of the samples of rounds
  floor(w r) + 1 .. r (``warmup_fraction`` w: the usual rule of dropping the first part of a
  chain), so the last point is the BMA of the samples after a warm-up of w T rounds;
* **FA-LD with quantized uploads**: the same sampler with
  :class:`~fedlangevin.compression.QuantizedUpdateUpload` (each client sends Q(beta^c - theta, q),
  LFL's quantizer) — with its own random stream, so that its sampler noise and minibatches are
  those of the exact run (common random numbers: the two differ by the quantization alone);
* the optimizers of :mod:`fedlangevin.compression` with the softmax-regression model
  :class:`~fedlangevin.compression.MultinomialLogistic` (the same d): **FedAvg** (lossless both
  ways), **LB**, **LFL**, **LGM**, **LTGM** (tau = K local SGD steps with the same batch size)
  and **DZOFL** (zero-order, one 16-bit scalar per device and round, so given more rounds); each
  is scored by its server model.

Metrics on the test set: accuracy, Brier score, ECE (15 equal-width bins) and NLL
(:mod:`diagnostics` calibration functions), against the cumulative bits of both directions.

Bits. An exact d-vector costs ``bits_per_entry`` d bits (33 d, the LFL paper's R_LB, as
:func:`fedlangevin.compression.lossless_bits`); a quantized one R_Q(d, q) = 64 + d (1 + log2(q+1))
(:func:`~fedlangevin.compression.quantized_bits`). FA-LD communicates exactly as FedAvg: every
round the server broadcasts the global parameters (33 d) and each of the N participating
clients uploads its local state (33 d each; R_Q(d, q) each with quantized uploads). As in
:mod:`fedlangevin.compression`, a broadcast is counted once per round (one transmission
reaches all clients, ``downlink="broadcast"``); ``downlink="per_client"`` counts it N times,
for every method alike.

Whether the Langevin noise masks the quantization: the quantized runs record, every round, the
exact variance per coordinate of the quantization error in the server average,
sum_c p_c^2 v_c (:func:`~fedlangevin.compression.aggregated_error_variance`), and divide it by
the variance FA-LD injects into the average in one round, 2 eta tau K (eq. 15).

Use :func:`run_comparison` from Python or ``fedlangevin compare`` from the shell.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch

from fedlangevin.experiments.comparison_report import ComparisonResult, paired_differences
from fedlangevin.experiments.comparison_settings import CORRECTED, METHODS, ComparisonSettings, MethodRun
from fedlangevin.experiments.scoring import METRICS, scores

__all__ = [
    "METHODS",
    "METRICS",
    "ComparisonSettings",
    "ComparisonResult",
    "MethodRun",
    "Setting",
    "fald_bits_per_round",
    "prepare_setting",
    "run_comparison",
    "run_setting",
]

@dataclass(frozen=True)
class Setting:
    """One federated data set: the clients of a split, the test set, the FA-LD problem."""

    dataset: str
    split: str
    clients: list  # [(X_c, y_c)]
    X_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    problem: Any  # LogisticRegression
    smoothness: float  # L = problem.smoothness (computed once)

    @property
    def dim(self) -> int:
        return int(self.problem.dim)

    def step_size(self, s: ComparisonSettings) -> float:
        """FA-LD's eta = eta_factor / L."""
        return s.eta_factor / self.smoothness

    def learning_rate(self, s: ComparisonSettings) -> float:
        """The optimizers' SGD learning rate: ``s.lr``, or eta n (FA-LD's drift) if ``None``."""
        return s.lr if s.lr is not None else self.step_size(s) * self.problem.num_data

    @property
    def num_clients(self) -> int:
        return len(self.clients)


def fald_bits_per_round(d: int, num_clients: int, bits_per_entry: int = 33, q: int | None = None,
                        downlink: str = "broadcast") -> tuple[float, float]:
    """(upload, download) bits of one FA-LD round with full participation: N uploads of
    ``bits_per_entry`` d bits (R_Q(d, q) each if ``q`` is given) and one broadcast of
    ``bits_per_entry`` d bits (N of them with ``downlink="per_client"``)."""
    from fedlangevin.compression import lossless_bits, quantized_bits

    up = num_clients * (lossless_bits(d, bits_per_entry) if q is None else quantized_bits(d, q))
    down = lossless_bits(d, bits_per_entry) * (num_clients if downlink == "per_client" else 1)
    return up, down


def prepare_setting(dataset: str, split: str, s: ComparisonSettings) -> Setting:
    """Load ``dataset``, split its training part over N clients with ``split`` and build the
    FA-LD problem; checks that every client holds at least ``batch_size`` points."""
    from fedlangevin.data import apply_partition, load_dataset, make_partition
    from fedlangevin.problems import LogisticRegression

    data = load_dataset(dataset, test_fraction=s.test_fraction, seed=s.seed)
    parts = make_partition(split, data.y_train, s.num_clients, torch.Generator().manual_seed(s.seed),
                           classes_per_client=s.classes_per_client, alpha=s.dirichlet_alpha, min_size=s.batch_size)
    clients = apply_partition(data.X_train, data.y_train, parts)
    smallest = min(len(y) for _, y in clients)
    if s.batch_size > smallest:
        raise ValueError(f"batch_size={s.batch_size} is larger than the smallest client of the {split} split of "
                         f"{data.name} ({smallest} points); choose batch_size <= {smallest}")
    problem = LogisticRegression(clients, num_classes=data.num_classes, prior_scale=s.prior_scale)
    return Setting(data.name, split, clients, data.X_test, data.y_test, data.num_classes, problem, problem.smoothness)


# -- the runs -------------------------------------------------------------------------------------


def _eval_rounds(rounds: int, every: int) -> list[int]:
    """Rounds at which a run is scored: every ``every`` rounds and the last (as History.run)."""
    out = list(range(every, rounds + 1, every))
    if not out or out[-1] != rounds:
        out.append(rounds)
    return out


def _running_bma(problem, samples: torch.Tensor, X: torch.Tensor, eval_rounds: list[int], warmup_fraction: float,
                 chunk: int = 64) -> dict[int, np.ndarray]:
    """BMA probabilities at each evaluation round r: the mean over the samples of rounds
    floor(w r) + 1 .. r (sample j is the global state after round j + 1). Streams the draws in
    chunks and keeps prefix sums only at the window ends, so memory does not grow with T."""
    starts = {r: min(int(math.floor(warmup_fraction * r)), r - 1) for r in eval_rounds}
    marks = sorted(set(eval_rounds) | set(starts.values()))
    Xd = X.double()
    prefix: dict[int, np.ndarray] = {}
    total = None
    done = 0
    last = marks[-1]
    for start in range(0, last, chunk):
        probs = problem.predict_proba(samples[start : start + chunk].double(), Xd).numpy()  # (c, n, C)
        cum = np.cumsum(probs, axis=0)
        if total is None:
            total = np.zeros_like(probs[0])
            prefix[0] = total.copy()
        for m in marks:
            if done < m <= done + len(probs):
                prefix[m] = total + cum[m - done - 1]
        total = total + cum[-1]
        done += len(probs)
    return {r: (prefix[r] - prefix[starts[r]]) / (r - starts[r]) for r in eval_rounds}


class _ErrorRecorder:
    """Upload codec wrapper that records, before quantizing, the exact per-coordinate
    variance of the quantization error in the server average (chain mean)."""

    def __init__(self, codec, weights: torch.Tensor) -> None:
        self.codec = codec
        self.weights = weights
        self.values: list[float] = []

    def __call__(self, beta, theta, generator=None):
        from fedlangevin.compression import aggregated_error_variance

        if bool(torch.isfinite(beta).all()):
            self.values.append(float(aggregated_error_variance(beta, theta, self.weights.to(beta), self.codec.q).mean()))
        else:
            self.values.append(float("nan"))
        return self.codec(beta, theta, generator)

    def __repr__(self) -> str:
        return repr(self.codec)


def _corrected_budget(setting: Setting, s: ComparisonSettings, sampler) -> tuple[int, float, float, float]:
    """Rounds of a corrected run within FA-LD's bits of ``s.rounds`` rounds: (rounds, set-up bits,
    upload bits per round, download bits per round). The correction's one-off set-up (reference
    search, surrogates) runs here; its floats and its extra floats per round cost ``bits_per_entry``
    each; broadcasts count once per round (``downlink="broadcast"``) or N times."""
    sampler._before_rounds()  # the correction's set-up (counted in the ledger), as a run does first
    n, d, b = setting.num_clients, setting.dim, s.bits_per_entry
    per_client = s.downlink == "per_client"
    led = sampler.ledger
    setup = b * led.get("setup_floats_up", 0.0) + b * led.get("setup_floats", 0.0) / (1 if per_client else n)
    extra_up, extra_down = sampler._per_round_floats()
    up, down = fald_bits_per_round(d, n, b, None, s.downlink)
    up += n * b * extra_up
    down += b * extra_down / (1 if per_client else n)
    budget = sum(fald_bits_per_round(d, n, b, None, s.downlink)) * s.rounds
    return max(0, int((budget - setup) // (up + down))), setup, up, down


def _run_fald(setting: Setting, s: ComparisonSettings, q: int | None, eval_rounds: list[int],
              correction: str | None = None) -> MethodRun:
    import fedlangevin as fl
    from fedlangevin.compression import QuantizedUpdateUpload

    problem = setting.problem
    L = setting.smoothness
    eta = setting.step_size(s)
    recorder = None
    if q is not None:
        codec = QuantizedUpdateUpload(q, generator=torch.Generator().manual_seed(s.seed + 1))
        recorder = _ErrorRecorder(codec, problem.weights)
    t0 = time.perf_counter()
    sampler = fl.FALD(problem, step_size=eta, local_steps=s.local_steps, temperature=s.temperature,
                      batch_size=s.batch_size, dtype=torch.float32, seed=s.seed, upload=recorder, correction=correction,
                      chains=1,  # one chain beside each optimizer's one model (its bits are counted per chain)
                      check_local_bias=False)  # the paper's fixed K, on purpose
    rounds, setup_bits = s.rounds, 0.0
    if correction is not None:
        rounds, setup_bits, up, down = _corrected_budget(setting, s, sampler)
        if rounds < 1:
            raise ValueError(f"compare: the {correction} set-up alone costs more bits than FA-LD's {s.rounds} rounds")
        eval_rounds = _eval_rounds(rounds, max(1, rounds // s.evaluations))
    diverged_at = None
    try:
        trace = sampler.run(rounds, thin=1, progress=False)
    except fl.DivergenceError as exc:
        trace, diverged_at = exc.trace, exc.round
    samples = trace.samples[0]  # (rounds done, d), one chain
    scoring = problem.to(dtype=torch.float64)
    ok = [r for r in eval_rounds if r <= samples.shape[0]]
    bma = _running_bma(scoring, samples, setting.X_test, ok, s.warmup_fraction) if ok else {}
    labels = setting.y_test.numpy()
    metrics: dict[str, list[float]] = {m: [] for m in METRICS}
    for r in eval_rounds:
        sc = scores(bma[r], labels, s.n_bins) if r in bma else dict.fromkeys(METRICS, float("nan"))
        for m in METRICS:
            metrics[m].append(sc[m])
    seconds = time.perf_counter() - t0
    if correction is None:
        up, down = fald_bits_per_round(setting.dim, setting.num_clients, s.bits_per_entry, q, s.downlink)
    start = int(math.floor(s.warmup_fraction * samples.shape[0]))
    tail = samples[start:].double()
    info: dict[str, Any] = {"step_size": eta, "smoothness": L, "diverged_at": diverged_at,
                            "injected_variance_per_round": 2.0 * eta * s.temperature * s.local_steps,
                            # spread of the chain after the warm-up: mean over coordinates of the
                            # variance over draws (compared between quantized and exact uploads)
                            "sample_variance": float(tail.var(0).mean()) if len(tail) > 1 else float("nan")}
    if recorder is not None:
        err = np.array(recorder.values)
        info["q"] = q
        info["error_variance"] = err
        info["error_to_noise"] = err / info["injected_variance_per_round"]
    final = bma.get(eval_rounds[-1])
    key = "fald" if q is None else f"fald_q{q}"
    if correction is not None:
        key = next(k for k, v in CORRECTED.items() if v == correction)
        info.update(correction=correction, setup_bits=setup_bits, rounds=rounds,
                    setup_rounds=sampler.ledger.get("correction_rounds", 0))
    return MethodRun(setting.dataset, setting.split, key, s.label(key), list(eval_rounds),
                     [setup_bits + up * r for r in eval_rounds], [down * r for r in eval_rounds], metrics, final,
                     seconds, info)


def _run_optimizer(setting: Setting, s: ComparisonSettings, method: str) -> MethodRun:
    from fedlangevin.compression import DZOFLConfig, LocalSGD, MultinomialLogistic, make_optimizer

    p = int(setting.X_test.shape[1])
    model = MultinomialLogistic(p, setting.num_classes)
    rounds = s.dzofl_rounds if method == "dzofl" else s.rounds
    every = max(1, rounds // s.evaluations)
    kwargs: dict[str, Any] = {}
    if method == "dzofl":
        kwargs["dzofl"] = DZOFLConfig(alpha0=s.dzofl_alpha0, gamma0=s.dzofl_gamma0, batch_size=s.dzofl_batch_size)
    else:
        kwargs.update(local=LocalSGD(lr=setting.learning_rate(s), steps=s.local_steps, batch_size=s.batch_size),
                      q1=s.q1_ltgm if method == "ltgm" else s.q1, q2=s.q2, bits_per_entry=s.bits_per_entry)
    t0 = time.perf_counter()
    opt = make_optimizer(method, setting.clients, model, seed=s.seed, **kwargs)
    hist = opt.run(rounds, (setting.X_test, setting.y_test), eval_every=every)
    seconds = time.perf_counter() - t0
    theta = opt.state.theta.detach().double()
    with torch.no_grad():
        logits = model.logits(theta, setting.X_test.double())
    probs = torch.softmax(logits, dim=-1).numpy() if bool(torch.isfinite(logits).all()) else None
    factor = setting.num_clients if s.downlink == "per_client" else 1
    return MethodRun(setting.dataset, setting.split, method, s.label(method), list(hist.rounds), list(hist.bits_up),
                     [factor * b for b in hist.bits_down], {m: list(hist.metrics[m]) for m in METRICS}, probs, seconds,
                     {"diverged_at": hist.diverged_at, "rounds": rounds,
                      "lr": None if method == "dzofl" else setting.learning_rate(s)})


def run_setting(setting: Setting, s: ComparisonSettings, log: Callable[[str], None] | None = None) -> list[MethodRun]:
    """Every method of ``s`` on one prepared setting."""
    eval_rounds = _eval_rounds(s.rounds, max(1, s.rounds // s.evaluations))
    runs = []
    for key in s.method_keys():
        if key in CORRECTED:
            run = _run_fald(setting, s, None, eval_rounds, CORRECTED[key])
        elif key == "fald" or key.startswith("fald_q"):
            run = _run_fald(setting, s, None if key == "fald" else int(key[6:]), eval_rounds)
        else:
            run = _run_optimizer(setting, s, key)
        runs.append(run)
        if log:
            f = run.final()
            log(f"{setting.dataset} {setting.split:<10} {run.label:<38} acc {f['accuracy']:.4f} Brier {f['brier']:.4f} "
                f"ECE {f['ece']:.4f} NLL {f['nll']:.4f} | {run.bits_total[-1]:.3g} bits ({run.seconds:.1f} s)")
    return runs


def run_comparison(settings: ComparisonSettings | None = None, *, log: Callable[[str], None] | None = None,
                   **overrides: Any) -> ComparisonResult:
    """Run every method on every data set x split (see the module docstring); keyword
    arguments override ``settings``. ``log`` receives one line per finished run. All data
    sets and splits are loaded and checked before the first run starts."""
    t0 = time.perf_counter()
    s = replace(settings or ComparisonSettings(), **overrides).resolved()
    prepared = [prepare_setting(ds, split, s) for ds in s.datasets for split in s.splits]
    runs, differences, sizes = [], [], {}
    for setting in prepared:
        counts = [len(y) for _, y in setting.clients]
        sizes[(setting.dataset, setting.split)] = {
            "clients": setting.num_clients, "train": sum(counts), "test": int(len(setting.y_test)),
            "dim": setting.dim, "client_min": min(counts), "client_max": max(counts),
            "eta": setting.step_size(s), "lr": setting.learning_rate(s)}
        these = run_setting(setting, s, log)
        runs.extend(these)
        differences.extend(paired_differences(these, setting.y_test.numpy(), s))
    return ComparisonResult(s, runs, differences, sizes, time.perf_counter() - t0)
