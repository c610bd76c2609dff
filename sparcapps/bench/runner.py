"""Timing of benchmark cells: the algorithms of one cell interleaved, repetition by repetition.

A cell is one input (N, density, pattern, dtype) timed with several algorithms. Each
repetition runs every algorithm once, in turn, each after a barrier, so that whatever else
the machine is doing at that moment hits all of them alike; a repetition's time is the
slowest rank's. Medians and spread come from those.
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass, replace

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import select_topk
from sparcapps.records import summarize

from .inputs import make_input

__all__ = ["BenchCase", "run_case", "run_cell", "case_call", "case_options", "settle_auto",
           "time_local_selection"]


@dataclass(frozen=True)
class BenchCase:
    N: int
    density: float
    pattern: str
    algorithm: str          # one of sparcml.ALGORITHMS or "auto"
    dtype: str = "float32"
    nonblocking: bool = False
    bits: int | None = None         # QSGD bits for quantized messages (None: full precision)
    quantize_sparse: bool = False
    reuse_output: bool = False      # the same out= buffer every repetition (iterative callers)
    _: KW_ONLY                      # the variants below by name only (they were mixed up once)
    topk: int | None = None         # time sparcml.topk_allreduce keeping this many (algorithm
    #                                 is then the label, sparcml.TOPK_ALLREDUCE)
    hierarchical: bool | None = None  # node-aware (True), flat (False), library default (None)
    index_coding: str = "auto"      # Options.index_coding of the call ("raw": the "before")
    partitions: str = "balanced"    # Options.partitions of the call (every rank alike)
    replay: str | None = None       # pattern "replay": the file of recorded vectors


def run_cell(cases: list[BenchCase], comm: MPI.Comm, *, reps: int, warmup: int, seed: int,
             model: "sparcml.CostModel | None" = None) -> list[dict]:
    """Time ``sparcml.allreduce`` (or ``iallreduce`` + ``wait``) for cases sharing one input.

    Collective. Returns, per case in order: ``timings`` (``allreduce``: summary of the slowest
    rank's time per interleaved repetition; ``warm``: of ``max(1, reps // 2)`` calls of the
    case back to back afterwards, untouched by the other cases), ``bytes`` (per-rank bytes sent: max and mean over ranks; bytes received:
    max and max / mean, in all and in the split algorithms' phase 1), the result's
    nnz / density, the algorithm that ran (what ``auto`` chose), and with ``model`` the
    predicted time and the reference volumes (DESIGN 3.7).
    """
    first = cases[0]
    if any((c.N, c.density, c.pattern, c.dtype, c.replay) != (
            first.N, first.density, first.pattern, first.dtype, first.replay) for c in cases):
        raise ValueError("run_cell: the cases of a cell must share N, density, pattern, dtype "
                         "and replay file")
    rank, size = comm.Get_rank(), comm.Get_size()
    vec = make_input(first.N, first.density, first.pattern, rank, size,
                     dtype=np.dtype(first.dtype), seed=seed, replay=first.replay)
    calls = []
    for case in cases:
        quantizer = None if case.bits is None else sparcml.QSGD(bits=case.bits,
                                                               seed=[seed, rank])
        call = case_call(case, vec, comm, quantizer)
        call(sparcml.TrafficStats())  # first call: Dup, Numba load, auto's calibration
        calls.append(call)
    settle_auto([lambda call=call: call(sparcml.TrafficStats())
                 for case, call in zip(cases, calls)
                 if case.topk is None and case.algorithm == sparcml.AUTO])
    times = [[] for _ in cases]
    stats = [sparcml.TrafficStats() for _ in cases]
    results = [None] * len(cases)
    for rep in range(warmup + reps):
        for i, call in enumerate(calls):
            stats[i].reset()
            comm.Barrier()
            t0 = time.perf_counter()
            results[i] = call(stats[i])
            elapsed = time.perf_counter() - t0
            if rep >= warmup:
                times[i].append(comm.allreduce(elapsed, op=MPI.MAX))
    warm = [_warm_times(call, comm, max(1, reps // 2)) for call in calls]
    k_max = max(comm.allgather(vec.nnz))
    described = [_describe(case, comm, times[i], stats[i], results[i], k_max, model,
                           stats[i].phase1_received)
                 for i, case in enumerate(cases)]
    for out, warm_times in zip(described, warm):
        out["timings"]["warm"] = summarize(warm_times)
    return described


def _warm_times(call, comm: MPI.Comm, reps: int) -> list[float]:
    """The slowest rank's time of ``reps`` calls made back to back after an untimed one (each
    after a barrier): the call with its own code and data in the caches. The interleaved
    repetitions time each call after the other algorithms' calls and the dense baseline's
    large buffers, as a training step's call follows compute that evicts the caches
    (BENCHMARKS.md, "The cold call"). Collective."""
    call(sparcml.TrafficStats())
    times = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        call(sparcml.TrafficStats())
        times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return times


def case_options(case: BenchCase) -> "sparcml.Options":
    """The :class:`sparcml.Options` of a case's calls: the process defaults (the
    ``SPARCML_*`` environment) with the case's index coding and partitions."""
    return replace(sparcml.default_options(), index_coding=case.index_coding,
                   partitions=case.partitions)


def case_call(case: BenchCase, vec, comm, quantizer=None):
    """``call(stats) -> result``: one call of ``case`` on ``vec`` (collective), its options
    passed as the keyword. The real and the simulated sweep both call through this."""
    options = case_options(case)
    kwargs = {} if case.topk is not None else {
        "algorithm": case.algorithm, "quantizer": quantizer,
        "quantize_sparse": case.quantize_sparse, "hierarchical": case.hierarchical}
    if case.reuse_output:
        kwargs["out"] = np.zeros(case.N, np.dtype(case.dtype))  # zeros: in memory now

    def call(stats):
        if case.topk is not None and case.nonblocking:
            return sparcml.itopk_allreduce(vec, case.topk, comm, stats=stats,
                                           options=options).wait().result
        if case.topk is not None:
            return sparcml.topk_allreduce(vec, case.topk, comm, stats=stats,
                                          options=options).result
        if case.nonblocking:
            return sparcml.iallreduce(vec, comm, stats=stats, options=options,
                                      **kwargs).wait()
        return sparcml.allreduce(vec, comm, stats=stats, options=options, **kwargs)

    return call


def settle_auto(auto_calls) -> None:
    """``auto``'s exploring calls (:data:`sparcml.AUTO_EXPLORING_CALLS` rounds of
    ``auto_calls``, one function per ``auto`` case of a cell), untimed like its first: the
    timed repetitions see the algorithm it settles on, as a training run's steps after the
    first few do. The real and the simulated sweep both make them here, in the same order."""
    for _ in range(sparcml.AUTO_EXPLORING_CALLS if auto_calls else 0):
        for call in auto_calls:
            call()


def _ratio(values) -> float | None:
    if any(v is None for v in values) or not np.mean(values):
        return None
    return float(np.max(values) / np.mean(values))


def _describe(case, comm, times, stats, result, k_max, model, phase1) -> dict:
    sent = comm.allgather(stats.bytes_sent)
    inter = comm.allgather(stats.inter_node_bytes)
    received = comm.allgather(stats.bytes_received)
    phase1 = comm.allgather(phase1)
    result_nnz = result.count_nonzero() if result.is_dense else result.nnz
    out = {
        "timings": {"allreduce": summarize(times)},
        "bytes": {"sent_per_rank_max": int(max(sent)), "sent_per_rank_mean": float(np.mean(sent)),
                  "inter_node_per_rank_max": int(max(inter)),
                  "input_nnz_max": int(k_max), "messages": stats.messages,
                  "dense_messages": stats.dense_messages,
                  "received_per_rank_max": int(max(received)),
                  "received_max_over_mean": _ratio(received),
                  # the split algorithms' reduce-scatter: what each owner received
                  "phase1_received_max_over_mean": _ratio(phase1)},
        "result": {"nnz": int(result_nnz), "dense": bool(result.is_dense),
                   "density": result_nnz / case.N if case.N else 0.0},
        "ran": stats.algorithm,
        "hierarchical": bool(stats.hierarchical),
    }
    if model is not None and not stats.hierarchical:  # the flat model says nothing of it
        size = comm.Get_size()
        s_idx, s_val = sparcml.index_dtype_for(case.N).itemsize, np.dtype(case.dtype).itemsize
        refs = model.references(P=size, k=k_max, K=result_nnz, s_idx=s_idx, s_val=s_val)
        options = case_options(case)  # the case's index coding, not the process default
        predicted = model.predict_topk(P=size, N=case.N, k_local=k_max, k=case.topk,
                                       s_idx=s_idx, s_val=s_val, options=options) \
            if case.topk is not None \
            else model.predict(stats.algorithm, P=size, N=case.N, k=k_max, K=result_nnz,
                               s_idx=s_idx, s_val=s_val, options=options)
        out["model"] = {
            "predicted_s": predicted,
            "floor_bytes": refs["floor_bytes"], "rs_ag_bytes": refs["rs_ag_bytes"],
            "floor_s": refs["floor_bytes"] * model.beta,
            "rs_ag_s": refs["rs_ag_bytes"] * model.beta,
        }
    return out


def run_case(case: BenchCase, comm: MPI.Comm, *, reps: int, warmup: int, seed: int,
             model: "sparcml.CostModel | None" = None) -> dict:
    """:func:`run_cell` for a single case."""
    return run_cell([case], comm, reps=reps, warmup=warmup, seed=seed, model=model)[0]


def time_local_selection(comm: MPI.Comm, N: int, k: int, *, dtype: str = "float32",
                         reps: int = 5, seed: int = 0) -> float:
    """Median seconds (slowest rank) of selecting the k largest magnitudes of a dense vector of
    N standard-normal values (:func:`sparcml.select_topk`, what ``TopK`` runs): the local step
    every row of a top-k cell stands for. Collective."""
    x = np.random.default_rng([seed, comm.Get_rank(), 3]).standard_normal(N).astype(dtype)
    select_topk(x, k)  # compile / load
    times = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        select_topk(x, k)
        times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return float(np.median(times))
