"""Drift corrections (control variates, conducive gradients, QLSD++ memories), what they share (``base``) and the
mapping of ``FALD(..., correction=...)`` to a settings record (``drift``). Build on the kernel core."""
