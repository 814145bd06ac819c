"""The settings of an FA-LD sampler as a typed, frozen record.

:class:`Settings` travels with every :class:`~fedlangevin.runner.results.trace.Trace` (``trace.settings``),
every checkpoint and every on-disk store. Readers use its typed fields —
``settings.scheme`` ("full", "I" or "II") and ``settings.num_sampled`` (S; ``None`` for full
participation) for the participation rule, never a string parsed back. It is also a
read-only mapping of its original keys (``settings["temperature"]``, ``dict(settings)``), as
traces always offered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterator

__all__ = ["Settings"]

#: the keys of the mapping view (the settings dictionary of earlier versions, in its order)
MAPPING_KEYS = (
    "local_steps", "temperature", "correlation", "participation", "chains", "num_clients", "dim", "batch_size",
    "step_size", "seed", "device", "dtype", "noise_dtype", "upload",
)


@dataclass(frozen=True)
class Settings(Mapping):
    """What an FA-LD sampler was built with.

    local_steps : K; temperature : tau; correlation : rho; participation : the rule's repr
    (for display); scheme : "full", "I" or "II"; num_sampled : S (``None`` for "full");
    chains : R; num_clients : N; dim : d; batch_size : minibatch size (``None``: full
    gradients); step_size : the schedule's repr; seed; device, dtype, noise_dtype : as
    strings ("cpu", "float64"); upload : "exact" or the codec's repr; streams : the randomness
    layout, "single" or "per_client" (:mod:`fedlangevin.federation.streams`); preconditioner : the
    fixed M's repr ("none" for I; after an adaptive warm-up, the adapted M); adapt : whether
    warm-up adapts M (:mod:`fedlangevin.warmup.adaptation`); auto_step_size : ``step_size="auto"``;
    preconditioner_norm : the largest lambda_max(M) over every M the sampler has run with (1
    without one): gradient sensitivities in z scale by its square root (privacy accounting);
    correction : the drift correction's repr ("none" for FA-LD; :mod:`fedlangevin.corrections.drift`);
    correction_releases : what the correction releases besides FA-LD's uploads ("" when nothing:
    none, or switched off); privacy accounting refuses a run where it is not empty; sampler : the
    sampler family ("FA-LD"; a kernel of your own run by :class:`~fedlangevin.runner.base.Runner`
    gives its ``name``): privacy accounting covers FA-LD and private FA-HMC and refuses any other; privacy : the
    mechanism's repr (``"RecordLevel(clip=1.0)"``), "none" for a run that clips nothing (its
    sensitivity can only be assumed); adjacency : the mechanism's "record" or "client" ("" when
    not private); clip : its C (``None`` when not private) — what the accounting and a resume
    rebuild the mechanism from; auto_local_steps : ``local_steps="auto"`` (``local_steps`` is then
    the K chosen in warm-up, 1 before the choice; the rule and the evidence are in the checkpoint
    and ``trace.local_step_bias``); check_local_bias : a fixed K > 1 is measured against K = 1 in
    warm-up (:mod:`fedlangevin.warmup.local_steps`); participation_noise : the participation
    rule's injected-noise rule, ``"calibrated"`` or ``"paper"`` (:mod:`fedlangevin.federation.participation`;
    ``"paper"``, eq. 10, for full participation and for records written before it was a setting);
    splitting, friction : FA-HMC's local-step splitting ("BAOAB" or "OBABO") and its friction gamma
    (the current one; "" and ``None`` for FA-LD and records written before they were settings): a
    private FA-HMC run is accounted from them (:mod:`fedlangevin.privacy.hmc`).
    privacy_spent : a budgeted private run's releases before sampling (its private start), as
    :class:`fedlangevin.privacy.planning.Release` records, composed by ``trace.privacy``.
    """

    local_steps: int
    temperature: float
    correlation: float
    participation: str
    scheme: str
    num_sampled: int | None
    chains: int
    num_clients: int
    dim: int
    batch_size: int | None
    step_size: str
    seed: int
    device: str
    dtype: str
    noise_dtype: str
    upload: str = "exact"
    streams: str = "single"
    preconditioner: str = "none"
    adapt: bool = False
    auto_step_size: bool = False
    preconditioner_norm: float = 1.0
    correction: str = "none"
    correction_releases: str = ""
    sampler: str = "FA-LD"
    privacy: str = "none"
    adjacency: str = ""
    clip: float | None = None
    auto_local_steps: bool = False
    check_local_bias: bool = False
    participation_noise: str = "paper"
    splitting: str = ""
    friction: float | None = None
    privacy_spent: tuple = ()

    def __getitem__(self, key: str) -> Any:
        if key not in MAPPING_KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(MAPPING_KEYS)

    def __len__(self) -> int:
        return len(MAPPING_KEYS)

    def record(self) -> dict[str, Any]:
        """Every field as plain values (for checkpoints and stores)."""
        return asdict(self)

    @classmethod
    def from_record(cls, values: Mapping[str, Any]) -> "Settings":
        """From :meth:`record`'s dictionary (unknown keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})
