"""A Pyro model plus per-client datasets as a federated problem.

The user writes an ordinary Pyro model ``model(data)``: latent sample sites with priors (the
global parameters theta), observed sites for the data, and ``pyro.plate`` over the data rows.
Client c calls it on its own dataset D_c (n_c rows). With p_c = n_c / n the client energy is
(Deng et al., eq. 7; see :mod:`fedlangevin.problems.base`)

    f^c(z) = (1/p_c) * ell^c(z) + U_0(z),
    ell^c(z) = - sum_{observed sites s} log p(s | T(z); D_c)                 (client NLL)
    U_0(z)   = - sum_{latent sites s} log p_prior(T_s(z_s)) - log |det J_T(z)|   (prior share)

in the unconstrained space: every latent site s with support S_s is reached from R^{d_s} by
Pyro's own bijection T_s = ``biject_to(S_s)`` (``torch.distributions.constraint_registry``:
exp for a positive scale, sigmoid for (0, 1), stick-breaking for a simplex, ...), and its
log-Jacobian enters the energy, so that sum_c p_c f^c is the full negative log posterior of
z and exp(-f) pushed through T is the posterior of the constrained sites.

Gradients come from autograd through Pyro's own trace of the model: a messenger sets each
latent site to T_s(z_s) (computing T_s from the site's current support, so supports that
depend on other latents are handled) and the energy sums the sites' log-densities
(``scale_and_mask`` as Pyro does). The scalar energy of one (chain, client) pair is
vectorised with ``torch.func``: ``vmap`` over clients (their data stacked) and over chains,
so a local step of all R x N pairs is one traced run of the model. Pyro's argument
validation is switched off inside (it branches on data, which vmap cannot trace); the
problem validates the model once, concretely, when it is built.

Where vmap cannot run the model (Python control flow on tensor values, ``.item()``, random
draws inside the model) the problem says so in a warning and falls back to one autograd call
per chain and client: the same numbers, slower (``vectorize=False`` asks for it directly).

Clients of different sizes: rows are padded (with copies of the client's own rows) and the
padding is masked out of the observed sites inside the *data plate* (the ``pyro.plate``
whose size is the number of rows; found automatically or named by ``data_plate=``). A model
without a vectorised data plate falls back to one vectorised call per distinct client size.

Minibatches (``FALD(batch_size=b)``): b rows per client drawn uniformly with replacement,
likelihood scaled by (1/p_c)(n_c/b); unbiased when the rows are conditionally independent
given the latents (what the data plate declares).

Privacy (:meth:`~fedlangevin.problems.FederatedProblem.private_grad`): per-example gradients
are ``torch.func.grad`` of the likelihood of one-row batches, vmapped over rows, clients and
chains; record-level privacy needs the data plate (every observed site inside it: the
likelihood is then a sum over rows). The prior share (latent sites, factors outside the data
plate, log-Jacobians) is public and must not depend on the data; its gradient takes one more
run of the model (on one row of each client).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from fedlangevin.problems._autodiff import AutodiffProblem, ClientData
from fedlangevin.problems._pyro_sites import LatentSite, _is_identity, _messenger_class, _pyro, _site_kind

__all__ = ["PyroProblem"]


class PyroProblem(AutodiffProblem):
    """A federated problem from a Pyro model ``model(data)`` and per-client datasets.

    Parameters
    ----------
    model : a Pyro model called as ``model(data)`` with one client's dataset. Latent sites
        (``pyro.sample`` without ``obs``) are the global parameters, with the same shapes on
        every client; observed sites hold the data, inside ``pyro.plate`` over the rows.
        Do not subsample inside the model (use ``FALD(batch_size=...)``). Extra fixed
        arguments: ``functools.partial(model, ...)``.
    client_data : one dataset per client: a tensor, a tuple/list of tensors or a dict of
        tensors (numpy arrays are accepted), rows on axis 0, passed to ``model`` as given
        (same container type), e.g. ``[(X_1, y_1), (X_2, y_2), ...]``.
    weights : p_c; default n_c / n (n_c = rows of client c). Any positive weights summing
        to 1 keep sum_c p_c f^c equal to the full energy.
    init_values : optional dict of constrained values for some latent sites at the initial
        point (the rest start at z = 0, e.g. a positive scale at 1); see :attr:`initial_params`.
    data_plate : name of the ``pyro.plate`` over the data rows (default: found automatically,
        the plate whose size equals every client's number of rows).
    vectorize : None (vmap, falling back with a warning to a loop if vmap cannot run the
        model), True (vmap or a ValueError), False (the loop: one autograd call per chain
        and client).
    chunk_size : optional ``vmap`` chunk size over chains (bounds memory for many chains
        or big clients).

    Attributes
    ----------
    sites : the latent sites (:class:`LatentSite`) in the order of theta.
    initial_params : theta at the initial point (unconstrained, shape (d,)); pass it as
        ``FALD(..., init=problem.initial_params)``. The log-density and its gradient are
        checked finite there when the problem is built.
    data_plate : the data plate's name, or None.

    ``constrain(samples)`` maps unconstrained draws (..., d) to a dict site -> array
    (..., *site shape) in the constrained space (latent sites, plus ``pyro.deterministic``
    sites whose shape does not depend on the data), which ``trace.to_arviz()`` uses.
    """

    _can_mask = True

    def __init__(
        self,
        model: Callable[[Any], Any],
        client_data: Sequence[Any],
        *,
        weights: Sequence[float] | torch.Tensor | None = None,
        init_values: Mapping[str, Any] | None = None,
        data_plate: str | None = None,
        vectorize: bool | None = None,
        chunk_size: int | None = None,
    ) -> None:
        _pyro()
        if not callable(model):
            raise ValueError(f"model must be a callable Pyro model model(data); got {type(model).__name__}")
        if data_plate is not None and not isinstance(data_plate, str):
            raise ValueError(f"data_plate must be the name (str) of the model's plate over data rows; got {data_plate!r}")
        data = ClientData.from_clients(client_data).to(dtype=torch.float64)
        self.model = model
        self._messenger = _messenger_class()
        traces = [self._concrete_trace(data.client(c), c) for c in range(data.num_clients)]
        self.sites = self._latent_sites(traces)
        dim = self.sites[-1].stop
        self.data_plate = self._find_data_plate(traces, data.sizes.tolist(), data_plate)
        self._prior_factors = self._classify_factors(traces)
        self._deterministic = self._deterministic_sites(traces)
        self._setup(data, dim, weights, vectorize, chunk_size)
        if self.data_plate is None:
            self._can_mask = False
        self.var_names = self._flat_names()
        self.initial_params = self.unconstrain(init_values or {})
        self._probe(self.initial_params)

    # -- building: the model's structure -------------------------------------------------------
    def _concrete_trace(self, data: Any, client: int):
        """The model's trace with every latent site at T_s(0) (no random draws, validation off)."""
        import pyro
        from pyro import poutine

        try:
            with pyro.validation_enabled(False), self._messenger(None):
                return poutine.trace(self.model).get_trace(data)
        except ValueError as exc:
            if "PyroProblem needs" in str(exc):
                raise
            raise ValueError(f"running the model on client {client}'s data failed: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            raise ValueError(f"running the model on client {client}'s data failed: {type(exc).__name__}: {exc}") from exc

    def _latent_sites(self, traces) -> list[LatentSite]:
        from torch.distributions import biject_to

        first = traces[0]
        sites: list[LatentSite] = []
        start = 0
        for name, site in first.nodes.items():
            if _site_kind(site) != "latent":
                continue
            support = site["fn"].support
            t = biject_to(support)
            shape = tuple(site["value"].shape)
            ushape = tuple(t.inverse_shape(shape))
            size = math.prod(ushape)
            sites.append(LatentSite(name, shape, ushape, start, start + size, t, str(support)))
            start += size
        if not sites:
            raise ValueError("the model has no latent sites: there is nothing to sample (every pyro.sample has obs=)")
        if not any(_site_kind(s) in ("observed", "factor") for s in first.nodes.values()):
            raise ValueError("the model has no observed sites: pass the client's data to pyro.sample(..., obs=...)")
        for c, tr in enumerate(traces[1:], start=1):
            other = {n: tuple(s["value"].shape) for n, s in tr.nodes.items() if _site_kind(s) == "latent"}
            mine = {s.name: s.shape for s in sites}
            if other != mine:
                raise ValueError(
                    f"the model's latent sites differ between client 0 ({mine}) and client {c} ({other}); "
                    "global parameters must have the same names and shapes on every client"
                )
        for name, site in first.nodes.items():
            for frame in site.get("cond_indep_stack", ()):
                if frame.full_size is not None and frame.full_size != frame.size:
                    raise ValueError(
                        f"pyro.plate({frame.name!r}) subsamples ({frame.size} of {frame.full_size}) inside the model; "
                        "give the plate the full size and use FALD(batch_size=...) for minibatches"
                    )
        return sites

    @staticmethod
    def _find_data_plate(traces, sizes: list[int], requested: str | None) -> str | None:
        candidates = None
        plates_seen: set[str] = set()
        for tr, n_c in zip(traces, sizes):
            for site in tr.nodes.values():
                if _site_kind(site) != "observed":
                    continue
                frames = [f for f in site["cond_indep_stack"] if f.vectorized]
                plates_seen.update(f.name for f in frames)
                if requested is not None:
                    sizes_of = {f.name: f.size for f in frames}
                    if requested not in sizes_of:
                        raise ValueError(
                            f"data_plate={requested!r}: observed site {site['name']!r} is not inside a vectorised plate of "
                            f"that name (its plates: {sorted(sizes_of) or 'none'})"
                        )
                    if sizes_of[requested] != n_c:
                        raise ValueError(
                            f"data_plate={requested!r} has size {sizes_of[requested]} on a client with {n_c} rows; "
                            "the data plate's size must be the number of rows"
                        )
                    continue
                names = {f.name for f in frames if f.size == n_c}
                candidates = names if candidates is None else candidates & names
        if requested is not None:
            found = requested
        else:
            found = next(iter(candidates)) if candidates is not None and len(candidates) == 1 else None
        if found is not None:
            for tr in traces:
                for name, site in tr.nodes.items():
                    if _site_kind(site) == "latent" and any(f.name == found for f in site["cond_indep_stack"]):
                        raise ValueError(
                            f"latent site {name!r} is inside the data plate {found!r}: a per-row latent variable is not "
                            "a global parameter; marginalise it out of the model"
                        )
        return found

    def _classify_factors(self, traces) -> frozenset[str]:
        """pyro.factor sites outside the data plate act on the parameters only: prior share."""
        if self.data_plate is None:
            return frozenset()
        out = set()
        for tr in traces:
            for name, site in tr.nodes.items():
                if _site_kind(site) == "factor" and not any(f.name == self.data_plate for f in site["cond_indep_stack"]):
                    out.add(name)
        return frozenset(out)

    def _deterministic_sites(self, traces) -> tuple[str, ...]:
        """pyro.deterministic sites present on every client with one shape, outside the data plate."""
        keep = []
        for name, site in traces[0].nodes.items():
            if _site_kind(site) != "deterministic":
                continue
            if self.data_plate is not None and any(f.name == self.data_plate for f in site["cond_indep_stack"]):
                continue
            shape = tuple(site["value"].shape)
            if all(name in tr.nodes and tuple(tr.nodes[name]["value"].shape) == shape for tr in traces):
                keep.append(name)
        return tuple(keep)

    def _flat_names(self) -> list[str]:
        """Names of theta's coordinates: ``beta[0]``, ... (``sigma_unconstrained`` where T_s is not the identity)."""
        names = []
        for s in self.sites:
            base = s.name if _is_identity(s.transform) else f"{s.name}_unconstrained"
            if not s.unconstrained_shape:
                names.append(base)
            else:
                for idx in np.ndindex(*s.unconstrained_shape):
                    names.append(f"{base}[{','.join(map(str, idx))}]")
        return names

    # -- the energy -----------------------------------------------------------------------------
    def _split(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {s.name: theta[s.start : s.stop].reshape(s.unconstrained_shape) for s in self.sites}

    def _run(self, theta: torch.Tensor, data: Any):
        import pyro
        from pyro import poutine

        setter = self._messenger(self._split(theta))
        with pyro.validation_enabled(False), setter:
            tr = poutine.trace(self.model).get_trace(data)
        return tr, setter.log_det

    def _energy(self, theta, data, mask, scale):
        lik, prior = self._terms(theta, data, mask)
        return -(scale * lik + prior)

    def _terms(self, theta, data, mask):
        """(log-likelihood of the data's rows, log prior + log|det J|) at theta, one model run."""
        from pyro.distributions.util import scale_and_mask

        tr, log_det = self._run(theta, data)
        lik = theta.new_zeros(())
        prior = theta.new_zeros(())
        for name, site in tr.nodes.items():
            kind = _site_kind(site)
            if kind in ("other", "subsample", "deterministic"):
                continue
            lp = scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"], site["mask"])
            if not isinstance(lp, torch.Tensor):
                continue
            if kind == "latent" or name in self._prior_factors:
                prior = prior + lp.sum()
                continue
            if mask is not None:
                lp = self._mask_rows(lp, site, mask)
            lik = lik + lp.sum()
        for term in log_det:
            prior = prior + term
        return lik, prior

    # -- the private gradient (FederatedProblem.private_grad) ----------------------------------
    def _nll_sum(self, theta, data, mask):
        return -self._terms(theta, data, mask)[0]

    def _prior_energy(self, theta, data):
        return -self._terms(theta, data, None)[1]

    def _privacy_refusal(self, adjacency):
        if adjacency == "record" and self.data_plate is None:
            return ("has no data plate (no pyro.plate over the rows that every observed site is inside): its "
                    "likelihood is not declared a sum over rows; put the observed sites inside pyro.plate over the "
                    "data rows (or name it with data_plate=), or use fedlangevin.privacy.ClientLevel")
        return super()._privacy_refusal(adjacency)

    def _mask_rows(self, lp: torch.Tensor, site, mask: torch.Tensor) -> torch.Tensor:
        frame = next((f for f in site["cond_indep_stack"] if f.name == self.data_plate), None)
        if frame is None:
            raise ValueError(
                f"observed site {site['name']!r} is outside the data plate {self.data_plate!r}; clients of different "
                "sizes need every observed site inside it (or pass data_plate=None)"
            )
        dim = frame.dim
        if lp.dim() < -dim:
            lp = lp.reshape((1,) * (-dim - lp.dim()) + tuple(lp.shape))
        m = mask.reshape((mask.shape[0],) + (1,) * (-dim - 1))
        return torch.where(m, lp, lp.new_zeros(()))

    # -- constrained space ----------------------------------------------------------------------
    def unconstrain(self, values: Mapping[str, Any]) -> torch.Tensor:
        """theta (d,) float64 from constrained site values (sites not given start at z = 0)."""
        if not isinstance(values, Mapping):
            raise ValueError(f"init_values must be a dict site name -> constrained value; got {type(values).__name__}")
        known = {s.name: s for s in self.sites}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"init_values: unknown latent site(s) {unknown}; the model's latent sites are {sorted(known)}")
        theta = torch.zeros(self.sites[-1].stop, dtype=torch.float64)
        for name, value in values.items():
            s = known[name]
            x = torch.as_tensor(np.asarray(value, dtype=np.float64) if not isinstance(value, torch.Tensor) else value).double()
            try:
                x = x.expand(s.shape)
            except RuntimeError:
                raise ValueError(f"init_values[{name!r}] must have shape {s.shape}; got {tuple(x.shape)}") from None
            z = s.transform.inv(x)
            if not torch.isfinite(z).all():
                raise ValueError(f"init_values[{name!r}] is outside the site's support ({s.support})")
            theta[s.start : s.stop] = z.reshape(-1)
        return theta

    def constrain(self, samples: Any) -> dict[str, np.ndarray]:
        """Unconstrained draws (..., d) -> {site: array (..., *site shape)} in the model's own space.

        Latent sites (through their bijections) and data-independent ``pyro.deterministic``
        sites, computed by running the model at each draw (vectorised) on client 0's data.
        """
        x = torch.as_tensor(np.asarray(samples, dtype=np.float64) if not isinstance(samples, torch.Tensor) else samples)
        x = x.detach().cpu().double()
        if x.shape[-1:] != (self.dim,):
            raise ValueError(f"samples must have shape (..., d) with d = {self.dim}; got {tuple(x.shape)}")
        batch = x.shape[:-1]
        flat = x.reshape(-1, self.dim)
        data = self.data.to(device="cpu", dtype=torch.float64).client(0)
        names = [s.name for s in self.sites] + list(self._deterministic)

        def values(theta):
            tr, _ = self._run(theta, data)
            return {n: tr.nodes[n]["value"] for n in names}

        outs: dict[str, list[torch.Tensor]] = {n: [] for n in names}
        rows = max(1, int(self.client_sizes[0]))
        chunk = max(1, min(flat.shape[0], 2**22 // (rows * max(1, self.dim))))
        with torch.no_grad():
            for i in range(0, flat.shape[0], chunk):
                part = flat[i : i + chunk]
                if self.vectorized:
                    got = torch.func.vmap(values)(part)
                else:
                    each = [values(t) for t in part]
                    got = {n: torch.stack([e[n] for e in each]) for n in names}
                for n in names:
                    outs[n].append(got[n])
        result = {}
        for n in names:
            v = torch.cat(outs[n]) if flat.shape[0] else torch.empty(0)
            result[n] = v.reshape(*batch, *v.shape[1:]).numpy()
        return result

    @property
    def site_shapes(self) -> dict[str, tuple[int, ...]]:
        """Constrained shapes of the latent sites."""
        return {s.name: s.shape for s in self.sites}

    # -- diagnostics -----------------------------------------------------------------------------
    def log_density_terms(self, theta: Any, client: int = 0) -> dict[str, float]:
        """Each site's log-density (summed) at unconstrained theta (d,) on one client, plus
        ``"log|det J|"``; for finding the site behind a NaN."""
        from pyro.distributions.util import scale_and_mask

        t = torch.as_tensor(theta, dtype=torch.float64).reshape(self.dim)
        data = self.data.to(device="cpu", dtype=torch.float64).client(client)
        with torch.no_grad():
            tr, log_det = self._run(t, data)
        out = {}
        for name, site in tr.nodes.items():
            if _site_kind(site) in ("other", "subsample", "deterministic"):
                continue
            lp = scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"], site["mask"])
            out[name] = float(torch.as_tensor(lp).sum())
        out["log|det J|"] = float(sum(float(v) for v in log_det))
        return out

    def _explain_nonfinite(self, theta0, client):
        try:
            terms = self.log_density_terms(theta0, client)
        except Exception as exc:  # pragma: no cover - the vectorised call already ran
            return f"(evaluating the sites failed: {exc})"
        bad = {k: v for k, v in terms.items() if not math.isfinite(v)}
        latents = {}
        values = self.constrain(theta0[None])
        for s in self.sites:
            v = values[s.name][0]
            latents[s.name] = float(v) if v.size == 1 else f"array of shape {v.shape}"
        if bad:
            return (
                f"site log-densities {bad} at the latent values {latents}; give init_values= inside the "
                "support, or check the model's parameters (e.g. a scale that can be negative)"
            )
        return f"every site's log-density is finite at {latents} but the gradient is not; check the model for a singular point there"

    def __repr__(self) -> str:
        sites = ", ".join(f"{s.name}{list(s.shape) if s.shape else ''}" for s in self.sites)
        return (
            f"PyroProblem(model={getattr(self.model, '__name__', type(self.model).__name__)}, "
            f"num_clients={self.num_clients}, n={int(self.client_sizes.sum())}, d={self.dim}, sites=[{sites}])"
        )
