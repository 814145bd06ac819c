"""A Bayesian logistic regression on real data with a long-run NUTS reference: the validation
posterior beside the posteriordb ones (:mod:`fedlangevin.experiments.posteriordb`) that is a
classifier, used by ``benchmarks/bench_rounds.py`` (``docs/rounds.md``).

Data: the Wisconsin diagnostic breast cancer data (569 tumours, benign or malignant; bundled in
scikit-learn, the ``data`` extra), its ten "mean" features (radius, texture, perimeter, area,
smoothness, compactness, concavity, concave points, symmetry, fractal dimension), each
standardised to mean 0 and sd 1 over the 569 rows (public preprocessing: no client's data alone).
Model: the package's binary softmax regression (:class:`~fedlangevin.problems.LogisticRegression`,
C = 2 classes, a bias per class, N(0, 1) prior on every entry: d = 2 x 11 = 22; the direction
w_0 + w_1 is informed by the prior only, the direction w_0 - w_1 by the data), the rows split
over 10 iid clients (:func:`fedlangevin.data.iid_partition`, seed 0). The posterior does not
depend on the split.

Reference: Pyro's NUTS on the global energy f = sum_c p_c f^c (dense mass matrix, 4 chains of
2,000 warm-up and 10,000 kept iterations, thinned by 5: 8,000 draws), made by
:func:`make_reference` (``benchmarks/make_logistic_reference.py`` regenerates the shipped file,
seed fixed) and stored as ``data/breast_cancer_reference.npz`` (float32 draws, with a JSON
record of how it was made: R-hat and bulk ESS over all kept iterations). It is read with
``allow_pickle=False``: the file cannot execute code.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from fedlangevin._validation import check_int

__all__ = ["NAME", "REFERENCE", "breast_cancer_data", "load_logistic", "make_reference", "read_reference"]

NAME = "breast_cancer-logistic"
#: the shipped reference draws (``make_reference``'s output)
REFERENCE = Path(__file__).resolve().parent / "data" / "breast_cancer_reference.npz"
FEATURES = 10  # the ten "mean" features: the first ten columns of scikit-learn's table
PRIOR_SCALE = 1.0


def breast_cancer_data() -> tuple[np.ndarray, np.ndarray]:
    """(X (569, 10) float64, standardised columns; y (569,) int64, 1 = benign) from scikit-learn's
    bundled copy (no download)."""
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("the breast cancer data come with scikit-learn: pip install \"fedlangevin[data]\"") from exc
    bunch = load_breast_cancer()
    x = np.asarray(bunch.data[:, :FEATURES], dtype=np.float64)
    x = (x - x.mean(0)) / x.std(0)
    return x, np.asarray(bunch.target, dtype=np.int64)


def _problem(clients: int, seed: int):
    from fedlangevin.data.splits import iid_partition
    from fedlangevin.problems import LogisticRegression

    x, y = breast_cancer_data()
    parts = iid_partition(len(y), clients, seed)
    return LogisticRegression.from_partition(torch.as_tensor(x), torch.as_tensor(y), parts, num_classes=2,
                                             prior_scale=PRIOR_SCALE)


def read_reference(path: Path | str = REFERENCE) -> tuple[np.ndarray, dict]:
    """(draws (chains, n, d) float64, info dict) of a reference file written by
    :func:`make_reference`; a missing or malformed file is a ValueError naming ``path``."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            draws = np.asarray(f["draws"], dtype=np.float64)
            info = json.loads(str(f["info"]))
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"path: {str(path)!r} is not a reference file of make_reference ({exc})") from exc
    if draws.ndim != 3 or not np.isfinite(draws).all():
        raise ValueError(f"path: {str(path)!r} holds draws of shape {draws.shape}, expected finite (chains, n, d)")
    return draws, info


def load_logistic(clients: int = 10, seed: int = 0, reference: Path | str = REFERENCE):
    """The breast cancer posterior (see the module docstring) as a
    :class:`~fedlangevin.experiments.posteriordb.Posterior` (what ``compare`` and the benchmarks
    take): the problem split over ``clients`` iid clients (an integer in [1, 569]; the split's
    seed ``seed``), the reference draws pooled, the identity as ``constrain``/``unconstrain``
    (every parameter is unconstrained) and the global energy as ``potential``."""
    from fedlangevin.experiments.posteriordb import Posterior

    clients = check_int("clients", clients, 1, 569)
    seed = check_int("seed", seed, 0)
    problem = _problem(clients, seed)
    draws, _ = read_reference(reference)
    if draws.shape[-1] != problem.dim:
        raise ValueError(f"reference: draws of dimension {draws.shape[-1]}, the problem has d = {problem.dim}")
    names = problem.parameter_names()
    problem.var_names = names
    ident = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    return Posterior(NAME, problem, names, ident, ident, draws.reshape(-1, problem.dim), problem.energy,
                     clients=None, model=None)


def make_reference(chains: int = 4, warmup: int = 2000, draws: int = 10000, thin: int = 5, seed: int = 0,
                   progress: bool = False, max_tree_depth: int = 10) -> tuple[np.ndarray, dict]:
    """Pyro NUTS (dense mass matrix, target acceptance 0.8, trees of at most ``max_tree_depth``
    doublings) on the global energy, ``chains`` chains of ``warmup`` + ``draws`` iterations from
    zeros, chain r seeded ``seed + r``: returns (the kept draws thinned by ``thin``, (chains,
    draws // thin, d) float64, and an info dict: settings, R-hat and bulk ESS of all kept
    iterations (``diagnostics``), seconds). Every count is an integer >= 1 (``chains``,
    ``warmup``, ``draws``, ``thin`` <= ``draws``, ``max_tree_depth`` <= 30)."""
    import pyro
    from pyro.infer import MCMC, NUTS

    import diagnostics as dg

    chains, warmup, draws = check_int("chains", chains, 1), check_int("warmup", warmup, 1), check_int("draws", draws, 1)
    thin, seed = check_int("thin", thin, 1, draws), check_int("seed", seed, 0, 2**32 - 1 - chains)
    max_tree_depth = check_int("max_tree_depth", max_tree_depth, 1, 30)
    problem = _problem(10, 0)
    start = time.perf_counter()
    kept = []
    for r in range(chains):
        pyro.set_rng_seed(seed + r)
        kernel = NUTS(potential_fn=lambda z: problem.energy(z["theta"]), full_mass=True, target_accept_prob=0.8,
                      max_tree_depth=max_tree_depth)
        mcmc = MCMC(kernel, num_samples=draws, warmup_steps=warmup,
                    initial_params={"theta": torch.zeros(problem.dim, dtype=torch.float64)},
                    disable_progbar=not progress)
        mcmc.run()
        kept.append(mcmc.get_samples()["theta"].detach().numpy().reshape(draws, problem.dim))
    full = np.stack(kept)
    info = {
        "data": "scikit-learn load_breast_cancer, first 10 features standardised", "model": NAME,
        "prior_scale": PRIOR_SCALE, "dim": int(problem.dim),
        "sampler": f"pyro NUTS, full_mass=True, target_accept 0.8, max_tree_depth {max_tree_depth}",
        "chains": chains, "warmup": warmup, "draws": draws, "thin": thin, "seed": seed,
        "max_rhat": float(np.max(dg.rhat(full))), "min_ess_bulk": float(np.min(dg.ess(full))),
        "seconds": round(time.perf_counter() - start, 1),
    }
    return full[:, ::thin], info


def write_reference(path: Path | str, draws: np.ndarray, info: dict) -> None:
    """Write ``draws`` (float32) and ``info`` (JSON text) to the .npz ``path``: no pickles."""
    np.savez_compressed(path, draws=np.asarray(draws, dtype=np.float32),
                        info=np.array(json.dumps(info, sort_keys=True)))
