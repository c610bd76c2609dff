"""Shared state of one simulation: ranks, their virtual clocks and links, mailboxes, rendezvous.

Package-internal (:mod:`sparcml.sim._comm` is the communicator built on it). One lock guards
everything; each rank sleeps on a condition of its own (on that lock), so an event wakes only
the rank it concerns. A small number of *run tokens* (default: the usable cores) bounds how
many rank threads execute Python or kernels at once: a rank gives its token back while it
waits. This keeps the memory of transient buffers (a message being decoded, a block being
merged) to a few ranks' worth instead of P, and makes the measured thread CPU time of a
rank's compute close to what it would be alone on a core.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

import numpy as np

from ._credit import credit_of
from ._links import LinkCalendar
from ._network import NetworkSpec

__all__ = ["SimDeadlock", "World", "RankState", "SimAborted", "add_rate"]


@functools.lru_cache(maxsize=1)
def add_rate() -> float:
    """Seconds per byte of a dense float32 ``np.add`` on this machine (the local reductions of
    a simulated ``Allreduce``), measured once per process: the best of 5 on 4 MiB."""
    a = np.ones(1 << 20, np.float32)
    b = np.ones(1 << 20, np.float32)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.add(a, b, out=a)
        best = min(best, time.perf_counter() - t0)
    return best / a.nbytes


class SimAborted(RuntimeError):
    """Raised in a rank that waits when another rank failed or called ``Abort``."""


# seconds of wall time in which no simulated rank moved while all of them waited: a deadlock
DEADLOCK_GRACE = 3.0


class SimDeadlock(SimAborted):
    """Every rank still running waits for another (one skipped a collective, a receive with no
    send): the run cannot go on. The message names each rank and where it waits."""


class RankState:
    """One virtual rank: its clock, its link reservations and what it sent."""

    __slots__ = ("rank", "clock", "cpu_mark", "compute", "cond", "wire_bytes", "messages",
                 "send_done", "node", "calls")

    def __init__(self, rank: int, node: int, lock: threading.Lock):
        self.rank = rank
        self.node = node
        self.clock = 0.0          # virtual seconds
        self.compute = 0.0        # of which measured compute
        self.cpu_mark = None      # thread CPU time at the last exit from the communicator
        self.cond = threading.Condition(lock)
        self.wire_bytes = 0       # point-to-point bytes sent + modeled collective volume
        self.messages = 0
        self.send_done = 0.0      # when this rank's last send has left it
        self.calls = 0            # calls into the communicator (each charged rates["call"])


class World:
    """The shared state of one run of P virtual ranks on ``network``."""

    def __init__(self, size: int, network: NetworkSpec, *, tokens: int = 2,
                 compute_scale: float = 1.0, ops=None, rates: dict | None = None):
        self.size = size
        self.network = network
        self.ops = ops  # what sparcml's contexts on this world's communicators use (None: plain)
        self.lock = threading.Lock()
        self.ranks = [RankState(r, network.node_of(r), self.lock) for r in range(size)]
        self.compute_scale = float(compute_scale)
        # link reservations: inter-node traffic uses the node's NIC, intra-node the rank's own
        # (calendars of busy intervals: the ranks reach a node's NIC in wall-clock order)
        nodes = network.node_of(size - 1) + 1
        self.nic_send = [LinkCalendar() for _ in range(nodes)]
        self.nic_recv = [LinkCalendar() for _ in range(nodes)]
        self.mem_send = [LinkCalendar() for _ in range(size)]
        self.mem_recv = [LinkCalendar() for _ in range(size)]
        self.mailboxes: dict[tuple[int, int], list] = {}   # (comm id, dest rank) -> messages
        self.rendezvous: dict[tuple[int, int], dict] = {}  # (comm id, sequence) -> state
        self.next_comm_id = 1
        self.error: BaseException | None = None
        self.tokens = threading.Semaphore(max(1, int(tokens)))
        # threads waiting (a rank's own, or its non-blocking engine's): ident -> (rank, ready
        # predicate, caller's frame); ranks whose function returned; what moved last
        self.waiting: dict[int, tuple] = {}
        self.returned: set[int] = set()
        # ranks that wait (threads each) or returned, kept as they change: the deadlock check
        # runs at every wait, and counting them there was O(P) (a fifth of a P = 1,000 run)
        self._waits_of: dict[int, int] = {}
        self._covered = 0
        self.progress = 0
        self.suspect: tuple[int, float] | None = None
        self.sequence = 0  # global posting order of messages
        # rates: compute modeled from them (sparcml.sim._rates), None: measured thread time
        self.rates = rates
        # seconds per byte of a simulated Allreduce's local sums: compute, so scaled like all
        self.gamma_add = (add_rate() if rates is None else rates["dense_add"]) * self.compute_scale

    # ---- compute accounting ------------------------------------------------------------------
    def enter(self, st: RankState, call: bool = True) -> None:
        """A rank enters the communicator: its compute since the last exit goes on its clock.
        Measured: the thread CPU time since then, corrected by its credit. Modeled: the kernels
        it ran since (their credit) and, for a ``call`` (not a look at the clock) made by
        sparcml's code, the Python of one communicator call."""
        self.progress += 1
        if self.rates is not None:
            spent = credit_of()
            if call and _called_by_sparcml():
                st.calls += 1
                spent += self.rates["call"]
            spent *= self.compute_scale
            st.clock += spent
            st.compute += spent
            return
        now = time.thread_time()
        if call:
            st.calls += 1
        if st.cpu_mark is not None:
            spent = (now - st.cpu_mark + credit_of()) * self.compute_scale
            st.clock += spent
            st.compute += spent
        st.cpu_mark = now

    def leave(self, st: RankState) -> None:
        if self.rates is None:
            st.cpu_mark = time.thread_time()

    # ---- waiting -----------------------------------------------------------------------------
    def wait_until(self, st: RankState, ready) -> None:
        """Block rank ``st`` (lock held) until ``ready()``; its run token is given back
        meanwhile. Raises :class:`SimAborted` when the run failed."""
        if ready():
            return
        me = threading.get_ident()
        self.waiting[me] = (st.rank, ready, sys._getframe(1))
        waits = self._waits_of.get(st.rank, 0)
        if waits == 0 and st.rank not in self.returned:
            self._covered += 1
        self._waits_of[st.rank] = waits + 1
        self._detect_deadlock()
        self.tokens.release()
        try:
            while not ready():
                if self.error is not None:
                    raise SimAborted(f"rank {st.rank}: another rank failed: {self.error!r}")
                st.cond.wait(timeout=1.0)
                self._detect_deadlock()
        finally:
            del self.waiting[me]
            waits = self._waits_of[st.rank] - 1
            if waits:
                self._waits_of[st.rank] = waits
            else:
                del self._waits_of[st.rank]
                if st.rank not in self.returned:
                    self._covered -= 1
            self.progress += 1
            self.lock.release()
            try:
                self.tokens.acquire()
            finally:
                self.lock.acquire()

    def returned_from(self, st: RankState) -> None:
        """Rank ``st``'s function returned (lock not held): if every other rank now waits for
        something no rank will send, the run is a deadlock."""
        with self.lock:
            if st.rank not in self.returned:
                self.returned.add(st.rank)
                if st.rank not in self._waits_of:
                    self._covered += 1
            self._detect_deadlock()

    def _detect_deadlock(self) -> None:
        """(lock held) Every rank has returned or waits, no waiting thread can go on, and
        nothing moved for :data:`DEADLOCK_GRACE` seconds (a rank's non-blocking engine thread
        may still be computing): record a :class:`SimDeadlock` naming where each waits, and
        wake them (they raise it)."""
        if self.error is not None or not self.waiting:
            return
        if self._covered < self.size or any(ready() for _, ready, _ in self.waiting.values()):
            self.suspect = None
            return
        now = time.monotonic()
        if self.suspect is None or self.suspect[0] != self.progress:
            self.suspect = (self.progress, now)
            return
        if now - self.suspect[1] < DEADLOCK_GRACE:
            return
        waits = sorted((rank, frame) for rank, _, frame in self.waiting.values())
        lines = [f"rank {r} waits in {_where(frame)}" for r, frame in waits[:8]]
        if len(waits) > 8:
            lines.append(f"and {len(waits) - 8} more waits")
        if self.returned:
            done = sorted(self.returned)
            lines.append(f"rank{'s' if len(done) > 1 else ''} "
                         f"{', '.join(map(str, done[:16]))}{' ...' if len(done) > 16 else ''} "
                         f"returned from the simulated function")
        self.error = SimDeadlock(f"simulated deadlock: for {DEADLOCK_GRACE:g} s every rank waited "
                                 "for one that will not send (a rank skipped a collective, or "
                                 "called it in another order): " + "; ".join(lines))
        for rank in self.ranks:
            rank.cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        """Record the first failure and wake every rank (lock not held)."""
        with self.lock:
            if self.error is None:
                self.error = exc
            for st in self.ranks:
                st.cond.notify_all()

    def check(self, st: RankState) -> None:
        if self.error is not None:
            raise SimAborted(f"rank {st.rank}: another rank failed: {self.error!r}")

    # ---- the network model -------------------------------------------------------------------
    def inject(self, src: int, dst: int, nbytes: int, t: float) -> float:
        """Reserve the sender's link for a message posted at virtual time ``t``; returns when
        its injection starts (lock held)."""
        net = self.network
        if net.node_of(src) == net.node_of(dst):
            link = self.mem_send[src]
        else:
            link = self.nic_send[net.node_of(src)]
        _, beta = net.link(src, dst)
        start = self._reserve(link, t, nbytes * beta)
        st = self.ranks[src]
        st.send_done = max(st.send_done, start + nbytes * beta)
        return start

    def deliver(self, src: int, dst: int, nbytes: int, start: float) -> float:
        """Reserve the receiver's link for a message whose injection started at ``start``;
        returns when its last byte has arrived (lock held)."""
        net = self.network
        alpha, beta = net.link(src, dst)
        if net.node_of(src) == net.node_of(dst):
            link = self.mem_recv[dst]
        else:
            link = self.nic_recv[net.node_of(dst)]
        rstart = self._reserve(link, start, nbytes * beta)
        return rstart + nbytes * beta + alpha

    def _reserve(self, link: LinkCalendar, ready: float, duration: float) -> float:
        start = link.reserve(ready, duration)
        if link.due_for_pruning():
            # no later request is ready before a running rank's clock or a message in flight
            # (posted, not yet received): what ended before both can go
            times = [st.clock for st in self.ranks if st.rank not in self.returned]
            times += [m["start"] for box in self.mailboxes.values() for m in box]
            if times:
                link.prune(min(times))
        return start


def _called_by_sparcml(depth: int = 12) -> bool:
    """Whether the communicator's caller (the first frame outside :mod:`sparcml.sim`) is
    sparcml's code: the calls a modeled rank is charged the Python of (a user's own ``Send``
    or ``Barrier`` between sparcml calls is not sparcml's software)."""
    frame = sys._getframe(2)
    while frame is not None and depth > 0:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("sparcml.sim"):
            return module.startswith("sparcml.") or module == "sparcml"
        frame = frame.f_back
        depth -= 1
    return False


def _where(frame, depth: int = 5) -> str:
    """``module.function <- ...`` of the ``depth`` innermost calls from ``frame`` outwards."""
    names = []
    while frame is not None and len(names) < depth:
        module = frame.f_globals.get("__name__", "?").rsplit(".", 1)[-1]
        names.append(f"{module}.{frame.f_code.co_name}")
        frame = frame.f_back
    return " <- ".join(names)
