"""Data-parallel minibatch SGD over ``sparcml.allreduce`` (the engine under the estimator).

One step, on every rank of ``comm`` (all must call, in the same order):

1. take this rank's rows of the global batch (:class:`~.sampling.BatchPlan`);
2. compute their summed loss gradient -- nonzero only on the columns the rows touch -- as a
   sparse vector of dimension ``n_features + 1`` whose last coordinate is the intercept's
   gradient (:func:`~._kernels.batch_gradient`, :func:`~._kernels.gather_clear`);
3. sum it over the ranks with ``sparcml.allreduce`` (``algorithm="dense"`` is the dense
   baseline: the same code, a dense ``MPI_Allreduce``);
4. apply the same update on every rank: decay the weights by the L2 factor through the scalar
   ``scale`` (nothing dense is touched or sent), then add ``-step / scale`` times the summed
   gradient to ``v`` on its support, and ``-step * g_b * intercept_decay`` to the intercept
   (:data:`INTERCEPT_DECAY` for sparse input, 1 for dense, as scikit-learn).

Every rank computes the same update from the same allreduce result, so the weights are
identical on every rank after every step. On simulated ranks (:mod:`sparcml.sim`, ``sparc-linear
--simulate``) the ranks therefore hold one copy of the weights and of the gradient scratch
(:class:`sparcml.sim.Replicas`): the first rank to reach a step's update applies it for all,
after checking that its summed gradient and scalars are bitwise those of every other rank;
each rank's clock is charged the step's modeled compute (:mod:`.stepcost`) and the recorded
seconds are virtual (:func:`sparcml.sim.clock`).

With one rank (``comm`` of size 1) nothing needs summing, and the engine takes a direct path
(:meth:`DataParallelSGD.direct_steps`, a whole epoch in one compiled call when no ``on_step``
callback watches each step): the margins of the whole minibatch first, at the weights
of its start (:func:`~._kernels.row_margins`), then the same decay and the scaled rows added
into ``v`` one by one (:func:`~._kernels.add_rows`) -- the update of steps 2-4 without building
the sparse gradient, with the same schedule and ``scale``. It differs from the general path only
in float summation order (and in not rounding the gradient to float32). Its records say 0
communication seconds and 0 bytes; the gradient density is computed (the support of the
minibatch's gradient, intercept included, as the general path's sparse vector; the general
path at P = 1 reported 1.0 for ``algorithm="dense"``, whose result is dense).
"""

from __future__ import annotations

import time

import numpy as np

import sparcml
from sparcml import SparseVector, TrafficStats, index_dtype_for, sim

from . import _kernels as K
from .sampling import BatchPlan
from .schedule import Schedule
from .state import RESCALE_BELOW, TrainState
from .dense_model import DENSE_MODEL_KEYS, DenseStepModel
from .stepcost import StepCost

__all__ = ["DataParallelSGD", "INTERCEPT_DECAY", "PARTIAL_KEYS"]

#: scikit-learn scales intercept updates by 0.01 for sparse input (``SPARSE_INTERCEPT_DECAY``).
INTERCEPT_DECAY = 0.01

#: dtype of the weights ``v`` and the gradient scratch (interleaved in ``W``)
WEIGHT_DTYPE = np.float64

#: per-rank totals of the epoch in progress (``TrainState.partial``)
PARTIAL_KEYS = ("train_seconds", "compute_seconds", "comm_seconds", "bytes_sent",
                "density_sum", "local_density_sum", "loss_sum", "correct", "rows", "steps")


class DataParallelSGD:
    """The SGD engine for one training set: this rank's rows ``X`` (CSR float32) and labels
    ``y`` (float32, -1/+1); ``sample_weight`` (float64 per row, default ones) weights each
    row's gradient. ``intercept_decay`` scales the intercept's updates (scikit-learn damps
    them by :data:`INTERCEPT_DECAY` for sparse input only).

    Collective constructor (one ``allgather`` of the row counts). ``X`` rows of rank r precede
    those of rank r+1 in the global numbering (see :mod:`.sampling`). ``direct``: apply each
    minibatch straight from its rows (:meth:`direct_steps`); None: when ``comm`` has one rank.
    With one rank the ``algorithm`` and ``quantizer`` then play no part (the quantizer's random
    stream does not advance).
    """

    def __init__(self, X, y, comm, *, sample_weight=None, loss: str, schedule: Schedule,
                 alpha: float,
                 fit_intercept: bool, global_batch: int, seed: int, shuffle: bool,
                 algorithm: str, quantizer=None, quantize_sparse: bool = False,
                 direct: bool | None = None, intercept_decay: float = INTERCEPT_DECAY,
                 options=None):
        self.X = X
        self.y = y
        # per-row gradient weights (sample_weight x class_weight); ones multiply exactly
        self.sample_weight = (np.ones(X.shape[0]) if sample_weight is None
                              else np.ascontiguousarray(sample_weight, dtype=np.float64))
        if self.sample_weight.shape != (X.shape[0],):
            raise ValueError(f"sample_weight must have one entry per row ({X.shape[0]}), got "
                             f"shape {self.sample_weight.shape}")
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._replicas = sim.Replicas(comm)  # one copy of the weights on simulated ranks
        self._cost = None  # the modeled compute of a step, on simulated ranks (.stepcost)
        if self._replicas.simulated:
            self._cost = StepCost.of(DataParallelSGD)
        self.kind = K.LOSS_CODES[loss]
        self.schedule = schedule
        self.alpha = float(alpha)
        self.fit_intercept = bool(fit_intercept)
        self.intercept_decay = float(intercept_decay)
        self.algorithm = algorithm
        self.quantizer = quantizer
        self.quantize_sparse = bool(quantize_sparse)
        self.options = options  # sparcml.Options of every allreduce (None: the defaults)
        self.n_features = int(X.shape[1])
        self.dim = self.n_features + 1  # the last coordinate carries the intercept gradient
        self.plan = BatchPlan(comm.allgather(int(X.shape[0])), self.rank, global_batch, seed,
                              shuffle)
        self.batch_sizes = self.plan.batch_sizes()
        if direct is None:
            direct = self.size == 1
        if direct and self.size != 1:
            raise ValueError(f"direct=True needs a communicator of one rank, got {self.size}")
        self.direct = bool(direct)
        self._W = None  # (n_features, 2): weights v and gradient scratch, see attach()
        if self.direct:
            most = int(self.batch_sizes.max(initial=0))
            self._active = np.empty(most, dtype=np.int64)
            self._dloss = np.empty(most, dtype=np.float64)
            # column marks of add_rows: one byte each, cleared when the marks wrap around
            # (every 255 steps; with tiny batches a wider mark, so that clearing stays rare)
            wide = global_batch < 64
            self._stamp = np.zeros(self.n_features, dtype=np.uint16 if wide else np.uint8)
            self._stamp_max = int(np.iinfo(self._stamp.dtype).max)
            self._stamp_last = 0
            self._rate_code = K.SCHEDULE_CODES[schedule.kind]
            self._rates = np.array([schedule.alpha, schedule.t0, schedule.eta0,
                                    schedule.power_t], dtype=np.float64)
        else:
            words = (self.n_features + 63) // 64  # the scratch's marks, cleared by gather_clear
            self._bits = self._replicas.shared(
                "linear.bits", lambda: np.zeros(words, dtype=np.uint64))
            self._touched = np.empty(min(self.n_features, int(X.nnz)) + 1, dtype=np.int64)
        self._idx_dtype = index_dtype_for(self.dim)
        self._checked = False
        self._plan = None  # the gradient's persistent plan (lossless, named algorithm)
        self.stats = TrafficStats()
        # the dense baseline modeled beside this run (--dense-model; simulated ranks only)
        self._dense = None if self.direct else DenseStepModel.of(comm, self.dim, self._cost)

    def attach(self, state: TrainState) -> None:
        """Move ``state.v`` into this engine's interleaved array ``W[:, 0]``; ``state.v``
        becomes a (strided) view of it. On the direct path ``state.v`` is made a contiguous
        float64 array instead (no scratch is needed). Called by :meth:`run_epoch`."""
        if state.v.shape[0] != self.n_features:
            raise ValueError(f"state has {state.v.shape[0]} features, the data "
                             f"{self.n_features}")
        if self.direct:
            if state.v.dtype != WEIGHT_DTYPE or not state.v.flags.c_contiguous:
                state.v = np.ascontiguousarray(state.v, dtype=WEIGHT_DTYPE)
            return
        if self._W is not None and state.v.base is self._W:
            return

        def interleave():
            W = np.zeros((self.n_features, 2), dtype=WEIGHT_DTYPE)
            W[:, 0] = state.v
            return W

        # simulated ranks: one W for all, checked to start from the same weights
        self._W = self._replicas.shared("linear.W", interleave,
                                        check=state.v if self._replicas.sharing else None)
        state.v = self._W[:, 0]

    def _clock(self) -> float:
        """Seconds: ``time.perf_counter()``, or the virtual clock of a simulated rank."""
        return sim.clock(self.comm) if self._cost is not None else time.perf_counter()

    # -- one step -----------------------------------------------------------------------------

    def local_gradient(self, state: TrainState, rows: np.ndarray
                       ) -> tuple[SparseVector, float, int]:
        """This rank's summed gradient over ``rows`` as a SparseVector of dim ``n_features+1``
        (float32 values), the rows' loss sum and how many of them were classified right
        (both at the weights before the step). Requires :meth:`attach`; general path only."""
        X = self.X
        with self._replicas.exclusive("linear.scratch"):  # W[:, 1] and the marks
            n, loss_sum, dsum, correct = K.batch_gradient(
                X.indptr, X.indices, X.data, self.y, rows, self._W, state.scale,
                state.intercept, self.kind, self._bits, self._touched, self.sample_weight)
            m = n + 1
            idx = np.empty(m, dtype=self._idx_dtype)
            val = np.empty(m, dtype=np.float32)
            K.gather_clear(self._W, self._bits, self._touched, n, idx, val)
        if self._cost is not None:
            sim.charge(self._cost.gradient(int((X.indptr[rows + 1] - X.indptr[rows]).sum())))
        idx[n] = self.n_features
        val[n] = dsum if self.fit_intercept else 0.0
        return SparseVector(self.dim, idx, val, check=False), loss_sum, int(correct)

    def apply(self, state: TrainState, total: SparseVector, count: int) -> None:
        """The update of a summed gradient ``total`` over ``count`` global rows (identical on
        every rank given the same ``total``). Simulated ranks sharing one ``W``: applied once,
        by the first rank, from inputs checked equal on every rank."""
        if self._cost is not None:
            sim.charge(self._cost.update(total))
        if not self._replicas.sharing:
            self._apply(state, total, count)
            return
        check = (total.is_dense, total.values, None if total.is_dense else total.indices,
                 int(count), state.scale, state.intercept, state.t)

        def update():
            self._apply(state, total, count)
            return state.scale, state.intercept, state.t

        state.scale, state.intercept, state.t = self._replicas.once("linear.apply", update,
                                                                    check=check)

    def _apply(self, state: TrainState, total: SparseVector, count: int) -> None:
        step, decay = self.schedule.batch(state.t, count)
        state.decay(decay)
        coef = -step / state.scale
        nf = self.n_features
        if total.is_dense:
            K.add_dense(self._W, total.values, coef)
            g_b = float(total.values[nf])
        else:
            idx, val = total.indices, total.values
            g_b = 0.0
            if idx.shape[0] and idx[-1] == nf:
                g_b = float(val[-1])
                idx, val = idx[:-1], val[:-1]
            K.add_scaled(self._W, idx, val, coef)
        if self.fit_intercept:
            state.intercept += -step * g_b * self.intercept_decay
        state.t += int(count)

    def direct_steps(self, state: TrainState, rows: np.ndarray, bounds: np.ndarray,
                     k1: int) -> None:
        """One rank: steps ``state.step .. k1-1`` of the epoch (``rows``, ``bounds`` of
        :meth:`~.sampling.BatchPlan.epoch`), each the update of :meth:`local_gradient` +
        :meth:`apply` applied straight from the rows (:func:`~._kernels.direct_steps`); this
        rank's totals go to ``state.partial``. Requires :meth:`attach`."""
        X, part = self.X, state.partial
        fstate = np.array([state.scale, state.intercept], dtype=np.float64)
        istate = np.array([state.t, self._stamp_last], dtype=np.int64)
        totals = np.array([part["loss_sum"], part["density_sum"], part["local_density_sum"]],
                          dtype=np.float64)
        counts = np.array([part["correct"], part["rows"], part["steps"]], dtype=np.int64)
        t0 = self._clock()
        K.direct_steps(X.indptr, X.indices, X.data, self.y, rows, bounds, self.batch_sizes,
                       state.step, k1, state.v, fstate, istate, totals, counts, self.kind,
                       self._rate_code, self._rates, self.fit_intercept, self.intercept_decay,
                       RESCALE_BELOW, self._active, self._dloss, self._stamp, self._stamp_max,
                       self.sample_weight)
        if self._cost is not None:
            entries = X.indptr[rows[bounds[state.step]:bounds[k1]] + 1] \
                - X.indptr[rows[bounds[state.step]:bounds[k1]]]
            sim.charge(self._cost.direct(k1 - state.step, int(entries.sum())))
        seconds = self._clock() - t0
        state.scale, state.intercept = float(fstate[0]), float(fstate[1])
        state.t, self._stamp_last = int(istate[0]), int(istate[1])
        part["loss_sum"], part["density_sum"], part["local_density_sum"] = map(float, totals)
        part["correct"], part["rows"], part["steps"] = map(int, counts)
        part["train_seconds"] += seconds
        part["compute_seconds"] += seconds
        state.step = k1

    def allreduce(self, vec: SparseVector) -> SparseVector:
        """Collective: the sum of every rank's ``vec`` (the agreement check on the first call
        only). Lossless with a named algorithm: through a persistent plan of the gradient's
        shape (:func:`sparcml.plan`, made at the first call: no agreement round per step)."""
        if self.quantizer is None and self.algorithm != sparcml.AUTO:
            if self._plan is None:  # it remakes itself when every rank's gradient changes shape
                self._plan = sparcml.plan(vec.dim, vec.dtype, self.comm, algorithm=self.algorithm,
                                          options=self.options, follow_shape=True)
            out = self._plan.allreduce(vec, stats=self.stats, check=not self._checked)
            self._checked = True
            return out
        out = sparcml.allreduce(vec, self.comm, algorithm=self.algorithm,
                                quantizer=self.quantizer, quantize_sparse=self.quantize_sparse,
                                stats=self.stats, check=not self._checked,
                                options=self.options)
        self._checked = True
        return out

    # -- one epoch ----------------------------------------------------------------------------

    def run_epoch(self, state: TrainState, on_step=None) -> bool:
        """Train from ``state.step`` to the end of epoch ``state.epoch`` (collective).

        ``on_step(state)`` is called after every step; when it returns True training stops
        there (every rank must decide alike). Returns whether ``on_step`` asked to stop; the
        epoch is complete when ``state.step == self.plan.steps_per_epoch``. This rank's totals
        of the epoch so far accumulate in ``state.partial`` (see :data:`PARTIAL_KEYS`), so that
        a checkpoint keeps them.
        """
        self.attach(state)
        rows, bounds = self.plan.epoch(state.epoch)
        part = state.partial
        for key in PARTIAL_KEYS + (DENSE_MODEL_KEYS if self._dense is not None else ()):
            part.setdefault(key, 0)
        stats = self.stats
        dense = self._dense
        while state.step < self.plan.steps_per_epoch:
            k = state.step
            if self.direct:  # all the epoch's steps in one call unless someone watches each
                self.direct_steps(state, rows, bounds,
                                  k + 1 if on_step is not None else self.plan.steps_per_epoch)
                if on_step is not None and on_step(state):
                    return True
                continue
            bytes0 = stats.bytes_sent
            t0 = self._clock()
            vec, loss_sum, correct = self.local_gradient(state, rows[bounds[k]:bounds[k + 1]])
            t1 = self._clock()
            if dense is not None:
                dense.arrive(t1 - t0)
            total = self.allreduce(vec)
            t2 = self._clock()
            self.apply(state, total, int(self.batch_sizes[k]))
            t3 = self._clock()
            if dense is not None:
                dense.add_step(part, t1 - t0)
            part["train_seconds"] += t3 - t0
            part["compute_seconds"] += (t1 - t0) + (t3 - t2)
            part["comm_seconds"] += t2 - t1
            part["bytes_sent"] += stats.bytes_sent - bytes0
            part["density_sum"] += total.nnz / self.dim
            part["local_density_sum"] += vec.nnz / self.dim
            part["loss_sum"] += loss_sum
            part["correct"] += correct
            part["rows"] += int(bounds[k + 1] - bounds[k])
            part["steps"] += 1
            state.step += 1
            if on_step is not None and on_step(state):
                return True
        return False

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, state: TrainState, X, y) -> dict:
        """Collective: mean loss, accuracy and row count over every rank's ``(X, y)``
        (labels -1/+1); sums taken in rank order, so identical on every rank."""
        p = np.empty(X.shape[0], dtype=np.float64)
        K.margins(X.indptr, X.indices, X.data, state.v, state.scale, state.intercept, p)
        lo = np.empty_like(p)
        K.losses(self.kind, y, p, lo)
        correct = int(np.count_nonzero((p > 0) == (y > 0)))
        mine = (float(lo.sum()), correct, int(X.shape[0]))
        every = self.comm.allgather(mine) if self.size > 1 else [mine]
        loss_sum = 0.0
        for part in every:
            loss_sum += part[0]
        correct = sum(part[1] for part in every)
        n = sum(part[2] for part in every)
        return {"loss": loss_sum / n if n else float("nan"),
                "accuracy": correct / n if n else float("nan"), "n": n}

    def gather_totals(self, partial: dict) -> dict:
        """Collective: the epoch's per-rank totals (``state.partial``) combined. Times: the
        slowest rank; bytes: the largest rank and the sum; running loss and accuracy: over all
        rows (sums in rank order, identical on every rank)."""
        keys = PARTIAL_KEYS + (DENSE_MODEL_KEYS if self._dense is not None else ())
        mine = tuple(partial.get(key, 0) for key in keys)
        every = self.comm.allgather(mine) if self.size > 1 else [mine]
        col = {key: [e[i] for e in every] for i, key in enumerate(keys)}
        steps = max(partial.get("steps", 0), 1)
        rows = sum(col["rows"])
        loss_sum = 0.0
        for x in col["loss_sum"]:
            loss_sum += x
        # the modeled dense baseline's (.dense_model): the slowest rank's, as for this run's
        dense = {key: max(col[key]) for key in keys[len(PARTIAL_KEYS):]}
        return {**dense, "train_seconds": max(col["train_seconds"]),
                "compute_seconds": max(col["compute_seconds"]),
                "comm_seconds": max(col["comm_seconds"]),
                "bytes_sent": max(col["bytes_sent"]),
                "bytes_sent_total": sum(col["bytes_sent"]),
                "steps": partial.get("steps", 0),
                "gradient_density": partial.get("density_sum", 0.0) / steps,
                "local_gradient_density": max(col["local_density_sum"]) / steps,
                "running_loss": loss_sum / rows if rows else float("nan"),
                "running_accuracy": sum(col["correct"]) / rows if rows else float("nan"),
                "rows": rows}
