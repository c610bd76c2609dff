"""Sparse allreduce: the three SparCML algorithms and the two baselines, behind one entry point.

Every algorithm returns, on every rank, the same :class:`SparseVector`: the sum of the inputs,
sparse or dense-backed by the switch rule (``dsar_split_allgather`` and ``dense`` always return
a dense-backed result: that is what they compute). The split algorithms and ``allgather`` add
in rank order (bitwise the sum ``((x0 + x1) + x2) + ...``); ``ssar_recursive_double`` adds in
the order of its butterfly, so its result may differ from theirs in the last bits.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import kernels
from .agreement import agree
from .context import TrafficStats, context_for
from .costmodel import _calibrate_on, overlap_from_result
from .errors import (IncompatibleOptionsError, InvalidOutputError, SparcmlError,
                     UnknownAlgorithmError, UnsupportedDtypeError)
from .vector import SparseVector
from .wire import Codec, Part, decode

__all__ = ["allreduce", "iallreduce", "allreduce_in", "block_bounds", "ALGORITHMS", "AUTO"]

ALGORITHMS = ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather",
              "dense", "allgather")
AUTO = "auto"  # chosen per call by the calibrated cost model (sparcml.costmodel)

_TAG_FOLD = 11      # non-power-of-two: an extra rank hands its input to its partner
_TAG_ROUND = 12     # recursive doubling rounds
_TAG_UNFOLD = 13    # non-power-of-two: the result goes back to the extra rank
_TAG_SPLIT = 21     # split algorithms, phase 1


# -- point-to-point helpers -----------------------------------------------------------------

def _recv_bytes(ctx, source, tag, status=None) -> tuple[np.ndarray, int]:
    status = MPI.Status() if status is None else status
    msg = ctx.waiter.mprobe(ctx.comm, source, tag, status)
    buf = np.empty(status.Get_count(MPI.BYTE), np.uint8)
    ctx.waiter.wait(msg.Irecv([buf, MPI.BYTE]))
    return buf, status.Get_source()


def _encode_vector(vec: SparseVector, codec: Codec, seed=None) -> tuple[np.ndarray, bool]:
    # vectors inside the algorithms are normalized, so a dense-backed one crosses the rule
    return codec.encode(Part(0, vec.dim, vec.indices, vec.values), known_dense=vec.is_dense,
                        seed=seed)


def _as_sent(vec: SparseVector, buf: np.ndarray, codec: Codec) -> SparseVector:
    """What the receiver of ``buf`` sees: ``vec`` itself, or its decoding when quantized.

    A sender keeps computing with what it sent, so that every rank holds the same values.
    """
    return _as_vector(decode(buf), vec.dim) if codec.lossy else vec


def _as_vector(part: Part, dim: int) -> SparseVector:
    if part.is_dense:
        return SparseVector._trusted(dim, None, part.values)
    return SparseVector._trusted(dim, part.indices, part.values)


def _send_vector(ctx, vec, dest, tag, stats, codec) -> SparseVector:
    buf, dense = _encode_vector(vec, codec)
    ctx.waiter.wait(ctx.comm.Isend([buf, MPI.BYTE], dest, tag))
    stats.add_message(buf.nbytes, dense)
    return _as_sent(vec, buf, codec)


def _recv_vector(ctx, source, tag, dim) -> SparseVector:
    buf, _ = _recv_bytes(ctx, source, tag)
    return _as_vector(decode(buf), dim)


def _exchange_vector(ctx, vec, peer, tag, stats, codec,
                     seed=None) -> tuple[SparseVector, SparseVector]:
    """Send ``vec`` to ``peer`` and receive its vector: ``(vec as sent, peer's vector)``."""
    buf, dense = _encode_vector(vec, codec, seed)
    req = ctx.comm.Isend([buf, MPI.BYTE], peer, tag)
    try:
        rbuf, _ = _recv_bytes(ctx, peer, tag)
    finally:
        ctx.waiter.wait(req)
    stats.add_message(buf.nbytes, dense)
    return _as_sent(vec, buf, codec), _as_vector(decode(rbuf), vec.dim)


# -- local arithmetic -----------------------------------------------------------------------

def _normalize(vec: SparseVector, codec: Codec) -> SparseVector:
    """The representation the switch rule asks for (dense-backed iff the rule fires)."""
    if vec.is_dense:
        if codec.should_be_dense(vec.count_nonzero(), vec.dim):
            return vec
        return vec.to_sparse()
    if codec.should_be_dense(vec.nnz, vec.dim):
        return SparseVector._trusted(vec.dim, None, vec.to_dense())
    return vec


def _add(a: SparseVector, b: SparseVector, codec: Codec) -> SparseVector:
    """``a + b`` in the representation of the rule; bitwise equal to ``b + a``."""
    if a.is_dense and b.is_dense:
        return SparseVector._trusted(a.dim, None, a.values + b.values)
    if a.is_dense or b.is_dense:
        dense, sparse = (a, b) if a.is_dense else (b, a)
        out = dense.values.copy()
        kernels.scatter_add(out, sparse.indices, sparse.values, 0)
        return SparseVector._trusted(a.dim, None, out)
    idx, val = kernels.merge_add(a.indices, a.values, b.indices, b.values)
    if codec.should_be_dense(idx.shape[0], a.dim):
        out = np.zeros(a.dim, a.dtype)
        kernels.scatter_add(out, idx, val, 0)
        return SparseVector._trusted(a.dim, None, out)
    return SparseVector._trusted(a.dim, idx, val)


def _fold_parts(parts: list[Part], offset: int, length: int, codec: Codec,
                force_dense: bool = False) -> Part:
    """Sum parts of one index range in list order; dense when any part is, or when forced."""
    value_dtype, index_dtype = codec.value_dtype, codec.index_dtype
    if force_dense or any(p.is_dense for p in parts):
        acc = np.zeros(length, value_dtype)
        for p in parts:
            if p.is_dense:
                acc += p.values
            else:
                kernels.scatter_add(acc, p.indices, p.values, offset)
        return Part(offset, length, None, acc)
    counts = np.array([0] + [p.nnz for p in parts], np.int64)
    offsets = np.cumsum(counts)
    if offsets[-1] == 0:
        return Part(offset, length, np.empty(0, index_dtype), np.empty(0, value_dtype))
    idx, val = kernels.merge_many(offsets, np.concatenate([p.indices for p in parts]),
                                  np.concatenate([p.values for p in parts]))
    if codec.should_be_dense(idx.shape[0], length):
        acc = np.zeros(length, value_dtype)
        kernels.scatter_add(acc, idx, val, offset)
        return Part(offset, length, None, acc)
    return Part(offset, length, idx, val)


def _allgather_in_place(ctx, sizes: np.ndarray, write_mine, stats) -> list[np.ndarray]:
    """Allgatherv of byte messages whose ``sizes`` (one per rank, int64) every rank knows:
    ``write_mine(slot)`` fills this rank's slot of the receive buffer, which then travels in
    place. Returns the P messages in rank order (views of one buffer)."""
    displs = np.zeros_like(sizes)
    np.cumsum(sizes[:-1], out=displs[1:])
    recv = np.empty(int(sizes.sum()), np.uint8)
    write_mine(recv[int(displs[ctx.rank]):int(displs[ctx.rank] + sizes[ctx.rank])])
    ctx.waiter.collective(ctx.comm, "Allgatherv", MPI.IN_PLACE,
                          [recv, sizes, displs, MPI.BYTE])
    stats.bytes_sent += int(sizes.sum() - sizes[ctx.rank])
    stats.messages += 1
    return [recv[d:d + n] for d, n in zip(displs, sizes)]


def _allgather_bytes(ctx, buf, stats) -> list[np.ndarray]:
    """Allgatherv of byte buffers of different sizes; returns the P buffers in rank order."""
    sizes = np.empty(ctx.size, np.int64)
    ctx.waiter.collective(ctx.comm, "Allgather", np.array([buf.nbytes], np.int64), sizes)

    def write_mine(slot):
        slot[:] = buf

    return _allgather_in_place(ctx, sizes, write_mine, stats)


def _allgather_dense_blocks(ctx, block: Part, bounds: np.ndarray, codec: Codec,
                            stats: TrafficStats) -> list[np.ndarray]:
    """Allgatherv of every rank's dense block message (block j spans ``bounds[j:j+2]``).

    Every size is known from ``bounds``, so no sizes travel first, and this rank encodes
    straight into its slot of the receive buffer.
    """
    sizes = np.array([codec.dense_nbytes(int(bounds[j + 1] - bounds[j]))
                      for j in range(ctx.size)], np.int64)

    def write_mine(slot):
        codec.encode_dense(block.values, block.offset, out=slot)

    return _allgather_in_place(ctx, sizes, write_mine, stats)


# -- the algorithms -------------------------------------------------------------------------

def _ssar_recursive_double(ctx, vec: SparseVector, stats: TrafficStats,
                           codec: Codec) -> SparseVector:
    rank, size = ctx.rank, ctx.size
    cur = vec
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    # Non-power-of-two (the MPICH scheme): among ranks < 2*rem, even ranks hand their input to
    # rank + 1 and sit out the butterfly; they get the result back at the end.
    if rank < 2 * rem:
        if rank % 2 == 0:
            _send_vector(ctx, cur, rank + 1, _TAG_FOLD, stats, codec)
            newrank = -1
        else:
            cur = _add(_recv_vector(ctx, rank - 1, _TAG_FOLD, vec.dim), cur, codec)
            newrank = rank // 2
    else:
        newrank = rank - rem
    if newrank >= 0:
        mask = 1
        while mask < pof2:
            newpeer = newrank ^ mask
            peer = newpeer * 2 + 1 if newpeer < rem else newpeer + rem
            # after round t the 2^t ranks of a group hold the same stream; with a quantizer
            # they must also send the same message, so the random stream is the group's
            group_seed = _group_seed(codec.seed, mask, newrank // mask) if codec.lossy else None
            mine, other = _exchange_vector(ctx, cur, peer, _TAG_ROUND, stats, codec,
                                           group_seed)
            cur = _add(mine, other, codec) if newrank < newpeer else _add(other, mine, codec)
            mask <<= 1
    if rank < 2 * rem:
        if rank % 2 == 1:
            # the result goes back unquantized: the ranks of the butterfly hold it as is
            _send_vector(ctx, cur, rank - 1, _TAG_UNFOLD, stats, codec.lossless())
        else:
            cur = _recv_vector(ctx, rank + 1, _TAG_UNFOLD, vec.dim)
    return cur


def _group_seed(seed: int, mask: int, group: int) -> int:
    """A 64-bit stream seed shared by the ranks of one butterfly group in one round."""
    z = (seed + 0x9E3779B97F4A7C15 * (mask * 1_000_003 + group + 1)) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF  # splitmix64 finalizer
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def block_bounds(dim: int, size: int) -> np.ndarray:
    """Start of each rank's block of ``[0, dim)`` and ``dim`` at the end (``size + 1`` values)."""
    return (np.arange(size + 1, dtype=np.int64) * dim) // size


def _split_reduce(ctx, vec: SparseVector, stats: TrafficStats, bounds: np.ndarray,
                  codec: Codec) -> list[Part]:
    """Phase 1 of the split algorithms: block j of every input goes to rank j.

    Returns the P parts of this rank's block, in source-rank order.
    """
    rank, size = ctx.rank, ctx.size
    if vec.is_dense:
        mine = [Part(int(bounds[j]), int(bounds[j + 1] - bounds[j]), None,
                     vec.values[bounds[j]:bounds[j + 1]]) for j in range(size)]
    else:
        pos = kernels.split_positions(vec.indices, bounds.astype(codec.index_dtype))
        mine = [Part(int(bounds[j]), int(bounds[j + 1] - bounds[j]),
                     vec.indices[pos[j]:pos[j + 1]], vec.values[pos[j]:pos[j + 1]])
                for j in range(size)]
    requests = []
    buffers = []
    received: list[Part | None] = [None] * size
    try:
        for step in range(1, size):  # staggered so that no rank is everybody's first target
            dest = (rank + step) % size
            buf, dense = codec.encode(mine[dest])
            buffers.append(buf)
            requests.append(ctx.comm.Isend([buf, MPI.BYTE], dest, _TAG_SPLIT))
            stats.add_message(buf.nbytes, dense)
        # my own block goes through the same encoding, so its representation (and hence the
        # sum) is what every other rank would compute from it
        own, _ = codec.encode(mine[rank])
        received[rank] = decode(own)
        status = MPI.Status()
        for _ in range(size - 1):
            buf, source = _recv_bytes(ctx, MPI.ANY_SOURCE, _TAG_SPLIT, status)
            received[source] = decode(buf)
    finally:
        ctx.waiter.waitall(requests)
    return received


def _ssar_split_allgather(ctx, vec: SparseVector, stats: TrafficStats,
                          codec: Codec) -> SparseVector:
    rank, size = ctx.rank, ctx.size
    bounds = block_bounds(vec.dim, size)
    parts = _split_reduce(ctx, vec, stats, bounds, codec)
    block = _fold_parts(parts, int(bounds[rank]), int(bounds[rank + 1] - bounds[rank]), codec)
    buf, _ = codec.encode(block, known_dense=block.is_dense)
    blocks = [decode(b) for b in _allgather_bytes(ctx, buf, stats)]
    return _assemble(blocks, vec.dim, codec)


def _assemble(blocks: list[Part], dim: int, codec: Codec) -> SparseVector:
    """Concatenate disjoint blocks (in index order) into one vector, by the switch rule."""
    value_dtype, index_dtype = codec.value_dtype, codec.index_dtype
    support = sum(kernels.count_nonzero(b.values) if b.is_dense else b.nnz for b in blocks)
    if codec.should_be_dense(support, dim):
        out = np.zeros(dim, value_dtype)
        for b in blocks:
            if b.is_dense:
                out[b.offset:b.offset + b.length] = b.values
            else:
                out[b.indices] = b.values
        return SparseVector._trusted(dim, None, out)
    idx, val = [], []
    for b in blocks:
        if b.is_dense:
            i, v = kernels.dense_to_sparse(b.values, b.offset, np.empty(0, index_dtype))
        else:
            i, v = b.indices, b.values
        idx.append(i)
        val.append(v)
    return SparseVector._trusted(dim, np.concatenate(idx).astype(index_dtype, copy=False),
                                 np.concatenate(val))


def _dsar_split_allgather(ctx, vec: SparseVector, stats: TrafficStats, codec: Codec,
                          out: np.ndarray | None = None) -> SparseVector:
    rank, size = ctx.rank, ctx.size
    bounds = block_bounds(vec.dim, size)
    parts = _split_reduce(ctx, vec, stats, bounds, codec)
    block = _fold_parts(parts, int(bounds[rank]), int(bounds[rank + 1] - bounds[rank]), codec,
                        force_dense=True)
    # a caller's buffer is (usually) already in memory: write around the caches into it; a fresh
    # one is not, and the kernel's zeroing of its pages then makes ordinary stores cheaper
    streaming = out is not None
    if out is None:
        out = np.empty(vec.dim, vec.dtype)
    if codec.lossy:  # the dense phase in low precision: every rank decodes every block
        for j, gathered in enumerate(_allgather_dense_blocks(ctx, block, bounds, codec, stats)):
            decode(gathered, out=out[bounds[j]:bounds[j + 1]], streaming=streaming)
        return SparseVector._trusted(vec.dim, None, out)
    counts = np.diff(bounds)
    mpi_type = MPI._typedict[vec.dtype.char]
    ctx.waiter.collective(ctx.comm, "Allgatherv", [block.values, mpi_type],
                          [out, counts, bounds[:-1], mpi_type])
    stats.bytes_sent += (vec.dim - block.length) * vec.dtype.itemsize
    stats.messages += 1
    return SparseVector._trusted(vec.dim, None, out)


def _dense(ctx, vec: SparseVector, stats: TrafficStats, codec: Codec,
           out: np.ndarray | None = None) -> SparseVector:
    out = vec.to_dense() if out is None else _write_dense(vec, out)
    ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, out, MPI.SUM)
    size = ctx.size
    stats.bytes_sent += 2 * (size - 1) * out.nbytes // size
    stats.messages += 1
    stats.dense_messages += 1
    return SparseVector._trusted(vec.dim, None, out)


def _allgather(ctx, vec: SparseVector, stats: TrafficStats, codec: Codec) -> SparseVector:
    buf, _ = _encode_vector(vec, codec)
    parts = [decode(b) for b in _allgather_bytes(ctx, buf, stats)]
    total = _fold_parts(parts, 0, vec.dim, codec)
    return _as_vector(total, vec.dim)


def _write_dense(vec: SparseVector, out: np.ndarray) -> np.ndarray:
    """``out[:] = vec`` (every entry, zeros included); returns ``out``."""
    if vec.is_dense:
        if vec.values is not out:
            np.copyto(out, vec.values)
    else:
        out.fill(0)
        out[vec.indices] = vec.values
    return out


# the algorithms that compute a dense result anyway take ``out=`` and fill it themselves
_WRITE_INTO_OUT = ("dense", "dsar_split_allgather")

_IMPLEMENTATIONS = {
    "ssar_recursive_double": _ssar_recursive_double,
    "ssar_split_allgather": _ssar_split_allgather,
    "dsar_split_allgather": _dsar_split_allgather,
    "dense": _dense,
    "allgather": _allgather,
}


# -- entry point ----------------------------------------------------------------------------

def _coerce(vec) -> SparseVector:
    if isinstance(vec, SparseVector):
        return vec
    if isinstance(vec, np.ndarray):
        return SparseVector.from_dense(vec)
    if isinstance(vec, tuple) and len(vec) == 3:
        return SparseVector(*vec)
    raise UnsupportedDtypeError(
        f"allreduce expects a SparseVector, a 1-d NumPy array or a (dim, indices, values) "
        f"tuple, got {type(vec).__name__}")


def _algorithm_code(algorithm) -> int:
    if algorithm == AUTO:
        return len(ALGORITHMS)
    try:
        return ALGORITHMS.index(algorithm)
    except ValueError:
        raise UnknownAlgorithmError(
            f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)} or "
            f"{AUTO!r}") from None


_DESCRIBE = {"algorithm": {**dict(enumerate(ALGORITHMS + (AUTO,))), -1: "(invalid)"},
             "value dtype": {4: "float32", 8: "float64"}}


def allreduce(vec, comm: MPI.Comm | None = None, *, algorithm: str = "ssar_recursive_double",
              quantizer=None, quantize_sparse: bool = False, stats: TrafficStats | None = None,
              check: bool = True, out: np.ndarray | None = None) -> SparseVector:
    """Sum one sparse vector per rank; every rank gets the same result.

    Collective: every rank of ``comm`` (default ``MPI.COMM_WORLD``) must call, in the same order
    as its other sparcml calls on ``comm``, with the same ``dim``, value dtype, ``algorithm``
    and quantizer configuration.

    Parameters
    ----------
    vec : SparseVector, 1-d float ndarray (made sparse by :meth:`SparseVector.from_dense`),
        or ``(dim, indices, values)`` (validated here, so that bad input on one rank raises the
        same exception on every rank instead of leaving the others waiting).
    algorithm : one of :data:`ALGORITHMS`, or ``"auto"``: the one the cost model predicts
        fastest for this call (calibrated on ``comm`` at the first ``auto`` call, collectively;
        the overlap of the inputs is learnt from earlier ``auto`` calls of the same dim).
        ``auto`` and quantized calls always run the agreement check (it carries the largest
        input nnz and a random seed common to all ranks).
    quantizer : a :class:`~sparcml.QSGD`, or None. Dense messages travel quantized (the dense
        phase of ``dsar_split_allgather``, dense rounds of the other algorithms); with
        ``quantize_sparse`` the values of sparse messages too. Every rank computes with the
        values as received (a sender with what it sent, decoded), so the result is the same on
        every rank; it is an unbiased estimate of the sum. Not with ``dense`` (MPI_Allreduce
        cannot add quantized values). The switch rule uses the quantized sizes.
    stats : a :class:`TrafficStats` to add this call's traffic to.
    check : with ``True`` (default), one small extra ``Allreduce`` checks that the ranks agree
        on ``dim``, dtype, ``algorithm`` and quantizer and that no rank's input was invalid,
        and raises the same :class:`SparcmlError` on every rank otherwise. ``False`` skips it
        (one latency less, but a mismatch is then undefined behaviour).
    out : a buffer for the result, as MPI's receive buffer: a writeable C-contiguous 1-d
        ndarray of ``dim`` values of the value dtype, not overlapping ``vec``. The sum is
        written there in full (zeros included) and the result is dense-backed on ``out``.
        Iterative callers that pass the same buffer every time skip allocating, and the kernel
        zeroing, a fresh result (a large part of a dense-phase call on shared memory). Each
        rank passes its own buffer or None, independently of the others.

    Returns
    -------
    SparseVector of the same dim and value dtype: newly allocated (never aliasing ``vec``), or
    dense on ``out``.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    return allreduce_in(context_for(comm), vec, algorithm, quantizer, quantize_sparse, stats,
                        check, out)


def allreduce_in(ctx, vec, algorithm, quantizer, quantize_sparse, stats, check,
                 out=None) -> SparseVector:
    """:func:`allreduce` on a context (the blocking path's, or the communication thread's)."""
    stats = TrafficStats() if stats is None else stats
    local_error = None
    fields = {"dim": -1, "value dtype": -1, "algorithm": -1, "quantizer": 0,
              "quantize_sparse": int(bool(quantize_sparse))}
    nnz = 0
    try:
        fields["algorithm"] = _algorithm_code(algorithm)
        if quantizer is not None:
            fields["quantizer"] = _quantizer_code(quantizer)
            if algorithm == "dense":
                raise IncompatibleOptionsError(
                    "algorithm 'dense' sums with MPI_Allreduce, which cannot add quantized "
                    "values; use dsar_split_allgather (or auto) with a quantizer")
        vec = _coerce(vec)
        fields["dim"] = vec.dim
        fields["value dtype"] = vec.dtype.itemsize
        nnz = vec.nnz
        if out is not None:
            _check_out(out, vec)
    except SparcmlError as exc:
        local_error = exc
    # a quantizer needs one random seed common to all ranks: it rides on the check
    seed = int(quantizer._rng.integers(0, 2**62)) if quantizer is not None and not local_error \
        else 0
    if check or algorithm == AUTO or quantizer is not None:
        maxima = agree(ctx.comm, fields, local_error, _DESCRIBE, waiter=ctx.waiter,
                       maxima={"nnz": nnz, "seed": seed})
        nnz_max, seed = maxima["nnz"], maxima["seed"]
    elif local_error is not None:
        raise local_error
    stats.calls += 1
    codec = Codec(vec.index_dtype, vec.dtype, quantizer, quantize_sparse, seed)
    chosen = algorithm
    if algorithm == AUTO:
        chosen = _choose(ctx, vec, nnz_max, codec)
    stats.algorithm = chosen
    if ctx.size == 1:  # nothing travels, so nothing is quantized
        if out is not None:
            return SparseVector._trusted(vec.dim, None, _write_dense(vec, out))
        if chosen in _WRITE_INTO_OUT:
            return SparseVector._trusted(vec.dim, None, vec.to_dense())
        result = _normalize(vec, codec)
        if result is vec:
            result = SparseVector._trusted(vec.dim, None if vec.is_dense else vec.indices.copy(),
                                           vec.values.copy())
        return result
    if chosen in _WRITE_INTO_OUT:
        result = _IMPLEMENTATIONS[chosen](ctx, vec, stats, codec, out=out)
    else:
        result = _IMPLEMENTATIONS[chosen](ctx, _normalize(vec, codec), stats, codec)
    if algorithm == AUTO:
        _learn_overlap(ctx, vec, nnz_max, result)
    if out is not None and result.values is not out:
        result = SparseVector._trusted(vec.dim, None, _write_dense(result, out))
    return result


def _check_out(out, vec: SparseVector) -> None:
    """Raise :class:`InvalidOutputError` unless ``out`` can hold ``vec``'s sum."""
    if not isinstance(out, np.ndarray):
        raise InvalidOutputError(f"out must be a NumPy array, got {type(out).__name__}")
    if out.ndim != 1 or out.shape[0] != vec.dim or out.dtype != vec.dtype:
        raise InvalidOutputError(
            f"out must be a 1-d array of {vec.dim} {vec.dtype} values (the input's dim and "
            f"value dtype), got shape {out.shape} and dtype {out.dtype}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise InvalidOutputError("out must be C-contiguous and writeable (pass a fresh "
                                 "np.empty(dim, dtype) or a contiguous copy)")
    if np.shares_memory(out, vec.values) or (vec.indices is not None
                                             and np.shares_memory(out, vec.indices)):
        raise InvalidOutputError("out overlaps the input vector; the input must stay intact "
                                 "while the collective runs, so pass a separate buffer")


def _quantizer_code(quantizer) -> int:
    from .qsgd import QSGD

    if not isinstance(quantizer, QSGD):
        raise IncompatibleOptionsError(
            f"quantizer must be a sparcml.QSGD (or None), got {type(quantizer).__name__}")
    return quantizer.code


def _choose(ctx, vec: SparseVector, nnz_max: int, codec: Codec) -> str:
    """``auto``: the algorithm the calibrated cost model predicts fastest (same on all ranks)."""
    model = ctx.history.get("model")
    if model is None:
        model = ctx.history["model"] = _calibrate_on(ctx)
    q = ctx.history.get(("overlap", vec.dim), 1.0)
    # iterative training repeats the same call: remember the choice for the same inputs
    key = ("choice", vec.dim, nnz_max, round(q, 2), vec.index_dtype.itemsize,
           vec.dtype.itemsize, codec.lossy)
    choice = ctx.history.get(key)
    if choice is None:
        candidates = [a for a in ALGORITHMS if not (codec.lossy and a == "dense")]
        choice = model.choose(P=ctx.size, N=vec.dim, k=nnz_max, q=q,
                              s_idx=vec.index_dtype.itemsize, s_val=vec.dtype.itemsize,
                              candidates=candidates)
        if len(ctx.history) < 10_000:
            ctx.history[key] = choice
    return choice


def _learn_overlap(ctx, vec: SparseVector, nnz_max: int, result: SparseVector) -> None:
    """Remember how much the inputs overlapped (iterative training repeats its pattern)."""
    if result.is_dense:  # past the switch rule K says little, and counting it costs O(N)
        return
    seen = (nnz_max, result.nnz)
    if ctx.history.get(("last", vec.dim)) == seen:  # the same call again: nothing new
        return
    ctx.history[("last", vec.dim)] = seen
    q = overlap_from_result(nnz_max, result.nnz, ctx.size, vec.dim)
    key = ("overlap", vec.dim)
    old = ctx.history.get(key)
    ctx.history[key] = q if old is None else 0.5 * (old + q)


def iallreduce(vec, comm: MPI.Comm | None = None, *, algorithm: str = "ssar_recursive_double",
               quantizer=None, quantize_sparse: bool = False,
               stats: TrafficStats | None = None, check: bool = True,
               out: np.ndarray | None = None):
    """Non-blocking :func:`allreduce`: returns a :class:`~sparcml.nonblocking.Request` at once.

    Same arguments and result (``request.wait()``) as :func:`allreduce`. Collective: every
    rank must submit its non-blocking calls on ``comm`` in the same order. ``vec`` must not be
    modified, nor ``out`` read, until the request completes (as with MPI buffers). ``stats``,
    when given, is updated by the communication thread.
    """
    from .nonblocking import submit

    return submit(comm, f"iallreduce({algorithm})", allreduce_in, vec, algorithm, quantizer,
                  quantize_sparse, stats, check, out)
