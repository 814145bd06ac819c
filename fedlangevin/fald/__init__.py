"""FA-LD engine: noise, participation, schedules, kernel (pure functions), steppers (round kernels),
runner, trace; checkpoint, store and streaming statistics for long runs."""

from fedlangevin.fald.checkpoint import CheckpointError, checkpoint_info
from fedlangevin.fald.kernel import FALDState, fald_round, local_step
from fedlangevin.fald.noise import add_noise_, noise_scales
from fedlangevin.fald.participation import Full, Participation, SchemeI, SchemeII, synchronize
from fedlangevin.fald.sampler import FALD
from fedlangevin.fald.schedules import Constant, PaperDecay, Polynomial
from fedlangevin.fald.store import SampleStore, StoreError, open_store
from fedlangevin.fald.streaming import RunStatistics
from fedlangevin.fald.trace import Communication, DivergenceError, StepSizes, Trace

__all__ = [
    "CheckpointError", "Communication", "Constant", "DivergenceError", "FALD", "FALDState", "Full",
    "PaperDecay", "Participation", "Polynomial", "RunStatistics", "SampleStore", "SchemeI", "SchemeII",
    "StepSizes", "StoreError", "Trace", "add_noise_", "checkpoint_info", "fald_round", "local_step",
    "noise_scales", "open_store", "synchronize",
]
