"""Device participation at synchronisation (Deng et al., Alg. 1 / Alg. 4, App. C.1).

Every rule turns the local states beta (R, N, d) into one global parameter per chain with a
weighted sum over clients, sum_c w_rc beta_rc — the only cross-client operation of FA-LD
(:func:`synchronize`). The rules differ in the weights w (R, N):

- :class:`Full`: w_rc = p_c (eq. 4).
- :class:`SchemeI` (with replacement): S indices drawn i.i.d. with P(c) = p_c, plain mean
  theta = (1/S) sum_{j} beta_{n_j}, so w_rc = (times c drawn) / S.
- :class:`SchemeII` (without replacement): S distinct clients drawn uniformly, plain mean,
  w_rc = 1/S on the chosen clients. Unbiased only for balanced data p_c = 1/N (Lemma C.1);
  the constructor rule ``allow_unbalanced`` decides what happens otherwise.

Each chain is an independent replicate and draws its own subset every round.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from fedlangevin._validation import check_bool, check_int

__all__ = ["MAX_NUM_SAMPLED", "Participation", "Full", "SchemeI", "SchemeII", "as_participation", "synchronize"]


class Participation:
    """Base class; subclasses implement :meth:`weights` and :meth:`validate`.

    Every rule also reads as typed settings: :attr:`scheme` (``"full"``, ``"I"`` or ``"II"``)
    and ``num_sampled`` (S, the devices sampled per round and chain; ``None`` for
    :class:`Full`), e.g. for the exact moments of :mod:`fedlangevin.experiments.exact`.
    """

    def validate(self, weights: torch.Tensor) -> None:
        """Check the rule against the client weights p_c (raises ``ValueError``)."""

    def weights(self, p: torch.Tensor, chains: int, generator: torch.Generator | None) -> torch.Tensor:
        """Aggregation weights: (N,) shared by all chains, or (R, N) per chain."""
        raise NotImplementedError

    @property
    def scheme(self) -> str:
        """The rule's name in the paper's terms: ``"full"``, ``"I"`` or ``"II"`` (App. C.1)."""
        raise NotImplementedError

    def fixed_uploads(self, num_clients: int) -> float | None:
        """Uploads per round when the rule makes them the same every round (full participation:
        N; scheme II: S), else ``None`` (scheme I: the distinct clients drawn vary)."""
        return None

    def uploads(self, w: torch.Tensor) -> float:
        """Client-to-server messages in one round (mean over chains): clients with w > 0."""
        if w.dim() == 1:
            return float(w.numel())
        return float((w > 0).sum(1).double().mean())


@dataclass(frozen=True)
class Full(Participation):
    """Full device participation: theta = sum_c p_c beta^c."""

    @property
    def scheme(self) -> str:
        """``"full"``: every device takes part in every round (eq. 4)."""
        return "full"

    @property
    def num_sampled(self) -> None:
        """``None``: no devices are sampled (all N take part)."""
        return None

    def fixed_uploads(self, num_clients):
        return float(num_clients)

    def weights(self, p, chains, generator):
        return p

    def __repr__(self) -> str:
        return "Full()"


_BLOCK = 1 << 20  # Scheme I draws per block

#: The largest S (``num_sampled``) of :class:`SchemeI` and :class:`SchemeII`. Scheme I draws S
#: indices per chain and round (about 0.5 s per chain at this S on a CPU core); its weights
#: (counts / S) are then within about 1/sqrt(S) = 2.4e-4 of full participation's p_c, and
#: Scheme II's S cannot exceed N. Larger S (e.g. 10**30, which never finished) are refused.
MAX_NUM_SAMPLED = 1 << 24


@dataclass(frozen=True)
class SchemeI(Participation):
    """Scheme I: S devices drawn with replacement with probabilities p_c; plain mean.

    ``num_sampled``: S, an integer in [1, :data:`MAX_NUM_SAMPLED`] (S may exceed N)."""

    num_sampled: int

    @property
    def scheme(self) -> str:
        """``"I"``: S devices drawn with replacement with probabilities p_c (App. C.1)."""
        return "I"

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_sampled", check_int("num_sampled", self.num_sampled, 1, MAX_NUM_SAMPLED))

    def weights(self, p, chains, generator):
        # draws in blocks of at most _BLOCK per chain: memory O(chains x _BLOCK) whatever S
        # (one block, i.e. the same random stream as a single draw, for S <= _BLOCK)
        s = self.num_sampled
        w = torch.zeros(chains, p.numel(), device=p.device, dtype=p.dtype)
        for start in range(0, s, _BLOCK):
            idx = torch.multinomial(p.expand(chains, -1), min(_BLOCK, s - start), replacement=True, generator=generator)
            w.scatter_add_(1, idx, torch.full(idx.shape, 1.0 / s, device=p.device, dtype=p.dtype))
        return w


@dataclass(frozen=True)
class SchemeII(Participation):
    """Scheme II: S devices drawn uniformly without replacement; plain mean.

    The paper's analysis (and the unbiasedness of Lemma C.1) assumes balanced data,
    p_c = 1/N. With unequal weights the rule targets a different posterior; by default the
    sampler refuses (``ValueError``); ``allow_unbalanced=True`` runs it with a warning.
    ``num_sampled``: S, an integer in [1, :data:`MAX_NUM_SAMPLED`] (and at most N, checked
    against the problem).
    """

    num_sampled: int
    allow_unbalanced: bool = False

    @property
    def scheme(self) -> str:
        """``"II"``: S devices drawn uniformly without replacement (App. C.1)."""
        return "II"

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_sampled", check_int("num_sampled", self.num_sampled, 1, MAX_NUM_SAMPLED))
        object.__setattr__(self, "allow_unbalanced", check_bool("allow_unbalanced", self.allow_unbalanced))

    def fixed_uploads(self, num_clients):
        return float(min(self.num_sampled, num_clients))

    def validate(self, weights):
        n = weights.numel()
        if self.num_sampled > n:
            raise ValueError(f"num_sampled (S) for SchemeII must be in [1, N={n}]; got {self.num_sampled}")
        balanced = torch.allclose(weights, torch.full_like(weights, 1.0 / n), rtol=1e-9, atol=0)
        if not balanced:
            msg = (
                "SchemeII assumes balanced clients (all weights p_c = 1/N; Lemma C.1); these weights are "
                "unequal, so the plain mean over sampled clients is a biased synchronisation. Use SchemeI "
                "(sampling with probabilities p_c) or pass SchemeII(S, allow_unbalanced=True)."
            )
            if not self.allow_unbalanced:
                raise ValueError("participation: " + msg)
            warnings.warn(msg, stacklevel=3)

    def weights(self, p, chains, generator):
        n = p.numel()
        if self.num_sampled == n:  # every client takes part: the plain mean, no draw needed
            return torch.full_like(p, 1.0 / n)
        keys = torch.rand(chains, n, generator=generator, device=p.device)
        idx = keys.argsort(dim=1)[:, : self.num_sampled]
        w = torch.zeros(chains, n, device=p.device, dtype=p.dtype)
        w.scatter_(1, idx, 1.0 / self.num_sampled)
        return w


def as_participation(value: Participation | str | None) -> Participation:
    """Accept a rule object, ``None`` / ``"full"``; anything else is a ``ValueError``."""
    if value is None or (isinstance(value, str) and value.lower() == "full"):
        return Full()
    if isinstance(value, Participation):
        if type(value).weights is Participation.weights:
            raise ValueError(
                f"participation: {type(value).__name__} does not implement weights(); Participation is the abstract "
                "base: use Full(), SchemeI(num_sampled) or SchemeII(num_sampled), or a subclass implementing "
                "weights(), scheme and num_sampled"
            )
        return value
    raise ValueError(
        f"participation must be Full(), SchemeI(num_sampled) or SchemeII(num_sampled) (or 'full'); got {value!r}"
    )


def synchronize(beta: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Server aggregation sum_c w_rc beta_rc: beta (R, N, d), w (N,) or (R, N) -> (R, d).

    This is the only operation that crosses clients; a distributed engine replaces it with
    an all-reduce of the weighted local sums.
    """
    # batched matrix-vector / bmm: the same sums as einsum("n,rnd->rd") / einsum("rn,rnd->rd"), bit
    # for bit (checked on R, N, d grids and the kernels' layouts), without einsum's parsing (~20 us
    # a call). For d = 1 einsum contracts differently: it is kept there. The coordinate-major
    # planes of the small affine kernel take one contiguous matrix-vector product instead (2.3x
    # faster than the strided batched product at (R, N, d) = (300, 50, 2)); its sums agree with
    # einsum's to the last bit or one rounding (~1e-16 relative).
    if beta.shape[1] == 1:  # one client: the sum has one term, w_r0 beta_r0 (the same product einsum forms)
        return beta.select(1, 0) * w
    if w.dim() == 1:
        planes = beta.permute(2, 0, 1)
        if beta.shape[2] > 1 and planes.is_contiguous():  # coordinate-major planes (d, R, N) of the small affine kernel
            d, r, n = planes.shape
            return torch.mv(planes.view(d * r, n), w).view(d, r).t().contiguous()
        if beta.shape[2] == 1:
            return torch.einsum("n,rnd->rd", w, beta)
        return torch.matmul(beta.transpose(1, 2), w)
    return torch.bmm(w.unsqueeze(1), beta).squeeze(1)
