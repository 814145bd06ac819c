"""Settings and per-method results of the comparison (:mod:`fedlangevin.experiments.comparison`).

Kept apart from the runner so that the report (:mod:`fedlangevin.experiments.comparison_report`)
can name them without importing the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedlangevin._validation import check_int, check_real
from fedlangevin.compression import METHODS as COMPRESSION_METHODS
from fedlangevin.data.splits import SPLITS
from fedlangevin.experiments.scoring import METRICS

__all__ = ["CORRECTED", "METHODS", "ComparisonSettings", "MethodRun"]

#: the compressed-FL optimizers compared: every :data:`fedlangevin.compression.METHODS` but
#: ``lossless``, which is FedAvg under another name (exact both ways)
_OPTIMIZERS = tuple(m for m in COMPRESSION_METHODS if m != "lossless")
#: FA-LD with a drift correction (:mod:`fedlangevin.corrections.drift`): method key -> correction name
CORRECTED = {"fald_cv": "control_variates", "fald_conducive": "conducive", "fald_qlsd": "qlsd++"}
#: method keys: ``fald_q`` stands for one quantized FA-LD run per level in ``fald_q_levels``; the
#: corrected FA-LD runs are not in the default ``methods`` (ask for them: ``--methods fald fald_cv ...``)
METHODS = ("fald", "fald_q", *_OPTIMIZERS, *CORRECTED)
_DOWNLINKS = ("broadcast", "per_client")


@dataclass(frozen=True)
class ComparisonSettings:
    """Settings shared by every method (one federated data set per data set x split).

    Parameters
    ----------
    datasets : ``"digits"``, ``"mnist5k"``, MNIST-format folders or ``.npz`` files.
    splits : ``"iid"``, ``"label_skew"`` (``classes_per_client`` classes per client) and/or
        ``"dirichlet"`` (``dirichlet_alpha``).
    methods : a subset of :data:`METHODS` (default: all but the corrected FA-LD runs of :data:`CORRECTED`).
    num_clients : N, every client takes part in every round (all methods).
    rounds : communication rounds T of FA-LD and the LFL family.
    local_steps : K, local steps per round (FA-LD's SGLD steps, the optimizers' tau).
    batch_size : minibatch per client and local step (FA-LD and the LFL family).
    evaluations : about this many test evaluations per run (every T / evaluations rounds).
    temperature, prior_scale : FA-LD's tau and prior sigma (the paper's tau = 0.05; the
        classification study's sigma = 1).
    eta_factor : FA-LD's constant step size eta = eta_factor / L, L = ``problem.smoothness``.
    warmup_fraction : w, the share of a chain's samples the BMA leaves out (see module docstring).
    fald_q_levels : quantization levels q of the quantized FA-LD runs.
    lr : learning rate of the LFL family's local SGD (on the mean cross-entropy); ``None``
        (default) matches FA-LD's drift: FA-LD's client energy is n times a mean loss
        (f^c = (1/p_c) NLL_c + prior, n = n_c / p_c), so its gradient step eta grad f^c is the
        SGD step of learning rate eta n on the client's mean cross-entropy (plus the prior).
    q1, q1_ltgm, q2 : broadcast levels (LFL, LGM; LTGM, whose broadcast needs a large q1: the
        LFL paper's Fig. 1a uses 50) and the upload level of LB, LFL, LGM, LTGM.
    dzofl_rounds, dzofl_alpha0, dzofl_gamma0, dzofl_batch_size : DZOFL's rounds and
        :class:`~fedlangevin.compression.DZOFLConfig` (paper exponents v1 = v2 = 0.26, batch 10).
    bits_per_entry : bits of an exact entry (33, the LFL paper's R_LB = 33 d).
    downlink : ``"broadcast"`` (a broadcast counted once per round) or ``"per_client"`` (N times).
    test_fraction : test share of the bundled data sets.
    seed : seeds the test split, the client split, every sampler and optimizer.
    n_bins : ECE bins.
    bootstrap : paired-bootstrap resamples of the test set for the differences' intervals.
    """

    datasets: tuple[str, ...] = ("digits", "mnist5k")
    splits: tuple[str, ...] = ("iid", "label_skew")
    methods: tuple[str, ...] = ("fald", "fald_q", *_OPTIMIZERS)
    num_clients: int = 10
    classes_per_client: int = 2
    dirichlet_alpha: float = 0.5
    rounds: int = 200
    local_steps: int = 10
    batch_size: int = 50
    evaluations: int = 20
    temperature: float = 0.05
    prior_scale: float = 1.0
    eta_factor: float = 16.0
    warmup_fraction: float = 0.25
    fald_q_levels: tuple[int, ...] = (2, 8)
    lr: float | None = None
    q1: int = 2
    q1_ltgm: int = 50
    q2: int = 2
    dzofl_rounds: int = 4000
    dzofl_alpha0: float = 2.0
    dzofl_gamma0: float = 0.05
    dzofl_batch_size: int = 10
    bits_per_entry: int = 33
    downlink: str = "broadcast"
    test_fraction: float = 0.2
    seed: int = 0
    n_bins: int = 15
    bootstrap: int = 1000

    def resolved(self) -> "ComparisonSettings":
        """Validated copy (tuples for the list fields); raises ValueError naming the argument."""
        datasets = tuple(self.datasets)
        if not datasets or not all(isinstance(d, str) and d for d in datasets):
            raise ValueError(f"datasets must be a non-empty list of names or paths; got {self.datasets!r}")
        splits = tuple(self.splits)
        if not splits or any(sp not in SPLITS for sp in splits):
            raise ValueError(f"splits must be a non-empty list of {', '.join(SPLITS)}; got {self.splits!r}")
        methods = tuple(self.methods)
        if not methods or any(m not in METHODS for m in methods) or len(set(methods)) != len(methods):
            raise ValueError(f"methods must be a non-empty list of distinct names from {', '.join(METHODS)}; "
                             f"got {self.methods!r}")
        levels = tuple(check_int("fald_q_levels", q, 1) for q in self.fald_q_levels)
        if "fald_q" in methods and (not levels or len(set(levels)) != len(levels)):
            raise ValueError(f"fald_q_levels must be distinct integers >= 1 (at least one); got {self.fald_q_levels!r}")
        check_int("num_clients", self.num_clients, 1)
        check_int("classes_per_client", self.classes_per_client, 1)
        check_real("dirichlet_alpha", self.dirichlet_alpha, low=0.0, low_open=True)
        check_int("rounds", self.rounds, 1)
        check_int("local_steps", self.local_steps, 1)
        check_int("batch_size", self.batch_size, 1)
        check_int("evaluations", self.evaluations, 1)
        check_real("temperature", self.temperature, low=0.0, low_open=True)
        check_real("prior_scale", self.prior_scale, low=0.0, low_open=True)
        check_real("eta_factor", self.eta_factor, low=0.0, low_open=True)
        check_real("warmup_fraction", self.warmup_fraction, low=0.0, high=1.0, high_open=True)
        if self.lr is not None:
            check_real("lr", self.lr, low=0.0, low_open=True)
        for name in ("q1", "q1_ltgm", "q2", "dzofl_rounds", "dzofl_batch_size", "bits_per_entry", "n_bins",
                     "bootstrap"):
            check_int(name, getattr(self, name), 1)
        check_real("dzofl_alpha0", self.dzofl_alpha0, low=0.0, low_open=True)
        check_real("dzofl_gamma0", self.dzofl_gamma0, low=0.0, low_open=True)
        if self.downlink not in _DOWNLINKS:
            raise ValueError(f"downlink must be one of {', '.join(_DOWNLINKS)}; got {self.downlink!r}")
        check_real("test_fraction", self.test_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
        check_int("seed", self.seed, 0)
        return replace(self, datasets=datasets, splits=splits, methods=methods, fald_q_levels=levels)

    def method_keys(self) -> list[str]:
        """The runs of one setting, in order: ``fald_q`` expanded to ``fald_q<level>``."""
        keys = []
        for m in self.methods:
            keys.extend([f"fald_q{q}" for q in self.fald_q_levels] if m == "fald_q" else [m])
        return keys

    def label(self, key: str) -> str:
        """Legend label of a run."""
        if key.startswith("fald_q") and key not in CORRECTED:
            return f"FA-LD, quantized uploads (q = {key[6:]})"
        return {
            "fald": "FA-LD (BMA), exact uploads",
            "fedavg": "FedAvg (lossless)",
            "lb": f"LB (q2 = {self.q2})",
            "lfl": f"LFL (q1 = {self.q1}, q2 = {self.q2})",
            "lgm": f"LGM (q1 = {self.q1}, q2 = {self.q2})",
            "ltgm": f"LTGM (q1 = {self.q1_ltgm}, q2 = {self.q2})",
            "dzofl": "DZOFL (16-bit scalars)",
            "fald_cv": "FA-LD + control variates (same bits)",
            "fald_conducive": "FA-LD + conducive gradients (same bits)",
            "fald_qlsd": "FA-LD + QLSD++ memories (same bits)",
        }[key]


@dataclass
class MethodRun:
    """One method on one setting: its test-metric curve against cumulative bits, the final
    predictive probabilities on the test set, wall time and method-specific ``info``."""

    dataset: str
    split: str
    method: str
    label: str
    rounds: list[int]
    bits_up: list[float]
    bits_down: list[float]
    metrics: dict[str, list[float]]
    final_probs: np.ndarray | None
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def bits_total(self) -> list[float]:
        return [a + b for a, b in zip(self.bits_up, self.bits_down)]

    def final(self) -> dict[str, float]:
        return {m: self.metrics[m][-1] for m in METRICS}


