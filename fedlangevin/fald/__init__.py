"""FA-LD engine: noise, participation, schedules, the reference local step and the round kernels
(steppers), the pure kernel ``build -> (init, step)`` with its extension points (their contracts
and conformance check: :mod:`fedlangevin.fald.contracts`), the runner
(sampler, split into runs, replay and resume), drift corrections, typed settings, trace; checkpoint, store and
streaming statistics for long runs."""

from fedlangevin.fald.checkpoint import CheckpointError, checkpoint_info
from fedlangevin.fald.conducive import Conducive, Surrogates
from fedlangevin.fald.contracts import Contract, CorrectionSettings, check_conforms, conformance
from fedlangevin.fald.control_variates import ControlVariates
from fedlangevin.fald.qlsd import QLSDPlusPlus
from fedlangevin.fald.engine import Kernel, RoundInfo, build, client_round
from fedlangevin.fald.extensions import (
    DriftCorrection,
    FactorPreconditioner,
    IdentityPreconditioner,
    InProcessGroup,
    LocalTransport,
    Preconditioner,
    Transport,
)
from fedlangevin.fald.kernel import FALDState, fald_round, local_step
from fedlangevin.fald.noise import add_noise_, noise_scales
from fedlangevin.fald.participation import Full, Participation, SchemeI, SchemeII, synchronize
from fedlangevin.fald.sampler import FALD
from fedlangevin.fald.schedules import Constant, PaperDecay, Polynomial
from fedlangevin.fald.settings import Settings
from fedlangevin.fald.store import SampleStore, StoreError, open_store
from fedlangevin.fald.streaming import RunStatistics
from fedlangevin.fald.trace import Communication, DivergenceError, StepSizes, Trace

__all__ = [
    "CheckpointError", "Communication", "Conducive", "Constant", "Contract", "CorrectionSettings", "ControlVariates", "QLSDPlusPlus", "Surrogates", "DivergenceError", "DriftCorrection", "FALD", "FALDState",
    "FactorPreconditioner", "Full", "IdentityPreconditioner", "InProcessGroup", "Kernel", "LocalTransport",
    "PaperDecay", "Participation", "Polynomial", "Preconditioner", "RoundInfo", "RunStatistics", "SampleStore",
    "SchemeI", "SchemeII", "Settings", "StepSizes", "StoreError", "Trace", "Transport", "add_noise_", "build",
    "check_conforms", "checkpoint_info", "client_round", "conformance", "fald_round", "local_step", "noise_scales", "open_store", "synchronize",
]
