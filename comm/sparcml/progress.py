"""Waiting for MPI without starving other ranks of the CPU.

MPICH ranks that block in MPI busy-poll. When a node runs more ranks than it has cores, a rank
spinning in ``Wait`` holds a core that the rank it waits for needs, and every message costs a
scheduler time slice. A :class:`Waiter` with ``yield_cpu=True`` instead tests a non-blocking
request and sleeps briefly between tests. ``auto`` (the default) yields exactly when the ranks
of this communicator on this node outnumber the cores this process may run on; the environment
variable ``SPARCML_WAIT=spin|yield|auto`` overrides it.
"""

from __future__ import annotations

import os
import time

from mpi4py import MPI

__all__ = ["Waiter", "wait_policy"]

_SPINS_BEFORE_SLEEP = 20
_SLEEP_SECONDS = 20e-6


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def wait_policy(comm: MPI.Comm) -> bool:
    """True when waits on ``comm`` should yield the CPU. Collective (a node-local split)."""
    choice = os.environ.get("SPARCML_WAIT", "auto").strip().lower()
    if choice not in ("auto", "spin", "yield"):
        from .errors import SparcmlError

        raise SparcmlError(f"SPARCML_WAIT must be auto, spin or yield, got {choice!r}")
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        local_ranks = node.Get_size()
    finally:
        node.Free()
    if choice != "auto":
        return choice == "yield"
    return local_ranks > _cores()


class Waiter:
    """Completes requests and probes, spinning or yielding the CPU as configured."""

    __slots__ = ("yield_cpu",)

    def __init__(self, yield_cpu: bool):
        self.yield_cpu = yield_cpu

    def _pause(self, spins: int) -> None:
        if spins < _SPINS_BEFORE_SLEEP:
            os.sched_yield()
        else:
            time.sleep(_SLEEP_SECONDS)

    def wait(self, request: MPI.Request) -> None:
        if not self.yield_cpu:
            request.Wait()
            return
        spins = 0
        while not request.Test():
            self._pause(spins)
            spins += 1

    def waitall(self, requests) -> None:
        if not self.yield_cpu:
            MPI.Request.Waitall(requests)
            return
        spins = 0
        while not MPI.Request.Testall(requests):
            self._pause(spins)
            spins += 1

    def mprobe(self, comm: MPI.Comm, source: int, tag: int, status: MPI.Status) -> MPI.Message:
        if not self.yield_cpu:
            return comm.Mprobe(source, tag, status)
        spins = 0
        while True:
            msg = comm.Improbe(source, tag, status)
            if msg is not None:
                return msg
            self._pause(spins)
            spins += 1

    def collective(self, comm: MPI.Comm, name: str, *args) -> None:
        """Run collective ``name`` (e.g. ``"Allgatherv"``), as ``I<name>`` + wait when yielding."""
        if self.yield_cpu:
            self.wait(getattr(comm, "I" + name.lower())(*args))
        else:
            getattr(comm, name)(*args)
