"""Diagnostics for posterior samples from any sampler (numpy/scipy only; no torch import).

- Wasserstein: :func:`gaussian_w2`, :func:`empirical_gaussian_w2`, :func:`w2_floor`.
- ArviZ bridge and convergence: :func:`to_arviz`, :func:`summary`, :func:`rhat`,
  :func:`ess` (ArviZ 0.x and 1.x give the same numbers); :func:`trace_plot`,
  :func:`rank_plot`.
- Large d: :func:`projections` (R-hat / ESS of random projections; :func:`split_rhat` of every coordinate), :func:`functionals`
  (of scalar functionals per draw, e.g. the test log predictive), :func:`projection_summary`.
- Calibration: :func:`ece`, :func:`mce`, :func:`rms_calibration_error`, :func:`brier`,
  :func:`nll`, :func:`calibration_bins`, :func:`reliability_diagram`,
  :func:`posterior_predictive` and the running :class:`PosteriorPredictive`.

ArviZ and matplotlib are imported only by the functions that need them.
"""

from diagnostics.arviz import (
    TAIL_PROB,
    arviz_family,
    ess,
    flatten_posterior,
    posterior_dataset,
    rhat,
    summary,
    to_arviz,
)
from diagnostics.calibration import (
    CalibrationBins,
    PosteriorPredictive,
    brier,
    calibration_bins,
    ece,
    mce,
    nll,
    posterior_predictive,
    reliability_diagram,
    rms_calibration_error,
)
from diagnostics.plots import rank_plot, trace_plot
from diagnostics.large_d import (
    Convergence,
    functional_summary,
    functionals,
    projection_summary,
    projections,
    random_directions,
    split_rhat,
)
from diagnostics.wasserstein import (
    W2Floor,
    empirical_gaussian_w2,
    fitted_gaussian,
    gaussian_w2,
    w2_floor,
)

__all__ = [
    "CalibrationBins",
    "Convergence",
    "PosteriorPredictive",
    "TAIL_PROB",
    "W2Floor",
    "arviz_family",
    "brier",
    "calibration_bins",
    "ece",
    "empirical_gaussian_w2",
    "ess",
    "fitted_gaussian",
    "flatten_posterior",
    "functional_summary",
    "functionals",
    "gaussian_w2",
    "mce",
    "nll",
    "posterior_dataset",
    "posterior_predictive",
    "projection_summary",
    "projections",
    "random_directions",
    "rank_plot",
    "reliability_diagram",
    "rhat",
    "rms_calibration_error",
    "split_rhat",
    "summary",
    "to_arviz",
    "trace_plot",
    "w2_floor",
]
