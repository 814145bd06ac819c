"""Device participation at synchronisation (Deng et al., Alg. 1 / Alg. 4, App. C.1).

Every rule turns the local states beta (R, N, d) into one global parameter per chain with a
weighted sum over clients, sum_c w_rc beta_rc — the only cross-client operation of FA-LD
(:func:`synchronize`). The rules differ in the weights w (R, N):

- :class:`Full`: w_rc = p_c (eq. 4).
- :class:`SchemeI` (with replacement): S indices drawn i.i.d. with P(c) = p_c, plain mean
  theta = (1/S) sum_{j} beta_{n_j}, so w_rc = (times c drawn) / S.
- :class:`SchemeII` (without replacement): S distinct clients drawn uniformly, plain mean,
  w_rc = 1/S on the chosen clients, on balanced data p_c = 1/N (unbiased: Lemma C.1); on nearly
  balanced clients weights that sum to 1 and have E[w_c] = p_c (:class:`SchemeII`), beyond that
  a refusal naming scheme I (``allow_unbalanced=True``: the paper's plain mean, a warning).

Each chain is an independent replicate and draws its own subset every round.

Injected noise (``noise``, a setting of :class:`SchemeI`, :class:`SchemeII` and of a rule of your
own): after the average, client c's private noise of variance v_c per local step contributes
E[w_c^2] v_c. Full participation gives v_c = 2 eta tau (1 - rho^2) / p_c (eq. 10), so that the
average carries sum_c p_c^2 / p_c = 1 times 2 eta tau (1 - rho^2): the target's temperature.

- ``noise="calibrated"`` (the default): v_c = 2 eta tau (1 - rho^2) p_c / E[w_c^2], so that
  E[w_c^2] v_c = p_c, client by client, as under full participation; the long-run law of the
  global iterate is then full participation's up to the client-sampling noise of the drift.
  :meth:`Participation.noise_weights` gives q_c = E[w_c^2] / p_c, and v_c = 2 eta tau (1 - rho^2) /
  q_c (q = p for full participation: the same numbers, bit for bit).
- ``noise="paper"``: v_c = 2 eta tau (1 - rho^2) / p_c whatever the rule (Deng et al.'s
  algorithm, as their Fig. 2 runs it). Under scheme I the average then carries
  E[sum_c w_c^2 / p_c] = N / S + 1 - 1 / S times the noise it needs (docs/simulation.md), and the
  samples are too wide by about the square root of that.

The shared part (rho) is averaged with sum_c w_c, which is 1 for every built-in rule.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlangevin._validation import check_bool, check_choice, check_int

__all__ = ["MAX_NUM_SAMPLED", "MONTE_CARLO_DRAWS", "NOISE_RULES", "Participation", "Full", "SchemeI", "SchemeII", "as_participation", "synchronize"]


#: the injected-noise rules of a participation rule (module docstring)
NOISE_RULES = ("calibrated", "paper")

#: rounds of weights drawn to estimate E[w_c^2] of a rule that gives no closed form
#: (:meth:`Participation.mean_square_weights`); the estimate's relative standard error is
#: sd(w_c^2) / (E[w_c^2] sqrt(2^16)): 0.4% for a client drawn in every round, about
#: 0.4% / sqrt(P(c drawn)) otherwise
MONTE_CARLO_DRAWS = 1 << 16


class Participation:
    """Base class; subclasses implement :meth:`weights` and :meth:`validate`.

    Every rule also reads as typed settings: :attr:`scheme` (``"full"``, ``"I"`` or ``"II"``)
    and ``num_sampled`` (S, the devices sampled per round and chain; ``None`` for
    :class:`Full`). The built-in rules give their weights' moments in closed form
    (:meth:`weight_moments`, :meth:`covariance_weights`: the exact moments of
    :mod:`fedlangevin.experiments.exact` and the setting check of :mod:`fedlangevin.fald.setting_noise`
    read them); a rule of your own may override :meth:`weight_moments`.

    ``noise``: ``"calibrated"`` (default) or ``"paper"``, the injected-noise rule (module
    docstring); a rule of your own may set it as a class or instance attribute, and may give
    E[w_c^2] in closed form by overriding :meth:`mean_square_weights` (otherwise it is estimated
    from :data:`MONTE_CARLO_DRAWS` rounds of its weights).
    """

    noise = "calibrated"

    def validate(self, weights: torch.Tensor) -> None:
        """Check the rule against the client weights p_c (raises ``ValueError``)."""

    def weights(self, p: torch.Tensor, chains: int, generator: torch.Generator | None) -> torch.Tensor:
        """Aggregation weights: (N,) shared by all chains, or (R, N) per chain."""
        raise NotImplementedError

    @property
    def scheme(self) -> str:
        """The rule's name in the paper's terms: ``"full"``, ``"I"`` or ``"II"`` (App. C.1)."""
        raise NotImplementedError

    def mean_square_weights(self, p: torch.Tensor) -> torch.Tensor:
        """E[w_c^2] (N,), float64 on the CPU, of the weights :meth:`weights` draws for client weights
        ``p``. This default estimates it from :data:`MONTE_CARLO_DRAWS` rounds drawn with a fixed
        seed (the same estimate every call); the built-in rules give it in closed form."""
        p = p.detach().to(device="cpu", dtype=torch.float64)
        w = self.weights(p, MONTE_CARLO_DRAWS, torch.Generator().manual_seed(0))
        w = w.to(device="cpu", dtype=torch.float64)
        return (w * w) if w.dim() == 1 else (w * w).mean(0)

    def weight_moments(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """E[w] (N,) and E[w w^T] (N, N), float64 on the CPU, of the weights :meth:`weights` draws for
        client weights ``p``, in closed form. The built-in rules give them; this default raises
        ``NotImplementedError`` (a rule of your own has none unless it overrides this method)."""
        raise NotImplementedError(
            f"participation: {type(self).__name__} gives no closed form of its weights' moments; override "
            "weight_moments(p) -> (E[w], E[w w^T]) to give one")

    def covariance_weights(self, p: torch.Tensor) -> torch.Tensor:
        """Cov(w) (N, N), float64 on the CPU, of the weights :meth:`weights` draws for client weights ``p``:
        E[w w^T] - E[w] E[w]^T from :meth:`weight_moments` (``NotImplementedError`` where it has no
        closed form; zero for :class:`Full`, whose weights are fixed)."""
        mean, second = self.weight_moments(p)
        return second - torch.outer(mean, mean)

    def noise_weights(self, p: torch.Tensor) -> torch.Tensor:
        """q (N,) with client c's private noise variance 2 eta tau (1 - rho^2) / q_c per local step:
        ``p`` itself (the same tensor) under ``noise="paper"``, E[w_c^2] / p_c under
        ``noise="calibrated"`` (module docstring). ``ValueError`` when a client's E[w_c^2] is 0
        (never drawn: no finite noise makes it right)."""
        rule = check_choice("noise", getattr(self, "noise", "calibrated"), NOISE_RULES)
        if rule == "paper":
            return p
        p64 = p.detach().to(device="cpu", dtype=torch.float64)
        q = self._calibrated(p64)
        if not bool(torch.isfinite(q).all()) or bool((q <= 0).any()):
            raise ValueError(
                f"participation: {self!r} draws a client with E[w_c^2] = 0 (never drawn), so no private noise makes "
                "the calibrated rule right; use a rule that draws every client, or noise='paper'")
        return q.to(device=p.device, dtype=p.dtype)

    def _calibrated(self, p: torch.Tensor) -> torch.Tensor:
        """E[w_c^2] / p_c (float64, CPU): the calibrated rule's q (closed forms override it)."""
        return self.mean_square_weights(p) / p

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

    @property
    def noise(self) -> str:
        """``"paper"``: full participation's noise is eq. 10's under either rule (q = p)."""
        return "paper"

    def fixed_uploads(self, num_clients):
        return float(num_clients)

    def mean_square_weights(self, p):
        p = p.detach().to(device="cpu", dtype=torch.float64)
        return p * p

    def weight_moments(self, p):
        p = p.detach().to(device="cpu", dtype=torch.float64)
        return p.clone(), torch.outer(p, p)  # w = p in every round

    def noise_weights(self, p):
        return p

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

    ``num_sampled``: S, an integer in [1, :data:`MAX_NUM_SAMPLED`] (S may exceed N). ``noise``:
    ``"calibrated"`` (default: client c's private noise variance 2 eta tau (1 - rho^2) S /
    (1 + (S - 1) p_c), since E[w_c^2] = p_c (1 - p_c) / S + p_c^2) or ``"paper"`` (2 eta tau
    (1 - rho^2) / p_c, Deng et al.'s; module docstring)."""

    num_sampled: int
    noise: str = "calibrated"
    #: a checkpoint written before ``noise`` was a setting ran eq. 10's noise: it resumes with it
    RECORD_DEFAULTS: ClassVar[dict] = {"noise": "paper"}

    @property
    def scheme(self) -> str:
        """``"I"``: S devices drawn with replacement with probabilities p_c (App. C.1)."""
        return "I"

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_sampled", check_int("num_sampled", self.num_sampled, 1, MAX_NUM_SAMPLED))
        object.__setattr__(self, "noise", check_choice("noise", self.noise, NOISE_RULES))

    def mean_square_weights(self, p):
        p, s = p.detach().to(device="cpu", dtype=torch.float64), self.num_sampled
        return p * (1.0 - p) / s + p * p  # counts ~ Multinomial(S, p): E[count_c^2] = S p_c (1 - p_c) + S^2 p_c^2

    def weight_moments(self, p):
        p, s = p.detach().to(device="cpu", dtype=torch.float64), self.num_sampled
        # counts ~ Multinomial(S, p): E[count_c count_k] = S (S - 1) p_c p_k + S p_c [c = k]
        return p.clone(), (s - 1) / s * torch.outer(p, p) + torch.diag(p) / s

    def _calibrated(self, p):
        s = self.num_sampled
        return (1.0 + (s - 1) * p) / s

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
    """Scheme II: S devices drawn uniformly without replacement.

    On balanced clients (all p_c = 1/N) the weights are the paper's plain mean, 1/S on the S clients
    drawn (Lemma C.1: E[w_c] = 1/N = p_c). On **nearly balanced** clients (client sizes that differ by
    a few records) the plain mean would average a different posterior (E[w_c] = 1/N != p_c); with
    ``noise="calibrated"`` (the default) the drawn clients get instead

        w_c = 1/S + (N - 1) / (S - 1) (e_c - mean_{j drawn} e_j),   e_c = p_c - 1/N,

    which sum to 1 in every round (the shared noise and the average of theta are a mean) and have
    E[w_c] = p_c exactly (:meth:`weights`; derivation in ``docs/fald.md``), so the drift is the
    target's, and the calibrated private noise uses their E[w_c^2] (:meth:`mean_square_weights`).
    Allowed when every such weight is >= 0 whatever the draw, i.e. (N - 1)(max_c p_c - min_c p_c) <= 1
    (the :data:`NEAR_BALANCED` condition), and S >= 2; otherwise the sampler refuses (``ValueError``)
    and names :class:`SchemeI` (sampling with probabilities p_c: unbiased for any weights).
    ``allow_unbalanced=True`` keeps the paper's plain mean on unequal weights, with a warning (a
    different posterior), as does ``noise="paper"`` (which otherwise refuses unequal weights).

    ``num_sampled``: S, an integer in [1, :data:`MAX_NUM_SAMPLED`] (and at most N, checked against the
    problem). ``noise``: ``"calibrated"`` (default: client c's private noise variance 2 eta tau (1 -
    rho^2) p_c / E[w_c^2], i.e. 2 eta tau (1 - rho^2) S on balanced clients, E[w_c^2] = 1 / (S N)) or
    ``"paper"`` (2 eta tau (1 - rho^2) / p_c; module docstring).
    """

    num_sampled: int
    allow_unbalanced: bool = False
    noise: str = "calibrated"
    #: a checkpoint written before ``noise`` was a setting ran eq. 10's noise: it resumes with it
    RECORD_DEFAULTS: ClassVar[dict] = {"noise": "paper"}

    @property
    def scheme(self) -> str:
        """``"II"``: S devices drawn uniformly without replacement (App. C.1)."""
        return "II"

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_sampled", check_int("num_sampled", self.num_sampled, 1, MAX_NUM_SAMPLED))
        object.__setattr__(self, "allow_unbalanced", check_bool("allow_unbalanced", self.allow_unbalanced))
        object.__setattr__(self, "noise", check_choice("noise", self.noise, NOISE_RULES))

    def corrects(self, p: torch.Tensor) -> bool:
        """Whether the weights for client weights ``p`` are the nearly balanced ones (unequal p_c,
        ``noise="calibrated"``, not ``allow_unbalanced``) rather than the plain mean."""
        return not (self.allow_unbalanced or self.noise == "paper" or _balanced(p))

    def mean_square_weights(self, p):
        p = p.detach().to(device="cpu", dtype=torch.float64)
        if not self.corrects(p):
            return torch.full_like(p, 1.0 / (self.num_sampled * p.numel()))  # drawn with probability S/N, weight 1/S
        return near_balanced_square_weights(p, min(self.num_sampled, p.numel()))

    def weight_moments(self, p):
        p = p.detach().to(device="cpu", dtype=torch.float64)
        n, s = p.numel(), self.num_sampled
        if s > n:
            raise ValueError(f"num_sampled (S) for SchemeII must be in [1, N={n}]; got {s}")
        if self.corrects(p):  # E[w] = p exactly (the weights' construction)
            return p.clone(), near_balanced_second_moments(p, s)
        off = (s - 1) / (s * n * (n - 1)) if n > 1 else 0.0  # the plain mean: drawn together w.p. S (S - 1) / (N (N - 1))
        second = torch.full((n, n), off, dtype=torch.float64)
        second.fill_diagonal_(1.0 / (s * n))
        return torch.full((n,), 1.0 / n, dtype=torch.float64), second

    def _calibrated(self, p):
        return self.mean_square_weights(p) / p

    def fixed_uploads(self, num_clients):
        return float(min(self.num_sampled, num_clients))

    def validate(self, weights):
        n = weights.numel()
        if self.num_sampled > n:
            raise ValueError(f"num_sampled (S) for SchemeII must be in [1, N={n}]; got {self.num_sampled}")
        if _balanced(weights):
            return
        plain = ("SchemeII(S, allow_unbalanced=True) runs the paper's plain mean over the sampled clients, a "
                 "biased synchronisation that averages a different posterior")
        if self.allow_unbalanced:
            warnings.warn(f"SchemeII assumes balanced clients (all weights p_c = 1/N; Lemma C.1); these weights are "
                          f"unequal and {plain}", stacklevel=3)
            return
        p = weights.detach().to(device="cpu", dtype=torch.float64)
        spread = (n - 1) * float(p.max() - p.min())
        why = None
        if self.noise == "paper":
            why = ("noise='paper' is the paper's scheme II, a plain mean over the sampled clients, unbiased only on "
                   "balanced clients (all p_c = 1/N; Lemma C.1)")
        elif self.num_sampled == 1 and n > 1:
            why = "with S = 1 the one client drawn takes weight 1, so E[w_c] = 1/N != p_c on unequal weights"
        elif spread > NEAR_BALANCED:
            why = (f"its weights for nearly balanced clients stay unbiased and >= 0 only while (N - 1)(max p_c - "
                   f"min p_c) <= {NEAR_BALANCED:g}; here it is {spread:.3g}")
        if why is not None:
            raise ValueError(f"participation: SchemeII({self.num_sampled}) on unequal client weights: {why}. Use "
                             f"SchemeI({self.num_sampled}) (S clients drawn with probabilities p_c: unbiased for any "
                             f"weights), or {plain}.")

    def weights(self, p, chains, generator):
        n = p.numel()
        if self.num_sampled == n and not self.corrects(p):  # every client takes part: the plain mean, no draw needed
            return torch.full_like(p, 1.0 / n)
        if self.num_sampled >= n:  # every client takes part: the weights are p itself
            return p
        keys = torch.rand(chains, n, generator=generator, device=p.device)
        idx = keys.argsort(dim=1)[:, : self.num_sampled]
        w = torch.zeros(chains, n, device=p.device, dtype=p.dtype)
        if not self.corrects(p):
            w.scatter_(1, idx, 1.0 / self.num_sampled)
            return w
        s = self.num_sampled
        e = (p - 1.0 / n)[idx]  # (R, S) the drawn clients' e_c
        drawn = 1.0 / s + (n - 1) / (s - 1) * (e - e.mean(1, keepdim=True))
        w.scatter_(1, idx, drawn)
        return w


#: scheme II's weights for nearly balanced clients are >= 0 in every draw when (N - 1)(max p_c - min p_c)
#: is at most this (:class:`SchemeII`); beyond it the sampler refuses and names scheme I
NEAR_BALANCED = 1.0


def _balanced(p: torch.Tensor) -> bool:
    """All client weights equal (p_c = 1/N), to rounding."""
    return bool(torch.allclose(p, torch.full_like(p, 1.0 / p.numel()), rtol=1e-9, atol=0))


def near_balanced_square_weights(p: torch.Tensor, s: int) -> torch.Tensor:
    """E[w_c^2] (N,) of :class:`SchemeII`'s weights for nearly balanced clients (float64 ``p``, S = ``s``
    >= 2): client c is drawn with probability S/N; given that, its weight is 1/S + a ((S - 1) e_c - T) / S
    with a = (N - 1)/(S - 1) and T the sum of e_j over the S - 1 others drawn, a uniform (S - 1)-subset of
    the N - 1 other clients (mean -(S - 1) e_c / (N - 1), the finite-population variance), so
    E[w_c | drawn] = (1 + N e_c) / S and E[w_c^2] = S/N ((1 + N e_c)^2 / S^2 + a^2 Var T / S^2)."""
    n = p.numel()
    e = p - 1.0 / n
    if s >= n:
        return p * p
    a = (n - 1) / (s - 1)
    rest_mean = -e / (n - 1)
    rest_var = ((e * e).sum() - e * e) / (n - 1) - rest_mean ** 2  # population variance of the other N - 1
    var_t = (s - 1) * rest_var * (n - s) / (n - 2) if n > 2 else torch.zeros_like(e)
    return s / n * ((1.0 + n * e) ** 2 + a * a * var_t) / (s * s)


def near_balanced_second_moments(p: torch.Tensor, s: int) -> torch.Tensor:
    """E[w w^T] (N, N) of :class:`SchemeII`'s weights for nearly balanced clients (float64 ``p``, S = ``s``
    >= 2), in closed form. With I_c the indicator that client c is drawn, T = sum_j I_j e_j and a = (N - 1) /
    (S - 1), w_c = I_c (b_c - a T / S), b_c = 1/S + a e_c; the moments of I_c I_k T^m (m <= 2) follow from
    the inclusion probabilities pi_m = S (S - 1) ... (S - m + 1) / (N (N - 1) ... (N - m + 1)) of m given
    clients, with sum_j e_j = 0 (its diagonal is :func:`near_balanced_square_weights`)."""
    n = p.numel()
    if s >= n:
        return torch.outer(p, p)  # every client drawn: w = p
    pi = [1.0]
    for m in range(4):  # pi[m]: m given clients all drawn (0 when m > S)
        pi.append(pi[-1] * (s - m) / (n - m) if m < s else 0.0)
    a, e = (n - 1) / (s - 1), p - 1.0 / n
    e2, sigma = e * e, float((e * e).sum())
    b = 1.0 / s + a * e
    # c != k: given both drawn, T = e_c + e_k + T', T' over the other N - 2 (sum -(e_c + e_k), squares q)
    pair, q = e[:, None] + e[None, :], sigma - e2[:, None] - e2[None, :]
    t1 = (pi[2] - pi[3]) * pair
    t2 = (pi[2] - 2 * pi[3]) * pair ** 2 + pi[3] * q + pi[4] * (pair ** 2 - q)
    second = pi[2] * b[:, None] * b[None, :] - a / s * (b[:, None] + b[None, :]) * t1 + (a / s) ** 2 * t2
    # c = k: given c drawn, T = e_c + T'', T'' over the other N - 1 (sum -e_c, squares sigma - e_c^2)
    t1 = (pi[1] - pi[2]) * e
    t2 = (pi[1] - 2 * pi[2]) * e2 + pi[2] * (sigma - e2) + pi[3] * (2 * e2 - sigma)
    second.diagonal().copy_(pi[1] * b * b - 2 * a / s * b * t1 + (a / s) ** 2 * t2)
    return second


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
