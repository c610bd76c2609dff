"""Balanced partitions of ``[0, N)`` for the split algorithms (reduce-scatter phases).

Package-internal. The split algorithms send block j of every input to rank j. With equal
blocks (:func:`sparcml._collectives.exchange.block_bounds`) an owner whose block holds the frequent
features of a power-law support (the low indices of url-like data) receives several times the
mean. :func:`split_bounds` instead cuts ``[0, N)`` where a global histogram of the inputs'
indices says each owner gets the same *weight*:

- ``SPARSE_KIND`` (``ssar_split_allgather``, and any reduce-scatter that keeps its blocks
  sparse): a block weighs the bytes its owner receives for it: the entries of the P inputs
  in it, each at the bytes per entry of the message it travels in (coded indices take fewer
  bits where a block is dense; a message past the switch rule goes dense). So each owner
  receives about the same bytes and merges about the same entries (phase 1 balanced; the
  phase-2 allgather moves the same total whatever the cut). The bytes per entry depend on
  the cut itself, so the cut is refined a few rounds (:func:`_cut`).
- ``DENSE_KIND`` (``dsar_split_allgather``): phase 1 is sparse and phase 2 a dense allgather
  of the owners' blocks, in which each block travels ``P - 1`` times (a ring). An owner's
  time is the bytes it receives in phase 1 (as for ``SPARSE_KIND``) plus ``(P - 1) s_val``
  bytes per position of its block, so a position weighs those two together: blocks stay
  near N/P long when the result is dense-ish (where DSAR is chosen) and move to balance a
  skewed phase 1 only as far as the longer dense blocks allow. On url-like gradients at 1%
  the dense phase is ~60x the sparse one, so DSAR keeps near-equal blocks on purpose.

The histogram is two small ``Allreduce`` calls of int64 counts, at the first call of a
``(N, kind)`` and at each re-estimate only (``COARSE_BINS`` equal bins,
then ``FINE_BINS`` sub-bins of each coarse bin that holds a boundary), so a boundary is placed
to within ``N / (COARSE_BINS x FINE_BINS)`` positions, interpolated inside the sub-bin. Every
rank computes the same boundaries (from the same reduced counts, with the same arithmetic).
They are kept on the :class:`~sparcml.CommContext` per ``(N, kind)`` and reused while the
support distribution is stable: every ``CHECK_EVERY`` calls the ranks allgather the bytes
each received in phase 1 of the previous call (one int64 each) and estimate again when the
max / mean passes ``THRESHOLD`` and ``REGRESSION`` times what the estimate achieved at its
first check (bytes are balanced only as far as entries predict them: a hot block whose
messages go dense costs a little more per entry, and estimating again would not help).
Policy ``"equal"`` (``Options.partitions``, agreed by every rank: see
:mod:`sparcml._collectives.entry`) gives
:func:`~sparcml._collectives.exchange.block_bounds` instead. Other split collectives (a top-k
reduce-scatter) take their boundaries from :func:`split_bounds` the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from .._options import PARTITIONS
from .._runtime.call_context import context_of
from .exchange import block_bounds
from .._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")

__all__ = ["SPARSE_KIND", "DENSE_KIND", "POLICIES", "BALANCED", "EQUAL", "PartitionState",
           "PartitionMemory", "memory_of", "split_bounds", "note_received", "balanced_bounds",
           "COARSE_BINS", "FINE_BINS", "CHECK_EVERY", "THRESHOLD", "REGRESSION"]

SPARSE_KIND = "sparse-blocks"
DENSE_KIND = "dense-blocks"
BALANCED = "balanced"
EQUAL = "equal"
POLICIES = PARTITIONS  # the values of Options.partitions
COARSE_BINS = 1024
FINE_BINS = 64
CHECK_EVERY = 4
THRESHOLD = 1.15
REGRESSION = 1.1
_MIN_ENTRIES_PER_RANK = 64  # fewer: equal blocks (the histogram would be noise, and cost more)


@dataclass
class PartitionState:
    """The boundaries in use for one ``(N, kind)`` on a context, and what was measured."""

    bounds: np.ndarray
    calls: int = 0  # calls since the last estimate
    received: int = 0  # bytes this rank received in phase 1 of the last call
    imbalance: float = 1.0  # max / mean received bytes at the last check
    estimates: int = 0
    achieved: float | None = None  # the imbalance of the first check after the estimate


@dataclass
class PartitionMemory:
    """The split algorithms' partitions on one context (``ctx.partition_memory``; the same
    bounds on every rank): a :class:`PartitionState` per ``(N, kind)`` (one per vector size
    and kind a program reduces: not bounded, as the workspace is not)."""

    states: dict = field(default_factory=dict)


def memory_of(ctx) -> PartitionMemory:
    """``ctx.partition_memory``, made at its first use (``ctx``: a context, or the
    :class:`~sparcml.CallContext` an algorithm received: its communicator's context's)."""
    ctx = context_of(ctx)
    if ctx.partition_memory is None:
        ctx.partition_memory = PartitionMemory()
    return ctx.partition_memory


def _edges(lo: int, hi: int, bins: int) -> np.ndarray:
    """``bins + 1`` integer edges cutting ``[lo, hi)`` into near-equal bins (exact ints)."""
    span = hi - lo
    return np.array([lo + (b * span) // bins for b in range(bins + 1)], np.int64)


def _counts(vec, edges: np.ndarray) -> np.ndarray:
    """Entries of ``vec`` per bin of ``edges`` (a dense-backed vector holds every position)."""
    if vec.is_dense:
        return np.diff(edges).astype(np.int64)
    return np.diff(kernels.split_positions(vec.indices, edges)).astype(np.int64)


def _allreduce(ctx, counts: np.ndarray) -> np.ndarray:
    ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, counts, MPI.SUM)
    return counts


def balanced_bounds(edges: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Boundaries (``size + 1`` int64, from ``edges[0]`` to ``edges[-1]``) cutting the bins of
    ``edges`` (weights: float64 per bin) into ``size`` runs of near-equal weight; a cut inside
    a bin is interpolated as if its weight were spread evenly. Non-decreasing."""
    cum = np.concatenate([[0.0], np.cumsum(weights)])
    total = cum[-1]
    out = np.empty(size + 1, np.int64)
    out[0], out[-1] = edges[0], edges[-1]
    if total <= 0:
        return out if size == 1 else np.linspace(edges[0], edges[-1], size + 1).astype(np.int64)
    for j in range(1, size):
        target = total * j / size
        b = int(np.searchsorted(cum, target, side="right")) - 1
        b = min(max(b, 0), len(weights) - 1)
        frac = (target - cum[b]) / weights[b] if weights[b] > 0 else 0.0
        out[j] = edges[b] + int(round(min(max(frac, 0.0), 1.0) * (edges[b + 1] - edges[b])))
    np.maximum.accumulate(out, out=out)
    return out


def _bytes_received(counts, width, size, s_idx, s_val):
    """Expected bytes the owner of a block receives: ``size`` messages of ``counts / size``
    entries each over ``width`` positions, with coded indices (the Elias-Fano / bitmap sizes of
    :func:`sparcml._model.costmodel.index_bytes`; always coded here, since the environment's coding
    switch is not agreed between ranks and the boundaries must be) or dense past the switch
    rule. Vectorized over blocks (float64 arrays)."""
    per_rank = counts / size
    ratio = np.maximum(width / np.maximum(per_rank, 1e-300), 1.0)
    low = np.floor(np.log2(np.maximum(ratio - 1.0, 1.0)))
    idx = np.minimum(np.minimum((low + 1 + (ratio - 1.0) / 2.0**low) / 8, ratio / 8), s_idx)
    dense = per_rank * (s_idx + s_val) >= width * s_val
    return size * np.where(dense, width * s_val, per_rank * (idx + s_val))


def _cut(edges, counts, kind, size, s_idx, s_val, rounds=3):
    """Boundaries giving every owner the same expected bytes. The bytes of an entry depend on
    the density of the whole message it travels in (the code's size; dense past the rule),
    so the cut is refined a few ``rounds``: weigh each bin's entries at the bytes per entry
    of the block it falls in, cut again."""
    counts = counts.astype(np.float64)
    width = np.diff(edges).astype(np.float64)
    dense_phase = width * (size - 1) * s_val if kind == DENSE_KIND else 0.0
    bounds = balanced_bounds(edges, counts * (s_idx + s_val) + dense_phase, size)
    cum = np.concatenate([[0.0], np.cumsum(counts)])
    for _ in range(rounds):
        entries = np.diff(np.interp(bounds, edges, cum))
        per_entry = np.where(entries > 0, _bytes_received(
            entries, np.diff(bounds).astype(np.float64), size, s_idx, s_val)
            / np.maximum(entries, 1e-300), s_idx + s_val)
        block = np.clip(np.searchsorted(bounds, edges[:-1], side="right") - 1, 0, size - 1)
        bounds = balanced_bounds(edges, counts * per_entry[block] + dense_phase, size)
    return bounds


def _estimate(ctx, vec, kind: str, codec) -> np.ndarray:
    """The boundaries from this call's inputs (two small collectives; every rank calls)."""
    dim, size = vec.dim, ctx.size
    coarse_bins = min(COARSE_BINS, dim)
    coarse = _edges(0, dim, coarse_bins)
    counts = _allreduce(ctx, _counts(vec, coarse))
    if int(counts.sum()) < _MIN_ENTRIES_PER_RANK * size:
        return block_bounds(dim, size).copy()
    s_idx, s_val = codec.index_dtype.itemsize, codec.value_dtype.itemsize
    first = _cut(coarse, counts, kind, size, s_idx, s_val)
    if dim <= coarse_bins:
        return first
    # refine: the coarse bins holding a boundary, each cut into FINE_BINS sub-bins
    holding = np.unique(np.clip(np.searchsorted(coarse, first[1:-1], side="right") - 1, 0,
                                coarse_bins - 1))
    fine_edges = [_edges(int(coarse[b]), int(coarse[b + 1]), FINE_BINS) for b in holding]
    fine = _allreduce(ctx, np.concatenate([_counts(vec, e) for e in fine_edges]))
    # the full histogram: coarse bins, those holding a boundary replaced by their sub-bins
    edges, weights = [coarse[:1]], []
    split = dict(zip(holding.tolist(), range(len(holding))))
    for b in range(coarse_bins):
        if b in split:
            i = split[b]
            edges.append(fine_edges[i][1:])
            weights.append(fine[i * FINE_BINS:(i + 1) * FINE_BINS])
        else:
            edges.append(coarse[b + 1:b + 2])
            weights.append(counts[b:b + 1])
    return _cut(np.concatenate(edges), np.concatenate(weights), kind, size, s_idx, s_val)


def _imbalance(ctx, received: int) -> float:
    every = np.empty(ctx.size, np.int64)
    ctx.waiter.collective(ctx.comm, "Allgather", np.array([received], np.int64), every)
    mean = every.mean()
    return float(every.max() / mean) if mean > 0 else 1.0


def split_bounds(ctx, vec, kind: str, codec) -> np.ndarray:
    """The block boundaries of a split call on ``vec`` (``P + 1`` int64; block j is
    ``[b[j], b[j+1])``). Collective: every rank of ``ctx`` calls with its input of the same
    dim, in the same order of calls (it may run small collectives: see the module docstring).
    ``codec`` (the call's :class:`~sparcml._wire.codec.Codec`) gives the bytes of a sparse entry on
    the wire and of a dense value (the weights of ``DENSE_KIND``); a quantized (lossy) call
    uses the boundaries in place and never re-estimates them, since its values depend on the
    cut. The result is equal on every rank: it depends on reduced data only. Exact sums are
    bitwise the same whatever the cut (each index is summed in rank order)."""
    size, dim = ctx.size, vec.dim
    if size == 1 or codec.options.partitions == EQUAL or dim < 2 * size:
        return block_bounds(dim, size)
    states = memory_of(ctx).states
    state = states.get((dim, kind))
    due = state is None
    # quantized values depend on the cut (QSGD buckets per block): a quantized call never
    # moves it, so that calls with the same random stream give the same bits
    if state is not None and state.calls >= CHECK_EVERY and not codec.lossy:
        state.imbalance = _imbalance(ctx, state.received)
        state.calls = 0
        if state.achieved is None:
            state.achieved = state.imbalance
        due = state.imbalance > max(THRESHOLD, REGRESSION * state.achieved)
    if due:
        bounds = _estimate(ctx, vec, kind, codec)
        bounds.setflags(write=False)
        estimates = 0 if state is None else state.estimates
        state = states[(dim, kind)] = PartitionState(bounds, estimates=estimates + 1)
    state.calls += 1
    return state.bounds


def note_received(ctx, dim: int, kind: str, nbytes: int, stats, codec) -> None:
    """Record the bytes this rank received in phase 1 of a split call (for the check, under
    the call's ``codec.options.partitions`` ``"balanced"``; also as ``stats.phase1_received``
    of the call's :class:`~sparcml.TrafficStats`, whatever the policy, for benchmarks)."""
    stats.phase1_received = int(nbytes)
    memory = context_of(ctx).partition_memory
    state = None if memory is None else memory.states.get((dim, kind))
    if state is not None and codec.options.partitions == BALANCED:  # its bounds
        state.received = int(nbytes)
