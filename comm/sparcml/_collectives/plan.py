"""Persistent allreduce plans: agreement, algorithm and buffers fixed once, then only data moves.

The shape of MPI-4's ``MPI_Allreduce_init`` and FFTW's plans::

    plan = sparcml.plan(dim, np.float32, comm)           # recursive doubling, the default
    for step in range(steps):
        total = plan.allreduce(gradient(step))         # no agreement round, same sum
        plan.allreduce(gradient(step), out=buffer)     # nothing allocated on the steady path

:func:`plan` is collective (every rank of ``comm`` calls it with the same arguments, checked:
:class:`~sparcml.RankMismatchError` on every rank otherwise). It agrees on dim, value dtype,
algorithm, quantizer and options once, resolves ``"auto"`` (calibrating the cost model on its
first use, as :func:`sparcml.allreduce` does) and fixes the algorithm. Each
:meth:`AllreducePlan.allreduce` then validates its input on this rank only and runs the
algorithm; a lossless recursive doubling of up to 8 MiB dense runs on the plan's own buffers
(:mod:`sparcml._collectives.plan_fast`). Results are bitwise those of :func:`sparcml.allreduce`
with the same algorithm. Quantized plans give the same result on every rank (the random
streams that ranks share, recursive doubling's per group, are seeded per call from a base
agreed at creation, where the plain call agrees on a fresh seed each call), so their bits
differ from the plain call's.

**Errors without an agreement round.** A rank whose input is bad (another dim or dtype than
the plan's, a NaN under QSGD, any exception in validation) does not skip the schedule: it
takes part with a zero vector, and every message it sends carries the error flag of the wire
header (:mod:`sparcml._wire.header`). A rank that receives a flagged message flags its own
later messages, so by the end of the schedule every rank knows (the schedules of the
algorithms reach every rank from every rank: the butterfly and unfold of recursive doubling,
the all-to-all first phase of the split algorithms, the allgather). An algorithm whose
messages do not all go through the context's operations (its record's ``routes_through_ops``
is False: the dense baseline's ``MPI_Allreduce``, a plugin calling ``ctx.comm`` itself) gets
the flag in a one-integer non-blocking reduction beside each call instead, so a failing rank
is never left alone in the agreement. Then, and only then, the
ranks run one agreement (:func:`sparcml._runtime.agreement.raise_agreed`) and every rank
raises the first failing rank's error; the plan stays usable. When every rank passed the same
other dim and dtype, the error is :class:`PlanShapeError` (so that a caller holding plans per
key, :class:`sparcml.compression.Compression`, can make a new plan for the new shape).

**Plans cannot be crossed.** Each plan has an identity agreed at its creation, and every call
first checks it with one small reduction (:mod:`sparcml._collectives.plan_identity`): ranks
that reached different calls at the same point raise the same
:class:`~sparcml.RankMismatchError` on every rank, never a wrong result or a hang.

Not in plans: node-aware (hierarchical) calls; ``auto`` is resolved once at creation (from
``nnz``, the expected nonzeros per rank: the maximum over ranks, so every rank chooses alike,
and the choice is checked equal), not per call.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import arith
from .._errors import InvalidVectorError
from .._model import auto
from .._model.link_costs import call_options
from .._options import Options, in_call
from .._runtime.agreement import VALUE_DTYPE_NAMES, agree, agreed_call, raise_agreed
from .._runtime.context import CommContext, TrafficStats, context_for
from .._vector import SparseVector, _value_dtype
from .._wire.codec import Codec
from .algorithms import DEFAULT_ALGORITHM
from .algorithms.recursive_doubling import ALGORITHM as RECURSIVE_DOUBLING
from .entry import _abort_job, _calibration_run, fail_stop
from .flag_ops import FlagOps
from .ops import PLAIN
from .partition import memory_of as partition_memory_of
from .plan_fast import FastRecursiveDoubling, fits
from .plan_identity import PlanIdentity, next_plan_id, note_plan_id
from .registry import algorithm_code, algorithm_names, check_algorithm_options, get_algorithm
from .validation import (LocalFailure, check_out, check_quantizable, check_stats, coerce_vector,
                         quantizer_code)

__all__ = ["AllreducePlan", "PlanInputError", "PlanShapeError", "plan", "FlagOps", "check_plan_input",
           "agreed_error"]


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
    if v.dim != dim or v.values.dtype != dtype:
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


class AllreducePlan:
    """A persistent sparse allreduce of vectors of one dim and value dtype on one communicator
    (see the module docstring; made by :func:`sparcml.plan`).

    Attributes: ``dim``, ``dtype``, ``algorithm`` (the registry name it runs: ``"auto"``
    resolved), ``quantizer``, ``quantize_sparse``, ``options`` (the agreed
    :class:`~sparcml.Options`), ``comm``, ``fast`` (whether calls run on the plan's own
    buffers, :mod:`sparcml._collectives.plan_fast`), ``calls``, ``number`` (the plan's
    identity number, the same on every rank; see the module docstring).
    """

    def __init__(self, dim, dtype, comm: MPI.Comm | None = None, *,
                 algorithm: str = DEFAULT_ALGORITHM, quantizer=None,
                 quantize_sparse: bool = False, options: Options | None = None,
                 nnz: int | None = None, _ctx: CommContext | None = None):
        # _ctx: made on a context (a communication thread's), for allreduce_in on it
        if _ctx is None:
            comm = MPI.COMM_WORLD if comm is None else comm
            ctx = context_for(comm)
        else:
            ctx, comm = _ctx, _ctx.comm
        fields = {"dim": -1, "value dtype": -1, "algorithm": -1, "quantizer": 0,
                  "quantize_sparse": 0}
        record = None
        with agreed_call(ctx, options, fields, _describe,
                         maxima={"seed": 0, "nnz": 0, "plan id": next_plan_id()}) as call:
            record = check_algorithm_options(algorithm, quantizer=quantizer)
            fields["algorithm"] = algorithm_code(algorithm)
            fields["quantizer"] = quantizer_code(quantizer)
            fields["quantize_sparse"] = int(bool(quantize_sparse))
            zero = SparseVector.zeros(dim, _value_dtype(np.empty(0, dtype)))
            fields["dim"] = zero.dim
            fields["value dtype"] = zero.dtype.itemsize
            if nnz is not None and (isinstance(nnz, bool) or not isinstance(
                    nnz, (int, np.integer)) or not 0 <= nnz <= zero.dim):
                raise InvalidVectorError(f"nnz must be an integer in [0, dim], got {nnz!r}")
            # auto chooses for the largest expectation over ranks: the same on every rank
            call.maxima["nnz"] = zero.dim // 100 if nnz is None else int(nnz)
            if quantizer is not None:  # the base of the calls' common seeds: one draw
                call.maxima["seed"] = int(quantizer._rng.integers(0, 2**62))
        self.comm = comm
        self.dim, self.dtype = zero.dim, zero.dtype
        self.quantizer = quantizer
        self.quantize_sparse = bool(quantize_sparse and quantizer is not None)
        self.options = call.options
        self.calls = 0
        self._zero = zero
        self._seed = call.agreed["seed"]
        self._codec = Codec(zero.index_dtype, zero.dtype, quantizer, self.quantize_sparse, 0,
                            options=call_options(ctx, self.options))
        if record is None:  # auto: the cost model's choice for nnz entries per rank
            expected = call.agreed["nnz"]
            with in_call(self.options):
                algorithm = auto.choose(ctx, _sample(zero, expected), expected, self._codec,
                                        _calibration_run)
            if ctx.size > 1:  # the model and the history are alike on every rank: checked
                agree(ctx.comm, {"auto's choice": algorithm_code(algorithm)}, None,
                      _describe_choice, waiter=ctx.waiter)
        self.algorithm = algorithm
        self.number = call.agreed["plan id"]
        note_plan_id(self.number)
        self._identity = PlanIdentity(
            f"plan #{self.number}: allreduce of dim {self.dim} {self.dtype.name} by "
            f"{algorithm}")
        self._record = get_algorithm(algorithm)
        self.fast = (algorithm == RECURSIVE_DOUBLING.name and quantizer is None
                     and fits(self.dim, self.dtype))
        self._states: dict[int, _OnContext] = {}

    def __repr__(self) -> str:
        return (f"AllreducePlan(dim={self.dim}, dtype={self.dtype.name}, "
                f"algorithm={self.algorithm!r}, P={self.comm.Get_size()}, fast={self.fast})")

    def _state(self, ctx) -> _OnContext:
        st = self._states.get(id(ctx))
        if st is None or st.ctx.comm is not ctx.comm:
            st = self._states[id(ctx)] = _OnContext(ctx, self.fast, self.dim, self.dtype)
        return st

    # ---- calls ---------------------------------------------------------------------------------
    def allreduce(self, vec, out: np.ndarray | None = None, *,
                  stats: TrafficStats | None = None, check: bool = True) -> SparseVector:
        """The sum of every rank's ``vec`` (collective over the plan's communicator, in the
        same order as the other sparcml calls on it).

        ``vec``: a :class:`~sparcml.SparseVector` or 1-d ndarray of the plan's dim and dtype,
        or ``(dim, indices, values)``; ``out``: a buffer for the dense result, as in
        :func:`sparcml.allreduce` (then nothing is allocated on the fast path). Bad input on
        any rank raises the same error on every rank (see the module docstring).
        """
        return self.allreduce_in(context_for(self.comm), vec, out=out, stats=stats,
                                 check=check)

    def iallreduce(self, vec, out: np.ndarray | None = None, *,
                   stats: TrafficStats | None = None, check: bool = True):
        """Non-blocking :meth:`allreduce`: a :class:`~sparcml.Request` (on the
        communicator's communication thread, in submission order with the other non-blocking
        calls; ``vec`` and ``out`` must stay untouched until it completes)."""
        from .._runtime.nonblocking import submit

        return submit(self.comm, f"plan.iallreduce({self.algorithm})", _submitted, self, vec,
                      out, stats, check)

    def allreduce_in(self, ctx, vec, *, out=None, stats=None, check=True,
                     sent: list | None = None) -> SparseVector:
        """:meth:`allreduce` on a context (the blocking path's or a communication thread's);
        ``sent``: as in :func:`sparcml._collectives.entry.allreduce_in`."""
        st = self._state(ctx)
        error = None
        try:
            v = check_plan_input(vec, self.dim, self.dtype, check=check)
            if out is not None:
                check_out(out, v)
            if stats is None or type(stats) is not TrafficStats:
                stats = check_stats(stats)
            if self.quantizer is not None and ctx.size > 1:
                check_quantizable(v)
        except Exception as exc:  # noqa: BLE001 - any error is this rank's, raised everywhere
            error, v, out, stats = exc, self._zero, None, TrafficStats()
            if sent is not None:
                sent = None
        if ctx.size > 1:
            self._identity.check(ctx)  # the same plan on every rank, or one error everywhere
        self.calls += 1
        stats.calls += 1
        stats.algorithm = self.algorithm
        stats.hierarchical = False
        if ctx.size == 1:
            if error is not None:
                agreed_error(ctx, error)
            return _single(v, self._codec, out, sent, self._record.writes_out)
        if st.fast is not None:
            try:
                cur = st.fast.run(v, stats, error is not None, self._codec)
            except BaseException as exc:  # noqa: BLE001 - as fail_stop, without its frame
                _abort_job(ctx.comm, f"plan.allreduce({self.algorithm})", exc)
                raise
            if st.fast.seen:
                agreed_error(st.ctx, error)
            if sent is not None:
                sent.append(arith.as_part(v))
            return st.fast.result(cur, out)
        return self._run(st, v, out, stats, sent, error)

    def _run(self, st: _OnContext, vec, out, stats, sent, error):
        """The registry's algorithm on the plan's context (flags through :class:`FlagOps`)."""
        ctx, record, codec = st.ctx, self._record, self._codec
        st.ops.reset(error is not None)
        if self.quantizer is not None:
            codec.seed = _splitmix(self._seed + self.calls)
        flag = None
        if not record.routes_through_ops:  # no flag in its messages: it rides beside them
            flag = np.array([int(error is not None)], np.int32)
            req = ctx.comm.Iallreduce(MPI.IN_PLACE, flag, MPI.MAX)
        with fail_stop(ctx.comm, f"plan.allreduce({record.name})"):
            try:
                if record.writes_out:
                    result = record.run(ctx, vec, stats=stats, codec=codec, out=out, sent=sent)
                else:
                    result = record.run(ctx, arith.normalize(vec, codec), stats=stats,
                                        codec=codec, out=None, sent=sent)
            finally:
                if flag is not None:
                    ctx.waiter.wait(req)
        if st.ops.flagged or (flag is not None and flag[0]):
            agreed_error(ctx, error)
        if out is not None and result.values is not out:
            result = SparseVector.unchecked(vec.dim, None, arith.write_dense(result, out))
        return result


def _submitted(ctx, plan: AllreducePlan, vec, out, stats, check):
    return plan.allreduce_in(ctx, vec, out=out, stats=stats, check=check)


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


def _sample(zero: SparseVector, nnz: int) -> SparseVector:
    """A vector of ``nnz`` spread entries (what ``auto`` chooses for)."""
    if nnz >= zero.dim:
        return SparseVector.unchecked(zero.dim, None, np.ones(zero.dim, zero.dtype))
    idx = np.linspace(0, zero.dim - 1, nnz).astype(zero.index_dtype) if nnz else \
        np.empty(0, zero.index_dtype)
    idx = np.unique(idx)
    return SparseVector.unchecked(zero.dim, idx, np.ones(idx.size, zero.dtype))


def _describe() -> dict:
    names = {algorithm_code(n): n for n in algorithm_names(auto=True)}
    names[-1] = "(invalid)"
    return {"algorithm": names, "value dtype": VALUE_DTYPE_NAMES}


def _describe_choice() -> dict:
    return {"auto's choice": {algorithm_code(n): n for n in algorithm_names()}}


def plan(dim, dtype, comm: MPI.Comm | None = None, *, algorithm: str = DEFAULT_ALGORITHM,
         quantizer=None, quantize_sparse: bool = False, options: Options | None = None,
         nnz: int | None = None) -> AllreducePlan:
    """A persistent allreduce of ``dim`` values of ``dtype`` on ``comm`` (collective).

    Every rank of ``comm`` (default ``MPI.COMM_WORLD``) calls it with the same arguments
    (checked: :class:`~sparcml.RankMismatchError` on every rank), in the same order as its
    other sparcml calls on ``comm``. ``algorithm``, ``quantizer``, ``quantize_sparse`` and
    ``options`` as in :func:`sparcml.allreduce` (``"auto"`` is resolved here, for ``nnz``
    entries per rank, default ``dim // 100``). Returns an :class:`AllreducePlan`:
    ``plan.allreduce(vec, out=None)``, ``plan.iallreduce(vec, out=None)``.
    """
    return AllreducePlan(dim, dtype, comm, algorithm=algorithm, quantizer=quantizer,
                         quantize_sparse=quantize_sparse, options=options, nnz=nnz)


