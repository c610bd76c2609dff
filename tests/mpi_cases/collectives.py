"""iallreduce, allgather, reduce_scatter and bcast against their definitions, on any P.

Run with ``python -m mpi4py``; rank 0 prints ``COLLECTIVES <n> OK``.
"""

import sys
import zlib

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import SparseVector

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
cases = 0


def inputs(dim, density, dtype, seed):
    rng = np.random.default_rng([seed, rank])
    idx = np.flatnonzero(rng.random(dim) < density)
    if rank == P - 1 and density > 0:
        idx = np.union1d(idx, [0, dim - 1])
    return SparseVector(dim, idx, rng.integers(1, 9, idx.size).astype(dtype))


def same_everywhere(vec):
    mine = (vec.is_dense, vec.to_dense().tobytes())
    return all(x == mine for x in comm.allgather(mine))


for dim in (1, 997, 4096 + P):
    for density in (0.0, 0.003, 0.2, 0.8, 1.0):
        for dtype in (np.float32, np.float64):
            seed = zlib.crc32(repr((dim, density, str(dtype))).encode())
            vec = inputs(dim, density, dtype, seed)
            dense_all = comm.allgather(vec.to_dense())
            total = np.sum(dense_all, axis=0, dtype=np.float64).astype(dtype)

            # allgather: every rank's vector, in rank order, equal on every rank
            gathered = sparcml.allgather(vec)
            assert len(gathered) == P
            for r, g in enumerate(gathered):
                assert g.dim == dim and g.dtype == dtype
                assert np.array_equal(g.to_dense(), dense_all[r]), ("allgather", r)

            # reduce_scatter: my block of the sum, global indices, nothing outside the block
            bounds = sparcml.block_bounds(dim, P)
            mine = sparcml.reduce_scatter(vec)
            want = np.zeros(dim, dtype)
            want[bounds[rank]:bounds[rank + 1]] = total[bounds[rank]:bounds[rank + 1]]
            assert not mine.is_dense and mine.dim == dim
            assert np.array_equal(mine.to_dense(), want), "reduce_scatter"

            # bcast from every root
            for root in range(P):
                got = sparcml.bcast(vec if rank == root else None, root=root)
                assert np.array_equal(got.to_dense(), dense_all[root]), ("bcast", root)
                assert same_everywhere(got)
            cases += 3

# iallreduce: several outstanding, mixed algorithms, results equal to the blocking call
rng = np.random.default_rng(rank)
vecs, algorithms = [], []
for i in range(12):
    dim = 3001 + i
    density = (0.001, 0.05, 0.6)[i % 3]
    vecs.append(inputs(dim, density, np.float32 if i % 2 else np.float64, i))
    algorithms.append(sparcml.ALGORITHMS[i % len(sparcml.ALGORITHMS)])
requests = [sparcml.iallreduce(v, algorithm=a) for v, a in zip(vecs, algorithms)]
# blocking calls on the same communicator meanwhile: they use their own duplicate
blocking = [sparcml.allreduce(v, algorithm=a) for v, a in zip(vecs, algorithms)]
for req, want in zip(reversed(requests), reversed(blocking)):  # waiting out of order is fine
    got = req.wait(timeout=120)
    assert req.test()
    assert got.is_dense == want.is_dense and np.array_equal(got.to_dense(), want.to_dense())
    cases += 1

# an error inside a non-blocking call comes back from wait() on every rank
bad = sparcml.iallreduce(SparseVector(10 + (rank == P - 1), [1], np.ones(1)))
try:
    bad.wait(timeout=60)
except sparcml.RankMismatchError as exc:
    outcome = "dim (rank 0: 10" in str(exc) if P > 1 else False
else:
    outcome = P == 1
assert all(comm.allgather(outcome)), "iallreduce error not raised everywhere"
cases += 1

# calibrate: the same model on every rank; auto: the same choice everywhere, the right sum
model = sparcml.calibrate(comm)
assert all(m == model.to_dict() for m in comm.allgather(model.to_dict()))
for density in (0.0, 1e-3, 0.05, 0.7):
    vec = inputs(20_000, density, np.float32, 99)
    stats = sparcml.TrafficStats()
    for nonblocking in (False, True):
        if nonblocking:
            got = sparcml.iallreduce(vec, algorithm="auto", stats=stats).wait(timeout=120)
        else:
            got = sparcml.allreduce(vec, algorithm="auto", stats=stats)
        assert stats.algorithm in sparcml.ALGORITHMS
        assert len(set(comm.allgather(stats.algorithm))) == 1, "auto chose differently"
        want = np.sum(comm.allgather(vec.to_dense()), axis=0)
        assert np.array_equal(got.to_dense(), want), ("auto", density)
        cases += 1

# auto's measured refinement (sparcml._model.tuning): the calls of a shape after its first try the
# near-ties one by one, then keep one; every call agrees across ranks and sums right
for density in (1e-3, 0.05):
    vec = inputs(50_000, density, np.float32, 7)
    want = np.sum(comm.allgather(vec.to_dense()), axis=0)
    ran = []
    for _ in range(sparcml._model.tuning.EXPLORING_CALLS + 3):
        stats = sparcml.TrafficStats()
        got = sparcml.allreduce(vec, algorithm="auto", stats=stats)
        assert len(set(comm.allgather(stats.algorithm))) == 1, "auto chose differently"
        assert np.array_equal(got.to_dense(), want), ("auto tuning", density)
        ran.append(stats.algorithm)
        cases += 1
    assert len(set(ran[-3:])) == 1, f"auto did not settle: {ran}"

# quantized messages: the same result on every rank, within the quantization error of the
# exact sum, and fewer bytes whenever dense messages are quantized
for algorithm in ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather",
                  "allgather", "auto"):
    for density in (0.002, 0.1, 0.7):
        for quantize_sparse in (False, True):
            for bits in (2, 4, 8):
                vec = inputs(30_011, density, np.float32, 7)
                exact_stats, q_stats = sparcml.TrafficStats(), sparcml.TrafficStats()
                exact = sparcml.allreduce(vec, algorithm=algorithm, stats=exact_stats).to_dense()
                got = sparcml.allreduce(vec, algorithm=algorithm, stats=q_stats,
                                        quantizer=sparcml.QSGD(bits=bits, seed=rank),
                                        quantize_sparse=quantize_sparse)
                label = (algorithm, density, quantize_sparse, bits)
                assert same_everywhere(got), label
                # every value is rounded at most (log2 P + 2) times, each by less than one level
                # step of a bucket scale; scales are bounded by the partial sums, at most
                # P * max|input|, doubled for the rounding errors they may already carry
                steps = np.log2(max(P, 2)) + 2
                largest = comm.allreduce(float(np.abs(vec.values).max(initial=0)), op=MPI.MAX)
                tol = steps * 2 * P * largest / (2 ** (bits - 1) - 1)
                assert np.abs(got.to_dense() - exact).max() <= tol, (label, np.abs(got.to_dense() - exact).max(), tol)
                if algorithm == "dsar_split_allgather" and P > 1:  # its dense phase shrinks
                    assert q_stats.bytes_sent < exact_stats.bytes_sent, (label, q_stats)
                # into out=, with the same random stream: the same bits (auto may choose
                # another algorithm the second time, having learnt the inputs' overlap: then
                # the same bounds, and the same result on every rank)
                buffer = np.full(vec.dim, np.nan, np.float32)
                sparcml.allreduce(vec, algorithm=algorithm, quantizer=sparcml.QSGD(
                    bits=bits, seed=rank), quantize_sparse=quantize_sparse, out=buffer)
                if algorithm == "auto":
                    assert np.abs(buffer - exact).max() <= tol and same_everywhere(
                        sparcml.SparseVector.dense(buffer)), ("out=", label)
                else:
                    assert buffer.tobytes() == got.to_dense().tobytes(), ("out=", label)
                cases += 1

# a dense phase large enough for the streaming decode (blocks of >= 4 MiB) into out=, blocking
# and non-blocking: the same bits as into a new result
big = inputs(P * (1 << 20) + 5, 0.01, np.float32, 11)
for nonblocking in (False, True):
    fresh = sparcml.allreduce(big, algorithm="dsar_split_allgather",
                              quantizer=sparcml.QSGD(bits=4, seed=rank))
    buffer = np.full(big.dim, np.nan, np.float32)
    options = {"algorithm": "dsar_split_allgather", "quantizer": sparcml.QSGD(bits=4, seed=rank),
               "out": buffer}
    into = (sparcml.iallreduce(big, **options).wait(timeout=120) if nonblocking
            else sparcml.allreduce(big, **options))
    assert into.values is buffer and buffer.tobytes() == fresh.values.tobytes(), nonblocking
    assert len(set(comm.allgather(zlib.crc32(buffer.tobytes())))) == 1, "ranks differ"
    cases += 1
del big, fresh, buffer, into
try:
    sparcml.allreduce(inputs(100, 0.1, np.float32, 1), algorithm="dense",
                      quantizer=sparcml.QSGD())
except sparcml.IncompatibleOptionsError as exc:
    assert "cannot add quantized values" in str(exc)
    cases += 1

comm.Barrier()
if rank == 0:
    print(f"COLLECTIVES {cases} OK", flush=True)
sys.exit(0)
