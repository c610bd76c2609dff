"""topk_allreduce against the top-k of the dense sum, on any P (profiles ``full``, ``large``).

Every rank computes the dense sum of all inputs itself (allgather) and its top-k (largest
|sum|, ties to the lower index, zeros never), and checks: the result equals it on every rank
(bitwise the same everywhere), and ``sum of inputs == result + sum of dropped``. Values are
small integers, so every sum is exact whatever the order of the additions.
"""

import os
import zlib

import numpy as np

import sparcml
from sparcml import SparseVector
from sparcml._collectives.hierarchical import layout_for
from sparcml._model.costmodel import topk_sync_steps
from sparcml._runtime.context import context_for
from sparcml._topk.rule import memory_of
from sparcml.compression._objects import Compression, GlobalTopKCompressor

from . import Case

K_MEMO = 16384  # 2**11 bins a round: one round finds the threshold on these magnitudes


def reference(total, k):
    nz = np.flatnonzero(total)
    order = nz[np.lexsort((nz, -np.abs(total[nz])))]
    return np.sort(order[:k])


def topk_bits(vec):
    return vec.is_dense, None if vec.is_dense else vec.indices.tobytes(), vec.values.tobytes()


def check_topk(comm, check, vec, k, label, *, nonblocking=False, options=None):
    """One call against the reference; returns its TrafficStats."""
    dense_all = comm.allgather(vec.to_dense() if isinstance(vec, SparseVector) else vec)
    total = np.sum(dense_all, axis=0)
    stats = sparcml.TrafficStats()
    if nonblocking:
        result, dropped = sparcml.itopk_allreduce(vec, k, comm, stats=stats,
                                                  options=options).wait()
    else:
        result, dropped = sparcml.topk_allreduce(vec, k, comm, stats=stats, options=options)
    expect = reference(total, k)
    tag = f"[{label} k={k}]"
    check(not result.is_dense, f"{tag} dense result")
    check(result.dtype == total.dtype and result.dim == total.size, f"{tag} dtype or dim")
    check(np.array_equal(result.indices, expect),
          f"{tag} indices {result.indices[:20]} != {expect[:20]}")
    check(np.array_equal(result.values, total[expect]), f"{tag} values")
    mine = (result.indices.tobytes(), result.values.tobytes())
    everyone = comm.allgather((mine, dropped.to_dense()))
    check(all(theirs == mine for theirs, _ in everyone), f"{tag} ranks differ")
    dropped_sum = np.sum([d for _, d in everyone], axis=0)
    check(np.array_equal(result.to_dense() + dropped_sum, total), f"{tag} result + dropped")
    own = vec if isinstance(vec, SparseVector) else SparseVector.from_dense(vec)
    check(dropped.is_dense == own.is_dense, f"{tag} dropped's representation")
    if not dropped.is_dense:  # this rank's own entries, without the selected indices
        keep = ~np.isin(own.indices, result.indices)
        check(np.array_equal(dropped.indices, own.indices[keep]), f"{tag} dropped indices")
        check(np.array_equal(dropped.values, own.values[keep]), f"{tag} dropped values")
    check(stats.calls == 1 and stats.algorithm == "topk_allreduce", f"{tag} stats {stats}")
    return stats


def random_input(comm, dim, density, dtype, seed, high=64):
    rng = np.random.default_rng([seed, comm.Get_rank()])
    idx = np.flatnonzero(rng.random(dim) < density)
    vals = rng.integers(-high, high + 1, idx.size).astype(dtype)
    return SparseVector(dim, idx, vals)


def alternating_ones(dim=600):
    """Every index at the same |sum| (signs alternate in thirds)."""
    return SparseVector(dim, np.arange(dim), np.where(np.arange(dim) % 3 == 0, -1, 1).astype(
        np.float32))


def random_supports(comm, check, dim, density, dtype):
    """Random supports and magnitudes: several histogram rounds, ties between equal
    integers; k from 0 to beyond the union."""
    seed = zlib.crc32(repr((dim, density, str(np.dtype(dtype)))).encode())
    vec = random_input(comm, dim, density, dtype, seed)
    union = len(np.unique(np.concatenate(comm.allgather(vec.indices))))
    for k in sorted({0, 7, max(1, union // 3), union, dim + 1}):
        check_topk(comm, check, vec, k, f"random N={dim} d={density}")


def ties(comm, check):
    """Every index at the same |sum|: the ties cross the partitions and go to the lower
    index; then ties only on some ranks' partitions, distinct magnitudes around them."""
    P, dim = comm.Get_size(), 600
    for k in (1, 10, dim // P + 3, dim // 2, dim - 1, dim):
        check_topk(comm, check, alternating_ones(dim), k, "ties")
    vals = np.where(np.arange(dim) % 7 == 0, 5.0, 2.0).astype(np.float64)
    vals[dim - 3:] = 9.0
    for k in (2, 3, 4, 40, 90, 200):
        check_topk(comm, check, SparseVector(dim, np.arange(dim), vals), k, "ties-mixed")


def zeros_and_cancelling(comm, check):
    """All-zero inputs (explicit zeros), empty ones and sums that cancel: never selected."""
    check_topk(comm, check, SparseVector(100, np.arange(0, 100, 3), np.zeros(34, np.float32)),
               5, "explicit zeros")
    check_topk(comm, check, SparseVector(100, np.empty(0, np.int64), np.empty(0, np.float32)),
               5, "empty")
    sign = 1.0 if comm.Get_rank() % 2 == 0 else -1.0
    cancel_vals = np.full(50, sign, np.float32)  # odd P: sums are 1, even P: all cancel
    check_topk(comm, check, SparseVector(100, np.arange(0, 100, 2), cancel_vals), 10,
               "cancelling")


def dense_inputs(comm, check):
    """Dense inputs: the reduce-scatter sends dense blocks; dropped stays dense."""
    rng = np.random.default_rng([3, comm.Get_rank()])
    dense_in = rng.integers(-20, 21, 3000).astype(np.float32)
    for k in (0, 30, 2999, 5000):
        check_topk(comm, check, dense_in, k, "dense")


def volume_input(comm):
    dim, k = 200_000, 2000
    return random_input(comm, dim, k / dim, np.float32, 11, high=1 << 20), k


def volume(comm, check):
    """Bytes per rank are bounded independently of P: about (P-1)/P (k_local + k) entries."""
    P = comm.Get_size()
    vec, k = volume_input(comm)
    stats = check_topk(comm, check, vec, k, "volume")
    hist_bytes = 3 * 2 * ((1 << 11) + 1) * 8 + 8  # at most 3 rounds of 2049 bins (float32)
    bound = (P - 1) / P * (vec.nnz + k) * 8 * 1.1 + hist_bytes + 64 * P
    check(stats.bytes_sent <= bound, f"{stats.bytes_sent} bytes above {bound}")


ENV_NODE_SHM = "SPARCML_NODE_SHM"  # the process default of Options.node_shm


def window(comm, check):
    """On one node the exchanges go through a shared-memory window (sparcml._topk.
    node_exchange) unless SPARCML_NODE_SHM=0: the same result bits, bytes and messages either
    way. Real ranks only: the variable is process-wide (simulated ranks would share it) and
    simulated ranks have no window."""
    vec, k = volume_input(comm)
    before = os.environ.get(ENV_NODE_SHM)
    ways = {}
    try:
        for shm in ("0", "1"):
            os.environ[ENV_NODE_SHM] = shm
            stats = check_topk(comm, check, vec, k, f"window shm={shm}")
            out = sparcml.topk_allreduce(vec, k, comm)
            ways[shm] = (out.result.indices.tobytes(), out.result.values.tobytes(),
                         out.dropped.values.tobytes(), stats.bytes_sent, stats.bytes_received,
                         stats.messages)
    finally:
        if before is None:
            os.environ.pop(ENV_NODE_SHM, None)
        else:
            os.environ[ENV_NODE_SHM] = before
    check(ways["0"] == ways["1"], f"window and messages differ: {ways['0'][3:]} "
                                  f"{ways['1'][3:]}")
    if comm.Get_size() > 1:
        slots = layout_for(context_for(comm), 0).slots
        check(slots is not None and slots.win is not None, "the window was not used")


def memo(comm, check):
    """Later calls of a shape start from the threshold the last one found (one step fewer); a
    guess that misses (the magnitudes moved down) falls back to the exact path, still exact;
    fresh minibatches of one distribution use the guess after the first call."""
    P = comm.Get_size()
    memory = memory_of(context_for(comm))
    steps = []
    for label, scale in (("first", 1.0), ("remembered", 1.0), ("rescaled", 2.0 ** -12),
                         ("again", 2.0 ** -12)):
        base = random_input(comm, 100_000, 0.2, np.float32, 31, high=1 << 20)
        vec = SparseVector(base.dim, base.indices, base.values * np.float32(scale))
        check_topk(comm, check, vec, K_MEMO, f"memo {label}")
        steps.append(memory.steps)
    if P > 1:  # the model's count of synchronizing steps is the call's
        check(steps == [topk_sync_steps(False)] + [topk_sync_steps(True)] * 3, f"steps {steps}")
    # the same largest |x| (so the same bound), everything else 1024 times smaller: the guess
    # just below the remembered threshold finds at most P sums, fewer than k
    moved = random_input(comm, 100_000, 0.2, np.float32, 32, high=1 << 20)
    moved_vals = moved.values / np.float32(1024)
    moved_vals[0] = float(1 << 20)
    moved = SparseVector(moved.dim, moved.indices, moved_vals)
    check_topk(comm, check, moved, K_MEMO, "memo missed")
    if P > 1:  # the guess, then one histogram round and the allgather again
        check(memory.steps == topk_sync_steps(True) + 2, f"missed: {memory.steps}")
    check_topk(comm, check, moved, K_MEMO, "memo after the miss")
    if P > 1:
        check(memory.steps == topk_sync_steps(True), f"after: {memory.steps}")
    misses = []
    for seed in range(8):
        rng = np.random.default_rng([40 + seed, comm.Get_rank()])
        idx = np.flatnonzero(rng.random(100_000) < 0.2)
        fresh = SparseVector(100_000, idx, rng.standard_normal(idx.size).astype(np.float32))
        check_topk(comm, check, fresh, 4096, f"fresh minibatch {seed}")
        misses.append(memory.steps - topk_sync_steps(True))
    if P > 1:
        check(misses[1:] == [0] * 7, f"misses {misses}")
    for k in (1, 10, 600 // P + 3):  # ties across the partitions, remembered: lower index first
        for _ in range(2):
            check_topk(comm, check, alternating_ones(), k, "memo ties")


def collective_path(comm, check):
    """Both paths of the reduce-scatter and the selection's allgather at any P: MPI's vector
    collectives (``Alltoallv``, ``Allgatherv``; taken from ``Options.native_min_ranks``
    ranks) and the point-to-point messages, forced by the option (messages, not the one-node
    window), each against the reference. (Bytes: the allreduce matrix compares them; here a
    second call of a shape takes the remembered threshold's path, so two calls differ.)"""
    native = sparcml.Options(native_min_ranks=1, node_shm=False)
    p2p = sparcml.Options(native_min_ranks=2**31 - 1, node_shm=False)
    for k in (0, 1, 40, 600):
        vec = random_input(comm, 997, 0.3, np.float32, 21)
        check_topk(comm, check, vec, k, "collective path", options=native)
        check_topk(comm, check, vec, k, "point-to-point path", options=p2p)
    check_topk(comm, check, alternating_ones(), 77, "collective path, ties", options=native)


def nonblocking(comm, check):
    """itopk_allreduce: the same result as the blocking call, in submission order."""
    check_topk(comm, check, random_input(comm, 997, 0.3, np.float32, 5), 50, "nonblocking",
               nonblocking=True)
    requests = [sparcml.itopk_allreduce(random_input(comm, 500, 0.2, np.float64, s), 9, comm)
                for s in range(4)]
    for s, req in enumerate(requests):
        got, _ = req.wait(timeout=60)
        again, _ = sparcml.topk_allreduce(random_input(comm, 500, 0.2, np.float64, s), 9, comm)
        check(np.array_equal(got.indices, again.indices)
              and np.array_equal(got.values, again.values), f"request {s}")


def compression(comm, check, algorithm):
    """The compression bundle: global top-k with error feedback keeps everything it does not
    send (a named algorithm is not used)."""
    P, rank = comm.Get_size(), comm.Get_rank()
    comp = Compression(GlobalTopKCompressor(k=40), algorithm=algorithm)
    inputs_sum = np.zeros(3000, np.float32)
    results_sum = np.zeros(3000, np.float32)
    for step in range(3):
        x = np.random.default_rng([step, rank]).integers(-50, 51, 3000).astype(np.float32)
        inputs_sum += np.sum(comm.allgather(x), axis=0)
        reduced = comp.allreduce_in(context_for(comm), x, key="w")
        check.same(topk_bits(reduced.result), f"step {step}")
        got = reduced.result
        nnz = got.count_nonzero() if got.is_dense else got.nnz
        check(nnz <= (40 if algorithm != "auto" else 40 * P), f"step {step}: nnz {nnz}")
        results_sum += reduced.result.to_dense()
    residuals = np.sum(comm.allgather(comp.memory.residual("w")), axis=0)
    check(np.array_equal(results_sum + residuals, inputs_sum), "results + residuals")


def errors(comm, check):
    """Bad input: the same error on every rank, and the communicator stays usable."""
    rank, P = comm.Get_rank(), comm.Get_size()

    def raises(exc_type, fn, match):
        try:
            fn()
        except exc_type as exc:
            check(match in str(exc), f"{exc_type.__name__} without {match!r}: {exc}")
        else:
            check(False, f"no {exc_type.__name__} ({match})")
        again, _ = sparcml.topk_allreduce(random_input(comm, 50, 0.5, np.float32, 1), 3, comm)
        check.same(topk_bits(again), f"after {match!r}")

    bad = random_input(comm, 300, 0.2, np.float32, 9)
    nan_vals = bad.values.copy()
    if rank == P - 1 and nan_vals.size:
        nan_vals[0] = np.nan
    nan_vec = SparseVector(300, bad.indices, nan_vals)
    raises(sparcml.CompressionError, lambda: sparcml.topk_allreduce(nan_vec, 5, comm), "nan")
    inf_vec = SparseVector(300, bad.indices, np.where(nan_vals != nan_vals, np.inf, nan_vals))
    raises(sparcml.CompressionError, lambda: sparcml.topk_allreduce(inf_vec, 5, comm), "inf")
    raises(sparcml.CompressionError,
           lambda: sparcml.itopk_allreduce(nan_vec, 5, comm).wait(timeout=60), "nan")
    bad_k = -1 if rank == 0 else 5
    raises(sparcml.InvalidArgumentError, lambda: sparcml.topk_allreduce(bad, bad_k, comm),
           "k must be")
    if P > 1:
        raises(sparcml.RankMismatchError, lambda: sparcml.topk_allreduce(bad, 5 + rank, comm),
               "k (")
        other_dim = SparseVector(300 + (rank == 1), [1], np.ones(1, np.float32))
        raises(sparcml.RankMismatchError, lambda: sparcml.topk_allreduce(other_dim, 5, comm),
               "dim (")


def large(comm, check, dim, density, k):
    """Large P: the top-k of the dense sum, the same on every rank, result + dropped."""
    check_topk(comm, check, random_input(comm, dim, density, np.float32, 17), k, "large P")


def cases(profile: str, P: int, simulated: bool = False) -> list[Case]:
    """The top-k cases: ``full`` (P <= 8; fewer input sets above P = 5, for time) or
    ``large`` (simulated hundreds of ranks: one input set). ``simulated``: leave out what
    needs real ranks (the shared-memory window)."""
    if profile == "large":
        return [Case("large P N=3001 d=0.02 k=100", large, dict(dim=3001, density=0.02,
                                                                k=100))]
    if profile != "full":
        raise ValueError(f"unknown profile {profile!r}")
    dims = (1, 997, 5000 + P) if P <= 5 else (997, 5000 + P)
    dtypes = (np.float32, np.float64) if P <= 5 else (np.float32,)
    out = [Case(f"random N={dim} d={density} {np.dtype(dtype).name}", random_supports,
                dict(dim=dim, density=density, dtype=dtype))
           for dim in dims for density in (0.01, 0.3) for dtype in dtypes]
    out += [Case("ties", ties), Case("zeros and cancelling", zeros_and_cancelling),
            Case("dense inputs", dense_inputs), Case("volume", volume)]
    if not simulated:
        out.append(Case("shared-memory window", window))
    out += [Case("threshold memory", memo), Case("collective path", collective_path),
            Case("nonblocking", nonblocking)]
    out += [Case(f"compression {a}", compression, dict(algorithm=a))
            for a in ("ssar_split_allgather", "auto")]
    out.append(Case("errors", errors))
    return out
