"""Local arithmetic of the algorithms: adding vectors and parts by the switch rule.

Package-internal, no MPI. Every function keeps the representation the switch rule asks for
(:meth:`sparcml._wire.codec.Codec.should_be_dense`) and adds in a fixed order, so that ranks that add
the same operands get bitwise the same result.

Memory (:mod:`sparcml._runtime.workspace`): :func:`add` and :func:`fold_parts` take the context's
workspace as ``workspace=``; :func:`fold_parts` always gathers the streams it merges there.
With ``intermediate=True`` the caller also lets the *result* live in the workspace, in the
buffers of ``role``: it promises to drop the result before the role's next use and never to
hand it to the user (nor keep it in ``sent``). So the last step of an algorithm is never
``intermediate``, and a step that reads the previous step's result uses another role (two
roles, alternating). Without a workspace everything is freshly allocated; the results are
bitwise the same either way. :func:`assemble` writes each block straight into the result.
"""

from __future__ import annotations

import numpy as np

from .._vector import SparseVector
from .._wire.codec import Codec, Part, decode
from .._wire.packed import scan, typed_views
from .._runtime.workspace import Workspace
from .._lazy import lazy_module
pk = lazy_module("sparcml._wire.packed_kernels")
kernels = lazy_module("sparcml._kernels")

__all__ = ["normalize", "add", "fold_parts", "fold_packed", "assemble", "assemble_packed",
           "write_dense", "copy_of", "as_part", "PAIRWISE_FOLD_MAX"]

# Up to this many sparse streams, fold_parts sums them by successive two-way merges, above by
# a heap merge: measured on 168k entries in S equal streams, 0.4 / 0.8 / 1.6 / 3.2 ms two-way
# against 1.5 / 1.8 / 2.6 / 3.5 ms heap at S = 2 / 4 / 8 / 16 (the same bits).
PAIRWISE_FOLD_MAX = 8


def normalize(vec: SparseVector, codec: Codec) -> SparseVector:
    """The representation the switch rule asks for (dense-backed iff the rule fires)."""
    if vec.is_dense:
        if codec.should_be_dense(vec.count_nonzero(), vec.dim):
            return vec
        return vec.to_sparse()
    if codec.should_be_dense(vec.nnz, vec.dim):
        return SparseVector.unchecked(vec.dim, None, vec.to_dense())
    return vec


def add(a: SparseVector, b: SparseVector, codec: Codec, *, workspace: Workspace | None = None,
        intermediate: bool = False, role: str = "add") -> SparseVector:
    """``a + b`` in the representation of the rule; bitwise equal to ``b + a``.

    With ``intermediate`` (and a ``workspace``) the sum lives in the workspace's ``role``
    buffers, which must not hold ``a`` or ``b``; see the module docstring.
    """
    ws = workspace if intermediate else None
    if a.is_dense and b.is_dense:
        if ws is None:
            return SparseVector.unchecked(a.dim, None, a.values + b.values)
        out = ws.get(role + ".dense", a.dim, np.result_type(a.values, b.values))
        return SparseVector.unchecked(a.dim, None, np.add(a.values, b.values, out=out))
    if a.is_dense or b.is_dense:
        dense, sparse = (a, b) if a.is_dense else (b, a)
        if ws is None:
            out = dense.values.copy()
        else:
            out = ws.get(role + ".dense", a.dim, dense.values.dtype)
            np.copyto(out, dense.values)
        kernels.scatter_add(out, sparse.indices, sparse.values, 0)
        return SparseVector.unchecked(a.dim, None, out)
    size = a.nnz + b.nnz
    if ws is not None:
        idx, val = ws.pair(role, size, a.indices.dtype, a.values.dtype)
    else:
        idx = np.empty(size, a.indices.dtype)
        val = np.empty(size, a.values.dtype)
    n = kernels.merge_add_into(a.indices, a.values, b.indices, b.values, idx, val)
    idx, val = idx[:n], val[:n]
    if codec.should_be_dense(n, a.dim):
        out = np.zeros(a.dim, a.dtype) if ws is None else ws.zeros(role + ".dense", a.dim, a.dtype)
        kernels.scatter_add(out, idx, val, 0)
        return SparseVector.unchecked(a.dim, None, out)
    return SparseVector.unchecked(a.dim, idx, val)


def fold_parts(parts: list[Part], offset: int, length: int, codec: Codec,
               force_dense: bool = False, *, workspace: Workspace | None = None,
               intermediate: bool = False, role: str = "fold") -> Part:
    """Sum parts of one index range in list order; dense when any part is, or when forced.

    With a ``workspace`` the streams to merge are gathered in it; with ``intermediate`` too,
    the sum lives in its ``role`` buffers (see the module docstring).
    """
    value_dtype, index_dtype = codec.value_dtype, codec.index_dtype
    ws = workspace if intermediate else None
    if force_dense or any(p.is_dense for p in parts):
        acc = _zeros(length, value_dtype, ws, role)
        for p in parts:
            if p.is_dense:
                acc += p.values
            else:
                kernels.scatter_add(acc, p.indices, p.values, offset)
        return Part(offset, length, None, acc)
    counts = np.array([0] + [p.nnz for p in parts], np.int64)
    offsets = np.cumsum(counts)
    total = int(offsets[-1])
    if total == 0:
        return Part(offset, length, np.empty(0, index_dtype), np.empty(0, value_dtype))
    if len(parts) <= PAIRWISE_FOLD_MAX and len({(p.indices.dtype, p.values.dtype)
                                                for p in parts}) == 1:
        idx, val = _fold_pairwise(parts, total, ws, role)
    else:
        idx, val = _fold_heap(parts, offsets, total, workspace, ws, role)
    return _by_rule(idx, val, offset, length, codec, ws, role)


def _zeros(length: int, dtype, ws: Workspace | None, role: str) -> np.ndarray:
    """A zeroed dense block: fresh, or the ``role`` buffer of the workspace ``ws``."""
    return np.zeros(length, dtype) if ws is None else ws.zeros(role + ".dense", length, dtype)


def _by_rule(idx, val, offset, length, codec, ws, role) -> Part:
    """A summed stream as the part the switch rule asks for (scattered into a dense block
    when it crosses the rule)."""
    if codec.should_be_dense(idx.shape[0], length):
        acc = _zeros(length, codec.value_dtype, ws, role)
        kernels.scatter_add(acc, idx, val, offset)
        return Part(offset, length, None, acc)
    return Part(offset, length, idx, val)


def _fold_pairwise(parts, total, ws, role):
    """``((s0 + s1) + s2) + ...`` by two-way merges into two alternating buffers (the last
    into the ``role`` buffers): bitwise the heap merge's sum, 2-4x faster for few streams
    (branch-free merges; see :data:`PAIRWISE_FOLD_MAX`)."""
    idx_dtype, val_dtype = parts[0].indices.dtype, parts[0].values.dtype
    if ws is None:
        bufs = [(np.empty(total, idx_dtype), np.empty(total, val_dtype)) for _ in range(2)]
    else:
        bufs = [ws.pair(role, total, idx_dtype, val_dtype),
                ws.pair(role + ".pairwise", total, idx_dtype, val_dtype)]
    a_idx, a_val = parts[0].indices, parts[0].values
    if len(parts) == 1:
        out_idx, out_val = bufs[0]
        out_idx[:total] = a_idx
        out_val[:total] = a_val
        return out_idx[:total], out_val[:total]
    merges = len(parts) - 1
    for m, p in enumerate(parts[1:]):
        out_idx, out_val = bufs[(merges - 1 - m) % 2]  # the last merge writes bufs[0]
        n = kernels.merge_add_into(a_idx, a_val, p.indices, p.values, out_idx, out_val)
        a_idx, a_val = out_idx[:n], out_val[:n]
    return a_idx, a_val


def _fold_heap(parts, offsets, total, workspace, ws, role):
    """The k-way heap merge of many streams (O(total log S))."""
    if workspace is None:
        cat_idx = np.concatenate([p.indices for p in parts])
        cat_val = np.concatenate([p.values for p in parts])
    else:  # the same arrays np.concatenate would make, in the workspace
        cat_idx, cat_val = workspace.pair(
            role + ".streams", total, np.result_type(*[p.indices for p in parts]),
            np.result_type(*[p.values for p in parts]))
        np.concatenate([p.indices for p in parts], out=cat_idx)
        np.concatenate([p.values for p in parts], out=cat_val)
    if ws is None:
        idx, val = np.empty(total, cat_idx.dtype), np.empty(total, cat_val.dtype)
    else:
        idx, val = ws.pair(role, total, cat_idx.dtype, cat_val.dtype)
    n = kernels.merge_many_into(offsets, cat_idx, cat_val, idx, val)
    return idx[:n], val[:n]


def _decoded(buf, displs, sizes) -> list[Part]:
    """The messages of a packed buffer decoded one by one (what the packed kernels replace; it
    reports a corrupt message as :func:`~sparcml._wire.codec.decode` does)."""
    return [decode(buf[int(d):int(d) + int(n)]) for d, n in zip(displs, sizes)]


def fold_packed(buf: np.ndarray, displs: np.ndarray, sizes: np.ndarray, offset: int,
                length: int, codec: Codec, force_dense: bool = False, *,
                workspace: Workspace | None = None, intermediate: bool = False,
                role: str = "fold") -> Part:
    """:func:`fold_parts` of the messages ``buf[displs[j]:displs[j] + sizes[j]]`` (a packed
    receive buffer, :mod:`sparcml._wire.packed`), bitwise, without decoding them one by one:
    one kernel reads every header, one sums. Messages the kernels do not read (quantized, or
    not well formed) go through :func:`fold_parts` of their decodings."""
    def per_message() -> Part:
        return fold_parts(_decoded(buf, displs, sizes), offset, length, codec, force_dense,
                          workspace=workspace, intermediate=intermediate, role=role)

    table, _ = scan(buf, displs, sizes, codec)
    if table is None:
        return per_message()
    value_dtype, index_dtype = codec.value_dtype, codec.index_dtype
    ws = workspace if intermediate else None
    idx_view, val_view = typed_views(buf, codec)
    fmt, counts = table[:, pk.FMT], table[:, pk.COUNT]
    if force_dense or fmt.any():
        acc = _zeros(length, value_dtype, ws, role)
        if pk.fold_dense(buf, table, idx_view, val_view, acc, offset) >= 0:
            return per_message()
        return Part(offset, length, None, acc)
    offsets = np.zeros(counts.shape[0] + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return Part(offset, length, np.empty(0, index_dtype), np.empty(0, value_dtype))
    if workspace is None:
        cat_idx, cat_val = np.empty(total, index_dtype), np.empty(total, value_dtype)
    else:
        cat_idx, cat_val = workspace.pair(role + ".streams", total, index_dtype, value_dtype)
    if pk.gather_streams(buf, table, idx_view, val_view, offsets, cat_idx, cat_val) >= 0:
        return per_message()
    if ws is None:
        idx, val = np.empty(total, index_dtype), np.empty(total, value_dtype)
    else:
        idx, val = ws.pair(role, total, index_dtype, value_dtype)
    n = kernels.merge_many_into(offsets, cat_idx, cat_val, idx, val)
    return _by_rule(idx[:n], val[:n], offset, length, codec, ws, role)


def assemble_packed(buf: np.ndarray, displs: np.ndarray, sizes: np.ndarray, dim: int,
                    codec: Codec) -> SparseVector:
    """:func:`assemble` of the blocks ``buf[displs[j]:displs[j] + sizes[j]]`` (a packed
    allgather buffer), bitwise, in three kernel calls whatever the number of blocks; blocks
    the kernels do not read go through :func:`assemble` of their decodings."""
    def per_message() -> SparseVector:
        return assemble(_decoded(buf, displs, sizes), dim, codec)

    table, _ = scan(buf, displs, sizes, codec)
    if table is None:
        return per_message()
    idx_view, val_view = typed_views(buf, codec)
    support = int(pk.support_of(table, val_view))
    if codec.should_be_dense(support, dim):
        out = np.zeros(dim, codec.value_dtype)
        if pk.assemble_dense(buf, table, idx_view, val_view, out) >= 0:
            return per_message()
        return SparseVector.unchecked(dim, None, out)
    idx = np.empty(support, codec.index_dtype)
    val = np.empty(support, codec.value_dtype)
    if pk.assemble_sparse(buf, table, idx_view, val_view, idx, val) >= 0:
        return per_message()
    return SparseVector.unchecked(dim, idx, val)


def assemble(blocks: list[Part], dim: int, codec: Codec) -> SparseVector:
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
        return SparseVector.unchecked(dim, None, out)
    # every block written straight into its place in the result: no per-block temporaries
    idx = np.empty(support, index_dtype)
    val = np.empty(support, np.result_type(*[b.values for b in blocks]))
    pos = 0
    for b in blocks:
        if b.is_dense:
            pos += kernels.dense_to_sparse_into(b.values, b.offset, idx[pos:], val[pos:])
        else:
            idx[pos:pos + b.nnz] = b.indices
            val[pos:pos + b.nnz] = b.values
            pos += b.nnz
    return SparseVector.unchecked(dim, idx, val)


def write_dense(vec: SparseVector, out: np.ndarray) -> np.ndarray:
    """``out[:] = vec`` (every entry, zeros included); returns ``out``."""
    if vec.is_dense:
        if vec.values is not out:
            np.copyto(out, vec.values)
    else:
        out.fill(0)
        out[vec.indices] = vec.values
    return out


def copy_of(vec: SparseVector) -> SparseVector:
    """A vector that shares no memory with ``vec``."""
    return SparseVector.unchecked(vec.dim, None if vec.is_dense else vec.indices.copy(),
                                 vec.values.copy())


def as_part(vec: SparseVector) -> Part:
    """The whole vector as one part of ``[0, dim)`` (no copy)."""
    return Part(0, vec.dim, vec.indices, vec.values)
