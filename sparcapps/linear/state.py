"""The training state of data-parallel SGD: weights ``scale * v``, intercept, counters, history.

Everything needed to continue a run exactly where it stopped (see :mod:`.checkpoint`): the
per-epoch permutation is derived from ``(seed, epoch)``, so no random-generator state is kept
besides a quantizer's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["TrainState", "RESCALE_BELOW"]

#: ``scale`` is folded into ``v`` when it drops below this (scikit-learn's float64 threshold).
RESCALE_BELOW = 1e-9


@dataclass
class TrainState:
    """Weights ``w = scale * v`` (``v`` float64 of ``n_features``), ``intercept``, and where
    training stands: ``t`` is the number of the next sample (from 1, for the learning rate),
    ``epoch`` counts completed epochs, ``step`` the steps done in the current one.
    ``history`` holds one dict per completed epoch; ``wall_seconds`` the training time of
    earlier sessions (a resumed run continues the clock); ``partial`` this rank's timing totals
    of the epoch in progress. Identical on every rank except ``partial``."""

    v: np.ndarray
    scale: float = 1.0
    intercept: float = 0.0
    t: int = 1
    epoch: int = 0
    step: int = 0
    history: list = field(default_factory=list)
    best_loss: float = float("inf")
    no_improvement: int = 0
    wall_seconds: float = 0.0
    quantizer_state: dict | None = None
    partial: dict = field(default_factory=dict)

    @classmethod
    def zeros(cls, n_features: int) -> "TrainState":
        return cls(v=np.zeros(int(n_features), dtype=np.float64))

    @property
    def n_features(self) -> int:
        return int(self.v.shape[0])

    def coef(self) -> np.ndarray:
        """``scale * v`` as a new float64 array."""
        return np.multiply(self.v, self.scale, dtype=np.float64)

    def decay(self, factor: float) -> None:
        """Multiply the weights by ``factor`` (O(1); folds ``scale`` into ``v`` when tiny)."""
        self.scale *= factor
        if self.scale < RESCALE_BELOW:
            self.v *= self.scale
            self.scale = 1.0

    def squared_norm(self) -> float:
        v = self.v if self.v.dtype == np.float64 else self.v.astype(np.float64)
        return float(self.scale * self.scale * np.dot(v, v))
