"""Is an FA-HMC run's participation or minibatch setting measurably off the target? Checked at a run's end.

FA-LD's check (:mod:`fedlangevin.fald.setting_noise`) for FA-HMC's underdamped dynamics. With S of N
clients a round or minibatch gradients the averaged force scatters around grad f (client sampling,
V_part; minibatches, V_mb: :func:`fedlangevin.warmup.setting_noise.drift_noise`, with the run's control
variates applied). At one local step a round the step kicks once, with one draw of the weights and one
minibatch (the kernel runs BAOAB's closing and opening half-kicks as one kick with one gradient), so the
force's noise has covariance V = V_part + V_mb, and the kick's noise widens the law as a refresh noise of
covariance k(a) h^2 M V M would, k(a) = ((1 + a) / 2)^2, beside the O-step's tau (1 - a^2) M (a =
exp(-gamma h); :mod:`fedlangevin.fahmc.gradient_noise` derives k). Less what the gradient-noise correction
takes out of the refresh (its ``removed``, in V's units). Per unit time that is an extra momentum
diffusion kappa M V M with kappa = 2 gamma k(a) h^2 / (1 - a^2), and the linearised dynamics

    d theta = v dt,   dv = -M H theta dt - gamma v dt + sqrt(2 gamma tau M) dW + (kappa M V M)^(1/2) dW',

H = tau Sigma^-1, settle on the target's covariance plus the X of the continuous Lyapunov equation of
(theta, v); as FA-LD's check, the kept draws' covariance C = Sigma + X(Sigma) is solved for Sigma by a
fixed point and the predicted sd ratio of parameter j is sqrt(C_jj / Sigma_jj) (d <= ``DENSE_MAX_DIM``).
Beyond it M, H and V are taken diagonal: the velocity's temperature is tau + k h^2 m_j V_jj / (1 - a^2), and
the ratio sqrt(1 + k h^2 m_j V_jj / ((1 - a^2) tau)). Against FA-HMC's exact law on Gaussians, under
scheme I and with minibatches, the predicted excess variance is within a factor 1 + O(h) of the exact
law's (``tests/fahmc/test_setting_noise.py``). (Before k and V_mb's full weight, the check took
V = V_part + V_mb / 2 and h^2 for k h^2: it read diamonds' centred minibatches 1.10 where 1.46 was measured.)

Checked at K = 1 only (with K > 1 the local trajectories move the kicks apart); not in a private run
(it reads noiseless gradients) nor with a transport. The record and its warning are FA-LD's
(:class:`~fedlangevin.warmup.setting_noise.SettingNoise`).
"""

from __future__ import annotations

import numpy as np
import torch

from fedlangevin.warmup.setting_noise import (MAX_DRAWS, MIN_KEPT, TOLERANCE, SettingNoise, drift_noise,
                                             preconditioner_diagonal, sd_ratios_from)
from fedlangevin.fahmc.gradient_noise import dense as dense_noise, refresh_share
from fedlangevin.federation.participation import Full
from fedlangevin.federation.preconditioning import preconditioner_matrix

__all__ = ["check", "measured_noise", "predicted_sd_ratios"]


def predicted_sd_ratios(noise: torch.Tensor, preconditioner, sigma: np.ndarray, temperature: float, h: float,
                        friction: float) -> np.ndarray:
    """The predicted sd ratios (d,) for the force's noise covariance per step ``noise`` = V ((d, d), or its
    diagonal (d,): then ``sigma`` is not used), M, the draws' covariance C, tau, h and gamma (module
    docstring); inf where no target covariance is left."""
    from scipy.linalg import solve_continuous_lyapunov

    d = noise.shape[0]
    c = refresh_share(h, friction, temperature)
    if noise.dim() == 1:
        m = preconditioner_diagonal(preconditioner, d)
        return np.sqrt(np.maximum(1.0 + c * m * noise.numpy(), 0.0))
    m = preconditioner_matrix(preconditioner, d).numpy()
    extra = (2.0 * friction * temperature * c) * (m @ noise.numpy() @ m)
    d2 = np.zeros((2 * d, 2 * d))
    d2[d:, d:] = extra

    def excess(target):
        drift = np.block([[np.zeros((d, d)), np.eye(d)],
                          [-m @ (temperature * np.linalg.inv(target)), -friction * np.eye(d)]])
        return solve_continuous_lyapunov(drift, -d2)[:d, :d]

    return sd_ratios_from(np.asarray(sigma, dtype=np.float64), excess)


def check(sampler, draws: torch.Tensor | None, generator_seed: int = 0) -> SettingNoise | None:
    """The verdict on an FA-HMC ``sampler``'s setting after a run whose kept draws are ``draws``
    (chains, draws, d); ``None`` where nothing is checked (full participation with full-batch gradients, a
    private run, a transport)."""
    rule, b = sampler.participation, sampler.batch_size
    if (isinstance(rule, Full) and b is None) or sampler.privacy is not None or sampler.transport is not None:
        return None
    if sampler.local_steps != 1:
        return SettingNoise(False, None, 0.0, 0.0, False, f"checked at K = 1 only (K = {sampler.local_steps})")
    problem = sampler.problem
    if b is not None and problem._privacy_refusal("record") is not None:
        return SettingNoise(False, None, 0.0, 0.0, False, "the minibatch noise needs the problem's per-example "
                            "gradients (_per_example_grads), which it does not implement")
    d = problem.dim
    if draws is None or draws.shape[1] < MIN_KEPT:
        kept = 0 if draws is None else draws.shape[1]
        return SettingNoise(False, None, 0.0, 0.0, False, f"{kept} draws kept; the check needs {MIN_KEPT}")
    dense = dense_noise(d)
    flat = draws[:, -MAX_DRAWS:].reshape(-1, d).to(device="cpu", dtype=torch.float64)
    sigma = torch.cov(flat.T).numpy().reshape(d, d) if dense else flat.var(0).numpy()
    part, mb = measured_noise(sampler, dense, generator_seed)
    h = float(sampler.schedule(sampler.state.step))
    removed = getattr(sampler, "noise_correction", None)
    left = part + mb if removed is None else part + mb - removed.removed.detach().cpu().reshape(part.shape)
    ratios = predicted_sd_ratios(left, sampler.preconditioner, sigma, sampler.temperature, h, sampler.friction)
    shares = [float((x.diagonal() if x.dim() == 2 else x).abs().sum()) for x in (part, mb)]
    total = max(sum(shares), 1e-300)
    exceeds = bool(np.max(ratios) > 1 + TOLERANCE)
    return SettingNoise(True, tuple(float(r) for r in ratios), shares[0] / total, shares[1] / total, exceeds,
                        corrected=sampler.centred is not None or removed is not None)


def measured_noise(sampler, dense: bool, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(V_part, V_mb) of the averaged force at the chains' states, with the run's control variates
    (:func:`fedlangevin.warmup.setting_noise.drift_noise`; (d, d) when ``dense``, else diagonals)."""
    problem, b, centred = sampler.problem, sampler.batch_size, sampler.centred
    term = None if centred is None else centred.offsets
    centre = centred.reference if centred is not None and b is not None and centred.inner is not problem else None
    return drift_noise(problem, sampler.state.theta, sampler.participation, b, term=term, centre=centre,
                       generator=torch.Generator().manual_seed(seed), dense=dense)
