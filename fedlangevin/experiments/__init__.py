"""Paper reproductions as functions returning tidy data and figures.

- :mod:`fedlangevin.experiments.gaussian`: the simulation study of Deng et al. (Sec. 7.1,
  Fig. 1a-e, Fig. 2, Thm 5.8), also behind ``fedlangevin simulate <study>``; Fig. 2 and
  Thm 5.8 are in :mod:`~fedlangevin.experiments.gaussian_step_size`, its W2 curves in
  :mod:`~fedlangevin.experiments.curves`, its figures in
  :mod:`~fedlangevin.experiments.gaussian_plots`.
- :mod:`fedlangevin.experiments.exact`: exact moments of FA-LD on quadratic problems.
- :mod:`fedlangevin.experiments.report`: the report skeleton every study shares (rows,
  progress bar, CSV, tables, figure backend); :mod:`~fedlangevin.experiments.scoring`:
  accuracy, Brier, ECE and NLL of predictive probabilities.
- :mod:`fedlangevin.experiments.classification`: Bayesian logistic regression on real images
  (Sec. 7.2), behind ``fedlangevin simulate classification``.
- :mod:`fedlangevin.experiments.comparison`: FA-LD beside the quantized-communication
  optimizers on the same federated data, metrics against bits, behind ``fedlangevin compare``.
"""

from fedlangevin.experiments.exact import exact_moments, participation_moments, round_operators, w2_to_target
from fedlangevin.experiments.curves import exact_w2_curve, mc_w2_curve, simulation_problem
from fedlangevin.experiments.gaussian import (
    PAPER_ALPHAS,
    STUDIES,
    correlation_study,
    density_study,
    heterogeneity_study,
    k_study,
    run_study,
)
from fedlangevin.experiments.gaussian_step_size import participation_study, step_size_study
from fedlangevin.experiments.report import StudyResult
from fedlangevin.problems import CurvatureSimulation  # also exported here for existing callers

__all__ = [
    "CurvatureSimulation", "PAPER_ALPHAS", "STUDIES", "StudyResult", "correlation_study", "density_study",
    "exact_moments", "exact_w2_curve", "heterogeneity_study", "k_study", "mc_w2_curve", "participation_study",
    "participation_moments", "round_operators", "run_study", "simulation_problem", "step_size_study", "w2_to_target",
]
