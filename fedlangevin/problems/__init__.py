"""Federated problems: per-client energies f^c = (1/p_c) * NLL_c + prior share."""

from fedlangevin.problems.base import FederatedProblem, QuadraticForm, check_weights
from fedlangevin.problems.centred import CentredClients, CentredMinibatches
from fedlangevin.problems.custom import CustomProblem
from fedlangevin.problems.gaussian import PAPER_COV, CurvatureSimulation, GaussianSimulation, QuadraticProblem
from fedlangevin.problems.logistic import LogisticRegression
from fedlangevin.problems.network import NetworkProblem
from fedlangevin.problems.pyro import PyroProblem

__all__ = [
    "CentredClients",
    "CentredMinibatches",
    "CurvatureSimulation",
    "CustomProblem",
    "FederatedProblem",
    "GaussianSimulation",
    "LogisticRegression",
    "NetworkProblem",
    "PAPER_COV",
    "PyroProblem",
    "QuadraticForm",
    "QuadraticProblem",
    "check_weights",
]
