"""The user-facing FA-LD runner."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Sequence

import numpy as np
import torch

from fedlangevin._validation import check_int, check_real
from fedlangevin.fald.kernel import FALDState, fald_round, init_state, make_stepper
from fedlangevin.fald.noise import noise_scales
from fedlangevin.fald.participation import Participation, as_participation
from fedlangevin.fald.schedules import as_schedule, step_sizes
from fedlangevin.fald.trace import Communication, DivergenceError, Trace
from fedlangevin.problems.base import FederatedProblem, check_weights

__all__ = ["FALD"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "double": torch.float64, "float": torch.float32}


def _as_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be torch.float32 or torch.float64 (or 'float32'/'float64'); got {dtype!r}")
        return _DTYPES[dtype]
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64; got {dtype!r}")
    return dtype


def _as_device(device: Any) -> torch.device:
    try:
        dev = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda'; got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but CUDA is not available on this machine")
    return dev


class FALD:
    """Federated Averaging Langevin Dynamics (Deng et al., Alg. 1 / Alg. 4).

    Runs R independent replicate chains of a federated sampler with N clients in
    parallel: every round the server broadcasts the global model, each client takes K local
    SGLD steps on its energy f^c with injected noise of correlation rho (eq. 10), and the
    server averages the clients chosen by the participation rule.

    Parameters
    ----------
    problem : a :class:`~fedlangevin.problems.FederatedProblem`.
    step_size : eta > 0; ``"paper"`` for Thm 5.8's eta_k = 1/(2L + m k/12); a sequence with
        one value per local step; or a callable k -> eta_k (k counts local steps from 0).
    local_steps : K >= 1, local steps between synchronisations.
    temperature : tau > 0; the target is pi ∝ exp(-f / tau).
    correlation : rho in [0, 1] between the clients' injected noises (eq. 14). rho = 0 is
        Alg. 1 with independent noise; rho = 1 shares one noise vector (no privacy).
    participation : :func:`Full` (default), :class:`SchemeI` (S draws with replacement,
        probabilities p_c) or :class:`SchemeII` (S uniform without replacement, balanced data).
    chains : R >= 1 independent replicate chains, simulated together.
    batch_size : minibatch size per client and step (``None`` = full gradients).
    init : initial global parameter, shape (d,) or (R, d); default zeros.
    device, dtype : where and in which precision the state lives (float32 or float64).
    seed : seeds the single ``torch.Generator`` that drives all randomness (noise,
        minibatches, participation); the same seed on the same device reproduces a run
        bit for bit. ``None`` picks a random seed (recorded in ``trace.settings``).
    noise_dtype : precision of the standard normals of the injected noise (float32 by
        default: about 4x faster to draw on CPU; see :mod:`fedlangevin.fald.noise` for why
        this does not matter statistically). ``torch.float64`` for double-precision normals.
    """

    def __init__(
        self,
        problem: FederatedProblem,
        step_size: float | str | Sequence[float] | Callable[[int], float],
        local_steps: int = 1,
        temperature: float = 1.0,
        correlation: float = 0.0,
        participation: Participation | str | None = None,
        chains: int = 1,
        batch_size: int | None = None,
        init: Any = None,
        device: Any = None,
        dtype: Any = torch.float64,
        seed: int | None = None,
        noise_dtype: Any = torch.float32,
        upload: Callable[[torch.Tensor, torch.Tensor, torch.Generator | None], torch.Tensor] | None = None,
    ) -> None:
        if not isinstance(problem, FederatedProblem):
            raise ValueError(f"problem must be a fedlangevin FederatedProblem; got {type(problem).__name__}")
        self.local_steps = check_int("local_steps", local_steps, 1)
        self.temperature = check_real("temperature", temperature, low=0.0, low_open=True)
        self.correlation = check_real("correlation", correlation, low=0.0, high=1.0)
        self.chains = check_int("chains", chains, 1)
        self.participation = as_participation(participation)
        weights = check_weights(problem.weights, problem.num_clients)
        self.participation.validate(weights)
        self.batch_size = problem.check_batch_size(batch_size)
        self.schedule = as_schedule(step_size, problem)
        step_sizes(self.schedule, 0, 1)  # fail now on an invalid first step size
        self.dtype = _as_dtype(dtype)
        self.noise_dtype = _as_dtype(noise_dtype) if noise_dtype is not None else self.dtype
        self.device = _as_device(device)
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little") >> 2
        self.seed = check_int("seed", seed, 0)
        if upload is not None and not callable(upload):
            raise ValueError(f"upload must be None or a callable codec(beta, theta, generator); got {upload!r}")
        self.upload = upload

        self.problem = problem
        self._work_problem = problem.to(device=self.device, dtype=self.dtype)
        self._p = weights.to(device=self.device, dtype=self.dtype)
        self._scales = noise_scales(
            weights, self.temperature, self.correlation, device=self.device, dtype=self.dtype, noise_dtype=self.noise_dtype
        )
        self._stepper = make_stepper(self._work_problem, self.dtype, self.device, self.batch_size)
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.state: FALDState = init_state(self._initial(init))
        self.communication = Communication(0, 0.0, 0.0, 0.0)

    def _initial(self, init: Any) -> torch.Tensor:
        d, r = self.problem.dim, self.chains
        if init is None:
            return torch.zeros(r, d, device=self.device, dtype=self.dtype)
        x = torch.as_tensor(init, dtype=self.dtype).to(self.device)
        if x.shape == (d,):
            x = x.expand(r, d)
        if x.shape != (r, d):
            raise ValueError(f"init must have shape (d,) = ({d},) or (chains, d) = ({r}, {d}); got {tuple(x.shape)}")
        if not torch.isfinite(x).all():
            raise ValueError("init must be finite")
        return x.clone()

    @property
    def settings(self) -> dict[str, Any]:
        return {
            "local_steps": self.local_steps,
            "temperature": self.temperature,
            "correlation": self.correlation,
            "participation": repr(self.participation),
            "chains": self.chains,
            "num_clients": self.problem.num_clients,
            "dim": self.problem.dim,
            "batch_size": self.batch_size,
            "step_size": repr(self.schedule),
            "seed": self.seed,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "noise_dtype": str(self.noise_dtype).replace("torch.", ""),
            "upload": "exact" if self.upload is None else repr(self.upload),
        }

    def run(self, rounds: int, warmup: int = 0, thin: int = 1, progress: bool | None = None) -> Trace:
        """Run ``rounds`` communication rounds (``rounds * local_steps`` local steps).

        Continues from where the previous call stopped. Draws (the synchronised global
        model after a round) are kept after the first ``warmup`` rounds of this call, every
        ``thin`` rounds. ``progress``: a progress bar on stderr (default: only on a TTY).

        Raises :class:`DivergenceError` (keeping the draws made so far in ``.trace``) if a
        chain's parameters become NaN or infinite.
        """
        rounds = check_int("rounds", rounds, 1)
        warmup = check_int("warmup", warmup, 0, rounds - 1)
        thin = check_int("thin", thin, 1)
        k = self.local_steps
        etas = step_sizes(self.schedule, self.state.step, rounds * k)
        keep = [j for j in range(1, rounds + 1) if j > warmup and (j - warmup) % thin == 0]
        r, d = self.chains, self.problem.dim
        store = torch.empty(r, len(keep), d, device=self.device, dtype=self.dtype)
        draw_rounds = np.array([self.state.round + j for j in keep], dtype=np.int64)
        draw_steps = draw_rounds * k
        keep_set = set(keep)
        n, filled = self.problem.num_clients, 0
        uploads = 0.0
        bar = _progress(rounds, progress)
        try:
            for j in range(1, rounds + 1):
                round_etas = etas[(j - 1) * k : j * k]
                state, w = fald_round(
                    self.state, self._work_problem, round_etas, self._scales, self.participation,
                    self._p, self.generator, self.batch_size, self._stepper, upload=self.upload,
                )
                bad = ~torch.isfinite(state.theta).all(dim=1)
                if bool(bad.any()):
                    chains = bad.nonzero().flatten().tolist()
                    trace = self._trace(store[:, :filled], draw_rounds[:filled], etas, uploads, j - 1)
                    raise DivergenceError(
                        f"FA-LD diverged in round {state.round} (local steps {state.step - k + 1}..{state.step}): "
                        f"non-finite parameters in chain(s) {chains[:10]}{' ...' if len(chains) > 10 else ''}; "
                        f"{filled} draws made before are kept in .trace. Try a smaller step_size.",
                        trace, chains, state.round, state.step,
                    )
                self.state = state
                uploads += self.participation.uploads(w)
                if j in keep_set:
                    store[:, filled] = state.theta
                    filled += 1
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return self._trace(store, draw_rounds, etas, uploads, rounds)

    def _trace(self, store, draw_rounds, etas, uploads, rounds_done) -> Trace:
        n, d = self.problem.num_clients, self.problem.dim
        comm = Communication(rounds_done, uploads, uploads * d, float(rounds_done * n * d))
        self.communication = self.communication + comm
        return Trace(
            samples=store.detach().cpu(),
            draw_rounds=np.asarray(draw_rounds),
            draw_steps=np.asarray(draw_rounds) * self.local_steps,
            step_sizes=np.asarray(etas[: rounds_done * self.local_steps], dtype=np.float64),
            communication=comm,
            settings=self.settings,
            problem=self.problem,
            var_names=self.problem.parameter_names(),
        )


def _progress(total: int, progress: bool | None):
    if progress is None:
        progress = sys.stderr.isatty() and total >= 50
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="FA-LD", unit="round", mininterval=0.5, leave=False)
