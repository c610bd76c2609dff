"""``auto``'s measured refinement: try what the cost model cannot separate, keep the fastest.

The cost model (:mod:`sparcml._model.costmodel`) ranks the algorithms from a calibration on small
inputs. Where its error (up to 2-4x at scale, BENCHMARKS.md "Scaling studies") is larger than
the gap between its best predictions, it ranks near-ties the wrong way round. Iterative
training repeats the same call thousands of times, so ``auto`` measures instead of trusting
the model there:

1. the first call of a vector size runs the model's choice untimed: it teaches ``auto`` the
   inputs' overlap, which the model needs;
2. then, per shape (vector dim, input nnz within a factor of sqrt 2, the last result's size
   over the inputs' within a factor of 2 (:func:`fill_bucket`: how much the inputs overlap),
   dtypes, quantized or not; the node-aware options for the node-aware choice), the
   *contenders* -- every candidate predicted within
   :data:`MARGIN` of the best prediction, at most :data:`MAX_CONTENDERS`, best first -- run
   one call each;
3. those within :data:`RETRY` of the fastest measured run once more, in the reverse order (a
   call's time depends on what ran before it: caches, the allocator's free pages; one slow
   try must not rule an algorithm out);
4. the contender with the smallest measured time is kept for that shape from then on.

At most ``1 + MAX_CONTENDERS + MAX_CONTENDERS`` calls of a shape explore
(:data:`EXPLORING_CALLS`); the exploring calls are correct results like any other.

A call's time is the slowest rank's: each rank times its call on its own clock (the wall
clock, or a simulated communicator's virtual clock), and the next call on the communicator
carries that time in the agreement the entry point makes anyway (a maximum over ranks, at no
extra message). So every rank settles on the same algorithm after the same call, which the
collective needs. ``Options(auto_tuning=False)`` (default: ``SPARCML_AUTO_TUNING``; the same
on every rank: it is agreed) keeps the model's choice alone.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

__all__ = ["MARGIN", "MAX_CONTENDERS", "RETRY", "EXPLORING_CALLS", "TuningState", "state_of",
           "shape_key", "fill_bucket", "contenders_of", "choose", "begin", "end", "pending_ns",
           "resolve", "settled"]

MARGIN = 4.0          # a candidate predicted within this factor of the best is tried
MAX_CONTENDERS = 4    # at most this many are tried per shape
RETRY = 3.0           # a contender within this factor of the fastest first try runs again
EXPLORING_CALLS = 1 + 2 * MAX_CONTENDERS  # an upper bound on a shape's calls before it settles



@dataclass
class TuningState:
    """The measured refinement on one context (``ctx.tuning``; the same on every rank).

    ``shapes``: per shape key (:func:`shape_key`), its exploration: a dict with ``plan``
    (options still to try, in order), ``times`` (option -> measured seconds), ``round`` (1 or
    2) and ``settled`` (the option kept, or None while exploring); bounded by the caller
    (:mod:`sparcml._model.auto`). ``trial``: ``(key, option)`` when the call in flight is a
    trial; ``started``: ``(key, option, clock, start seconds)`` while it runs; ``measured``:
    ``(key, option, nanoseconds)``, this rank's time, to report at the next call."""

    shapes: dict = field(default_factory=dict)
    trial: tuple | None = None
    started: tuple | None = None
    measured: tuple | None = None


def state_of(ctx) -> TuningState:
    """``ctx.tuning``, made at its first use."""
    if ctx.tuning is None:
        ctx.tuning = TuningState()
    return ctx.tuning


def shape_key(kind: str, vec, nnz_max: int, lossy: bool, *extra) -> tuple:
    """What identifies "the same call" for tuning: ``nnz_max`` bucketed by factors of sqrt 2
    (a minibatch gradient's nnz varies call to call)."""
    bucket = round(2 * math.log2(nnz_max + 1))
    return ("tuning", kind, vec.dim, bucket, vec.index_dtype.itemsize, vec.dtype.itemsize,
            bool(lossy)) + tuple(extra)


def fill_bucket(K: int | None, nnz_max: int) -> int:
    """How much the last ``auto`` result of the same dim (``K`` entries; None: none yet)
    outgrew its inputs, log2(K / k) rounded (-1 before any): the same input size with other
    overlap (random vs overlapping supports, a model's phases) is another shape, whose best
    algorithm may differ."""
    return -1 if K is None else round(math.log2((K + 1) / (nnz_max + 1)))


def settled(tuning: TuningState, key: tuple):
    """The option kept for ``key``, or None while it is still being explored (or unseen)."""
    state = tuning.shapes.get(key)
    return None if state is None else state["settled"]


def contenders_of(ranked) -> list:
    """The options worth measuring: ``(predicted seconds, option)`` pairs within
    :data:`MARGIN` of the best prediction, at most :data:`MAX_CONTENDERS`, best first."""
    ranked = sorted(ranked, key=lambda pair: pair[0])
    best = ranked[0][0]
    return [opt for t, opt in ranked if t <= MARGIN * best][:MAX_CONTENDERS]


def choose(tuning: TuningState, key: tuple, rank) -> object:
    """The option to run for a call of shape ``key`` (the same on every rank, given the same
    state). ``rank()``: ``(predicted seconds, option)`` pairs for every candidate, called at
    the shape's first call. Marks the call as a trial when it explores (see :func:`begin`).
    The caller runs the model's choice instead while the inputs' overlap is unknown
    (:func:`fill_bucket` -1)."""
    state = tuning.shapes.get(key)
    if state is None:
        contenders = contenders_of(rank())
        state = tuning.shapes[key] = {"plan": list(contenders), "times": {}, "round": 1,
                                "settled": contenders[0] if len(contenders) == 1 else None}
    if state["settled"] is not None:
        return state["settled"]
    option = state["plan"][0]
    tuning.trial = (key, option)
    return option


def begin(tuning: TuningState, clock=time.perf_counter) -> None:
    """Just before the chosen algorithm runs: start timing if this call is a trial."""
    trial, tuning.trial = tuning.trial, None
    if trial is not None:
        tuning.started = trial + (clock, clock())


def end(tuning: TuningState) -> None:
    """Just after the algorithm returned: keep this rank's time for the next agreement."""
    started, tuning.started = tuning.started, None
    if started is not None:
        key, option, clock, t0 = started
        tuning.measured = (key, option, max(1, int((clock() - t0) * 1e9)))


def pending_ns(tuning: TuningState) -> int:
    """This rank's time of the last trial, in ns (0: none), for the next call's agreement."""
    measured = tuning.measured
    return 0 if measured is None else measured[2]


def resolve(tuning: TuningState, slowest_ns: int) -> None:
    """After the agreement: record the last trial's time (the maximum over ranks) and move its
    shape's exploration on. Every rank calls it with the same value."""
    measured, tuning.measured = tuning.measured, None
    if measured is None or slowest_ns <= 0:
        return
    key, option, _ = measured
    state = tuning.shapes.get(key)
    if state is None or state["settled"] is not None or not state["plan"] \
            or state["plan"][0] != option:
        return
    state["times"].setdefault(option, []).append(slowest_ns * 1e-9)
    state["plan"].pop(0)
    if state["plan"]:
        return
    fastest = {opt: min(ts) for opt, ts in state["times"].items()}
    best = min(fastest.values())
    if state["round"] == 1:
        state["round"] = 2
        # in the reverse order: a call's time depends on what ran before it (caches, the
        # allocator's free pages), so each contender's second try follows another one
        state["plan"] = [opt for opt, t in reversed(fastest.items()) if t <= RETRY * best]
        if len(state["plan"]) > 1:
            return
    state["settled"] = min(fastest, key=fastest.get)   # ties: the first tried
    state["plan"] = []
