"""Node-aware (hierarchical) allreduce: reduce in the node, allreduce among leaders, broadcast.

With R ranks per node, a flat algorithm sends every rank's messages over the node's one
network link, so the link carries R ranks' volume. The node-aware scheme (``hierarchical=True``
on :func:`sparcml.allreduce` / :func:`sparcml.iallreduce`) sends one stream per node instead:

1. **Node reduce.** The ranks of a node (``comm.Split_type(MPI.COMM_TYPE_SHARED)``) send their
   whole input, at full precision, to the node's leader (its lowest rank), which sums the R
   inputs in rank order (one many-way merge; dense when any input is).
2. **Inter-node allreduce.** The leaders (one sub-communicator, ranks in the order of ``comm``)
   run the chosen registered algorithm, unchanged, on the node sums: any algorithm of
   :data:`sparcml.ALGORITHMS`, with the call's quantizer.
3. **Node broadcast.** Each leader broadcasts the result in its node: a dense result as its
   raw values (straight into the receivers' ``out=`` when given), a sparse one as one wire
   message.

Node transport: on a real MPI communicator the node phases go through one shared-memory
window per node (``MPI.Win.Allocate_shared``, a slot per node rank, grown as needed): each rank
writes its message into its slot, a node barrier, the leader reads the slots in place (and
the same backwards for the result), which avoids MPI's chunked shared-memory copies and their
polling. Elsewhere (``Options(node_shm=False)``, or a communicator that is not an
``MPI.Intracomm``, such as :mod:`sparcml.sim`'s) they are messages to the leader and a
``Bcast``: on nodes of ``Options.native_min_ranks`` ranks or more one ``Gather`` of the sizes
and one ``Gatherv`` of the bytes (``ctx.ops.gather_bytes``: MPI loops over the node's ranks),
on smaller ones point-to-point messages. All give the same bits.

Why an option and not a registry record: the scheme wraps *any* registered algorithm, so as
records it would be one per inner algorithm (doubling the registry, the CLI choices and the
name literals), and ``auto`` would still have to pair them up. As an option the records and
their ``run`` contract stay as they are (the inner algorithm runs on the leaders' context like
on any communicator), and ``auto`` (:func:`sparcml._model.auto.choose_node_aware`) chooses the pair
(algorithm, hierarchical) from the cost model (:meth:`sparcml.CostModel.predict_hierarchical`).
MPI calls of the point-to-point path: ``Split_type``, ``Split``, ``allgather`` (the layout),
``Isend``/``Mprobe``/``Irecv`` and ``Bcast`` on the node, plus what the inner algorithm uses.

Every rank gets the same result. Its order of addition is: each node's inputs in rank order,
then the nodes as the inner algorithm adds them; so it equals the flat algorithm's result
bitwise when every node has one rank, and the rank-order sum when there is one node; otherwise
it agrees up to float rounding (exactly, for values whose sums are exact).

Placement: nodes need not hold contiguous ranks nor the same number of ranks. The grouping is
MPI's (``COMM_TYPE_SHARED``) unless ``Options(ranks_per_node=R)`` (default:
``SPARCML_RANKS_PER_NODE``) says otherwise: then ranks ``[jR, (j+1)R)`` of the communicator
form node j (the last node may be smaller). That is for trying multi-node paths on one machine (tests, the simulator); every
rank must set the same value (agreed on, like the other arguments). Layouts are made
collectively at the first call that needs one and cached on the context
(:attr:`~sparcml._runtime.context.CommContext.subcomms`), freed with it.

Traffic: the node phases' bytes are counted in ``stats.intra_node_bytes`` (a non-leader's
input to its leader; the leader's broadcast, as ``(R-1)`` times the message, like
:func:`sparcml.bcast`); the inner algorithm's in ``bytes_sent`` only, so
``stats.inter_node_bytes`` on a leader is what its node sent over the network.

Quantization: the node phases are lossless (shared memory is not the bottleneck); only the
inner algorithm's messages are quantized. For error feedback (``sent``), an input that travels
only inside its node's sum is reported unchanged, as the fold partners of recursive doubling do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from . import arith
from .._runtime.agreement_request import release
from .._runtime.call_context import call_context
from .._runtime.context import CommContext, TrafficStats, context_for
from .._errors import InvalidArgumentError
from .exchange import as_vector, encode_vector, send_vector
from .ops import MAX_COUNT
from .._registry import AUTO
from .._runtime.shm_window import SharedWindow
from .._runtime.tags import message_tags
from .._vector import SparseVector

__all__ = ["NodeLayout", "hierarchical_code", "check_hierarchical", "layout_for", "node_sizes",
           "run"]

_TAG_NODE_REDUCE = message_tags("sparcml.hierarchical", "node_reduce").node_reduce
_DENSE, _SPARSE = 1, 2  # what the node broadcast carries


def check_hierarchical(hierarchical, algorithm) -> object:
    """The effective option: True, False or ``"auto"``. None (the default) means ``"auto"``
    when ``algorithm`` is ``"auto"``, else False. Raises :class:`InvalidArgumentError`."""
    if hierarchical is None:
        return AUTO if algorithm == AUTO else False
    if isinstance(hierarchical, (bool, np.bool_)):
        return bool(hierarchical)
    if hierarchical == AUTO:
        return AUTO
    raise InvalidArgumentError(f"hierarchical must be True, False, {AUTO!r} or None, got "
                               f"{hierarchical!r}")


def hierarchical_code(option) -> int:
    """The effective option as an integer for agreement (0 False, 1 True, 2 auto)."""
    return 2 if option == AUTO else int(bool(option))


@dataclass
class NodeLayout:
    """The node structure of one communicator, the same on every rank.

    ``node``: a context on this rank's node (node rank 0 is the leader); ``leaders``: a context
    on the leaders' sub-communicator (None on the other ranks); ``nodes``: the number of nodes;
    ``largest``: ranks on the most populated node; ``sizes``: ranks per node, in leader order.
    """

    node: CommContext
    leaders: CommContext | None
    nodes: int
    largest: int
    sizes: tuple
    slots: SharedWindow | None = None

    @property
    def is_leader(self) -> bool:
        return self.node.rank == 0

    @property
    def trivial(self) -> bool:
        """One rank per node: the hierarchical scheme is the flat one."""
        return self.largest == 1

    def free(self) -> None:
        if self.slots is not None and not MPI.Is_finalized():
            self.slots.free()
        for sub in (self.node, self.leaders):
            if sub is not None and sub.comm != MPI.COMM_NULL and not MPI.Is_finalized():
                release(sub.comm)  # a persistent agreement request, if one ran there
                sub.comm.Free()


def layout_for(ctx: CommContext, ranks_per_node: int) -> NodeLayout:
    """The layout of ``ctx.comm`` (collective at the first call per grouping; cached after).
    ``ranks_per_node``: 0 for MPI's grouping by shared memory, else the forced grouping."""
    key = ("nodes", ranks_per_node)
    layout = ctx.subcomms.get(key)
    if layout is not None:
        return layout
    comm, rank = ctx.comm, ctx.rank
    if ranks_per_node:
        node_comm = comm.Split(rank // ranks_per_node, rank)
    else:
        node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, rank)
    leader = node_comm.Get_rank() == 0
    leaders_comm = comm.Split(0 if leader else MPI.UNDEFINED, rank)
    facts = comm.allgather((leader, node_comm.Get_size()))
    sizes = tuple(size for is_leader, size in facts if is_leader)

    def sub(c):  # the parent's waiter, workspace, ops: a sub-context never runs concurrently
        return CommContext(c, c.Get_rank(), c.Get_size(), ctx.waiter, workspace=ctx.workspace,
                           ops=ctx.ops)

    layout = NodeLayout(sub(node_comm), sub(leaders_comm) if leader else None, len(sizes),
                        max(sizes), sizes)
    if isinstance(node_comm, MPI.Intracomm) and node_comm.Get_size() > 1:
        layout.slots = SharedWindow()
    ctx.subcomms[key] = layout
    return layout


def node_sizes(comm: MPI.Comm | None = None, *, options=None) -> tuple[int, ...]:
    """The ranks of each node of ``comm`` (default ``COMM_WORLD``), in the order of the nodes'
    leaders, as ``hierarchical=True`` groups them: by shared memory (MPI's
    ``COMM_TYPE_SHARED``), or in blocks of ``options.ranks_per_node`` consecutive ranks when
    that is set (``options`` None: the process defaults, ``SPARCML_RANKS_PER_NODE``). Every
    rank must pass the same; collective at the first call per communicator and grouping."""
    from .._options import resolve_options

    forced = resolve_options(options).ranks_per_node or 0
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    return tuple(layout_for(ctx, forced).sizes)


def run(ctx: CommContext, layout: NodeLayout, record, vec: SparseVector, *, stats: TrafficStats,
        codec, nnz_max: int, out=None, sent=None, shm: bool = True) -> SparseVector:
    """One node-aware allreduce with the inner algorithm ``record`` (a registry record).

    Called on every rank of ``ctx`` after the agreement, with ``vec`` as the entry point hands
    it to a flat algorithm (normalized unless ``record.writes_out``). Returns the same sum on
    every rank (see the module docstring); a dense result is written into ``out`` when given.
    ``nnz_max``: the largest input nnz over the ranks (agreed; it sizes the shared window).
    ``shm``: the node phases through the shared-memory window where there is one (the same
    value on every rank).
    """
    node = layout.node
    slots = layout.slots if shm else None
    intra = TrafficStats()
    total = vec
    if node.size > 1:
        if sent is not None:
            sent.append(arith.as_part(vec))
            sent = None
        if slots is not None:
            # any input, any result: dense from the algorithms that write out=, else at most
            # P nnz_max items; quantized sparse values make the rule densify earlier than the
            # lossless node messages would, so then everything may be dense
            early = codec.quantize_sparse
            result_items = vec.dim if record.writes_out or early else ctx.size * nnz_max
            if not slots.ensure(node, _HEAD + codec.message_bound(result_items, vec.dim),
                                codec.message_bound(vec.dim if early else nnz_max, vec.dim)):
                slots = None  # no room in the node's shared memory (agreed in the node)
        if slots is not None:
            total = _node_reduce_shared(node, slots, vec, codec, intra)
        elif _native_gather(node, vec.dim, codec):
            total = _node_reduce_native(node, vec, codec, intra)
        elif layout.is_leader:
            total = _node_reduce(node, vec, codec)
        else:
            send_vector(node, vec, 0, _TAG_NODE_REDUCE, intra, codec.lossless())
    result = None
    if layout.is_leader:
        if layout.nodes > 1:
            inner_out = out if record.writes_out else None
            given = total if record.writes_out else arith.normalize(total, codec)
            leaders = call_context(layout.leaders, codec.options, record.tags.allocated)
            result = record.run(leaders, given, stats=stats, codec=codec, out=inner_out,
                                sent=sent)
        elif record.writes_out and not total.is_dense:
            result = SparseVector.unchecked(vec.dim, None, total.to_dense())
        else:
            result = arith.normalize(total, codec)
    if node.size > 1 and slots is not None:
        result = _bcast_shared(node, slots, result, vec, out, intra, codec)
    elif node.size > 1:
        result = _node_bcast(node, result, vec, out, intra, codec)
    stats.bytes_sent += intra.bytes_sent
    stats.intra_node_bytes += intra.bytes_sent
    stats.messages += intra.messages
    stats.dense_messages += intra.dense_messages
    return result


def _node_reduce(node: CommContext, vec: SparseVector, codec) -> SparseVector:
    """On the leader: its input plus the node's others, in node-rank order."""
    parts = [None] * node.size
    parts[0] = arith.as_part(vec)
    status = MPI.Status()
    for _ in range(node.size - 1):
        buf, source = node.ops.recv_bytes(node, MPI.ANY_SOURCE, _TAG_NODE_REDUCE, status)
        parts[source] = node.ops.decode(buf)
    folded = node.ops.fold_parts(parts, 0, vec.dim, codec, workspace=node.workspace)
    return as_vector(folded, vec.dim)


def _native_gather(node: CommContext, dim: int, codec) -> bool:
    """Whether the node reduce runs as ``Gather`` + ``Gatherv`` (from the call's
    ``Options.native_min_ranks`` node ranks, ``codec.options``, when MPI's int counts hold any
    input)."""
    bound = 2 * codec.lossless().message_bound(dim, dim) + 64
    return codec.options.native(node.size) and node.size * bound <= MAX_COUNT


def _node_reduce_native(node: CommContext, vec: SparseVector, codec,
                        intra: TrafficStats) -> SparseVector:
    """The node reduce through ``node.ops.gather_bytes``: on the leader, the node's sum (rank
    order, as :func:`_node_reduce`); the other ranks' input unchanged."""
    if node.rank != 0:
        buf, dense = encode_vector(node, vec, codec.lossless())
        intra.add_message(buf.nbytes, dense)
        node.ops.gather_bytes(node, buf, intra, 0)
        return vec
    bufs = node.ops.gather_bytes(node, np.empty(0, np.uint8), intra, 0)
    parts = [arith.as_part(vec)] + [node.ops.decode(b) for b in bufs[1:]]
    folded = node.ops.fold_parts(parts, 0, vec.dim, codec, workspace=node.workspace)
    return as_vector(folded, vec.dim)


def _node_bcast(node: CommContext, result, vec: SparseVector, out, intra: TrafficStats,
                codec) -> SparseVector:
    """The leader's result on every rank of the node (dense values raw, sparse as a message)."""
    head = np.zeros(2, np.int64)
    buf = None
    if node.rank == 0:
        if result.is_dense:
            head[:] = (_DENSE, result.values.nbytes)
        else:
            buf, _ = encode_vector(node, result, codec.lossless())
            head[:] = (_SPARSE, buf.nbytes)
    node.waiter.collective(node.comm, "Bcast", head, 0)
    kind, nbytes = int(head[0]), int(head[1])
    if node.rank == 0:
        intra.add_message(nbytes * (node.size - 1), kind == _DENSE)
        data = result.values if kind == _DENSE else buf
        node.ops.bcast_bytes(node, data.view(np.uint8), nbytes)
        return result
    if kind == _DENSE:
        got = node.ops.bcast_bytes(node, None, nbytes,
                                   out=None if out is None else out.view(np.uint8))
        values = out if out is not None else got.view(vec.dtype)
        return SparseVector.unchecked(vec.dim, None, values)
    buf = node.ops.bcast_bytes(node, None, nbytes)
    return as_vector(node.ops.decode(buf), vec.dim)


_HEAD = 16  # the leader's slot: (kind, bytes) of the result, then the result


def _node_reduce_shared(node: CommContext, slots: SharedWindow, vec: SparseVector, codec,
                        intra: TrafficStats) -> SparseVector:
    """The node reduce through the window: on the leader, the node's sum (rank order)."""
    if node.rank != 0:
        buf, dense = encode_vector(node, vec, codec.lossless())
        slots.views[node.rank][:buf.nbytes] = buf
        intra.add_message(buf.nbytes, dense)
    slots.barrier(node)
    if node.rank != 0:
        return vec
    parts = [arith.as_part(vec)] + [node.ops.decode(slots.views[r])
                                    for r in range(1, node.size)]
    folded = node.ops.fold_parts(parts, 0, vec.dim, codec, workspace=node.workspace)
    return as_vector(folded, vec.dim)  # fresh arrays: a fold of two or more parts


def _bcast_shared(node, slots, result, vec, out, intra, codec) -> SparseVector:
    """The leader's result on the node's ranks through the leader's slot (one barrier)."""
    head = _HEAD
    leader = slots.views[0]
    if node.rank == 0:
        if result.is_dense:
            kind, data = _DENSE, result.values.view(np.uint8)
        else:
            kind, data = _SPARSE, encode_vector(node, result, codec.lossless())[0]
        leader[:head].view(np.int64)[:] = (kind, data.nbytes)
        leader[head:head + data.nbytes] = data
        intra.add_message(data.nbytes * (node.size - 1), kind == _DENSE)
    slots.barrier(node)
    if node.rank == 0:
        return result
    kind, nbytes = (int(x) for x in leader[:head].view(np.int64))
    data = leader[head:head + nbytes]
    if kind == _DENSE:
        values = out if out is not None else np.empty(vec.dim, vec.dtype)
        values.view(np.uint8)[:] = data
        return SparseVector.unchecked(vec.dim, None, values)
    return as_vector(node.ops.decode(data.copy()), vec.dim)
