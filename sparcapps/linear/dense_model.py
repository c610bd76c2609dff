"""The dense baseline modeled from a sparse simulated run (``sparc-linear --simulate P
--dense-model``), for P x N too large to simulate the dense baseline itself.

A simulated dense baseline holds every rank's dense N-vector at once (about 14 bytes a feature
and rank: webspam's 16.6M features at P = 128 need 32 GiB), so past some P it does not fit where
the sparse run does. Its time needs none of that memory: a dense step is

    the slowest rank's gradient compute (the same rows as the sparse run's step, charged at the
    same calibrated rates)
  + the dense baseline's plan call on the N + 1 float32 values, as the simulator charges one
    (:func:`sparcml.sim.predict` ``("dense", plan=True)``: the identity check, ``MPI_Allreduce``
    by MPICH's algorithm on the run's network with its local additions at the calibrated rate,
    the error flag's reduction, the calls' fixed charges; times ``--compute-scale``)
  + the update of a dense sum (:meth:`~.stepcost.StepCost.dense_update`)

which is what a simulated dense run charges (but for the first step, where it also makes its
plan: one agreement, about a millisecond, left out): its ranks leave each ``MPI_Allreduce`` together
(it waits for the last to arrive) and then apply the same dense update. :class:`DenseStepModel`
adds these per step beside the sparse run (each rank's gradient seconds go into one array the
simulated ranks share; the slowest is read after the step's reduction, which no rank leaves
before every rank has entered it) into the epoch totals ``dense_train_seconds``,
``dense_compute_seconds``, ``dense_comm_seconds`` and ``dense_bytes_sent``. Bytes are exact
(``2 (P - 1) / P`` of the dense vector per rank and step).

What it does not give: the dense run's own weights. Its sums are the sparse run's up to the
order of the float32 additions, so its losses and accuracies are taken from the sparse run
(records say so: ``metrics.accuracy_from``); the simulated dense runs of BENCHMARKS' scaling
studies, where both fit, show how close that is.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

import numpy as np
from sparcml import DENSE_BASELINE, InvalidArgumentError, sim

__all__ = ["DenseStepModel", "dense_model", "dense_model_epochs", "DENSE_MODEL_KEYS"]

#: epoch totals the model adds to ``TrainState.partial`` (and to each history entry)
DENSE_MODEL_KEYS = ("dense_train_seconds", "dense_compute_seconds", "dense_comm_seconds",
                    "dense_bytes_sent")
_RING = 3  # steps of arrivals kept: a rank is at most one step ahead of any other's read

_COMPUTE_SCALE: contextvars.ContextVar = contextvars.ContextVar("linear_dense_model",
                                                                default=None)


@contextmanager
def dense_model(compute_scale: float | None):
    """Inside (the function every simulated rank runs): the engines made model the dense
    baseline beside the run, with the simulation's ``compute_scale``; None: no model."""
    token = _COMPUTE_SCALE.set(None if compute_scale is None else float(compute_scale))
    try:
        yield
    finally:
        _COMPUTE_SCALE.reset(token)


class DenseStepModel:
    """The dense baseline's step on ``comm`` (a simulated communicator whose ranks share
    replicas), for a gradient of ``dim`` float32 values and the step costs ``cost``
    (:class:`~.stepcost.StepCost`). Collective constructor: every rank makes one, in the same
    order as its other replicas."""

    def __init__(self, comm, dim: int, cost, compute_scale: float):
        replicas = sim.Replicas(comm)
        if not replicas.sharing:
            raise InvalidArgumentError("the dense model needs simulated ranks that share "
                                       "replicas (sparcml.sim.run(..., share=True))")
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        call = sim.predict(DENSE_BASELINE, P=self.size, N=int(dim), k=1, K=int(dim),
                           network=comm.network, compute_scale=compute_scale, plan=True)
        self.comm_seconds, self.bytes = call.seconds, call.bytes
        self.update_seconds = cost.dense_update(int(dim))
        self._arrivals = replicas.shared("linear.dense_model",
                                         lambda: np.zeros((_RING, self.size)))
        self._step = 0

    @classmethod
    def of(cls, comm, dim: int, cost):
        """The model when this thread runs under :func:`dense_model` on a simulated
        communicator (``cost`` not None), else None."""
        scale = _COMPUTE_SCALE.get()
        if scale is None or cost is None:
            return None
        return cls(comm, dim, cost, scale)

    def arrive(self, gradient_seconds: float) -> None:
        """Before the step's reduction: this rank's gradient compute of the step."""
        self._arrivals[self._step % _RING, self.rank] = gradient_seconds

    def add_step(self, partial: dict, gradient_seconds: float) -> None:
        """After the step's reduction: the dense step's times and bytes into ``partial``."""
        slowest = float(self._arrivals[self._step % _RING].max())
        self._step += 1
        partial["dense_train_seconds"] += slowest + self.comm_seconds + self.update_seconds
        partial["dense_compute_seconds"] += gradient_seconds + self.update_seconds
        partial["dense_comm_seconds"] += slowest - gradient_seconds + self.comm_seconds
        partial["dense_bytes_sent"] += self.bytes



def dense_model_epochs(history: list[dict], P: int) -> list[dict]:
    """The modeled dense baseline's epochs beside the sparse run's ``history`` (epochs that
    carry :data:`DENSE_MODEL_KEYS`): copies with the model's times and bytes, the sparse run's
    losses and accuracies. The model's keys are removed from ``history``'s epochs, which keep
    only the sparse run's own figures. An epoch without them (one rank: no reduction, the
    same path) is copied as it is."""
    epochs = []
    for h in history:
        dense = dict(h)
        if "dense_train_seconds" in h:
            dense.update(train_seconds=h["dense_train_seconds"],
                         compute_seconds=h["dense_compute_seconds"],
                         comm_seconds=h["dense_comm_seconds"],
                         bytes_sent=int(h["dense_bytes_sent"]),
                         bytes_sent_total=int(h["dense_bytes_sent"]) * P,
                         gradient_density=1.0)
        for key in DENSE_MODEL_KEYS:
            dense.pop(key, None)
            h.pop(key, None)
        epochs.append(dense)
    return epochs
