"""Numba kernels of packed messages (:mod:`sparcml._wire.packed`): pure, no MPI inside.

A *packed* buffer holds many messages of :mod:`sparcml._wire.codec` back to back, each padded
to 8 bytes as :meth:`~sparcml._wire.codec.Codec.encode` pads it. These kernels write the P
messages of a split in one call and read a received packed buffer in one call, where the
codec's Python functions take one call per message (several microseconds each: at P = 1,024
that was most of a rank's software time per allreduce). They write and read **exactly** the
bytes and values of the per-message functions; the tests compare them bitwise.

A message *table* (``int64[P, NCOLS]``) describes each message: its format, index code,
count, length, offset, where it starts, where its index section and its values start (byte
positions in the packed buffer) and its size. Typed views of the packed buffer
(``buf.view(index dtype)``, ``buf.view(value dtype)``; every section starts at a multiple of
8 bytes) are passed beside it: item ``at // itemsize`` of a view is the item at byte ``at``.

Over 400 lines: the writers and the readers share the table's columns and the header and
index-code rules (each written once here, as the codec writes them); apart, each half would
import the other's private layout helpers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._numba_cache import guard_numba_cache
from .index_kernels import bitmap_decode, bitmap_encode, ef_decode, ef_encode

guard_numba_cache()  # before any kernel is compiled (sparcml._numba_cache)

__all__ = ["NCOLS", "FMT", "CODE", "COUNT", "LENGTH", "OFFSET", "START", "IDX_AT", "VAL_AT",
           "NBYTES", "plan_messages", "block_nonzeros", "encode_sparse_split",
           "encode_dense_split", "scan_messages", "fold_dense", "gather_streams",
           "support_of", "assemble_dense", "assemble_sparse", "any_error_flag",
           "set_error_flags"]

_jit = njit(cache=True, nogil=True)

FMT, CODE, COUNT, LENGTH, OFFSET, START, IDX_AT, VAL_AT, NBYTES = range(9)
NCOLS = 9

_SPARSE, _DENSE = 0, 1
_RAW, _ELIAS_FANO, _BITMAP = 0, 1, 2
_SHORT_LIMIT = np.int64(1) << 32
_CODED_LENGTH_LIMIT = np.int64(1) << 59
_MAX_END = np.int64(2**63 - 1)  # offset + length must stay below 2**63


@_jit
def _pad8(n):
    return (n + 7) & ~np.int64(7)


@_jit
def _ef_low_bits(n, length):
    if n <= 0:
        return 0
    q = (length - n + 1) // n
    L = -1
    while q > 0:
        q >>= 1
        L += 1
    return max(L, 0)


@_jit
def _ef_bytes(n, length):
    L = _ef_low_bits(n, length)
    return (n * L + 7) // 8, (n + ((length - n) >> L) + 1 + 7) // 8


@_jit
def _index_layout(n, length, s_idx, coded, use_link, byte_s, index_s):
    """:func:`sparcml._wire.codec.index_layout`: ``(code, bytes before padding)``."""
    raw = n * s_idx
    code, best = _RAW, raw
    if not coded or n == 0 or length >= _CODED_LENGTH_LIMIT:
        return code, best
    bitmap = (length + 7) // 8
    if bitmap < best:
        code, best = _BITMAP, bitmap
    low, high = _ef_bytes(n, length)
    if low + high < best:
        code, best = _ELIAS_FANO, low + high
    if use_link and (raw - best) * byte_s <= n * index_s:
        return _RAW, raw
    return code, best


@_jit
def _header_size(count, length, offset):
    if count < _SHORT_LIMIT and length < _SHORT_LIMIT and offset < _SHORT_LIMIT:
        return 16
    return 40


@_jit
def plan_messages(counts, lengths, offsets, s_idx, s_val, coded, use_link, byte_s, index_s,
                  table):
    """Fill ``table`` (``P x NCOLS``) for the lossless messages of ``P`` parts (``counts[j]``
    items over ``lengths[j]`` entries from ``offsets[j]``), laid out back to back from byte
    0, by the codec's rules (the switch rule with raw sizes, the smallest index code, the
    short header where it fits); returns the total bytes."""
    item = s_idx + s_val
    at = np.int64(0)
    for j in range(counts.shape[0]):
        n, length, offset = counts[j], lengths[j], offsets[j]
        table[j, COUNT] = n
        table[j, LENGTH] = length
        table[j, OFFSET] = offset
        table[j, START] = at
        if length > 0 and n * item >= length * s_val:  # Codec.should_be_dense
            hdr = _header_size(length, length, offset)
            table[j, FMT] = _DENSE
            table[j, CODE] = _RAW
            table[j, COUNT] = length
            table[j, IDX_AT] = at + hdr
            table[j, VAL_AT] = at + hdr
            size = _pad8(hdr + length * s_val)
        else:
            code, used = _index_layout(n, length, s_idx, coded, use_link, byte_s, index_s)
            hdr = _header_size(n, length, offset)
            table[j, FMT] = _SPARSE
            table[j, CODE] = code
            table[j, IDX_AT] = at + hdr
            table[j, VAL_AT] = at + hdr + _pad8(used)
            size = _pad8(hdr + _pad8(used) + n * s_val)
        table[j, NBYTES] = size
        at += size
    return at


@_jit
def _put(buf, at, value, nbytes):
    for b in range(nbytes):
        buf[at + b] = np.uint8((value >> (8 * b)) & 0xFF)


@_jit
def _write_header(buf, table, j, s_idx, s_val):
    """:func:`sparcml._wire.header.write_header` of a lossless message of ``table``'s row j."""
    at = table[j, START]
    fmt, code = table[j, FMT], table[j, CODE]
    count, length, offset = table[j, COUNT], table[j, LENGTH], table[j, OFFSET]
    if _header_size(count, length, offset) == 16:
        buf[at] = 0x53
        buf[at + 1] = 0x73
        buf[at + 2] = np.uint8(fmt | (2 if s_idx == 8 else 0) | (4 if s_val == 8 else 0)
                               | (code << 4))
        buf[at + 3] = 0
        _put(buf, at + 4, count, 4)
        _put(buf, at + 8, length, 4)
        _put(buf, at + 12, offset, 4)
    else:
        _put(buf, at, np.int64(0x53505243), 4)
        buf[at + 4] = np.uint8(fmt)
        buf[at + 5] = np.uint8(s_idx)
        buf[at + 6] = np.uint8(s_val)
        buf[at + 7] = 0
        _put(buf, at + 8, np.int64(0), 4)
        _put(buf, at + 12, code, 4)
        _put(buf, at + 16, count, 8)
        _put(buf, at + 24, length, 8)
        _put(buf, at + 32, offset, 8)


@_jit
def _write_indices(buf, idx_view, table, j, indices):
    """The index section of sparse message j from ``indices`` (sorted, global)."""
    n, length, offset = table[j, COUNT], table[j, LENGTH], table[j, OFFSET]
    at, code = table[j, IDX_AT], table[j, CODE]
    if code == _RAW:
        base = at // idx_view.itemsize
        for i in range(n):
            idx_view[base + i] = indices[i]
    elif code == _BITMAP:
        bitmap_encode(indices, offset, buf[at:at + (length + 7) // 8])
    else:
        low, high = _ef_bytes(n, length)
        ef_encode(indices, offset, _ef_low_bits(n, length), buf[at:at + low],
                  buf[at + low:at + low + high])


@_jit
def encode_sparse_split(indices, values, pos, table, buf, idx_view, val_view):
    """Write the messages of ``table`` into ``buf`` (zeroed, ``table``'s total bytes) from a
    sparse vector cut at ``pos`` (part j is ``indices[pos[j]:pos[j+1]]``): a dense message
    holds its part scattered onto zeros (so ``-0.0`` becomes ``0.0``, as in ``Codec.encode``)."""
    s_idx, s_val = idx_view.itemsize, val_view.itemsize
    for j in range(table.shape[0]):
        _write_header(buf, table, j, s_idx, s_val)
        lo, hi = pos[j], pos[j + 1]
        vbase = table[j, VAL_AT] // s_val
        if table[j, FMT] == _DENSE:
            offset = table[j, OFFSET]
            for i in range(lo, hi):
                val_view[vbase + indices[i] - offset] += values[i]
        else:
            _write_indices(buf, idx_view, table, j, indices[lo:hi])
            val_view[vbase:vbase + hi - lo] = values[lo:hi]


@_jit
def block_nonzeros(values, bounds, out):
    """``out[j]``: the entries of ``values[bounds[j]:bounds[j+1]]`` that are not zero (NaN
    counts)."""
    for j in range(bounds.shape[0] - 1):
        n = 0
        for i in range(bounds[j], bounds[j + 1]):
            if values[i] != 0:
                n += 1
        out[j] = n


@_jit
def encode_dense_split(values, bounds, table, buf, idx_view, val_view, index_sample):
    """Write the messages of ``table`` into ``buf`` (zeroed) from a dense vector cut at
    ``bounds``: a sparse message holds its block's nonzeros (``Codec.encode`` of a dense part);
    ``index_sample``: a length-0 array of the index dtype."""
    s_idx, s_val = idx_view.itemsize, val_view.itemsize
    for j in range(table.shape[0]):
        _write_header(buf, table, j, s_idx, s_val)
        lo, hi = bounds[j], bounds[j + 1]
        vbase = table[j, VAL_AT] // s_val
        if table[j, FMT] == _DENSE:
            val_view[vbase:vbase + hi - lo] = values[lo:hi]
            continue
        n = table[j, COUNT]
        indices = np.empty(n, index_sample.dtype)
        k = 0
        for i in range(lo, hi):
            if values[i] != 0:
                indices[k] = i
                val_view[vbase + k] = values[i]
                k += 1
        _write_indices(buf, idx_view, table, j, indices)


@_jit
def _get(buf, at, nbytes):
    value = np.int64(0)
    for b in range(nbytes):
        value |= np.int64(buf[at + b]) << (8 * b)
    return value


@_jit
def scan_messages(buf, displs, sizes, s_idx, s_val, table):
    """Read the headers of the messages ``buf[displs[j]:displs[j] + sizes[j]]`` into ``table``
    and check them as :func:`sparcml._wire.codec.decode` does, and more: lossless, of the
    given item sizes, 8-byte aligned. Returns -1 when every message passed, else the first j
    that did not (the caller decodes that one message by message, which reports what is
    wrong or handles what is not for these kernels)."""
    for j in range(displs.shape[0]):
        at, n = displs[j], sizes[j]
        if at % 8 != 0 or n % 8 != 0 or at < 0 or at + n > buf.shape[0]:
            return j
        if n >= 16 and buf[at] == 0x53 and buf[at + 1] == 0x73:
            flags = np.int64(buf[at + 2])
            if flags & 0xC0 or buf[at + 3] != 0:
                return j
            fmt = flags & 1
            index_size = 8 if flags & 2 else 4
            value_size = 8 if flags & 4 else 4
            code = (flags >> 4) & 3
            count, length, offset = _get(buf, at + 4, 4), _get(buf, at + 8, 4), \
                _get(buf, at + 12, 4)
            hdr = 16
        elif n >= 40 and _get(buf, at, 4) == 0x53505243:
            if buf[at + 7] & ~np.uint8(2):  # quantized values (or unknown bits): not here
                return j
            fmt = np.int64(buf[at + 4])
            index_size, value_size = np.int64(buf[at + 5]), np.int64(buf[at + 6])
            code = _get(buf, at + 12, 4)
            count, length, offset = _get(buf, at + 16, 8), _get(buf, at + 24, 8), \
                _get(buf, at + 32, 8)
            hdr = 40
        else:
            return j
        if value_size != s_val or (fmt != _SPARSE and fmt != _DENSE):
            return j
        if count < 0 or length < 0 or offset < 0 or offset > _MAX_END - length - 1:
            return j
        if (fmt == _DENSE and count != length) or count > length:
            return j
        start = at + hdr
        table[j, IDX_AT] = start
        if fmt == _SPARSE:
            if index_size != s_idx or code < 0 or code > 2:
                return j
            if code != _RAW and (count == 0 or length >= _CODED_LENGTH_LIMIT):
                return j
            if s_idx == 4 and offset + length > (np.int64(1) << 31):
                return j
            if code == _RAW:
                used = count * s_idx
            elif code == _BITMAP:
                used = (length + 7) // 8
            else:
                low, high = _ef_bytes(count, length)
                used = low + high
            start += _pad8(used)
        elif code != _RAW:
            return j
        if start + count * s_val > at + n:
            return j
        table[j, FMT] = fmt
        table[j, CODE] = code
        table[j, COUNT] = count
        table[j, LENGTH] = length
        table[j, OFFSET] = offset
        table[j, START] = at
        table[j, VAL_AT] = start
        table[j, NBYTES] = n
    return -1


@_jit
def _decode_coded(buf, table, j, out):
    """The coded indices of sparse message j into ``out`` (``count`` items); returns ``count``
    or a negative code (:mod:`sparcml._wire.index_kernels`)."""
    n, length, offset = table[j, COUNT], table[j, LENGTH], table[j, OFFSET]
    at = table[j, IDX_AT]
    if table[j, CODE] == _BITMAP:
        return bitmap_decode(buf[at:at + (length + 7) // 8], n, offset, length, out)
    low, high = _ef_bytes(n, length)
    return ef_decode(buf[at:at + low], buf[at + low:at + low + high], n,
                     _ef_low_bits(n, length), offset, length, out)


@_jit
def fold_dense(buf, table, idx_view, val_view, acc, offset):
    """``acc`` (``length`` values from ``offset``) += every message of ``table``, in order, as
    :func:`sparcml._collectives.arith.fold_parts` adds parts into a dense block. Returns -1, or
    the first j whose message does not fit the block or whose coded indices do not decode
    (``acc`` is then partly summed; the caller starts again message by message)."""
    s_idx, s_val = idx_view.itemsize, val_view.itemsize
    length = acc.shape[0]
    scratch = np.empty(0, idx_view.dtype)
    for j in range(table.shape[0]):
        n = table[j, COUNT]
        vbase = table[j, VAL_AT] // s_val
        if table[j, FMT] == _DENSE:
            if n != length:
                return j
            acc += val_view[vbase:vbase + n]
            continue
        if table[j, CODE] == _RAW:
            ibase = table[j, IDX_AT] // s_idx
            for i in range(n):
                p = np.int64(idx_view[ibase + i]) - offset
                if p < 0 or p >= length:
                    return j
            for i in range(n):
                acc[np.int64(idx_view[ibase + i]) - offset] += val_view[vbase + i]
        else:
            if scratch.shape[0] < n:
                scratch = np.empty(n, idx_view.dtype)
            if _decode_coded(buf, table, j, scratch[:n]) != n:
                return j
            for i in range(n):
                p = np.int64(scratch[i]) - offset
                if p < 0 or p >= length:
                    return j
            for i in range(n):
                acc[np.int64(scratch[i]) - offset] += val_view[vbase + i]
    return -1


@_jit
def gather_streams(buf, table, idx_view, val_view, starts, cat_idx, cat_val):
    """Concatenate the sparse messages of ``table`` (indices decoded) into ``cat_idx`` /
    ``cat_val`` from ``starts[j]`` (``np.concatenate`` of the decoded parts). Returns -1 or
    the first j whose coded indices do not decode."""
    s_idx, s_val = idx_view.itemsize, val_view.itemsize
    for j in range(table.shape[0]):
        n = table[j, COUNT]
        at = starts[j]
        vbase = table[j, VAL_AT] // s_val
        if table[j, CODE] == _RAW:
            ibase = table[j, IDX_AT] // s_idx
            cat_idx[at:at + n] = idx_view[ibase:ibase + n]
        elif _decode_coded(buf, table, j, cat_idx[at:at + n]) != n:
            return j
        cat_val[at:at + n] = val_view[vbase:vbase + n]
    return -1


@_jit
def support_of(table, val_view):
    """Entries of the blocks of ``table`` that :func:`sparcml._collectives.arith.assemble`
    counts: a sparse message's items, a dense one's values that are not zero."""
    s_val = val_view.itemsize
    total = np.int64(0)
    for j in range(table.shape[0]):
        n = table[j, COUNT]
        if table[j, FMT] == _DENSE:
            vbase = table[j, VAL_AT] // s_val
            for i in range(n):
                if val_view[vbase + i] != 0:
                    total += 1
        else:
            total += n
    return total


@_jit
def assemble_dense(buf, table, idx_view, val_view, out):
    """``out`` (zeroed, the whole vector) with every block of ``table`` written into place, as
    ``assemble`` does (assignment, not addition). Returns -1, or the first j whose block lies
    outside ``out`` or whose coded indices do not decode."""
    s_idx, s_val = idx_view.itemsize, val_view.itemsize
    dim = out.shape[0]
    scratch = np.empty(0, idx_view.dtype)
    for j in range(table.shape[0]):
        n, offset = table[j, COUNT], table[j, OFFSET]
        vbase = table[j, VAL_AT] // s_val
        if table[j, FMT] == _DENSE:
            if offset + n > dim:
                return j
            out[offset:offset + n] = val_view[vbase:vbase + n]
            continue
        if table[j, CODE] == _RAW:
            ibase = table[j, IDX_AT] // s_idx
            for i in range(n):
                p = np.int64(idx_view[ibase + i])
                if p < 0 or p >= dim:
                    return j
            for i in range(n):
                out[np.int64(idx_view[ibase + i])] = val_view[vbase + i]
        else:
            if scratch.shape[0] < n:
                scratch = np.empty(n, idx_view.dtype)
            if _decode_coded(buf, table, j, scratch[:n]) != n:
                return j
            for i in range(n):
                if scratch[i] >= dim:
                    return j
            for i in range(n):
                out[np.int64(scratch[i])] = val_view[vbase + i]
    return -1


@_jit
def assemble_sparse(buf, table, idx_view, val_view, out_idx, out_val):
    """The blocks of ``table`` concatenated into ``out_idx`` / ``out_val`` (room for
    :func:`support_of` items), a dense block as its nonzeros. Returns -1, or the first j whose
    coded indices do not decode."""
    s_idx, s_val = idx_view.itemsize, val_view.itemsize
    pos = 0
    for j in range(table.shape[0]):
        n, offset = table[j, COUNT], table[j, OFFSET]
        vbase = table[j, VAL_AT] // s_val
        if table[j, FMT] == _DENSE:
            for i in range(n):
                v = val_view[vbase + i]
                if v != 0:
                    out_idx[pos] = offset + i
                    out_val[pos] = v
                    pos += 1
            continue
        if table[j, CODE] == _RAW:
            ibase = table[j, IDX_AT] // s_idx
            out_idx[pos:pos + n] = idx_view[ibase:ibase + n]
        elif _decode_coded(buf, table, j, out_idx[pos:pos + n]) != n:
            return j
        out_val[pos:pos + n] = val_view[vbase:vbase + n]
        pos += n
    return -1


@_jit
def any_error_flag(buf, displs, sizes):
    """Whether any message ``buf[displs[j]:displs[j] + sizes[j]]`` carries the header's error
    flag (:func:`sparcml._wire.header.has_error_flag` of each)."""
    for j in range(displs.shape[0]):
        at, n = displs[j], sizes[j]
        if n >= 16 and buf[at] == 0x53 and buf[at + 1] == 0x73:
            if buf[at + 2] & 0x08:
                return True
        elif n >= 40 and buf[at] == 0x43:
            if buf[at + 7] & 0x02:
                return True
    return False


@_jit
def set_error_flags(buf, table):
    """Set the error flag of every message of ``table`` in ``buf``
    (:func:`sparcml._wire.header.set_error_flag` of each)."""
    for j in range(table.shape[0]):
        at = table[j, START]
        if buf[at] == 0x53:
            buf[at + 2] |= 0x08
        else:
            buf[at + 7] |= 0x02
