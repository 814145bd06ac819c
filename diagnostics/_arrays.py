"""Array conversion shared by the diagnostics modules (numpy only: no torch import)."""

from __future__ import annotations

from typing import Any

import numpy as np

from diagnostics._validation import refuse_complex


def as_numpy(x: Any, name: str, dtype: Any = np.float64) -> np.ndarray:
    """Return ``x`` as a numpy array of ``dtype``.

    Accepts numpy arrays, sequences and anything with a ``.detach().cpu().numpy()`` chain
    (torch tensors on any device) without importing torch. Complex values are a ValueError
    naming ``name`` (numpy would drop their imaginary parts with only a warning).
    """
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    refuse_complex(name, x)
    try:
        arr = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be array-like of numbers; got {type(x).__name__}") from exc
    return arr
