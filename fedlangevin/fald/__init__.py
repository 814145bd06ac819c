"""FA-LD (docs/fald.md, "Architecture"): the reference local step (``local``) and the round kernels
(``steppers``), the pure kernel ``build -> (init, step)`` (``engine``), its per-client-stream form
(``per_client``) and node kernel (``node``), and :class:`FALD` (``sampler``: its configuration,
``config``; its checkpoint entries and resume, ``resume``). The package also re-exports the shared
machinery FA-LD runs on (:mod:`fedlangevin.federation`, :mod:`fedlangevin.warmup`,
:mod:`fedlangevin.corrections`, :mod:`fedlangevin.runner`) under the names it always had."""

from fedlangevin.runner.io.checkpoint import CheckpointError, checkpoint_info
from fedlangevin.corrections.conducive import Conducive, Surrogates
from fedlangevin.federation.contracts import Contract, CorrectionSettings, check_conforms, conformance
from fedlangevin.corrections.control_variates import ControlVariates
from fedlangevin.corrections.qlsd import QLSDPlusPlus
from fedlangevin.fald.engine import Kernel, build, client_round
from fedlangevin.federation.rounds import RoundInfo
from fedlangevin.federation.extensions import (
    DriftCorrection,
    FactorPreconditioner,
    IdentityPreconditioner,
    InProcessGroup,
    LocalTransport,
    Preconditioner,
    Transport,
)
from fedlangevin.fald.kernel import FALDState, fald_round, local_step
from fedlangevin.federation.noise import add_noise_, noise_scales
from fedlangevin.federation.participation import Full, Participation, SchemeI, SchemeII, synchronize
from fedlangevin.runner.base import Runner
from fedlangevin.fald.sampler import FALD
from fedlangevin.warmup.acceptance import AutoStep
from fedlangevin.warmup.local_steps import AutoLocalSteps, LocalStepBias
from fedlangevin.federation.schedules import Constant, PaperDecay, Polynomial
from fedlangevin.runner.results.settings import Settings
from fedlangevin.runner.io.store import SampleStore, StoreError, open_store
from fedlangevin.runner.results.streaming import RunStatistics
from fedlangevin.runner.results.trace import Communication, DivergenceError, StepSizes, Trace

__all__ = [
    "AutoLocalSteps", "AutoStep", "CheckpointError", "LocalStepBias", "Communication", "Conducive", "Constant", "Contract", "CorrectionSettings", "ControlVariates", "QLSDPlusPlus", "Surrogates", "DivergenceError", "DriftCorrection", "FALD", "FALDState",
    "FactorPreconditioner", "Full", "IdentityPreconditioner", "InProcessGroup", "Kernel", "LocalTransport",
    "PaperDecay", "Participation", "Polynomial", "Preconditioner", "RoundInfo", "RunStatistics", "Runner", "SampleStore",
    "SchemeI", "SchemeII", "Settings", "StepSizes", "StoreError", "Trace", "Transport", "add_noise_", "build",
    "check_conforms", "checkpoint_info", "client_round", "conformance", "fald_round", "local_step", "noise_scales", "open_store", "synchronize",
]
