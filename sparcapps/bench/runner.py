"""Timing of benchmark cells: the algorithms of one cell interleaved, repetition by repetition.

A cell is one input (N, density, pattern, dtype) timed with several algorithms. Each
repetition runs every algorithm once, in turn, each after a barrier, so that whatever else
the machine is doing at that moment hits all of them alike; a repetition's time is the
slowest rank's. Medians and spread come from those.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

import sparcml
from sparcapps.records import summarize
from sparcml.context import context_for
from sparcml.partition import PARTITIONS_ENV
from sparcml.wire import INDEX_CODING_ENV

from .inputs import make_input

__all__ = ["BenchCase", "run_case", "run_cell"]


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
    index_coding: str = "auto"      # SPARCML_INDEX_CODING for the call ("raw": the "before")
    partitions: str = "balanced"    # SPARCML_PARTITIONS for the call (every rank alike)


def run_cell(cases: list[BenchCase], comm: MPI.Comm, *, reps: int, warmup: int, seed: int,
             model: "sparcml.CostModel | None" = None) -> list[dict]:
    """Time ``sparcml.allreduce`` (or ``iallreduce`` + ``wait``) for cases sharing one input.

    Collective. Returns, per case in order: ``timings`` (summary of the slowest rank's time
    per repetition), ``bytes`` (per-rank bytes sent: max and mean over ranks; bytes received:
    max and max / mean, in all and in the split algorithms' phase 1), the result's
    nnz / density, the algorithm that ran (what ``auto`` chose), and with ``model`` the
    predicted time and the reference volumes (DESIGN 3.7).
    """
    first = cases[0]
    if any((c.N, c.density, c.pattern, c.dtype) != (first.N, first.density, first.pattern,
                                                    first.dtype) for c in cases):
        raise ValueError("run_cell: the cases of a cell must share N, density, pattern, dtype")
    rank, size = comm.Get_rank(), comm.Get_size()
    vec = make_input(first.N, first.density, first.pattern, rank, size,
                     dtype=np.dtype(first.dtype), seed=seed)
    calls = []
    for case in cases:
        quantizer = None if case.bits is None else sparcml.QSGD(bits=case.bits,
                                                               seed=[seed, rank])
        options = {"algorithm": case.algorithm, "quantizer": quantizer,
                   "quantize_sparse": case.quantize_sparse}
        if case.reuse_output:
            options["out"] = np.zeros(first.N, np.dtype(first.dtype))  # zeros: in memory now

        def call(stats, options=options, nonblocking=case.nonblocking, case=case):
            os.environ[INDEX_CODING_ENV] = case.index_coding
            os.environ[PARTITIONS_ENV] = case.partitions
            if nonblocking:
                return sparcml.iallreduce(vec, comm, stats=stats, **options).wait()
            return sparcml.allreduce(vec, comm, stats=stats, **options)

        call(sparcml.TrafficStats())  # first call: Dup, Numba load, auto's calibration
        calls.append(call)
    times = [[] for _ in cases]
    stats = [sparcml.TrafficStats() for _ in cases]
    results = [None] * len(cases)
    phase1 = [None] * len(cases)
    history = context_for(comm).history
    for rep in range(warmup + reps):
        for i, call in enumerate(calls):
            stats[i].reset()
            comm.Barrier()
            history.pop("phase1_received", None)
            t0 = time.perf_counter()
            results[i] = call(stats[i])
            elapsed = time.perf_counter() - t0
            phase1[i] = history.get("phase1_received")
            if rep >= warmup:
                times[i].append(comm.allreduce(elapsed, op=MPI.MAX))
    k_max = max(comm.allgather(vec.nnz))
    return [_describe(case, comm, times[i], stats[i], results[i], k_max, model, phase1[i])
            for i, case in enumerate(cases)]


def _ratio(values) -> float | None:
    if any(v is None for v in values) or not np.mean(values):
        return None
    return float(np.max(values) / np.mean(values))


def _describe(case, comm, times, stats, result, k_max, model, phase1) -> dict:
    sent = comm.allgather(stats.bytes_sent)
    received = comm.allgather(stats.bytes_received)
    phase1 = comm.allgather(phase1)
    result_nnz = result.count_nonzero() if result.is_dense else result.nnz
    out = {
        "timings": {"allreduce": summarize(times)},
        "bytes": {"sent_per_rank_max": int(max(sent)), "sent_per_rank_mean": float(np.mean(sent)),
                  "input_nnz_max": int(k_max), "messages": stats.messages,
                  "dense_messages": stats.dense_messages,
                  "received_per_rank_max": int(max(received)),
                  "received_max_over_mean": _ratio(received),
                  # the split algorithms' reduce-scatter: what each owner received
                  "phase1_received_max_over_mean": _ratio(phase1)},
        "result": {"nnz": int(result_nnz), "dense": bool(result.is_dense),
                   "density": result_nnz / case.N if case.N else 0.0},
        "ran": stats.algorithm,
    }
    if model is not None:
        size = comm.Get_size()
        s_idx, s_val = sparcml.index_dtype_for(case.N).itemsize, np.dtype(case.dtype).itemsize
        refs = model.references(P=size, k=k_max, K=result_nnz, s_idx=s_idx, s_val=s_val)
        out["model"] = {
            "predicted_s": model.predict(stats.algorithm, P=size, N=case.N, k=k_max,
                                         K=result_nnz, s_idx=s_idx, s_val=s_val),
            "floor_bytes": refs["floor_bytes"], "rs_ag_bytes": refs["rs_ag_bytes"],
            "floor_s": refs["floor_bytes"] * model.beta,
            "rs_ag_s": refs["rs_ag_bytes"] * model.beta,
        }
    return out


def run_case(case: BenchCase, comm: MPI.Comm, *, reps: int, warmup: int, seed: int,
             model: "sparcml.CostModel | None" = None) -> dict:
    """:func:`run_cell` for a single case."""
    return run_cell([case], comm, reps=reps, warmup=warmup, seed=seed, model=model)[0]
