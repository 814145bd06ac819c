"""Scalar argument checks shared by the diagnostics and by fedlangevin (numpy only: no torch).

One real-number check, one integer check and one boolean check, so that every public function
accepts the same values and refuses the same ones, with a ``ValueError`` naming the argument
and the allowed range:

- Python numbers, numpy scalars (``np.float32(0.5)``, ``np.int64(3)``, ``np.bool_(True)``),
  0-d numpy arrays and 0-d tensors of any library (anything with ``ndim == 0`` and ``item()``)
  count as the number they hold;
- bools are not numbers, and numbers are not bools;
- complex numbers are refused (never silently cut to their real part);
- an integer beyond the float range (``10**400``) is out of range, not an ``OverflowError``;
- NaN and infinities are refused by :func:`check_real`.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

__all__ = ["check_bool", "check_fits", "check_int", "check_real", "memory_bytes", "refuse_complex", "scalar"]


def scalar(value: Any) -> Any:
    """The Python number inside a numpy scalar, a 0-d array or a 0-d tensor (other values
    unchanged): ``np.float32(0.5)``, ``np.array(3)``, ``np.bool_(True)`` and a 0-d tensor
    holding 1.0 become ``0.5``, ``3``, ``True`` and ``1.0``."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return value
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        try:
            return value.item()
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (bool excluded) within [minimum, maximum]; integral floats such as 3.0 count."""
    value = scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}; got {_shown(value)}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}; got {_shown(value)}")
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
    """A finite real number in the interval given by low/high (closed unless *_open), as a float."""
    value = scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number{_interval(low, high, low_open, high_open)}; got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer (or Fraction) beyond the float range
        number = math.inf if value > 0 else -math.inf
    ok = math.isfinite(number)
    if ok and low is not None:
        ok = number > low if low_open else number >= low
    if ok and high is not None:
        ok = number < high if high_open else number <= high
    if not ok:
        raise ValueError(
            f"{name} must be a finite real number{_interval(low, high, low_open, high_open)}; got {_shown(value)}"
        )
    return number


def check_bool(name: str, value: Any) -> bool:
    """True or False (numpy bools and 0-d bool arrays too); anything else is a ValueError."""
    value = scalar(value)
    if isinstance(value, bool):
        return value
    raise ValueError(f"{name} must be True or False; got {_shown(value)}")


def refuse_complex(name: str, value: Any) -> None:
    """A ValueError naming ``name`` when ``value`` holds complex numbers: converting it to a real
    dtype would silently drop the imaginary parts. Arrays, tensors, scalars and nested
    sequences are inspected; anything else passes (its conversion reports its own errors)."""
    is_complex = getattr(value, "is_complex", None)
    if callable(is_complex) and hasattr(value, "shape"):  # a tensor
        found = bool(is_complex())
    elif hasattr(value, "dtype") and hasattr(value, "shape"):  # a numpy array or scalar
        found = getattr(value.dtype, "kind", "") == "c"
    elif isinstance(value, complex):
        found = True
    elif isinstance(value, (list, tuple)):
        import numpy as np

        try:
            found = np.asarray(value).dtype.kind == "c"
        except (TypeError, ValueError):
            found = False
    else:
        found = False
    if found:
        raise ValueError(f"{name} must hold real numbers; got complex values")


def memory_bytes() -> int | None:
    """Physical memory of this machine in bytes, or None when the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def check_fits(name: str, nbytes: int, what: str, advice: str, total: int | None = None) -> None:
    """``nbytes`` of ``what`` must fit in ``total`` bytes (default: this machine's memory), else
    a ValueError naming ``name`` with ``advice``, raised before anything is allocated."""
    total = memory_bytes() if total is None else total
    if total is not None and nbytes > total:
        raise ValueError(f"{name}: {what} needs {gib(nbytes)}, more than the {gib(total)} of memory; {advice}")


def gib(nbytes: int) -> str:
    """A byte count in GiB for messages (any integer size, also beyond the float range)."""
    try:
        return f"{nbytes / 2**30:.3g} GiB"
    except OverflowError:
        return f"about 2**{int(nbytes).bit_length() - 30} GiB"


def _shown(value: Any) -> str:
    """``repr(value)`` for messages, shortened for integers of more than 30 digits."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        text = str(int(value))
        return text if len(text) <= 30 else f"{text[:12]}...({len(text)} digits)"
    if isinstance(value, complex):
        return f"{value!r} (a complex number)"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


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
