"""Federated problems: per-client energies f^c = (1/p_c) * NLL_c + prior share."""

from fedlangevin.problems.base import FederatedProblem, QuadraticForm, check_weights
from fedlangevin.problems.gaussian import PAPER_COV, GaussianSimulation, QuadraticProblem
from fedlangevin.problems.logistic import LogisticRegression

__all__ = [
    "FederatedProblem",
    "GaussianSimulation",
    "LogisticRegression",
    "PAPER_COV",
    "QuadraticForm",
    "QuadraticProblem",
    "check_weights",
]
