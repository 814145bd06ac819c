"""Bridge to ArviZ: samples (chains, draws, d) -> ArviZ data; summary, R-hat, ESS (numpy only).

Works with both ArviZ families:

- **0.x** (``arviz<1``, what pip gives on Python 3.10/3.11): ``az.from_dict(posterior=...)``
  returns an ``InferenceData``;
- **1.x** (``arviz>=1``, Python >= 3.12, built on ``arviz-base``/``arviz-stats``):
  ``az.from_dict({"posterior": ...})`` returns an ``xarray.DataTree``.

:func:`to_arviz` returns the family's native object, so every ArviZ function works on it.
:func:`summary`, :func:`rhat` and :func:`ess` accept either object (or raw samples, or
anything with a ``to_arviz()`` method such as an FA-LD ``Trace``) and give **the same
numbers in both families**, because every convention that differs between the families is
passed explicitly:

- R-hat: rank-normalised split R-hat, the maximum of the bulk and folded (tail) values
  (Vehtari, Gelman, Simpson, Carpenter, Bürkner — *Rank-normalization, folding, and
  localization: An improved R-hat for assessing convergence of MCMC*, Bayesian Analysis
  2021, eqs. 4 and 9): ArviZ ``method="rank"``.
- ESS bulk: ESS of the rank-normalised split chains (same paper, Sec. 4.1).
- ESS tail: min of the ESS of the indicators 1[x <= q_5%] and 1[x <= q_95%] (Sec. 4.3).
  **Convention: the 5% and 95% quantiles** (the paper's choice, and ArviZ 0.x's default).
  ArviZ 1.x's default ``prob`` is its credible-interval mass 0.89, i.e. the 11% and 89%
  quantiles, which gives a different number; we always pass ``prob=(0.05, 0.95)``
  (:data:`TAIL_PROB`), so both families agree.
- Interval: equal-tailed 90% interval by default (the 5% and 95% quantiles, numpy's
  "linear" = Hyndman-Fan type 7, which is what both families use), i.e. the very quantiles
  whose reliability ESS tail measures. ``ci_kind="hdi"`` uses ArviZ's HDI instead.
- sd: ddof = 1 over all chains and draws; MCSE of the mean and of the sd as in ArviZ.

ArviZ is an optional dependency (``pip install fedlangevin[arviz]``); it is imported only
when one of these functions runs.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from diagnostics._arrays import as_numpy
from diagnostics._validation import check_bool, check_int, check_real

__all__ = [
    "MIN_CHAINS",
    "MIN_DRAWS",
    "TAIL_PROB",
    "arviz_family",
    "ess",
    "flatten_posterior",
    "posterior_dataset",
    "rhat",
    "summary",
    "to_arviz",
]

#: quantiles of the tail-ESS (Vehtari et al. 2021, Sec. 4.3), passed explicitly to ArviZ.
TAIL_PROB: tuple[float, float] = (0.05, 0.95)

#: default probability mass of the summary's credible interval (equal-tailed: 5% .. 95%).
CI_PROB = 0.90

#: fewest draws per chain of :func:`rhat`, :func:`ess` and :func:`summary`: the split-chain
#: estimators need 2 draws in each half of a chain; below 4 both ArviZ families (0.x, and
#: arviz-stats under 1.x) return NaN with only a log line, so fewer draws are refused by name.
MIN_DRAWS = 4

#: fewest chains whose R-hat can judge convergence: one chain gives NaN, and with two or three the
#: between-chain variance rests on so few chains that R-hat rarely flags chains stuck in different
#: places (Vehtari et al. 2021 and Stan/NumPyro run 4 by default); :func:`rhat` and :func:`summary`
#: warn below it, naming ``chains``.
MIN_CHAINS = 4

SAMPLE_DIMS = ("chain", "draw")

_NAME_RE = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<idx>[^\[\]]+)\]$")


# ---------------------------------------------------------------------------------------------
# ArviZ import and family


def _arviz():
    try:
        with warnings.catch_warnings():
            # ArviZ 0.x announces its 1.x refactor on import; this bridge already supports 1.x.
            warnings.simplefilter("ignore", FutureWarning)
            import arviz as az
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "this function needs ArviZ: pip install 'fedlangevin[arviz]' (or pip install arviz)"
        ) from exc
    return az


def arviz_family() -> int:
    """Major version of the installed ArviZ: 0 (``InferenceData`` API) or 1 (``DataTree`` API)."""
    version = _arviz().__version__
    major = int(re.match(r"\d+", version).group(0))
    return 0 if major < 1 else 1


# ---------------------------------------------------------------------------------------------
# variable layout


@dataclass(frozen=True)
class _Var:
    name: str
    columns: list[int]  # columns of the (chains, draws, d) array, in C order of ``axes``
    axes: list[list[Any]] | None  # coordinate values per dimension; None: scalar (one column)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axes)


def _coord_value(text: str) -> Any:
    text = text.strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def _grid(base: str, columns: list[int], indices: list[str]) -> _Var:
    """Entries ``base[i]`` or ``base[i, j, ...]`` -> a 1-d or n-d variable.

    Multi-index names form an n-d variable when they are a full grid (every combination of
    the values seen on each axis appears once); otherwise the index strings label a 1-d
    variable as they are."""
    parts = [[_coord_value(p) for p in idx.split(",")] for idx in indices]
    ndim = len(parts[0])
    if ndim > 1 and all(len(p) == ndim for p in parts):
        axes: list[list[Any]] = []
        for k in range(ndim):
            seen: list[Any] = []
            for p in parts:
                if p[k] not in seen:
                    seen.append(p[k])
            axes.append(seen)
        if int(np.prod([len(a) for a in axes])) == len(parts):
            position = {tuple(p): col for p, col in zip(parts, columns)}
            if len(position) == len(parts):
                grid_cols = [position[tuple(axes[k][i] for k, i in enumerate(ix))]
                             for ix in np.ndindex(*[len(a) for a in axes])]
                return _Var(base, grid_cols, axes)
    coords = [_coord_value(i) if "," not in i else i.strip() for i in indices]
    if len(set(coords)) != len(coords):
        raise ValueError(f"var_names gives {base!r} repeated indices {indices}")
    return _Var(base, columns, [coords])


def _parse_layout(d: int, var_names: Any, name: str, vector: bool) -> list[_Var]:
    """How the d columns map onto ArviZ variables (see :func:`to_arviz`)."""
    if var_names is None or isinstance(var_names, str):
        base = name if var_names is None else var_names
        if not base:
            raise ValueError("var_names must be a non-empty string")
        return [_Var(base, list(range(d)), [list(range(d))] if vector else None)]
    try:
        names = list(var_names)
    except TypeError as exc:
        raise ValueError(f"var_names must be None, a string or a sequence of {d} strings") from exc
    if len(names) != d or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"var_names must be a sequence of {d} non-empty strings (one per column); got {names!r}")
    if len(set(names)) != d:
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"var_names must be unique; repeated: {dup}")
    scalars: dict[str, int] = {}
    groups: dict[str, tuple[list[int], list[str]]] = {}
    order: list[str] = []
    for col, n in enumerate(names):
        m = _NAME_RE.match(n)
        base = n if m is None else m.group("base")
        if (m is None and base in groups) or (m is not None and base in scalars):
            raise ValueError(f"var_names uses {base!r} both as a scalar and as a vector (e.g. {base}[0])")
        if m is None:
            scalars[base] = col
            order.append(base)
            continue
        if base not in groups:
            groups[base] = ([], [])
            order.append(base)
        groups[base][0].append(col)
        groups[base][1].append(m.group("idx"))
    return [_Var(b, [scalars[b]], None) if b in scalars else _grid(b, *groups[b]) for b in order]


def to_arviz(
    samples: Any,
    var_names: Any = None,
    *,
    dims: Mapping[str, Sequence[str]] | None = None,
    coords: Mapping[str, Sequence[Any]] | None = None,
    name: str = "theta",
):
    """Samples of shape (chains, draws, d) (numpy or torch) as ArviZ data.

    Returns an ``arviz.InferenceData`` (ArviZ 0.x) or an ``xarray.DataTree`` (ArviZ 1.x)
    with a ``posterior`` group whose sample dimensions are ``chain`` and ``draw``.

    Parameters
    ----------
    samples : array-like (chains, draws, d), or (chains, draws) for a single scalar; finite.
    var_names : how the d columns become ArviZ variables:

        - ``None``: one vector variable ``name`` (default ``"theta"``) with dimension
          ``theta_dim_0`` and coordinates 0..d-1 (summary rows ``theta[0]``, ...);
        - a string: the same with that variable name;
        - a sequence of d strings, one per column: a plain name (``"sigma"``) is a scalar
          variable; names in ArviZ's label form ``"base[i]"`` are gathered into one vector
          variable ``base`` with coordinates i (integers when they all are), so
          ``["theta[0]", "theta[1]"]`` (what FA-LD problems report) round-trips to the
          summary labels ``theta[0]``, ``theta[1]``, and ``["mu[0]", "mu[1]", "sigma"]``
          gives a vector ``mu`` and a scalar ``sigma``; ``"W[i,j]"`` names that cover a
          full grid give a matrix ``W`` (any number of indices), in any column order.

    dims : optional {variable: [dim names]} to rename the dimensions of a vector or array
        variable (default ``<variable>_dim_0``, ``<variable>_dim_1``, ...), as in ArviZ.
    coords : optional {dim name: values} to label that dimension's entries, as in ArviZ.
    name : the variable name used when ``var_names`` is None.
    """
    x = as_numpy(samples, "samples")
    if x.ndim == 2:
        x3, vector = x[:, :, None], False
    elif x.ndim == 3:
        x3, vector = x, True
    else:
        raise ValueError(f"samples must have shape (chains, draws, d) or (chains, draws); got shape {x.shape}")
    chains, draws, d = x3.shape
    if chains < 1 or draws < 1 or d < 1:
        raise ValueError(f"samples must have at least one chain, one draw and one parameter; got shape {x.shape}")
    if not np.all(np.isfinite(x3)):
        bad = np.argwhere(~np.isfinite(x3))[0]
        raise ValueError(
            f"samples must be finite; found NaN/inf (first at chain {bad[0]}, draw {bad[1]}, column {bad[2]}): "
            "drop the diverged draws first"
        )
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string; got {name!r}")
    layout = _parse_layout(d, var_names, name, vector)
    dims = {} if dims is None else dict(dims)
    coords = {} if coords is None else {k: list(v) for k, v in coords.items()}
    known = {v.name for v in layout}
    unknown = sorted(set(dims) - known)
    if unknown:
        raise ValueError(f"dims names unknown variables {unknown}; the variables are {sorted(known)}")
    posterior: dict[str, np.ndarray] = {}
    all_dims: dict[str, list[str]] = {}
    all_coords: dict[str, list[Any]] = {}
    for v in layout:
        if v.axes is None:
            if v.name in dims and list(dims[v.name]):
                raise ValueError(f"dims[{v.name!r}] given but {v.name!r} is a scalar variable")
            posterior[v.name] = np.ascontiguousarray(x3[:, :, v.columns[0]])
            continue
        posterior[v.name] = np.ascontiguousarray(x3[:, :, v.columns]).reshape(chains, draws, *v.shape)
        vdims = list(dims.get(v.name, [f"{v.name}_dim_{k}" for k in range(len(v.shape))]))
        if len(vdims) != len(v.shape):
            raise ValueError(f"dims[{v.name!r}] must name {len(v.shape)} dimension(s); got {vdims}")
        for dim, default in zip(vdims, v.axes):
            values = coords.get(dim, default)
            if len(values) != len(default):
                raise ValueError(f"coords[{dim!r}] must have {len(default)} values; got {len(values)}")
            if dim in all_coords and list(all_coords[dim]) != list(values):
                raise ValueError(f"dimension {dim!r} is shared by variables with different coordinates")
            all_coords[dim] = list(values)
        all_dims[v.name] = vdims
    extra = sorted(set(coords) - set(all_coords))
    if extra:
        raise ValueError(f"coords names unknown dimensions {extra}; the dimensions are {sorted(all_coords)}")
    az = _arviz()
    if arviz_family() == 0:
        return az.from_dict(posterior=posterior, dims=all_dims, coords=all_coords)
    return az.from_dict({"posterior": posterior}, dims=all_dims, coords=all_coords)


# ---------------------------------------------------------------------------------------------
# reading ArviZ data back


def posterior_dataset(data: Any):
    """The ``posterior`` group of ``data`` as an ``xarray.Dataset``.

    ``data`` may be an ``InferenceData`` (ArviZ 0.x), an ``xarray.DataTree`` (ArviZ 1.x), an
    ``xarray.Dataset`` with ``chain`` and ``draw`` dimensions, an object with a
    ``to_arviz()`` method (e.g. an FA-LD ``Trace``), or samples (chains, draws, d) /
    (chains, draws), which go through :func:`to_arviz` with default names.
    """
    import xarray as xr

    if isinstance(data, xr.Dataset):
        ds = data
    elif hasattr(xr, "DataTree") and isinstance(data, xr.DataTree):
        if "posterior" in data.children:
            ds = data["posterior"].to_dataset()
        elif set(SAMPLE_DIMS) <= set(data.dims):
            ds = data.to_dataset()
        else:
            raise ValueError(f"data has no 'posterior' group; its groups are {sorted(data.children)}")
    elif hasattr(data, "to_arviz") and callable(data.to_arviz):
        return posterior_dataset(data.to_arviz())
    elif hasattr(data, "groups") and hasattr(data, "posterior"):  # InferenceData (0.x)
        ds = data.posterior
    elif hasattr(data, "groups") and callable(data.groups):
        raise ValueError(f"data has no 'posterior' group; its groups are {list(data.groups())}")
    else:
        return posterior_dataset(to_arviz(data))
    missing = [dim for dim in SAMPLE_DIMS if dim not in ds.dims]
    if missing:
        raise ValueError(f"the posterior must have dimensions {SAMPLE_DIMS}; missing {missing}")
    if not ds.data_vars:
        raise ValueError("the posterior has no variables")
    return ds


def _labels(da) -> list[str]:
    """ArviZ-style flat labels of a DataArray's non-sample entries, in C order."""
    event_dims = [d for d in da.dims if d not in SAMPLE_DIMS]
    if not event_dims:
        return [str(da.name)]
    values = [list(da.coords[d].values) if d in da.coords else list(range(da.sizes[d])) for d in event_dims]
    grids = np.meshgrid(*[np.arange(len(v)) for v in values], indexing="ij")
    flat = [g.ravel() for g in grids]
    out = []
    for k in range(flat[0].size):
        parts = [_fmt_coord(values[j][flat[j][k]]) for j in range(len(event_dims))]
        out.append(f"{da.name}[{', '.join(parts)}]")
    return out


def _fmt_coord(c: Any) -> str:
    if isinstance(c, np.generic):
        c = c.item()
    return str(c)


def flatten_posterior(data: Any, var_names: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """All posterior entries as one float64 array (chains, draws, k) plus their k labels.

    Labels follow ArviZ (``theta[0]``, ``sigma``); ``var_names`` selects variables or single
    entries by label (see :func:`summary`). Raw numpy samples are not renamed or copied
    through ArviZ: (chains, draws, d) gives labels ``theta[0]``, ... directly.
    """
    if _is_raw(data):
        x = as_numpy(data, "samples")
        if x.ndim == 2:
            x = x[:, :, None]
            labels = ["theta"]
        elif x.ndim == 3:
            labels = [f"theta[{i}]" for i in range(x.shape[2])]
        else:
            raise ValueError(f"samples must have shape (chains, draws, d) or (chains, draws); got shape {x.shape}")
        if x.shape[0] < 1 or x.shape[1] < 1 or x.shape[2] < 1:
            raise ValueError(f"samples must have at least one chain, one draw and one parameter; got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("samples must be finite; found NaN/inf: drop the diverged draws first")
        return _select_columns(x, labels, var_names, variables={"theta": labels})
    ds = posterior_dataset(data)
    arrays, labels, variables = [], [], {}
    for name in ds.data_vars:
        da = ds[name]
        event_dims = [d for d in da.dims if d not in SAMPLE_DIMS]
        da = da.transpose(*SAMPLE_DIMS, *event_dims)
        vals = np.asarray(da.values, dtype=np.float64)
        arrays.append(vals.reshape(vals.shape[0], vals.shape[1], -1))
        lab = _labels(da)
        labels.extend(lab)
        variables[str(name)] = lab
    return _select_columns(np.concatenate(arrays, axis=2), labels, var_names, variables)


def _is_raw(data: Any) -> bool:
    if isinstance(data, np.ndarray) or isinstance(data, (list, tuple)):
        return True
    return hasattr(data, "detach") and hasattr(data, "cpu")  # torch tensor


def _resolve(var_names: Sequence[str] | str | None, labels: list[str], variables: dict[str, list[str]]) -> list[int]:
    if var_names is None:
        return list(range(len(labels)))
    if isinstance(var_names, str):
        var_names = [var_names]
    where = {lab: i for i, lab in enumerate(labels)}
    out: list[int] = []
    for v in var_names:
        if v in variables:
            out.extend(where[lab] for lab in variables[v])
        elif v in where:
            out.append(where[v])
        else:
            raise ValueError(
                f"var_names: {v!r} is neither a variable ({sorted(variables)}) nor an entry label such as {labels[0]!r}"
            )
    if not out:
        raise ValueError("var_names selects nothing")
    return out


def _select_columns(x, labels, var_names, variables):
    idx = _resolve(var_names, labels, variables)
    if idx == list(range(len(labels))):
        return x, labels
    return x[:, :, idx], [labels[i] for i in idx]


# ---------------------------------------------------------------------------------------------
# diagnostics


def _check_draws(x: np.ndarray, what: str) -> None:
    """At least MIN_DRAWS draws per chain in x (chains, draws, k), else a ValueError."""
    if x.shape[1] < MIN_DRAWS:
        raise ValueError(
            f"samples have {x.shape[1]} draws per chain; {what} needs at least {MIN_DRAWS} draws per chain "
            "(split-chain R-hat and ESS use two halves of at least 2 draws each)"
        )


def _warn_few_chains(x: np.ndarray) -> None:
    """A ``UserWarning`` naming ``chains`` when the R-hat of x (chains, draws, k) cannot judge convergence."""
    if x.shape[0] < MIN_CHAINS:
        warnings.warn(
            f"chains: R-hat from {x.shape[0]} chain(s) cannot judge convergence (NaN with one chain; "
            f"{MIN_CHAINS} or more are needed for it to flag chains that disagree): run the sampler with "
            f"chains >= {MIN_CHAINS} (FALD's and FAHMC's default)", UserWarning, stacklevel=3)


def _check_prob_pair(name: str, prob: Any) -> tuple[float, float]:
    try:
        lo, hi = (check_real(name, p) for p in prob)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a pair of probabilities (low, high) with 0 < low < high < 1; got {prob!r}") from exc
    if not (0.0 < lo < hi < 1.0):
        raise ValueError(f"{name} must be a pair of probabilities (low, high) with 0 < low < high < 1; got {prob!r}")
    return lo, hi


def _unit_scale(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x (chains, draws, k) divided per entry by a power of two s_j near max |x_j|, and s (k,).

    Every summary statistic is location-scale equivariant (mean, sd, quantiles, HDI, MCSE scale
    by s; ESS and R-hat are invariant), so computing on x / s and multiplying back gives the
    same numbers without overflow for draws near the float range (the squares of 1e200 are
    inf). Dividing by a power of two is exact: ordinary inputs give the same bits as before.
    """
    top = np.max(np.abs(x), axis=(0, 1)) if x.size else np.ones(x.shape[2])
    _, exponent = np.frexp(np.where(top > 0, top, 1.0))
    scale = np.ldexp(1.0, exponent - 1)
    return x / scale, scale


def _as_dataset(x: np.ndarray):
    """(chains, draws, k) -> an xarray Dataset with one variable ``x`` (dims chain, draw, entry)."""
    import xarray as xr

    return xr.Dataset({"x": (("chain", "draw", "entry"), x)})


def _values(result) -> np.ndarray:
    """The ``x`` variable of an ArviZ diagnostic result (Dataset or DataTree), shape (k,)."""
    import xarray as xr

    if hasattr(xr, "DataTree") and isinstance(result, xr.DataTree):
        result = result.to_dataset()
    return np.asarray(result["x"].transpose("entry").values, dtype=np.float64)


@contextmanager
def _numba_off(az):
    """ArviZ 0.x's ``mcse(method="sd")`` with Numba installed ends in ``float()`` of a one-element
    array, which NumPy >= 2.4 refuses (TypeError: only 0-dimensional arrays can be converted to
    Python scalars); its NumPy branch computes the same square root. So the flag is off for that
    call and restored after it (ArviZ 1.x has no such flag)."""
    numba = getattr(az, "Numba", None)
    flag = getattr(numba, "numba_flag", False)
    if not flag:
        yield
        return
    numba.numba_flag = False
    try:
        yield
    finally:
        numba.numba_flag = flag


def _diagnostic(x: np.ndarray, what: str, prob: tuple[float, float] | None = None) -> np.ndarray:
    """One ArviZ diagnostic of the k entries of x (chains, draws, k), identical in both families."""
    az = _arviz()
    ds = _as_dataset(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ArviZ warns on 1 chain / few draws: NaN says it
        if what == "rhat":
            return _values(az.rhat(ds, method="rank"))
        if what == "ess_bulk":
            return _values(az.ess(ds, method="bulk"))
        if what == "ess_tail":
            return _values(az.ess(ds, method="tail", prob=tuple(prob)))
        if what == "mcse_mean":
            return _values(az.mcse(ds, method="mean"))
        if what == "mcse_sd":
            with _numba_off(az):
                return _values(az.mcse(ds, method="sd"))
        if what == "hdi":
            if arviz_family() == 0:
                res = az.hdi(ds, hdi_prob=prob)
                bound = "hdi"
            else:
                res = az.hdi(ds, prob=prob)
                bound = "ci_bound"
            if hasattr(res, "to_dataset"):
                res = res.to_dataset()
            return np.asarray(res["x"].transpose("entry", bound).values, dtype=np.float64)
    raise AssertionError(what)  # pragma: no cover


def rhat(data: Any, *, var_names: Sequence[str] | str | None = None) -> np.ndarray:
    """Rank-normalised split R-hat (Vehtari et al. 2021: max of bulk and folded), one value
    per posterior entry, shape (k,) in :func:`summary` row order.

    ``data``: samples (chains, draws, d) (numpy or torch), ArviZ data, or a ``Trace``.
    Needs >= :data:`MIN_DRAWS` (4) draws per chain (a ValueError otherwise) and >= 2 chains
    (NaN with one chain); warns (``UserWarning`` naming ``chains``) below :data:`MIN_CHAINS` (4).
    Values above 1.01 signal chains that disagree (Vehtari et al. recommend 1.01 as the threshold).
    """
    x, _ = flatten_posterior(data, var_names)
    _check_draws(x, "rhat")
    _warn_few_chains(x)
    return _diagnostic(_unit_scale(x)[0], "rhat")


def ess(
    data: Any,
    *,
    method: str = "bulk",
    tail_prob: tuple[float, float] = TAIL_PROB,
    var_names: Sequence[str] | str | None = None,
    relative: bool = False,
) -> np.ndarray:
    """Effective sample size per posterior entry, shape (k,) in :func:`summary` row order.

    ``method="bulk"``: ESS of the rank-normalised split chains; ``"tail"``: the smaller ESS
    of the indicators of the ``tail_prob`` quantiles (default 5% and 95%, passed to ArviZ
    explicitly; see the module docstring). ``relative=True`` divides by chains x draws
    (``relative`` must be True or False). Needs >= :data:`MIN_DRAWS` (4) draws per chain (a
    ValueError otherwise); one chain is enough.
    """
    if method not in ("bulk", "tail"):
        raise ValueError(f"method must be 'bulk' or 'tail'; got {method!r}")
    prob = _check_prob_pair("tail_prob", tail_prob)
    relative = check_bool("relative", relative)
    x, _ = flatten_posterior(data, var_names)
    _check_draws(x, "ess")
    out = _diagnostic(_unit_scale(x)[0], "ess_bulk" if method == "bulk" else "ess_tail", prob)
    if relative:
        out = out / (x.shape[0] * x.shape[1])
    return out


def summary(
    data: Any,
    *,
    var_names: Sequence[str] | str | None = None,
    ci_prob: float = CI_PROB,
    ci_kind: str = "eti",
    tail_prob: tuple[float, float] = TAIL_PROB,
    round_to: int | None = None,
):
    """Posterior summary table, the same numbers with ArviZ 0.x and 1.x.

    Columns: ``mean``, ``sd`` (ddof = 1), the interval bounds (``eti90_lb``, ``eti90_ub`` by
    default: the 5% and 95% quantiles; ArviZ 1.x's column names), ``mcse_mean``, ``mcse_sd``, ``ess_bulk``, ``ess_tail`` and ``r_hat``; one row
    per posterior entry, labelled as ArviZ does (``theta[0]``, ...).

    Parameters
    ----------
    data : samples (chains, draws, d) (numpy or torch), ArviZ data (``InferenceData`` or
        ``DataTree``), or anything with ``to_arviz()`` such as an FA-LD ``Trace``.
    var_names : variables (``"theta"``) or single entries (``"theta[3]"``) to report;
        default all, in posterior order.
    ci_prob : mass of the credible interval, in (0, 1); default 0.90.
    ci_kind : ``"eti"`` (equal-tailed: quantiles (1 -/+ ci_prob)/2, numpy "linear") or
        ``"hdi"`` (ArviZ's highest-density interval).
    tail_prob : quantiles of the tail ESS, default (0.05, 0.95).
    round_to : decimals to round to, in [0, 100] (default: no rounding).

    Returns a ``pandas.DataFrame``; ``df.attrs`` records the conventions and ArviZ version.
    Needs >= :data:`MIN_DRAWS` (4) draws per chain (a ValueError otherwise); R-hat is NaN
    with one chain, and fewer than :data:`MIN_CHAINS` (4) chains warn (``UserWarning`` naming
    ``chains``).
    """
    import pandas as pd

    ci_prob = check_real("ci_prob", ci_prob, low=0.0, high=1.0, low_open=True, high_open=True)
    if ci_kind not in ("eti", "hdi"):
        raise ValueError(f"ci_kind must be 'eti' or 'hdi'; got {ci_kind!r}")
    prob = _check_prob_pair("tail_prob", tail_prob)
    if round_to is not None:
        round_to = check_int("round_to", round_to, 0, 100)
    x, labels = flatten_posterior(data, var_names)
    _check_draws(x, "summary")
    _warn_few_chains(x)
    x, scale = _unit_scale(x)  # statistics of x / scale, multiplied back (no overflow near the float range)
    flat = x.reshape(-1, x.shape[2])
    lo_q = (1.0 - float(ci_prob)) / 2.0
    if ci_kind == "eti":
        lo, hi = np.quantile(flat, [lo_q, 1.0 - lo_q], axis=0, method="linear")
    else:
        bounds = _diagnostic(x, "hdi", float(ci_prob))
        lo, hi = bounds[:, 0], bounds[:, 1]
    level = f"{ci_kind}{100 * float(ci_prob):.4g}"
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = flat.std(axis=0, ddof=1) if flat.shape[0] > 1 else np.full(flat.shape[1], np.nan)
    table = {
        "mean": flat.mean(axis=0) * scale,
        "sd": sd * scale,
        f"{level}_lb": lo * scale,
        f"{level}_ub": hi * scale,
        "mcse_mean": _diagnostic(x, "mcse_mean") * scale,
        "mcse_sd": _diagnostic(x, "mcse_sd") * scale,
        "ess_bulk": _diagnostic(x, "ess_bulk"),
        "ess_tail": _diagnostic(x, "ess_tail", prob),
        "r_hat": _diagnostic(x, "rhat"),
    }
    df = pd.DataFrame(table, index=labels)
    if round_to is not None:
        df = df.round(round_to)
    df.attrs.update(
        {
            "chains": int(x.shape[0]),
            "draws": int(x.shape[1]),
            "ci_kind": ci_kind,
            "ci_prob": float(ci_prob),
            "tail_prob": prob,
            "rhat": "rank-normalised split R-hat (max of bulk and folded), Vehtari et al. 2021",
            "arviz": _arviz().__version__,
        }
    )
    return df
