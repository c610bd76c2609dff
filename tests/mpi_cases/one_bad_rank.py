"""Issue 11, comm layer: one rank passes a bad argument, the others good ones.

Run WITHOUT ``-m mpi4py`` (a rank that raised would otherwise abort the job and hide a hang):
every case must raise the same error class on every rank, name the bad rank, and leave the
communicator usable (the next call gives the right sum). Rank 0 prints the cases planned and
passed (``ONE-BAD-RANK-REPORT``: tests/mpi_cases/_mpi_checks.py).
"""

import os
import sys

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import SparseVector

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mpi_checks import done, plan, report  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
BAD = P - 1
good = (100, np.array([1, 5]), np.ones(2, np.float32))
q = sparcml.QSGD(4, seed=3)
nan_values = (100, np.array([1, 5]), np.array([1.0, np.nan], np.float32))


def outcome(fn):
    try:
        fn()
    except sparcml.SparcmlError as exc:
        return (type(exc).__name__, str(exc))
    except Exception as exc:  # noqa: BLE001 - reported, and fails the case
        return ("foreign " + type(exc).__name__, str(exc))
    return ("no exception", "")


def sane_afterwards(label):
    ok = sparcml.allreduce(SparseVector(*good))
    assert ok.to_dense()[[1, 5]].tolist() == [P, P], label


cases = [
    # 1. a dim that int64 cannot hold
    ("dim 2**63", lambda bad: sparcml.allreduce((2**63, np.array([1]), np.ones(1, np.float32)))
     if bad else sparcml.allreduce(good), "InvalidVectorError", "2**63"),
    # 2. big-endian indices are a valid input (converted), so nobody raises: same sum
    # 3. stats that is not a TrafficStats
    ("stats={}", lambda bad: sparcml.allreduce(good, stats={} if bad else None),
     "InvalidArgumentError", "TrafficStats"),
    # 4. bcast to a root that is not a rank, or a string root
    ("bcast root=7", lambda bad: sparcml.bcast(SparseVector(*good), root=7 if bad else 0),
     "InvalidArgumentError", "not a rank"),
    ("bcast root='0'", lambda bad: sparcml.bcast(SparseVector(*good), root="0" if bad else 0),
     "InvalidArgumentError", "integer rank"),
    # 5. a NaN QSGD cannot encode, on one rank only
    ("NaN allgather", lambda bad: sparcml.allgather(nan_values if bad else good, quantizer=q),
     "QuantizationError", "non-finite"),
    ("NaN dsar", lambda bad: sparcml.allreduce(nan_values if bad else good, quantizer=q,
                                               algorithm=sparcml.ALGORITHMS[2]),
     "QuantizationError", "non-finite"),
    ("NaN reduce_scatter", lambda bad: sparcml.reduce_scatter(nan_values if bad else good,
                                                              quantizer=q, quantize_sparse=True),
     "QuantizationError", "non-finite"),
    # 15. uint64 indices beyond int64
    ("uint64 2**63", lambda bad: sparcml.allreduce(
        (100, np.array([1, 2**63], np.uint64), np.ones(2, np.float32)) if bad else good),
     "InvalidVectorError", "out of range"),
]
DIMS = (2**61, 2**62 + 3, 2**63 - 1)
DIM_ALGORITHMS = (sparcml.ALGORITHMS[1], sparcml.DEFAULT_ALGORITHM, sparcml.ALGORITHMS[-1])
plan(*[label for label, *_ in cases], "tuning env", "different calls", "node shm env",
     *[f"big-endian {a}" for a in sparcml.ALGORITHMS],
     *[f"check=False {a}" for a in sparcml.ALGORITHMS], "check=False mismatch",
     *[f"{what} dim={dim}" for dim in DIMS
       for what in [*(f"allreduce {a}" for a in DIM_ALGORITHMS), "reduce_scatter"]])
for label, call, cls, needle in cases:
    every = comm.allgather(outcome(lambda: call(rank == BAD)))
    for r, (got, msg) in enumerate(every):
        assert got == cls, f"{label}: rank {r} raised {got}: {msg}"
        assert needle in msg, f"{label}: rank {r}: {msg!r} lacks {needle!r}"
        if r != BAD:
            assert f"rank {BAD}" in msg, f"{label}: rank {r} not told which rank: {msg!r}"
    sane_afterwards(label)
    done(label)

# auto's measured refinement switched off on one rank only: its choices would diverge, so
# the call is refused on every rank, naming the variable
if rank == BAD:
    os.environ["SPARCML_AUTO_TUNING"] = "0"
every = comm.allgather(outcome(lambda: sparcml.allreduce(good, algorithm="auto")))
os.environ.pop("SPARCML_AUTO_TUNING", None)
if P > 1:
    for r, (got, msg) in enumerate(every):
        assert got == "RankMismatchError", f"tuning env: rank {r} raised {got}: {msg}"
        assert "options.auto_tuning" in msg and f"rank {BAD}: False" in msg, msg
sane_afterwards("tuning env")
done("tuning env")

# different sparcml calls at the same point (one rank's topk_allreduce against the others'
# allreduce): the agreement reduces the same number of integers whatever the call, so every
# rank raises RankMismatchError naming each rank's call, instead of mismatched reductions
every = comm.allgather(outcome(lambda: sparcml.topk_allreduce(good, 1) if rank == BAD
                               else sparcml.allreduce(good)))
if P > 1:
    for r, (got, msg) in enumerate(every):
        assert got == "RankMismatchError", f"different calls: rank {r} raised {got}: {msg}"
        assert "different sparcml calls" in msg and f"rank {BAD}: (dim, value dtype, k" in msg, msg
sane_afterwards("different calls")
done("different calls")

# SPARCML_NODE_SHM=0 on one rank only: topk_allreduce's exchanges would go through the window
# on the others and through messages on it; agreed first, so every rank raises instead
if rank == BAD:
    os.environ["SPARCML_NODE_SHM"] = "0"
every = comm.allgather(outcome(lambda: sparcml.topk_allreduce(good, 1)))
os.environ.pop("SPARCML_NODE_SHM", None)
if P > 1:
    for r, (got, msg) in enumerate(every):
        assert got == "RankMismatchError", f"node shm env: rank {r} raised {got}: {msg}"
        assert "options.node_shm" in msg, msg
sane_afterwards("node shm env")
done("node shm env")

# 2. big-endian indices and values on one rank: accepted, converted, the same sum everywhere
be = (100, np.array([1, 5], ">i4"), np.ones(2, ">f4"))
for algorithm in sparcml.ALGORITHMS:
    res = sparcml.allreduce(be if rank == BAD else good, algorithm=algorithm)
    assert res.to_dense()[[1, 5]].tolist() == [P, P], algorithm
    done(f"big-endian {algorithm}")

# 6. check=False on one rank only: the agreement always runs, so nothing hangs
for algorithm in sparcml.ALGORITHMS:
    res = sparcml.allreduce(good, algorithm=algorithm, check=(rank != BAD))
    assert res.to_dense()[[1, 5]].tolist() == [P, P], algorithm
    done(f"check=False {algorithm}")
every = comm.allgather(outcome(lambda: sparcml.allreduce(
    (101 if rank == BAD else 100, np.array([1, 5]), np.ones(2, np.float32)),
    check=(rank == BAD))))
assert all(got == "RankMismatchError" for got, _ in every), every
sane_afterwards("check=False mismatch")
done("check=False mismatch")

# 7. dim >= 2**61 at any P: exact block bounds, so no wrong sums
for dim in DIMS:
    idx = np.array([0, 2**40 + rank, dim - 1], np.int64)
    for algorithm in DIM_ALGORITHMS:
        res = sparcml.allreduce((dim, idx, np.ones(3, np.float32)), algorithm=algorithm)
        want = sorted({0, dim - 1} | {2**40 + r for r in range(P)})
        assert res.indices.tolist() == want, (dim, algorithm, res.indices[:6])
        assert res.values[0] == P and res.values[-1] == P
        done(f"allreduce {algorithm} dim={dim}")
    rs = sparcml.reduce_scatter((dim, idx, np.ones(3, np.float32)))
    mine = comm.allgather(rs.indices.tolist())
    flat = [i for part in mine for i in part]
    assert flat == sorted(set(flat)) and set(flat) == set(want), (dim, flat)
    done(f"reduce_scatter dim={dim}")

report("ONE-BAD-RANK")
sys.exit(0)
