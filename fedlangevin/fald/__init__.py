"""FA-LD engine (one subpackage per layer: docs/fald.md, "Architecture"): noise, participation, schedules, the reference local step and the round kernels
(steppers), the pure kernel ``build -> (init, step)`` with its extension points (their contracts
and conformance check: :mod:`fedlangevin.fald.contracts`), the runner
(sampler, split into runs, replay and resume), drift corrections, typed settings, trace; checkpoint, store and
streaming statistics for long runs."""

from fedlangevin.fald.io.checkpoint import CheckpointError, checkpoint_info
from fedlangevin.fald.corrections.conducive import Conducive, Surrogates
from fedlangevin.fald.contracts import Contract, CorrectionSettings, check_conforms, conformance
from fedlangevin.fald.corrections.control_variates import ControlVariates
from fedlangevin.fald.corrections.qlsd import QLSDPlusPlus
from fedlangevin.fald.core.engine import Kernel, RoundInfo, build, client_round
from fedlangevin.fald.core.extensions import (
    DriftCorrection,
    FactorPreconditioner,
    IdentityPreconditioner,
    InProcessGroup,
    LocalTransport,
    Preconditioner,
    Transport,
)
from fedlangevin.fald.core.kernel import FALDState, fald_round, local_step
from fedlangevin.fald.core.noise import add_noise_, noise_scales
from fedlangevin.fald.core.participation import Full, Participation, SchemeI, SchemeII, synchronize
from fedlangevin.fald.runner.base import Runner
from fedlangevin.fald.runner.sampler import FALD
from fedlangevin.fald.warmup.acceptance import AutoStep
from fedlangevin.fald.warmup.local_steps import AutoLocalSteps, LocalStepBias
from fedlangevin.fald.core.schedules import Constant, PaperDecay, Polynomial
from fedlangevin.fald.results.settings import Settings
from fedlangevin.fald.io.store import SampleStore, StoreError, open_store
from fedlangevin.fald.results.streaming import RunStatistics
from fedlangevin.fald.results.trace import Communication, DivergenceError, StepSizes, Trace

__all__ = [
    "AutoLocalSteps", "AutoStep", "CheckpointError", "LocalStepBias", "Communication", "Conducive", "Constant", "Contract", "CorrectionSettings", "ControlVariates", "QLSDPlusPlus", "Surrogates", "DivergenceError", "DriftCorrection", "FALD", "FALDState",
    "FactorPreconditioner", "Full", "IdentityPreconditioner", "InProcessGroup", "Kernel", "LocalTransport",
    "PaperDecay", "Participation", "Polynomial", "Preconditioner", "RoundInfo", "RunStatistics", "Runner", "SampleStore",
    "SchemeI", "SchemeII", "Settings", "StepSizes", "StoreError", "Trace", "Transport", "add_noise_", "build",
    "check_conforms", "checkpoint_info", "client_round", "conformance", "fald_round", "local_step", "noise_scales", "open_store", "synchronize",
]
