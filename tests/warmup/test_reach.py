"""fedlangevin.warmup.reach: the step K = 1's acceptance rule takes at given iterates, against the
rule's own definition on a Gaussian."""

from __future__ import annotations

import math

import pytest
import torch

from fedlangevin.warmup.acceptance import SD_EXCESS, excess_step, gaussian_acceptance
from fedlangevin.warmup.reach import one_step_eta
from fedlangevin.problems import QuadraticProblem

pytestmark = pytest.mark.usefixtures("one_torch_thread")

D = 2
#: the step whose stationary sds on a standard Gaussian are SD_EXCESS too wide (0.115), and its acceptance
STAR = excess_step(SD_EXCESS)


def _standard_gaussian() -> QuadraticProblem:
    return QuadraticProblem(torch.eye(D, dtype=torch.float64)[None], torch.zeros(1, D, dtype=torch.float64),
                            torch.ones(1, dtype=torch.float64))


def _stationary(seed: int, chains: int = 20_000) -> torch.Tensor:
    """Iterates from the law the step STAR leaves invariant on the standard Gaussian, N(0, I / (1 - STAR / 2))."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(chains, D, generator=gen, dtype=torch.float64) / math.sqrt(1 - STAR / 2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_at_the_rules_stationary_law_it_finds_the_rules_step(seed):
    """The target is the acceptance of STAR at STAR's stationary law (the definition of target='auto'), so
    from iterates of that law the search lands on STAR. Tolerance: with 20,000 chains the mean acceptance
    has a standard error of about 3e-4 and its slope in eta is about -0.17, so eta's Monte Carlo error is
    about 0.002 (1.6 % of STAR); 10 % is six of them (measured over seeds 0-2: within 1.3 %)."""
    target = gaussian_acceptance(STAR, D)
    eta, evaluations = one_step_eta(_standard_gaussian(), _stationary(seed), None, target, 1.0, seed + 100,
                                    STAR / 10, STAR * 10)
    assert abs(eta - STAR) <= 0.1 * STAR and evaluations == 27


def test_the_bracket_ends():
    """Accepted even at the top of the bracket: the top; not accepted at its bottom: 0.0; no energy: None."""
    target = gaussian_acceptance(STAR, D)
    x = _stationary(0, chains=4_000)
    assert one_step_eta(_standard_gaussian(), x, None, target, 1.0, 7, STAR / 100, STAR / 10) == (STAR / 10, 2)
    assert one_step_eta(_standard_gaussian(), x, None, target, 1.0, 7, STAR * 10, STAR * 100) == (0.0, 3)

    class NoEnergy(QuadraticProblem):
        energy = None

    problem = NoEnergy(torch.eye(D, dtype=torch.float64)[None], torch.zeros(1, D, dtype=torch.float64),
                       torch.ones(1, dtype=torch.float64))
    assert one_step_eta(problem, x, None, target, 1.0, 7, STAR / 10, STAR * 10) == (None, 0)
