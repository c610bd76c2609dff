"""The modeled compute of one training step, for simulated ranks (``sparc-linear --simulate``).

A simulated rank runs the real step (its gradient, the real reduction, the update) and its
virtual clock is charged the step's local compute from rates measured once on this machine
(:func:`sparcml.sim.cached_rates`, cached as sparcml.sim's kernel rates): the same run gives
the same modeled time on a quiet and on a loaded machine. The work is exact (the rows' stored
entries, the gradient's support, the summed gradient's entries); only the rates are measured:

- gradient (:meth:`DataParallelSGD.local_gradient`: the rows' loss derivatives, the scatter
  into the scratch, the sparse vector gathered from it): ``grad_entry`` per stored entry of
  the step's rows, ``grad_fixed`` per step (its Python);
- update (:meth:`DataParallelSGD.apply`): ``update_entry`` per entry of a sparse summed
  gradient, ``update_dense`` per coordinate of a dense one, ``update_fixed`` per step;
- one rank (no reduction, :meth:`DataParallelSGD.direct_steps`): ``direct_entry`` per stored
  entry, ``direct_fixed`` per step.

Each is measured on the engine itself (on ``MPI.COMM_SELF``), the slope between two sizes
(the best of 5 thread-CPU timings each).

The rates are measured on a matrix of :data:`CALIBRATION_FEATURES` columns, so that the weights
the rows touch lie past the caches as they do at url scale; a narrower data set runs faster
than charged. ``compute_scale`` (``--compute-scale``) scales them all, or ``--step-seconds``
replaces them by one figure per step (a target machine's measured step time).
"""

from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI
from sparcml import DENSE_BASELINE, SparseVector, sim

from .schedule import Schedule
from .state import TrainState

__all__ = ["StepCost", "step_cost_rates", "fixed_step_seconds", "CALIBRATION_FEATURES",
           "RATES_VERSION"]

# seconds per step given by the user (``--step-seconds``), for the simulated ranks of this
# thread (each rank is a thread: the CLI sets it in the function every rank runs)
_STEP_SECONDS: contextvars.ContextVar = contextvars.ContextVar("linear_step_seconds",
                                                               default=None)


@contextmanager
def fixed_step_seconds(seconds: float | None):
    """Inside: a simulated step is charged ``seconds`` of compute (gradient and update
    together) instead of the calibrated rates; None: the rates."""
    token = _STEP_SECONDS.set(None if seconds is None else float(seconds))
    try:
        yield
    finally:
        _STEP_SECONDS.reset(token)

CALIBRATION_FEATURES = 1 << 22
RATES_VERSION = 1
RATE_NAMES = ("grad_entry", "grad_fixed", "update_entry", "update_dense", "update_fixed",
              "direct_entry", "direct_fixed")
_NNZ_PER_ROW = 100
_ROWS = 8192


def _best(fn, reps: int = 5) -> float:
    fn()  # compiled, caches warm
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time_ns()
        fn()
        best = min(best, (time.thread_time_ns() - t0) * 1e-9)
    return best


def _line(t_small, t_large, w_small, w_large) -> tuple[float, float]:
    """(per unit, fixed) of the line through two timings."""
    per = max(t_large - t_small, 0.0) / max(w_large - w_small, 1)
    return per, max(t_small - per * w_small, 0.0)


def _engine(engine_class, direct: bool):
    import scipy.sparse as sp  # scipy (the [apps] extra): sparc-linear --help imports this module

    rng = np.random.default_rng(0)
    cols = rng.integers(0, CALIBRATION_FEATURES, size=_ROWS * _NNZ_PER_ROW)
    X = sp.csr_matrix((rng.random(cols.size, dtype=np.float32), cols.astype(np.int32),
                       np.arange(0, cols.size + 1, _NNZ_PER_ROW)),
                      shape=(_ROWS, CALIBRATION_FEATURES))
    X.sum_duplicates()
    y = np.where(rng.random(_ROWS) < 0.5, -1.0, 1.0).astype(np.float32)
    engine = engine_class(X, y, MPI.COMM_SELF, loss="log",
                             schedule=Schedule("optimal", alpha=1e-4, eta0=0.0, power_t=0.5),
                             alpha=1e-4, fit_intercept=True, global_batch=256, seed=0,
                             shuffle=True, algorithm=DENSE_BASELINE, direct=direct)
    state = TrainState.zeros(CALIBRATION_FEATURES)
    state.v[:] = rng.standard_normal(CALIBRATION_FEATURES) * 1e-3
    engine.attach(state)
    return engine, state, X


def _measure_general(engine_class) -> dict:
    engine, state, X = _engine(engine_class, direct=False)
    rng = np.random.default_rng(1)
    rows_small, rows_large = rng.permutation(_ROWS)[:16], rng.permutation(_ROWS)[:2048]
    entries = np.diff(X.indptr)
    grad_entry, grad_fixed = _line(
        _best(lambda: engine.local_gradient(state, rows_small)),
        _best(lambda: engine.local_gradient(state, rows_large)),
        int(entries[rows_small].sum()), int(entries[rows_large].sum()))
    dim = engine.dim

    def total(m):
        idx = np.sort(rng.choice(dim - 1, m, replace=False)).astype(np.int32)
        return SparseVector(dim, idx, np.full(m, 1e-9, np.float32), check=False)

    small, large = total(16), total(1 << 18)

    def update(vec):
        def fn():
            saved = (state.scale, state.intercept, state.t)
            engine.apply(state, vec, 1)
            state.scale, state.intercept, state.t = saved
        return fn

    update_entry, update_fixed = _line(_best(update(small)), _best(update(large)), 16, 1 << 18)
    dense = SparseVector.dense(np.full(dim, 1e-9, np.float32))
    update_dense = max(_best(update(dense)) - update_fixed, 0.0) / dim
    return {"grad_entry": grad_entry, "grad_fixed": grad_fixed, "update_entry": update_entry,
            "update_dense": update_dense, "update_fixed": update_fixed}


def _measure_direct(engine_class) -> dict:
    engine, state, X = _engine(engine_class, direct=True)
    rows, bounds = engine.plan.epoch(0)
    entries = np.diff(X.indptr)[rows]
    cum = np.concatenate([[0], np.cumsum(entries)])

    def steps(k1):
        def fn():
            state.step, state.partial = 0, {k: 0 for k in ("loss_sum", "density_sum",
                                                           "local_density_sum", "correct",
                                                           "rows", "steps", "train_seconds",
                                                           "compute_seconds")}
            engine.direct_steps(state, rows, bounds, k1)
        return fn

    few, many = 1, engine.plan.steps_per_epoch
    return dict(zip(("direct_entry", "direct_fixed"),
                    _line(_best(steps(few)), _best(steps(many)), int(cum[bounds[few]]),
                          int(cum[bounds[many]]))))


def step_cost_rates(engine_class) -> dict:
    """This machine's rates (seconds per unit; see the module docstring), measured once (about
    a second) on ``engine_class`` (:class:`~.trainer.DataParallelSGD`, passed in: the engine
    imports this module) and cached."""
    return sim.cached_rates(
        "linear-step", lambda: {**_measure_general(engine_class), **_measure_direct(engine_class)},
        version=RATES_VERSION, names=RATE_NAMES)


class StepCost:
    """The modeled compute of a step's parts (seconds); ``step_seconds``: one figure per step
    instead (split between gradient and update as the rates would), ``None``: the rates."""

    def __init__(self, engine_class, step_seconds: float | None = None):
        self.step_seconds = step_seconds
        self.rates = step_cost_rates(engine_class) if step_seconds is None else None

    @classmethod
    def of(cls, engine_class) -> "StepCost":
        """The cost model of this thread's steps (:func:`fixed_step_seconds` when set)."""
        return cls(engine_class, _STEP_SECONDS.get())

    def gradient(self, entries: int) -> float:
        r = self.rates
        if self.step_seconds is not None:
            return float(self.step_seconds)
        return r["grad_fixed"] + r["grad_entry"] * entries

    def update(self, total) -> float:
        if self.step_seconds is not None:
            return 0.0
        r = self.rates
        if total.is_dense:
            return r["update_fixed"] + r["update_dense"] * total.dim
        return r["update_fixed"] + r["update_entry"] * total.nnz

    def dense_update(self, dim: int) -> float:
        """:meth:`update` of a dense sum of ``dim`` values."""
        if self.step_seconds is not None:
            return 0.0
        return self.rates["update_fixed"] + self.rates["update_dense"] * dim

    def direct(self, steps: int, entries: int) -> float:
        if self.step_seconds is not None:
            return float(self.step_seconds) * steps
        r = self.rates
        return r["direct_fixed"] * steps + r["direct_entry"] * entries
