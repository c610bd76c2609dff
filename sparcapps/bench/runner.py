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
    algorithm: str
    dtype: str = "float32"


def run_case(case: BenchCase, comm: MPI.Comm, *, reps: int, warmup: int, seed: int) -> dict:
    """Time ``sparcml.allreduce`` for one case. Collective over ``comm``.

    Each repetition starts after a barrier and is timed on every rank; the repetition's time is
    the slowest rank's. Returns ``timings`` (summary of those), ``bytes`` (per-rank bytes sent:
    max and mean over ranks), and the result's nnz / density.
    """
    vec = make_input(case.N, case.density, case.pattern, comm.Get_rank(), comm.Get_size(),
                     dtype=np.dtype(case.dtype), seed=seed)
    sparcml.allreduce(vec, comm, algorithm=case.algorithm)  # first call: Dup, Numba load
    times = []
    stats = sparcml.TrafficStats()
    result = None
    for rep in range(warmup + reps):
        stats.reset()
        comm.Barrier()
        t0 = time.perf_counter()
        result = sparcml.allreduce(vec, comm, algorithm=case.algorithm, stats=stats)
        elapsed = time.perf_counter() - t0
        if rep >= warmup:
            times.append(comm.allreduce(elapsed, op=MPI.MAX))
    sent = comm.allgather(stats.bytes_sent)
    result_nnz = result.count_nonzero() if result.is_dense else result.nnz
    return {
        "timings": {"allreduce": summarize(times)},
        "bytes": {"sent_per_rank_max": int(max(sent)), "sent_per_rank_mean": float(np.mean(sent)),
                  "input_nnz_mean": float(np.mean(comm.allgather(vec.nnz))),
                  "messages": stats.messages, "dense_messages": stats.dense_messages},
        "result": {"nnz": int(result_nnz), "dense": bool(result.is_dense),
                   "density": result_nnz / case.N if case.N else 0.0},
    }
