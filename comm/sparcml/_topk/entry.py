"""The plain ``topk_allreduce`` entry points: the agreement, then a cached plan or the general path.

:func:`topk_allreduce` / :func:`itopk_allreduce` (and :func:`topk_allreduce_in` on a context)
agree on the call's arguments on every rank (one small ``Allreduce``, which also carries the
largest ``|input|`` over ranks: :mod:`sparcml._topk.topk_allreduce`), and then:

- where a plan has a steady path of its own (:func:`sparcml._topk.plan.serves`: P = 2 on real
  ranks, a dim of the recursive-doubling fast path), the call runs through the communicator's
  cached :class:`~sparcml._topk.plan.TopKPlan` of its dim, dtype, k and options (made at the
  first such call from the agreed values, locally: no collective; the context's plan cache,
  :func:`sparcml._collectives.plan_core.cached_plan`). Every rank agreed on the same key, so
  every rank holds the same plan; the agreement of each call is the crossing check the
  plan's identity would be. Results are bitwise the general path's (the plan's docstring says why);
- otherwise the general path (:func:`sparcml._topk.topk_allreduce._run`): reduce-scatter,
  selection, allgather.

``calibrate_topk`` measures the plain call into a cost model.
"""

from __future__ import annotations

from mpi4py import MPI

from .._collectives.entry import _calibration_run
from .._collectives.plan_core import cached_plan, keep_plan
from .._collectives.validation import check_stats, coerce_vector
from .._model import auto
from .._model.link_costs import call_options
from .._options import Options, option_fields, option_labels, resolve_options
from .._runtime.agreement import MAXIMA_SLOT, agree_kept, agreed_call, kept_agreement
from .._runtime.context import TrafficStats, context_for
from .._vector import SparseVector
from .._wire.codec import Codec
from .plan import TopKPlan, serves
from .topk_allreduce import _DESCRIBE, NAME, TopKReduced, _check_k, _max_key, _run

__all__ = ["topk_allreduce", "itopk_allreduce", "topk_allreduce_in", "calibrate_topk",
           "calibration_run"]


def topk_allreduce(vec, k: int, comm: MPI.Comm | None = None, *,
                   stats: TrafficStats | None = None, check: bool = True,
                   options: Options | None = None) -> TopKReduced:
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
    options : a :class:`~sparcml.Options` or None (the environment's defaults), as in
        :func:`sparcml.allreduce`: ``partitions`` cuts the reduce-scatter, ``index_coding``
        codes the messages, ``node_shm`` and ``ranks_per_node`` decide the one-node window.

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
    if type(vec) is SparseVector and type(k) is int and k > 0 \
            and (stats is None or type(stats) is TrafficStats) \
            and serves(ctx, vec.dim, vec.dtype):
        result = _lean_call(ctx, vec, k, stats, options)
        if result is not None:
            return result
    return topk_allreduce_in(ctx, vec, k, stats=stats, check=check, options=options)


_AGREEMENTS_KEPT = 4  # per cached plan: the agreement arrays of the latest wait policies


def _lean_call(ctx, vec: SparseVector, k: int, stats, options):
    """The cached plan's call in fewer Python steps (a SparseVector, k > 0, a shape the plan
    serves), or None before anything is sent where it does not apply (options or a
    magnitude this rank cannot read: the general path agrees on the error). It reduces
    exactly the array :func:`topk_allreduce_in` builds (the same fields, options and maxima in
    the same order: kept per plan and wait policy), so ranks on either path agree with each
    other, and any difference or failure raises the same errors."""
    try:
        opts = resolve_options(options)
        top = _max_key(vec)  # NaN or Inf: the general path raises it on every rank
    except Exception:  # noqa: BLE001 - this rank's error: the general path agrees on it
        return None
    if type(opts) is not Options:
        return None
    dim, dtype = vec.dim, vec.dtype
    key = ("topk", dim, dtype.str, k, opts)
    plan = ctx.plans.get(key) if ctx.plans is not None else None
    fresh = plan is None  # kept once agreed (keep_plan): every rank's cache the same
    if fresh:
        plan = TopKPlan.agreed(ctx, dim, dtype, k, opts)
    waiter = ctx.waiter
    wait_code = int(waiter.policy(opts.wait))
    agreements = plan.agreements
    entry = agreements.get(wait_code)
    if entry is None:
        if len(agreements) >= _AGREEMENTS_KEPT:
            agreements.pop(next(iter(agreements)))
        fields = {"dim": dim, "value dtype": dtype.itemsize, "k": k}
        fields.update(option_fields(opts))
        fields["options.wait"] = wait_code
        maxima = {"max key": 0, "max items": 0}
        entry = agreements[wait_code] = [kept_agreement(fields, maxima), None, None]
    kept, resolved, codec = entry
    send = kept[0]
    send[MAXIMA_SLOT] = top
    send[MAXIMA_SLOT + 1] = dim if vec.indices is None else vec.indices.shape[0]
    received = agree_kept(ctx.comm, waiter, kept, wait_code, _lean_described)
    top = int(received[MAXIMA_SLOT])
    if top == 0:  # every input is zero: the general path's answer, with no message
        return _run(ctx, vec, k, TrafficStats() if stats is None else stats, opts, top,
                    int(received[MAXIMA_SLOT + 1]))
    if fresh:
        keep_plan(ctx, key, plan)
    now = call_options(ctx, opts)  # (collective where it measures: at the same point as ever)
    if now is not resolved:  # the first call, or the options resolved anew (a new model)
        entry[1] = now
        codec = entry[2] = Codec(vec.index_dtype, dtype, options=now)
    return plan.serve(ctx, vec, stats, codec)


def _lean_described() -> dict:
    """The lean call's field code names, for a disagreement's message."""
    return {**_DESCRIBE, **option_labels()}


def calibration_run(ctx, vec, name):
    """The cost model's calibration runner (:func:`sparcml._model.auto.calibrate_topk`): ``name``
    :data:`NAME` runs :func:`topk_allreduce_in` keeping ``vec``'s nnz (the same on every rank
    in the calibration inputs); any other name, that allreduce algorithm."""
    if name == NAME:
        return topk_allreduce_in(ctx, vec, vec.nnz).result
    return _calibration_run(ctx, vec, name)


def calibrate_topk(model, comm: MPI.Comm | None = None, *, reps: int = 5):
    """Measure :func:`topk_allreduce` on ``comm`` (default ``COMM_WORLD``) into ``model``, a
    :class:`~sparcml.CostModel` from :func:`sparcml.calibrate` on the same communicator
    (collective; a few seconds). Its fixed cost and growth go into ``model.overhead`` and
    ``model.scale`` under :data:`sparcml.TOPK_ALLREDUCE`, and the allreduce algorithms that
    ``auto`` may pick are measured again beside it, so that
    :meth:`~sparcml.CostModel.choose_topk_step` compares the two kinds (otherwise the first
    top-k step of ``Compression(algorithm="auto")`` measures it). Returns ``model``, the same
    on every rank."""
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    return auto.calibrate_topk(ctx, model, calibration_run, reps=reps)


def _submitted(ctx, vec, k, kwargs):
    return topk_allreduce_in(ctx, vec, k, **kwargs)


def itopk_allreduce(vec, k: int, comm: MPI.Comm | None = None, *,
                    stats: TrafficStats | None = None, check: bool = True,
                    options: Options | None = None):
    """Non-blocking :func:`topk_allreduce`: a :class:`~sparcml.Request` whose ``wait()``
    returns ``(result, dropped)``. Runs on ``comm``'s communication thread, in submission
    order with the other non-blocking calls (every rank submits in the same order). ``vec``
    must not change until the request completes."""
    from .._runtime.nonblocking import submit

    return submit(comm, f"itopk_allreduce(k={k})", _submitted, vec, k,
                  {"stats": stats, "check": check, "options": options})


def topk_allreduce_in(ctx, vec, k, *, stats: TrafficStats | None = None,
                      check: bool = True, options: Options | None = None) -> TopKReduced:
    """:func:`topk_allreduce` on a context (the blocking path's or a communication thread's)."""
    # the largest |input| over ranks rides on the agreement: it bounds |sum| for the selection;
    # the largest input sizes the shared-memory regions of a one-node communicator
    with agreed_call(ctx, options, {"dim": -1, "value dtype": -1, "k": -1}, _DESCRIBE,
                     maxima={"max key": 0, "max items": 0}) as call:
        stats = check_stats(stats)
        k = _check_k(k)
        call.fields["k"] = k
        vec = coerce_vector(vec, check=check)
        call.fields["dim"] = vec.dim
        call.fields["value dtype"] = vec.dtype.itemsize
        call.maxima["max items"] = vec.dim if vec.is_dense else vec.nnz
        call.maxima["max key"] = _max_key(vec)
    opts, top = call.options, call.agreed["max key"]
    # nothing to select (k = 0, every input zero): the general path answers without a message
    if k and top and serves(ctx, vec.dim, vec.dtype):
        dim, dtype = vec.dim, vec.dtype
        plan = cached_plan(ctx, ("topk", dim, dtype.str, k, opts),
                           lambda: TopKPlan.agreed(ctx, dim, dtype, k, opts))
        codec = Codec(vec.index_dtype, vec.dtype, options=call_options(ctx, opts))
        return plan.serve(ctx, vec, stats, codec)
    return _run(ctx, vec, k, stats, opts, top, call.agreed["max items"])

