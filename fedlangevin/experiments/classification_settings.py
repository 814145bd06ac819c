"""Settings of the classification study (:mod:`fedlangevin.experiments.classification`): the
paper's defaults (Deng et al., Sec. 7.2), the per data set defaults sized for a CPU, and
:class:`ClassificationSettings`, validated once by :meth:`ClassificationSettings.resolved`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fedlangevin._validation import check_device, check_int, check_real

__all__ = [
    "PAPER_LOCAL_STEPS",
    "SAMPLERS",
    "TUNE_METRICS",
    "DATASET_DEFAULTS",
    "ETA_FACTORS",
    "ClassificationSettings",
]

#: the paper's numbers of local steps (Sec. 7.2)
PAPER_LOCAL_STEPS = (1, 10, 20, 50, 100)

#: the samplers the study runs (one study per sampler, the same ladder and K)
SAMPLERS = ("fald", "fahmc")

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
    sampler : ``"fald"`` (the paper's FA-LD) or ``"fahmc"`` (FA-HMC at the same K and the same
        ladder read as FA-LD's equivalent step, h = sqrt(2 eta): its overdamped limit is FA-LD at
        eta = h^2 / 2, ``docs/fahmc.md``).
    friction : FA-HMC's friction gamma (> 0; ignored by FA-LD).
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
    search : ``"ladder"`` (walk the sorted candidates from ``eta_start``, see
        :mod:`~fedlangevin.experiments.classification`) or ``"grid"`` (run every candidate for every K).
    eta_start : the candidate (a factor, or an absolute step with ``step_sizes``) the ladder
        starts from for the first K (default: 16 with the default factors, else the middle).
    tune_metric : validation score that picks eta per K (``"nll"``, ``"brier"``,
        ``"accuracy"``, ``"ece"``), of the after-warm-up BMA at the last round.
    validation_fraction : share of each class of the training data held out for tuning.
    test_fraction : test share for the bundled data sets (files bring their own test split).
    chains : independent chains per run (curves are chain means).
    seed : seeds the data split, the validation split and the sampler.
    dtype : ``"float32"`` (default, about 2x faster on CPU) or ``"float64"``.
    device : where the chains run (``"cpu"``, default, or e.g. ``"cuda"``); the scores are computed
        on the CPU in float64 either way.
    n_bins : ECE bins (equal width, Guo et al. 2017).
    """

    dataset: str = "digits"
    sampler: str = "fald"
    friction: float = 1.0
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
    device: str = "cpu"
    n_bins: int = 15

    def resolved(self) -> "ClassificationSettings":
        """Fill the ``None`` fields from the data set's defaults and validate everything."""
        defaults = DATASET_DEFAULTS.get(self.dataset, _GENERIC_DEFAULTS)
        s = replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})
        if s.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got {s.sampler!r}")
        check_real("friction", s.friction, low=0.0, low_open=True)
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
        check_device("device", s.device)
        return replace(s, local_steps=ks, rounds=rounds, thin=thin, warmup=warmup)

