"""Warm-up: finite-difference curvature, step-size and preconditioner adaptation, the federated mode search
(``init="map"``). Builds on the kernel core; knows nothing of the runner."""
