"""Learning-rate schedules of scikit-learn's ``SGDClassifier``, applied per minibatch.

scikit-learn updates once per sample ``t = 1, 2, ...``: the weights decay by
``max(0, 1 - eta_t * alpha)`` and then move by ``-eta_t * dloss_t * x_t``. A minibatch of ``B``
samples starting at sample ``t`` does both at once with the same per-sample rates: the decay is
``prod(max(0, 1 - eta_s * alpha))`` over ``s = t .. t+B-1`` and the summed gradient moves by
the mean rate ``mean(eta_s)``. With ``B == 1`` this is scikit-learn's update exactly.

Schedules (``t`` counts samples from 1):

- ``"optimal"``: ``eta_t = 1 / (alpha * (t0 + t - 1))`` with Bottou's ``t0 = 1 / (typw * alpha)``,
  ``typw = sqrt(1 / sqrt(alpha))`` (for log and hinge loss ``eta_1 = typw``);
- ``"constant"``: ``eta_t = eta0``;
- ``"invscaling"``: ``eta_t = eta0 / t ** power_t``.
"""

from __future__ import annotations

import math

import numpy as np

from sparcapps._lazy import lazy_module

K = lazy_module("sparcapps.linear._kernels")  # Numba: loaded at the first batch, not at --help

__all__ = ["SCHEDULES", "Schedule"]

SCHEDULES = ("optimal", "constant", "invscaling")


class Schedule:
    """Per-sample learning rates and their minibatch aggregates (pure, deterministic).

    Every rank computes the same numbers from the same ``(t, B)``, so the update is identical
    on every rank.
    """

    def __init__(self, kind: str, *, alpha: float, eta0: float, power_t: float):
        if kind not in SCHEDULES:
            raise ValueError(f"learning_rate must be one of {SCHEDULES}, got {kind!r}")
        self.kind = kind
        self.alpha = float(alpha)
        self.eta0 = float(eta0)
        self.power_t = float(power_t)
        self.t0 = 0.0
        if kind == "optimal":
            typw = math.sqrt(1.0 / math.sqrt(self.alpha))
            self.t0 = 1.0 / (typw * self.alpha)

    def etas(self, t: int, count: int) -> np.ndarray:
        """The rates of samples ``t .. t+count-1`` (float64)."""
        s = np.arange(t, t + count, dtype=np.float64)
        if self.kind == "optimal":
            return 1.0 / (self.alpha * (self.t0 + s - 1.0))
        if self.kind == "invscaling":
            return self.eta0 / np.power(s, self.power_t)
        return np.full(count, self.eta0)

    def batch(self, t: int, count: int) -> tuple[float, float]:
        """``(step, decay)`` of a minibatch of ``count >= 1`` samples starting at sample ``t``:
        ``step`` is the mean rate, ``decay`` the product of ``max(0, 1 - eta * alpha)``, both
        accumulated in sample order (a compiled loop: NumPy's per-call overhead was 5% of a
        single-rank epoch at 1024 rows per step)."""
        return K.batch_rates(K.SCHEDULE_CODES[self.kind], int(t), int(count), self.alpha,
                             self.t0, self.eta0, self.power_t)
