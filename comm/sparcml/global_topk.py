"""``topk_allreduce``: the exact global top-k of a sum of sparse vectors, in bounded volume.

SparCML's sparse allreduce moves the union of the inputs' supports: at P ranks with k-sparse
inputs the result holds up to P k entries. :func:`topk_allreduce` returns only the k entries of
largest ``|sum|``, with bytes per rank bounded independently of P:

1. **reduce-scatter** of the inputs over index partitions (phase 1 of the split algorithms,
   :func:`sparcml.exchange.split_reduce`): rank j owns the exact sum of partition j;
2. **exact selection** of the global k-th magnitude: digit by digit on the bits of ``|value|``
   (up to 11-bit digits of the 31 / 63 magnitude bits: 3 rounds for float32, 6 for float64; narrower for small k, so that a
   round's histogram stays under an eighth of the selection's bytes:
   :func:`sparcml.select_kernels.digit_bits`), each rank histograms the keys of its owned
   partial sums and the ranks add the histograms (an ``Allreduce`` of at most 16 KiB a round);
   ties at the threshold go to the lower index (an ``Exscan`` of one integer, only when the
   ties must be split);
3. **allgather of only the selected entries** (point to point up to 16 ranks, see
   :func:`_allgather`; MPI's ``Allgatherv`` beyond).

Volume per rank: about ``(P-1)/P (k_local + k)`` entries, ``k_local`` the input's nnz, plus
the histograms. The partition boundaries come from :func:`partition_bounds` (one place, so
that balanced boundaries can replace the equal blocks).

Why not a record of :mod:`sparcml.registry`: an allreduce algorithm returns the exact sum and
``auto`` may pick any of them for a call of :func:`sparcml.allreduce`; this collective returns
a lossy selection and a second vector (``dropped``), and takes ``k``. It stands beside the
registry with its own entry points; its cost is :func:`sparcml.costmodel.topk_allreduce_cost`
and :meth:`sparcml.CostModel.choose_topk_step` compares it with "local top-k + allreduce".

Example::

    result, dropped = sparcml.topk_allreduce(vec, k)      # same result on every rank
    residual = dropped.to_dense()                         # error feedback keeps the rest
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from . import arith, kernels, quant_kernels, select_kernels
from .agreement import agree, capture
from .context import TrafficStats, context_for
from .entry import fail_stop
from .errors import CompressionError, InvalidArgumentError
from .exchange import allgather_bytes, block_bounds, recv_bytes, split_reduce
from .validation import check_stats, coerce_vector
from .vector import SparseVector
from .wire import Codec, Part, decode

__all__ = ["NAME", "TopKReduced", "topk_allreduce", "itopk_allreduce", "topk_allreduce_in",
           "partition_bounds"]

NAME = "topk_allreduce"  # the label in TrafficStats.algorithm and the benchmarks

_KEYS = {  # value dtype -> (bits view, |x| mask, key of +Inf, key bits: the sign bit is masked)
    np.dtype(np.float32): (np.uint32, np.uint64(0x7FFFFFFF), np.uint64(0x7F800000), 31),
    np.dtype(np.float64): (np.uint64, np.uint64(0x7FFFFFFFFFFFFFFF),
                           np.uint64(0x7FF0000000000000), 63),
}
_NOTHING = np.uint64(np.iinfo(np.uint64).max)  # a threshold no key exceeds
TAG_DIRECT = 23  # the point-to-point allgather of the selection
DIRECT_MAX_RANKS = 16  # up to this P, allgathers go point to point (see _allgather)


class TopKReduced(NamedTuple):
    """``result``: the selected entries of the sum (sparse, sorted, the same on every rank);
    ``dropped``: this rank's input without the indices of ``result``."""

    result: SparseVector
    dropped: SparseVector


def partition_bounds(ctx, dim: int) -> np.ndarray:
    """The index partitions of the reduce-scatter: ``size + 1`` increasing int64 bounds.

    The one place they are chosen (equal blocks today, :func:`sparcml.block_bounds`). Any
    increasing bounds from 0 to ``dim``, equal on every rank, keep the result exact: rank j
    owns ``[bounds[j], bounds[j+1])`` and ties are ordered by rank, which is index order.
    """
    return block_bounds(dim, ctx.size)


def _check_k(k) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 0:
        raise InvalidArgumentError(f"k must be an integer >= 0 (entries to keep), got {k!r}")
    return int(k)


def _check_finite(vec: SparseVector) -> None:
    pos = quant_kernels.first_nonfinite(vec.values)
    if pos >= 0:
        where = pos if vec.is_dense else int(vec.indices[pos])
        raise CompressionError(
            f"cannot select the top-k of a sum holding {vec.values[pos]} (index {where}); "
            f"the input (plus any error-feedback residual) overflowed or is NaN")


def topk_allreduce(vec, k: int, comm: MPI.Comm | None = None, *,
                   stats: TrafficStats | None = None, check: bool = True) -> TopKReduced:
    """The k entries of largest ``|sum over ranks of vec|``, and what this rank keeps back.

    Collective: every rank of ``comm`` (default ``MPI.COMM_WORLD``) calls with the same
    ``dim``, value dtype and ``k`` (checked: :class:`~sparcml.RankMismatchError` on every
    rank), in the same order as its other sparcml calls on ``comm``.

    Parameters
    ----------
    vec : SparseVector, 1-d float32/float64 ndarray, or ``(dim, indices, values)`` (as
        :func:`sparcml.allreduce`). NaN or Inf in any rank's values raises
        :class:`~sparcml.CompressionError` on every rank before anything is sent.
    k : entries to keep, an integer >= 0.
    stats : a :class:`~sparcml.TrafficStats` to add this call's traffic to (the histogram
        rounds count as dense allreduces of their bins).
    check : as in :func:`sparcml.allreduce`.

    Returns
    -------
    ``(result, dropped)`` (a :class:`TopKReduced`):

    - ``result``: a sparse :class:`~sparcml.SparseVector` (``dim``, the value dtype) of the
      ``min(k, nonzeros of the sum)`` entries of largest ``|sum|``; ties at the k-th
      magnitude go to the lower index; entries whose sum is zero are never selected. The
      same on every rank. Its values are the exact sums (added in rank order).
    - ``dropped``: this rank's ``vec`` restricted to the indices not in ``result`` (in
      ``vec``'s representation), so that ``sum over ranks of vec == result + sum over ranks
      of dropped`` up to float addition order: what error feedback must keep.
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    return topk_allreduce_in(ctx, vec, k, stats=stats, check=check)


def _submitted(ctx, vec, k, kwargs):
    return topk_allreduce_in(ctx, vec, k, **kwargs)


def itopk_allreduce(vec, k: int, comm: MPI.Comm | None = None, *,
                    stats: TrafficStats | None = None, check: bool = True):
    """Non-blocking :func:`topk_allreduce`: a :class:`~sparcml.Request` whose ``wait()``
    returns ``(result, dropped)``. Runs on ``comm``'s communication thread, in submission
    order with the other non-blocking calls (every rank submits in the same order). ``vec``
    must not change until the request completes."""
    from .nonblocking import submit

    return submit(comm, f"itopk_allreduce(k={k})", _submitted, vec, k,
                  {"stats": stats, "check": check})


def topk_allreduce_in(ctx, vec, k, *, stats: TrafficStats | None = None,
                      check: bool = True) -> TopKReduced:
    """:func:`topk_allreduce` on a context (the blocking path's or a communication thread's)."""
    fields = {"dim": -1, "value dtype": -1, "k": -1}
    with capture() as failed:
        stats = check_stats(stats)
        k = _check_k(k)
        fields["k"] = k
        vec = coerce_vector(vec, check=check)
        fields["dim"] = vec.dim
        fields["value dtype"] = vec.dtype.itemsize
        _check_finite(vec)
    agree(ctx.comm, fields, failed.error, {"value dtype": {4: "float32", 8: "float64"}},
          waiter=ctx.waiter)
    stats.calls += 1
    stats.algorithm = NAME
    codec = Codec(vec.index_dtype, vec.dtype)
    with fail_stop(ctx.comm, NAME):
        sel_idx, sel_val, overflow = _select(ctx, arith.normalize(vec, codec), k, stats, codec)
        if not overflow:
            result = _allgather_selected(ctx, vec, sel_idx, sel_val, stats, codec)
    if overflow:  # the histograms are global: every rank knows, and raises the same error
        raise CompressionError(
            f"the sum of the inputs overflowed to NaN in {overflow} entries (Inf - Inf); scale "
            f"the inputs down")
    return TopKReduced(result, _dropped(vec, result.indices))


def _select(ctx, vec, k, stats, codec):
    """Steps 1-2: this rank's selected entries of its partition, ``(indices, values, 0)``, or
    ``(None, None, n)`` when the owned sums hold n NaN (overflow) somewhere."""
    bounds = partition_bounds(ctx, vec.dim)
    lo, hi = int(bounds[ctx.rank]), int(bounds[ctx.rank + 1])
    parts = split_reduce(ctx, vec, stats, bounds, codec)
    block = arith.fold_parts(parts, lo, hi - lo, codec, workspace=ctx.workspace,
                             intermediate=True)  # read here, copied out, then dropped
    bits_dtype, absmask, inf_key, key_bits = _KEYS[codec.value_dtype]
    keys = select_kernels.magnitude_keys(block.values.view(bits_dtype), absmask)
    bits = select_kernels.digit_bits(k, codec.index_dtype.itemsize + codec.value_dtype.itemsize)
    threshold, shift, tie_rule, nan_count = _threshold(ctx, keys, k, key_bits, bits, inf_key,
                                                       stats)
    if nan_count:
        return None, None, nan_count
    if tie_rule < 0:  # every key at the threshold is taken
        take = select_kernels.count_at_threshold(keys, threshold, shift)
    else:  # the ranks own increasing index ranges: ties before mine are on lower ranks
        mine = np.array([select_kernels.count_at_threshold(keys, threshold, shift)], np.int64)
        before = np.zeros(1, np.int64)
        ctx.waiter.collective(ctx.comm, "Exscan", mine, before, MPI.SUM)
        if ctx.rank == 0:
            before[0] = 0  # MPI leaves rank 0's Exscan result undefined
        stats.bytes_sent += 8
        stats.messages += 1
        take = int(min(max(tie_rule - before[0], 0), mine[0]))
    pos = select_kernels.select_at_threshold(keys, threshold, shift, take)
    if block.is_dense:
        idx = (pos + lo).astype(codec.index_dtype)
    else:
        idx = block.indices[pos]
    return idx, block.values[pos], 0


def _threshold(ctx, keys, k, key_bits, bits, inf_key, stats):
    """The global selection rule, the same on every rank: keys with ``key >> shift`` above
    ``threshold`` are selected, and of those equal to it all (``tie_rule == -1``) or the
    ``tie_rule`` of lowest index globally. Also the global count of NaN keys."""
    hist = np.zeros((1 << bits) + 1, np.int64)
    shifts = select_kernels.digit_shifts(key_bits, bits)
    prefix, prev, want = np.uint64(0), key_bits, k
    for r, shift in enumerate(shifts):
        hist[:] = 0
        select_kernels.digit_histogram(keys, prefix, prev, shift, r == 0, inf_key, hist)
        _sum_histograms(ctx, hist, stats)
        bins = hist[:1 << (prev - shift)]
        if r == 0:
            if hist[-1]:
                return _NOTHING, 0, -1, int(hist[-1])
            total = int(bins.sum())
            want = min(k, total)
            if want == 0:
                return _NOTHING, 0, -1, 0
            if want == total:
                return np.uint64(0), 0, -1, 0  # every nonzero key
        from_top = np.cumsum(bins[::-1])  # keys with digit >= (nbins - 1 - i)
        i = int(np.searchsorted(from_top, want))  # first i with from_top[i] >= want
        digit = bins.size - 1 - i
        if i > 0:
            want -= int(from_top[i - 1])
        prefix = (prefix << np.uint64(prev - shift)) | np.uint64(digit)
        prev = shift
        if bins[digit] == want:
            return prefix, shift, -1, 0
    return prefix, 0, want, 0


def _allgather(ctx, buf: np.ndarray, stats) -> list[np.ndarray]:
    """Every rank's byte buffer, in rank order. Up to :data:`DIRECT_MAX_RANKS` ranks, point to
    point (each rank sends its buffer to every other, sizes learnt by ``Mprobe``; bytes as a
    ring allgather's, P - 1 messages): MPICH's
    ``Allgather(v)`` over TCP stalled for tens of ms per call on the emulated network
    (BENCHMARKS.md), where the point-to-point path of the other algorithms does not; beyond,
    :func:`sparcml.exchange.allgather_bytes` (the MPI collective's log P rounds)."""
    rank, size = ctx.rank, ctx.size
    if size > DIRECT_MAX_RANKS:
        return allgather_bytes(ctx, buf, stats)
    out: list[np.ndarray | None] = [None] * size
    out[rank] = buf
    requests = []
    try:
        for step in range(1, size):  # staggered, as in split_reduce
            requests.append(ctx.comm.Isend([buf, MPI.BYTE], (rank + step) % size, TAG_DIRECT))
            stats.add_message(buf.nbytes, False)
        # from named sources, in a fixed order: consecutive calls share the tag, and MPI keeps
        # the order of the messages of one source only
        for step in range(1, size):
            source = (rank - step) % size
            out[source], _ = recv_bytes(ctx, source, TAG_DIRECT)
    finally:
        ctx.waiter.waitall(requests)
    return out


def _sum_histograms(ctx, hist: np.ndarray, stats) -> None:
    """``hist`` becomes the sum over ranks of every rank's ``hist`` (int64, exact): an MPI
    ``Allreduce`` (2 (P-1)/P of its bytes per rank, where a point-to-point allgather would send
    P - 1 times them; a round took as long either way on the emulated network)."""
    ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, hist, MPI.SUM)
    stats.bytes_sent += int(2 * (ctx.size - 1) / ctx.size * hist.nbytes)
    stats.messages += 1


def _allgather_selected(ctx, vec, sel_idx, sel_val, stats, codec) -> SparseVector:
    """Step 3: every rank's selected entries, concatenated in rank (= index) order."""
    bounds = partition_bounds(ctx, vec.dim)
    lo, hi = int(bounds[ctx.rank]), int(bounds[ctx.rank + 1])
    buf, _ = codec.encode(Part(lo, hi - lo, sel_idx, sel_val))
    pieces = []
    for b in _allgather(ctx, buf, stats):
        part = decode(b)
        if part.is_dense:  # a block where most entries were selected: zeros are the others
            pieces.append(kernels.dense_to_sparse(part.values, part.offset,
                                                  np.empty(0, codec.index_dtype)))
        else:
            pieces.append((part.indices, part.values))
    idx = np.concatenate([p[0] for p in pieces]).astype(codec.index_dtype, copy=False)
    val = np.concatenate([p[1] for p in pieces]).astype(codec.value_dtype, copy=False)
    return SparseVector._trusted(vec.dim, idx, val)


def _dropped(vec: SparseVector, removed: np.ndarray) -> SparseVector:
    """``vec`` without the indices ``removed`` (sorted), in ``vec``'s representation."""
    if vec.is_dense:
        return SparseVector._trusted(vec.dim, None,
                                     select_kernels.zero_indices(vec.values, removed))
    idx, val = select_kernels.drop_indices(vec.indices, vec.values,
                                           removed.astype(vec.indices.dtype, copy=False))
    return SparseVector._trusted(vec.dim, idx, val)
