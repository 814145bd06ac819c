"""The privacy-utility study's pieces (experiments/privacy_utility.py): the DP-SGD -> FA-LD step mapping
against the exact Gaussian composition, DP-FedAvg's round as a Gaussian mechanism of noise multiplier z,
the budget plan, the clip quantile and the point error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import norm

from fedlangevin.experiments import privacy_utility as pu
from fedlangevin.experiments.posteriordb import SHIPPED
from fedlangevin.privacy import noise_multiplier, tight_epsilon
from fedlangevin.problems import LogisticRegression

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BUNDLED = SHIPPED


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """epsilon of the Gaussian mechanism of mu = sensitivity / sigma at delta (Balle & Wang 2018, Thm 8)."""
    def gap(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
    return brentq(gap, 0.0, 100.0)


def _problem(sizes=(30, 25, 40)):
    g = torch.Generator().manual_seed(0)
    clients = [(torch.randn(n, 3, generator=g, dtype=torch.float64), torch.arange(n) % 3) for n in sizes]
    return LogisticRegression(clients, prior_scale=1.0)


@pytest.mark.parametrize("z, p_min", [(0.7, 0.25), (3.0, 0.1), (40.0, 0.5)])
def test_equivalent_step_size_inverts_the_accountants_noise_multiplier(z, p_min):
    eta = pu.equivalent_step_size(z, sensitivity=0.6, p_min=p_min)
    assert noise_multiplier(eta=eta, gamma=1.0, sensitivity=0.6, p_min=p_min) == pytest.approx(z, rel=1e-12)


@pytest.mark.parametrize("z, rounds", [(2.0, 50), (8.0, 400)])
def test_dp_fedavg_accounted_through_the_mapping_is_the_exact_gaussian_composition(z, rounds):
    """A DP-SGD step with noise std z * Delta on the clipped sum, T rounds, every client every round: T
    Gaussian mechanisms, exactly mu = sqrt(T) / z; the accountant fed the mapped FA-LD step must give the
    Balle-Wang epsilon (the accountant's exact anchor agrees to 1e-4 relative, docs/privacy.md)."""
    eta = pu.equivalent_step_size(z, sensitivity=1.0, p_min=0.25)
    got = tight_epsilon(eta=eta, gamma=1.0, sensitivity=1.0, p_min=0.25, num_clients=4, num_sampled=4, local_steps=1,
                        iterations=rounds, delta=1e-5)
    assert got == pytest.approx(_gaussian_epsilon(math.sqrt(rounds) / z, 1e-5), rel=1e-3)


def test_a_dp_fedavg_round_is_a_gaussian_mechanism_of_noise_multiplier_z():
    """One round from theta = 0 (a single round is its own average): (1) datasets differing in one record,
    an outlier whose gradient is 1e6 times the others', give outputs (same noise) at most lr * 2C apart
    (the server's weights p_c cancel the 1/p_c), while without the clip they would differ by ~1e6; (2) the
    output's noise has std lr * z * 2C * sqrt(N) per coordinate. 600 seeds x d = 12 coordinates: the
    sample sd's relative error has sd ~ 1 / sqrt(2 * 7200) = 0.8%; the tolerance is 5%."""
    problem = _problem()
    feats = [problem.features[c, : int(n), :3] for c, n in enumerate(problem.client_sizes)]
    labels = [problem.labels[c, : int(n)] for c, n in enumerate(problem.client_sizes)]
    outlier = [f.clone() for f in feats]
    outlier[1][0] = 1e6  # one record of client 1 replaced
    neighbour = LogisticRegression(list(zip(outlier, labels)), prior_scale=1.0)
    clip, z, lr = 0.5, 3.0, 0.05
    a = pu.dp_fedavg(problem, clip=clip, noise_multiplier=z, rounds=1, learning_rate=lr, seed=7)
    b = pu.dp_fedavg(neighbour, clip=clip, noise_multiplier=z, rounds=1, learning_rate=lr, seed=7)
    assert float((a - b).norm()) <= lr * 2 * clip * (1 + 1e-9)
    assert float((a - b).norm()) > 0.1 * lr * clip  # the outlier does move it
    noiseless = torch.stack([pu.dp_fedavg(problem, clip=clip, noise_multiplier=1e-12, rounds=1, learning_rate=lr)])
    draws = torch.stack([pu.dp_fedavg(problem, clip=clip, noise_multiplier=z, rounds=1, learning_rate=lr, seed=s)
                         for s in range(600)])
    centred = draws - noiseless
    want = lr * z * 2 * clip * math.sqrt(problem.num_clients)
    assert float(centred.std()) == pytest.approx(want, rel=0.05)
    assert abs(float(centred.mean())) < 4 * want / math.sqrt(centred.numel())


def test_plan_solves_the_rounds_at_the_public_step_and_certifies_them():
    problem = _problem()
    plan = pu.plan_private_run(problem, 1.0, clip=0.5, max_rounds=10**6)
    lam0 = float((problem.client_sizes.double() / problem.weights).max()) * 0.25
    assert plan.solved == "rounds" and plan.step_size == pytest.approx(pu.SAFETY / lam0, rel=1e-12)
    mech = plan.mechanism(problem)
    assert plan.epsilon <= 1.0 and tight_epsilon(**mech, delta=plan.delta) <= 1.0
    assert tight_epsilon(**dict(mech, iterations=plan.rounds + 1), delta=plan.delta) > 1.0  # the largest T
    assert plan.noise_multiplier == pytest.approx(noise_multiplier(eta=plan.step_size, gamma=1.0, sensitivity=1.0,
                                                                   p_min=float(problem.weights.min())))


def test_plan_over_the_round_cap_solves_the_step_size_within_its_limit():
    problem = _problem()
    free = pu.plan_private_run(problem, 4.0, clip=0.5, max_rounds=10**6)
    capped = pu.plan_private_run(problem, 4.0, clip=0.5, max_rounds=free.rounds // 3)
    assert capped.solved == "step size" and capped.rounds == free.rounds // 3
    assert free.step_size < capped.step_size <= pu.MAX_STEP_FACTOR * free.step_size
    assert tight_epsilon(**capped.mechanism(problem), delta=capped.delta) <= 4.0
    # a cap the step limit cannot meet: the rounds are solved at the largest allowed step
    tight = pu.plan_private_run(problem, 4.0, clip=0.5, max_rounds=max(1, free.rounds // 50))
    assert tight.step_size == pytest.approx(pu.MAX_STEP_FACTOR * free.step_size)
    assert tight.rounds > free.rounds // 50 and tight_epsilon(**tight.mechanism(problem), delta=1e-5) <= 4.0


def test_gradient_norm_quantile_over_every_record_of_unequal_clients():
    problem = _problem(sizes=(30, 7, 41))
    theta = torch.randn(problem.dim, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    norms = []
    w = theta.reshape(problem.num_classes, -1)
    for c, n in enumerate(problem.client_sizes.tolist()):
        x = problem.features[c, :n]
        s = torch.softmax(x @ w.T, dim=1) - torch.nn.functional.one_hot(problem.labels[c, :n], problem.num_classes)
        norms += (s.norm(dim=1) * x.norm(dim=1)).tolist()
    for q in (0.0, 0.5, 0.99, 1.0):
        assert pu.gradient_norm_quantile(problem, theta, q) == pytest.approx(float(np.quantile(norms, q)), rel=1e-12)


def test_point_error_reads_the_model_parameters_in_reference_sds():
    from fedlangevin.experiments.posteriordb import load

    post = load("earnings-logearn_interaction_z", BUNDLED)
    ref = post.reference
    mean, sd = ref.mean(0), ref.std(0, ddof=1)
    theta = np.concatenate([mean[:-1], np.log(mean[-1:])])  # sigma sampled as log sigma
    assert pu.point_error(post, torch.as_tensor(theta)) == pytest.approx(0.0, abs=1e-9)
    theta[1] += 2.5 * sd[1]
    assert pu.point_error(post, torch.as_tensor(theta)) == pytest.approx(2.5, rel=1e-9)


@pytest.mark.parametrize("call, name", [
    (lambda p: pu.equivalent_step_size(0.0, sensitivity=1.0, p_min=0.5), "noise_multiplier"),
    (lambda p: pu.equivalent_step_size(1.0, sensitivity=1.0, p_min=1.5), "p_min"),
    (lambda p: pu.plan_private_run(p, -1.0, clip=0.5), "target_epsilon"),
    (lambda p: pu.plan_private_run(p, 1.0, clip=0.5, delta=1.0), "delta"),
    (lambda p: pu.plan_private_run(p, 1.0, clip=0.5, max_rounds=0), "max_rounds"),
    (lambda p: pu.gradient_norm_quantile(p, torch.zeros(p.dim), 1.5), "q"),
    (lambda p: pu.gradient_norm_quantile(p, torch.zeros(3)), "theta"),
    (lambda p: pu.dp_fedavg(p, clip=0.5, noise_multiplier=1.0, rounds=0, learning_rate=0.1), "rounds"),
    (lambda p: pu.dp_fedavg(p, clip=0.5, noise_multiplier=1.0, rounds=5, learning_rate=-1.0), "learning_rate"),
])
def test_bad_arguments_are_refused_naming_them(call, name):
    with pytest.raises(ValueError, match=name):
        call(_problem())
