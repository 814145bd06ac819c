"""Independent reference for the convergence summary, and the fixed input it is checked on.

This module re-implements, from the paper and Stan's reference code, the quantities of
:func:`diagnostics.summary` with plain numpy and the standard library (no ArviZ, no scipy):

- Vehtari, Gelman, Simpson, Carpenter, Bürkner, *Rank-normalization, folding, and
  localization: An improved R-hat for assessing convergence of MCMC*, Bayesian Analysis
  (2021): split chains (first and last halves), rank normalisation with Blom's offset
  z = Phi^{-1}((r - 3/8) / (S + 1/4)), folding |x - median|, split R-hat (BDA3 form)
  and R-hat = max(bulk, folded) (eqs. 4, 9); bulk-ESS of the rank-normalised split chains
  and tail-ESS = min of the ESS of the indicators 1[x <= q_0.05], 1[x <= q_0.95] (Sec. 4.3);
- the ESS estimator of Stan / BDA3 (Geyer's initial positive then initial monotone
  sequence on pairs of autocorrelations, autocovariances from direct sums here instead of
  the FFT ArviZ uses, and Stan's lower bound tau >= 1 / log10(S); when the sequence never
  turns negative, as for chains that disagree, it ends at ArviZ's last lag);
- MCSE of the mean (sd / sqrt(ESS of the split chains)) and ArviZ's delta-method MCSE of
  the sd; quantiles of Hyndman & Fan type 7 written out by hand.

The fixed input (:func:`fixed_input`) is generated from a 64-bit linear congruential
generator and Box-Muller in pure Python, so it is the same on every platform and numpy
version (up to the last bit of libm's log/cos, far below the tolerances used).

``python -m tests.diagnostics._reference`` rewrites ``data/arviz_reference.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np

REFERENCE_JSON = Path(__file__).with_name("data") / "arviz_reference.json"
TAIL_PROB = (0.05, 0.95)
CI_PROB = 0.90
COLUMNS = ("mean", "sd", "eti90_lb", "eti90_ub", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat")


# -- fixed input -------------------------------------------------------------------------------


def _lcg_uniforms(n: int, seed: int) -> list[float]:
    """n uniforms in (0, 1) from Knuth's MMIX LCG (top 53 bits)."""
    a, c, m = 6364136223846793005, 1442695040888963407, 2**64
    state = seed % m
    out = []
    for _ in range(n):
        state = (a * state + c) % m
        out.append(((state >> 11) + 0.5) / 2**53)
    return out


def _normals(n: int, seed: int) -> np.ndarray:
    u = _lcg_uniforms(n + (n % 2), seed)
    z = []
    for i in range(0, len(u), 2):
        r = math.sqrt(-2.0 * math.log(u[i]))
        z.append(r * math.cos(2.0 * math.pi * u[i + 1]))
        z.append(r * math.sin(2.0 * math.pi * u[i + 1]))
    return np.array(z[:n])


def fixed_input(chains: int = 4, draws: int = 200) -> np.ndarray:
    """(chains, draws, 4) test samples: iid N(0, 1); AR(1) with phi = 0.7; iid N(0, 1) with
    chain 0 shifted by +1 (a non-converged entry); exp of an AR(1) with phi = 0.5 (skewed)."""
    e = _normals(chains * draws * 4, seed=20210101).reshape(4, chains, draws)
    x = np.empty((chains, draws, 4))
    x[:, :, 0] = e[0]
    for col, phi in ((1, 0.7), (3, 0.5)):
        ar = np.empty((chains, draws))
        ar[:, 0] = e[col, :, 0]
        for t in range(1, draws):
            ar[:, t] = phi * ar[:, t - 1] + math.sqrt(1.0 - phi * phi) * e[col, :, t]
        x[:, :, col] = ar
    x[:, :, 2] = e[2]
    x[0, :, 2] += 1.0
    x[:, :, 3] = np.exp(x[:, :, 3])
    return x


# -- the reference computation -----------------------------------------------------------------


def _split(x: np.ndarray) -> np.ndarray:
    """(M, N) -> (2M, N // 2): first and last halves of every chain (middle draw dropped if N odd)."""
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half :]], axis=0)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..S of all entries, ties sharing their average rank (folding creates one tie:
    the two middle values are equally far from the median)."""
    flat = values.ravel()
    order = np.argsort(flat, kind="stable")
    srt = flat[order]
    r = np.empty(flat.size)
    i = 0
    while i < flat.size:
        j = i
        while j + 1 < flat.size and srt[j + 1] == srt[i]:
            j += 1
        r[order[i : j + 1]] = 0.5 * (i + j) + 1.0  # average of ranks i+1 .. j+1
        i = j + 1
    return r.reshape(values.shape)


def _rank_normalise(values: np.ndarray) -> np.ndarray:
    s = values.size
    inv = NormalDist().inv_cdf
    p = (_ranks(values) - 0.375) / (s + 0.25)
    return np.vectorize(inv)(p)


def _rhat_basic(x: np.ndarray) -> float:
    m, n = x.shape
    chain_means = x.mean(axis=1)
    w = np.mean([np.sum((x[j] - chain_means[j]) ** 2) / (n - 1) for j in range(m)])
    b_over_n = np.sum((chain_means - chain_means.mean()) ** 2) / (m - 1)
    var_plus = (n - 1) / n * w + b_over_n
    return math.sqrt(var_plus / w)


def _autocov_direct(chain: np.ndarray) -> np.ndarray:
    n = chain.size
    c = chain - chain.mean()
    return np.array([np.dot(c[: n - t], c[t:]) / n for t in range(n)])


def ess_basic(x: np.ndarray) -> tuple[float, float]:
    """ESS of (M, N) chains (Stan's estimator) and the smallest |pair sum| met while deciding
    where Geyer's sequence stops (how far from a tie the discrete decision was)."""
    m, n = x.shape
    acov = np.array([_autocov_direct(x[j]) for j in range(m)])  # (M, N)
    w = acov[:, 0].mean() * n / (n - 1)
    var_plus = w * (n - 1) / n
    if m > 1:
        means = x.mean(axis=1)
        var_plus += np.sum((means - means.mean()) ** 2) / (m - 1)
    rho = 1.0 - (w - acov.mean(axis=0)) / var_plus  # rho[0] = 1 by construction
    rho[0] = 1.0
    # Geyer's initial positive sequence on pairs P_k = rho_2k + rho_2k+1: pair 0 is always
    # kept; pairs k = 1, 2, ... are kept while positive. Two ways to stop:
    #  (a) pair K <= 0: use pairs 0..K-1, plus rho_2K if it is positive (Stan's refinement);
    #  (b) no lags left (2k - 1 >= n - 3, ArviZ's bound; happens for chains that disagree,
    #      where rho_t stays near B / var_plus > 0): use pairs 0..k-2 and the even term of
    #      the last pair, rho_2(k-1), as ArviZ and Stan do.
    pairs = [rho[0] + rho[1]]
    margin = math.inf
    k = 1
    while True:
        if 2 * k - 1 >= n - 3:
            extra = rho[2 * (k - 1)]
            pairs = pairs[:-1]
            break
        p_k = rho[2 * k] + rho[2 * k + 1]
        margin = min(margin, abs(p_k))
        if p_k <= 0:
            extra = max(rho[2 * k], 0.0)
            break
        pairs.append(p_k)
        k += 1
    # initial monotone sequence: P_k <- min(P_k, P_{k-1})
    for i in range(1, len(pairs)):
        pairs[i] = min(pairs[i], pairs[i - 1])
    tau = -1.0 + 2.0 * sum(pairs) + extra
    total = m * n
    tau = max(tau, 1.0 / math.log10(total))
    return total / tau, margin


def _quantile7(sorted_values: np.ndarray, p: float) -> float:
    h = (sorted_values.size - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, sorted_values.size - 1)
    return float(sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo]))


def reference_summary(x: np.ndarray) -> tuple[dict[str, list[float]], float]:
    """Summary columns (COLUMNS) for every entry of x (chains, draws, d), plus the smallest
    Geyer-decision margin over all ESS computations."""
    out: dict[str, list[float]] = {c: [] for c in COLUMNS}
    margin = math.inf
    for j in range(x.shape[2]):
        v = x[:, :, j]
        flat = v.ravel()
        srt = np.sort(flat)
        mean = flat.mean()
        sd = math.sqrt(np.sum((flat - mean) ** 2) / (flat.size - 1))
        lo_q = (1.0 - CI_PROB) / 2.0
        split = _split(v)
        ess_mean, m1 = ess_basic(split)
        sq = (v - mean) ** 2
        ess_sq, m2 = ess_basic(_split(sq))
        evar = sq.mean()
        varvar = ((sq**2).mean() - evar**2) / ess_sq
        mcse_sd = math.sqrt(varvar / evar / 4.0)
        ess_bulk, m3 = ess_basic(_rank_normalise(split))
        tails = []
        for p in TAIL_PROB:
            q = _quantile7(srt, p)
            e, mq = ess_basic(_split((v <= q).astype(float)))
            tails.append(e)
            margin = min(margin, mq)
        bulk_r = _rhat_basic(_rank_normalise(split))
        folded = np.abs(split - np.median(split))
        tail_r = _rhat_basic(_rank_normalise(folded))
        margin = min(margin, m1, m2, m3)
        row = {
            "mean": mean,
            "sd": sd,
            "eti90_lb": _quantile7(srt, lo_q),
            "eti90_ub": _quantile7(srt, 1.0 - lo_q),
            "mcse_mean": sd / math.sqrt(ess_mean),
            "mcse_sd": mcse_sd,
            "ess_bulk": ess_bulk,
            "ess_tail": min(tails),
            "r_hat": max(bulk_r, tail_r),
        }
        for c in COLUMNS:
            out[c].append(float(row[c]))
    return out, margin


def write_reference(path: Path = REFERENCE_JSON) -> dict:
    x = fixed_input()
    values, margin = reference_summary(x)
    doc = {
        "about": "Summary of tests/diagnostics/_reference.fixed_input() computed by "
        "tests/diagnostics/_reference.reference_summary (independent numpy implementation "
        "of Vehtari et al. 2021; tail ESS at the 5% and 95% quantiles, 90% equal-tailed "
        "interval). Regenerate with: python -m tests.diagnostics._reference",
        "shape": list(x.shape),
        "labels": [f"theta[{i}]" for i in range(x.shape[2])],
        "tail_prob": list(TAIL_PROB),
        "ci_prob": CI_PROB,
        "geyer_margin": margin,
        "checksum_sum": float(x.sum()),
        "values": values,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


if __name__ == "__main__":  # pragma: no cover
    d = write_reference()
    print(json.dumps(d["values"], indent=1))
    print("geyer margin", d["geyer_margin"])
