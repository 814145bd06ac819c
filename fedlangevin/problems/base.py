"""The federated problem protocol: per-client energies and their gradients.

Notation (Deng et al., *On Convergence of Federated Averaging Langevin Dynamics*, Sec. 3–4):
client c holds n_c data points and the weight p_c = n_c / n. Its negative log-likelihood is
ell^c(theta) and the global energy is f(theta) = sum_c ell^c(theta) + U_0(theta), with U_0
the negative log prior. The client energy used by FA-LD is

    f^c(theta) = (1 / p_c) * ell^c(theta) + U_0(theta)        (the "prior share" is U_0),

so that sum_c p_c f^c = f (eq. 7) and the sampler targets pi(theta) ∝ exp(-f(theta) / tau).

A problem provides ``grad(theta)`` for a batch of parameters of shape (R, N, d) — one
parameter vector per chain r and client c — and returns grad f^c(theta[r, c]) with the same
shape, optionally from an unbiased minibatch estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from fedlangevin._validation import check_int, check_tensor

__all__ = ["FederatedProblem", "QuadraticForm", "check_weights"]


@dataclass(frozen=True)
class QuadraticForm:
    """Client gradients that are affine in theta: grad f^c(theta) = A_c theta - b_c.

    ``hessian`` is (d, d) when every client shares the same symmetric A, else (N, d, d);
    ``shift`` is b with shape (N, d). Engines use it for a fast path that never touches data.
    """

    hessian: torch.Tensor
    shift: torch.Tensor

    @property
    def shared(self) -> bool:
        return self.hessian.dim() == 2


def check_weights(weights: torch.Tensor | Sequence[float], num_clients: int | None = None) -> torch.Tensor:
    """Validate client weights p_c: positive, finite, summing to 1 (to 1e-9)."""
    w = check_tensor("weights", weights)
    if w.dim() != 1 or w.numel() == 0:
        raise ValueError(f"weights must be a non-empty 1-d sequence of client weights p_c; got shape {tuple(w.shape)}")
    if num_clients is not None and w.numel() != num_clients:
        raise ValueError(f"weights must have one entry per client ({num_clients}); got {w.numel()}")
    if not torch.isfinite(w).all() or (w <= 0).any():
        raise ValueError("weights must be finite and > 0 for every client")
    total = float(w.sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"weights must sum to 1 (within 1e-9); got sum {total:.12g}")
    return w


class FederatedProblem:
    """Base class for federated problems (see the module docstring for the math).

    Subclasses set ``num_clients``, ``dim`` and ``weights`` (a float64 CPU tensor p_c) and
    implement :meth:`grad` and :meth:`to`. Optional capabilities, returned as ``None`` when
    absent: :meth:`quadratic` (affine gradients, enables the fast path), :meth:`posterior`
    (exact Gaussian posterior), :meth:`constrain` (draws in the model's own space, named),
    ``smoothness`` L and ``convexity`` m (Assumptions 5.1–5.2), ``client_sizes`` n_c
    (needed for minibatches).
    """

    num_clients: int
    dim: int
    weights: torch.Tensor
    client_sizes: torch.Tensor | None = None
    var_names: Sequence[str] | None = None

    # -- required ------------------------------------------------------------------------
    def grad(
        self,
        theta: torch.Tensor,
        *,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """grad f^c at theta[r, c] for every chain r and client c; theta has shape (R, N, d).

        With ``batch_size`` the gradient is an unbiased minibatch estimate drawn with
        ``generator``: (1/p_c) (n_c / b) sum_{i in batch} grad l(theta; x_ci) + grad U_0.
        """
        raise NotImplementedError

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "FederatedProblem":
        """A copy whose tensors live on ``device`` in ``dtype`` (the engine calls this once)."""
        raise NotImplementedError

    # -- optional ------------------------------------------------------------------------
    def quadratic(self) -> QuadraticForm | None:
        return None

    def posterior(self, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def constrain(self, samples) -> dict | None:
        """Draws of theta, shape (..., d), in the model's own space: {name: array (..., *shape)}.

        For problems that sample in a transformed space (e.g. log of a positive scale) or
        whose theta packs named blocks; ``Trace.to_arviz`` shows these names. None: theta as is.
        """
        return None

    @property
    def smoothness(self) -> float | None:
        return None

    @property
    def convexity(self) -> float | None:
        return None

    # -- helpers -------------------------------------------------------------------------
    def check_batch_size(self, batch_size: int | None) -> int | None:
        """Validate a minibatch size against the smallest client's data size."""
        if batch_size is None:
            return None
        if self.client_sizes is None:
            raise ValueError("batch_size is not supported by this problem (it has no per-client data); use batch_size=None")
        smallest = int(self.client_sizes.min())
        return check_int("batch_size", batch_size, 1, smallest)

    def parameter_names(self) -> list[str]:
        if self.var_names is not None:
            return list(self.var_names)
        return [f"theta[{i}]" for i in range(self.dim)]
