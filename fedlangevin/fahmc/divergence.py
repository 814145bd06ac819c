"""Why an FA-HMC round ended non-finite: the runner's account (:meth:`fedlangevin.runner.base.Runner._diagnose`),
with the problem's gradient named as the cause where it is NaN/inf at the round's start."""

from __future__ import annotations

import torch

__all__ = ["gradient_cause"]


def gradient_cause(sampler, bad_rows, steps, causes, detail):
    """The runner's (steps, causes, detail) for the chains ``bad_rows`` of ``sampler``, unless the problem's
    gradient is NaN/inf at the round's start (finite parameters below sqrt(max float), where no smooth
    energy's gradient overflows): then the gradient is named as the cause, not the step size. A private run
    reads no noiseless gradient of the data: its account is the runner's."""
    if getattr(sampler, "privacy", None) is not None:
        return steps, causes, detail
    theta = sampler.state.theta[torch.as_tensor(bad_rows, dtype=torch.long, device=sampler.state.theta.device)]
    n = sampler.problem.num_clients
    grad = sampler.problem.to(device=sampler.device, dtype=sampler.dtype).grad(
        theta.unsqueeze(1).expand(-1, n, -1).contiguous())
    large = float(torch.finfo(theta.dtype).max) ** 0.5
    nan = (~torch.isfinite(grad).flatten(1).all(1)) & (theta.abs().amax(1) < large)
    chains = [int(sampler.active[r]) for r, bad in zip(bad_rows, nan.tolist()) if bad]
    if not chains:
        return steps, causes, detail
    for c in chains:
        causes[c] = "gradient"
    size = float(theta[nan].abs().max())
    others = [c for c in steps if c not in chains]
    text = (f"the problem's gradient was NaN/inf at finite, moderate parameters (the round's start, |theta| <= "
            f"{size:.3g}) in chain(s) {chains[:10]}: check the energy and its gradient there")
    return steps, causes, text + (f"; in chain(s) {others[:10]}: {detail}" if others else "")
