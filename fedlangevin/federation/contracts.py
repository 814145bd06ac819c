"""The extension contracts of the federated runner, declared in one place, with a conformance check.

Every place where the runner or the kernel calls into an object a user may supply is one of
these contracts; each lists its required members (what the kernel and runner always use) and
its optional ones (probed with ``getattr``, with the default the runner uses when absent):

==========================  ================================================================
contract                    what it changes (the argument that takes it)
==========================  ================================================================
:data:`PRECONDITIONER`      coordinates of the local steps, M = A A^T (``preconditioner=``)
:data:`CORRECTION_SETTINGS` a drift correction's settings record (``correction=``)
:data:`DRIFT_CORRECTION`    what the settings' ``build`` returns: the term added to gradients
:data:`TRANSPORT`           the synchronisation, the only cross-client operation (``transport=``)
:data:`UPLOAD_CODEC`        what a client sends to the server (``upload=``)
:data:`PROBLEM`             a federated problem and its optional capabilities (``problem``)
:data:`KERNEL`              a sampler family's pure (init, step) kernel (``Runner(kernel, ...)``)
==========================  ================================================================

``check_conforms(obj, CONTRACT)`` raises a ``ValueError`` naming every missing member and every
method whose signature cannot take the arguments the runner passes; ``conformance(obj,
CONTRACT)`` returns those findings as a list (empty: the object conforms). The runner runs the
same check on what it is given, before any work, so a class a user writes is either accepted
or refused with the list of what it lacks. ``docs/fald.md`` ("Write your own ...") has a
runnable example of each.

The typing ``Protocol`` classes (:class:`Preconditioner`, :class:`DriftCorrection`,
:class:`CorrectionSettings`, :class:`Transport`, :class:`UploadCodec`) say the same for static
type checkers and ``isinstance``; the :class:`Contract` records are what the runner checks.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch

__all__ = [
    "CORRECTION_SETTINGS", "CONTRACTS", "Contract", "CorrectionSettings", "DRIFT_CORRECTION", "DriftCorrection",
    "KERNEL", "Member", "PRECONDITIONER", "PROBLEM", "Preconditioner", "TRANSPORT", "Transport", "UPLOAD_CODEC", "UploadCodec",
    "check_conforms", "conformance",
]


@dataclass(frozen=True)
class Member:
    """One member of a contract.

    ``signature``: how the runner uses it (for messages and docs); ``positional``: for a method,
    the number of positional arguments the runner passes (its signature must accept them;
    ``None``: not checked); ``keywords``: keyword arguments the runner passes; ``required``:
    False for an optional capability; ``default``: what the runner does without it.
    """

    name: str
    signature: str
    doc: str
    method: bool = True
    positional: int | None = None
    keywords: tuple[str, ...] = ()
    required: bool = True
    default: str = ""


@dataclass(frozen=True)
class Contract:
    """A declared extension contract: its name, what it is for, its members, and optionally a
    further check of the whole object (``extra(obj) -> list of findings``)."""

    name: str
    doc: str
    members: tuple[Member, ...]
    extra: Callable[[Any], list[str]] | None = None

    @property
    def required(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.required)

    @property
    def optional(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if not m.required)

    def table(self) -> str:
        """The members as a Markdown table (for docs and messages)."""
        rows = ["| member | required | what the runner does with it |", "| --- | --- | --- |"]
        for m in self.members:
            what = m.doc + (f" (without it: {m.default})" if m.default else "")
            rows.append(f"| `{m.signature}` | {'yes' if m.required else 'no'} | {what} |")
        return "\n".join(rows)


def _has(obj: Any, name: str) -> bool:
    """Whether ``obj`` has the member ``name``; a property that raises anything but AttributeError
    (e.g. a transport's ``clients`` before ``bind``) exists but is not ready: it counts as present."""
    try:
        getattr(obj, name)
    except AttributeError:
        return False
    except Exception:  # noqa: BLE001 - present, just not usable yet
        return True
    return True


def _signature_finding(obj: Any, member: Member) -> str | None:
    fn = getattr(obj, member.name)
    if not callable(fn):
        return f"{member.name} must be callable ({member.signature})"
    if member.positional is None:
        return None
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without an introspectable signature: trust it
        return None
    try:
        sig.bind(*([None] * member.positional), **{k: None for k in member.keywords})
    except TypeError as error:
        return f"{member.name} cannot be called as {member.signature}: {error}"
    return None


def conformance(obj: Any, contract: Contract) -> list[str]:
    """What keeps ``obj`` from conforming to ``contract``: missing required members, members that
    are not callable or whose signature cannot take the runner's arguments (optional members are
    checked when present). An empty list: ``obj`` conforms."""
    findings = []
    for member in contract.members:
        if member.name == "__call__":
            if not callable(obj):
                findings.append(f"it must be callable as {member.signature}")
                continue
            target = obj if inspect.isfunction(obj) or inspect.ismethod(obj) else type(obj).__call__
            try:
                sig = inspect.signature(target)
                extra = 0 if target is obj else 1  # an instance's __call__ takes self first
                sig.bind(*([None] * ((member.positional or 0) + extra)))
            except (TypeError, ValueError) as error:
                if isinstance(error, TypeError):
                    findings.append(f"it cannot be called as {member.signature}: {error}")
            continue
        if not _has(obj, member.name):
            if member.required:
                findings.append(f"missing {member.signature}")
            continue
        if member.method:
            finding = _signature_finding(obj, member)
            if finding is not None:
                findings.append(finding)
    if contract.extra is not None and not findings:
        findings += contract.extra(obj)
    return findings


def check_conforms(obj: Any, contract: Contract, argument: str | None = None) -> Any:
    """``obj`` if it conforms to ``contract``, else ``ValueError`` naming ``argument`` (default: the
    contract's name) and every finding of :func:`conformance`. Run it on your own class in a test."""
    findings = conformance(obj, contract)
    if findings:
        name = argument or contract.name
        raise ValueError(
            f"{name}: {type(obj).__name__} does not implement the {contract.name} contract "
            f"(fedlangevin.federation.contracts): " + "; ".join(findings)
        )
    return obj


# -- the contracts ------------------------------------------------------------------------------
def _transport_extra(obj: Any) -> list[str]:
    if getattr(obj, "exact", True) is False and not callable(getattr(obj, "private_stream", None)):
        return ["a transport with exact = False must have private_stream(generator)"]
    try:
        clients = getattr(obj, "clients")
    except Exception:  # noqa: BLE001 - e.g. a ProcessGroup before bind(): checked by the kernel after it
        return []
    if clients is not None and not isinstance(clients, (Sequence, torch.Tensor)):
        return [f"clients must be None or a sequence of client indices; got {type(clients).__name__}"]
    return []


PRECONDITIONER = Contract(
    "preconditioner",
    "A constant preconditioner M = A A^T (Deng et al.'s eq. 10 in coordinates z, theta = theta_0 + A z): "
    "each local step is theta <- theta - eta M grad f~^c(theta) + A (eq. 10's noise); the target is unchanged.",
    (
        Member("drift", "drift(grad) -> M grad", "gradients (R, n, d) to M times them, every local step",
               positional=1),
        Member("noise", "noise(xi) -> A xi", "standard normals (R, n, d) to A times them, every local step",
               positional=1),
        Member("matrix", "matrix: M (d, d)", "M as a (d, d) tensor (an attribute, a property, or a method "
               "taking no argument): checked against d, stored in checkpoints, privacy's lambda_max(M)",
               method=False),
        Member("to", "to(device=, dtype=) -> preconditioner", "a copy on the run's device and dtype",
               positional=0, keywords=("device", "dtype"), required=False, default="used as it is"),
        Member("broadcast_floats", "broadcast_floats(dim) -> int",
               "numbers sent to each client when M is installed (the ledger)", positional=1, required=False,
               default="d (d + 1) / 2, a triangular factor"),
        Member("factor", "factor: A (d, d)", "A with A A^T = M (exact laws on quadratic problems; attribute or "
               "method)", method=False, required=False, default="the Cholesky factor of M"),
    ),
)

CORRECTION_SETTINGS = Contract(
    "correction",
    "A drift correction's settings record: what FALD(..., correction=) takes; it builds the kernel's side.",
    (
        Member("build", "build(problem, *, dtype, device, upload) -> DriftCorrection",
               "builds the kernel's side once, before the first round", positional=1,
               keywords=("dtype", "device", "upload")),
        Member("record", "record() -> dict", "plain values with a 'kind' key, stored in checkpoints (a "
               "correction of your own is given again to FALD.resume(correction=) and checked against it)",
               positional=0),
        Member("per_round_floats", "per_round_floats(num_clients, dim) -> (up, down)",
               "extra floats per upload and per round down (the ledger)", positional=2),
        Member("active", "active: bool", "False switches the correction off: FA-LD's own kernel is built",
               method=False),
        Member("releases", "releases: str", "what it releases besides FA-LD's uploads; privacy accounting "
               "refuses a run where this is not empty", method=False),
    ),
)

DRIFT_CORRECTION = Contract(
    "built correction",
    "The kernel's side of a drift correction: a term c_rc added to client c's gradient at every local step of "
    "chain r, with its own state (a dict of tensors, checkpointed as it is) carried in the kernel's state.",
    (
        Member("init", "init(theta, mode=None) -> state", "the state from the initial global parameters (R, d), "
               "once before the first round; the runner passes mode= (a mode it found already, init='map') "
               "only when it has one, so accept it to reuse that point", positional=1),
        Member("term", "term(state, beta) -> tensor", "the term for the client states beta (R, N, d), every "
               "local step; broadcastable to beta", positional=2),
        Member("update", "update(state, theta, new_theta, beta, weights, generator) -> state",
               "the state after a round: broadcast (R, d), new global parameters (R, d), final local states "
               "(R, N, d), aggregation weights, the round's generator", positional=6),
        Member("keep", "keep(state, rows) -> state", "the state of the chains rows (a boolean mask over R) "
               "after diverged chains were dropped", positional=2),
        Member("cost", "cost: SetupCost", "the set-up's communication (rounds, floats_up, floats_down), read "
               "after init", method=False, required=False, default="no set-up communication"),
    ),
)

TRANSPORT = Contract(
    "transport",
    "The synchronisation theta_new = sum_c w_rc beta_rc across processes: a process holds the clients "
    "`clients` and the partial weighted sums are summed by `reduce` (an all-reduce).",
    (
        Member("clients", "clients: sequence of int | None", "the client indices this process holds (None: "
               "all); the kernel draws every random number for all N clients as one process would",
               method=False),
        Member("reduce", "reduce(partial) -> total", "the sum over processes of the partial sums (R, d)",
               positional=1),
        Member("bind", "bind(num_clients)", "called once with the problem's N by a transport that splits the "
               "clients itself", positional=1, required=False, default="clients is used as it is"),
        Member("exact", "exact: bool", "False: the held clients' private noise and minibatches come from "
               "private_stream (same law, fewer draws; samples then depend on the split)", method=False,
               required=False, default="True"),
        Member("private_stream", "private_stream(generator) -> generator", "the round's generator of the held "
               "clients' private noise (exact = False only)", positional=1, required=False,
               default="the common generator"),
        Member("writes", "writes: bool", "whether this process keeps draws, checkpoints and stores (rank 0)",
               method=False, required=False, default="True"),
    ),
    extra=_transport_extra,
)

UPLOAD_CODEC = Contract(
    "upload",
    "What a client sends: codec(beta, theta, generator) -> beta' (R, N, d), averaged by the server instead "
    "of the local states beta.",
    (
        Member("__call__", "codec(beta, theta, generator) -> beta'", "every round, before the server average",
               positional=3),
        Member("bits", "bits(dim) -> float", "bits per upload (compare; qlsd++ needs a quantising codec)",
               positional=1, required=False, default="32 d (floats)"),
        Member("generator", "generator: torch.Generator", "the codec's own stream, on the run's device",
               method=False, required=False, default="the codec draws nothing or uses the round's generator"),
    ),
)

PROBLEM = Contract(
    "problem",
    "A federated problem: per-client energies f^c = (1/p_c) NLL_c + prior share, so that sum_c p_c f^c is the "
    "global energy (subclass fedlangevin.problems.FederatedProblem).",
    (
        Member("num_clients", "num_clients: int", "N", method=False),
        Member("dim", "dim: int", "d", method=False),
        Member("weights", "weights: tensor (N,)", "p_c, positive, summing to 1", method=False),
        Member("grad", "grad(theta, *, batch_size=None, generator=None) -> (R, N, d)",
               "every client's gradient of f^c at its own state, every local step", positional=1,
               keywords=("batch_size", "generator")),
        Member("to", "to(device=, dtype=) -> problem", "the problem on the run's device and dtype", positional=0,
               keywords=("device", "dtype")),
        Member("clients", "clients(indices) -> problem", "the problem restricted to some clients (transports)",
               positional=1, required=False, default="the base class's ClientSubset"),
        Member("quadratic", "quadratic() -> QuadraticForm | None", "affine gradients: the fast round kernel "
               "and exact laws", positional=0, required=False, default="the general gradient kernel"),
        Member("posterior", "posterior(temperature) -> (mean, cov) | None", "a closed-form Gaussian posterior "
               "(W2 in traces)", positional=1, required=False, default="no exact W2"),
        Member("energy", "energy(theta) -> (R,)", "the global energy (MAP search, corrections' reference "
               "search beyond the dense dimension)", positional=1, required=False,
               default="gradient-only searches"),
        Member("client_hessian_diagonal", "client_hessian_diagonal(theta) -> (N, d)", "analytic client Hessian "
               "diagonals (corrections)", positional=1, required=False, default="finite differences"),
        Member("client_hvp", "client_hvp(theta, vectors) -> (B, N, d) | None", "exact client Hessian-vector "
               "products (the curvature estimates of the warm-up and the checks)", positional=2, required=False,
               default="central gradient differences"),
        Member("smoothness", "smoothness: float | None", "L of the paper's step size (Thm 5.8)", method=False,
               required=False, default="step_size='paper' unavailable"),
        Member("convexity", "convexity: float | None", "m of the paper's step size (Thm 5.8)", method=False,
               required=False, default="step_size='paper' unavailable"),
        Member("constrain", "constrain(samples) -> dict | None", "draws in the model's constrained space "
               "(ArviZ export)", positional=1, required=False, default="unconstrained draws"),
        Member("share", "share(weight) -> problem", "the problem re-weighted as client of weight p_c (Flower)",
               positional=1, required=False, default="refused when the weights differ"),
    ),
)

KERNEL = Contract(
    "kernel",
    "A sampler family as a pure kernel over a frozen state: a dataclass with theta (R, d), step and round "
    "counters, and any further fields that are tensors with a leading chain axis (kept per chain, "
    "checkpointed) or None. step never modifies its input state; all randomness comes from the generator.",
    (
        Member("init", "init(theta0) -> state", "once, with theta0 (R, d) (fedlangevin.runner.base.Runner)",
               positional=1),
        Member("step", "step(state, step_sizes, generator, **arguments) -> (state, info)", "every round: "
               "len(step_sizes) = K steps, the counters advanced (step by K, round by 1); arguments: what the "
               "runner's _step_arguments() gives (none for a plain Runner; FA-LD: preconditioner=M)", positional=3),
        Member("rounds", "rounds(state, step_sizes_list, generator) -> (state, thetas (M, R, d))",
               "rounds that need no observation, in one call (the same bits as step round by round)",
               positional=3, required=False, default="one step call per round"),
        Member("autograd_free", "autograd_free: bool", "rounds run under torch.inference_mode", method=False,
               required=False, default="False"),
        Member("name", "name: str", "the sampler family in settings and messages", method=False, required=False,
               default="the class name"),
        Member("settings", "settings() -> dict", "fields of the Settings record the family sets (its "
               "temperature: tau of the target, for target='posterior')", positional=0,
               required=False, default="the runner's own fields"),
        Member("uploads", "uploads(info) -> float", "client uploads of a round (the ledger)", positional=1,
               required=False, default="N uploads every round"),
        Member("record", "record() -> dict of plain values", "compared with the checkpoint's on resume",
               positional=0, required=False, default="nothing compared"),
    ),
)

#: every contract by the argument that takes it
CONTRACTS = {c.name: c for c in (PRECONDITIONER, CORRECTION_SETTINGS, DRIFT_CORRECTION, TRANSPORT, UPLOAD_CODEC,
                                  PROBLEM, KERNEL)}


# -- the same, for type checkers ----------------------------------------------------------------
@runtime_checkable
class Preconditioner(Protocol):
    """A constant preconditioner M = A A^T (A: (d, d), invertible); see :data:`PRECONDITIONER`.

    ``drift(grad)`` returns M grad for gradients (R, n, d); ``noise(xi)`` returns A xi for
    noise (R, n, d) (row vectors: ``xi @ A.T``); ``matrix`` is M (d, d).
    """

    def drift(self, grad: torch.Tensor) -> torch.Tensor: ...

    def noise(self, xi: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class DriftCorrection(Protocol):
    """A built drift correction; see :data:`DRIFT_CORRECTION` for each member.

    What a correction setting's ``build(problem, ...)`` returns (the settings records are
    :class:`fedlangevin.corrections.control_variates.ControlVariates`,
    :class:`fedlangevin.corrections.conducive.Conducive` and :class:`fedlangevin.corrections.qlsd.QLSDPlusPlus`,
    or a user's own class, :data:`CORRECTION_SETTINGS`). ``init(theta, mode=None)`` gives the
    correction's state from the initial global parameters (R, d): a dict of tensors (checkpointed
    as they are; one-off set-up work such as a reference point happens here, its communication in
    ``cost``); ``term(state, beta)`` returns the term for the client states beta (R, N, d);
    ``update(state, theta, new_theta, beta, weights, generator)`` returns the state after a round;
    ``keep(state, rows)`` keeps the chains ``rows`` (a boolean mask over R).
    """

    def init(self, theta: torch.Tensor, mode: torch.Tensor | None = None) -> dict: ...

    def term(self, state: dict, beta: torch.Tensor) -> torch.Tensor: ...

    def update(self, state: dict, theta: torch.Tensor, new_theta: torch.Tensor, beta: torch.Tensor,
               weights: torch.Tensor, generator: torch.Generator | None) -> dict: ...

    def keep(self, state: dict, rows: torch.Tensor) -> dict: ...


@runtime_checkable
class CorrectionSettings(Protocol):
    """A drift correction's settings record; see :data:`CORRECTION_SETTINGS`."""

    active: bool
    releases: str

    def build(self, problem: Any, *, dtype: torch.dtype, device: Any, upload: Any = None) -> DriftCorrection: ...

    def record(self) -> dict: ...

    def per_round_floats(self, num_clients: int, dim: int) -> tuple[float, float]: ...


@runtime_checkable
class Transport(Protocol):
    """The synchronisation across processes; see :data:`TRANSPORT` (optional: ``bind``, ``exact``,
    ``private_stream``, ``writes``).

    ``clients``: the client indices this process holds (``None``: all of them). The kernel
    computes gradients and keeps local states only for those, but draws the round's random
    numbers (participation, shared and private noise, minibatches) for all N clients
    exactly as one process would, so samples do not depend on the split.
    ``reduce(partial)``: the sum over processes (all-reduce, SUM) of the partial weighted
    sums sum_{c held} w_rc beta_rc, (R, d); every process gets the total.
    """

    clients: Sequence[int] | None

    def reduce(self, partial: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class UploadCodec(Protocol):
    """``codec(beta, theta, generator) -> beta'``; see :data:`UPLOAD_CODEC`."""

    def __call__(self, beta: torch.Tensor, theta: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor: ...
