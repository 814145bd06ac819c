"""Argument checks shared by every public constructor and ``run``.

Each check raises ``ValueError`` naming the argument and the allowed range, so that bad
input fails before any work starts.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (bool excluded) within [minimum, maximum]; 0-d arrays/tensors count as numbers."""
    value = _scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}; got {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}; got {value}")
    return value


def check_real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite real number in the interval given by low/high (closed unless *_open)."""
    value = _scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number{_interval(low, high, low_open, high_open)}; got {value!r}")
    value = float(value)
    ok = math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        raise ValueError(f"{name} must be a finite real number{_interval(low, high, low_open, high_open)}; got {value!r}")
    return value


def _scalar(value: Any) -> Any:
    """The Python number inside a 0-d numpy array or torch tensor (other values unchanged)."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item") and not isinstance(value, numbers.Number):
        dtype = str(getattr(value, "dtype", ""))
        if "bool" not in dtype:
            return value.item()
    return value


def _range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return ""
    if high is None:
        return f" {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f" {'<' if high_open else '<='} {high:g}"
    return f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


# -- the sweep: every public argument of the FA-LD runner, checked in one place ---------------
# Type checks shared by the runner's constructor, run() and resume(); each returns the
# normalised value. Lazy imports keep this module importable from everywhere (it has no
# fedlangevin imports at module level).


def check_bool(name: str, value: Any) -> bool:
    """True or False (numpy bools too); anything else is a ValueError."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise ValueError(f"{name} must be True or False; got {value!r}")


def check_optional_bool(name: str, value: Any) -> bool | None:
    return None if value is None else check_bool(name, value)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
    return value


def check_path(name: str, value: Any) -> "os.PathLike":
    """A file-system path given as str or os.PathLike (not empty)."""
    import os

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
    elif dev.type not in ("cpu", "mps"):
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
    try:
        x = torch.as_tensor(init, dtype=dtype).to(device)
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
    """A non-empty 1-d sequence of step sizes, each finite and > 0, as a tuple of floats."""
    import numpy as np

    try:
        array = np.asarray(_as_array(values), dtype=np.float64)
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
    return list(value)


def check_target(target: Any, problem: Any, temperature: float, dim: int):
    """``target`` for streaming W2: None, 'posterior' (the problem's exact one) or (mean, cov)."""
    import numpy as np

    if target is None:
        return None
    if isinstance(target, str):
        if target != "posterior":
            raise ValueError(f"target must be 'posterior' or a (mean, cov) pair; got {target!r}")
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
    import os

    import torch

    dev = torch.device(device)
    total = None
    if dev.type == "cpu":
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, OSError, ValueError):
            total = None
    elif dev.type == "cuda":
        total = torch.cuda.get_device_properties(dev).total_memory
    if total is not None and nbytes > total:
        raise ValueError(
            f"{name}: {what} needs {nbytes / 2**30:.3g} GiB, more than the {total / 2**30:.3g} GiB of {dev}; {advice}"
        )


def check_memory_draws(draws: int, chains: int, dim: int, dtype, device) -> None:
    """Draws kept in memory must fit in the device's memory (a ValueError naming ``rounds``)."""
    import torch

    check_fits(
        "rounds", draws * chains * dim * torch.empty(0, dtype=dtype).element_size(), device,
        f"keeping {draws} draws of {chains} chains x d = {dim} in memory",
        "give store=path (draws on disk), a larger thin, or keep_samples=False (with stats=True for running moments)",
    )


def check_tensor(name: str, value: Any, dtype=None):
    """``torch.as_tensor(value)`` as a float64 CPU tensor (or ``dtype``), with a ValueError naming
    the argument when the value is not an array of numbers."""
    import torch

    try:
        return torch.as_tensor(value, dtype=torch.float64 if dtype is None else dtype).detach().cpu()
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name} must be an array of numbers; got {type(value).__name__} ({exc})") from None
