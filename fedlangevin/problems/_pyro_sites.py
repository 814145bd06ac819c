"""The Pyro side of :class:`~fedlangevin.problems.PyroProblem`: its model's sites and the
messenger that sets the latent sites from theta.

Every latent site s with support S_s is reached from R^{d_s} by Pyro's own bijection
T_s = ``biject_to(S_s)``; :func:`_messenger_class` builds the messenger that sets each latent
site to T_s(z_s) (no random draws) and records log|det J_s|, and :func:`_site_kind` sorts a
trace's sites into latent, observed, factor, deterministic and subsample sites.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

__all__ = ["LatentSite"]


def _pyro():
    try:
        import pyro  # noqa: F401
    except ImportError as exc:  # pragma: no cover - pyro is in the [pyro] extra
        raise ImportError("PyroProblem needs pyro-ppl: pip install 'fedlangevin[pyro]'") from exc
    return pyro


@dataclass(frozen=True)
class LatentSite:
    """A latent (global) site: constrained shape, unconstrained shape, slice of theta."""

    name: str
    shape: tuple[int, ...]
    unconstrained_shape: tuple[int, ...]
    start: int
    stop: int
    transform: Any  # biject_to(support) at the initial point (used for init and names)
    support: str


def _site_kind(site) -> str:
    """'subsample' | 'latent' | 'deterministic' | 'factor' | 'observed' | 'other'."""
    from pyro.poutine.util import site_is_subsample

    if site["type"] != "sample":
        return "other"
    if site_is_subsample(site):
        return "subsample"
    if not site["is_observed"]:
        return "latent"
    infer = site.get("infer") or {}
    if infer.get("_deterministic"):
        return "deterministic"
    if infer.get("is_auxiliary"):
        return "factor"
    return "observed"


def _is_identity(t) -> bool:
    from torch.distributions import transforms as T

    while isinstance(t, T.IndependentTransform):
        t = t.base_transform
    return isinstance(t, T.ComposeTransform) and not t.parts


def _messenger_class():
    from pyro.poutine.messenger import Messenger
    from pyro.poutine.util import site_is_subsample
    from torch.distributions import biject_to

    class _SetLatents(Messenger):
        """Sets every latent site to T_s(z_s) and records log|det J_s| (no random draws)."""

        def __init__(self, values: Mapping[str, torch.Tensor] | None) -> None:
            super().__init__()
            self.values = values  # None: discovery, every latent at z = 0
            self.log_det: list[torch.Tensor] = []

        def _pyro_sample(self, msg) -> None:
            if msg["is_observed"] or site_is_subsample(msg):
                return
            name = msg["name"]
            if msg["fn"].support.is_discrete:
                raise ValueError(
                    f"latent site {name!r} is discrete (support {msg['fn'].support}); PyroProblem needs continuous "
                    "latent sites (FA-LD is a gradient method): marginalise it out of the model or observe it"
                )
            try:
                t = biject_to(msg["fn"].support)
            except NotImplementedError:
                raise ValueError(
                    f"latent site {name!r} has a support ({msg['fn'].support}) with no registered bijection (biject_to); "
                    "PyroProblem needs continuous latent sites"
                ) from None
            if self.values is None:
                shape = msg["fn"].batch_shape + msg["fn"].event_shape
                z = torch.zeros(t.inverse_shape(shape), dtype=torch.float64)
            elif name in self.values:
                z = self.values[name]
            else:
                raise ValueError(
                    f"the model drew a latent site {name!r} that it did not have when the problem was built; "
                    "PyroProblem needs a model whose latent sites are the same on every call and every client"
                )
            x = t(z)
            self.log_det.append(t.log_abs_det_jacobian(z, x).sum())
            msg["value"] = x

    return _SetLatents
