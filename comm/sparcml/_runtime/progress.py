"""Waiting for MPI without starving other ranks of the CPU.

MPICH ranks that block in MPI busy-poll. When a node runs more ranks than it has cores, a rank
spinning in ``Wait`` holds a core that the rank it waits for needs, and every message costs a
scheduler time slice. A :class:`Waiter` with ``yield_cpu=True`` instead tests a non-blocking
request and sleeps between tests. ``auto`` (the default) yields exactly when the ranks of this
communicator on this node outnumber the cores this process may run on (ranks count as on one
node when MPI groups them so, or when they run on one kernel: the emulated nodes of
``jobs/emulate.sh`` are network namespaces of one machine); a call's
``Options(wait="spin"|"yield")`` (default: ``SPARCML_WAIT``) overrides it for that call.

A waiter for background work (the non-blocking engine's thread) may also back off: its sleeps
grow in proportion to the time already waited (1/16 of it, from 20 us up to ``max_sleep``), so
a long wait wakes a few hundred times rather than once every 20 us. On a half-second network
transfer, 20 us sleeps cost a rank about 40 ms of CPU in wake-ups and polls, CPU that the
compute overlapping it on the same cores needs. Blocking calls keep the short sleeps: MPI
progresses a collective only inside a test, so a long sleep between its steps adds latency
that nothing else uses (MPI_Allreduce of 4 MiB was 15% slower with back-off).
"""

from __future__ import annotations

import os
import time

from mpi4py import MPI

from .._options import WAITS

__all__ = ["Waiter", "wait_policy", "BACKGROUND_MAX_SLEEP_SECONDS"]

_SPINS_BEFORE_SLEEP = 20
_MIN_SLEEP_SECONDS = 20e-6
BACKGROUND_MAX_SLEEP_SECONDS = 1e-3
_SLEEP_FRACTION_OF_WAITED = 1 / 16


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def wait_policy(comm: MPI.Comm) -> bool:
    """``wait="auto"``'s answer: True when waits on ``comm`` should yield the CPU (some node's
    ranks outnumber its cores), the same on every rank. Collective (a node-local split and
    two allgathers)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        local_ranks = node.Get_size()
    finally:
        node.Free()
    # processes on one kernel share its cores even where MPI sees separate nodes (network
    # namespaces of jobs/emulate.sh, containers): count those too (processes, not ranks: the
    # simulator's ranks are threads of one process, and its requests are not MPI's)
    kernel = _kernel_id()
    same_kernel = len({pid for k, pid in comm.allgather((kernel, os.getpid())) if k == kernel})
    # one answer for every rank: a blocking collective on one rank and its non-blocking twin
    # on another do not match (MPI), so the ranks that would spin yield too
    return any(comm.allgather(max(local_ranks, same_kernel) > _cores()))


def _kernel_id() -> str:
    """This running kernel's boot id (the same in every namespace of one machine), or ''."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:  # pragma: no cover - not Linux
        return ""


class Waiter:
    """Completes requests and probes, spinning or yielding the CPU as configured."""

    __slots__ = ("yield_cpu", "max_sleep", "auto", "sleeps")

    def __init__(self, yield_cpu: bool, max_sleep: float = _MIN_SLEEP_SECONDS,
                 auto: bool | None = None, sleeps: bool = True):
        """``max_sleep``: longest pause between tests, in seconds (the default: no back-off).
        ``auto``: :func:`wait_policy`'s answer, for calls whose ``wait`` option is ``"auto"``
        (see :meth:`use`); None: the policy is fixed (the non-blocking engine's waiter).
        ``sleeps=False``: a yielding wait still tests a non-blocking request (what the ranks
        agree on) but pauses between tests with ``sched_yield`` only, never sleeping: for a
        caller with a core of its own and nothing else to do, where a sleep (about 90 us on
        Linux for the shortest) only delays noticing the peer's message."""
        self.yield_cpu = yield_cpu
        self.max_sleep = max(_MIN_SLEEP_SECONDS, float(max_sleep))
        self.auto = auto
        self.sleeps = bool(sleeps)

    def policy(self, wait: str) -> bool:
        """Whether a call with ``Options.wait`` = ``wait`` yields (``"auto"``: as
        :func:`wait_policy` found); a fixed waiter's own policy whatever ``wait`` says."""
        if self.auto is None:
            return self.yield_cpu
        if wait not in WAITS:
            raise ValueError(f"wait must be one of {', '.join(WAITS)}, got {wait!r}")
        return self.auto if wait == "auto" else wait == "yield"

    def use(self, wait: str) -> None:
        """Wait as :meth:`policy` says for ``wait`` from now on. Every rank of a communicator
        must wait alike (a blocking collective does not match a non-blocking one): the entry
        points agree on :meth:`policy` before they call this."""
        self.yield_cpu = self.policy(wait)

    def _pause(self, spins: int, started: float) -> None:
        if spins < _SPINS_BEFORE_SLEEP or not self.sleeps:
            os.sched_yield()
            return
        waited = time.perf_counter() - started
        time.sleep(min(self.max_sleep,
                       max(_MIN_SLEEP_SECONDS, waited * _SLEEP_FRACTION_OF_WAITED)))

    def wait(self, request: MPI.Request) -> None:
        if not self.yield_cpu:
            request.Wait()
            return
        spins, started = 0, time.perf_counter()
        while not request.Test():
            self._pause(spins, started)
            spins += 1

    def waitall(self, requests) -> None:
        if not self.yield_cpu:
            MPI.Request.Waitall(requests)
            return
        spins, started = 0, time.perf_counter()
        while not MPI.Request.Testall(requests):
            self._pause(spins, started)
            spins += 1

    def mprobe(self, comm: MPI.Comm, source: int, tag: int, status: MPI.Status) -> MPI.Message:
        if not self.yield_cpu:
            return comm.Mprobe(source, tag, status)
        spins, started = 0, time.perf_counter()
        while True:
            msg = comm.Improbe(source, tag, status)
            if msg is not None:
                return msg
            self._pause(spins, started)
            spins += 1

    def collective(self, comm: MPI.Comm, name: str, *args) -> None:
        """Run collective ``name`` (e.g. ``"Allgatherv"``), as ``I<name>`` + wait when yielding."""
        if self.yield_cpu:
            self.wait(getattr(comm, "I" + name.lower())(*args))
        else:
            getattr(comm, name)(*args)
