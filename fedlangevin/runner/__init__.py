"""The one runner every sampler family uses: :class:`~fedlangevin.runner.base.Runner` (any kernel), a run's
plan (``runs``), the round loop (``loop``), checkpoint records and resume (``resume``), divergence replay
(``replay``); its results (``results``) and files (``io``). Imports every shared package and no sampler."""
