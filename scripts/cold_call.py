"""The plain sparse allreduce warm and cold (issue 34, item 6): N = 16M, 0.1% per rank.

    mpiexec -n 2 python scripts/cold_call.py [REPS] [plain|plan|mpi|parts] [N]

Each repetition times one call after each of: nothing (warm), a 64 MiB dense MPI_Allreduce
(as sparc-bench interleaves them), a local pass over a 64 MiB array (the caches evicted, no
MPI), a fresh 64 MiB array written and freed (malloc and page faults), a small MPI_Allreduce.
``plan``: the same through ``sparcml.plan``; ``mpi``: an MPI_Allreduce of nnz float32 values
instead (the floor). Prints the median, min and max per case on rank 0.

``parts``: what a call is made of, each piece timed once right after a local 64 MiB pass
(cold) and once right after that (warm): an empty Python function, a 100-item NumPy copy, a
Numba kernel on 100 items (through its dispatcher), a 808-byte ``Sendrecv``, a 288-byte
``Allreduce`` and its persistent form (the agreement's), and the plain call at N = 100,000
(100 nonzeros). Prints median cold and warm microseconds per piece.
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

WHAT = sys.argv[2] if len(sys.argv) > 2 else "plain"
P = sparcml.plan(N, np.float32, nnz=k) if WHAT != "parts" else None
small = np.ones(k, np.float32)

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


def parts():
    """The pieces of a call, cold and warm (see the module docstring)."""
    from sparcml import _kernels  # a private kernel: the dispatcher's cost is the question
    to, frm = (rank + 1) % comm.size, (rank - 1) % comm.size  # a ring: any P
    a, av = np.arange(100, dtype=np.int32), np.ones(100, np.float32)
    oi, ov = np.empty(200, np.int32), np.empty(200, np.float32)
    sb, rb = np.zeros(1024, np.uint8), np.zeros(1024, np.uint8)
    ag, agout = np.zeros(72, np.int32), np.zeros(72, np.int32)
    persistent = comm.Allreduce_init(ag, agout, MPI.MAX)
    tiny = sparcml.SparseVector(100_000, a * 1000, av)

    def persistent_allreduce():
        persistent.Start()
        persistent.Wait()
    pieces = {
        "empty Python function": lambda: None,
        "NumPy copy of 100 items": lambda: np.copyto(oi[:100], a),
        "Numba merge of 100 + 100": lambda: _kernels.merge_add_into(a, av, a, av, oi, ov),
        "MPI Sendrecv, 808 bytes": lambda: comm.Sendrecv([sb, 808, MPI.BYTE], to, 5,
                                                          [rb, MPI.BYTE], frm, 5),
        "MPI Allreduce, 288 bytes": lambda: comm.Allreduce(ag, agout, MPI.MAX),
        "persistent Allreduce, 288 bytes": persistent_allreduce,
        "sparcml.allreduce, N = 100,000": lambda: sparcml.allreduce(tiny),
    }
    times = {name: ([], []) for name in pieces}
    for f in pieces.values():
        f(), f()
    for _ in range(R):
        for name, f in pieces.items():
            scratch[:] += 1.0
            for slot in (0, 1):  # 0: right after the pass (cold), 1: right after that (warm)
                comm.Barrier()
                t = time.perf_counter()
                f()
                times[name][slot].append(time.perf_counter() - t)
    persistent.Free()
    if rank == 0:
        for name, (cold, warm) in times.items():
            print(f"{name:32s} cold {np.median(cold) * 1e6:7.1f} us  "
                  f"warm {np.median(warm) * 1e6:7.1f} us")
        print("load", open("/proc/loadavg").read().split()[:3])


if WHAT == "parts":
    parts()
    sys.exit(0)
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
