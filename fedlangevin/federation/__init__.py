"""What every federated sampler shares inside a round: the extension contracts (``contracts``), noise
scales (``noise``), participation rules (``participation``), step-size schedules (``schedules``),
preconditioners (``preconditioning``), the built-in extensions (``extensions``: preconditioners,
transports), per-client random streams (``streams``), what every kernel's round shares (``rounds``)
and the node-kernel contract of transports with remote clients (``nodes``). Imports no sampler and
nothing of the warm-up, the corrections or the runner."""
