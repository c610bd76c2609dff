"""Replicas shared by simulated ranks, and the compute a training step charges to its rank.

Synchronous data-parallel training keeps one model on every rank, bitwise equal after every
step: every rank applies the same update to the same weights. A simulation of P ranks in one
process need not hold P copies of them. :class:`Replicas` lets the ranks of a simulation hold
*one* copy and lets one rank apply each update for all of them:

- :meth:`Replicas.shared` ``(key, make, check=)``: the first rank to arrive calls ``make()``;
  every rank gets that same object. ``check`` (optional) is what the rank's own copy would
  have held (arrays and scalars): compared with the first rank's, a difference raises
  :class:`ReplicaDivergedError` instead of silently training on another rank's state.
- :meth:`Replicas.once` ``(key, fn, check=)``: the first rank to arrive runs ``fn()`` (the
  update), the others wait for it to finish and get its return value. ``check`` as above: the
  inputs of the update (the summed gradient, the scalars) must be equal on every rank, which
  a synchronous algorithm guarantees and this verifies, exactly (no hash collisions: the first
  rank's inputs are kept until every rank has compared).
- :meth:`Replicas.exclusive` ``(key)``: a lock, for scratch memory the ranks share (one rank
  at a time; the modeled time does not depend on the order, only the wall time does).

Calls are matched as collectives are: the n-th call of a key on one rank meets the n-th call
of the same key on the others, so the same code serves every step. Every rank of the
communicator must make the same calls in the same order.

Correctness of one shared copy: in synchronous SGD a rank reads the weights of step k only to
compute its gradient of step k, before the step's reduction; no rank can finish that
reduction before every rank has contributed, so when the first rank applies update k no rank
still needs the weights of step k. The :meth:`once` wait makes every rank see update k done
when it leaves its own call. A method that breaks this (asynchronous or local SGD, per-rank
state such as error-feedback residuals) keeps that state per rank, not in a replica.

On a real MPI communicator (or a simulation run with ``share=False``) :class:`Replicas` does
what each rank would do alone: ``shared`` returns ``make()``, ``once`` returns ``fn()``,
``exclusive`` locks nothing. The same training code therefore runs under ``mpiexec`` and on
simulated ranks.

:func:`charge` adds modeled compute to the calling simulated rank (the step's gradient and
update, which sparcml does not see), :func:`clock` reads the rank's virtual clock (or
``time.perf_counter()`` on a real communicator).
"""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext

import numpy as np

from .._errors import InvalidArgumentError, SparcmlError
from . import _credit

__all__ = ["Replicas", "ReplicaDivergedError", "charge", "clock", "simulated_world"]


class ReplicaDivergedError(SparcmlError):
    """The ranks of a simulation would have held different replicas (or applied an update
    from different inputs): their states are not bitwise equal, so one shared copy would be
    wrong. Names the key, the rank and the first difference."""


def simulated_world(comm):
    """The :class:`~sparcml.sim._world.World` of a simulated communicator, else None."""
    from ._comm import SimComm

    return comm._world if isinstance(comm, SimComm) else None


def charge(seconds: float) -> None:
    """Add ``seconds`` of modeled compute to the calling simulated rank (times the run's
    ``compute_scale``, charged at its next call into the communicator or look at its clock).
    Does nothing outside a simulated rank, and under ``compute="measured"`` (the thread's CPU
    time is charged there). ``seconds`` must be finite and >= 0."""
    s = float(seconds)
    if not (s >= 0.0 and s != float("inf")):
        raise InvalidArgumentError(f"charge: seconds must be finite and >= 0, got {seconds!r}")
    if _credit.modeled():
        _credit.charge_work(s)


def clock(comm) -> float:
    """Seconds: the rank's virtual clock on a simulated communicator (its compute so far
    included), else ``time.perf_counter()``. Differences of two readings are durations."""
    if simulated_world(comm) is not None:
        return comm.clock()
    return time.perf_counter()


def _same(a, b) -> str | None:
    """None when ``a`` and ``b`` are equal (arrays bitwise, containers item by item), else a
    short description of the first difference."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
        if a.size and a.__array_interface__["data"][0] == b.__array_interface__["data"][0] \
                and a.strides == b.strides:
            return None
        # bitwise: -0.0 differs from 0.0 and NaNs compare by their bits; in slices, so that
        # no temporary as large as the arrays is made
        if a.flags.c_contiguous and b.flags.c_contiguous and a.dtype.kind in "fciub":
            a, b = a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)
        else:
            a, b = a.reshape(-1), b.reshape(-1)
        step = 1 << 20
        if all(np.array_equal(a[i:i + step], b[i:i + step]) for i in range(0, a.size, step)):
            return None
        return f"arrays of shape {a.shape} differ"
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if len(a) != len(b):
            return f"{len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _same(x, y)
            if d is not None:
                return f"item {i}: {d}"
        return None
    if isinstance(a, float) and isinstance(b, float):
        if a == b or (a != a and b != b):
            return None
        return f"{a!r} vs {b!r}"
    return None if a == b else f"{a!r} vs {b!r}"


class _Entry:
    __slots__ = ("lock", "done", "value", "check", "seen", "error", "cpu")

    def __init__(self):
        self.lock = threading.Lock()
        self.done = False
        self.value = None
        self.check = None
        self.seen = 0
        self.error: BaseException | None = None
        self.cpu = 0.0  # thread CPU seconds of the first rank's call (measured compute)


class _Table:
    """Per simulated communicator: the entries of its replicas and each rank's call counts."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.entries: dict[tuple, _Entry] = {}
        self.counts: dict[tuple, int] = {}
        self.locks: dict = {}


_tables_lock = threading.Lock()


def _table_of(comm) -> _Table:
    world = comm._world
    with _tables_lock:
        tables = getattr(world, "replica_tables", None)
        if tables is None:
            tables = world.replica_tables = {}
        table = tables.get(comm._gid)
        if table is None:
            table = tables[comm._gid] = _Table(comm.Get_size())
        return table


class Replicas:
    """One rank's handle on the replicas its communicator's simulated ranks share (see the
    module docstring). ``Replicas(comm)``: any communicator; on a real one (or a simulation
    with ``share=False``) every method does what the rank would do alone.

    ``simulated``: whether ``comm`` is a simulated communicator; ``sharing``: whether its
    run shares memory (the default), so that the ranks hold one replica.
    """

    def __init__(self, comm):
        world = simulated_world(comm)
        self._rank = comm.Get_rank()
        self.simulated = world is not None
        self.sharing = world is not None and bool(getattr(world, "share", False))
        self._table = _table_of(comm) if self.sharing else None

    def _entry(self, key) -> tuple[_Entry, tuple]:
        t = self._table
        with t.lock:
            n = t.counts.get((self._rank, key), 0)
            t.counts[(self._rank, key)] = n + 1
            slot = (key, n)
            entry = t.entries.get(slot)
            if entry is None:
                entry = t.entries[slot] = _Entry()
            return entry, slot

    def _leave(self, entry: _Entry, slot) -> None:
        t = self._table
        with t.lock:
            entry.seen += 1
            if entry.seen >= t.size:
                t.entries.pop(slot, None)

    def _compare(self, key, entry: _Entry, check) -> None:
        if check is None and entry.check is None:
            return
        diff = _same(entry.check, check)
        if diff is not None:
            raise ReplicaDivergedError(
                f"simulated rank {self._rank} would hold another replica of {key!r} than the "
                f"first rank that made it ({diff}): the ranks are not in lockstep, so they "
                f"cannot share one copy; run this state per rank (sparcml.sim.run(..., "
                f"share=False) shares nothing)")

    def _run(self, key, fn, check):
        if not self.sharing:
            return fn()
        entry, slot = self._entry(key)
        try:
            with entry.lock:
                if entry.error is not None:
                    raise ReplicaDivergedError(f"the first rank's {key!r} failed: "
                                               f"{entry.error!r}") from entry.error
                if not entry.done:
                    t0 = time.thread_time()
                    try:
                        entry.value = fn()
                    except BaseException as exc:
                        entry.error = exc
                        raise
                    entry.cpu = time.thread_time() - t0
                    entry.check = check
                    entry.done = True
                    return entry.value
                self._compare(key, entry, check)
                # measured compute: this rank is charged the work it was spared
                _credit.charge(entry.cpu)
                return entry.value
        finally:
            self._leave(entry, slot)

    def shared(self, key, make, *, check=None):
        """The object ``make()`` returned on the first rank to call with ``key`` (the n-th
        call of ``key`` on every rank meets the n-th on the others). ``check``: this rank's
        own copy (arrays, scalars, tuples of them), compared exactly with the first rank's;
        a difference raises :class:`ReplicaDivergedError`. Every rank must call."""
        return self._run(key, make, check)

    def once(self, key, fn, *, check=None):
        """``fn()`` run by the first rank to call with ``key``; every rank returns its value
        after it has finished. ``check``: the inputs of ``fn`` as this rank holds them,
        compared exactly with the first rank's (:class:`ReplicaDivergedError` on a
        difference). Every rank must call; ``fn`` must not call the communicator."""
        return self._run(key, fn, check)

    def exclusive(self, key):
        """A context manager: one simulated rank at a time inside (for scratch memory the
        ranks share). Do not call the communicator inside. On a real communicator: nothing."""
        if not self.sharing:
            return nullcontext()
        t = self._table
        with t.lock:
            lock = t.locks.get(key)
            if lock is None:
                lock = t.locks[key] = threading.Lock()
        return lock  # a lock is its own context manager
