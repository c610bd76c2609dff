"""The global selection rule of :func:`sparcml.topk_allreduce`: which sums every rank sends.

Package-internal (:mod:`sparcml._topk.topk_allreduce` runs the call). Keys are the magnitude bits of
the values (:mod:`sparcml._topk.select_kernels`). The rule comes from

- a **remembered threshold** (:func:`remember`, :func:`guess`): the k-th largest key of the
  last call of the same ``(dim, k, dtype)``, with the bound of the sums of that call
  (:func:`bound_key`, from the largest ``|input|`` that rides on the call's agreement). The
  guess starts from the threshold itself while the bound stays within a quarter octave of
  the remembered one (the k-th largest of many sums is a far steadier statistic than the
  largest input, which moves by several percent between minibatches), and from the same
  distance below the new bound when it moved further (a rescaled input: a new learning rate,
  loss scaling). The ranks send every key above a guess a margin below
  it and each picks the k largest of what arrives; when fewer than k arrive (the magnitudes
  moved), the exact path runs and the margin doubles; when far more than k arrive it halves;
- or the **exact path** (:func:`threshold_rule`): histogram rounds over the owned sums' keys,
  each an ``Allreduce`` of at most ``2**11 + 3`` int64 bins. The first round's bins cover 16
  octaves below the bound (:func:`sparcml._topk.select_kernels.first_interval`); a round ends the
  search when the bin at the threshold is taken whole, holds few keys (at most ``k // 8``:
  sent as candidates, the receivers pick) or is one key value (its ties split in index order,
  :func:`split_ties`).

Every part of the rule is global (histograms, the agreed bound, the gathered entries), so
every rank holds the same rule and the same memory. Each synchronizing step of a call is
counted in ``ctx.topk.steps`` (:class:`TopKMemory`; what
:func:`sparcml._model.costmodel.topk_sync_steps` predicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from mpi4py import MPI
from .._lazy import lazy_module
select_kernels = lazy_module("sparcml._topk.select_kernels")


__all__ = ["KEYS", "NOTHING", "MANTISSA_BITS", "TopKMemory", "memory_of", "Rule", "step",
           "bound_key", "threshold_rule", "split_ties", "guess", "remember", "count_nan",
           "sum_histograms"]

KEYS = {  # value dtype -> (bits view, |x| mask, key of +Inf, key bits: the sign bit is masked)
    np.dtype(np.float32): (np.uint32, np.uint64(0x7FFFFFFF), np.uint64(0x7F800000), 31),
    np.dtype(np.float64): (np.uint64, np.uint64(0x7FFFFFFFFFFFFFFF),
                           np.uint64(0x7FF0000000000000), 63),
}
NOTHING = (1 << 64) - 1  # a threshold no key exceeds
MANTISSA_BITS = {np.dtype(np.float32): 23, np.dtype(np.float64): 52}
_HISTORY_LIMIT = 10_000  # remembered thresholds per context (as auto's choices)


@dataclass
class TopKMemory:
    """The global top-k's memory on one context (``ctx.topk``; the same on every rank).

    ``thresholds``: per ``(dim, k, value dtype)`` key, ``(bound, threshold, margin)`` of its
    last call (:func:`remember`), at most ``_HISTORY_LIMIT`` keys. ``steps``: the synchronizing
    steps of the running (then the last) call, the agreement included."""

    thresholds: dict = field(default_factory=dict)
    steps: int = 0


def memory_of(ctx) -> TopKMemory:
    """``ctx.topk``, made at its first use."""
    if ctx.topk is None:
        ctx.topk = TopKMemory()
    return ctx.topk


def step(ctx) -> None:
    """Count one synchronizing step of the running call (every rank waits for others)."""
    ctx.topk.steps += 1


class Rule(NamedTuple):
    """The global selection, the same on every rank. Each rank sends its keys above
    ``threshold`` and the first ``ties`` of its keys equal to it; of what arrives, keys
    ``>= high`` are selected and of those below, the ``want`` largest (ties: lower index)."""

    threshold: int  # keys above are sent (NOTHING: none)
    high: int  # with want > 0: received keys >= high are selected, the others are candidates
    want: int  # candidates to select (0: every received key is selected)
    ties: int  # keys equal to threshold this rank sends, lowest index first (-1: none)
    nan: int  # NaN keys among the sums (overflow): nothing is selected


def bound_key(top: int, size: int, value_dtype) -> int:
    """A key above every ``|sum|`` of ``size`` values of keys <= ``top`` (the key of Inf when
    the bound overflows): ``size * max|x|`` with a margin for rounding. Only the number of
    rounds depends on it (keys above it would be counted in the first round's ABOVE slot)."""
    bits_dtype = KEYS[np.dtype(value_dtype)][0]
    largest = float(np.array([top], bits_dtype).view(value_dtype)[0])
    with np.errstate(over="ignore"):
        bound = np.array([largest * size * (1 + 2.0 ** -6)], value_dtype)
    return int(bound.view(bits_dtype)[0] & KEYS[np.dtype(value_dtype)][1])


def threshold_rule(ctx, keys, k, bound, bits, value_dtype, stats) -> Rule:
    """The global selection rule from the histogram rounds (see :class:`Rule`).

    Each round narrows an interval of keys holding the k-th largest; it stops as soon as the
    bin at the threshold is taken whole, holds at most ``k // 8`` keys (sent as candidates:
    the receivers pick among them, so no further round), or is a single key (its ties split
    in index order by one ``Exscan``)."""
    nothing = Rule(NOTHING, NOTHING, 0, -1, 0)
    inf_key, mantissa_bits = int(KEYS[value_dtype][2]), MANTISSA_BITS[value_dtype]
    if bound == 0 or k == 0:  # every input value is zero (or nothing is wanted)
        return nothing
    nbins = 1 << bits
    hist = np.zeros(nbins + select_kernels.EXTRA_SLOTS, np.int64)
    extra = hist[nbins:]
    base, span, shift = select_kernels.first_interval(bound, mantissa_bits, bits)
    budget = max(k // 8, 16)
    want, first = k, True
    while True:
        hist[:] = 0
        select_kernels.range_histogram(keys, np.uint64(base), np.uint64(span), shift, first,
                                       np.uint64(inf_key), hist)
        sum_histograms(ctx, hist, stats)
        bins = hist[:((span - 1) >> shift) + 1]
        if first:
            if extra[select_kernels.NAN]:
                return nothing._replace(nan=int(extra[select_kernels.NAN]))
            above, below = int(extra[select_kernels.ABOVE]), int(extra[select_kernels.BELOW])
            total = int(bins.sum()) + above + below
            want = min(k, total)
            if want == 0:
                return nothing
            if want == total:
                return Rule(0, 1, 0, -1, 0)  # every nonzero key
        first_round, first = first, False
        if first_round and above >= want:  # the bound was too low: look above it
            b0, b1, count = base + span, inf_key + 1, above
        else:
            if first_round:
                want -= above
            from_top = np.cumsum(bins[::-1])  # keys in bins >= (nbins - 1 - i)
            if first_round and from_top[-1] < want:  # below the interval
                want -= int(from_top[-1])
                b0, b1, count = 1, base, below
            else:
                i = int(np.searchsorted(from_top, want))  # first i with from_top[i] >= want
                digit = bins.size - 1 - i
                if i > 0:
                    want -= int(from_top[i - 1])
                b0 = base + (digit << shift)
                b1, count = min(b0 + (1 << shift), base + span), int(bins[digit])
        if count == want:  # the whole bin
            return Rule(b0 - 1, b0, 0, -1, 0)
        if count <= budget:  # candidates: the receivers pick
            return Rule(b0 - 1, b1, want, -1, 0)
        if b1 - b0 == 1:  # one key value, tied more than budget times: split by index
            return Rule(b0, b0, 0, want, 0)
        base, span = b0, b1 - b0
        shift = select_kernels.round_shift(span, bits)


def sum_histograms(ctx, hist: np.ndarray, stats) -> None:
    """``hist`` becomes the sum over ranks of every rank's ``hist`` (int64, exact): an MPI
    ``Allreduce`` (2 (P-1)/P of its bytes per rank, where a point-to-point allgather would send
    P - 1 times them; a round took as long either way on the emulated network)."""
    ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, hist, MPI.SUM)
    step(ctx)
    stats.bytes_sent += int(2 * (ctx.size - 1) / ctx.size * hist.nbytes)
    stats.messages += 1


def split_ties(ctx, keys, rule: Rule, stats) -> Rule:
    """``rule`` with ``ties`` this rank's share of the ``rule.ties`` keys equal to the
    threshold that are selected: the ranks own increasing index ranges, so the ties before
    this rank's are on lower ranks (an ``Exscan`` of one integer: one step)."""
    mine = np.array([select_kernels.count_at_threshold(keys, np.uint64(rule.threshold), 0)],
                    np.int64)
    before = np.zeros(1, np.int64)
    ctx.waiter.collective(ctx.comm, "Exscan", mine, before, MPI.SUM)
    step(ctx)
    if ctx.rank == 0:
        before[0] = 0  # MPI leaves rank 0's Exscan result undefined
    stats.bytes_sent += 8
    stats.messages += 1
    return rule._replace(ties=int(min(max(rule.ties - before[0], 0), mine[0])))


def guess(ctx, memo_key, bound: int, value_dtype):
    """``(guessed key, margin)`` from the remembered threshold of ``memo_key``, or None."""
    memo = memory_of(ctx).thresholds.get(memo_key)
    if memo is None:
        return None
    old_bound, threshold, margin = memo
    if abs(bound - old_bound) > 1 << (MANTISSA_BITS[np.dtype(value_dtype)] - 2):
        # the bound moved more than a quarter octave (a rescaled input): keep the distance
        threshold = bound - (old_bound - threshold)
    return max(1, threshold - (1 << margin)), margin


def remember(ctx, memo_key, bound, values, k, value_dtype, margin) -> None:
    """Keep this call's exact threshold (the k-th largest key), the bound of the sums (so
    that a rescaled input finds it too, see :func:`guess`), and the guess's margin (in key
    units, ``2**margin``). Every rank keeps the same: all of it is global."""
    thresholds = memory_of(ctx).thresholds
    if k == 0 or values.size < k or bound == 0:  # no threshold: every nonzero sum was taken
        thresholds.pop(memo_key, None)
        return
    bits_dtype, absmask = KEYS[value_dtype][:2]
    threshold = int(select_kernels.min_key(values.view(bits_dtype), absmask))
    if memo_key in thresholds or len(thresholds) < _HISTORY_LIMIT:
        thresholds[memo_key] = (bound, threshold, margin)


def count_nan(values) -> int:
    """How many of ``values`` are NaN."""
    bits_dtype, absmask, inf_key, _ = KEYS[values.dtype]
    return int(select_kernels.count_above(values.view(bits_dtype), absmask, inf_key))


