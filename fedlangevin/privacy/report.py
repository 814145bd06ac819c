"""What an FA-LD run spent: both accountants applied to a :class:`~fedlangevin.Trace`.

A private FA-HMC run (OBABO) is accounted by the same tight accountant, every local step at its
equivalent FA-LD step size h^2 / (2 tanh(gamma h / 2)) (:mod:`fedlangevin.privacy.hmc`); the
paper's bound is FA-LD's and is not reported for it.

:func:`trace_privacy` (also ``trace.privacy(...)``) reads the run's settings — step sizes of
every local step, temperature, correlation, participation rule, number of clients, client
weights p_c and data sizes n_c, minibatch size — and reports the paper's bound (Thm 6.1 / G.3)
and the tight accountant at the same delta.

What counts as released: every broadcast of every chain the sampler ever ran, over its whole
life — every round of every ``run`` call and of every checkpoint it was resumed from (the
sampler's cumulative ``ledger``, which checkpoints carry), warm-up included (thinning does not
reduce the cost: the server saw all rounds), and chains dropped after a divergence (they
released rounds before they were dropped) as well as the survivors. ``chains`` replicate chains
on the same data are ``chains`` independent runs, composed (for the paper's bound: ``chains * T``
iterations, i.e. chains * T / K rounds composed as in the theorem's proof); each is composed
over all T local steps of the sampler's life, conservative for a chain dropped before the end.
The local steps of the trace's own run are accounted at their step sizes; those of the earlier
rounds (earlier calls, earlier runs of a resumed checkpoint) at the largest step size the
sampler ever ran (``ledger["eta_max"]``: exact for a constant step size, an upper bound
otherwise, with a note).

Conservative reductions, each recorded in ``report.notes``:
- unequal client weights or sizes: the tight accountant uses the smallest noise multiplier
  over clients (z_c = (gamma_c / Delta) sqrt(2 p_c tau (1 - rho^2) / eta)), the largest batch
  fraction gamma_c = b / n_c and, for scheme I (draws with probabilities p_c), the largest
  inclusion probability 1 - (1 - max_c p_c)^S;
- the paper's bound takes the largest step size of the run (the theorem assumes a constant one)
  and the largest gamma_c, and its step-size condition (59) is checked client by client.

Preconditioned runs (``FALD(..., preconditioner=M)`` or an adapted M): clients run eq. 10 in z,
theta = theta_0 + A z, on the gradient A^T grad f^c with eq. 10's noise, so the mechanism is the
same with the sensitivity of A^T grad l, at most ||A|| Delta = sqrt(lambda_max(M)) Delta. The
accounting uses that, with ``settings.preconditioner_norm`` (the largest lambda_max(M) of every
M the sampler ran with). What adaptation releases: M from the covariance windows is a function
of the broadcast iterates only (post-processing, no extra cost); but ``step_size="auto"`` (power
iteration) and the Hessian start of an adapted dense M query client gradients without noise, so
those runs' eta and initial M depend on the data outside the accounted mechanism: a note says so.
A private run (``privacy=``) adapts its step size and M from the broadcast iterates only (its
warm-up never queries data without noise), so its adaptation is post-processing: the note says that.

Adjacency: a run with ``privacy=RecordLevel(clip=C)`` is accounted at record level (sensitivity
2C of the clipped per-example sum); ``privacy=ClientLevel(clip=C)`` at client level (one client's
whole data changes; sensitivity 2C of the clipped data term, a Gaussian mechanism per local step
without minibatch amplification, :func:`fedlangevin.privacy.client_account`; the paper's
theorem is record-level and is not reported); a run without ``privacy=`` at record level under
a sensitivity the user assumes. :meth:`PrivacyReport.summary` states the adjacency, the threat
model, the sampling, what was released and the four epsilons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedlangevin._validation import check_int, check_real
from fedlangevin.privacy.accountant import Accounting, NoiseOutOfRange, _account_levels, client_levels, record_levels
from fedlangevin.privacy.hmc import equivalent_step_size
from fedlangevin.privacy.paper import PaperBound, paper_bound, paper_delta_split

__all__ = ["PrivacyReport", "trace_privacy"]

@dataclass(frozen=True)
class PrivacyReport:
    """Privacy spent by a run at one delta, under both accountants.

    ``epsilon``: the tight accountant's epsilon (the number to quote); ``tight``: its
    :class:`~fedlangevin.privacy.Accounting` (with RDP cross-check and lower bound);
    ``paper``: the :class:`~fedlangevin.privacy.PaperBound`, ``None`` where the theorem does not
    apply (a client-level run: Thm 6.1/G.3 is record-level); ``mechanism``: the parameters used
    (``adjacency``: "record", "client" or "" for a run without ``privacy=``); ``notes``: every
    conservative reduction or caveat that applied.
    """

    delta: float
    epsilon: float
    tight: Accounting
    paper: PaperBound | None
    chains: int
    mechanism: dict
    notes: tuple[str, ...]

    def summary(self) -> str:
        """The run, its adjacency, threat model, sampling, what it released and the tight / RDP /
        lower / paper epsilons, one statement per line, then the notes."""
        m, t = self.mechanism, self.tight
        rounds = m["iterations"] // m["local_steps"]
        hmc = m.get("sampler") == "FA-HMC"
        step = (f"h <= {m['step_size_max']:.4g}, friction = {m['friction']:g} (eta_eq <= {m['eta_max']:.4g})" if hmc
                else f"eta <= {m['eta_max']:.4g}")
        lines = [
            f"{m.get('sampler', 'FA-LD')} run: {m['chains']} chain(s) x {m['iterations']} local steps (K = {m['local_steps']}, {rounds} "
            f"rounds), {m['participation']}, {step}, tau = {m['tau']:g}, rho = {m['rho']:g}, "
            f"sensitivity = {m['sensitivity']:g} ({m.get('sensitivity_basis', 'given')})",
            "adjacency: " + _ADJACENCY[m.get("adjacency", "")].format(clip=m.get("clip")),
            "threat model: the server sees every upload (each participating client's state after its K local steps, "
            "every round and chain); the shared noise of rho > 0 is public, only each client's private noise "
            + (f"sqrt(tau (1 - a^2) (1 - rho^2) / {'q_c' if m.get('calibrated') else 'p_c'}) in every momentum "
               "refresh (a = exp(-gamma h))" if hmc else
               f"sqrt(2 eta tau (1 - rho^2) / {'q_c' if m.get('calibrated') else 'p_c'})") + " protects its data",
            f"sampling: {m.get('sampling', '')}",
            f"released: {rounds} rounds x {m['chains']} chain(s) x "
            f"{'2 x ' if hmc else ''}{m.get('dim', '?')} floats broadcast{' (theta and v)' if hmc else ''} (warm-up "
            "rounds included; thinning does not reduce the cost)",
            f"tight accountant (PLD): epsilon = {t.epsilon:.4g} at delta = {self.delta:.3g}   [RDP: "
            f"{t.rdp_epsilon:.4g}, lower bound: {t.lower_epsilon:.4g}; z = {t.noise_multiplier:.4g}, q = {t.q:.4g}, "
            f"gamma = {t.gamma:.4g}]",
        ]
        if self.mechanism.get("spent"):
            lines.append(f"everything released (start and sampling composed): epsilon = {self.epsilon:.4g} at delta = "
                         f"{self.delta:.3g}")
        if self.paper is None and hmc:
            lines.append("paper (Thm 6.1/G.3): does not apply (the theorem is FA-LD's; this run is FA-HMC's)")
        elif self.paper is None and self.mechanism.get("adjacency") == "client":
            lines.append("paper (Thm 6.1/G.3): does not apply (the theorem is record-level; this run is client-level)")
        elif self.paper is None:
            lines.append("paper (Thm 6.1/G.3): does not apply (the theorem assumes eq. 10's private noise; this run's "
                         "partial participation ran the calibrated noise, noise='calibrated')")
        else:
            lines.append(f"paper (Thm 6.1/G.3): epsilon = {self.paper.epsilon_formula:.4g}, delta = "
                         f"{self.paper.delta_formula:.3g} — {self.paper.status}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


#: the adjacency line of :meth:`PrivacyReport.summary`, by ``settings.adjacency``
_ADJACENCY = {
    "": "not enforced (a run without privacy= clips nothing); accounted as record level, one record of one client "
        "substituted, under the assumed sensitivity",
    "record": "record level, one record of one client substituted; every per-example gradient clipped to "
              "C = {clip:g} in every local step",
    "client": "client level, one client's whole data replaced; each client's data term clipped to C = {clip:g} in "
              "every local step",
}


def _participation(settings: Any, num_clients: int) -> tuple[str, int]:
    """(scheme, S) of the run for the accountants: full participation is scheme II with S = N."""
    scheme = settings.scheme
    if scheme == "full":
        return "II", num_clients
    return scheme, int(settings.num_sampled)


def _sensitivity(settings: Any, sensitivity: Any) -> tuple[float, str]:
    """(Delta_l, how it is known): derived from a private run's clip, or the given assumption."""
    adjacency = getattr(settings, "adjacency", "")
    if not adjacency:
        if sensitivity is None:
            raise ValueError("sensitivity: this run clipped nothing (it was built without privacy=), so its "
                             "sensitivity can only be assumed: give sensitivity=, or run with "
                             "privacy=fedlangevin.privacy.RecordLevel(clip=C), whose sensitivity 2C is derived")
        if settings.batch_size is not None:
            raise ValueError(
                "trace.privacy: this run drew its minibatches with replacement (runs without privacy= do), which the "
                "accountant (Assumption G.2: fixed-size batches without replacement) does not cover, so no epsilon "
                "is reported; run with privacy=RecordLevel(clip=C) (fixed-size batches without replacement) or "
                "full batches")
        return check_real("sensitivity", sensitivity, low=0.0, low_open=True), "assumed, not enforced"
    mechanism = settings.privacy
    if sensitivity is not None:
        raise ValueError(f"sensitivity: the run's mechanism {mechanism} derives it from its clip; do not give one")
    from fedlangevin.privacy.mechanism import ClientLevel, RecordLevel

    clip = settings.clip
    if adjacency == "client":
        return ClientLevel(clip=clip).sensitivity, f"derived: 2 x clip {clip:g}, each client's data term clipped"
    if adjacency != "record":
        raise ValueError(f"trace.settings.adjacency must be 'record', 'client' or '' (not private); got {adjacency!r}")
    return RecordLevel(clip=clip).sensitivity, f"derived: 2 x clip {clip:g}, every per-example gradient clipped"


def trace_privacy(trace: Any, *, delta: float, sensitivity: float | None = None, delta0: float | None = None,
                  delta1: float | None = None, delta2: float | None = None, chains: int | None = None,
                  discretization: float | None = None, step_size_ratio: float = 1.05) -> PrivacyReport:
    """Report the (epsilon, delta) an FA-LD run spent, under the tight accountant and the paper's bound.

    Parameters
    ----------
    trace : the :class:`~fedlangevin.Trace` of a run (with its ``problem``).
    delta : the delta at which epsilon is reported, in (0, 1).
    sensitivity : only for a run without ``privacy=``: Delta_l of Assumption G.1, which such a run
        cannot know (a bound on ||grad l(theta; x) - grad l(theta; x')||), reported as assumed,
        not enforced. A private run derives it (2C) and refuses one given here.
    delta0, delta1, delta2 : the paper's deltas; by default split so that the paper's delta equals
        ``delta`` (:func:`~fedlangevin.privacy.paper_delta_split`, exact for scheme II).
    chains : how many of the sampler's chains are released (default: all it ever ran, chains
        dropped after a divergence included).
    discretization, step_size_ratio : see :func:`~fedlangevin.privacy.tight_epsilon`.

    Minibatches are assumed to be drawn without replacement (Assumption G.2), as a private run
    draws them; a run without ``privacy=`` draws with replacement, and its minibatch runs are
    refused. A client-level run (``privacy=ClientLevel(clip=C)``) is accounted by
    :func:`~fedlangevin.privacy.client_account` (no minibatch amplification, the worst client the
    one with the largest weight) and has no paper bound (``report.paper`` is None).
    """
    problem = getattr(trace, "problem", None)
    if problem is None:
        raise ValueError("trace.privacy needs the trace's problem (client weights); this trace has none")
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    settings = trace.settings
    sensitivity, enforced = _sensitivity(settings, sensitivity)
    if getattr(settings, "scheme", None) not in ("full", "I", "II"):
        raise ValueError("trace.settings must be the run's Settings record (with its participation scheme); "
                         f"got {type(settings).__name__}")
    family = getattr(settings, "sampler", "FA-LD")
    hmc = family == "FA-HMC"
    if hmc:
        _check_hmc(settings)
    elif family != "FA-LD":
        raise ValueError(f"trace.privacy accounts FA-LD's Langevin noise (Thm 6.1/G.3) and private FA-HMC's momentum "
                         f"noise; this trace is of the sampler {family!r}, whose mechanism it does not know, so no "
                         "epsilon is reported")
    releases = getattr(settings, "correction_releases", "")
    if releases:
        raise ValueError(
            f"trace.privacy: the run used the drift correction {settings.correction}, which also releases {releases}, "
            "outside the Langevin noise; no sound accounting of that release exists here (a noiseless data-dependent "
            "release can have unbounded privacy loss), so no epsilon is reported. Account a run with correction=None (the "
            "default correction='auto' runs control variates under random participation or minibatches in a run "
            "without privacy=; a run with privacy=... runs none)")
    released = max(int(getattr(settings, "chains", trace.num_chains)), int(trace.num_chains))
    r = check_int("chains", released if chains is None else chains, 1, released)
    k = int(settings.local_steps)
    tau, rho = float(settings.temperature), float(settings.correlation)
    etas = np.asarray(trace.step_sizes, dtype=np.float64)
    if etas.size == 0:
        raise ValueError("this trace has no local steps to account for")
    t = int(etas.size)
    bias = getattr(trace, "local_step_bias", None)
    # the sampler's whole life is accounted, so companions that ran in any of its runs count
    if bias is not None and bias.rounds > 0 and (not bias.auto or bias.companions):
        raise ValueError(
            "trace.privacy: the measurement of the local-step bias ran companion chains beside the sampler's on the "
            "same data (their iterates released like the sampler's), a second mechanism the accountant does not "
            "cover, and every round the sampler released is accounted; account a sampler built with "
            "check_local_bias=False and a numeric local_steps")
    rounds = getattr(getattr(trace, "communication", None), "rounds", None)
    if isinstance(rounds, int) and rounds * k != t:
        raise ValueError(
            f"trace.privacy: this run's {rounds} rounds took {t} local steps, not {rounds} x K = {rounds * k}: its "
            "warm-up measured the local-step bias with rounds of another K (or local_steps='auto' chose K), and the "
            "accountant takes K steps in every round; account a sampler built with check_local_bias=False and a "
            "numeric local_steps")
    notes: list[str] = []
    etas, t = _whole_life(trace, etas, t, k, rounds, notes)
    step_max = float(etas.max())
    if hmc:  # every OBABO step is FA-LD's Gaussian mechanism at eta_eq(h, gamma) (fedlangevin.privacy.hmc, eq. P3)
        etas = np.atleast_1d(equivalent_step_size(etas, float(settings.friction)))
        notes.append(f"FA-HMC (OBABO, friction gamma = {float(settings.friction):g}): each local step is FA-LD's "
                     "Gaussian mechanism at the equivalent step size eta_eq = h^2 / (2 tanh(gamma h / 2)) "
                     f"(docs/fahmc.md, Private FA-HMC), here eta_eq <= {float(etas.max()):.4g} for h <= "
                     f"{step_max:.4g}; the paper's Thm 6.1/G.3 is FA-LD's and is not reported")
    weights = np.asarray(problem.weights, dtype=np.float64)
    n = weights.size
    scheme, s = _participation(settings, n)
    adjacency = getattr(settings, "adjacency", "")
    client = adjacency == "client"
    private = getattr(settings, "privacy", "none") != "none"
    norm = float(getattr(settings, "preconditioner_norm", 1.0))
    if norm != 1.0:
        sensitivity = sensitivity * math.sqrt(norm)
        notes.append(f"preconditioned run: the sensitivity in z is sqrt(lambda_max(M)) = {math.sqrt(norm):.4g} times "
                     f"the {'derived' if private else 'given'} one")
    if getattr(settings, "auto_step_size", False) or getattr(settings, "adapt", False):
        if private:
            notes.append("adapted run: the step size and M were adapted from the broadcast iterates only "
                         "(post-processing of released values; no noiseless query of the data), at no extra cost")
        else:
            notes.append("adapted run: the step size (step_size='auto') and the start of an adapted M come from "
                         "noiseless client Hessian-vector products, outside the accounted mechanism; the covariance "
                         "windows are post-processing of the broadcasts")

    # batch fraction per client; at client level the whole client changes: no amplification (gamma = 1)
    b = settings.batch_size
    sizes = getattr(problem, "client_sizes", None)
    if b is None:
        gammas = np.ones(n)
        sampling = "full batches (every row of every client in every local step)"
    else:
        sizes = np.asarray(sizes, dtype=np.float64)
        gammas = np.ones(n) if client else np.minimum(1.0, float(b) / sizes)
        sampling = (f"fixed-size minibatches of b = {b} rows drawn uniformly without replacement in every local step, "
                    "as the run drew them (Assumption G.2)")
        if client:
            sampling += "; no amplification at client level (every row of the client may change: gamma = 1)"
        else:
            sampling += f", gamma = b / n_c <= {float(gammas.max()):.4g}"
            notes.append("minibatches of fixed size drawn uniformly without replacement in every step (Assumption "
                         "G.2), as the private run drew them")
    gamma = float(gammas.max())
    p_min, p_max = float(weights.min()), float(weights.max())
    # the private noise's variance is 2 eta tau (1 - rho^2) / q_c: q = p (eq. 10), or the calibrated rule's
    noise_w = _noise_weights(settings, weights)
    calibrated = noise_w is not weights
    if calibrated:
        notes.append("calibrated participation noise (private variance 2 eta tau (1 - rho^2) / q_c, q_c = E[w_c^2] / "
                     "p_c): the noise multipliers use q_c in place of p_c; the paper's Thm 6.1/G.3 assumes eq. 10's "
                     "noise and is not reported")
    inclusion = None
    if scheme == "I" and not np.allclose(weights, 1.0 / n, rtol=1e-9, atol=0):
        inclusion = -math.expm1(s * math.log1p(-p_max)) if p_max < 1 else 1.0
        notes.append("scheme I draws clients with probabilities p_c: the tight accountant uses the largest inclusion "
                     "probability 1 - (1 - max p_c)^S; the paper's formula (eq. 64) assumes uniform draws")
    sampling += "; clients: " + _clients_sampled(settings.scheme, s, n)

    eta_arg: Any = float(etas[0]) if np.all(etas == etas[0]) else etas
    if client:
        if any(d is not None for d in (delta0, delta1, delta2)):
            raise ValueError("delta0, delta1, delta2 are the paper's deltas, and the paper's theorem is record-level: "
                             "a client-level run has no paper bound; give delta only")
        # z_c = sqrt(2 tau (1 - rho^2) / (p_c eta)) / (2C): least noise at the largest p_c, which for scheme I
        # is also the client most often drawn, so the worst client is one client (not a mix of two)
        if not np.allclose(weights, weights[0], rtol=1e-9, atol=0):
            notes.append(f"unequal clients: the worst client is the one with the largest weight p_max = {p_max:.4g} "
                         "(the least private noise; for scheme I also the largest inclusion probability)")
        # client level z_c^2 is proportional to 1 / q_c (q = p for eq. 10's noise): least noise at the largest q_c
        args = (eta_arg, tau, rho, sensitivity, float(noise_w.max()), n, s, k, t, scheme, inclusion, step_size_ratio)
        up, down = _clip_named(settings if private else None, client_levels, args)
        notes.append("client level: each local step is a Gaussian mechanism of noise multiplier "
                     "z = sqrt(2 tau (1 - rho^2) / (p_max eta)) / (2C) (fedlangevin.privacy.client_account); the "
                     "paper's Thm 6.1/G.3 is record-level and is not reported")
    else:
        # z_c^2 is proportional to gamma_c^2 p_c^2 / q_c (gamma_c^2 p_c for eq. 10's q = p): the tight accountant
        # takes the smallest over clients
        p_eff = float((gammas**2 * weights**2 / noise_w).min() / gamma**2) if calibrated else \
            float((gammas**2 * weights).min() / gamma**2)
        if not np.allclose(weights, weights[0], rtol=1e-9, atol=0) or not np.allclose(gammas, gammas[0], rtol=1e-9,
                                                                                         atol=0):
            notes.append("unequal clients: the tight accountant uses the smallest noise multiplier and the largest "
                         "batch fraction over clients (conservative)")
        args = (eta_arg, tau, rho, gamma, sensitivity, p_eff, n, s, k, t, scheme, inclusion, step_size_ratio)
        up, down = _clip_named(settings if private else None, record_levels, args)
    tight = _account_levels(up.scaled(r), down.scaled(r), delta, discretization)
    epsilon = tight.epsilon
    spent = tuple(getattr(settings, "privacy_spent", ()) or ())
    if spent:  # a budgeted run: its start released rounds before the sampling; every release composed
        from fedlangevin.privacy.planning import Release, compose_epsilon

        before = [Release.from_record(x) for x in spent]
        epsilon = compose_epsilon(before + [up.scaled(r)], delta)
        notes.append("everything released: " + ", ".join(
            f"the {b.name} ({b.rounds} rounds of noise multiplier {b.noise_multiplier:.4g}, every client, full batch: "
            "the private MAP search and the private clip's quantile)" for b in before)
            + f" composed with the sampling: epsilon = {epsilon:.4g} (the sampling alone: {tight.epsilon:.4g}; the "
            "RDP and lower-bound numbers are the sampling's)")

    eta_max = float(etas.max())
    if not isinstance(eta_arg, float):
        paper_eta = f"largest {eta_max:.4g}" if client else f"the paper's bound uses the largest, {eta_max:.4g}"
        notes.append(f"varying step sizes: {paper_eta}; the tight accountant groups rounds on a grid of ratio "
                     f"{step_size_ratio:g} (rounded up)")
    common = dict(tau=tau, rho=rho, sensitivity=sensitivity, num_clients=n, num_sampled=s, local_steps=k,
                  scheme=scheme)
    paper = None if client or calibrated or hmc else _paper(common, gammas, weights, gamma, p_min, eta_max, r * t, delta,
                                       (delta0, delta1, delta2))
    if r > 1:
        notes.append(f"{r} chains released: composed as {r} runs on the same data")
    if released > trace.num_chains:
        notes.append(f"{released - trace.num_chains} chain(s) dropped after a divergence are counted: they released "
                     "rounds before they were dropped (composed over every step, conservative)")
    participation = (f"full participation of N = {n}" if settings.scheme == "full"
                     else f"scheme {scheme} with S = {s} of N = {n}")
    deltas = {name: None if paper is None else paper.inputs[name] for name in ("delta0", "delta1", "delta2")}
    mechanism = dict(common, sensitivity_basis=enforced, participation=participation, calibrated=calibrated,
                     gamma=gamma, p_min=p_min,
                     p_max=p_max, eta_max=eta_max, iterations=t, chains=r, adjacency=adjacency, clip=settings.clip,
                     batch_size=b, dim=int(settings.dim), sampling=sampling, sampler=family,
                     step_size_max=step_max, friction=None if not hmc else float(settings.friction), spent=spent,
                     **deltas)
    return PrivacyReport(delta=delta, epsilon=epsilon, tight=tight, paper=paper, chains=r,
                         mechanism=mechanism, notes=tuple(notes))


def _check_hmc(settings: Any) -> None:
    """An FA-HMC trace is accounted only where its mechanism is the one derived (fedlangevin.privacy.hmc):
    a private run (its clip enforces the sensitivity) of the OBABO splitting at a recorded friction."""
    if not getattr(settings, "adjacency", ""):
        raise ValueError("trace.privacy: this FA-HMC run clipped nothing (it was built without privacy=); only a "
                         "private FA-HMC run (privacy=RecordLevel(clip=C), splitting='OBABO') is accounted")
    if getattr(settings, "splitting", "") != "OBABO" or getattr(settings, "friction", None) is None:
        raise ValueError(f"trace.privacy: this FA-HMC trace records splitting {getattr(settings, 'splitting', '')!r} "
                         f"and friction {getattr(settings, 'friction', None)!r}; its mechanism is derived for OBABO at "
                         "a recorded friction (docs/fahmc.md, Private FA-HMC), so no epsilon is reported")


def _whole_life(trace: Any, etas: np.ndarray, t: int, k: int, rounds: Any, notes: list) -> tuple[Any, int]:
    """(step sizes, local steps) of every round the trace's sampler released in its life: the run's
    own ``etas``, after the rounds the ledger counts before it (earlier calls, the runs of the
    checkpoints it was resumed from), each of those at the largest step size the sampler ran. A
    ``ValueError`` when the ledger contradicts the trace, or its earlier rounds ran another K."""
    ledger = getattr(trace, "ledger", None) or {}
    if "steps" not in ledger or "rounds" not in ledger or not isinstance(rounds, int):
        return etas, t
    total, total_rounds, top = int(ledger["steps"]), int(ledger["rounds"]), float(ledger.get("eta_max", 0.0))
    earlier, earlier_rounds = total - t, total_rounds - rounds
    if earlier < 0 or earlier_rounds < 0 or (earlier > 0 and not (math.isfinite(top) and top >= float(etas.max()))):
        raise ValueError(f"trace.privacy: the trace's ledger ({total} local steps, {total_rounds} rounds, largest step "
                         f"size {top:g}) contradicts its own run ({t} local steps, {rounds} rounds); no epsilon is "
                         "reported for a record that does not hold what the sampler released")
    if earlier == 0:
        return etas, t
    if earlier != earlier_rounds * k:
        raise ValueError(
            f"trace.privacy: the sampler's earlier {earlier_rounds} rounds took {earlier} local steps, not "
            f"{earlier_rounds} x K = {earlier_rounds * k} (a warm-up that measured the local-step bias with rounds "
            "of another K, or local_steps='auto' choosing K), and every round the sampler released is accounted, "
            "with K steps in each; account a sampler built with check_local_bias=False and a numeric local_steps")
    notes.append(f"every round the sampler released is counted: {earlier_rounds} earlier rounds (earlier runs, or "
                 f"those of the checkpoint it resumed) and this run's {rounds}")
    if np.all(etas == top):
        return etas[:1].copy(), total  # one constant step size over the whole life
    notes.append(f"the {earlier_rounds} earlier rounds are accounted at the largest step size the sampler ran, "
                 f"{top:.4g} (an upper bound on what they spent)")
    return np.concatenate([np.full(earlier, top), etas]), total


def _noise_weights(settings: Any, weights: np.ndarray) -> np.ndarray:
    """q (N,) of the run's private noise variance 2 eta tau (1 - rho^2) / q_c: ``weights`` itself (eq. 10:
    full participation, ``noise="paper"`` and records written before the setting) or the calibrated
    rule's E[w_c^2] / p_c (:meth:`fedlangevin.federation.participation.Participation.noise_weights`)."""
    if getattr(settings, "participation_noise", "paper") != "calibrated" or settings.scheme == "full":
        return weights
    import torch

    from fedlangevin.federation.participation import SchemeI, SchemeII

    s = int(settings.num_sampled)
    # scheme II: the plain mean's weights where the run allowed unbalanced clients (every record written before
    # the nearly balanced weights existed ran unequal weights only so), else the weights it drew (SchemeII)
    plain = "allow_unbalanced=True" in str(getattr(settings, "participation", ""))
    rule = SchemeI(s) if settings.scheme == "I" else SchemeII(s, allow_unbalanced=plain)
    return rule.noise_weights(torch.from_numpy(np.asarray(weights, dtype=np.float64))).numpy()


def _clip_named(settings: Any, levels: Any, args: tuple) -> tuple:
    """The "up" and "down" levels of ``levels(*args, direction)``; for a private run (``settings``), a noise
    multiplier outside the accountant's range is refused naming the run's ``clip`` (which sets the
    sensitivity, 2C: a private run refuses to be given one), with the advice in its terms."""
    try:
        return levels(*args, "up"), levels(*args, "down")
    except NoiseOutOfRange as exc:
        if settings is None:
            raise
        clip = float(settings.clip)
        text = str(exc).replace("a larger sensitivity", "a larger clip").replace("a smaller sensitivity", "a smaller clip")
        raise NoiseOutOfRange(f"clip: the run's clip C = {clip:g} ({settings.privacy}) sets the sensitivity 2C = "
                              f"{2 * clip:g}; {text}", exc.side) from None


def _clients_sampled(scheme: str, s: int, n: int) -> str:
    """Who uploads in a round, as the participation rule draws it (fedlangevin.federation.participation)."""
    if scheme == "full":
        return f"all N = {n} every round"
    if scheme == "II":
        return f"S = {s} of N = {n} drawn uniformly without replacement, every round and chain (scheme II)"
    return f"S = {s} draws with replacement with probabilities p_c, every round and chain (scheme I)"


def _paper(common: dict, gammas: np.ndarray, weights: np.ndarray, gamma: float, p_min: float, eta_max: float,
           iterations: int, delta: float, deltas: tuple) -> PaperBound:
    """The paper's bound (Thm 6.1/G.3) at the largest step size, with condition (59) client by client."""
    if None in deltas:
        if not all(d is None for d in deltas):
            raise ValueError("give all of delta0, delta1, delta2 or none of them")
        deltas = paper_delta_split(delta, gamma=gamma, num_clients=common["num_clients"],
                                   num_sampled=common["num_sampled"], local_steps=common["local_steps"],
                                   iterations=iterations, scheme=common["scheme"])
    delta0, delta1, delta2 = deltas
    paper = paper_bound(eta=eta_max, gamma=gamma, p_min=p_min, iterations=iterations, delta0=delta0, delta1=delta1,
                        delta2=delta2, **common)
    # condition (59) client by client: eta <= tau (1 - rho^2) gamma_c^2 p_c / (Delta^2 log(1.25 / delta0))
    tau, rho, sensitivity = common["tau"], common["rho"], common["sensitivity"]
    limit = tau * (1 - rho * rho) * float((gammas**2 * weights).min()) / (sensitivity**2 * math.log(1.25 / delta0))
    if limit < paper.eta_max:
        paper = replace(paper, eta_max=limit)
        if eta_max > limit * (1 + 1e-12) and paper.within_theorem:
            paper = replace(paper, within_theorem=False, epsilon=math.inf, delta=1.0)
    return paper
