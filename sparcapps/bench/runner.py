"""Timing of one benchmark case: median and spread of the slowest rank over repetitions."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

import sparcml
from sparcapps.records import summarize

from .inputs import make_input

__all__ = ["BenchCase", "run_case"]


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


def run_case(case: BenchCase, comm: MPI.Comm, *, reps: int, warmup: int, seed: int,
             model: "sparcml.CostModel | None" = None) -> dict:
    """Time ``sparcml.allreduce`` (or ``iallreduce`` + ``wait``) for one case. Collective.

    Each repetition starts after a barrier and is timed on every rank; the repetition's time is
    the slowest rank's. Returns ``timings`` (summary of those), ``bytes`` (per-rank bytes sent:
    max and mean over ranks), the result's nnz / density, the algorithm that ran (what ``auto``
    chose), and with ``model`` the predicted time and the reference volumes (DESIGN 3.7).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    vec = make_input(case.N, case.density, case.pattern, rank, size,
                     dtype=np.dtype(case.dtype), seed=seed)

    quantizer = None if case.bits is None else sparcml.QSGD(bits=case.bits, seed=[seed, rank])
    options = {"algorithm": case.algorithm, "quantizer": quantizer,
               "quantize_sparse": case.quantize_sparse}

    def call(stats):
        if case.nonblocking:
            return sparcml.iallreduce(vec, comm, stats=stats, **options).wait()
        return sparcml.allreduce(vec, comm, stats=stats, **options)

    call(sparcml.TrafficStats())  # first call: Dup, Numba load, auto's calibration
    times = []
    stats = sparcml.TrafficStats()
    result = None
    for rep in range(warmup + reps):
        stats.reset()
        comm.Barrier()
        t0 = time.perf_counter()
        result = call(stats)
        elapsed = time.perf_counter() - t0
        if rep >= warmup:
            times.append(comm.allreduce(elapsed, op=MPI.MAX))
    sent = comm.allgather(stats.bytes_sent)
    result_nnz = result.count_nonzero() if result.is_dense else result.nnz
    k_max = max(comm.allgather(vec.nnz))
    out = {
        "timings": {"allreduce": summarize(times)},
        "bytes": {"sent_per_rank_max": int(max(sent)), "sent_per_rank_mean": float(np.mean(sent)),
                  "input_nnz_max": int(k_max), "messages": stats.messages,
                  "dense_messages": stats.dense_messages},
        "result": {"nnz": int(result_nnz), "dense": bool(result.is_dense),
                   "density": result_nnz / case.N if case.N else 0.0},
        "ran": stats.algorithm,
    }
    if model is not None:
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
