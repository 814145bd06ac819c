"""Is a run's participation or minibatch setting measurably off the target? Checked at a run's end.

With S of N clients a round (schemes I, II, a rule of your own) or minibatch gradients, the
injected noise is calibrated (:mod:`fedlangevin.federation.participation`), but the averaged
drift is itself random: sum_c w_c grad f^c(theta) scatters around grad f(theta) (client
sampling) and each client's minibatch estimate around grad f^c (minibatch noise). That extra
noise widens the samples. Per unit of Langevin time (K eta a round) it is

    Q = K eta V_part + eta V_mb,

V_part = Cov_w(sum_c w_c g_c) (the weights' covariance over the rule's draws; the same weights
serve all K local steps, hence K eta) and V_mb = sum_c E[w_c^2] (n_c / p_c)^2 C_c / b (C_c the
covariance of client c's per-example gradients; a fresh minibatch every step, hence eta). For
the linearised dynamics d theta = -M grad f dt + sqrt(2 tau M) dW + M Q^(1/2) dW' the excess
stationary covariance X solves (M H) X + X (M H)^T = M Q M with H = tau Sigma^-1: it is
solved for d <= ``DENSE_MAX_DIM``, where the kept draws' covariance C = Sigma + X holds the excess
too (a fixed point Sigma = C - X(Sigma)); the predicted sd ratio of parameter j is
sqrt(C_jj / Sigma_jj). Beyond ``DENSE_MAX_DIM`` M and H are taken diagonal (O(d) memory):
the ratio is sqrt(1 + m_j Q_jj / (2 tau)).

:func:`check` measures V_part and V_mb at the chains' last states (every client's full
gradient once per chain, and up to :data:`ROWS` per-example gradients per client for up to
:data:`MB_CHAINS` chains, at most :data:`PER_EXAMPLE_BYTES` of them), with the run's correction (control variates centre both), and
:class:`SettingNoise` warns where a predicted sd ratio exceeds 1 + :data:`TOLERANCE`. Full
participation with full-batch gradients has Q = 0 and is not checked.
"""

from __future__ import annotations

import numpy as np
import torch

from fedlangevin.federation.participation import Full
from fedlangevin.federation.preconditioning import preconditioner_matrix
from fedlangevin.warmup.adaptation import DENSE_MAX_DIM
from fedlangevin.warmup.setting_noise import (MAX_DRAWS, MIN_KEPT, ROWS, TOLERANCE, SettingNoise, drift_noise,
                                             preconditioner_diagonal, sd_ratios_from, warn)

__all__ = ["MIN_KEPT", "ROWS", "TOLERANCE", "SettingNoise", "check", "drift_noise", "predicted_sd_ratios", "warn"]


def predicted_sd_ratios(extra: torch.Tensor, preconditioner, sigma: np.ndarray, temperature: float) -> np.ndarray:
    """The predicted sd ratios (d,) for the extra noise ``extra`` = Q per unit time ((d, d), or its diagonal (d,):
    then ``sigma`` is not used), M the preconditioner (None: I) and ``sigma`` the draws' covariance C (d, d)
    (module docstring); inf where no target covariance is left (the excess is as large as the spread)."""
    d = extra.shape[0]
    if extra.dim() == 1:  # M and H taken diagonal: X_jj / Sigma_jj = m_j Q_jj / (2 tau), Sigma drops out
        m = preconditioner_diagonal(preconditioner, d)
        return np.sqrt(1.0 + m * extra.numpy() / (2 * temperature))
    from scipy.linalg import solve_continuous_lyapunov

    m = preconditioner_matrix(preconditioner, d).numpy()
    noise = m @ extra.numpy() @ m
    return sd_ratios_from(np.asarray(sigma, dtype=np.float64),
                          lambda target: solve_continuous_lyapunov(m @ (temperature * np.linalg.inv(target)), noise))


def check(sampler, draws: torch.Tensor | None, generator_seed: int = 0) -> SettingNoise | None:
    """The verdict on ``sampler``'s setting after a run whose kept draws are ``draws`` (chains, draws, d);
    ``None`` for full participation with full-batch gradients (nothing to check)."""
    rule, b = sampler.participation, sampler.batch_size
    if (isinstance(rule, Full) and b is None) or sampler.privacy is not None or sampler.streams != "single" \
            or sampler.transport is not None:  # nothing to check; a private run reads no noiseless gradient
        return None
    if b is not None and sampler._work_problem._privacy_refusal("record") is not None:
        return SettingNoise(False, None, 0.0, 0.0, False, "the minibatch noise needs the problem's per-example "
                            "gradients (_per_example_grads), which it does not implement")
    d = sampler.problem.dim
    if draws is None or draws.shape[1] < MIN_KEPT:
        kept = 0 if draws is None else draws.shape[1]
        return SettingNoise(False, None, 0.0, 0.0, False, f"{kept} draws kept; the check needs {MIN_KEPT}")
    dense = d <= DENSE_MAX_DIM
    # the last draws (a store's stay on disk), on the CPU
    flat = draws[:, -MAX_DRAWS:].reshape(-1, d).to(device="cpu", dtype=torch.float64)
    sigma = torch.cov(flat.T).numpy().reshape(d, d) if dense else flat.var(0).numpy()
    built, cstate = sampler.built_correction, sampler.state.correction
    term, centre = None, None
    if built is not None and cstate is not None:
        r, n = sampler.state.theta.shape[0], sampler.problem.num_clients
        term = built.term(cstate, sampler.state.theta.unsqueeze(1).expand(r, n, d).clone())
        if b is not None and getattr(getattr(built, "settings", None), "minibatches", False):
            centre = cstate.get("reference")
    eta = float(sampler.schedule(sampler.state.step))
    v_part, v_mb = drift_noise(sampler._work_problem, sampler.state.theta, rule, b, term=term, centre=centre,
                               generator=torch.Generator().manual_seed(generator_seed), dense=dense)
    k = sampler.local_steps
    part, mb = k * eta * v_part, eta * v_mb
    ratios = predicted_sd_ratios(part + mb, sampler.preconditioner, sigma, sampler.temperature)
    shares = [float((x.diagonal() if x.dim() == 2 else x).abs().sum()) for x in (part, mb)]
    total = max(sum(shares), 1e-300)
    exceeds = bool(np.max(ratios) > 1 + TOLERANCE)
    return SettingNoise(True, tuple(float(r) for r in ratios), shares[0] / total, shares[1] / total, exceeds,
                        corrected=getattr(sampler, "built_correction", None) is not None)
