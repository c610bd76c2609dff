"""Per-communicator state: a private duplicate for sparcml's own traffic, and traffic counters.

The duplicate (made once per communicator, collectively, on the first sparcml call) keeps
sparcml's messages apart from the user's, so wildcard receives inside an algorithm can never
match a user message. It is cached as an MPI attribute and freed with the user's communicator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mpi4py import MPI

from .progress import Waiter, wait_policy
from .workspace import Workspace

__all__ = ["CommContext", "context_for", "new_context", "TrafficStats", "clock_of"]


def clock_of(comm):
    """The clock to time calls on ``comm`` with (a function returning seconds): a simulated
    communicator's virtual clock (:mod:`sparcml.sim`), else the wall clock."""
    return getattr(comm, "clock", time.perf_counter)


@dataclass
class TrafficStats:
    """What one rank moved in sparcml calls; pass one as ``stats=`` to accumulate into it.

    ``bytes_sent``: exact for point-to-point messages; inside MPI collectives it is the per-rank
    volume of the bandwidth-optimal algorithm (for an allgather, the gathered bytes this rank
    does not hold itself; for a dense allreduce, 2 (P-1)/P of the vector). ``bytes_received``:
    the same count for what this rank received (with balanced partitions, the split
    algorithms' owners receive about the same). ``dense_messages`` counts messages that went
    dense by the switch rule. ``intra_node_bytes``: the part of ``bytes_sent`` that the
    node-local phases of hierarchical calls sent (to or from the node's leader); the rest,
    :attr:`inter_node_bytes`, is what left the node (flat calls attribute nothing to the node,
    so for them it is all of ``bytes_sent``).
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    messages: int = 0
    dense_messages: int = 0
    calls: int = 0
    algorithm: str | None = None  # of the last call (what ``auto`` chose, for instance)
    intra_node_bytes: int = 0
    hierarchical: bool = False    # whether the last call ran node-aware (sparcml._collectives.hierarchical)

    @property
    def inter_node_bytes(self) -> int:
        """``bytes_sent`` less the node-local phases' bytes."""
        return self.bytes_sent - self.intra_node_bytes

    def add_message(self, nbytes: int, dense: bool) -> None:
        self.bytes_sent += int(nbytes)
        self.messages += 1
        self.dense_messages += int(dense)

    def reset(self) -> None:
        self.bytes_sent = self.bytes_received = self.messages = self.dense_messages = 0
        self.calls = 0
        self.intra_node_bytes = 0
        self.algorithm = None
        self.hierarchical = False


@dataclass
class CommContext:
    """sparcml's state for one user communicator.

    ``workspace``: the reusable scratch buffers of the calls on this context (see
    :mod:`sparcml._runtime.workspace` for who owns what). The non-blocking engine runs on a context of
    its own, so no two threads ever share one. ``subcomms``: sub-communicators made from
    ``comm`` and cached for later calls (the node layouts of :mod:`sparcml._collectives.hierarchical`),
    each with a ``free()`` method; :meth:`free_subcomms` frees them (collective).
    ``partitions``: the policy of the split algorithms' blocks in the running call
    (:mod:`sparcml._collectives.partition`; set by the entry point from the value every rank agreed on).
    """

    comm: MPI.Comm
    rank: int
    size: int
    waiter: Waiter
    history: dict = field(default_factory=dict)
    engine: object = None  # the communication thread of iallreduce (nonblocking.Engine)
    workspace: Workspace | None = field(default_factory=Workspace)
    partitions: str = "balanced"  # the split algorithms' blocks (sparcml._collectives.partition), per call
    subcomms: dict = field(default_factory=dict)

    def free_subcomms(self) -> None:
        """Free the cached sub-communicators (collective over ``comm``, like ``Comm.Free``)."""
        while self.subcomms:
            _, sub = self.subcomms.popitem()
            sub.free()


_keyval = None


def _delete(comm, keyval, ctx):  # called by MPI when the user's communicator is freed
    try:
        if ctx.comm != MPI.COMM_NULL and not MPI.Is_finalized():
            if ctx.engine is not None:
                ctx.engine.close()  # its thread frees its own context's sub-communicators
            ctx.free_subcomms()
            ctx.comm.Free()
    except MPI.Exception:  # pragma: no cover - freeing during finalize
        pass


def new_context(comm: MPI.Comm, waiter: Waiter | None = None) -> CommContext:
    """A context on a fresh duplicate of ``comm`` (collective)."""
    dup = comm.Dup()
    if waiter is None:
        auto = wait_policy(dup)
        # each call then waits as its (agreed) options say; until then alike on every rank
        waiter = Waiter(auto, auto=auto)
    return CommContext(dup, dup.Get_rank(), dup.Get_size(), waiter)


def context_for(comm: MPI.Comm) -> CommContext:
    """The context of ``comm`` (collective on first use: every rank of ``comm`` must call)."""
    global _keyval
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval(delete_fn=_delete)
    ctx = comm.Get_attr(_keyval)
    if ctx is None:
        ctx = new_context(comm)
        comm.Set_attr(_keyval, ctx)
    return ctx
