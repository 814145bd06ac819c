"""FA-LD engine: noise, participation, schedules, kernel (pure functions), runner, trace."""

from fedlangevin.fald.kernel import FALDState, fald_round, local_step
from fedlangevin.fald.noise import add_noise_, noise_scales
from fedlangevin.fald.participation import Full, Participation, SchemeI, SchemeII, synchronize
from fedlangevin.fald.sampler import FALD
from fedlangevin.fald.schedules import Constant, PaperDecay, Polynomial
from fedlangevin.fald.trace import Communication, DivergenceError, Trace

__all__ = [
    "Communication", "Constant", "DivergenceError", "FALD", "FALDState", "Full", "PaperDecay",
    "Participation", "Polynomial", "SchemeI", "SchemeII", "Trace", "add_noise_", "fald_round",
    "local_step", "noise_scales", "synchronize",
]
