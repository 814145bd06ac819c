"""What an FA-HMC checkpoint stores of its settings, read back for :meth:`fedlangevin.FAHMC.resume`: the
noise dtype and the participation rule (one of your own given again and checked by its repr)."""

from __future__ import annotations

from typing import Any

import torch

from fedlangevin._validation import check_dtype
from fedlangevin.federation.participation import Participation, as_participation

__all__ = ["stored_dtype", "stored_rule"]


def stored_dtype(name: str | None) -> torch.dtype | None:
    return None if name is None else check_dtype("noise_dtype", getattr(torch, name.replace("torch.", ""), name))


def stored_rule(stored: Any, given: Participation | None) -> Participation:
    """The checkpoint's participation rule: a built-in one as stored; one of your own (stored as its
    repr) given again and checked by its repr."""
    if not isinstance(stored, str):
        if given is not None and given != stored:
            raise ValueError(f"participation: {given!r} differs from the checkpoint's {stored!r}")
        return stored
    if given is None:
        raise ValueError(f"participation: the checkpoint ran with a rule of your own ({stored}); give it again: "
                         "FAHMC.resume(path, participation=...)")
    rule = as_participation(given)
    if repr(rule) != stored:
        raise ValueError(f"participation: {rule!r} differs from the checkpoint's {stored}")
    return rule
