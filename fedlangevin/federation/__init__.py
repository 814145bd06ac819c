"""The kernel core: FA-LD's local step (eq. 10) and round (Alg. 1/4), noise, participation schemes, step-size schedules,
the pure kernel ``build -> (init, step)`` and the built-in extensions (preconditioners, transports). Imports only
:mod:`fedlangevin.federation.contracts` from the rest of fald: nothing of the runner, the warm-up or io."""
