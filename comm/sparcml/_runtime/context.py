"""Per-communicator state: a private duplicate for sparcml's own traffic, and traffic counters.

The duplicate (made once per communicator, collectively, on the first sparcml call) keeps
sparcml's messages apart from the user's, so wildcard receives inside an algorithm can never
match a user message. It is cached as an MPI attribute and freed with the user's communicator.

What sparcml learns across calls lives in named fields of the context, one per feature, each
a small class owned (defined, created at first use and bounded) by the feature's module:
the calibrated cost model, ``auto``'s remembered choices and overlap, its measured tuning,
the split algorithms' partitions, the global top-k's remembered thresholds, the assumed link
costs. What applications read about a call is in :class:`TrafficStats`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mpi4py import MPI

from .._collectives.ops import PLAIN, Ops, ops_of
from .progress import Waiter, wait_policy
from .workspace import Workspace

if TYPE_CHECKING:  # the feature modules own these (and import this one): names only
    from .._collectives.partition import PartitionMemory
    from .._model.auto import AutoMemory
    from .._model.costmodel import CostModel
    from .._model.tuning import TuningState
    from .._topk.rule import TopKMemory

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
    so for them it is all of ``bytes_sent``). Of the last call: ``algorithm`` (what ``auto``
    chose, for instance), ``hierarchical`` (whether it ran node-aware) and
    ``phase1_received``, the bytes this rank received in the first phase of a split
    algorithm (or of :func:`sparcml.topk_allreduce`'s reduce-scatter; None when the call had
    none on this rank, e.g. a node-aware call's non-leaders), what a benchmark's phase-1
    imbalance is measured from.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    messages: int = 0
    dense_messages: int = 0
    calls: int = 0
    algorithm: str | None = None  # of the last call (what ``auto`` chose, for instance)
    intra_node_bytes: int = 0
    hierarchical: bool = False    # whether the last call ran node-aware (sparcml._collectives.hierarchical)
    phase1_received: int | None = None  # of the last call: bytes received in a split phase 1

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
        self.phase1_received = None


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
    ``ops``: the operations the algorithms receive, gather, encode, decode and add through
    (:mod:`sparcml._collectives.ops`; a simulated communicator's share memory between ranks).

    What is learnt across calls (None until the feature's first call on this context; every
    rank holds the same where the feature says so):

    - ``model``: the calibrated :class:`~sparcml.CostModel` (``sparcml.calibrate``, ``auto``'s
      first call, or ``sparcml.sim.use_model``);
    - ``auto``: ``auto``'s remembered choices, the inputs' overlap and result sizes, the
      node-aware models (:class:`sparcml._model.auto.AutoMemory`);
    - ``tuning``: ``auto``'s measured refinement (:class:`sparcml._model.tuning.TuningState`);
    - ``partition_memory``: the split algorithms' block boundaries and their checks
      (:class:`sparcml._collectives.partition.PartitionMemory`);
    - ``topk``: the global top-k's remembered thresholds and the running call's synchronizing
      steps (:class:`sparcml._topk.rule.TopKMemory`);
    - ``link_costs``: ``(seconds per byte, seconds per coded index)`` assumed from where the
      ranks are, without a model (:mod:`sparcml._model.link_costs`);
    - ``plans``: the buffers of the plain allreduce's fast path, per shape
      (:func:`sparcml._collectives.entry._fast_path`);
    - ``lean``: the agreement arrays of the plain call's lean path, per shape and options
      (:func:`sparcml._collectives.entry._lean_call`).
    """

    comm: MPI.Comm
    rank: int
    size: int
    waiter: Waiter
    engine: object = None  # the communication thread of iallreduce (nonblocking.Engine)
    workspace: Workspace | None = field(default_factory=Workspace)
    partitions: str = "balanced"  # the split algorithms' blocks (sparcml._collectives.partition), per call
    subcomms: dict = field(default_factory=dict)
    ops: Ops = PLAIN
    model: CostModel | None = None
    auto: AutoMemory | None = None
    tuning: TuningState | None = None
    partition_memory: PartitionMemory | None = None
    topk: TopKMemory | None = None
    link_costs: tuple[float, float] | None = None
    plans: dict | None = None  # the plain calls' cached fast paths (sparcml._collectives.plan)
    lean: dict | None = None  # the lean plain calls' agreement arrays (entry._lean_call)

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
    return CommContext(dup, dup.Get_rank(), dup.Get_size(), waiter, ops=ops_of(dup))


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
