"""Persistent plans of :func:`sparcml.topk_allreduce`: dim, dtype, k and options fixed once.

``plan = sparcml.topk_plan(dim, dtype, k, comm)`` is collective and agrees on its arguments
once; each ``plan.topk_allreduce(vec)`` then runs without the agreement round of the plain
call. That round carried two things besides the check: "did any rank fail" and the largest
``|input|`` over ranks (the bound of the selection's histogram, :mod:`sparcml._topk.rule`).
Both now ride on the reduce-scatter, whose schedule sends one message from every rank to every
other anyway: each message ends in a 16-byte trailer (an error flag, this rank's largest
magnitude key) after the wire message (:func:`sparcml._wire.codec.decode` reads the message
and ignores what follows it). So after the reduce-scatter every rank knows the same bound,
and whether any rank's input was bad (a NaN or Inf: :class:`~sparcml.CompressionError`;
another dim or dtype; any exception in validation); then every rank raises the same error
(:func:`sparcml._collectives.plan.agreed_error`), or the selection and the allgather run as in
the plain call. Results are bitwise those of :func:`sparcml.topk_allreduce`.

The plan's reduce-scatter always travels as messages (not through the one-node window of
:mod:`sparcml._topk.node_exchange`): point to point with trailers below
``Options.native_min_ranks`` ranks, packed in one ``Alltoallv`` from there (the trailer beside
each message's size in the ``Alltoall`` that precedes it); the selection and allgather are
the plain call's.

Like :func:`sparcml.plan`'s, every call first checks that every rank is in this plan (one
small agreement of the plan's identity: :mod:`sparcml._collectives.plan_identity`), so
that crossed calls raise :class:`~sparcml.RankMismatchError` on every rank.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._collectives import arith
from .._collectives.fail_stop import abort_job
from .._collectives.exchange import native_split, send_packed, split_parts
from .._collectives.partition import SPARSE_KIND, note_received
from .._collectives.partition import memory_of as partition_memory_of
from .._collectives.ops import PLAIN
from .._collectives.plan_core import PlanShapeError, agreed_error, check_plan_input
from .._collectives.plan_identity import PlanIdentity, next_plan_id, note_plan_id
from .._collectives.plan_fast import FastRecursiveDoubling, fits
from .._collectives.validation import check_stats
from .._errors import CompressionError, InvalidArgumentError
from .._model.link_costs import call_options
from .._options import Options
from .._runtime.agreement import VALUE_DTYPE_NAMES, agreed_call
from .._runtime.context import CommContext, TrafficStats, context_for
from .._runtime.tags import message_tags
from .._vector import SparseVector, _value_dtype
from .._wire.codec import Codec
from .rule import KEYS, NOTHING, memory_of, step
from .topk_allreduce import (NAME, TopKReduced, _check_k, _dropped, _max_key, _result, _run,
                             _selection, partition_bounds)
from .._lazy import lazy_module
select_kernels = lazy_module("sparcml._topk.select_kernels")

__all__ = ["TopKPlan", "topk_plan", "serves", "SERVED_DENSE_BYTES"]

# top-k's own bound of its P = 2 steady path (the allreduce fast path's is 64 MiB): 8 MiB
# dense, as before that bound was raised (see serves)
SERVED_DENSE_BYTES = 8 << 20

TAG_PLAN_SPLIT = message_tags(NAME, "plan_split").plan_split  # the plan's reduce-scatter (named
# sources, in rank order)
_TRAILER = 16
_DESCRIBE = {"value dtype": VALUE_DTYPE_NAMES}


class TopKPlan:
    """A persistent :func:`sparcml.topk_allreduce` of vectors of one dim and dtype with one
    k (see the module docstring; made by :func:`sparcml.topk_plan`). Attributes: ``dim``,
    ``dtype``, ``k``, ``options``, ``comm``, ``calls``, ``follow_shape``."""

    def __init__(self, dim, dtype, k: int, comm: MPI.Comm | None = None, *,
                 options: Options | None = None, follow_shape=False):
        comm = MPI.COMM_WORLD if comm is None else comm
        self._make(context_for(comm), comm, dim, dtype, k, options=options,
                   follow_shape=follow_shape)

    @classmethod
    def _on_context(cls, ctx: CommContext, dim, dtype, k: int, **options) -> "TopKPlan":
        """A plan made on ``ctx`` (a communication thread's, say), for
        :meth:`topk_allreduce_in` on it; ``options``: the constructor's keywords. Collective
        over ``ctx.comm``."""
        self = cls.__new__(cls)
        self._make(ctx, ctx.comm, dim, dtype, k, **options)
        return self

    def _make(self, ctx: CommContext, comm: MPI.Comm, dim, dtype, k: int, *, options=None,
              follow_shape=False) -> None:
        with agreed_call(ctx, options, {"dim": -1, "value dtype": -1, "k": -1,
                                        "follow_shape": -1},
                         _DESCRIBE, maxima={"plan id": next_plan_id()}) as call:
            call.fields["follow_shape"] = _follow_code(follow_shape)
            k = _check_k(k)
            call.fields["k"] = k
            zero = SparseVector.zeros(dim, _value_dtype(np.empty(0, dtype)))
            call.fields["dim"] = zero.dim
            call.fields["value dtype"] = zero.dtype.itemsize
        self._setup(ctx, comm, zero, k, call.options)
        self.follow_shape = follow_shape
        self.number = call.agreed["plan id"]
        note_plan_id(self.number)
        self._identity = PlanIdentity(f"plan #{self.number}: topk_allreduce of dim {self.dim} "
                                      f"{self.dtype.name}, k = {k}")

    def _setup(self, ctx, comm, zero: SparseVector, k: int, options: Options) -> None:
        self.comm, self.k, self.options, self.calls = comm, k, options, 0
        self.dim, self.dtype = zero.dim, zero.dtype
        self._zero = zero
        self._codec = Codec(zero.index_dtype, zero.dtype,
                            options=call_options(ctx, self.options))
        self._contexts: dict[int, CommContext] = {}
        self._fast: dict[int, FastRecursiveDoubling] = {}
        self._trailer = np.zeros(2, np.int64)

    @classmethod
    def agreed(cls, ctx, dim: int, dtype, k: int, options: Options) -> "TopKPlan":
        """The plan of a plain :func:`sparcml.topk_allreduce` whose agreement already ran
        (dim, dtype, k and ``options`` equal on every rank): made locally, no collective and
        no identity (the plain call's agreement, one reduction per call, is its crossing
        check). Only :meth:`serve` runs it; see :func:`serves`."""
        plan = cls.__new__(cls)
        plan._setup(ctx, ctx.comm, SparseVector.zeros(dim, np.dtype(dtype)), k, options)
        plan.number, plan._identity, plan.follow_shape = None, None, False
        plan.agreements = {}  # its calls' agreement arrays and codecs (entry._lean_call)
        return plan

    def serve(self, ctx, vec: SparseVector, stats: TrafficStats, codec) -> TopKReduced:
        """A plain call after its agreement (every rank's input valid and finite, ``k > 0``,
        some input nonzero; :func:`serves` true): the plan's steady path with the call's
        ``codec``, bitwise the general path's result. Collective."""
        self.calls += 1
        memory_of(ctx).steps = 2  # the agreement and the one exchange
        return self._two_ranks(ctx, self._fast_on(ctx), vec, stats, None, codec)

    def __repr__(self) -> str:
        return (f"TopKPlan(dim={self.dim}, dtype={self.dtype.name}, k={self.k}, "
                f"P={self.comm.Get_size()})")

    def _context(self, ctx) -> CommContext:
        """The plan's own context on ``ctx`` (its remembered thresholds)."""
        own = self._contexts.get(id(ctx))
        if own is None or own.comm is not ctx.comm:
            own = self._contexts[id(ctx)] = CommContext(
                ctx.comm, ctx.rank, ctx.size, ctx.waiter, workspace=ctx.workspace, ops=ctx.ops,
                model=ctx.model, link_costs=ctx.link_costs,
                partition_memory=partition_memory_of(ctx))  # the same blocks as plain calls
        return own

    def topk_allreduce(self, vec, *, stats: TrafficStats | None = None,
                       check: bool = True) -> TopKReduced:
        """``(result, dropped)`` of :func:`sparcml.topk_allreduce` with the plan's k
        (collective over the plan's communicator)."""
        return self.topk_allreduce_in(context_for(self.comm), vec, stats=stats, check=check)

    def itopk_allreduce(self, vec, *, stats: TrafficStats | None = None, check: bool = True):
        """Non-blocking :meth:`topk_allreduce`: a :class:`~sparcml.Request`."""
        from .._runtime.nonblocking import submit

        return submit(self.comm, f"plan.itopk_allreduce(k={self.k})", _submitted, self, vec,
                      stats, check)

    def topk_allreduce_in(self, ctx, vec, *, stats=None, check=True) -> TopKReduced:
        """:meth:`topk_allreduce` on a context (the blocking path's or a communication
        thread's)."""
        if not self.follow_shape:
            return self._call(ctx, vec, stats, check)
        try:
            return self._call(ctx, vec, stats, check)
        except PlanShapeError as exc:  # raised alike on every rank: all remake the plan here
            dim, dtype = exc.shape
        follow = self.follow_shape
        k = follow(dim) if callable(follow) else self.k
        self._make(ctx, self.comm, dim, dtype, k, options=self.options, follow_shape=follow)
        return self._call(ctx, vec, stats, check)

    def _call(self, ctx, vec, stats, check) -> TopKReduced:
        own = self._context(ctx)
        error, top = None, 0
        try:
            v = check_plan_input(vec, self.dim, self.dtype, check=check)
            if stats is not None and type(stats) is not TrafficStats:
                stats = check_stats(stats)
            top = _max_key(v)
        except Exception as exc:  # noqa: BLE001 - any error is this rank's, raised everywhere
            error, v, stats, top = exc, self._zero, None, 0
        if ctx.size > 1:
            self._identity.check(ctx)  # the same plan on every rank, or one error everywhere
        self.calls += 1
        opts = self.options
        fast = self._fast_on(own) if ctx.size > 1 else None
        if fast is not None:
            return self._two_ranks(own, fast, v, stats, error, self._codec)
        if stats is None:
            stats = TrafficStats()
        if ctx.size == 1:
            if error is not None:
                agreed_error(ctx, error)
            return _run(own, v, self.k, stats, opts, top, v.nnz)
        stats.calls += 1
        stats.algorithm = NAME
        memory_of(own).steps = 0
        codec, k = self._codec, self.k
        try:
            vn = arith.normalize(v, codec)
            bounds = partition_bounds(own, vn, codec)
            lo, hi = int(bounds[own.rank]), int(bounds[own.rank + 1])
            before = stats.bytes_received
            parts, top, failed = self._reduce_scatter(own, vn, stats, bounds, top,
                                                      error is not None)
            note_received(own, v.dim, SPARSE_KIND, stats.bytes_received - before, stats,
                          codec)
            step(own)
            if failed:
                result = None
            elif k == 0 or top == 0:
                result, nan = SparseVector.unchecked(v.dim, np.empty(0, v.index_dtype),
                                                     np.empty(0, v.dtype)), 0
            else:
                if isinstance(parts, tuple):  # packed: (receive buffer, displs, sizes)
                    block = own.ops.fold_packed(*parts, lo, hi - lo, codec,
                                                workspace=own.workspace, intermediate=True)
                else:
                    block = own.ops.fold_parts(parts, lo, hi - lo, codec,
                                               workspace=own.workspace, intermediate=True)
                bits_dtype, absmask = KEYS[codec.value_dtype][:2]
                keys = own.workspace.get("topk.keys", block.values.size, np.uint64) \
                    if own.workspace is not None else np.empty(block.values.size,
                                                               np.uint64)
                select_kernels.magnitude_keys_into(block.values.view(bits_dtype), absmask,
                                                   keys)
                result, nan = _selection(own, v, (block, keys), lo, k, top, stats, codec,
                                         None)
        except BaseException as exc:  # noqa: BLE001 - as fail_stop
            abort_job(own.comm, f"plan.{NAME}", exc)
            raise
        if failed:
            agreed_error(own, error)
        if nan:
            raise CompressionError(
                f"the sum of the inputs overflowed to NaN in {nan} entries (Inf - Inf); "
                f"scale the inputs down")
        return TopKReduced(result, _dropped(v, result.indices))

    def _fast_on(self, ctx) -> FastRecursiveDoubling | None:
        """At P = 2 on real ranks, for dims of the fast path: the plan's own buffers."""
        fast = self._fast.get(id(ctx))
        if fast is not None and fast.comm is ctx.comm:  # (made only where a plan serves)
            return fast
        if not serves(ctx, self.dim, self.dtype):
            return None
        fast = self._fast[id(ctx)] = FastRecursiveDoubling(ctx, self.dim, self.dtype)
        return fast

    def _two_ranks(self, ctx, fast, v, stats, error, codec) -> TopKReduced:
        """P = 2: one exchange of the whole inputs (the plain recursive doubling's, on the
        plan's buffers; its header flag carries a bad input), then the same selection on both
        ranks. Bitwise the reduce-scatter's result: at two ranks both sum each entry as
        ``lower rank's + higher rank's`` value, and the k largest ``|sum|`` (ties to the lower
        index, zero sums never selected) do not depend on where they were summed."""
        if stats is not None:  # (None: the call is counted nowhere)
            stats.calls += 1
            stats.algorithm = NAME
        try:
            idx, val, _ = fast.run(v, stats, error is not None, codec)
        except BaseException as exc:  # noqa: BLE001 - as fail_stop
            abort_job(ctx.comm, f"plan.{NAME}", exc)
            raise
        if fast.seen:
            agreed_error(ctx, error)
        # no NaN check here, unlike the reduce-scatter path: the inputs are finite (_max_key)
        # and one addition of two finite values overflows to Inf at worst, never to NaN
        if idx is None:  # the sum went dense
            idx = np.flatnonzero(val)
            val = val[idx]
        elif not val.all():  # (a zero sum, -0.0 included: not selected)
            keep = val != 0
            idx, val = idx[keep], val[keep]
        idx = idx.astype(codec.index_dtype, copy=False)
        if self.k == 0:
            idx, val = idx[:0], val[:0]
        result = _result(self.dim, idx, val, self.dtype, NOTHING,
                         self.k if idx.size > self.k else None)
        return TopKReduced(result, _dropped(v, result.indices))

    def _reduce_scatter(self, ctx, vec, stats, bounds, top: int, failed: bool):
        """Phase 1 of the split algorithms with each message's trailer: ``(the P parts of
        this rank's block in source order, the largest key over ranks, any rank failed)``.
        From ``Options.native_min_ranks`` ranks the messages are packed and travel in one
        ``Alltoallv`` (:func:`sparcml._collectives.exchange.reduce_block`'s path), the trailer
        beside each size in its ``Alltoall``; the parts are then ``(receive buffer, displs,
        sizes)`` for ``Ops.fold_packed``."""
        rank, size, ops, codec = ctx.rank, ctx.size, ctx.ops, self._codec
        if native_split(ctx, bounds, codec):
            buf, displs, rsizes, extras = send_packed(
                ctx, vec, stats, bounds, codec, np.array([int(failed), top], np.int64))
            return ((buf, displs, rsizes), int(extras[:, 1].max()),
                    failed or bool(extras[:, 0].any()))
        mine = split_parts(vec, bounds)
        trailer = self._trailer
        trailer[0], trailer[1] = int(failed), top
        requests = []
        received = [None] * size
        try:
            for hop in range(1, size):  # staggered so that no rank is everybody's first target
                dest = (rank + hop) % size
                buf, dense = ops.encode(codec, mine[dest])
                msg = np.empty(buf.nbytes + _TRAILER, np.uint8)
                msg[:buf.nbytes] = buf
                msg[buf.nbytes:] = trailer.view(np.uint8)
                requests.append(ctx.comm.Isend([msg, MPI.BYTE], dest, TAG_PLAN_SPLIT))
                stats.add_message(msg.nbytes, dense)
            own, _ = ops.encode(codec, mine[rank])
            received[rank] = ops.decode(own)
            for hop in range(1, size):
                source = (rank - hop) % size
                buf, _ = ops.recv_bytes(ctx, source, TAG_PLAN_SPLIT)
                stats.bytes_received += buf.nbytes
                tail = np.frombuffer(buf[-_TRAILER:].tobytes(), np.int64)
                failed = failed or bool(tail[0])
                top = max(top, int(tail[1]))
                received[source] = ops.decode(buf[:-_TRAILER])
        finally:
            ctx.waiter.waitall(requests)
        return received, top, failed


def _follow_code(follow) -> int:
    """``follow_shape`` as an agreed field: 0 (False), 1 (True: the same k) or 2 (a function
    of the new dim)."""
    if callable(follow):
        return 2
    if isinstance(follow, (bool, np.bool_)):
        return int(follow)
    raise InvalidArgumentError(f"follow_shape must be True, False or a function of the dim "
                               f"giving k, got {follow!r}")


def serves(ctx, dim: int, dtype) -> bool:
    """Whether a plan has a steady path of its own on ``ctx`` for ``dim`` values of ``dtype``
    (P = 2 on real ranks, a dim of the recursive-doubling fast path): where it has, the plain
    call runs through a cached plan (:mod:`sparcml._topk.entry`). Up to
    :data:`SERVED_DENSE_BYTES` dense only: the plan sends each rank's whole input where the
    general path's reduce-scatter sends half, a trade made for the latency regime."""
    return ctx.size == 2 and ctx.ops is PLAIN and fits(dim, dtype) \
        and dim * np.dtype(dtype).itemsize <= SERVED_DENSE_BYTES


def _submitted(ctx, plan: TopKPlan, vec, stats, check):
    return plan.topk_allreduce_in(ctx, vec, stats=stats, check=check)


def topk_plan(dim, dtype, k: int, comm: MPI.Comm | None = None, *,
              options: Options | None = None, follow_shape=False) -> TopKPlan:
    """A persistent :func:`sparcml.topk_allreduce` of ``dim`` values of ``dtype`` keeping
    ``k`` entries, on ``comm`` (default ``MPI.COMM_WORLD``; collective, the same arguments on
    every rank: :class:`~sparcml.RankMismatchError` otherwise). ``follow_shape``: as in
    :func:`sparcml.plan` (when every rank passes the same other dim and dtype, the plan
    remakes itself for them and runs the call); ``True`` keeps k, a function of the new dim
    gives the new k (equal on every rank). Returns a :class:`TopKPlan`:
    ``plan.topk_allreduce(vec)``, ``plan.itopk_allreduce(vec)``."""
    return TopKPlan(dim, dtype, k, comm, options=options, follow_shape=follow_shape)
