"""What every compressed-communication optimizer runner shares: the method names, the checks
of its clients, model, starting point and test set, the seeded generator, ``evaluate`` and the
``run`` loop that records a :class:`~fedlangevin.compression.models.History`.

A runner (:class:`~fedlangevin.compression.lfl.LFLOptimizer`,
:class:`~fedlangevin.compression.dzofl.DZOFLOptimizer`) subclasses :class:`FederatedOptimizer`,
implements :meth:`~FederatedOptimizer.step` (one round of its pure round function) and
:meth:`~FederatedOptimizer.account` (the bits a round's info reports), and keeps its state,
with the server model ``state.theta``, in ``self.state``.
"""

from __future__ import annotations

from typing import Any

import torch

from fedlangevin._validation import check_int
from fedlangevin.compression.models import FlatModel, History, StackedClients, classification_metrics

__all__ = ["METHODS", "FederatedOptimizer", "check_test"]

#: every named optimizer: the codec pairs of LFL (Sec. 4: ``fedavg`` = ``lossless``, ``lb``,
#: ``lfl``, ``lgm``, ``ltgm``; :data:`fedlangevin.compression.lfl_codecs.CODEC_METHODS`) and DZOFL
METHODS = ("fedavg", "lossless", "lb", "lfl", "lgm", "ltgm", "dzofl")

_METRICS = ("accuracy", "nll", "brier", "ece")


def check_test(test, model: FlatModel, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a test set (X (n, p), y (n,) labels in [0, C)) and move it to the run's device."""
    if not isinstance(test, (tuple, list)) or len(test) != 2:
        raise ValueError("test must be an (X, y) pair")
    X = torch.as_tensor(test[0]).to(device, dtype)
    y = torch.as_tensor(test[1]).to(device, torch.int64)
    if X.dim() != 2 or X.shape[1] != model.num_features or y.shape != (X.shape[0],) or X.shape[0] < 1:
        raise ValueError(
            f"test must be X of shape (n, {model.num_features}) and y of shape (n,); got {tuple(X.shape)}, {tuple(y.shape)}"
        )
    if int(y.min()) < 0 or int(y.max()) >= model.num_classes:
        raise ValueError(f"test labels must lie in [0, {model.num_classes - 1}]")
    return X, y


class FederatedOptimizer:
    """Base of the seeded optimizer runners: checks, generator, starting point, evaluate, run.

    The constructor stacks and checks the clients against the model, seeds one generator
    (``torch.Generator(device).manual_seed(seed)``) and draws the starting point from the
    model with it unless ``theta0`` (shape (d,)) is given; the subclass then builds its
    state from ``self.theta0``.
    """

    #: the method's name in :class:`History`
    method: str = ""

    def __init__(
        self,
        model: FlatModel,
        clients,
        *,
        theta0: torch.Tensor | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.device = torch.device(device)
        self.clients = clients if isinstance(clients, StackedClients) else StackedClients.from_list(
            clients, device=self.device, dtype=dtype
        )
        if self.clients.num_features != model.num_features:
            raise ValueError(
                f"clients have {self.clients.num_features} features; model expects {model.num_features}"
            )
        if self.clients.num_classes_seen > model.num_classes:
            raise ValueError(
                f"clients hold labels up to {self.clients.num_classes_seen - 1}; model has {model.num_classes} classes"
            )
        if theta0 is not None and tuple(theta0.shape) != (model.dim,):
            raise ValueError(f"theta0 must have shape ({model.dim},); got {tuple(theta0.shape)}")
        self.model = model
        self._theta0, self._dtype = theta0, dtype
        self._seed = int(seed)

    def _start(self) -> torch.Tensor:
        """Seed the generator and return the starting point (drawn from the model with it
        unless ``theta0`` was given), on the run's device and dtype. Call once, after the
        subclass's own checks, before building the state."""
        self.generator = torch.Generator(device=self.device).manual_seed(self._seed)
        theta0 = self._theta0
        if theta0 is None:
            theta0 = self.model.init(self.generator, device=self.device, dtype=self._dtype)
        return theta0.to(self.device, self._dtype)

    # -- the subclass's round -------------------------------------------------------------------
    def step(self) -> Any:
        """One round; returns the round's info (what :meth:`account` reads)."""
        raise NotImplementedError

    def account(self, info: Any) -> tuple[float, float, dict[str, float]]:
        """(bits down, bits up, extra per-round statistics for ``History.extra``) of one round."""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------------
    def evaluate(self, X: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Test metrics of the server model theta(t)."""
        with torch.no_grad():
            return classification_metrics(self.model.logits(self.state.theta, X), y)

    def run(
        self,
        rounds: int,
        test: tuple[torch.Tensor, torch.Tensor] | None = None,
        *,
        eval_every: int = 1,
    ) -> History:
        """Run ``rounds`` rounds; record metrics every ``eval_every`` rounds and at the end.

        A round that leaves a non-finite model stops the run (``History.diverged_at``; its
        metrics are NaN)."""
        rounds = check_int("rounds", rounds, minimum=1)
        eval_every = check_int("eval_every", eval_every, minimum=1)
        hist = History(method=self.method)
        if test is not None:
            Xt, yt = check_test(test, self.model, self.device, self.state.theta.dtype)
        down = up = 0.0
        for r in range(1, rounds + 1):
            bits_down, bits_up, extra = self.account(self.step())
            down += bits_down
            up += bits_up
            for key, value in extra.items():
                hist.extra.setdefault(key, []).append(value)
            if not bool(torch.isfinite(self.state.theta).all()):
                hist.diverged_at = r
                metrics = {k: float("nan") for k in _METRICS} if test is not None else {}
                hist.record(r, metrics, down, up)
                break
            if r % eval_every == 0 or r == rounds:
                hist.record(r, self.evaluate(Xt, yt) if test is not None else {}, down, up)
        return hist
