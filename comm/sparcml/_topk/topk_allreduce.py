"""``topk_allreduce``'s general path: the exact global top-k of a sum, in bounded volume.

(The entry points, which agree and then run a cached plan or this path, are
:mod:`sparcml._topk.entry`.)

SparCML's sparse allreduce moves the union of the inputs' supports: at P ranks with k-sparse
inputs the result holds up to P k entries. :func:`topk_allreduce` returns only the k entries of
largest ``|sum|``, with bytes per rank bounded independently of P:

1. **agreement** of the arguments (one small ``Allreduce``), which also carries the largest
   ``|input|`` over ranks: a bound on ``|sum|`` for step 3;
2. **reduce-scatter** of the inputs over index partitions (phase 1 of the split algorithms,
   :func:`sparcml._collectives.exchange.split_reduce`): rank j owns the exact sum of partition j;
3. **the selection rule** (:mod:`sparcml._topk.rule`): from the k-th largest ``|sum|`` of the
   last call of the same shape when there was one (no step: the ranks send the sums above a
   guess a margin below it), else exactly from histogram rounds of the owned sums' magnitude
   bits (an ``Allreduce`` of at most 16 KiB each; one round on most data);
4. **allgather of only the selected entries** (point to point below
   ``Options.native_min_ranks`` ranks, see :func:`_allgather`; MPI's ``Allgatherv`` from
   there, as the reduce-scatter's ``Alltoallv``), plus a few candidates near the
   threshold; every rank keeps the same k of them (by ``|sum|``, ties to the lower index).
   When a guess brought fewer than k, steps 3-4 run again on the exact path.

So 3 synchronizing steps on a call that remembers (4 otherwise), as many as recursive
doubling's agreement and 2 exchanges at P = 4.

Volume per rank: about ``(P-1)/P (k_local + k)`` entries, ``k_local`` the input's nnz, plus
the histograms and the guess's margin or the candidates (about k / 8 entries more). The
partition boundaries are the split algorithms' balanced ones (:func:`partition_bounds`): on
power-law supports equal blocks would send most entries to the owner of the frequent low
indices.

Why not a record of :mod:`sparcml._registry`: an allreduce algorithm returns the
exact sum and ``auto`` may pick any of them for a call of :func:`sparcml.allreduce`; this
collective returns a lossy selection and a second vector (``dropped``), and takes ``k``. It
stands beside the registry with its own entry points; its cost is
:func:`sparcml._model.costmodel.topk_allreduce_cost` and
:meth:`sparcml.CostModel.choose_topk_step` compares it with "local top-k + allreduce".

One collective's call path after the agreement (reduce-scatter, the selection rounds, the
allgather, ``dropped``); the entry points, the rule, the kernels and the one-node exchange are
modules of their own.

Example::

    result, dropped = sparcml.topk_allreduce(vec, k)      # same result on every rank
    residual = dropped.to_dense()                         # error feedback keeps the rest
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from .._collectives import arith
from .._runtime.agreement import VALUE_DTYPE_NAMES
from .._runtime.tags import message_tags
from .._collectives.fail_stop import fail_stop
from .._errors import CompressionError, InvalidArgumentError
from .._collectives.exchange import allgather_packed, reduce_block
from .._model.costmodel import TOPK_STEP
from .._model.link_costs import call_options
from .node_exchange import (allgather_shared, gather_region_bytes, one_node_layout,
                            split_reduce_shared, split_region_bytes)
from .._collectives.partition import SPARSE_KIND, note_received, split_bounds
from .._vector import SparseVector
from .rule import (KEYS, MANTISSA_BITS, NOTHING, Rule, bound_key, count_nan, guess, memory_of,
                   remember, split_ties, step, threshold_rule)
from .._wire.codec import Codec, Part
from .._lazy import lazy_module
select_kernels = lazy_module("sparcml._topk.select_kernels")
kernels = lazy_module("sparcml._kernels")

__all__ = ["NAME", "TopKReduced", "partition_bounds"]

NAME = TOPK_STEP  # "topk_allreduce": the label in TrafficStats.algorithm and the benchmarks

TAG_DIRECT = message_tags(NAME, "direct").direct  # the point-to-point allgather of the selection
_DESCRIBE = {"value dtype": VALUE_DTYPE_NAMES}


class TopKReduced(NamedTuple):
    """``result``: the selected entries of the sum (sparse, sorted, the same on every rank);
    ``dropped``: this rank's input without the indices of ``result``."""

    result: SparseVector
    dropped: SparseVector


def partition_bounds(ctx, vec, codec) -> np.ndarray:
    """The index partitions of the reduce-scatter: ``size + 1`` increasing int64 bounds.

    Those of the split algorithms' phase 1 (:func:`sparcml._collectives.partition.split_bounds`,
    ``SPARSE_KIND``): balanced from a global histogram of the inputs' indices, so that each
    owner receives about the same bytes (equal blocks under ``Options(partitions="equal")``).
    Collective: it may run the partitions' small collectives. Any increasing bounds from 0 to
    ``dim``, equal on every rank, keep the result exact: rank j owns
    ``[bounds[j], bounds[j+1])`` and ties are ordered by rank, which is index order.
    """
    return split_bounds(ctx, vec, SPARSE_KIND, codec)


def _check_k(k) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 0:
        raise InvalidArgumentError(f"k must be an integer >= 0 (entries to keep), got {k!r}")
    return int(k)


def _check_finite(vec: SparseVector) -> None:
    pos = kernels.first_nonfinite(vec.values)
    if pos >= 0:
        where = pos if vec.is_dense else int(vec.indices[pos])
        raise CompressionError(
            f"cannot select the top-k of a sum holding {vec.values[pos]} (index {where}); "
            f"the input (plus any error-feedback residual) overflowed or is NaN")


def _run(ctx, vec, k, stats, opts, top, items) -> TopKReduced:
    """The call after the agreement."""
    stats.calls += 1
    stats.algorithm = NAME
    memory_of(ctx).steps = 1  # the agreement
    codec = Codec(vec.index_dtype, vec.dtype, options=call_options(ctx, opts))
    if k == 0 or top == 0:  # nothing to select (k = 0, or every input value is zero)
        nothing = SparseVector.unchecked(vec.dim, np.empty(0, vec.index_dtype),
                                        np.empty(0, vec.dtype))
        return TopKReduced(nothing, _dropped(vec, nothing.indices))
    with fail_stop(ctx.comm, NAME):
        shared = _one_node(ctx, codec.options, items, vec.dim, codec)
        owned, lo = _reduce_scatter(ctx, arith.normalize(vec, codec), stats, codec, shared)
        result, nan = _selection(ctx, vec, owned, lo, k, top, stats, codec, shared)
    if nan:  # every rank saw the same NaN sums (histogram or gathered), and raises the same
        raise CompressionError(
            f"the sum of the inputs overflowed to NaN in {nan} entries (Inf - Inf); "
            f"scale the inputs down")
    return TopKReduced(result, _dropped(vec, result.indices))


def _max_key(vec: SparseVector) -> int:
    """The largest magnitude key of ``vec``'s values; raises :class:`CompressionError` (naming
    the first one) when any value is NaN or Inf."""
    values = vec.values
    keys = KEYS.get(values.dtype)
    if keys is None:
        _check_finite(vec)  # coerce_vector admits float32 / float64 only
        keys = KEYS[values.dtype]
    bits_dtype, absmask, inf_key, _ = keys
    top = select_kernels.max_key(np.ascontiguousarray(values).view(bits_dtype), absmask)
    if top >= inf_key:
        _check_finite(vec)
    return int(top)


@dataclass
class _OneNode:
    """A one-node communicator's window (:mod:`sparcml._topk.node_exchange`) for this call: the
    layout, the two regions' sizes, and how many gathers this call made through it."""

    layout: object
    split_bytes: int
    gather_bytes: int
    gathers: int = 0


def _one_node(ctx, opts, items, dim, codec) -> _OneNode | None:
    """The window when every rank is on one node (collective; agreed sizes), else None."""
    layout = one_node_layout(ctx, opts.ranks_per_node or 0, int(opts.node_shm))
    if layout is None:
        return None
    split = split_region_bytes(ctx.size, items, dim, codec)
    gather = gather_region_bytes(min(ctx.size * items, dim), dim, codec)
    if not layout.slots.ensure(layout.node, split + gather, split + gather):
        return None  # no room in the node's shared memory: messages (agreed, warned once)
    return _OneNode(layout, split, gather)


def _reduce_scatter(ctx, vec, stats, codec, shared):
    """Step 1: ``((owned sums, their keys), first owned index)``."""
    bounds = partition_bounds(ctx, vec, codec)
    lo, hi = int(bounds[ctx.rank]), int(bounds[ctx.rank + 1])
    before = stats.bytes_received
    # the block is read here, copied out, then dropped
    if shared is None:
        block = reduce_block(ctx, vec, stats, bounds, codec, intermediate=True)
    else:
        parts = split_reduce_shared(ctx, shared.layout, vec, stats, bounds, codec,
                                    shared.split_bytes)
        block = ctx.ops.fold_parts(parts, lo, hi - lo, codec, workspace=ctx.workspace,
                                   intermediate=True)
    note_received(ctx, vec.dim, SPARSE_KIND, stats.bytes_received - before, stats, codec)
    step(ctx)
    bits_dtype, absmask = KEYS[codec.value_dtype][:2]
    keys = _scratch(ctx, "topk.keys", block.values.size, np.uint64)
    select_kernels.magnitude_keys_into(block.values.view(bits_dtype), absmask, keys)
    return (block, keys), lo


def _scratch(ctx, role, n, dtype):
    """A scratch array of the context's workspace (fresh memory without one)."""
    return np.empty(n, dtype) if ctx.workspace is None else ctx.workspace.get(role, n, dtype)


def _selection(ctx, vec, owned, lo, k, top, stats, codec, shared):
    """Steps 2-3: ``(result, NaN sums seen)``. With a threshold remembered from an earlier
    call of the same shape (see :func:`remember`), one allgather of the keys above a guess
    just below it, which every rank checks holds k keys (else the exact path below runs); the
    exact path: histogram rounds (:func:`~sparcml._topk.rule.threshold_rule`), then the
    allgather."""
    value_dtype = codec.value_dtype
    inf_key = int(KEYS[value_dtype][2])
    bound = min(bound_key(top, ctx.size, value_dtype), inf_key) if top else 0
    memo_key = ("topk threshold", vec.dim, k, value_dtype.str)
    guessed = guess(ctx, memo_key, bound, value_dtype)
    if guessed is not None:
        below, margin = guessed
        idx, val = _gather(ctx, vec, Rule(below - 1, NOTHING, k, -1, 0), owned, lo, stats,
                           codec, shared)
        nan = count_nan(val)
        if nan:
            return None, nan
        if idx.size >= k:  # the k largest sums are all here
            result = _result(vec.dim, idx, val, value_dtype, NOTHING, k)
            wide = idx.size > k + k // 4
            remember(ctx, memo_key, bound, result.values, k, value_dtype,
                     max(margin - 1, MANTISSA_BITS[value_dtype] - 8) if wide else margin)
            return result, 0
        margin = min(margin + 1, MANTISSA_BITS[value_dtype] + 2)  # missed: a wider margin
    else:
        margin = MANTISSA_BITS[value_dtype] - 4  # a sixteenth of an octave
    block, keys = owned
    bits = select_kernels.digit_bits(k, codec.index_dtype.itemsize + value_dtype.itemsize)
    rule = threshold_rule(ctx, keys, k, bound, bits, value_dtype, stats)
    if rule.nan:
        return None, rule.nan
    if rule.threshold == NOTHING:  # every sum is zero (known to all): nothing to gather
        remember(ctx, memo_key, bound, np.empty(0, value_dtype), k, value_dtype, margin)
        return SparseVector.unchecked(vec.dim, np.empty(0, codec.index_dtype),
                                     np.empty(0, value_dtype)), 0
    if rule.ties >= 0:
        rule = split_ties(ctx, keys, rule, stats)
    idx, val = _gather(ctx, vec, rule, owned, lo, stats, codec, shared)
    result = _result(vec.dim, idx, val, value_dtype, rule.high,
                     rule.want if rule.want > 0 else None)
    remember(ctx, memo_key, bound, result.values, k, value_dtype, margin)
    return result, 0


def _allgather(ctx, buf: np.ndarray, stats, codec, shared=None):
    """Every rank's byte buffer, in rank order, packed: ``(buffer, displs, sizes)``. Below
    ``Options.native_min_ranks`` ranks (default 16), point to point (each rank sends its
    buffer to every other, sizes learnt by ``Mprobe``; bytes as a ring allgather's, P - 1
    messages): MPICH's ``Allgather(v)`` over TCP stalled for tens of ms per call on the
    emulated network (BENCHMARKS.md), where the point-to-point path of the other algorithms
    does not; from there, :func:`sparcml._collectives.exchange.allgather_packed` (one
    ``Allgatherv``: the loop over ranks runs in MPI). On one node (``shared``), through the
    window's gather region."""
    rank, size = ctx.rank, ctx.size
    if shared is not None:
        if shared.gathers:  # a second gather in this call: nobody may still read the first
            shared.layout.slots.barrier(shared.layout.node)
        shared.gathers += 1
        return _pack(allgather_shared(ctx, shared.layout, buf, stats, shared.split_bytes,
                                      shared.gather_bytes))
    if codec.options.native(size):
        return allgather_packed(ctx, buf, stats)
    out: list[np.ndarray | None] = [None] * size
    out[rank] = buf
    requests = []
    try:
        for hop in range(1, size):  # staggered, as in split_reduce
            requests.append(ctx.comm.Isend([buf, MPI.BYTE], (rank + hop) % size, TAG_DIRECT))
            stats.add_message(buf.nbytes, False)
        # from named sources, in a fixed order: consecutive calls share the tag, and MPI keeps
        # the order of the messages of one source only
        for hop in range(1, size):
            source = (rank - hop) % size
            out[source], _ = ctx.ops.recv_bytes(ctx, source, TAG_DIRECT)
    finally:
        ctx.waiter.waitall(requests)
    return _pack(out)


def _pack(bufs: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte buffers back to back: ``(buffer, displs, sizes)`` (below the native threshold,
    or through the node's window: few ranks, so the copy is small)."""
    sizes = np.array([b.nbytes for b in bufs], np.int64)
    displs = np.zeros_like(sizes)
    np.cumsum(sizes[:-1], out=displs[1:])
    return np.concatenate(bufs), displs, sizes


def _gather(ctx, vec, rule, owned, lo, stats, codec, shared):
    """Every rank's entries that ``rule`` sends, concatenated in rank (= index) order:
    ``(indices, values)`` (read them only: :func:`_result` copies). One packed read of the
    gathered messages (``ctx.ops.assemble_packed``: the blocks are disjoint, so assembling
    them is concatenation; a dense block gives its nonzeros, and no selected sum is zero)."""
    block, keys = owned
    pos = select_kernels.select_at_threshold(keys, np.uint64(rule.threshold), 0,
                                             max(rule.ties, 0))
    if block.is_dense:
        sel_idx = (pos + lo).astype(codec.index_dtype)
    else:
        sel_idx = block.indices[pos]
    sel_val = block.values[pos]
    buf, _ = ctx.ops.encode(codec, Part(lo, block.length, sel_idx, sel_val))
    gathered, displs, sizes = _allgather(ctx, buf, stats, codec, shared)
    step(ctx)
    entries = ctx.ops.assemble_packed(gathered, displs, sizes, vec.dim, codec)
    if entries.is_dense:  # more than half the entries selected: back to the entries
        return kernels.dense_to_sparse(entries.values, 0, np.empty(0, codec.index_dtype))
    return entries.indices, entries.values


def _result(dim, idx, val, value_dtype, high=NOTHING, want=None) -> SparseVector:
    """The result from the gathered entries (index order; fresh arrays): all of them, or
    (``want``) those with keys >= ``high`` and the ``want`` largest keys below it (equal
    keys: the lower index first)."""
    bits_dtype, absmask, _, key_bits = KEYS[value_dtype]
    bits = val.view(bits_dtype)
    if want is not None:  # (want >= 1 keys below high: kth_largest_below's contract)
        idx, val = select_kernels.select_top(idx, val, bits, absmask, np.uint64(high), want,
                                             key_bits)
        return SparseVector.unchecked(dim, idx, val)
    return SparseVector.unchecked(dim, idx.copy(), val.copy())


def _dropped(vec: SparseVector, removed: np.ndarray) -> SparseVector:
    """``vec`` without the indices ``removed`` (sorted), in ``vec``'s representation."""
    if vec.is_dense:
        return SparseVector.unchecked(vec.dim, None,
                                     select_kernels.zero_indices(vec.values, removed))
    idx, val = select_kernels.drop_indices(vec.indices, vec.values,
                                           removed.astype(vec.indices.dtype, copy=False))
    return SparseVector.unchecked(vec.dim, idx, val)
