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

from mpi4py import MPI

from .agreement_request import release
from .progress import Waiter, wait_policy
from .workspace import Workspace

__all__ = ["CommContext", "context_for", "new_context", "TrafficStats", "clock_of",
           "use_plain_operations"]

# the operations of contexts on real communicators (sparcml._collectives.ops.PLAIN), given by
# that module when it is imported (it imports this one, not the other way round)
_plain_operations: list = []


def use_plain_operations(ops) -> None:
    """Make ``ops`` the operations of the contexts on real communicators (called once, by
    :mod:`sparcml._collectives.ops`, which defines them: the runtime imports no feature)."""
    _plain_operations[:] = [ops]


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
    ``ops``: the operations the algorithms receive, gather, encode, decode and add through
    (:mod:`sparcml._collectives.ops`; a simulated communicator's share memory between ranks).
    Plugins never see this object: an algorithm's ``run`` and a compressor's hooks receive a
    narrow, read-only :class:`~sparcml.CallContext` made from it per call
    (:mod:`sparcml._runtime.call_context`).

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
      ranks are, without a model, and the calls' options resolved with them
      (:class:`sparcml._model.link_costs.LinkCosts`);
    - ``plans``: the plain calls' cached plans, per key (allreduce's per shape, top-k's per
      shape, k and options: :func:`sparcml._collectives.plan_core.cached_plan`).
    """

    comm: MPI.Comm
    rank: int
    size: int
    waiter: Waiter
    engine: object = None  # the communication thread of iallreduce (nonblocking.Engine)
    workspace: Workspace | None = field(default_factory=Workspace)
    subcomms: dict = field(default_factory=dict)
    ops: object = None  # sparcml._collectives.ops.Ops (new_context gives every context one)
    # the feature modules own these (and import this one, so it names their classes only in
    # words: no import circle, not even a type-only one)
    model: object = None  # sparcml.CostModel
    auto: object = None  # sparcml._model.auto.AutoMemory
    tuning: object = None  # sparcml._model.tuning.TuningState
    partition_memory: object = None  # sparcml._collectives.partition.PartitionMemory
    topk: object = None  # sparcml._topk.rule.TopKMemory
    link_costs: object = None  # sparcml._model.link_costs.LinkCosts
    plans: dict | None = None  # the plain calls' cached plans (_collectives.plan_core)

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
            release(ctx.comm)  # its agreements' persistent request (MPICH holds the comm)
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
    # a simulated communicator brings its own operations (sparcml.sim), else the plain ones
    ops = getattr(dup, "sparcml_ops", None)
    return CommContext(dup, dup.Get_rank(), dup.Get_size(), waiter,
                       ops=_plain_operations[0] if ops is None else ops)


_last = (None, None)  # (an MPI communicator, its context): the latest lookup's


def context_for(comm: MPI.Comm) -> CommContext:
    """The context of ``comm`` (collective on first use: every rank of ``comm`` must call).

    The latest MPI communicator's context is kept aside (a loop of calls on one communicator
    skips the attribute lookup) while its duplicate is not freed (freeing the user's
    communicator frees it: the lookup then fails as MPI says)."""
    global _keyval, _last
    last = _last
    if last[0] is comm and last[1].comm:
        return last[1]
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval(delete_fn=_delete)
    ctx = comm.Get_attr(_keyval)
    if ctx is None:
        ctx = new_context(comm)
        comm.Set_attr(_keyval, ctx)
    if isinstance(comm, MPI.Comm):  # (a simulated one's attributes go with its Free)
        _last = (comm, ctx)
    return ctx
