"""The plain sparse allreduce warm and cold (issue 34, item 6): N = 16M, 0.1% per rank.

    mpiexec -n 2 python scripts/cold_call.py [REPS] [plain|plan|mpi] [N]

Each repetition times one call after each of: nothing (warm), a 64 MiB dense MPI_Allreduce
(as sparc-bench interleaves them), a local pass over a 64 MiB array (the caches evicted, no
MPI), a fresh 64 MiB array written and freed (malloc and page faults), a small MPI_Allreduce.
``plan``: the same through ``sparcml.plan``; ``mpi``: an MPI_Allreduce of nnz float32 values
instead (the floor). Prints the median, min and max per case on rank 0.
"""
import sys, time
import numpy as np
from mpi4py import MPI
import sparcml

comm = MPI.COMM_WORLD
rank = comm.rank
N = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 24
k = N // 1000
rng = np.random.default_rng(rank)
idx = np.sort(rng.choice(N, k, replace=False)).astype(np.int32)
vec = sparcml.SparseVector(N, idx, rng.standard_normal(k).astype(np.float32))
dense = np.ones(1 << 24, np.float32)      # 64 MiB
scratch = np.ones(1 << 24, np.float32)
R = int(sys.argv[1]) if len(sys.argv) > 1 else 15

P = sparcml.plan(N, np.float32, nnz=k)
small = np.ones(k, np.float32)
WHAT = sys.argv[2] if len(sys.argv) > 2 else "plain"

def timed():
    comm.Barrier()
    t = time.perf_counter()
    if WHAT == "plain":
        out = sparcml.allreduce(vec)
    elif WHAT == "plan":
        out = P.allreduce(vec)
    else:
        out = comm.Allreduce(MPI.IN_PLACE, small)
    return time.perf_counter() - t, out

def before(kind):
    if kind == "warm":
        return
    if kind == "mpi_dense":
        comm.Allreduce(MPI.IN_PLACE, dense)
    elif kind == "touch64":          # evict caches locally, no MPI
        scratch[:] += 1.0
    elif kind == "alloc64":          # a fresh 64 MiB array written and freed (malloc/mmap)
        a = np.empty(1 << 24, np.float32); a[:] = 1.0; del a
    elif kind == "mpi_small":        # an MPI call that is not large
        comm.Allreduce(MPI.IN_PLACE, dense[:1024])

for _ in range(3):
    timed()
kinds = ["warm", "mpi_dense", "touch64", "alloc64", "mpi_small"]
res = {k: [] for k in kinds}
for r in range(R):
    for kind in kinds:
        before(kind)
        res[kind].append(timed()[0])
if rank == 0:
    for kind in kinds:
        a = np.array(res[kind]) * 1e3
        print(f"{kind:10s} median {np.median(a):7.3f} ms  min {a.min():7.3f}  max {a.max():7.3f}")
    print("load", open("/proc/loadavg").read().split()[:3])
