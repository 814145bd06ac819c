"""fedlangevin: Bayesian federated sampling with Federated Averaging Langevin Dynamics.

>>> import fedlangevin as fl
>>> problem = fl.problems.GaussianSimulation(num_clients=50, alpha=1.0, seed=0)
>>> trace = fl.FALD(problem, step_size=1e-5, local_steps=10, chains=300, seed=0).run(200)
>>> trace.samples.shape
torch.Size([300, 200, 2])
"""

from fedlangevin import privacy, problems
from fedlangevin.fald import (
    FALD,
    CheckpointError,
    Communication,
    Constant,
    DivergenceError,
    Full,
    PaperDecay,
    Polynomial,
    SchemeI,
    SchemeII,
    Trace,
    open_store,
)

__version__ = "0.1.0"

__all__ = [
    "FALD", "Communication", "Constant", "DivergenceError", "Full", "PaperDecay", "Polynomial",
    "SchemeI", "SchemeII", "Trace", "privacy", "problems", "__version__", "CheckpointError", "open_store",
]
