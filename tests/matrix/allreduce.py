"""Every allreduce algorithm against the dense sum, over the acceptance matrix of the core issue.

Profiles: ``full`` (mpiexec at P <= 8 and the simulator at small P): densities 0 (all ranks
empty; some ranks empty), 1e-4, 1e-2, 0.3, 0.9 and 1; disjoint, identical and random
supports; int32 and int64 input indices, and int64 *stored* indices (the int32 limit lowered
for a case, then a real dim above 2**31); float32 and float64; a dim that is not a multiple of
P; indices 0 and N-1 always present on some rank. ``small`` (P = 16 and more): float32 values,
int64 input indices, four densities. ``large`` (P = 64 to 256, simulated): up to three
cells. ``log-p`` (P ~ 1000, simulated): recursive doubling and dense, whose messages and
local work grow like log P (the split ones send P (P - 1) messages, and ``allgather`` decodes
P parts on every rank, a million decodes: minutes of simulation at P = 1000 (allgather alone
took 100 s); they run at P = 256 in ``large`` and at P = 1000 in ``sparc-bench --simulate 1000
--verify``, BENCHMARKS.md).

Checks: exact equality with the dense sum for integer values (allclose for random floats),
the same result on every rank, the switch rule (sparse algorithms return a dense-backed result
exactly when the result's support crosses the rule), and the same bits written into a
caller's ``out=`` buffer.
"""

import zlib

import numpy as np

import sparcml
import sparcml._vector as vector_module
from sparcml import SparseVector, should_be_dense

from . import Case

RULE_ALGORITHMS = ("ssar_recursive_double", "ssar_split_allgather", "allgather")
LOG_P_ALGORITHMS = ("ssar_recursive_double", "dense")
PATTERNS = ("random", "identical", "disjoint")


def supports(comm, pattern, density, dim, rng_shared, rng_local):
    rank, P = comm.Get_rank(), comm.Get_size()
    k = int(round(density * dim))
    if pattern == "identical":
        idx = rng_shared.choice(dim, k, replace=False)
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


def make_input(comm, dim, density, pattern, val_dt, idx_dt, integer_values):
    """This rank's input of one matrix cell (deterministic in the cell, the rank and P)."""
    seed = zlib.crc32(repr((dim, density, pattern, str(np.dtype(val_dt)),
                            integer_values)).encode())
    rng_shared = np.random.default_rng(seed)
    rng_local = np.random.default_rng(seed + 1 + comm.Get_rank())
    idx = supports(comm, pattern, density, dim, rng_shared, rng_local)
    if integer_values:
        val = rng_local.integers(1, 9, idx.size).astype(val_dt)
    else:
        val = rng_local.uniform(0.5, 2.0, idx.size).astype(val_dt)
    return SparseVector(dim, idx.astype(idx_dt), val)


def check_allreduce(comm, check, vec, algorithm, integer_values, label):
    """One call of ``algorithm`` on ``vec`` against the dense sum of every rank's input."""
    P = comm.Get_size()
    dense_inputs = comm.allgather(vec.to_dense())
    expected = np.zeros(vec.dim, np.float64)
    for x in dense_inputs:
        expected += x
    supports_all = comm.allgather(None if vec.is_dense else vec.indices)
    result = sparcml.allreduce(vec, comm, algorithm=algorithm, stats=sparcml.TrafficStats())
    tag = f"[{label} {algorithm}]"
    check(result.dim == vec.dim and result.dtype == vec.dtype, f"{tag} dim or dtype")
    got = result.to_dense()
    if integer_values:
        check(np.array_equal(got, expected.astype(vec.dtype)), f"{tag} not the dense sum")
    else:
        tol = 1e-5 if vec.dtype == np.float32 else 1e-12
        check(np.allclose(got, expected, rtol=tol, atol=tol * P), f"{tag} not the dense sum")
    # the same result, bit for bit and in the same representation, on every rank
    check.same((result.is_dense, got.tobytes()), tag)
    if algorithm in RULE_ALGORITHMS and all(s is not None for s in supports_all):
        support = np.unique(np.concatenate(supports_all)).size
        want = should_be_dense(support, vec.dim, result.index_dtype, vec.dtype)
        check(result.is_dense == want, f"{tag} support {support}: dense={result.is_dense}")
        if not result.is_dense:
            check(result.indices.dtype == vector_module.index_dtype_for(vec.dim),
                  f"{tag} stored index dtype {result.indices.dtype}")
    elif algorithm in ("dense", "dsar_split_allgather"):
        check(result.is_dense, f"{tag} not dense-backed")
    check(not np.shares_memory(result.values, vec.values), f"{tag} shares the input")
    # into a caller's buffer (out=, full of NaN beforehand): every entry written, the same bits
    buffer = np.full(vec.dim, np.nan, vec.dtype)
    into = sparcml.allreduce(vec, comm, algorithm=algorithm, out=buffer)
    check(into.is_dense and into.values is buffer, f"{tag} out= not used")
    check(buffer.tobytes() == got.tobytes(), f"{tag} out= differs")


def cell(comm, check, dim, density, pattern, val_dt, idx_dt, integer_values, algorithms):
    """One cell of the matrix through ``algorithms``; ``dim`` < 0 means 20011 + P (prime + P:
    not a multiple of P)."""
    dim = dim if dim > 0 else 20011 + comm.Get_size()
    vec = make_input(comm, dim, density, pattern, val_dt, idx_dt, integer_values)
    label = f"d={density} {pattern} {np.dtype(val_dt).name} {np.dtype(idx_dt).name} " \
            f"int={integer_values}"
    for algorithm in algorithms:
        check_allreduce(comm, check, vec, algorithm, integer_values, label)


def some_empty(comm, check, algorithms):
    """Some ranks empty, others not; then all empty; dense-backed inputs on some ranks."""
    rank, P = comm.Get_rank(), comm.Get_size()
    dim = 20011 + P
    for algorithm in algorithms:
        idx = np.array([0, dim - 1]) if rank % 2 == 1 else np.array([], np.int64)
        check_allreduce(comm, check, SparseVector(dim, idx, np.ones(idx.size, np.float32)),
                        algorithm, True, "some-empty")
        check_allreduce(comm, check, SparseVector.zeros(dim, np.float64), algorithm, True,
                        "all-empty")
        x = np.zeros(dim, np.float32)
        x[rank::P + 1] = rank + 1
        vec = SparseVector.dense(x) if rank % 2 == 0 else SparseVector.from_dense(x)
        check_allreduce(comm, check, vec, algorithm, True, "dense-backed")


def threshold(comm, check):
    """The result support exactly at the switch rule, and one below (int32 + float32: dense
    iff 2 * support >= dim)."""
    rank, P = comm.Get_rank(), comm.Get_size()
    dim = 20011 + P
    for support in (dim // 2 + 1, dim // 2):
        mine = np.arange(support)[rank::P]
        for algorithm in RULE_ALGORITHMS:
            check_allreduce(comm, check, SparseVector(dim, mine, np.ones(mine.size, np.float32)),
                            algorithm, True, f"threshold {support}")


def int64_stored(comm, check, density, algorithms):
    """int64 stored indices through every algorithm: the int32 limit lowered for a small dim.
    The limit is process-wide (every simulated rank shares it): set by every rank between
    barriers, so that no rank is inside another case meanwhile."""
    before = vector_module._INT32_LIMIT
    comm.Barrier()  # every rank has read it before any rank changes it
    vector_module._INT32_LIMIT = 1000
    comm.Barrier()
    try:
        for pattern in PATTERNS:
            for integer_values in (True, False):
                vec = make_input(comm, 3001, density, pattern, np.float32, np.int64,
                                 integer_values)
                for algorithm in algorithms:
                    check_allreduce(comm, check, vec, algorithm, integer_values,
                                    f"int64-stored d={density} {pattern} int={integer_values}")
    finally:
        comm.Barrier()
        vector_module._INT32_LIMIT = before


def above_2_31(comm, check):
    """A real dim above 2**31 for the algorithms whose memory follows nnz, not dim."""
    rank, P = comm.Get_rank(), comm.Get_size()
    big = 2**31 + 7 * P + 3
    rng = np.random.default_rng(rank)
    idx = np.unique(np.r_[rng.integers(0, big, 500), [0, big - 1]])
    vec = SparseVector(big, idx, np.ones(idx.size))
    everyone = comm.allgather(idx)
    every = np.unique(np.concatenate(everyone))
    counts = np.zeros(every.size)
    for other in everyone:
        counts[np.searchsorted(every, other)] += 1
    for algorithm in RULE_ALGORITHMS:
        result = sparcml.allreduce(vec, comm, algorithm=algorithm)
        check(result.indices.dtype == np.int64 and np.array_equal(result.indices, every),
              f"{algorithm}: indices above 2**31")
        check(np.array_equal(result.values, counts), f"{algorithm}: values above 2**31")


SPLIT_ALGORITHMS = ("ssar_split_allgather", "dsar_split_allgather")
NEVER = 2**31 - 1  # Options.native_min_ranks that keeps the point-to-point path at any P


def _paths(**extra):
    """``(native, point-to-point)`` options: MPI's vector collectives forced, and never."""
    return (sparcml.Options(native_min_ranks=1, **extra),
            sparcml.Options(native_min_ranks=NEVER, **extra))


def both_paths(comm, check, density, pattern, quantized):
    """Every algorithm (and ``reduce_scatter``) through MPI's vector collectives and through
    point-to-point messages (``Options.native_min_ranks`` forced either way, equal blocks so
    that both calls cut the same): the same bits, equal to the dense sum, and the same bytes
    but the collective path's size exchange, 4 bytes to each peer."""
    P = comm.Get_size()
    vec = make_input(comm, 20011 + P, density, pattern, np.float32, np.int64, True)
    total = np.sum(comm.allgather(vec.to_dense()), axis=0)
    native, p2p = _paths(partitions="equal")
    label = f"[d={density} {pattern} quantized={quantized}"
    for algorithm in sparcml.ALGORITHMS:
        if quantized and algorithm == sparcml.DENSE_BASELINE:
            continue
        got = []
        for opts in (native, p2p):
            stats = sparcml.TrafficStats()
            q = sparcml.QSGD(4, seed=7) if quantized else None
            res = sparcml.allreduce(vec, comm, algorithm=algorithm, quantizer=q, stats=stats,
                                    options=opts)
            got.append((res.is_dense, res.to_dense().tobytes(), stats))
        tag = f"{label} {algorithm}]"
        check(got[0][:2] == got[1][:2], f"{tag} the two paths differ")
        if not quantized:
            check(got[0][1] == total.tobytes(), f"{tag} not the dense sum")
        a, b = got[0][2], got[1][2]
        extra = 4 * (P - 1) if algorithm in SPLIT_ALGORITHMS and P > 1 else 0
        check(a.bytes_sent == b.bytes_sent + extra and a.messages == b.messages
              and a.dense_messages == b.dense_messages,
              f"{tag} bytes {a.bytes_sent} vs {b.bytes_sent} + {extra}, messages "
              f"{a.messages}/{a.dense_messages} vs {b.messages}/{b.dense_messages}")
        check(a.bytes_received == b.bytes_received + extra,
              f"{tag} received {a.bytes_received} vs {b.bytes_received} + {extra}")
    blocks = [sparcml.reduce_scatter(vec, comm, options=opts) for opts in (native, p2p)]
    check(blocks[0].to_dense().tobytes() == blocks[1].to_dense().tobytes(),
          f"{label} reduce_scatter] the two paths differ")
    lo, hi = (int(x) for x in sparcml.block_bounds(vec.dim, P)[comm.Get_rank():][:2])
    want = np.zeros_like(total)
    want[lo:hi] = total[lo:hi]
    check(blocks[0].to_dense().tobytes() == want.tobytes(), f"{label} reduce_scatter] block")


def node_reduce_paths(comm, check, ranks_per_node):
    """The node-aware reduce through ``Gather`` + ``Gatherv`` and through messages to the
    leader (nodes of ``ranks_per_node`` ranks forced, no shared-memory window): the same
    bits; a non-leader's node bytes differ by the size it gathers (4 bytes)."""
    rank = comm.Get_rank()
    P = comm.Get_size()
    vec = make_input(comm, 20011 + P, 0.01, "random", np.float32, np.int64, True)
    total = np.sum(comm.allgather(vec.to_dense()), axis=0)
    native, p2p = _paths(ranks_per_node=ranks_per_node, node_shm=False, partitions="equal")
    for algorithm in ("ssar_recursive_double", "ssar_split_allgather",
                      "dsar_split_allgather"):
        got = []
        for opts in (native, p2p):
            stats = sparcml.TrafficStats()
            res = sparcml.allreduce(vec, comm, algorithm=algorithm, hierarchical=True,
                                    stats=stats, options=opts)
            got.append((res.to_dense().tobytes(), stats))
        tag = f"[nodes of {ranks_per_node} {algorithm}]"
        check(got[0][0] == got[1][0] == total.tobytes(), f"{tag} not the dense sum")
        extra = 4 if rank % ranks_per_node else 0  # a non-leader: its node has 2 ranks or more
        check(got[0][1].intra_node_bytes == got[1][1].intra_node_bytes + extra,
              f"{tag} node bytes {got[0][1].intra_node_bytes} vs "
              f"{got[1][1].intra_node_bytes} + {extra}")


def _cells(densities, val_dts, idx_dts, patterns, algorithms, dim=-1, integers=(True, False)):
    out = []
    for density in densities:
        for pattern in patterns:
            for val_dt in val_dts:
                for idx_dt in idx_dts:
                    for integer_values in integers:
                        size = "" if dim < 0 else f" N={dim}"
                        name = (f"cell{size} d={density} {pattern} {np.dtype(val_dt).name} "
                                f"{np.dtype(idx_dt).name} int={integer_values}")
                        out.append(Case(name, cell, dict(
                            dim=dim, density=density, pattern=pattern, val_dt=val_dt,
                            idx_dt=idx_dt, integer_values=integer_values,
                            algorithms=algorithms)))
    return out


def cases(profile: str, P: int, simulated: bool = False) -> list[Case]:
    """The allreduce cases of ``profile`` at P ranks: ``full`` (P <= 8), ``native`` (any P:
    MPI's vector collectives against point-to-point messages), ``small`` (P = 16),
    ``large`` (P = 64: one cell per pattern; above: the random one), ``log-p`` (P ~ 1000:
    one cell through the algorithms of log P messages at even P, recursive doubling's fold on
    identical supports at odd P)."""
    every = tuple(sparcml.ALGORITHMS)
    if profile == "native":  # MPI's vector collectives against point-to-point, at any P
        out = [Case(f"both paths d={d} {pattern} quantized={q}", both_paths,
                    dict(density=d, pattern=pattern, quantized=q))
               for d, pattern, q in ((0.01, "random", False), (0.3, "identical", False),
                                     (0.6, "disjoint", False), (0.3, "random", True))]
        out += [Case(f"node reduce paths R={r}", node_reduce_paths, dict(ranks_per_node=r))
                for r in (2, 3)]
        return out
    if profile == "log-p":
        if P % 2 == 0:
            return _cells((0.002,), (np.float32,), (np.int64,), ("random",), LOG_P_ALGORITHMS,
                          dim=2003, integers=(True,))
        return _cells((0.3,), (np.float32,), (np.int64,), ("identical",),
                      ("ssar_recursive_double",), dim=2003, integers=(True,))
    if profile == "large":
        out = _cells((0.002,), (np.float32,), (np.int64,), ("random",), every, dim=4001,
                     integers=(True,))
        if P <= 64:
            out += _cells((0.05,), (np.float32,), (np.int64,), ("identical",), every,
                          dim=4001, integers=(True,))
            out += _cells((0.6,), (np.float32,), (np.int64,), ("disjoint",), every, dim=4001,
                          integers=(True,))
        return out
    if profile == "small":
        out = _cells((0.0, 1e-2, 0.3, 1.0), (np.float32,), (np.int64,), PATTERNS, every)
        stored = (0.0, 0.3)
    elif profile == "full":
        out = _cells((0.0, 1e-4, 1e-2, 0.3, 0.9, 1.0), (np.float32, np.float64),
                     (np.int32, np.int64), PATTERNS, every)
        stored = (0.0, 1e-2, 0.3, 1.0)
    else:
        raise ValueError(f"unknown profile {profile!r}")
    out.append(Case("some empty, all empty, dense-backed", some_empty,
                    dict(algorithms=every)))
    out.append(Case("threshold", threshold))
    out += [Case(f"int64-stored d={d}", int64_stored, dict(density=d, algorithms=every))
            for d in stored]
    out.append(Case("dim above 2**31", above_2_31))
    return out
