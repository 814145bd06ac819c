"""The runner: :class:`~fedlangevin.FALD` (``sampler``), a run's plan (``runs``), the round loop (``loop``),
checkpoint records and resume (``resume``), divergence replay (``replay``). The only layer that imports all others."""
