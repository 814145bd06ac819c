"""FA-HMC: federated averaging of underdamped Langevin dynamics (Liang et al., arXiv 2407.06935),
a second sampler family on the shared runner (``docs/fahmc.md``).

- :mod:`fedlangevin.fahmc.kernel`: the pure kernel ``build(problem, ...) -> (init, step)`` over
  :class:`FAHMCState` (theta, momentum), with the splitting's equations;
- :mod:`fedlangevin.fahmc.exact`: exact moments and stationary law of (theta, v) on quadratic
  problems (numpy);
- :mod:`fedlangevin.fahmc.warmup`: the warm-up that adapts the preconditioner, the step size and
  the friction (``step_size="auto"``), as ``(init, update, final)`` returning values;
- :mod:`fedlangevin.fahmc.client`: one client's round from the broadcast (theta, v) on its own
  streams, what a Flower node runs (``fedlangevin.flower``, ``FlowerRun(sampler="fahmc")``), declared
  to transports by :mod:`fedlangevin.fahmc.node` (``NODE``, ``FAHMC.node``);
- :mod:`fedlangevin.fahmc.local_bias`: the check of a fixed K > 1 against K = 1 companion chains
  (``check_local_bias``), with FA-LD's estimator;
- :mod:`fedlangevin.fahmc.gradient_noise`: the force's measured noise under random participation or
  minibatches taken out of the momentum refresh (``gradient_noise="auto"``, SGHMC's B-hat), and
  :mod:`fedlangevin.fahmc.setting_noise`, the end-of-run check of what is left;
- :mod:`fedlangevin.fahmc.sampler`: :class:`FAHMC`, the user-facing runner (checkpoints, resume,
  draws, divergence handling through :class:`fedlangevin.runner.base.Runner`).
"""

from fedlangevin.fahmc.kernel import FAHMCKernel, FAHMCState, build
from fedlangevin.fahmc.sampler import FAHMC

__all__ = ["FAHMC", "FAHMCKernel", "FAHMCState", "build"]
