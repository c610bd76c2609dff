"""``algorithm="auto"``: calibrating the cost model on a communicator, choosing, learning.

Handed what to run (the entry point passes its own allreduce), so that nothing here imports
the algorithms or the entry point: the cost model stays pure arithmetic
(:mod:`sparcml._model.costmodel`) and there is no import cycle.

- :func:`calibrate_context`: measures the :class:`~sparcml.CostModel` parameters on a
  context's communicator (collective; about 0.5-2 s). Every rank ends with the same model (the
  maximum over ranks of each parameter), so ``auto`` makes the same choice on every rank.
- :func:`choose`: the algorithm the model predicts fastest for a call, remembered per input
  shape (iterative training repeats its calls).
- :func:`learn_overlap`: the overlap of the inputs, from the result of a call.

Over 400 lines: calibration, choice and learning share the context's :class:`AutoMemory` and
the calibration runs' bookkeeping (:func:`_leaving_no_state`); split apart, each would have
to export the others' internals.
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from . import tuning
from .costmodel import MEDIUM_N, TINY_N, TOPK_STEP, CostModel, overlap_from_result, \
    topk_allreduce_cost
from .._registry import AUTO, algorithm_names, get_algorithm
from .._vector import SparseVector
from .._wire.codec import RAW_INDICES, Codec, Part, decode
from .._runtime.tags import message_tags
from .._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")

__all__ = ["AutoMemory", "memory_of", "model_of", "calibrate_context", "calibrate_topk",
           "choose", "choose_topk_step", "learn_overlap", "calibrate_node_aware",
           "choose_node_aware"]

_TAG_PROBE = message_tags("sparcml.auto", "probe").probe  # calibration's timed exchanges
_HISTORY_LIMIT = 10_000  # remembered choices per context, and tuned shapes (tuning.TuningState)


@dataclass
class AutoMemory:
    """What ``auto`` learnt on one context (``ctx.auto``; the same on every rank).

    ``choices``: the choice per call key (flat, top-k step and node-aware keys), at most
    ``_HISTORY_LIMIT`` (past it a new key is chosen again at each call). Per vector dim:
    ``overlap`` (the inputs' overlap q, a running mean), ``result_size`` (the last result's
    support, :func:`sparcml._model.tuning.fill_bucket`), ``last`` (the last ``(nnz_max, result
    nnz)`` learnt from). ``node_models``: the node-aware cost model per layout (by id)."""

    choices: dict = field(default_factory=dict)
    overlap: dict = field(default_factory=dict)
    result_size: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    node_models: dict = field(default_factory=dict)


def memory_of(ctx) -> AutoMemory:
    """``ctx.auto``, made at its first use."""
    if ctx.auto is None:
        ctx.auto = AutoMemory()
    return ctx.auto


def model_of(ctx, run, options=None) -> CostModel:
    """``ctx.model``, calibrated at the first call without one (collective; ``run`` and
    ``options`` as for :func:`calibrate_context`)."""
    if ctx.model is None:
        ctx.model = calibrate_context(ctx, run, options=options)
    return ctx.model


def _remember(memory: AutoMemory, key, choice) -> None:
    if len(memory.choices) < _HISTORY_LIMIT:
        memory.choices[key] = choice


def _fit(xs, ts) -> tuple[float, float]:
    """Least-squares latency + slope through (bytes, seconds), both kept positive."""
    xs, ts = np.asarray(xs, float), np.asarray(ts, float)
    slope, intercept = np.polyfit(xs, ts, 1)
    slope = max(slope, 1e-13)
    intercept = max(intercept, float(ts.min()) * 0.5, 1e-7)
    return float(intercept), float(slope)


def _median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _local_rates(model: CostModel, rank: int, reps: int) -> None:
    rng = np.random.default_rng(rank)
    n = 200_000
    a = np.sort(rng.choice(50 * n, n, replace=False)).astype(np.int32)
    b = np.sort(rng.choice(50 * n, n, replace=False)).astype(np.int32)
    v = np.ones(n, np.float32)
    kernels.merge_add(a, v, b, v)
    model.gamma_merge = _median_time(lambda: kernels.merge_add(a, v, b, v), reps) / (2 * n)
    x = np.ones(1 << 20, np.float32)
    y = np.ones(1 << 20, np.float32)
    model.gamma_dense = _median_time(lambda: np.add(x, y), reps) / x.size
    part = Part(0, 50 * n, a, v)  # density 2%: Elias-Fano
    seconds = []
    for coded in (True, False):  # what coding adds to a message's encode and decode
        codec = Codec(np.int32, np.float32, options=None if coded else RAW_INDICES)
        decode(codec.encode(part)[0])
        # the fastest of 2 reps + 1: its own cost, not the other processes' time slices (on
        # a busy node those slow the transfers the codes shorten too)
        seconds.append(min(_median_time(lambda: decode(codec.encode(part)[0]), 1)
                           for _ in range(2 * reps + 1)))
    model.gamma_code = max(seconds[0] - seconds[1], 1e-10 * n) / n


def _exchange_times(c, rank, partner, waiter, sizes, reps) -> list[float]:
    """Median seconds of a concurrent exchange with ``partner`` (itself: nothing) per size."""
    times = []
    for nbytes in sizes:
        buf = np.zeros(nbytes, np.uint8)
        rbuf = np.empty(nbytes, np.uint8)

        def exchange():
            if partner == rank:
                return
            req = c.Isend([buf, MPI.BYTE], partner, _TAG_PROBE)
            waiter.wait(c.Irecv([rbuf, MPI.BYTE], partner, _TAG_PROBE))
            waiter.wait(req)

        c.Barrier()
        times.append(_median_time(exchange, reps))
    return times


def _network(model: CostModel, ctx, reps: int) -> None:
    c, rank, size, waiter = ctx.comm, ctx.rank, ctx.size, ctx.waiter
    # point-to-point: all ranks exchange with a partner at once, as in the butterfly
    partner = rank ^ 1 if (rank ^ 1) < size else rank
    sizes = [8, 1 << 14, 1 << 18, 1 << 21]
    times = _exchange_times(c, rank, partner, waiter, sizes, reps)
    model.alpha, model.beta = _fit(sizes, times)
    # the MPI collectives the baselines and second phases use
    ar_sizes, ar_times = [8, 1 << 18, 1 << 22], []
    for nbytes in ar_sizes:
        arr = np.zeros(nbytes // 4, np.float32)
        c.Barrier()
        ar_times.append(_median_time(
            lambda: waiter.collective(c, "Allreduce", MPI.IN_PLACE, arr, MPI.SUM), reps))
    model.allreduce_alpha, model.allreduce_beta = _fit(ar_sizes, ar_times)
    ag_sizes, ag_times = [8, 1 << 16, 1 << 20], []
    for per_rank in ag_sizes:
        send = np.zeros(per_rank, np.uint8)
        recv = np.empty(per_rank * size, np.uint8)
        c.Barrier()
        ag_times.append(_median_time(
            lambda: waiter.collective(c, "Allgather", [send, MPI.BYTE], [recv, MPI.BYTE]),
            reps))
    model.allgather_alpha, model.allgather_beta = _fit([s * size for s in ag_sizes], ag_times)


def _per_algorithm(model: CostModel, ctx, run, names, reps: int, options) -> None:
    """Each algorithm through the real code path: fixed cost on a tiny input, growth factor
    on a medium one. ``run(ctx, vec, name)`` runs one allreduce and returns its result."""
    rank, size, c = ctx.rank, ctx.size, ctx.comm
    tiny = SparseVector(TINY_N, np.array([rank % TINY_N]), np.ones(1, np.float32))
    for name in names:
        run(ctx, tiny, name)
        c.Barrier()
        model.overhead[name] = _median_time(lambda: run(ctx, tiny, name), 2 * reps + 1)
    rng_medium = np.random.default_rng([7, rank])
    k_medium = MEDIUM_N // 50
    medium = SparseVector(MEDIUM_N, np.sort(rng_medium.choice(MEDIUM_N, k_medium, replace=False)),
                          np.ones(k_medium, np.float32))
    for name in names:
        result = run(ctx, medium, name)
        K = result.count_nonzero() if result.is_dense else result.nnz
        c.Barrier()
        measured = _median_time(lambda: run(ctx, medium, name), reps)
        growth = model.growth(name, model.analytic(name, P=size, N=MEDIUM_N, k=k_medium, K=K,
                                                   options=options),
                              P=size, s_idx=4, s_val=4, check=True, options=options)
        if growth > 0:
            factor = (measured - model.overhead[name]) / growth
            model.scale[name] = float(min(max(factor, 0.25), 8.0))


@contextmanager
def _leaving_no_state(ctx):
    """Calibration runs leave the context's state as they found it: the split algorithms'
    partitions (estimated from the calibration's synthetic input of ``MEDIUM_N``, they would
    be kept for the caller's calls of that dim: a real run that calibrated then cut a
    ``MEDIUM_N`` vector where the simulator, whose model is set without runs, did not), the
    top-k thresholds, the measured shapes. Only the model they produce is kept (by the
    caller)."""
    saved = {name: copy.deepcopy(getattr(ctx, name)) for name in _LEARNED}
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(ctx, name, value)


# the context's fields that calls learn into (the model is the calibration's own product)
_LEARNED = ("auto", "tuning", "partition_memory", "topk", "link_costs")


def calibrate_context(ctx, run, *, reps: int = 5, options=None) -> CostModel:
    """Measure a :class:`CostModel` on ``ctx.comm`` (collective). ``run(ctx, vec, name)`` runs
    one allreduce of the algorithm ``name`` (with the agreement check) and returns its result.
    Every rank returns the same model: the maximum over ranks of each parameter. The runs
    leave no state on ``ctx`` (:func:`_leaving_no_state`). ``options``: those of the call
    that calibrates (the analytic growth the measured one is scaled to is theirs; None: the
    process defaults)."""
    with _leaving_no_state(ctx):
        return _calibrate_context(ctx, run, reps, options)


def _calibrate_context(ctx, run, reps: int, options) -> CostModel:
    model = CostModel()
    _local_rates(model, ctx.rank, reps)
    names = algorithm_names(in_auto_only=True)
    if ctx.size > 1:
        _network(model, ctx, reps)
        _per_algorithm(model, ctx, run, names, reps, options)
    params = np.array(_pack(model, names), np.float64)
    ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, params, MPI.MAX)
    return _unpack(params.tolist(), names)


def calibrate_topk(ctx, model: CostModel, run, *, reps: int = 5, options=None) -> CostModel:
    """Measure :func:`sparcml.topk_allreduce` into ``model`` (collective), as
    :func:`calibrate_context` measures the allreduce algorithms: its fixed cost on the tiny
    input (``overhead[TOPK_STEP]``: every synchronizing step at this node's scheduling) and
    measured / analytic growth on the medium one (``scale[TOPK_STEP]``), each keeping its
    input's nnz, after a first call of the shape (later calls remember its threshold). The
    allreduce algorithms that ``auto`` may pick are measured again, interleaved with it call by
    call, and their ``overhead`` / ``scale`` replaced: the top-k step's choice compares the two
    kinds, and on a shared node the load changes between separate measurements.
    ``run(ctx, vec, name)`` runs one call (``sparcml._topk.entry.calibration_run``). Every
    rank ends with the same values (the maximum over ranks). The runs leave no state on
    ``ctx`` but the model (:func:`_leaving_no_state`). ``options``: as in
    :func:`calibrate_context`."""
    if ctx.size == 1:
        return model
    with _leaving_no_state(ctx):
        return _calibrate_topk(ctx, model, run, reps, options)


def _calibrate_topk(ctx, model: CostModel, run, reps: int, options) -> CostModel:
    rank, size, c = ctx.rank, ctx.size, ctx.comm
    names = [TOPK_STEP, *algorithm_names(in_auto_only=True)]
    tiny = SparseVector(TINY_N, np.array([rank % TINY_N]), np.ones(1, np.float32))
    rng_medium = np.random.default_rng([7, rank])
    k_medium = MEDIUM_N // 50
    medium = SparseVector(MEDIUM_N, np.sort(rng_medium.choice(MEDIUM_N, k_medium, replace=False)),
                          rng_medium.standard_normal(k_medium).astype(np.float32))
    overhead = _interleaved(ctx, run, tiny, names, 2 * reps + 1)
    sizes = {}
    for name in names:
        result = run(ctx, medium, name)
        sizes[name] = result.count_nonzero() if result.is_dense else result.nnz
    measured = _interleaved(ctx, run, medium, names, reps)
    found = []
    for name in names:
        if name == TOPK_STEP:
            growth = (topk_allreduce_cost(model, P=size, N=MEDIUM_N, k_local=k_medium,
                                          k=k_medium, options=options)
                      - topk_allreduce_cost(model, P=size, N=TINY_N, k_local=1, k=size,
                                            options=options))
        else:
            growth = model.growth(name, model.analytic(name, P=size, N=MEDIUM_N, k=k_medium,
                                                       K=sizes[name], options=options),
                                  P=size, s_idx=4, s_val=4, check=True, options=options)
        factor = (measured[name] - overhead[name]) / growth if growth > 0 else 1.0
        found += [overhead[name], min(max(factor, 0.25), 8.0)]
    found = np.array(found, np.float64)
    ctx.waiter.collective(c, "Allreduce", MPI.IN_PLACE, found, MPI.MAX)
    for i, name in enumerate(names):
        model.overhead[name], model.scale[name] = float(found[2 * i]), float(found[2 * i + 1])
    return model


def _interleaved(ctx, run, vec, names, reps) -> dict:
    """Median seconds of ``run(ctx, vec, name)`` per name, the names taking turns call by call
    (each after a barrier), after one call of each."""
    for name in names:
        run(ctx, vec, name)
    times = {name: [] for name in names}
    for _ in range(reps):
        for name in names:
            ctx.comm.Barrier()
            t0 = time.perf_counter()
            run(ctx, vec, name)
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) for name, t in times.items()}


def choose(ctx, vec: SparseVector, nnz_max: int, codec, run, *, tune: bool = False) -> str:
    """``auto``: the algorithm to run for this call (same on all ranks).

    Calibrates on ``ctx`` at the first call (collectively, with ``run``); a quantized call
    only considers algorithms that accept a quantizer. The calibrated cost model chooses;
    with ``tune`` (and P > 1), calls of a shape after its first try the candidates the model
    cannot separate and keep the fastest measured (:mod:`sparcml._model.tuning`). Predicted
    under the call's options (``codec.options``)."""
    options = codec.options
    model = model_of(ctx, run, options)
    memory = memory_of(ctx)
    q = memory.overlap.get(vec.dim, 1.0)
    shape = {"P": ctx.size, "N": vec.dim, "k": nnz_max, "s_idx": vec.index_dtype.itemsize,
             "s_val": vec.dtype.itemsize}
    fill = tuning.fill_bucket(memory.result_size.get(vec.dim), nnz_max)
    if tune and ctx.size > 1 and fill >= 0:
        key = tuning.shape_key("flat", vec, nnz_max, codec.lossy, fill, options)
        tuned = tuning.state_of(ctx)
        if key in tuned.shapes or len(tuned.shapes) < _HISTORY_LIMIT:  # bounded, as below
            return tuning.choose(tuned, key, lambda: [
                (model.predict(a, q=q, options=options, **shape), a)
                for a in _candidates(codec)])
    # iterative training repeats the same call: remember the choice for the same inputs
    key = ("choice", vec.dim, nnz_max, round(q, 2), vec.index_dtype.itemsize,
           vec.dtype.itemsize, codec.lossy, options)  # other options, other costs
    choice = memory.choices.get(key)
    if choice is None:
        choice = model.choose(q=q, candidates=_candidates(codec), options=options, **shape)
        _remember(memory, key, choice)
    return choice


def _candidates(codec) -> list[str]:
    """The algorithms ``auto`` may pick for a call with ``codec`` (lossy: those that accept a
    quantizer)."""
    return [a for a in algorithm_names(in_auto_only=True)
            if not codec.lossy or get_algorithm(a).accepts_quantizer]


def choose_topk_step(ctx, vec: SparseVector, nnz_max: int, run, options=None) -> str:
    """For a top-k SGD step whose ranks each selected ``nnz_max`` entries (at most):
    :data:`sparcml._model.costmodel.TOPK_STEP` when the calibrated model predicts
    :func:`sparcml.topk_allreduce` faster than every allreduce of the local selections, else
    that allreduce's name (:meth:`~sparcml.CostModel.choose_topk_step`). Same on every rank:
    the model and the overlap history are. Calibrates at the first call (collectively; ``run``
    also runs :data:`~sparcml._model.costmodel.TOPK_STEP`, see :func:`calibrate_topk`).
    ``options``: the step's :class:`~sparcml.Options` (None: the process defaults)."""
    model = model_of(ctx, run, options)
    if TOPK_STEP not in model.overhead and ctx.size > 1:
        calibrate_topk(ctx, model, run, options=options)
    memory = memory_of(ctx)
    q = memory.overlap.get(vec.dim, 1.0)
    key = ("topk step", vec.dim, nnz_max, round(q, 2), vec.index_dtype.itemsize,
           vec.dtype.itemsize)
    choice = memory.choices.get(key)
    if choice is None:
        choice = model.choose_topk_step(P=ctx.size, N=vec.dim, k=nnz_max, q=q,
                                        s_idx=vec.index_dtype.itemsize,
                                        s_val=vec.dtype.itemsize, options=options)
        _remember(memory, key, choice)
    return choice


def _pack(model: CostModel, names) -> list[float]:
    return ([getattr(model, f) for f in CostModel.scalar_fields()]
            + [model.overhead.get(n, 0.0) for n in names]
            + [model.scale.get(n, 0.0) for n in names])


def _unpack(values, names) -> CostModel:
    scalars = CostModel.scalar_fields()
    model = CostModel(**dict(zip(scalars, values[:len(scalars)])))
    rest = values[len(scalars):]
    for i, name in enumerate(names):
        if rest[i] > 0:
            model.overhead[name] = rest[i]
        if rest[len(names) + i] > 0:
            model.scale[name] = rest[len(names) + i]
    return model


def calibrate_node_aware(ctx, layout, run, *, reps: int = 5, options=None) -> CostModel:
    """The model of the node-aware allreduce on ``ctx`` with ``layout`` (collective over
    ``ctx.comm``): the leaders calibrate a full model on their sub-communicator (with ``run``,
    as :func:`calibrate_context`), every node measures its link (concurrent exchanges between
    node ranks ``r`` and ``r ^ 1``) for ``alpha_node`` / ``beta_node``; every rank returns the
    same model (maxima over ranks). Use it with :meth:`CostModel.predict_hierarchical`.
    ``options``: as in :func:`calibrate_context`."""
    names = algorithm_names(in_auto_only=True)
    node = layout.node
    width = len(_pack(CostModel(), names))
    params = np.zeros(width + 2, np.float64)
    if layout.is_leader and layout.nodes > 1:
        params[:width] = _pack(calibrate_context(layout.leaders, run, reps=reps,
                                                 options=options), names)
    sizes = [8, 1 << 16, 1 << 20]
    partner = node.rank ^ 1 if (node.rank ^ 1) < node.size else node.rank
    times = _exchange_times(node.comm, node.rank, partner, node.waiter, sizes, reps)
    if node.size > 1:
        params[width:] = _fit(sizes, times)
    ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, params, MPI.MAX)
    values = params.tolist()
    model = _unpack(values[:width], names) if params[:width].any() else CostModel()
    if params[width] > 0:
        model.alpha_node, model.beta_node = values[width], values[width + 1]
    return model


def choose_node_aware(ctx, layout, vec: SparseVector, nnz_max: int, codec, run, algorithm: str,
                      option, *, tune: bool = False) -> tuple[str, bool]:
    """``(algorithm, hierarchical)`` for a call with ``hierarchical`` ``option`` (True, False
    or ``"auto"``) and ``algorithm`` (a name or ``"auto"``); the same on every rank.

    The node-aware scheme is considered only where it differs from the flat one (more than one
    node, some node with more than one rank); it is predicted with the model calibrated by
    :func:`calibrate_node_aware` (at the first such call, collectively), the flat algorithms
    with the communicator's own (:func:`choose`). With ``tune``, calls of a shape after its
    first measure the options the models cannot separate (:mod:`sparcml._model.tuning`)."""
    fixed = algorithm != AUTO
    opts = codec.options
    useful = layout is not None and layout.nodes > 1 and not layout.trivial
    if option is False or not useful or (fixed and option is True):
        name = algorithm if fixed else choose(ctx, vec, nnz_max, codec, run, tune=tune)
        return name, option is True and layout is not None and not layout.trivial
    memory = memory_of(ctx)
    q = memory.overlap.get(vec.dim, 1.0)
    key = ("node choice", id(layout), algorithm, option, vec.dim, nnz_max, round(q, 2),
           vec.index_dtype.itemsize, vec.dtype.itemsize, codec.lossy, opts)
    fill = tuning.fill_bucket(memory.result_size.get(vec.dim), nnz_max)
    tune_key = tuning.shape_key("node-aware", vec, nnz_max, codec.lossy, id(layout),
                                algorithm, option, fill, opts)
    tuned = tuning.state_of(ctx)
    tune = tune and fill >= 0 and (tune_key in tuned.shapes
                                   or len(tuned.shapes) < _HISTORY_LIMIT)
    found = tuning.settled(tuned, tune_key) if tune else memory.choices.get(key)
    if found is not None:
        return found
    node_model = memory.node_models.get(id(layout))
    if node_model is None:
        node_model = memory.node_models[id(layout)] = calibrate_node_aware(ctx, layout, run,
                                                                           options=opts)
    candidates = [algorithm] if fixed else _candidates(codec)
    model = ctx.model
    if model is None and option == AUTO:
        model = model_of(ctx, run, opts)

    def ranked():
        q_now = memory.overlap.get(vec.dim, 1.0)
        shape = {"N": vec.dim, "k": nnz_max, "q": q_now, "s_idx": vec.index_dtype.itemsize,
                 "s_val": vec.dtype.itemsize}
        options = [(node_model.predict_hierarchical(a, P=ctx.size, nodes=layout.nodes,
                                                    ranks_per_node=layout.largest,
                                                    options=opts, **shape),
                    (a, True)) for a in candidates]
        if option == AUTO:
            options += [(model.predict(a, P=ctx.size, options=opts, **shape), (a, False))
                        for a in candidates]
        return options

    if tune:
        return tuning.choose(tuned, tune_key, ranked)
    options = ranked()
    if option == AUTO and not fixed:   # the flat side as the flat auto would run it
        flat = choose(ctx, vec, nnz_max, codec, run)
        options = [o for o in options if o[1][1]] + [
            (model.predict(flat, P=ctx.size, N=vec.dim, k=nnz_max, q=q,
                           s_idx=vec.index_dtype.itemsize, s_val=vec.dtype.itemsize,
                           options=opts),
             (flat, False))]
    _, found = min(options, key=lambda o: o[0])
    _remember(memory, key, found)
    return found


def learn_overlap(ctx, vec: SparseVector, nnz_max: int, result: SparseVector) -> None:
    """Remember how much the inputs overlapped (iterative training repeats its pattern), and
    the size of the result's support for the tuning shape (:func:`sparcml._model.tuning.fill_bucket`).
    A dense result (always so for ``dense`` and ``dsar_split_allgather``; past the switch rule
    for the others) has its support counted only
    while none is known (O(N), once), so that which algorithm ran does not change the shape."""
    memory, dim = memory_of(ctx), vec.dim
    if result.is_dense:  # past the switch rule K says little, and counting it costs O(N)
        if dim not in memory.result_size:
            memory.result_size[dim] = result.count_nonzero()
        return
    memory.result_size[dim] = result.nnz
    seen = (nnz_max, result.nnz)
    if memory.last.get(dim) == seen:  # the same call again: nothing new
        return
    memory.last[dim] = seen
    q = overlap_from_result(nnz_max, result.nnz, ctx.size, vec.dim)
    old = memory.overlap.get(dim)
    memory.overlap[dim] = q if old is None else 0.5 * (old + q)
