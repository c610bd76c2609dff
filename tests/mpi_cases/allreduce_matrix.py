"""Every allreduce algorithm against the dense sum, over the acceptance matrix of the core issue.

Run under mpiexec (any P) with ``python -m mpi4py``: a failing rank aborts the job. Rank 0 prints
``CASES <n> OK`` at the end. Cases: densities 0 (all ranks empty; some ranks empty), 1e-4, 1e-2,
0.3, 0.9 and 1; disjoint, identical and random supports; int32 and int64 input indices, and
int64 *stored* indices (the int32 limit lowered for the run, then a real dim above 2**31);
float32 and float64; a dim that is not a multiple of P; indices 0 and N-1 always present on
some rank. With ``SPARC_MATRIX=small`` in the environment (P = 16, oversubscribed, in CI) the
same checks on a smaller matrix: float32 values, int64 input indices, four densities. Checks: exact equality with the dense sum for integer values (allclose for random
floats), the same result on every rank, the switch rule (sparse algorithms return a
dense-backed result exactly when the result's support crosses the rule), and the same bits
written into a caller's ``out=`` buffer.
"""

import os
import sys
import zlib

import numpy as np
from mpi4py import MPI

import sparcml
import sparcml._vector as vector_module
from sparcml import SparseVector, should_be_dense

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
RULE_ALGORITHMS = ("ssar_recursive_double", "ssar_split_allgather", "allgather")
cases = 0


def supports(pattern, density, dim, rng_shared, rng_local):
    k = int(round(density * dim))
    if pattern == "identical":
        idx = rng_shared.choice(dim, k, replace=False)
        assert all(np.array_equal(idx, o) for o in comm.allgather(idx)), "not identical"
    elif pattern == "disjoint":
        # rank r owns positions r, r+P, ...: k per rank where possible
        mine = np.arange(rank, dim, P)
        idx = rng_local.choice(mine, min(k, mine.size), replace=False)
    else:
        idx = rng_local.choice(dim, k, replace=False)
    idx = np.unique(idx)
    if density > 0 and pattern != "disjoint":
        # index 0 on rank 0 and N-1 on the last rank, whatever the draw
        if rank == 0:
            idx = np.union1d(idx, [0])
        if rank == P - 1:
            idx = np.union1d(idx, [dim - 1])
    return idx


def check(vec, algorithm, integer_values, label):
    global cases
    dense_inputs = comm.allgather(vec.to_dense())
    expected = np.zeros(vec.dim, np.float64)
    for x in dense_inputs:
        expected += x
    supports_all = comm.allgather(None if vec.is_dense else vec.indices)
    stats = sparcml.TrafficStats()
    result = sparcml.allreduce(vec, algorithm=algorithm, stats=stats)
    tag = f"[{label} {algorithm} P={P} rank={rank}]"
    assert result.dim == vec.dim and result.dtype == vec.dtype, tag
    got = result.to_dense()
    if integer_values:
        assert np.array_equal(got, expected.astype(vec.dtype)), tag
    else:
        tol = 1e-5 if vec.dtype == np.float32 else 1e-12
        assert np.allclose(got, expected, rtol=tol, atol=tol * P), tag
    # the same result, bit for bit and in the same representation, on every rank
    mine = (result.is_dense, got.tobytes())
    assert all(r == mine for r in comm.allgather(mine)), f"{tag} ranks differ"
    if algorithm in RULE_ALGORITHMS and all(s is not None for s in supports_all):
        support = np.unique(np.concatenate(supports_all)).size
        want = should_be_dense(support, vec.dim, result.index_dtype, vec.dtype)
        assert result.is_dense == want, f"{tag} support {support}: dense={result.is_dense}"
        if not result.is_dense:
            assert result.indices.dtype == vector_module.index_dtype_for(vec.dim), tag
    elif algorithm in ("dense", "dsar_split_allgather"):
        assert result.is_dense, tag
    assert not np.shares_memory(result.values, vec.values), tag
    # into a caller's buffer (out=, full of NaN beforehand): every entry written, the same bits
    buffer = np.full(vec.dim, np.nan, vec.dtype)
    into = sparcml.allreduce(vec, algorithm=algorithm, out=buffer)
    assert into.is_dense and into.values is buffer, f"{tag} out="
    assert buffer.tobytes() == got.tobytes(), f"{tag} out= differs"
    cases += 1


def matrix(dim, value_dtypes, index_dtypes, densities, patterns, algorithms, label):
    for density in densities:
        for pattern in patterns:
            for val_dt in value_dtypes:
                for idx_dt in index_dtypes:
                    for integer_values in (True, False):
                        seed = zlib.crc32(repr((dim, density, pattern, str(val_dt), integer_values)).encode())
                        rng_shared = np.random.default_rng(seed)
                        rng_local = np.random.default_rng(seed + 1 + rank)
                        idx = supports(pattern, density, dim, rng_shared, rng_local)
                        if integer_values:
                            val = rng_local.integers(1, 9, idx.size).astype(val_dt)
                        else:
                            val = rng_local.uniform(0.5, 2.0, idx.size).astype(val_dt)
                        vec = SparseVector(dim, idx.astype(idx_dt), val)
                        for algorithm in algorithms:
                            check(vec, algorithm, integer_values,
                                  f"{label} d={density} {pattern} {np.dtype(val_dt).name} "
                                  f"{np.dtype(idx_dt).name} int={integer_values}")


ALL = sparcml.ALGORITHMS
SMALL = os.environ.get("SPARC_MATRIX") == "small"
DENSITIES = (0.0, 1e-2, 0.3, 1.0) if SMALL else (0.0, 1e-4, 1e-2, 0.3, 0.9, 1.0)
PATTERNS = ("random", "identical", "disjoint")
dim = 20011 + P  # not a multiple of P (20011 is prime); 1e-4 gives ~2 items per rank
if SMALL:
    matrix(dim, (np.float32,), (np.int64,), DENSITIES, PATTERNS, ALL, "int32")
else:
    matrix(dim, (np.float32, np.float64), (np.int32, np.int64), DENSITIES, PATTERNS, ALL,
           "int32")

# some ranks empty, others not; then all empty
for algorithm in ALL:
    idx = np.array([0, dim - 1]) if rank % 2 == 1 else np.array([], np.int64)
    check(SparseVector(dim, idx, np.ones(idx.size, np.float32)), algorithm, True, "some-empty")
    check(SparseVector.zeros(dim, np.float64), algorithm, True, "all-empty")
    # dense-backed inputs, on some ranks only
    x = np.zeros(dim, np.float32)
    x[rank::P + 1] = rank + 1
    vec = SparseVector.dense(x) if rank % 2 == 0 else SparseVector.from_dense(x)
    check(vec, algorithm, True, "dense-backed")

# the threshold itself: result support exactly at the rule, and one below
for support in (dim // 2 + 1, dim // 2):  # int32 + float32: dense iff 2 * support >= dim
    mine = np.arange(support)[rank::P]
    for algorithm in RULE_ALGORITHMS:
        check(SparseVector(dim, mine, np.ones(mine.size, np.float32)), algorithm, True,
              f"threshold {support}")

# int64 stored indices through every algorithm: lower the int32 limit for a small dim
vector_module._INT32_LIMIT = 1000
matrix(3001, (np.float32,), (np.int64,), (0.0, 0.3) if SMALL else (0.0, 1e-2, 0.3, 1.0),
       PATTERNS, ALL, "int64-stored")
vector_module._INT32_LIMIT = 2**31

# a real dim above 2**31 for the algorithms whose memory follows nnz, not dim
big = 2**31 + 7 * P + 3
rng = np.random.default_rng(rank)
idx = np.unique(np.r_[rng.integers(0, big, 500), [0, big - 1]])
vec = SparseVector(big, idx, np.ones(idx.size))
for algorithm in RULE_ALGORITHMS:
    result = sparcml.allreduce(vec, algorithm=algorithm)
    every = np.unique(np.concatenate(comm.allgather(idx)))
    counts = np.zeros(every.size)
    for other in comm.allgather(idx):
        counts[np.searchsorted(every, other)] += 1
    assert result.indices.dtype == np.int64 and np.array_equal(result.indices, every), algorithm
    assert np.array_equal(result.values, counts), algorithm
    cases += 1

comm.Barrier()
if rank == 0:
    print(f"CASES {cases} OK", flush=True)
sys.exit(0)
