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
algorithm; a lossless recursive doubling of up to 64 MiB dense runs on the plan's own buffers
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
other dim and dtype, the error is :class:`PlanShapeError`, or, for a plan made with
``follow_shape=True``, the plan remakes itself for the new shape on every rank and runs the
call (so that no caller keeps a retry loop: :class:`sparcml.compression.Compression`,
the linear apps' trainer).

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

from .._errors import InvalidArgumentError, InvalidVectorError
from .._model import auto
from .._model.link_costs import call_options
from .._options import Options, in_call
from .._runtime.agreement import VALUE_DTYPE_NAMES, agree, agreed_call
from .._runtime.context import CommContext, TrafficStats, context_for
from .._vector import SparseVector, _value_dtype
from .._wire.codec import Codec
from .algorithms import DEFAULT_ALGORITHM
from .entry import _calibration_run
from .plan_core import PlanCore, PlanInputError, PlanShapeError, agreed_error, check_plan_input
from .plan_identity import PlanIdentity, next_plan_id, note_plan_id
from .._registry import (algorithm_code, algorithm_names, check_algorithm_options,
                         get_algorithm)
from .validation import check_out, check_quantizable, check_stats, quantizer_code

__all__ = ["AllreducePlan", "PlanInputError", "PlanShapeError", "plan", "check_plan_input",
           "agreed_error"]


class AllreducePlan:
    """A persistent sparse allreduce of vectors of one dim and value dtype on one communicator
    (see the module docstring; made by :func:`sparcml.plan`).

    Attributes: ``dim``, ``dtype``, ``algorithm`` (the registry name it runs: ``"auto"``
    resolved), ``quantizer``, ``quantize_sparse``, ``options`` (the agreed
    :class:`~sparcml.Options`), ``comm``, ``fast`` (whether calls run on the plan's own
    buffers, :mod:`sparcml._collectives.plan_fast`), ``calls``, ``number`` (the plan's
    identity number, the same on every rank; see the module docstring), ``follow_shape``.
    """

    def __init__(self, dim, dtype, comm: MPI.Comm | None = None, *,
                 algorithm: str = DEFAULT_ALGORITHM, quantizer=None,
                 quantize_sparse: bool = False, options: Options | None = None,
                 nnz: int | None = None, follow_shape: bool = False):
        comm = MPI.COMM_WORLD if comm is None else comm
        self._make(context_for(comm), comm, dim, dtype, algorithm=algorithm,
                   quantizer=quantizer, quantize_sparse=quantize_sparse, options=options,
                   nnz=nnz, follow_shape=follow_shape)

    @classmethod
    def _on_context(cls, ctx: CommContext, dim, dtype, **options) -> "AllreducePlan":
        """A plan made on ``ctx`` (a communication thread's, say), for :meth:`allreduce_in`
        on it; ``options``: the keywords of the constructor. Collective over ``ctx.comm``."""
        self = cls.__new__(cls)
        self._make(ctx, ctx.comm, dim, dtype, **options)
        return self

    def _make(self, ctx: CommContext, comm: MPI.Comm, dim, dtype, *, algorithm=DEFAULT_ALGORITHM,
              quantizer=None, quantize_sparse=False, options=None, nnz=None,
              follow_shape=False) -> None:
        self._made_with = (algorithm, quantizer, quantize_sparse, nnz)  # for follow_shape
        fields = {"dim": -1, "value dtype": -1, "algorithm": -1, "quantizer": 0,
                  "quantize_sparse": 0, "follow_shape": -1}
        record = None
        with agreed_call(ctx, options, fields, _describe,
                         maxima={"seed": 0, "nnz": 0, "plan id": next_plan_id()}) as call:
            fields["follow_shape"] = _flag(follow_shape, "follow_shape")
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
        self.follow_shape = bool(follow_shape)
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
        self._core = PlanCore(self.dim, self.dtype, self._record, self._codec,
                              quantizer=quantizer, seed=self._seed)
        self.fast = self._core.fast
        # a valid SparseVector of the plan's shape, no out or stats: PlanCore.steady
        self._steady = self.fast and not self.follow_shape
        self._home = None  # the blocking calls' context (context_for(comm), looked up once)

    def __repr__(self) -> str:
        return (f"AllreducePlan(dim={self.dim}, dtype={self.dtype.name}, "
                f"algorithm={self.algorithm!r}, P={self.comm.Get_size()}, fast={self.fast})")

    def _state(self, ctx):
        """The plan's state on ``ctx`` (:meth:`sparcml._collectives.plan_core.PlanCore.state`)."""
        return self._core.state(ctx)

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
        ctx = self._home
        if ctx is None or not ctx.comm:  # (a freed communicator: context_for says so)
            ctx = self._home = context_for(self.comm)
        if type(vec) is SparseVector and out is None and stats is None and self._steady \
                and vec.dim == self.dim and vec.values.dtype is self.dtype and ctx.size > 1:
            # the steady case in fewer steps: what allreduce_in does with it
            self._identity.check(ctx)  # the same plan on every rank, or one error everywhere
            self.calls += 1
            return self._core.steady(ctx, vec)
        return self.allreduce_in(ctx, vec, out=out, stats=stats, check=check)

    def iallreduce(self, vec, out: np.ndarray | None = None, *,
                   stats: TrafficStats | None = None, check: bool = True):
        """Non-blocking :meth:`allreduce`: a :class:`~sparcml.Request` (on the
        communicator's communication thread, in submission order with the other non-blocking
        calls; ``vec`` and ``out`` must stay untouched until it completes)."""
        from .._runtime.nonblocking import submit

        return submit(self.comm, f"plan.iallreduce({self.algorithm})", _submitted, self, vec,
                      out, stats, check)

    def _checked(self, ctx, vec, out, stats, check, sent):
        """``(vec, out, stats, sent, None)`` checked on this rank, or, for any error there,
        ``(a zero stand-in, None, None, None, the error)``: the rank then takes part in the
        schedule and the error is raised on every rank."""
        try:
            v = check_plan_input(vec, self.dim, self.dtype, check=check)
            if out is not None:
                check_out(out, v)
            if stats is not None and type(stats) is not TrafficStats:
                stats = check_stats(stats)
            if self.quantizer is not None:
                check_quantizable(v)
        except Exception as exc:  # noqa: BLE001 - any error is this rank's, raised everywhere
            return self._zero, None, None, None, exc
        return v, out, stats, sent, None

    def allreduce_in(self, ctx, vec, *, out=None, stats=None, check=True,
                     sent: list | None = None) -> SparseVector:
        """:meth:`allreduce` on a context (the blocking path's or a communication thread's);
        ``sent``: as in :func:`sparcml._collectives.entry.allreduce_in`."""
        error = None
        given = (out, stats, sent)  # the caller's, for the call again on a remade plan
        if type(vec) is SparseVector and vec.dim == self.dim and vec.values.dtype is self.dtype \
                and out is None and stats is None and self.quantizer is None:
            v = vec  # the steady case: what the checks below would find valid
        else:
            v, out, stats, sent, error = self._checked(ctx, vec, out, stats, check, sent)
        if ctx.size > 1:
            self._identity.check(ctx)  # the same plan on every rank, or one error everywhere
        self.calls += 1
        if stats is not None:  # (None: the call is counted nowhere)
            stats.calls += 1
            stats.algorithm = self.algorithm
            stats.hierarchical = False
        if not self.follow_shape:
            return self._core.run(ctx, v, out, stats, sent, error, self.calls)
        try:
            return self._core.run(ctx, v, out, stats, sent, error, self.calls)
        except PlanShapeError as exc:  # raised alike on every rank: all remake the plan here
            dim, dtype = exc.shape
        algorithm, quantizer, quantize_sparse, nnz = self._made_with
        self._make(ctx, self.comm, dim, dtype, algorithm=algorithm, quantizer=quantizer,
                   quantize_sparse=quantize_sparse, options=self.options,
                   nnz=None if nnz is None else min(nnz, dim), follow_shape=True)
        out, stats, sent = given
        return self.allreduce_in(ctx, vec, out=out, stats=stats, check=check, sent=sent)


def _submitted(ctx, plan: AllreducePlan, vec, out, stats, check):
    return plan.allreduce_in(ctx, vec, out=out, stats=stats, check=check)


def _flag(value, name: str) -> int:
    """A boolean option as an agreed field (:class:`~sparcml.InvalidArgumentError` else)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
    return int(value)


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
         nnz: int | None = None, follow_shape: bool = False) -> AllreducePlan:
    """A persistent allreduce of ``dim`` values of ``dtype`` on ``comm`` (collective).

    Every rank of ``comm`` (default ``MPI.COMM_WORLD``) calls it with the same arguments
    (checked: :class:`~sparcml.RankMismatchError` on every rank), in the same order as its
    other sparcml calls on ``comm``. ``algorithm``, ``quantizer``, ``quantize_sparse`` and
    ``options`` as in :func:`sparcml.allreduce` (``"auto"`` is resolved here, for ``nnz``
    entries per rank, default ``dim // 100``). ``follow_shape`` (agreed): when every rank
    passes the same other dim and dtype to a call, the plan remakes itself for them there
    (collectively, with the same arguments; ``nnz`` at most the new dim) and runs the call,
    instead of raising :class:`PlanShapeError` (for a stream of reductions whose shape
    changes alike on every rank, such as a model's gradient). Returns an
    :class:`AllreducePlan`: ``plan.allreduce(vec, out=None)``,
    ``plan.iallreduce(vec, out=None)``.
    """
    return AllreducePlan(dim, dtype, comm, algorithm=algorithm, quantizer=quantizer,
                         quantize_sparse=quantize_sparse, options=options, nnz=nnz,
                         follow_shape=follow_shape)


