"""Drift corrections (control variates, conducive gradients, QLSD++ memories), what they share (``base``) and the
mapping of ``FALD(..., correction=...)`` to a settings record (``drift``). Build on :mod:`fedlangevin.federation`
and :mod:`fedlangevin.warmup`."""
