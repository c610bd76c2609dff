"""The cases that the simulator must reproduce exactly: run under mpiexec, or by the simulator.

``run_cases(comm)`` runs every algorithm on a few deterministic inputs (random and
overlapping supports, sparse to dense results, float32 and float64, a QSGD-quantized case)
and returns, per case, the result's bytes and representation and this rank's bytes and
messages sent. Under mpiexec (``python -m mpi4py sim_validation.py OUT``) rank 0 pickles
``{case: (result, [per-rank (bytes, messages)])}`` to OUT; ``tests/test_sim.py`` runs the same
function on ``sparcml.sim`` and compares.
"""

import pickle
import sys

import numpy as np

import sparcml
from sparcml import SparseVector


def make_input(rank, P, dim, density, pattern, dtype):
    rng_shared = np.random.default_rng(12345)
    rng = np.random.default_rng(1000 + rank)
    k = max(1, int(density * dim))
    if pattern == "overlap":  # half of every support is common to all ranks
        common = rng_shared.choice(dim, k // 2 + 1, replace=False)
        idx = np.union1d(common, rng.choice(dim, k - k // 2, replace=False))
    else:
        idx = np.unique(rng.choice(dim, k, replace=False))
    val = rng.standard_normal(idx.size).astype(dtype)
    return SparseVector(dim, idx.astype(np.int64), val)


CASES = [(dim, density, pattern, dtype)
         for dim in (5003,)
         for density in (0.002, 0.05, 0.4)
         for pattern in ("random", "overlap")
         for dtype in ("float32",)] + [(4099, 0.05, "random", "float64")]


def run_cases(comm):
    rank, P = comm.Get_rank(), comm.Get_size()
    out = {}
    for dim, density, pattern, dtype in CASES:
        vec = make_input(rank, P, dim, density, pattern, np.dtype(dtype))
        for algorithm in sparcml.ALGORITHMS:
            stats = sparcml.TrafficStats()
            res = sparcml.allreduce(vec, comm, algorithm=algorithm, stats=stats)
            out[(dim, density, pattern, dtype, algorithm, None)] = (
                res.is_dense, None if res.is_dense else res.indices.tobytes(),
                res.values.tobytes(), stats.bytes_sent, stats.messages)
        for algorithm in ("dsar_split_allgather", "ssar_recursive_double"):
            stats = sparcml.TrafficStats()
            q = sparcml.QSGD(bits=4, seed=[7, rank])
            res = sparcml.allreduce(vec, comm, algorithm=algorithm, quantizer=q, stats=stats)
            out[(dim, density, pattern, dtype, algorithm, 4)] = (
                res.is_dense, None if res.is_dense else res.indices.tobytes(),
                res.values.tobytes(), stats.bytes_sent, stats.messages)
    return out


if __name__ == "__main__":
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    mine = run_cases(comm)
    everyone = comm.gather(mine)
    if comm.Get_rank() == 0:
        merged = {case: (res[:3], [every[case][3:] for every in everyone])
                  for case, res in mine.items()}
        with open(sys.argv[1], "wb") as f:
            pickle.dump(merged, f)
        print(f"SIM-VALIDATION {len(merged)} CASES", flush=True)
