"""A persistent plan's calls, and the plain call's cached plans: one steady path for both.

Package-internal. :class:`PlanCore` is what a plan fixes at its creation (dim, dtype, the
algorithm's registry record, the codec, a quantizer and its agreed seed base) and what it
keeps per context (:class:`_OnContext`: a context whose operations carry the wire header's
error flag, and the buffers of recursive doubling's fast path,
:mod:`sparcml._collectives.plan_fast`). It runs a call after the crossing check:

- :meth:`PlanCore.run`: a persistent plan's call (:class:`sparcml.AllreducePlan`), whose
  input may be bad on some rank: that rank takes part with zeros and the error flag travels
  along the schedule (see :mod:`sparcml._collectives.plan`), then every rank raises;
- :meth:`PlanCore.serve`: a plain :func:`sparcml.allreduce` after its agreement (so every
  rank's input is valid): the fast path on the core's buffers with the call's own codec.

The plain call keeps one core per shape in its context (:func:`cached_plan`, keyed by what the
core depends on: dim and dtype; the latest :data:`PLANS_KEPT` plans of any kind, top-k's
included): every rank that agreed on a call looks up the same key, and a core is made locally
(no collective), so hits and misses never need to match across ranks.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import arith
from .._errors import InvalidVectorError
from .._runtime.agreement import raise_agreed
from .._runtime.call_context import call_context
from .._runtime.context import CommContext, TrafficStats
from .._vector import SparseVector
from .algorithms.recursive_doubling import ALGORITHM as RECURSIVE_DOUBLING
from .fail_stop import abort_job, fail_stop
from .flag_ops import FlagOps
from .ops import PLAIN
from .partition import memory_of as partition_memory_of
from .plan_fast import FastRecursiveDoubling, fits
from .validation import LocalFailure, coerce_vector

__all__ = ["PlanCore", "PlanInputError", "PlanShapeError", "check_plan_input", "agreed_error",
           "cached_plan", "keep_plan", "PLANS_KEPT"]

PLANS_KEPT = 16  # per context: the plain calls' plans of the latest keys (every kind)


def cached_plan(ctx, key: tuple, make):
    """The context's plan of ``key`` (``make()`` on a miss, :func:`keep_plan`): the plain
    calls' plan cache, looked up after the call's agreement. ``key`` holds everything the plan
    depends on, agreed, so every rank holds the same plans."""
    plan = ctx.plans.get(key) if ctx.plans is not None else None
    return plan if plan is not None else keep_plan(ctx, key, make())


def keep_plan(ctx, key: tuple, plan):
    """Put ``plan`` in the context's cache under ``key`` (the oldest of more than
    :data:`PLANS_KEPT` dropped); returns it. A call that looks its plan up before its
    agreement (the lean paths) keeps a new one only once the agreement passed, so that
    every rank's cache holds the same keys."""
    cache = ctx.plans
    if cache is None:
        cache = ctx.plans = {}
    if key not in cache and len(cache) >= PLANS_KEPT:
        cache.pop(next(iter(cache)))
    cache[key] = plan
    return plan


class PlanInputError(InvalidVectorError):
    """A plan's call got a vector of another dim or value dtype than the plan's (raised on
    every rank; ``shape``: ``(dim, dtype.str)`` of the vector, on the rank that had it)."""

    def __init__(self, message: str, shape: tuple | None = None):
        super().__init__(message)
        self.shape = shape


class PlanShapeError(PlanInputError):
    """Every rank passed the same dim and value dtype to a plan, other than the plan's own:
    make a new plan for them (raised on every rank, like any plan error; ``shape``: theirs)."""


def _splitmix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x3FFFFFFFFFFFFFFF


def check_plan_input(vec, dim: int, dtype: np.dtype, *, check: bool = True) -> SparseVector:
    """``vec`` as a :class:`SparseVector` of the plan's ``dim`` and ``dtype``, or the error
    (:class:`PlanInputError` for another dim or dtype). A SparseVector or ndarray of the right
    shape costs a few attribute reads."""
    if isinstance(vec, SparseVector):
        v = vec
    elif isinstance(vec, LocalFailure):
        raise vec.error
    elif isinstance(vec, np.ndarray) and vec.ndim == 1 and vec.dtype == dtype \
            and vec.flags.c_contiguous:
        v = SparseVector.from_dense(vec)
    else:
        v = coerce_vector(vec, check=check)
    if v.dim != dim or (v.values.dtype is not dtype and v.values.dtype != dtype):
        raise PlanInputError(
            f"the plan was made for dim {dim} and {dtype} values, got dim {v.dim} and "
            f"{v.values.dtype} values; make a plan for this shape (sparcml.plan)",
            (v.dim, v.values.dtype.str))
    return v


def agreed_error(ctx, error: BaseException | None) -> None:
    """Collective, once a plan's flag said that some rank failed: raise on every rank.

    When every rank failed with the same shape mismatch, :class:`PlanShapeError`; else the
    first failing rank's error (:func:`sparcml._runtime.agreement.raise_agreed`)."""
    shape = error.shape if isinstance(error, PlanInputError) else None
    shapes = ctx.comm.allgather(shape) if ctx.size > 1 else [shape]
    if shapes[0] is not None and all(s == shapes[0] for s in shapes):
        dim, dtype = shapes[0]
        raise PlanShapeError(f"every rank passed dim {dim} and {np.dtype(dtype)} values to a "
                             f"plan made for another shape ({error}); make a new plan",
                             (dim, dtype)) from error
    raise_agreed(ctx.comm, error)


class _OnContext:
    """A plan's state on one context (the blocking path's, or the communication thread's):
    a context of its own sharing the workspace, waiter and communicator, whose operations
    carry the error flag, and the fast path's buffers."""

    __slots__ = ("ctx", "ops", "fast")

    def __init__(self, base: CommContext, fast: bool, dim: int, dtype):
        self.ops = FlagOps(base.ops)
        # the partitions are the context's own: plain calls and plans cut the same blocks
        self.ctx = CommContext(base.comm, base.rank, base.size, base.waiter, engine=None,
                               workspace=base.workspace, ops=self.ops, model=base.model,
                               link_costs=base.link_costs,
                               partition_memory=partition_memory_of(base))
        # the fast path moves bytes itself: real ranks only (a simulated run's operations
        # share buffers and charge modeled compute, which the fast path would bypass)
        self.fast = (FastRecursiveDoubling(base, dim, dtype)
                     if fast and base.size > 1 and base.ops is PLAIN else None)


class PlanCore:
    """A plan's steady state (see the module docstring): ``dim``, ``dtype``, ``record`` (the
    registry's algorithm), ``codec`` (the plan's; None for a plain call's core, whose calls
    bring their own), ``quantizer``, ``seed`` (the base of a quantized plan's per-call seeds),
    ``fast`` (whether real ranks run recursive doubling on the core's buffers)."""

    __slots__ = ("dim", "dtype", "record", "codec", "quantizer", "seed", "fast", "agreements",
                 "_states", "_what")

    def __init__(self, dim: int, dtype, record, codec=None, *, quantizer=None, seed: int = 0):
        self.dim, self.dtype = dim, np.dtype(dtype)
        self.record, self.codec = record, codec
        self.quantizer, self.seed = quantizer, seed
        self.fast = (record.name == RECURSIVE_DOUBLING.name and quantizer is None
                     and fits(dim, self.dtype))
        self._states: dict[int, _OnContext] = {}
        self._what = f"allreduce({record.name})"
        # a plain call's core: its calls' agreement arrays and codecs, per options
        # (sparcml._collectives.entry._lean_call)
        self.agreements: dict = {}

    def __repr__(self) -> str:
        return (f"PlanCore(dim={self.dim}, dtype={self.dtype.name}, "
                f"algorithm={self.record.name!r}, fast={self.fast})")

    def state(self, ctx) -> _OnContext:
        """The core's state on ``ctx`` (made at the first call there)."""
        st = self._states.get(id(ctx))
        if st is None or st.ctx.comm is not ctx.comm:
            st = self._states[id(ctx)] = _OnContext(ctx, self.fast, self.dim, self.dtype)
        return st

    def serve(self, ctx, vec: SparseVector, stats: TrafficStats | None, codec, out=None):
        """A plain call of recursive doubling after its agreement (every rank's ``vec``
        valid, P > 1, real ranks, :attr:`fast`), with the call's lossless ``codec``: the sum,
        bitwise the algorithm's (dense on ``out`` when given; ``stats`` None: not counted).
        Collective."""
        st = self._states.get(id(ctx))
        if st is None or st.ctx.comm is not ctx.comm:
            st = self.state(ctx)
        fast = st.fast
        try:
            cur = fast.run(vec, stats, False, codec)
        except BaseException as exc:  # noqa: BLE001 - as fail_stop, without its frame
            abort_job(ctx.comm, self._what, exc)
            raise
        return fast.result(cur, out)

    def steady(self, ctx, v: SparseVector) -> SparseVector:
        """:meth:`run` of a valid ``v`` (this rank's input of the plan's shape) with no
        ``out``, ``stats`` or ``sent``, P > 1, on a :attr:`fast` core: the same steps,
        fewer of them. Collective; another rank's error is raised here too."""
        st = self._states.get(id(ctx))
        if st is None or st.ctx.comm is not ctx.comm:
            st = self.state(ctx)
        fast = st.fast
        if fast is None:  # (a simulated communicator: the registry's algorithm)
            return self.run(ctx, v, None, None, None, None, 0)  # (no quantizer: 0 unread)
        try:
            cur = fast.run(v, None, False, self.codec)
        except BaseException as exc:  # noqa: BLE001 - as fail_stop, without its frame
            abort_job(ctx.comm, "plan." + self._what, exc)
            raise
        if fast.seen:
            agreed_error(st.ctx, None)
        return fast.result(cur, None)

    def run(self, ctx, v: SparseVector, out, stats: TrafficStats | None, sent, error,
            call: int):
        """A persistent plan's call number ``call`` after its identity check: ``v`` (this
        rank's input, or a zero stand-in when ``error`` holds this rank's validation error),
        ``out``, ``stats`` (None: not counted), ``sent`` as in
        :func:`sparcml._collectives.entry.allreduce_in`.
        Collective; any rank's error is raised on every rank (:func:`agreed_error`)."""
        if ctx.size == 1:
            if error is not None:
                agreed_error(ctx, error)
            return _single(v, self.codec, out, sent, self.record.writes_out)
        st = self._states.get(id(ctx))
        if st is None or st.ctx.comm is not ctx.comm:
            st = self.state(ctx)
        fast = st.fast
        if fast is not None:
            try:
                cur = fast.run(v, stats, error is not None, self.codec)
            except BaseException as exc:  # noqa: BLE001 - as fail_stop, without its frame
                abort_job(ctx.comm, "plan." + self._what, exc)
                raise
            if fast.seen:
                agreed_error(st.ctx, error)
            if sent is not None:
                sent.append(arith.as_part(v))
            return fast.result(cur, out)
        return self._registry_run(st, v, out, TrafficStats() if stats is None else stats, sent,
                                  error, call)

    def _registry_run(self, st: _OnContext, vec, out, stats, sent, error, call: int):
        """The registry's algorithm on the core's context (flags through :class:`FlagOps`)."""
        ctx, record, codec = st.ctx, self.record, self.codec
        st.ops.reset(error is not None)
        if self.quantizer is not None:
            codec.seed = _splitmix(self.seed + call)
        flag = None
        if not record.routes_through_ops:  # no flag in its messages: it rides beside them
            flag = np.array([int(error is not None)], np.int32)
            req = ctx.comm.Iallreduce(MPI.IN_PLACE, flag, MPI.MAX)
        with fail_stop(ctx.comm, "plan." + self._what):
            try:
                view = call_context(ctx, codec.options, record.tags.allocated)
                if record.writes_out:
                    result = record.run(view, vec, stats=stats, codec=codec, out=out, sent=sent)
                else:
                    result = record.run(view, arith.normalize(vec, codec), stats=stats,
                                        codec=codec, out=None, sent=sent)
            finally:
                if flag is not None:
                    ctx.waiter.wait(req)
        if st.ops.flagged or (flag is not None and flag[0]):
            agreed_error(ctx, error)
        if out is not None and result.values is not out:
            result = SparseVector.unchecked(vec.dim, None, arith.write_dense(result, out))
        return result


def _single(vec, codec, out, sent, writes_out):
    """P = 1, as :func:`sparcml._collectives.entry.allreduce_in` answers it."""
    if sent is not None:
        sent.append(arith.as_part(vec))
    if out is not None:
        return SparseVector.unchecked(vec.dim, None, arith.write_dense(vec, out))
    if writes_out:
        return SparseVector.unchecked(vec.dim, None, vec.to_dense())
    result = arith.normalize(vec, codec)
    return arith.copy_of(vec) if result is vec else result
