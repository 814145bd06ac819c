"""Warm-up, for every sampler: finite-difference curvature, step-size and preconditioner adaptation, the
federated mode search (``init="map"``), the local-step checks and ``local_steps="auto"``. Builds on
:mod:`fedlangevin.federation`; knows nothing of the runner and imports no sampler (a sampler hands
its kernel in)."""
