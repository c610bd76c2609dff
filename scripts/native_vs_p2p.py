"""Point-to-point messages vs MPI's vector collectives for the O(P) phases, side by side.

    mpiexec -n 4 python scripts/native_vs_p2p.py [--reps 30] [--N 1000 1048576] [--density ...]

For each input shape and each of ``ssar_split_allgather``, ``dsar_split_allgather``,
``topk_allreduce`` (k = the input's nnz) and the node-aware reduce (``hierarchical=True``
with nodes of ``--ranks-per-node`` ranks, no shared-memory window), the call with
``Options(native_min_ranks=1)`` (``Alltoallv`` / ``Allgatherv`` / ``Gatherv``) and with the
point-to-point path forced, interleaved call by call (so that both see the same machine
load), ``--reps`` timed calls after 3 warm-ups each; rank 0 prints the median per call of
the slowest rank and the ratio native / point-to-point (below 1: the collectives are faster).
Results are checked bitwise equal between the paths. Used to choose the default of
``Options.native_min_ranks`` (BENCHMARKS.md, "Native MPI collectives").
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import sparcml

NEVER = 2**31 - 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--N", type=int, nargs="+", default=[1000, 1 << 20])
    ap.add_argument("--density", type=float, nargs="+", default=[0.01])
    ap.add_argument("--ranks-per-node", type=int, default=2)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    paths = {"native": dict(native_min_ranks=1), "p2p": dict(native_min_ranks=NEVER)}
    if rank == 0:
        print(f"P={P}  {MPI.Get_library_version().splitlines()[0]}")
        print(f"{'N':>9} {'density':>8} {'call':<22} {'p2p us':>10} {'native us':>10} "
              f"{'native/p2p':>10}")
    for N in a.N:
        for density in a.density:
            rng = np.random.default_rng(rank + 1)
            k = max(1, int(N * density))
            vec = sparcml.SparseVector(N, np.sort(rng.choice(N, k, replace=False)),
                                       rng.standard_normal(k).astype(np.float32))
            calls = {
                "ssar_split_allgather": lambda o: sparcml.allreduce(
                    vec, comm, algorithm="ssar_split_allgather", options=o),
                "dsar_split_allgather": lambda o: sparcml.allreduce(
                    vec, comm, algorithm="dsar_split_allgather", options=o),
                "topk_allreduce": lambda o: sparcml.topk_allreduce(vec, k, comm,
                                                                   options=o).result,
                "node reduce (rd)": lambda o: sparcml.allreduce(
                    vec, comm, algorithm="ssar_recursive_double", hierarchical=True,
                    options=sparcml.Options(ranks_per_node=a.ranks_per_node, node_shm=False,
                                            native_min_ranks=o.native_min_ranks)),
            }
            for name, call in calls.items():
                opts = {p: sparcml.Options(**kw) for p, kw in paths.items()}
                times = {p: [] for p in paths}
                out = {}
                for rep in range(3 + a.reps):
                    for p in paths:
                        comm.Barrier()
                        t0 = time.perf_counter()
                        res = call(opts[p])
                        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                        if rep >= 3:
                            times[p].append(dt)
                        out[p] = res.to_dense().tobytes()
                if out["native"] != out["p2p"]:
                    raise SystemExit(f"{name} N={N}: the two paths differ")
                if rank == 0:
                    p2p = np.median(times["p2p"]) * 1e6
                    nat = np.median(times["native"]) * 1e6
                    print(f"{N:>9} {density:>8g} {name:<22} {p2p:>10.0f} {nat:>10.0f} "
                          f"{nat / p2p:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
