"""Divergence replay: find the first local step at which a diverged round went non-finite.

When a round ends with non-finite parameters, the runner replays it from the generator state
it started with (same random stream, the upload codec left out: it may have side effects)
and watches every local step; the first non-finite step of each diverged chain and its cause
("parameters": they grew without bound; "gradient": the problem's gradient was NaN/inf at
finite, moderate parameters; "synchronisation": every client state was finite but the
average overflowed; "upload": the codec returned non-finite values) go into the
:class:`~fedlangevin.runner.results.trace.DivergenceError` or the warning of a dropped chain.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from fedlangevin.problems.base import FederatedProblem

__all__ = ["diagnose", "where"]


def diagnose(
    step: Callable,
    state: Any,
    gen_state: torch.Tensor,
    etas: Sequence[float],
    bad_rows: np.ndarray,
    active: np.ndarray,
    problem: FederatedProblem,
    *,
    num_clients: int,
    uses_upload: bool,
) -> tuple[dict, dict, str]:
    """Replay the round from ``state`` (a kernel's state: ``theta`` (R, d), ``step``) with ``step`` (a
    kernel step without the upload codec) and a generator at ``gen_state``; returns ({chain: step},
    {chain: cause}, a sentence).

    ``bad_rows``: rows of ``state.theta`` whose round ended non-finite; ``active``: the sampler
    index of each row; ``problem``: the problem on the run's device (its gradient is probed);
    ``uses_upload``: the run had an upload codec (a row whose exact replay ends finite went
    non-finite in the codec).
    """
    k = len(etas)
    theta = state.theta
    gen = torch.Generator(device=theta.device)
    gen.set_state(gen_state)
    r = theta.shape[0]
    first = np.full(r, -1, dtype=np.int64)
    before = {}  # row -> client states (N, d) before its first bad step
    last = [theta.unsqueeze(1).expand(r, num_clients, -1).clone()]

    def hook(i: int, beta: torch.Tensor) -> None:
        ok = torch.isfinite(beta).flatten(1).all(1).cpu().numpy()
        for row in np.flatnonzero(~ok & (first < 0)):
            first[row] = i
            before[int(row)] = last[0][row].clone()
        last[0] = beta.clone()

    replayed, _ = step(state, etas, gen, on_step=hook)
    steps, causes = {}, {}
    grad_bad, grown, moderate = [], [], []
    # Below sqrt(max float) no quadratic or softmax-type energy overflows: a non-finite
    # gradient there points at the problem (log(0), 0/0, ...); above it the parameters
    # themselves have blown up and the gradient overflows with them.
    large = float(torch.finfo(theta.dtype).max) ** 0.5
    for row in bad_rows:
        c = int(active[row])
        if first[row] < 0:
            codec = uses_upload and bool(torch.isfinite(replayed.theta[row]).all())
            steps[c], causes[c] = state.step + k + 1, "upload" if codec else "synchronisation"
            continue
        steps[c] = state.step + int(first[row]) + 1
        prev = before[int(row)]
        size = float(prev.abs().max())
        grad_ok = bool(torch.isfinite(problem.grad(prev.unsqueeze(0))).all())
        if grad_ok or size >= large:
            causes[c] = "parameters"
            grown.append(size)
        else:
            causes[c] = "gradient"
            grad_bad.append(c)
            moderate.append(size)
    parts = []
    if grown:
        parts.append(f"the parameters grew without bound (|theta| reached {max(grown):.3g} before the step): a "
                     f"smaller step_size (eta = {etas[0]:.3g} here) keeps them finite")
    if grad_bad:
        parts.append(f"the problem's gradient was NaN/inf at moderate, finite parameters (|theta| <= "
                     f"{max(moderate):.3g}) in chain(s) {grad_bad[:10]}: check the energy and its gradient there")
    if any(v == "synchronisation" for v in causes.values()):
        parts.append("every client state was finite but their average overflowed")
    if any(v == "upload" for v in causes.values()):
        parts.append("every client state was finite but the upload codec returned non-finite values")
    return steps, causes, "; ".join(parts)


def where(round: int, step: int, start_step: int, local_steps: int, causes: dict) -> str:
    """Where in the run the divergence happened, in words."""
    in_round = step - start_step
    if in_round <= local_steps:
        return f"round {round}, local step {step} (step {in_round} of {local_steps} in the round)"
    return (f"round {round}, at its {'upload' if 'upload' in causes.values() else 'synchronisation'} "
            f"(after local step {start_step + local_steps})")
