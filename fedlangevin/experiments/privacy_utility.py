"""The privacy-utility study: what a target (epsilon, delta) costs a private FA-LD run, beside a
non-private run of the same rounds and a DP point estimate accounted by the same accountant.

Pieces (the driver is ``benchmarks/bench_privacy_utility.py``, the results docs/privacy-utility.md):

- :func:`plan_private_run`: the budget solver picks the rounds (and, when they would exceed a
  compute cap, the step size) of a full-batch, full-participation, K = 1 private run
  ``FALD(problem, step_size=eta, privacy=RecordLevel(clip=C))`` releasing one chain;
- :func:`dp_fedavg`: the DP point estimate, federated DP-GD (DP-FedAvg with one local full-batch
  step): per-example gradients clipped to C, Gaussian noise of std z * 2C on each client's clipped
  sum, the server averaging the uploads; its z is the same accountant's
  (:func:`equivalent_step_size` maps it onto the FA-LD mechanism the accountant models);
- :func:`gradient_norm_quantile`: the clip rules of the study (a quantile of the per-example gradient
  norms at a reference point: the median is Abadi et al. 2016's suggestion; it reads the data, see
  the docs page);
- :func:`point_error`: a point estimate's max |error| in reference sds on a posteriordb regression.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedlangevin._validation import check_int, check_real

__all__ = ["DELTA", "EPSILONS", "PrivatePlan", "dp_fedavg", "equivalent_step_size", "gradient_norm_quantile",
           "plan_private_run", "point_error"]

#: the study's target epsilons and delta (delta = 1e-5 is below 1 / n for every data set of the study)
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-5
#: the step rule: SAFETY / lambda_0 (the private warm-up's public first step), at most
#: MAX_STEP_FACTOR times that when the rounds would exceed the compute cap
SAFETY = 0.1
MAX_STEP_FACTOR = 10.0


def equivalent_step_size(noise_multiplier: float, *, sensitivity: float, p_min: float, gamma: float = 1.0,
                         tau: float = 1.0, rho: float = 0.0) -> float:
    """The FA-LD step size eta whose local step the accountant models as a Gaussian mechanism of
    noise multiplier ``noise_multiplier``: the inverse of :func:`fedlangevin.privacy.noise_multiplier`.

    Derivation. A local FA-LD step of client c (eq. 10, full batch, rho = 0) is
    beta - (eta / p_c) sum_i clip_C(g_i) + sqrt(2 eta tau / p_c) xi
    = beta - (eta / p_c) [sum_i clip_C(g_i) + sqrt(2 p_c tau / eta) xi]:
    a DP-SGD step of learning rate eta / p_c whose clipped gradient sum (sensitivity Delta = 2C under
    substitution) gets Gaussian noise of std sigma = sqrt(2 p_c tau / eta), so noise multiplier
    z = sigma / Delta = (1 / Delta) sqrt(2 p_c tau / eta) — the accountant's
    z = (gamma / Delta) sqrt(2 p_min tau (1 - rho^2) / eta) with gamma = 1, rho = 0. A DP-SGD step
    with noise std z * Delta on the clipped sum (whatever its learning rate, which is
    post-processing) is therefore accounted as the FA-LD step of
    eta = 2 p_min tau (1 - rho^2) gamma^2 / (z Delta)^2.
    """
    z = check_real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    sensitivity = check_real("sensitivity", sensitivity, low=0.0, low_open=True)
    p_min = check_real("p_min", p_min, low=0.0, high=1.0, low_open=True)
    gamma = check_real("gamma", gamma, low=0.0, high=1.0, low_open=True)
    tau = check_real("tau", tau, low=0.0, low_open=True)
    rho = check_real("rho", rho, low=0.0, high=1.0, high_open=True)
    return 2.0 * p_min * tau * (1.0 - rho * rho) * gamma * gamma / (z * sensitivity) ** 2


@dataclass(frozen=True)
class PrivatePlan:
    """A private run chosen by the budget solver: ``step_size`` eta and ``rounds`` T (K = 1, full
    batch, every client every round, one released chain), the ``epsilon`` the solver certified at
    ``delta``, the run's ``noise_multiplier`` z, the ``public_step`` SAFETY / lambda_0 and which
    parameter the solver chose (``solved``: "rounds" or "step size")."""

    target_epsilon: float
    delta: float
    clip: float
    step_size: float
    rounds: int
    epsilon: float
    noise_multiplier: float
    public_step: float
    solved: str

    def mechanism(self, problem) -> dict:
        """The accountant's arguments of this run on ``problem`` (eta and iterations included)."""
        return dict(_mechanism(problem, self.clip), eta=self.step_size, iterations=self.rounds)


def _mechanism(problem, clip: float) -> dict:
    n = int(problem.num_clients)
    return dict(tau=1.0, rho=0.0, gamma=1.0, sensitivity=2.0 * clip, p_min=float(problem.weights.min()),
                num_clients=n, num_sampled=n, local_steps=1, scheme="II")


def plan_private_run(problem, target_epsilon: float, *, clip: float, delta: float = DELTA,
                     max_rounds: int = 3000) -> PrivatePlan:
    """Rounds (and step size) of a private FA-LD run within (target_epsilon, delta).

    The step is the private warm-up's public first step eta_0 = SAFETY / lambda_0, lambda_0 =
    max_c n_c C^2 / p_c (:func:`fedlangevin.warmup.iterates.public_curvature`: no data read),
    and :func:`~fedlangevin.privacy.largest_iterations` gives the rounds. With a full batch and every
    client in every round the accountant's epsilon depends on (eta, T) through eta T (a Gaussian
    mechanism composed T times, mu = sqrt(T) / z, z^2 proportional to 1 / eta): the budget buys
    Langevin time eta T, whatever the split. When those rounds exceed ``max_rounds`` (a compute cap)
    :func:`~fedlangevin.privacy.largest_step_size` gives the step of ``max_rounds`` rounds instead,
    at most MAX_STEP_FACTOR eta_0 (= 1 / lambda_0, half the stability limit of a curvature
    lambda_0); above that the rounds are solved at that step, whatever their number.
    """
    from fedlangevin.warmup.iterates import public_curvature
    from fedlangevin.privacy import RecordLevel, largest_iterations, largest_step_size, noise_multiplier

    target_epsilon = check_real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    max_rounds = check_int("max_rounds", max_rounds, 1)
    privacy = RecordLevel(clip=clip)
    mech = _mechanism(problem, privacy.clip)
    public = SAFETY / public_curvature(privacy, problem.weights, problem.client_sizes)
    budget = dict(target_epsilon=target_epsilon, target_delta=delta)
    sol = largest_iterations(**budget, eta=public, **{k: v for k, v in mech.items()})
    eta, rounds, solved = public, int(sol.value), "rounds"
    if rounds > max_rounds:
        step = largest_step_size(**budget, **mech, iterations=max_rounds)
        if step.value <= MAX_STEP_FACTOR * public:
            sol, eta, rounds, solved = step, step.value, max_rounds, "step size"
        else:
            eta = MAX_STEP_FACTOR * public
            sol = largest_iterations(**budget, eta=eta, **mech)
            rounds = int(sol.value)
    z = noise_multiplier(eta=eta, gamma=1.0, sensitivity=mech["sensitivity"], p_min=mech["p_min"])
    return PrivatePlan(target_epsilon, delta, privacy.clip, eta, rounds, sol.epsilon, z, public, solved)


def gradient_norm_quantile(problem, theta: torch.Tensor, q: float = 0.5) -> float:
    """The ``q``-quantile (default: the median) over every record of every client of
    ||grad l(theta; x_i)||, the per-example gradient of the negative log-likelihood at one
    parameter ``theta`` (d,); q in [0, 1]."""
    q = check_real("q", q, low=0.0, high=1.0)
    if not isinstance(theta, torch.Tensor) or theta.shape != (problem.dim,):
        raise ValueError(f"theta must be a tensor of shape ({problem.dim},); got "
                         f"{tuple(theta.shape) if isinstance(theta, torch.Tensor) else type(theta).__name__}")
    sizes = problem.client_sizes.long()
    n_max = int(sizes.max())
    rows = torch.arange(n_max)[None, :].expand(problem.num_clients, -1)
    valid = rows < sizes[:, None]
    rows = torch.minimum(rows, sizes[:, None] - 1)  # padding rows repeat a client's last row, masked below
    th = theta.to(torch.float64).expand(1, problem.num_clients, -1).contiguous()
    norms = problem.per_example_grads(th, rows[None]).norm(dim=-1)[0]
    return float(torch.quantile(norms[valid], q))


def dp_fedavg(problem, *, clip: float, noise_multiplier: float, rounds: int, learning_rate: float,
              seed: int = 0, init: torch.Tensor | None = None) -> torch.Tensor:
    """DP-FedAvg with one full-batch local step per round (federated DP-GD): the point estimate.

    Every round every client c uploads theta - lr g_c with g_c = (1/p_c) [sum_i clip_C(grad l_i) +
    z 2C xi_c] + grad U_0 (``problem.private_grad``: per-example clipping, the prior public), xi_c
    standard normal; the server averages the uploads with weights p_c. Substituting one record of
    client c moves its upload's mean by at most lr 2C / p_c against noise of std lr z 2C / p_c: a
    Gaussian mechanism of noise multiplier z per round, accounted as the FA-LD step
    :func:`equivalent_step_size` (z). Returns the average of the second half of the iterates (d,)
    (post-processing: Polyak averaging damps the injected noise).
    """
    from fedlangevin.privacy import RecordLevel

    z = check_real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    rounds = check_int("rounds", rounds, 1)
    lr = check_real("learning_rate", learning_rate, low=0.0, low_open=True)
    privacy = RecordLevel(clip=clip)
    gen = torch.Generator().manual_seed(int(seed))
    n, d = problem.num_clients, problem.dim
    p = problem.weights.to(torch.float64)
    theta = torch.zeros(d, dtype=torch.float64) if init is None else init.to(torch.float64).clone()
    total, kept = torch.zeros(d, dtype=torch.float64), 0
    for r in range(rounds):
        broadcast = theta.expand(1, n, d).contiguous()
        g = problem.private_grad(broadcast, privacy)[0]  # (N, d): (1/p_c) sum clip + prior grad
        noise = torch.randn(n, d, generator=gen, dtype=torch.float64) * (z * privacy.sensitivity)
        uploads = broadcast[0] - lr * (g + noise / p[:, None])
        theta = (p[:, None] * uploads).sum(0)
        if not bool(torch.isfinite(theta).all()):
            raise FloatingPointError(f"DP-FedAvg diverged at round {r} (learning_rate={lr:g})")
        if r >= rounds // 2:
            total += theta
            kept += 1
    return total / kept


def point_error(post, theta: torch.Tensor) -> float:
    """max over the reference's parameters of |theta - mean_ref| / sd_ref for one point ``theta``
    (d,) in ``post``'s unconstrained space, read in the model's own parameters (as
    :func:`fedlangevin.experiments.posteriordb.compare` reads draws)."""
    import numpy as np

    ours = post.constrain(np.asarray(theta, dtype=np.float64)[None])[0]
    ref = post.reference
    return float((np.abs(ours - ref.mean(0)) / ref.std(0, ddof=1)).max())
