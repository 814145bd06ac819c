"""Argument checks shared by every public constructor and ``run``.

Each check raises ``ValueError`` naming the argument and the allowed range, so that bad
input fails before any work starts. The scalar checks (:func:`check_int`, :func:`check_real`,
:func:`check_bool`, :func:`refuse_complex`) live in ``diagnostics._validation`` (numpy only) so
that both packages accept and refuse the same values: numpy scalars and 0-d arrays or tensors
count as the number they hold; bools, strings (numeric ones too), NaN, infinities and integers
beyond the float range are refused. Every public numeric argument goes through them (no
``isinstance(value, (int, float))`` checks by hand); arrays of numbers go through
:func:`refuse_non_real` (the same rules entry by entry) in :func:`check_tensor`,
:func:`check_step_sizes` and :func:`check_init`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from diagnostics._validation import (  # noqa: F401  (one scalar check for both packages)
    check_bool,
    check_int,
    check_real,
    gib,
    refuse_complex,
    scalar,
    scalar as _scalar,
)
from diagnostics._validation import memory_bytes as cpu_memory_bytes


# -- the sweep: every public argument of the FA-LD runner, checked in one place ---------------
# Type checks shared by the runner's constructor, run() and resume(); each returns the
# normalised value. Lazy imports keep this module importable from everywhere (it has no
# fedlangevin imports at module level).


def refuse_non_real(name: str, value: Any) -> None:
    """A ValueError naming ``name`` when ``value`` (a scalar, an array, a tensor or a nested
    sequence of them) holds anything but real numbers: complex numbers (:func:`refuse_complex`),
    bools (``True`` is not the number 1 here: numpy and torch would convert it silently) or
    strings (``"1e-3"`` is not a number either: numpy would parse it). The same values that
    :func:`check_real` refuses one at a time, for arrays."""
    refuse_complex(name, value)
    found = _non_real(value)
    if found:
        raise ValueError(f"{name} must hold real numbers; got {found}")


def _non_real(value: Any, depth: int = 0) -> str | None:
    """What in ``value`` is not a real number ('bools', 'strings', 'objects'), or None."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "shape"):
        if str(dtype) == "torch.bool" or getattr(dtype, "kind", "") == "b":
            return "bools"
        kind = getattr(dtype, "kind", "")
        if kind in ("U", "S"):
            return "strings"
        if kind == "O":  # an object array: look at its entries
            return next((f for f in (_non_real(v, depth + 1) for v in value.ravel().tolist()) if f), None)
        return None
    if isinstance(value, bool):
        return "bools"
    if isinstance(value, (str, bytes)):
        return "strings"
    if isinstance(value, (list, tuple)) and depth < 64:
        for v in value:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                continue  # the common case, without a call per entry
            found = _non_real(v, depth + 1)
            if found:
                return found
    return None


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` with the numpy scalars, 0-d arrays and 0-d tensors inside lists and tuples
    replaced by the Python numbers they hold (torch cannot convert a list of 0-d numpy arrays)."""
    if isinstance(value, (list, tuple)) and depth < 64:
        if all(isinstance(v, (int, float)) for v in value):
            return value
        return [_plain(v, depth + 1) if isinstance(v, (list, tuple)) else _scalar(v) for v in value]
    return value


def check_optional_bool(name: str, value: Any) -> bool | None:
    return None if value is None else check_bool(name, value)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
    return value


def check_path(name: str, value: Any) -> "os.PathLike":
    """A file-system path given as str or os.PathLike (not empty)."""
    if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{name} must be a file-system path (str or os.PathLike); got {value!r}")
    path = Path(value)
    return path


_DTYPE_NAMES = {"float32": "float32", "float": "float32", "float64": "float64", "double": "float64"}


def check_dtype(name: str, value: Any):
    """torch.float32 or torch.float64 (or their names)."""
    import torch

    if isinstance(value, str):
        if value not in _DTYPE_NAMES:
            raise ValueError(f"{name} must be torch.float32 or torch.float64 (or 'float32'/'float64'); got {value!r}")
        return getattr(torch, _DTYPE_NAMES[value])
    if value not in (torch.float32, torch.float64):
        raise ValueError(f"{name} must be torch.float32 or torch.float64; got {value!r}")
    return value


def check_device(name: str, value: Any):
    """A torch device that exists on this machine (``None`` = CPU)."""
    import torch

    try:
        dev = torch.device("cpu" if value is None else value)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a torch device such as 'cpu' or 'cuda'; got {value!r}") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}='cuda' was requested but CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{name}: CUDA device {dev.index} does not exist (this machine has {torch.cuda.device_count()})")
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"{name}='mps' was requested but MPS (Apple GPU) is not available on this machine")
    elif dev.type != "cpu":
        raise ValueError(f"{name} must be 'cpu' or 'cuda' (or 'mps'); got {value!r}")
    return dev


def check_seed(name: str, value: Any) -> int:
    """A seed for torch.Generator.manual_seed: an integer in [0, 2**64 - 1]."""
    return check_int(name, value, 0, 2**64 - 1)


def check_init(init: Any, chains: int, dim: int, dtype, device):
    """The initial global parameter: None (zeros), shape (d,) or (chains, d), finite."""
    import torch

    if init is None:
        return torch.zeros(chains, dim, device=device, dtype=dtype)
    refuse_non_real("init", init)
    if getattr(init, "requires_grad", False):
        init = init.detach()  # the sampler's state is plain data: no autograd graph reaches it
    try:
        x = torch.as_tensor(_plain(init), dtype=dtype).to(device)
    except OverflowError:  # an integer beyond the float range
        raise ValueError("init must be finite; got an integer beyond the float range") from None
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"init must be an array of numbers of shape (d,) or (chains, d); got {type(init).__name__}") from exc
    if x.shape == (dim,):
        x = x.expand(chains, dim)
    if x.shape != (chains, dim):
        raise ValueError(f"init must have shape (d,) = ({dim},) or (chains, d) = ({chains}, {dim}); got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError("init must be finite")
    return x.clone()


def check_step_sizes(name: str, values: Any) -> tuple[float, ...]:
    """A non-empty 1-d sequence of step sizes, each finite and > 0, as a tuple of floats: the
    values :func:`check_real` accepts (numpy scalars and 0-d tensors too), not bools, strings or
    integers beyond the float range."""
    import numpy as np

    refuse_non_real(name, values)
    try:
        array = np.asarray(_as_array(values), dtype=np.float64)
    except OverflowError:  # an integer beyond the float range
        raise ValueError(f"{name} must be a sequence of finite real numbers > 0; got an integer beyond the "
                         "float range") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of real numbers > 0; got {type(values).__name__} ({exc})") from None
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a number or a non-empty 1-d sequence of step sizes; got shape {array.shape}")
    bad = np.flatnonzero(~(np.isfinite(array) & (array > 0)))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"{name} at step {k} must be finite and > 0; got {array[k]!r}")
    return tuple(float(v) for v in array)


def check_names(name: str, value: Any, count: int) -> list[str] | None:
    """None, or a sequence of ``count`` strings (e.g. parameter names)."""
    if value is None:
        return None
    if isinstance(value, str) or not hasattr(value, "__len__") or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a sequence of {count} strings; got {value!r}")
    if len(value) != count:
        raise ValueError(f"{name} must have {count} names; got {len(value)}")
    if len(set(value)) != len(value):
        repeated = sorted({v for v in value if list(value).count(v) > 1})
        raise ValueError(f"{name} must be unique (they label the columns of the samples); repeated: {repeated}")
    return list(value)


def check_target(target: Any, problem: Any, temperature: float, dim: int, private: bool = False):
    """``target`` for streaming W2: None, 'posterior' (the problem's exact one) or (mean, cov).
    ``private``: the run is private (``privacy=``), which refuses 'posterior' (computed from the
    data without noise, it would be released through the W2 values of ``trace.stats``)."""
    import numpy as np

    if target is None:
        return None
    if isinstance(target, str):
        if target != "posterior":
            raise ValueError(f"target must be 'posterior' or a (mean, cov) pair; got {target!r}")
        if private:
            raise ValueError("target='posterior' computes the exact posterior of the data without noise, outside "
                             "the private mechanism (the W2 to it in trace.stats would release it); a private run "
                             "refuses it: give target=(mean, cov) of your own, or no target")
        post = problem.posterior(temperature)
        if post is None:
            raise ValueError("target='posterior' needs a problem with an exact posterior; pass target=(mean, cov)")
        mean, cov = (t.double().cpu().numpy() for t in post)
        return mean, cov
    if not isinstance(target, (tuple, list)) or len(target) != 2:
        raise ValueError(f"target must be 'posterior' or a (mean, cov) pair; got {type(target).__name__}")
    try:
        mean = np.asarray(_as_array(target[0]), dtype=np.float64)
        cov = np.asarray(_as_array(target[1]), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError("target must be a (mean, cov) pair of numeric arrays") from exc
    if mean.shape != (dim,) or cov.shape != (dim, dim):
        raise ValueError(f"target must be (mean of shape ({dim},), cov of shape ({dim}, {dim})); got {mean.shape} and {cov.shape}")
    if not (np.isfinite(mean).all() and np.isfinite(cov).all()):
        raise ValueError("target mean and cov must be finite")
    scale = max(float(np.abs(cov).max()), 1.0)
    if not np.allclose(cov, cov.T, rtol=1e-10, atol=1e-12 * scale):
        raise ValueError("target cov must be symmetric")
    if float(np.linalg.eigvalsh(0.5 * (cov + cov.T)).min()) < -1e-10 * scale:
        raise ValueError("target cov must be positive semi-definite")
    return mean, cov


def _as_array(x: Any):
    if hasattr(x, "detach"):
        return x.detach().cpu().double().numpy()
    return x


def check_checkpoint_path(checkpoint: Any, store: Any = None):
    """A checkpoint file path in an existing directory, different from the store's path."""
    checkpoint = check_path("checkpoint", checkpoint)
    if checkpoint.is_dir():
        raise ValueError(f"checkpoint must be a file path; {str(checkpoint)!r} is a directory")
    parent = checkpoint.parent
    if not parent.is_dir():
        raise ValueError(f"checkpoint: the directory {str(parent)!r} does not exist")
    if store is not None and checkpoint.resolve() == Path(store).resolve():
        raise ValueError("checkpoint and store must be different paths")
    return checkpoint


def check_fits(name: str, nbytes: int, device, what: str, advice: str) -> None:
    """``nbytes`` of ``what`` must fit in the total memory of ``device`` (a ValueError naming
    ``name``, with ``advice``); devices whose size is unknown are not checked."""
    import torch

    dev = torch.device(device)
    total = memory_bytes(dev)
    if total is not None and nbytes > total:
        raise ValueError(f"{name}: {what} needs {gib(nbytes)}, more than the {gib(total)} of {dev}; {advice}")



def memory_bytes(device: Any = "cpu") -> int | None:
    """Total memory of ``device`` in bytes (CPU: physical memory), or None when unknown."""
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return cpu_memory_bytes()
    if dev.type == "cuda":
        return torch.cuda.get_device_properties(dev).total_memory
    return None


#: host memory per local step of a round: its step size as a Python float in a list (32 bytes)
#: and as a float64 entry of the stepper's tensor (8 bytes)
BYTES_PER_LOCAL_STEP = 40


def check_local_steps(value: Any) -> int:
    """K >= 1 local steps per round. A round holds its K step sizes in memory, so K must fit in
    this machine's memory (a ValueError naming ``local_steps`` otherwise); a K that fits but
    takes long is the user's compute (a run stops cleanly on Ctrl-C, see ``FALD.run``)."""
    k = check_int("local_steps", value, 1)
    check_fits("local_steps", BYTES_PER_LOCAL_STEP * k, "cpu", f"one round of {k} local steps (its step sizes)",
               "use fewer local steps per round (and more rounds)")
    return k


def check_memory_draws(draws: int, chains: int, dim: int, dtype, device) -> None:
    """Draws kept in memory must fit in the device's memory (a ValueError naming ``rounds``)."""
    import torch

    check_fits(
        "rounds", draws * chains * dim * torch.empty(0, dtype=dtype).element_size(), device,
        f"keeping {draws} draws of {chains} chains x d = {dim} in memory",
        "give store=path (draws on disk), a larger thin, or keep_samples=False (with stats=True for running moments)",
    )


def check_index_parts(name: str, parts: Any, size: int) -> list:
    """A sequence of 1-d integer index tensors (or arrays/lists), each entry in [0, size): the
    per-client parts of a data set of ``size`` points, as int64 CPU tensors."""
    import torch

    if isinstance(parts, (str, bytes)) or not hasattr(parts, "__len__") or hasattr(parts, "shape"):
        raise ValueError(f"{name} must be a sequence of 1-d index tensors, one per client; got {type(parts).__name__}")
    out = []
    for c, part in enumerate(parts):
        refuse_complex(f"{name}[{c}]", part)
        try:
            idx = torch.as_tensor(part).detach().cpu()
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{name}[{c}] must be a 1-d tensor of integer indices; got {type(part).__name__}") from None
        if idx.dim() == 1 and idx.numel() == 0 and idx.dtype != torch.bool:
            idx = idx.long()  # an empty list is an empty part (torch makes it float32)
        if idx.dim() != 1 or idx.is_floating_point() or idx.dtype == torch.bool:
            raise ValueError(f"{name}[{c}] must be a 1-d tensor of integer indices; got dtype {idx.dtype}, "
                             f"shape {tuple(idx.shape)}")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= size):
            raise ValueError(f"{name}[{c}] must hold indices in [0, {size - 1}] (the data have {size} rows); "
                             f"got values in [{int(idx.min())}, {int(idx.max())}]")
        out.append(idx.long())
    return out


def check_tensor(name: str, value: Any, dtype=None, *, keep_dtype: bool = False):
    """``torch.as_tensor(value)`` as a float64 CPU tensor (or ``dtype``; with ``keep_dtype`` the
    value's own dtype), with a ValueError naming the argument when the value is not an array of
    real numbers (None, strings, ragged lists, complex values, integers beyond the float range;
    bools too, unless ``keep_dtype``: converted to numbers they would be 0 and 1 silently)."""
    import torch

    if keep_dtype:
        refuse_complex(name, value)
    else:
        refuse_non_real(name, value)
    if value is None or isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be an array of numbers; got {type(value).__name__}")
    try:
        if keep_dtype:
            return torch.as_tensor(_plain(value)).detach().cpu()
        return torch.as_tensor(_plain(value), dtype=torch.float64 if dtype is None else dtype).detach().cpu()
    except OverflowError:
        raise ValueError(f"{name} must be an array of finite numbers; got an integer beyond the float range") from None
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name} must be an array of numbers; got {type(value).__name__} ({exc})") from None
