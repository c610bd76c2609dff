"""``sparc-bench --latency``: per-call latency of small sparse reductions against MPI_Allreduce.

Issue 21's acceptance benchmark: at P ranks, vectors of N entries (default 1,000) with a few
nonzeros per rank (``--latency-nnz``, default 10), one run times, interleaved call by call:

- ``MPI_Allreduce``: mpi4py's buffer ``Allreduce`` of the dense N values (the reference);
- ``plan recursive doubling``: :meth:`sparcml.AllreducePlan.allreduce` of a plan made once;
- ``allreduce``: the plain :func:`sparcml.allreduce` (recursive doubling, the default);
- ``topk_plan``: :meth:`sparcml.TopKPlan.topk_allreduce` with k = the nonzeros per rank;
- ``topk_allreduce``: the plain :func:`sparcml.topk_allreduce` with the same k.

Each call is timed on its own (``perf_counter`` around it); a row's figure is the median over
repetitions of the slowest rank's median, and its ratio to ``MPI_Allreduce``'s median in the
same run. Speed goals are ratios measured side by side (DESIGN 7), never timed tests.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

import sparcml

__all__ = ["VARIANTS", "run_latency", "latency_table"]

VARIANTS = ("MPI_Allreduce", "plan recursive doubling", "allreduce", "topk_plan",
            "topk_allreduce")
DEFAULT_N = 1000
DEFAULT_REPS = 2000
DEFAULT_WARMUP = 100


def _input(comm, n: int, nnz: int, dtype, seed: int):
    rng = np.random.default_rng([seed, comm.Get_rank(), n])
    idx = np.sort(rng.choice(n, min(nnz, n), replace=False))
    vals = rng.standard_normal(idx.size).astype(dtype)
    return sparcml.SparseVector(n, idx, vals)


def measure(comm, n: int, nnz: int, dtype, reps: int, warmup: int, seed: int = 0) -> dict:
    """Collective: ``{variant: median seconds of the slowest rank}`` for one N."""
    vec = _input(comm, n, nnz, dtype, seed)
    dense_in = vec.to_dense()
    dense_out = np.empty_like(dense_in)
    k = max(1, min(nnz, n))
    plan = sparcml.plan(n, dtype, comm, algorithm=sparcml.DEFAULT_ALGORITHM)  # recursive doubling
    tplan = sparcml.topk_plan(n, dtype, k, comm)
    calls = {
        "MPI_Allreduce": lambda: comm.Allreduce(dense_in, dense_out, MPI.SUM),
        "plan recursive doubling": lambda: plan.allreduce(vec),
        "allreduce": lambda: sparcml.allreduce(vec, comm),
        "topk_plan": lambda: tplan.topk_allreduce(vec),
        "topk_allreduce": lambda: sparcml.topk_allreduce(vec, k, comm),
    }
    times = {name: np.empty(reps) for name in VARIANTS}
    clock = time.perf_counter
    for rep in range(warmup + reps):
        for name in VARIANTS:  # interleaved: machine noise hits every variant alike
            fn = calls[name]
            t0 = clock()
            fn()
            t1 = clock()
            if rep >= warmup:
                times[name][rep - warmup] = t1 - t0
    mine = np.array([np.median(times[name]) for name in VARIANTS])
    slowest = np.empty_like(mine)
    comm.Allreduce(mine, slowest, MPI.MAX)
    return dict(zip(VARIANTS, slowest.tolist()))


def latency_table(P: int, n: int, nnz: int, dtype, reps: int, medians: dict) -> list[str]:
    """The printed rows of one N: each variant's median and its ratio to MPI_Allreduce."""
    ref = medians["MPI_Allreduce"]
    lines = [f"latency: P={P}, N={n:,}, {nnz} nonzeros per rank, {np.dtype(dtype).name}, "
             f"{reps} calls each (median per call, slowest rank)"]
    for name in VARIANTS:
        t = medians[name]
        lines.append(f"  {name:<26s} {t * 1e6:9.1f} us   {t / ref:6.1f}x MPI_Allreduce")
    return lines


def run_latency(args) -> int:
    """``--latency``: the table for each N of ``--N`` (default 1,000), on rank 0."""
    comm = MPI.COMM_WORLD
    sizes = args.N if args.N else [DEFAULT_N]
    reps = args.reps if args.reps is not None else DEFAULT_REPS
    warmup = args.warmup if args.warmup is not None else DEFAULT_WARMUP
    dtype = np.dtype(args.dtype)
    for n in sizes:
        medians = measure(comm, n, args.latency_nnz, dtype, reps, warmup, args.seed)
        if comm.Get_rank() == 0:
            print("\n".join(latency_table(comm.Get_size(), n, min(args.latency_nnz, n), dtype,
                                          reps, medians)), flush=True)
    return 0
