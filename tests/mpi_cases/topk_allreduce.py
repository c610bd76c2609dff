"""topk_allreduce against the top-k of the dense sum, on any P.

Every rank computes the dense sum of all inputs itself (allgather) and its top-k (largest
|sum|, ties to the lower index, zeros never), and checks: the result equals it on every rank
(bitwise the same everywhere), and ``sum of inputs == result + sum of dropped``. Values are
small integers, so every sum is exact whatever the order of the additions. Run with
``python -m mpi4py``; rank 0 prints ``TOPK <n> OK``.
"""

import zlib

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import SparseVector

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
cases = 0


def reference(total, k):
    nz = np.flatnonzero(total)
    order = nz[np.lexsort((nz, -np.abs(total[nz])))]
    return np.sort(order[:k])


def same_everywhere(vec):
    mine = (vec.is_dense, None if vec.is_dense else vec.indices.tobytes(), vec.values.tobytes())
    return all(x == mine for x in comm.allgather(mine))


def check(vec, k, label, *, nonblocking=False):
    global cases
    dense_all = comm.allgather(vec.to_dense() if isinstance(vec, SparseVector) else vec)
    total = np.sum(dense_all, axis=0)
    stats = sparcml.TrafficStats()
    if nonblocking:
        result, dropped = sparcml.itopk_allreduce(vec, k, stats=stats).wait()
    else:
        result, dropped = sparcml.topk_allreduce(vec, k, stats=stats)
    expect = reference(total, k)
    assert not result.is_dense, label
    assert result.dtype == total.dtype and result.dim == total.size, label
    assert np.array_equal(result.indices, expect), (label, result.indices[:20], expect[:20])
    assert np.array_equal(result.values, total[expect]), label
    mine = (result.indices.tobytes(), result.values.tobytes())
    everyone = comm.allgather((mine, dropped.to_dense()))
    assert all(theirs == mine for theirs, _ in everyone), label  # bitwise the same everywhere
    dropped_sum = np.sum([d for _, d in everyone], axis=0)
    assert np.array_equal(result.to_dense() + dropped_sum, total), label
    own = vec if isinstance(vec, SparseVector) else SparseVector.from_dense(vec)
    assert dropped.is_dense == own.is_dense, label
    if not dropped.is_dense:  # this rank's own entries, without the selected indices
        keep = ~np.isin(own.indices, result.indices)
        assert np.array_equal(dropped.indices, own.indices[keep]), label
        assert np.array_equal(dropped.values, own.values[keep]), label
    assert stats.calls == 1 and stats.algorithm == "topk_allreduce", label
    cases += 1
    return stats


def random_input(dim, density, dtype, seed, high=64):
    rng = np.random.default_rng([seed, rank])
    idx = np.flatnonzero(rng.random(dim) < density)
    vals = rng.integers(-high, high + 1, idx.size).astype(dtype)
    return SparseVector(dim, idx, vals)


# random supports and magnitudes: several histogram rounds, ties between equal integers
for dim in (1, 997, 5000 + P) if P <= 5 else (997, 5000 + P):  # test time at P = 8
    for density in (0.01, 0.3):  # empty and all-zero inputs: below
        for dtype in (np.float32, np.float64) if P <= 5 else (np.float32,):  # time at P = 8
            seed = zlib.crc32(repr((dim, density, str(dtype))).encode())
            vec = random_input(dim, density, dtype, seed)
            union = len(np.unique(np.concatenate(comm.allgather(vec.indices))))
            for k in sorted({0, 7, max(1, union // 3), union, dim + 1}):
                check(vec, k, ("random", dim, density, str(dtype), k))

# every index at the same |sum|: the ties cross the partitions and go to the lower index
dim = 600
ones = np.ones(dim, np.float32) * np.where(np.arange(dim) % 3 == 0, -1, 1).astype(np.float32)
for k in (1, 10, dim // P + 3, dim // 2, dim - 1, dim):
    check(SparseVector(dim, np.arange(dim), ones), k, ("ties", k))
# ties only on some ranks' partitions, and above/below them distinct magnitudes
vals = np.where(np.arange(dim) % 7 == 0, 5.0, 2.0).astype(np.float64)
vals[dim - 3:] = 9.0
for k in (2, 3, 4, 40, 90, 200):
    check(SparseVector(dim, np.arange(dim), vals), k, ("ties-mixed", k))

# all-zero inputs (explicit zeros) and sums that cancel: never selected
zeros = SparseVector(100, np.arange(0, 100, 3), np.zeros(34, np.float32))
check(zeros, 5, "explicit zeros")
check(SparseVector(100, np.empty(0, np.int64), np.empty(0, np.float32)), 5, "empty")
sign = 1.0 if rank % 2 == 0 else -1.0
cancel_vals = np.full(50, sign, np.float32)  # odd P: sums are 1, even P: all cancel
check(SparseVector(100, np.arange(0, 100, 2), cancel_vals), 10, "cancelling")

# dense inputs: the reduce-scatter sends dense blocks; dropped stays dense
rng = np.random.default_rng([3, rank])
dense_in = rng.integers(-20, 21, 3000).astype(np.float32)
for k in (0, 30, 2999, 5000):
    check(dense_in, k, ("dense", k))

# bytes per rank are bounded independently of P: about (P-1)/P (k_local + k) entries
dim, k = 200_000, 2000
vec = random_input(dim, k / dim, np.float32, 11, high=1 << 20)
stats = check(vec, k, "volume")
entry = 8
hist_bytes = 3 * 2 * ((1 << 11) + 1) * 8 + 8  # at most 3 rounds of 2049 bins (float32)
bound = (P - 1) / P * (vec.nnz + k) * entry * 1.1 + hist_bytes + 64 * P
assert stats.bytes_sent <= bound, (stats.bytes_sent, bound)

# on one node the exchanges go through a shared-memory window (sparcml._topk.node_exchange) unless
# SPARCML_NODE_SHM=0: the same result bits, bytes and messages either way
import os  # noqa: E402

from sparcml._collectives.hierarchical import ENV_NODE_SHM, layout_for  # noqa: E402

if os.environ.get(ENV_NODE_SHM, "1") != "0":
    ways = {}
    for shm in ("0", "1"):
        os.environ[ENV_NODE_SHM] = shm
        stats = check(vec, k, ("window", shm))
        out = sparcml.topk_allreduce(vec, k)
        ways[shm] = (out.result.indices.tobytes(), out.result.values.tobytes(),
                     out.dropped.values.tobytes(), stats.bytes_sent, stats.bytes_received,
                     stats.messages)
    del os.environ[ENV_NODE_SHM]
    assert ways["0"] == ways["1"], (ways["0"][3:], ways["1"][3:])
    if P > 1:
        from sparcml._runtime.context import context_for  # noqa: E402
        window = layout_for(context_for(comm), 0).slots
        assert window is not None and window.win is not None, "the window was not used"

# later calls of a shape start from the threshold the last one found (one step fewer); a
# guess that misses (the magnitudes moved down) falls back to the exact path, still exact
from sparcml._runtime.context import context_for  # noqa: E402
from sparcml._model.costmodel import topk_sync_steps  # noqa: E402
from sparcml._topk.rule import memory_of  # noqa: E402

memory = memory_of(context_for(comm))  # what the blocking calls below count their steps in
steps = []
K_MEMO = 16384  # 2**11 bins a round: one round finds the threshold on these magnitudes
for label, scale in (("first", 1.0), ("remembered", 1.0), ("rescaled", 2.0 ** -12),
                     ("again", 2.0 ** -12)):
    base = random_input(100_000, 0.2, np.float32, 31, high=1 << 20)
    vec = SparseVector(base.dim, base.indices, base.values * np.float32(scale))
    check(vec, K_MEMO, ("memo", label))
    steps.append(memory.steps)
if P > 1:  # the model's count of synchronizing steps is the call's
    assert steps == [topk_sync_steps(False)] + [topk_sync_steps(True)] * 3, steps
# the same largest |x| (so the same bound), everything else 1024 times smaller: the guess
# just below the remembered threshold finds at most P sums, fewer than k
moved = random_input(100_000, 0.2, np.float32, 32, high=1 << 20)
moved_vals = moved.values / np.float32(1024)
moved_vals[0] = float(1 << 20)
moved = SparseVector(moved.dim, moved.indices, moved_vals)
check(moved, K_MEMO, ("memo", "missed"))
if P > 1:  # the guess, then one histogram round and the allgather again
    assert memory.steps == topk_sync_steps(True) + 2, memory.steps
check(moved, K_MEMO, ("memo", "after the miss"))
if P > 1:
    assert memory.steps == topk_sync_steps(True), memory.steps
# fresh minibatches of one distribution: the k-th largest |sum| barely moves while the
# largest |input| (the bound) moves by percents; every call after the first uses the guess
misses = []
for seed in range(8):
    rng = np.random.default_rng([40 + seed, rank])
    idx = np.flatnonzero(rng.random(100_000) < 0.2)
    fresh = SparseVector(100_000, idx, rng.standard_normal(idx.size).astype(np.float32))
    check(fresh, 4096, ("fresh minibatch", seed))
    misses.append(memory.steps - topk_sync_steps(True))
if P > 1:
    assert misses[1:] == [0] * 7, misses
for k in (1, 10, 600 // P + 3):  # ties across the partitions, remembered: lower index first
    for _ in range(2):
        check(SparseVector(600, np.arange(600), ones), k, ("memo ties", k))

# the MPI-collective path of the selection's allgather (taken beyond 16 ranks)
from sparcml._topk import topk_allreduce as global_topk  # noqa: E402

global_topk.DIRECT_MAX_RANKS = 0
for k in (0, 1, 40, 600):
    check(random_input(997, 0.3, np.float32, 21), k, ("collective path", k))
check(SparseVector(600, np.arange(600), ones), 77, "collective path, ties")
global_topk.DIRECT_MAX_RANKS = 16

# non-blocking: the same result, in submission order
check(random_input(997, 0.3, np.float32, 5), 50, "nonblocking", nonblocking=True)
requests = [sparcml.itopk_allreduce(random_input(500, 0.2, np.float64, s), 9) for s in range(4)]
for s, req in enumerate(requests):
    got, _ = req.wait(timeout=60)
    again, _ = sparcml.topk_allreduce(random_input(500, 0.2, np.float64, s), 9)
    assert np.array_equal(got.indices, again.indices) and np.array_equal(got.values, again.values)
    cases += 1


# the compression bundle: global top-k with error feedback keeps everything it does not send
from sparcml.compression._objects import Compression, GlobalTopKCompressor  # noqa: E402

for algorithm in ("ssar_split_allgather", "auto"):  # a named algorithm is not used
    comp = Compression(GlobalTopKCompressor(k=40), algorithm=algorithm)
    inputs_sum = np.zeros(3000, np.float32)
    results_sum = np.zeros(3000, np.float32)
    for step in range(3):
        x = np.random.default_rng([step, rank]).integers(-50, 51, 3000).astype(np.float32)
        inputs_sum += np.sum(comm.allgather(x), axis=0)
        reduced = comp.allreduce_in(sparcml._runtime.context.context_for(comm), x, key="w")
        assert same_everywhere(reduced.result)
        got = reduced.result
        nnz = got.count_nonzero() if got.is_dense else got.nnz
        assert nnz <= (40 if algorithm != "auto" else 40 * P), (algorithm, nnz)
        results_sum += reduced.result.to_dense()
    residuals = np.sum(comm.allgather(comp.memory.residual("w")), axis=0)
    assert np.array_equal(results_sum + residuals, inputs_sum), algorithm
    cases += 1

# errors: the same error on every rank, and the communicator stays usable
def raises(exc_type, fn, match):
    global cases
    try:
        fn()
    except exc_type as exc:
        assert match in str(exc), str(exc)
    else:
        raise AssertionError(f"no {exc_type.__name__} on rank {rank}")
    again, _ = sparcml.topk_allreduce(random_input(50, 0.5, np.float32, 1), 3)
    assert same_everywhere(again)
    cases += 1


bad = random_input(300, 0.2, np.float32, 9)
nan_vals = bad.values.copy()
if rank == P - 1 and nan_vals.size:
    nan_vals[0] = np.nan
nan_vec = SparseVector(300, bad.indices, nan_vals)
raises(sparcml.CompressionError, lambda: sparcml.topk_allreduce(nan_vec, 5), "nan")
inf_vec = SparseVector(300, bad.indices, np.where(nan_vals != nan_vals, np.inf, nan_vals))
raises(sparcml.CompressionError, lambda: sparcml.topk_allreduce(inf_vec, 5), "inf")
raises(sparcml.CompressionError,
       lambda: sparcml.itopk_allreduce(nan_vec, 5).wait(timeout=60), "nan")
bad_k = -1 if rank == 0 else 5
raises(sparcml.InvalidArgumentError, lambda: sparcml.topk_allreduce(bad, bad_k), "k must be")
if P > 1:
    raises(sparcml.RankMismatchError, lambda: sparcml.topk_allreduce(bad, 5 + rank), "k (")
    other_dim = SparseVector(300 + (rank == 1), [1], np.ones(1, np.float32))
    raises(sparcml.RankMismatchError, lambda: sparcml.topk_allreduce(other_dim, 5), "dim (")

if rank == 0:
    print(f"TOPK {cases} OK", flush=True)
