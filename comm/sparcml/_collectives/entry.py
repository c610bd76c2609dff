"""The allreduce entry points: validation, agreement, ``auto``, then the chosen algorithm.

:func:`allreduce` and :func:`iallreduce` are the public calls; :func:`allreduce_in` is the same
on a context (the blocking path's, or the non-blocking engine's thread's). Every call:

1. validates its arguments on this rank (:mod:`sparcml._collectives.validation`), keeping any exception;
2. agrees with the other ranks (:func:`sparcml._runtime.agreement.agreed_call`: one small
   ``Allreduce``): equal dim, value dtype, algorithm, quantizer, the agreed
   :class:`~sparcml.Options` (``options=``, default from the environment:
   :mod:`sparcml._options`), and no rank failed; otherwise every rank raises the same error
   and the communicator stays usable;
3. picks the algorithm (``auto``: :mod:`sparcml._model.auto`, refined by measuring near-ties:
   :mod:`sparcml._model.tuning`, whose trial times ride on step 2's reduction) and runs its
   registry record.

A rank that fails *during* step 3 (out of memory, a signal) cannot complete the exchange the
others are in; it aborts the job with its message (:class:`~sparcml.CollectiveFailure`), as
MPI's default error handler does, rather than leaving them waiting.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import arith, hierarchical as node_aware
from .._model import auto, tuning
from .._options import in_call, option_fields, option_labels, resolve_options
from .._runtime.agreement import (MAXIMA_SLOT, VALUE_DTYPE_NAMES, agree_kept, agreed_call,
                                  kept_agreement)
from .._runtime.call_context import call_context, use_allreduce
from .._runtime.context import TrafficStats, clock_of, context_for
from .._options import Options
from .._model.link_costs import call_options
from .._registry import (AUTO, algorithm_code, algorithm_names, check_algorithm_options,
                         get_algorithm)
from .algorithms import DEFAULT_ALGORITHM
from .ops import PLAIN
from .plan_core import PlanCore, keep_plan
from .plan_fast import fits
from .fail_stop import fail_stop
from .validation import check_out, check_quantizable, check_stats, coerce_vector, quantizer_code
from .._vector import SparseVector
from .._wire.codec import Codec

__all__ = ["allreduce", "iallreduce", "allreduce_in", "calibrate"]


def _describe() -> dict:
    names = {algorithm_code(n): n for n in algorithm_names(auto=True)}
    names[-1] = "(invalid)"
    return {"algorithm": names, "value dtype": VALUE_DTYPE_NAMES,
            "hierarchical": {0: "False", 1: "True", 2: AUTO, -1: "(invalid)"}}


def allreduce(vec, comm: MPI.Comm | None = None, *, algorithm: str = DEFAULT_ALGORITHM,
              quantizer=None, quantize_sparse: bool = False, stats: TrafficStats | None = None,
              check: bool = True, out: np.ndarray | None = None,
              hierarchical=None, options: Options | None = None) -> SparseVector:
    """Sum one sparse vector per rank; every rank gets the same result.

    Collective: every rank of ``comm`` (default ``MPI.COMM_WORLD``) must call, in the same order
    as its other sparcml calls on ``comm``, with the same ``dim``, value dtype, ``algorithm``
    and quantizer configuration (checked: :class:`~sparcml.RankMismatchError` on every rank).

    Parameters
    ----------
    vec : SparseVector, 1-d float ndarray (made sparse by :meth:`SparseVector.from_dense`),
        or ``(dim, indices, values)`` (validated here, so that bad input on one rank raises the
        same exception on every rank instead of leaving the others waiting).
    algorithm : a name of :data:`sparcml.ALGORITHMS` (the registry), or ``"auto"``: the one
        the cost model predicts fastest for this call (calibrated on ``comm`` at the first
        ``auto`` call, collectively; the overlap of the inputs is learnt from earlier ``auto``
        calls of the same dim).
    quantizer : a :class:`~sparcml.QSGD`, or None. Dense messages travel quantized (the dense
        phase of ``dsar_split_allgather``, dense rounds of the other algorithms); with
        ``quantize_sparse`` the values of sparse messages too. Every rank computes with the
        values as received (a sender with what it sent, decoded), so the result is the same on
        every rank; it is an unbiased estimate of the sum. Only with algorithms that accept
        one (not the MPI_Allreduce baseline). Values QSGD cannot encode (NaN, Inf) raise
        :class:`~sparcml.QuantizationError` on every rank before anything is sent.
    stats : a :class:`TrafficStats` to add this call's traffic to.
    check : with ``True`` (default) a ``(dim, indices, values)`` input is checked (sorted,
        in range: O(nnz)); ``False`` trusts it. The agreement on dim, dtype, algorithm and
        quantizer always runs (one small ``Allreduce``): skipping it on some ranks and not
        on others would deadlock, so it is not optional. ``check`` may differ across ranks.
    out : a buffer for the result, as MPI's receive buffer: a writeable C-contiguous 1-d
        ndarray of ``dim`` values of the value dtype, not overlapping ``vec``. The sum is
        written there in full (zeros included) and the result is dense-backed on ``out``.
        Each rank passes its own buffer or None, independently of the others.
    hierarchical : node-aware (:mod:`sparcml._collectives.hierarchical`): ``True`` reduces inside each
        node (ranks that share memory) first, runs ``algorithm`` among one leader per node,
        and broadcasts the result in the node; ``False`` runs ``algorithm`` over all ranks;
        ``"auto"`` lets the cost model choose (calibrating the leaders' links at the first
        such call, collectively); ``None`` (default) is ``"auto"`` with ``algorithm="auto"``
        and ``False`` otherwise. Where every node holds one rank the two are the same and the
        flat one runs; with one node, ``True`` is a reduce to the leader and a broadcast. The
        grouping is MPI's unless ``options.ranks_per_node`` forces one (equal on every rank).
    options : a :class:`~sparcml.Options` (partitions, index coding, node shared memory, ranks
        per node, auto tuning, wait policy), or None: the process defaults from the
        ``SPARCML_*`` environment variables (:func:`sparcml.default_options`). Its agreed
        fields must be equal on every rank (:class:`~sparcml.RankMismatchError` otherwise).

    Returns
    -------
    SparseVector of the same dim and value dtype: newly allocated (never aliasing ``vec``), or
    dense on ``out``.
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    if type(vec) is SparseVector and type(algorithm) is str \
            and algorithm == DEFAULT_ALGORITHM and quantizer is None and not quantize_sparse \
            and out is None and hierarchical is None \
            and (stats is None or type(stats) is TrafficStats):
        result = _lean_call(ctx, vec, stats, options)
        if result is not None:
            return result
    return allreduce_in(ctx, vec, algorithm=algorithm, quantizer=quantizer,
                        quantize_sparse=quantize_sparse, stats=stats, check=check, out=out,
                        hierarchical=hierarchical, options=options)


_AGREEMENTS_KEPT = 4  # per cached plan: the agreement arrays of the latest options


def _lean_call(ctx, vec: SparseVector, stats, options):
    """The plain call's most common case in fewer Python steps, or None (before anything is
    sent) where it does not apply: a SparseVector summed by the default algorithm, no
    quantizer, ``out`` or ``hierarchical``, no pending ``auto`` trial, a shape the cached plan
    serves (:func:`_served`). Then it is the cached plan's call: the plan keeps, per options,
    the agreement array of the call and its codec, and after the agreement its steady path
    runs (:meth:`~sparcml._collectives.plan_core.PlanCore.serve`, as the general path's).

    It reduces exactly the array the general path would (:func:`_lean_agreement`, built once
    per shape and options), so ranks on either path agree with each other, and any difference
    or failure raises the same errors as :func:`allreduce_in`. Options it cannot read (a bad
    ``SPARCML_*`` variable on this rank) send the call to the general path, whose agreement
    raises :class:`~sparcml.InvalidOptionError` on every rank.
    """
    if ctx.size == 1 or ctx.ops is not PLAIN or ctx.tuning is not None \
            and tuning.pending_ns(ctx.tuning):
        return None
    try:
        opts = resolve_options(options)
    except Exception:  # noqa: BLE001 - a bad SPARCML_* variable: the general path agrees on it
        return None
    if type(opts) is not Options:
        return None
    plan = _served(ctx, vec, keep=False)
    if plan is None:
        return None
    waiter = ctx.waiter
    wait_code = int(waiter.policy(opts.wait))
    agreements = plan.agreements
    key = (id(opts), wait_code)
    entry = agreements.get(key)
    if entry is None or entry[0] is not opts:  # (an id reused by another Options: rebuilt)
        if len(agreements) >= _AGREEMENTS_KEPT:
            agreements.pop(next(iter(agreements)))
        entry = agreements[key] = [opts, _lean_agreement(vec, opts, wait_code), None, None,
                                   ("allreduce", vec.dim, vec.dtype.str)]
    _, kept, resolved, codec, key = entry
    kept[0][MAXIMA_SLOT] = vec.nnz
    agree_kept(ctx.comm, waiter, kept, wait_code, _lean_described)
    plans = ctx.plans
    if plans is None or plans.get(key) is not plan:  # a new plan, agreed: kept
        keep_plan(ctx, key, plan)
    if stats is not None:  # (None: the call is counted nowhere)
        stats.calls += 1
        stats.algorithm = DEFAULT_ALGORITHM
        stats.hierarchical = False
    now = call_options(ctx, opts)  # (collective where it measures: at the same point as ever)
    if now is not resolved:  # the first call, or the options resolved anew (a new model)
        entry[2] = now
        codec = entry[3] = Codec(vec.index_dtype, vec.dtype, options=now)
    return plan.serve(ctx, vec, stats, codec)


def _lean_described() -> dict:
    """The lean call's field code names, for a disagreement's message."""
    return {**_describe(), **option_labels()}


def _lean_agreement(vec: SparseVector, opts: Options, wait_code: int) -> tuple:
    """The :func:`~sparcml._runtime.agreement.kept_agreement` of what :func:`allreduce_in`
    agrees on in a lean call (the same fields and maxima, in the same order); a call writes
    its nnz into the send array's first maximum."""
    fields = {"dim": vec.dim, "value dtype": vec.dtype.itemsize,
              "algorithm": algorithm_code(DEFAULT_ALGORITHM), "quantizer": 0,
              "quantize_sparse": 0,
              "hierarchical": node_aware.hierarchical_code(
                  node_aware.check_hierarchical(None, DEFAULT_ALGORITHM))}
    fields.update(option_fields(opts))
    fields["options.wait"] = wait_code
    maxima = {"nnz": 0, "seed": 0, "auto trial ns": 0}
    return kept_agreement(fields, maxima)


def allreduce_in(ctx, vec, *, algorithm: str = DEFAULT_ALGORITHM, quantizer=None,
                 quantize_sparse: bool = False, stats: TrafficStats | None = None,
                 check: bool = True, out: np.ndarray | None = None,
                 sent: list | None = None, hierarchical=None,
                 options: Options | None = None) -> SparseVector:
    """:func:`allreduce` on a context (the blocking path's, or the communication thread's).

    ``sent``: a list to which the call appends :class:`~sparcml._wire.codec.Part` objects covering
    this rank's own input as the other ranks received it (decoded: quantized when a quantizer
    is used), for error feedback. Where the input never travels on its own (P = 1, the
    ``dense`` baseline, the partner that adds an extra rank's input in the non-power-of-two
    fold of recursive doubling) it is the input unchanged.
    """
    fields = {"dim": -1, "value dtype": -1, "algorithm": -1, "quantizer": 0,
              "quantize_sparse": 0, "hierarchical": -1}
    record = None
    option = False
    with agreed_call(ctx, options, fields, _describe,
                     maxima={"nnz": 0, "seed": 0,
                             "auto trial ns": tuning.pending_ns(tuning.state_of(ctx))}) as call:
        record = check_algorithm_options(algorithm, quantizer=quantizer)
        option = node_aware.check_hierarchical(hierarchical, algorithm)
        fields["hierarchical"] = node_aware.hierarchical_code(option)
        fields["algorithm"] = algorithm_code(algorithm)
        fields["quantizer"] = quantizer_code(quantizer)
        fields["quantize_sparse"] = int(bool(quantize_sparse))
        stats = check_stats(stats)
        vec = coerce_vector(vec, check=check)
        fields["dim"] = vec.dim
        fields["value dtype"] = vec.dtype.itemsize
        call.maxima["nnz"] = vec.nnz
        if out is not None:
            check_out(out, vec)
        if quantizer is not None:  # at P = 1 too: the same input raises at every P
            check_quantizable(vec)
            # one random seed common to all ranks (the maximum of their draws)
            call.maxima["seed"] = int(quantizer._rng.integers(0, 2**62))
    with in_call(call.options):
        return _run(ctx, vec, call.options, call.agreed, record, option, algorithm, quantizer,
                    quantize_sparse, stats, out, sent)


def _run(ctx, vec, opts, agreed, record, option, algorithm, quantizer, quantize_sparse, stats,
         out, sent):
    """The call after the agreement: ``auto``'s choice, then the algorithm."""
    nnz_max, seed = agreed["nnz"], agreed["seed"]
    tuning.resolve(tuning.state_of(ctx), agreed["auto trial ns"])
    tune = opts.auto_tuning
    stats.calls += 1
    codec = Codec(vec.index_dtype, vec.dtype, quantizer, quantize_sparse, seed,
                  options=call_options(ctx, opts))
    layout = None
    if option is not False and ctx.size > 1:
        layout = node_aware.layout_for(ctx, opts.ranks_per_node or 0)
        chosen, node_phases = auto.choose_node_aware(ctx, layout, vec, nnz_max, codec,
                                                     _calibration_run, algorithm, option,
                                                     tune=tune)
    else:
        chosen = auto.choose(ctx, vec, nnz_max, codec, _calibration_run, tune=tune) \
            if record is None else algorithm
        node_phases = False
    record = get_algorithm(chosen)
    stats.algorithm = chosen
    stats.hierarchical = node_phases
    if ctx.size == 1:  # nothing travels, so nothing is quantized
        if sent is not None:
            sent.append(arith.as_part(vec))
        if out is not None:
            return SparseVector.unchecked(vec.dim, None, arith.write_dense(vec, out))
        if record.writes_out:
            return SparseVector.unchecked(vec.dim, None, vec.to_dense())
        result = arith.normalize(vec, codec)
        return arith.copy_of(vec) if result is vec else result
    tuning.begin(ctx.tuning, clock_of(ctx.comm))
    plan = None
    if not node_phases and chosen == DEFAULT_ALGORITHM and quantizer is None and sent is None:
        plan = _served(ctx, vec)
    with fail_stop(ctx.comm, f"allreduce({chosen}{', hierarchical' if node_phases else ''})"):
        if plan is not None:  # the cached plan's steady path: bitwise the algorithm's sum
            result = plan.serve(ctx, vec, stats, codec, out)
        elif node_phases:
            given = vec if record.writes_out else arith.normalize(vec, codec)
            result = node_aware.run(ctx, layout, record, given, stats=stats, codec=codec,
                                    nnz_max=nnz_max, out=out, sent=sent,
                                    shm=opts.node_shm)
        elif record.writes_out:
            result = record.run(call_context(ctx, codec.options, record.tags.allocated), vec,
                                stats=stats, codec=codec, out=out, sent=sent)
        else:
            result = record.run(call_context(ctx, codec.options, record.tags.allocated),
                                arith.normalize(vec, codec), stats=stats, codec=codec,
                                out=None, sent=sent)
    tuning.end(ctx.tuning)
    if algorithm == AUTO or option == AUTO:
        auto.learn_overlap(ctx, vec, nnz_max, result)
    if out is not None and result.values is not out:
        result = SparseVector.unchecked(vec.dim, None, arith.write_dense(result, out))
    return result


use_allreduce(allreduce_in)  # what a compressor's CallContext.allreduce runs
_DEFAULT_RECORD = get_algorithm(DEFAULT_ALGORITHM)


def _served(ctx, vec, keep: bool = True) -> PlanCore | None:
    """The context's cached plan (:class:`~sparcml._collectives.plan_core.PlanCore`) of
    ``vec``'s dim and dtype, whose steady path serves a plain call of the default algorithm
    (made at the first call of the shape, :func:`~sparcml._collectives.plan_core.cached_plan`),
    or None where a plan has no steady path of its own (a vector above the fast path's size,
    a simulated communicator's shared operations): the general path runs the algorithm.
    ``keep=False`` (before the call's agreement): a new plan is not kept yet (see
    :func:`~sparcml._collectives.plan_core.keep_plan`)."""
    if ctx.ops is not PLAIN:
        return None
    dim, dtype = vec.dim, vec.values.dtype
    key = ("allreduce", dim, dtype.str)
    plan = ctx.plans.get(key) if ctx.plans is not None else None
    if plan is None:  # (a kept plan's shape fits)
        if not fits(dim, dtype):
            return None
        plan = PlanCore(dim, dtype, _DEFAULT_RECORD)
        if keep:
            keep_plan(ctx, key, plan)
    return plan


def _calibration_run(ctx, vec, name):
    return allreduce_in(ctx, vec, algorithm=name)


def calibrate(comm: MPI.Comm | None = None, *, reps: int = 5):
    """Measure the cost model's parameters on ``comm`` (collective; about 0.5-2 s).

    Every rank returns the same :class:`~sparcml.CostModel` (the maximum over ranks of each
    parameter), and ``algorithm="auto"`` on ``comm`` uses it from then on (otherwise ``auto``
    calibrates at its first call).
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    model = ctx.model = auto.calibrate_context(ctx, _calibration_run, reps=reps)
    return model


def _submitted(ctx, vec, kwargs):
    return allreduce_in(ctx, vec, **kwargs)


def iallreduce(vec, comm: MPI.Comm | None = None, *, algorithm: str = DEFAULT_ALGORITHM,
               quantizer=None, quantize_sparse: bool = False,
               stats: TrafficStats | None = None, check: bool = True,
               out: np.ndarray | None = None, hierarchical=None,
               options: Options | None = None):
    """Non-blocking :func:`allreduce`: returns a :class:`~sparcml._runtime.nonblocking.Request` at once.

    Same arguments and result (``request.wait()``) as :func:`allreduce`. Collective: every
    rank must submit its non-blocking calls on ``comm`` in the same order. ``vec`` must not be
    modified, nor ``out`` read, until the request completes (as with MPI buffers). ``stats``,
    when given, is updated by the communication thread.
    """
    from .._runtime.nonblocking import submit

    kwargs = {"algorithm": algorithm, "quantizer": quantizer, "quantize_sparse": quantize_sparse,
              "stats": stats, "check": check, "out": out, "hierarchical": hierarchical,
              "options": options}
    return submit(comm, f"iallreduce({algorithm})", _submitted, vec, kwargs)
