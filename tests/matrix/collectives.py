"""iallreduce, allgather, reduce_scatter, bcast, auto and quantized messages against their
definitions, on any P (profile ``full``)."""

import zlib

import numpy as np
from mpi4py import MPI

import sparcml
import sparcml._model.tuning as tuning
from sparcml import SparseVector

from . import Case

QUANTIZED = ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather",
             "allgather", "auto")


def inputs(comm, dim, density, dtype, seed):
    rank, P = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng([seed, rank])
    idx = np.flatnonzero(rng.random(dim) < density)
    if rank == P - 1 and density > 0:
        idx = np.union1d(idx, [0, dim - 1])
    return SparseVector(dim, idx, rng.integers(1, 9, idx.size).astype(dtype))


def same_bits(vec):
    return vec.is_dense, vec.to_dense().tobytes()


def gather_scatter_bcast(comm, check, dim, density, dtype):
    """allgather: every rank's vector in rank order; reduce_scatter: my block of the sum in
    global indices; bcast from every root: the root's vector on every rank."""
    rank, P = comm.Get_rank(), comm.Get_size()
    seed = zlib.crc32(repr((dim, density, str(np.dtype(dtype)))).encode())
    vec = inputs(comm, dim, density, dtype, seed)
    dense_all = comm.allgather(vec.to_dense())
    total = np.sum(dense_all, axis=0, dtype=np.float64).astype(dtype)
    gathered = sparcml.allgather(vec, comm)
    check(len(gathered) == P, f"allgather: {len(gathered)} vectors")
    for r, g in enumerate(gathered):
        check(g.dim == dim and g.dtype == dtype and np.array_equal(g.to_dense(), dense_all[r]),
              f"allgather: rank {r}'s vector")
    bounds = sparcml.block_bounds(dim, P)
    mine = sparcml.reduce_scatter(vec, comm)
    want = np.zeros(dim, dtype)
    want[bounds[rank]:bounds[rank + 1]] = total[bounds[rank]:bounds[rank + 1]]
    check(not mine.is_dense and mine.dim == dim, "reduce_scatter: representation")
    check(np.array_equal(mine.to_dense(), want), "reduce_scatter: not my block of the sum")
    for root in range(P):
        got = sparcml.bcast(vec if rank == root else None, root, comm)
        check(np.array_equal(got.to_dense(), dense_all[root]), f"bcast from {root}")
        check.same(same_bits(got), f"bcast from {root}")


def iallreduce_mixed(comm, check):
    """Several outstanding, mixed algorithms, blocking calls meanwhile, waited out of order:
    the blocking call's result."""
    vecs, algorithms = [], []
    for i in range(12):
        density = (0.001, 0.05, 0.6)[i % 3]
        vecs.append(inputs(comm, 3001 + i, density, np.float32 if i % 2 else np.float64, i))
        algorithms.append(sparcml.ALGORITHMS[i % len(sparcml.ALGORITHMS)])
    requests = [sparcml.iallreduce(v, comm, algorithm=a) for v, a in zip(vecs, algorithms)]
    # blocking calls on the same communicator meanwhile: they use their own duplicate
    blocking = [sparcml.allreduce(v, comm, algorithm=a) for v, a in zip(vecs, algorithms)]
    for i, (req, want) in enumerate(zip(reversed(requests), reversed(blocking))):
        got = req.wait(timeout=120)
        check(req.test(), f"request {i} not complete after wait")
        check(got.is_dense == want.is_dense and np.array_equal(got.to_dense(), want.to_dense()),
              f"request {i}: not the blocking call's result")


def iallreduce_error(comm, check):
    """An error inside a non-blocking call comes back from wait() on every rank."""
    P = comm.Get_size()
    bad = sparcml.iallreduce(SparseVector(10 + (comm.Get_rank() == P - 1), [1], np.ones(1)),
                             comm)
    try:
        bad.wait(timeout=60)
    except sparcml.RankMismatchError as exc:
        check(P > 1 and "dim (rank 0: 10" in str(exc), f"unexpected error: {exc}")
    else:
        check(P == 1, "no RankMismatchError from wait()")


def calibrate_and_auto(comm, check):
    """calibrate: the same model on every rank; auto: the same choice everywhere, the sum."""
    model = sparcml.calibrate(comm)
    check.same(model.to_dict(), "calibrated model")
    for density in (0.0, 1e-3, 0.05, 0.7):
        vec = inputs(comm, 20_000, density, np.float32, 99)
        want = np.sum(comm.allgather(vec.to_dense()), axis=0)
        stats = sparcml.TrafficStats()
        for nonblocking in (False, True):
            if nonblocking:
                got = sparcml.iallreduce(vec, comm, algorithm="auto", stats=stats).wait(
                    timeout=120)
            else:
                got = sparcml.allreduce(vec, comm, algorithm="auto", stats=stats)
            check(stats.algorithm in sparcml.ALGORITHMS, f"auto chose {stats.algorithm}")
            check.same(stats.algorithm, f"auto's choice d={density}")
            check(np.array_equal(got.to_dense(), want), f"auto d={density} nb={nonblocking}")


def auto_tuning(comm, check, density):
    """auto's measured refinement (sparcml._model.tuning): the calls of a shape after its first
    try the near-ties one by one, then keep one; every call agrees and sums right."""
    vec = inputs(comm, 50_000, density, np.float32, 7)
    want = np.sum(comm.allgather(vec.to_dense()), axis=0)
    ran = []
    for call in range(tuning.EXPLORING_CALLS + 3):
        stats = sparcml.TrafficStats()
        got = sparcml.allreduce(vec, comm, algorithm="auto", stats=stats)
        check.same(stats.algorithm, f"call {call}: auto's choice")
        check(np.array_equal(got.to_dense(), want), f"call {call}: not the sum")
        ran.append(stats.algorithm)
    check(len(set(ran[-3:])) == 1, f"auto did not settle: {ran}")


def quantized(comm, check, algorithm):
    """Quantized messages: the same result on every rank, within the quantization error of
    the exact sum, fewer bytes where dense messages are quantized, and the same bits into
    ``out=`` with the same random stream."""
    rank, P = comm.Get_rank(), comm.Get_size()
    for density in (0.002, 0.1, 0.7):
        for quantize_sparse in (False, True):
            for bits in (2, 4, 8):
                vec = inputs(comm, 30_011, density, np.float32, 7)
                exact_stats, q_stats = sparcml.TrafficStats(), sparcml.TrafficStats()
                exact = sparcml.allreduce(vec, comm, algorithm=algorithm,
                                          stats=exact_stats).to_dense()
                got = sparcml.allreduce(vec, comm, algorithm=algorithm, stats=q_stats,
                                        quantizer=sparcml.QSGD(bits=bits, seed=rank),
                                        quantize_sparse=quantize_sparse)
                label = f"d={density} quantize_sparse={quantize_sparse} bits={bits}"
                check.same(same_bits(got), label)
                # every value is rounded at most (log2 P + 2) times, each by less than one
                # level step of a bucket scale; scales are bounded by the partial sums, at most
                # P * max|input|, doubled for the rounding errors they may already carry
                steps = np.log2(max(P, 2)) + 2
                largest = comm.allreduce(float(np.abs(vec.values).max(initial=0)), op=MPI.MAX)
                tol = steps * 2 * P * largest / (2 ** (bits - 1) - 1)
                error = np.abs(got.to_dense() - exact).max()
                check(error <= tol, f"{label}: error {error} above {tol}")
                if algorithm == "dsar_split_allgather" and P > 1:  # its dense phase shrinks
                    check(q_stats.bytes_sent < exact_stats.bytes_sent,
                          f"{label}: {q_stats.bytes_sent} bytes, exact {exact_stats.bytes_sent}")
                # into out=, with the same random stream: the same bits (auto may choose
                # another algorithm the second time, having learnt the inputs' overlap: then
                # the same bounds, and the same result on every rank)
                buffer = np.full(vec.dim, np.nan, np.float32)
                sparcml.allreduce(vec, comm, algorithm=algorithm, quantizer=sparcml.QSGD(
                    bits=bits, seed=rank), quantize_sparse=quantize_sparse, out=buffer)
                if algorithm == "auto":
                    check(np.abs(buffer - exact).max() <= tol, f"{label} out=: error")
                    check.same(buffer.tobytes(), f"{label} out=")
                else:
                    check(buffer.tobytes() == got.to_dense().tobytes(), f"{label} out= differs")


def streaming_out(comm, check):
    """A dense phase large enough for the streaming decode (blocks of >= 4 MiB) into out=,
    blocking and non-blocking: the same bits as into a new result."""
    rank, P = comm.Get_rank(), comm.Get_size()
    big = inputs(comm, P * (1 << 20) + 5, 0.01, np.float32, 11)
    for nonblocking in (False, True):
        fresh = sparcml.allreduce(big, comm, algorithm="dsar_split_allgather",
                                  quantizer=sparcml.QSGD(bits=4, seed=rank))
        buffer = np.full(big.dim, np.nan, np.float32)
        options = {"algorithm": "dsar_split_allgather",
                   "quantizer": sparcml.QSGD(bits=4, seed=rank), "out": buffer}
        into = (sparcml.iallreduce(big, comm, **options).wait(timeout=120) if nonblocking
                else sparcml.allreduce(big, comm, **options))
        check(into.values is buffer and buffer.tobytes() == fresh.values.tobytes(),
              f"nonblocking={nonblocking}: not the same bits")
        check.same(zlib.crc32(buffer.tobytes()), f"nonblocking={nonblocking}")


def dense_refuses_quantizer(comm, check):
    try:
        sparcml.allreduce(inputs(comm, 100, 0.1, np.float32, 1), comm, algorithm="dense",
                          quantizer=sparcml.QSGD())
    except sparcml.IncompatibleOptionsError as exc:
        check("cannot add quantized values" in str(exc), f"message: {exc}")
    else:
        check(False, "dense with a quantizer raised nothing")


def cases(profile: str, P: int, simulated: bool = False) -> list[Case]:
    """The collectives' cases (one profile, ``full``; P changes no case)."""
    if profile != "full":
        raise ValueError(f"unknown profile {profile!r}")
    out = [Case(f"allgather, reduce_scatter, bcast N={dim} d={density} "
                f"{np.dtype(dtype).name}", gather_scatter_bcast,
                dict(dim=dim, density=density, dtype=dtype))
           for dim in (1, 997, 4096 + P) for density in (0.0, 0.003, 0.2, 0.8, 1.0)
           for dtype in (np.float32, np.float64)]
    out += [Case("iallreduce mixed", iallreduce_mixed),
            Case("iallreduce error", iallreduce_error),
            Case("calibrate and auto", calibrate_and_auto)]
    out += [Case(f"auto tuning d={d}", auto_tuning, dict(density=d)) for d in (1e-3, 0.05)]
    out += [Case(f"quantized {a}", quantized, dict(algorithm=a)) for a in QUANTIZED]
    out += [Case("streaming decode into out=", streaming_out),
            Case("dense refuses a quantizer", dense_refuses_quantizer)]
    return out
