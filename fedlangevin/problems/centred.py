"""Minibatch gradients centred at a reference point: SGLD-CV's estimator for every client.

Baker, Fearnhead, Fox, Nemeth, "Control variates for stochastic gradient MCMC" (Statistics and
Computing 2019). A client that cannot afford full gradients every step draws b of its n_c rows
and estimates grad f^c(theta) by

    grad f^c(theta*) + (1 / p_c) (n_c / b) sum_{i in B} [g_i(theta) - g_i(theta*)] + grad U_0(theta) - grad U_0(theta*),

with g_i the per-example gradients of the negative log-likelihood and theta* a reference point
near the mode. It is unbiased for any theta* (the bracket's mean over the rows is
(p_c / n_c) (grad ell^c(theta) - grad ell^c(theta*))), and its variance is that of the
*differences* g_i(theta) - g_i(theta*), about |theta - theta*|^2 times the spread of the
per-example curvature, instead of the spread of the g_i themselves: near the posterior's bulk
the minibatch noise that inflates a plain minibatch run's spread is nearly gone
(``docs/realistic.md``).

Cost: each client computes its full gradient grad f^c(theta*) once (one pass over its rows,
no communication beyond theta*, d floats down), then two per-example gradients per drawn row
(at theta and at theta*) instead of one; memory O(N d) for the stored gradients and O(R N b d)
for a step's per-example gradients (as a plain minibatch). FA-LD uses it for
``correction="control_variates"`` with ``batch_size`` (theta* the correction's reference); any
sampler may take :class:`CentredMinibatches` as its problem.
"""

from __future__ import annotations

import torch

from fedlangevin._validation import check_bool, check_real
from fedlangevin.problems._client_data import minibatch_indices
from fedlangevin.problems.base import FederatedProblem, check_problem

__all__ = ["CentredClients", "CentredMinibatches", "control_variate_offsets"]


def control_variate_offsets(problem: FederatedProblem, reference: torch.Tensor, strength: float = 1.0) -> torch.Tensor:
    """VR-FALD*'s constants c_c = s (grad f(theta*) - grad f^c(theta*)) (N, d), float64 on the CPU, grad f =
    sum_c p_c grad f^c: every client's full gradient at ``reference`` theta* (d,), once."""
    work = problem.to(device="cpu", dtype=torch.float64)
    n, d = work.num_clients, work.dim
    ref = torch.as_tensor(reference, dtype=torch.float64)
    grads = work.grad(ref.reshape(1, 1, d).expand(1, n, d).clone())[0]  # (N, d): grad f^c(theta*)
    mean = work.weights.to(torch.float64) @ grads  # grad f(theta*)
    return strength * (mean[None, :] - grads)


class Wrapped(FederatedProblem):
    """What a problem wrapper passes through to ``self.problem`` as it is: the prior's gradient, the
    posterior and constraints, the smoothness constants, and (``__getattr__``) the energies, Hessian-vector
    products and other capabilities. A subclass sets ``problem`` and overrides ``grad``."""

    problem: FederatedProblem

    def prior_grad(self, theta):
        return self.problem.prior_grad(theta)

    def posterior(self, temperature: float = 1.0):
        return self.problem.posterior(temperature)

    def constrain(self, samples):
        return self.problem.constrain(samples)

    smoothness = property(lambda self: self.problem.smoothness)
    convexity = property(lambda self: self.problem.convexity)

    def __getattr__(self, name):
        if name.startswith("_") or name in ("problem", "inner"):
            raise AttributeError(name)
        return getattr(self.problem, name)


class CentredMinibatches(Wrapped):
    """``problem`` whose minibatch gradients are centred at ``reference`` theta* (d,) (module
    docstring); full-batch gradients (``batch_size=None``) are ``problem``'s own.

    ``problem`` needs per-example gradients and the prior's gradient apart (what record-level
    privacy needs: ``_per_example_grads`` and ``prior_grad``); ``ValueError`` otherwise, naming
    what is missing. ``reference`` must be finite with shape (d,). Minibatches are drawn with
    replacement, one uniform per row in the state's dtype (as the problems' own ``grad``).
    """

    def __init__(self, problem: FederatedProblem, reference) -> None:
        check_problem(problem)
        why = problem._privacy_refusal("record")
        if why is not None or problem.client_sizes is None:
            raise ValueError(f"problem: centred minibatches need per-example gradients and the prior's gradient apart; "
                             f"{type(problem).__name__} {why or 'has no per-client data rows (client_sizes)'}")
        ref = torch.as_tensor(reference).detach()
        if ref.shape != (problem.dim,) or not bool(torch.isfinite(ref).all()):
            raise ValueError(f"reference must be a finite vector of shape ({problem.dim},); got shape {tuple(ref.shape)}")
        self.problem = problem
        self.reference = ref.to(dtype=torch.float64)
        self.num_clients, self.dim, self.weights = problem.num_clients, problem.dim, problem.weights
        self.client_sizes, self.var_names = problem.client_sizes, problem.var_names
        self._at_reference = None  # (dtype, device) -> (theta* as (1, N, d), grad f^c(theta*) - grad U_0(theta*))

    def _anchor(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """theta* (1, N, d) and grad f^c(theta*) - grad U_0(theta*) (1, N, d) in ``like``'s dtype and device, computed
        once (each client's one full pass over its rows)."""
        key = (like.dtype, like.device)
        if self._at_reference is None or self._at_reference[0] != key:
            star = self.reference.to(device=like.device, dtype=like.dtype).expand(1, self.num_clients, self.dim).clone()
            full = self.problem.grad(star) - self.problem.prior_grad(star)
            self._at_reference = (key, star, full)
        return self._at_reference[1], self._at_reference[2]

    def grad(self, theta, *, batch_size=None, generator=None):
        if batch_size is None:
            return self.problem.grad(theta)
        r, n, d = theta.shape
        b = self.check_batch_size(batch_size)
        star, full = self._anchor(theta)
        rows = minibatch_indices(self.client_sizes, r, b, generator, theta.device, theta.dtype)
        here = self.problem._per_example_grads(theta, rows)
        there = self.problem._per_example_grads(star.expand(r, n, d), rows)
        p = self.weights.to(device=theta.device, dtype=theta.dtype)
        scale = self.client_sizes.to(device=theta.device, dtype=theta.dtype) / (p * b)
        out = (here - there).sum(2).mul_(scale[:, None]).add_(full)
        return out.add_(self.problem.prior_grad(theta))

    def _per_example_grads(self, theta, rows):
        return self.problem._per_example_grads(theta, rows)

    def to(self, device=None, dtype=None):
        return CentredMinibatches(self.problem.to(device=device, dtype=dtype), self.reference)

    def __repr__(self) -> str:
        return f"CentredMinibatches({self.problem!r})"


class CentredClients(Wrapped):
    """``problem`` whose clients' gradients carry VR-FALD*'s control variates at ``reference`` theta*:
    client c's gradient (full batch or minibatch) plus the constant

        c_c = s (grad f(theta*) - grad f^c(theta*)),   grad f = sum_c p_c grad f^c   (s = ``strength``),

    so that every client's corrected gradient agrees near theta* (Plassier et al. 2023; ``docs/drift.md``).
    The constants sum to zero under the weights (sum_c p_c c_c = 0): the global energy, its gradient and
    every Hessian are ``problem``'s, and with full participation and K = 1 a round is unchanged. Under
    partial participation the drawn clients' weighted sum scatters only with the clients' gradient
    *differences* (the client-sampling noise of ``docs/realistic.md``). With ``minibatches=True`` (default)
    and a problem with per-example gradients, the minibatches are centred at theta* too
    (:class:`CentredMinibatches`). Any sampler may take it as its problem; FA-HMC's
    ``correction="control_variates"`` builds it.

    Cost: each client's full gradient at theta* once (N d floats up, d down per client); nothing per round.
    Energies (``energy``, ``client_energy``) are ``problem``'s as they are: the linear terms <c_c, theta>
    sum to zero in every global energy the warm-up and the mode search read.
    """

    def __init__(self, problem: FederatedProblem, reference, *, strength: float = 1.0, minibatches: bool = True) -> None:
        check_problem(problem)
        strength = check_real("strength", strength, low=0.0, high=1.0)
        minibatches = check_bool("minibatches", minibatches)
        ref = torch.as_tensor(reference).detach()
        if ref.shape != (problem.dim,) or not bool(torch.isfinite(ref).all()):
            raise ValueError(f"reference must be a finite vector of shape ({problem.dim},); got shape {tuple(ref.shape)}")
        self.problem, self.reference = problem, ref.to(dtype=torch.float64, device="cpu")
        self.strength, self.minibatches = strength, minibatches
        self.num_clients, self.dim, self.weights = problem.num_clients, problem.dim, problem.weights
        self.client_sizes, self.var_names = problem.client_sizes, problem.var_names
        centrable = problem._privacy_refusal("record") is None and problem.client_sizes is not None
        self.inner = CentredMinibatches(problem, self.reference) if minibatches and centrable else problem
        self.offsets = control_variate_offsets(problem, self.reference, strength)  # (N, d), float64 on the CPU
        if not bool(torch.isfinite(self.offsets).all()):
            raise ValueError("reference: the clients' gradients at the reference point are not finite; give a "
                             "reference near the mode")
        self._cast = None  # (dtype, device, offsets there)

    def _offsets(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.dtype, like.device)
        if self._cast is None or self._cast[0] != key:
            self._cast = (key, self.offsets.to(device=like.device, dtype=like.dtype))
        return self._cast[1]

    def grad(self, theta, *, batch_size=None, generator=None):
        out = self.inner.grad(theta, batch_size=batch_size, generator=generator)
        return out.add_(self._offsets(out)) if self.strength > 0 else out

    def to(self, device=None, dtype=None):
        return CentredClients(self.problem.to(device=device, dtype=dtype), self.reference, strength=self.strength,
                              minibatches=self.minibatches)

    def record(self) -> dict:
        """What rebuilds it on the same problem (a checkpoint's entry): theta*, s and the minibatch flag."""
        return {"reference": self.reference.clone(), "strength": self.strength, "minibatches": self.minibatches}

    def __repr__(self) -> str:
        return f"CentredClients({self.problem!r}, strength={self.strength:g}, minibatches={self.minibatches})"
