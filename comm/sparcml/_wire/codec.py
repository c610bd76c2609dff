"""Wire format: one contiguous byte buffer per message, sent with mpi4py's buffer interface.

Layout: a header, then the indices (sparse messages only, padded to 8 bytes), then the values:
raw, or a QSGD encoding (float32 scales, then packed codes). The total is padded to 8 bytes so
that buffers gathered back to back stay aligned. Header fields: magic, format (sparse or
dense), index and value item sizes, whether values are quantized and the quantizer's code, the
index code, the item count, the length of the index range the message covers, and its offset
(the global index of a dense block's first value). Indices in sparse messages are global.

The header (:mod:`sparcml._wire.header`) takes a 16-byte short form for most lossless messages
and a 40-byte long one otherwise.

The indices of a sparse message travel in the smallest of three codes (``index_code``), chosen
per message from its count and range alone (no scan): ``RAW`` (the index dtype's items),
``ELIAS_FANO`` (gaps, bit-packed: about ``2 + log2(length / count)`` bits per index) or
``BITMAP`` (one bit per position of the range); see :mod:`sparcml._wire.index_kernels`. The coding is
lossless and transparent: :func:`decode` gives the same sorted index array whatever the code
(decoded indices are then a new array, raw ones a view of the buffer). A call's
``Options(index_coding="raw")`` sends raw indices only (for measuring the difference;
receivers read any code). The dense/sparse switch rule keeps
the raw item size: it decides the representation of partial sums and results too, which the
coding of the bytes on the wire must not change.

A :class:`Codec` holds what a call's messages share (dtypes, quantizer) and applies the switch
rule per message with the sizes that message would really have on the wire.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .._errors import SparcmlError
from .._options import CallOptions, Options
from .header import (BITMAP, DENSE, ELIAS_FANO, HEADER, HEADER_SIZE, RAW, SHORT_HEADER,
                     SHORT_HEADER_SIZE, SPARSE, Header, header_size, read_header, write_header)
from .._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")
index_kernels = lazy_module("sparcml._wire.index_kernels")

__all__ = ["HEADER", "HEADER_SIZE", "SHORT_HEADER", "SHORT_HEADER_SIZE", "Header",
           "header_size", "read_header", "SPARSE", "DENSE", "RAW", "ELIAS_FANO", "BITMAP",
           "Part", "Codec", "RAW_INDICES", "decode", "index_layout",
           "index_section_nbytes"]

_CODED_LENGTH_LIMIT = 1 << 59  # longer ranges travel raw (keeps the decoders' shifts in int64)

_VALUE_BY_SIZE = {4: np.dtype(np.float32), 8: np.dtype(np.float64)}
_INDEX_BY_SIZE = {4: np.dtype(np.int32), 8: np.dtype(np.int64)}


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def index_section_nbytes(code: int, count: int, length: int, index_size: int) -> int:
    """Bytes (before padding) of the indices of a sparse message in ``code``."""
    if code == RAW:
        return count * index_size
    if code == BITMAP:
        return index_kernels.bitmap_nbytes(length)
    return sum(index_kernels.ef_nbytes(count, length))


def index_layout(count: int, length: int, index_size: int, coded: bool = True,
                 byte_seconds: float | None = None, index_seconds: float = 0.0
                 ) -> tuple[int, int]:
    """``(index code, bytes before padding)`` of the indices of a sparse message of ``count``
    items over a range of ``length``: the smallest code (ties: raw, then the bitmap, which
    decodes faster), ``RAW`` only when not ``coded``. With ``byte_seconds`` (the link's time
    per byte), a code only when the link time of the bytes it saves exceeds its encode and
    decode time, ``count * index_seconds``; else raw (on shared memory, raw is faster)."""
    raw = (RAW, count * index_size)
    best = raw
    if not coded or count == 0 or length >= _CODED_LENGTH_LIMIT:
        return best
    bitmap = index_kernels.bitmap_nbytes(length)
    if bitmap < best[1]:
        best = (BITMAP, bitmap)
    low, high = index_kernels.ef_nbytes(count, length)
    if low + high < best[1]:
        best = (ELIAS_FANO, low + high)
    if byte_seconds is not None and (raw[1] - best[1]) * byte_seconds <= count * index_seconds:
        return raw
    return best


@dataclass
class Part:
    """A decoded message: the index range ``[offset, offset + length)`` of a vector.

    Sparse: ``indices`` (global, sorted) and ``values``. Dense: ``indices is None`` and ``values``
    holds all ``length`` values of the range. Arrays are views into the received buffer (or, for
    quantized messages, the decoded values; for coded indices, the decoded indices).
    """

    offset: int
    length: int
    indices: np.ndarray | None
    values: np.ndarray

    @property
    def is_dense(self) -> bool:
        return self.indices is None

    @property
    def nnz(self) -> int:
        return self.length if self.indices is None else self.indices.shape[0]


_DEFAULT = CallOptions()
RAW_INDICES = CallOptions.of(Options(index_coding="raw"))  # a codec's options: indices raw


class Codec:
    """Encodes parts for one collective call: dtypes, quantizer, and the per-message rule.

    ``quantizer`` (a :class:`~sparcml.QSGD` or None) quantizes the values of dense messages,
    and of sparse messages too when ``quantize_sparse``. The switch rule compares the bytes the
    two encodings take: a sparse item ``s_idx + s_val``, a dense entry ``s_val``, with ``s_val``
    the quantized size when *both* kinds are quantized. When only dense messages are, the rule
    keeps the full-precision sizes: quantizing is then a saving on messages that are dense
    anyway, not a reason to densify sparse ones (which would cost an O(length) encode to carry
    a few values).

    ``options``: the call's resolved options (:class:`~sparcml._options.CallOptions`, made at
    the entry point by :func:`sparcml._model.link_costs.call_options`; default: the
    :class:`~sparcml.Options` defaults, coded whenever smaller), which the algorithms and
    exchanges read here (``codec.options``: partitions, native phases). Of them the codec
    applies ``code_indices`` (send sparse indices in the smallest code, see the module
    docstring; not with ``index_coding="raw"``) and ``link_costs`` (``(seconds per byte of the
    links, seconds to encode and decode an index)``: code a message's indices only where the
    link time saved exceeds the coding time, :func:`index_layout`; None: whenever the code is
    smaller), copied into the attributes of those names.
    """

    __slots__ = ("index_dtype", "value_dtype", "quantizer", "quantize_sparse", "seed", "_item",
                 "_entry", "code_indices", "link_costs", "options")

    def __init__(self, index_dtype, value_dtype, quantizer=None, quantize_sparse: bool = False,
                 seed: int = 0, options: CallOptions | None = None):
        self.index_dtype = np.dtype(index_dtype)
        self.value_dtype = np.dtype(value_dtype)
        self.quantizer = quantizer
        self.quantize_sparse = bool(quantize_sparse and quantizer is not None)
        self.seed = seed  # random seed common to all ranks of the call (for shared streams)
        s_val = self.value_dtype.itemsize
        s_q = s_val if quantizer is None else quantizer.bits / 8 + 4 / quantizer.bucket_size
        self._item = self.index_dtype.itemsize + (s_q if self.quantize_sparse else s_val)
        self._entry = s_q if self.quantize_sparse else s_val
        if options is None:
            options = _DEFAULT
        self.options = options
        self.code_indices = options.code_indices
        self.link_costs = options.link_costs  # (s per byte, s per coded index): index_layout

    def lossless(self) -> "Codec":
        """The same codec without quantization."""
        return self if self.quantizer is None else Codec(self.index_dtype, self.value_dtype,
                                                         options=self.options)

    @property
    def lossy(self) -> bool:
        """True when messages are quantized: a sender must use what it sent, decoded."""
        return self.quantizer is not None

    def message_bound(self, items: int, length: int) -> int:
        """Bytes that bound a lossless message of at most ``items`` entries over a range of
        ``length`` (the encoder sends the smaller of the sparse and the dense form; either
        header, the index section's padding and the total's): what a receive buffer or a
        shared-memory slot must hold without knowing the message first."""
        s_idx, s_val = self.index_dtype.itemsize, self.value_dtype.itemsize
        return HEADER_SIZE + 32 + _pad8(min(items * (s_idx + s_val), length * s_val))

    def should_be_dense(self, nnz: int, length: int) -> bool:
        """The switch rule for a message (or stream) of ``nnz`` items over ``length`` entries."""
        return length > 0 and nnz * self._item >= length * self._entry

    def wire_item_bytes(self, nnz: int, length: int) -> float:
        """Bytes per item of a sparse message of ``nnz`` items over ``length`` on the wire
        (indices in their code, values as sent; headers and padding aside)."""
        if nnz <= 0:
            return float(self._item)
        _, idx = self._layout(int(nnz), int(length))
        return idx / nnz + self._item - self.index_dtype.itemsize

    def _layout(self, count: int, length: int) -> tuple[int, int]:
        byte_s, index_s = (None, 0.0) if self.link_costs is None else self.link_costs
        return index_layout(count, length, self.index_dtype.itemsize, self.code_indices,
                            byte_s, index_s)

    def _values_nbytes(self, n: int, quantized: bool) -> int:
        return self.quantizer.encoded_nbytes(n) if quantized else n * self.value_dtype.itemsize

    def _write_values(self, buf, start, values, quantized, seed):
        if quantized:
            self.quantizer.encode(values, out=buf[start:start + self.quantizer.encoded_nbytes(
                values.shape[0])], seed=seed)
        else:
            buf[start:start + values.nbytes].view(self.value_dtype)[:] = values

    def _header(self, buf, fmt, quantized, count, length, offset, index_code=RAW) -> int:
        """Write the header; returns its size."""
        return write_header(buf, fmt, self.index_dtype.itemsize, self.value_dtype.itemsize,
                            self.quantizer.code if quantized else None, count, length, offset,
                            index_code)

    def dense_nbytes(self, n: int, offset: int = 0) -> int:
        """Bytes of the dense message of ``n`` entries from ``offset`` (what
        :meth:`encode_dense` writes)."""
        quantized = self.quantizer is not None
        return _pad8(header_size(quantized, n, n, offset) + self._values_nbytes(n, quantized))

    def encode_dense(self, values: np.ndarray, offset: int, *, seed: int | None = None,
                     out: np.ndarray | None = None) -> np.ndarray:
        """The dense message of ``values`` (entries ``offset...``), into ``out`` when given
        (``dense_nbytes(len(values), offset)`` uint8, e.g. this rank's slot of a receive
        buffer)."""
        quantized = self.quantizer is not None
        n = values.shape[0]
        start = header_size(quantized, n, n, offset)
        used = start + self._values_nbytes(n, quantized)
        nbytes = _pad8(used)  # dense_nbytes(n, offset)
        if out is None:
            out = np.zeros(nbytes, np.uint8)
        else:
            if out.dtype != np.uint8 or out.shape != (nbytes,):
                raise SparcmlError(f"encode_dense: out must be {nbytes} uint8, got {out.dtype} "
                                   f"of shape {out.shape}")
            out[used:] = 0  # the padding: the same bytes on every run
        self._header(out, DENSE, quantized, n, n, offset)
        self._write_values(out, start, values, quantized, seed)
        return out

    def encode(self, part: Part, *, known_dense: bool = False,
               seed: int | None = None) -> tuple[np.ndarray, bool]:
        """Encode a part in the cheaper of the two representations (the rule, per message).

        Returns ``(buffer, is_dense)``. A sparse part whose nnz crosses the rule is scattered
        into a dense block; a dense part with few nonzeros is sent sparse, unless
        ``known_dense`` says its support is known to cross the rule (skips the O(length) count).
        ``seed``: the quantizer's random stream for this message (ranks that send the same data
        pass the same seed, so that they send the same message); default: the quantizer's own.
        """
        if part.indices is None:
            if known_dense or self.should_be_dense(kernels.count_nonzero(part.values),
                                                   part.length):
                return self.encode_dense(part.values, part.offset, seed=seed), True
            idx, val = kernels.dense_to_sparse(part.values, part.offset,
                                               np.empty(0, self.index_dtype))
            part = Part(part.offset, part.length, idx, val)
        n = part.indices.shape[0]
        if self.should_be_dense(n, part.length):
            block = np.zeros(part.length, self.value_dtype)
            kernels.scatter_add(block, part.indices, part.values, part.offset)
            return self.encode_dense(block, part.offset, seed=seed), True
        quantized = self.quantize_sparse
        code, used = self._layout(n, part.length)
        idx_bytes = _pad8(used)
        start = header_size(quantized, n, part.length, part.offset)
        buf = np.zeros(_pad8(start + idx_bytes + self._values_nbytes(n, quantized)), np.uint8)
        self._header(buf, SPARSE, quantized, n, part.length, part.offset, code)
        section = buf[start:start + used]
        if code == RAW:
            section.view(self.index_dtype)[:] = part.indices
        elif code == BITMAP:
            index_kernels.bitmap_encode(part.indices, part.offset, section)
        else:
            low, _ = index_kernels.ef_nbytes(n, part.length)
            index_kernels.ef_encode(part.indices, part.offset,
                                    index_kernels.ef_low_bits(n, part.length), section[:low],
                                    section[low:])
        self._write_values(buf, start + idx_bytes, part.values, quantized, seed)
        return buf, False


def _decode_indices(section, code, count, offset, length, index_dtype) -> np.ndarray:
    out = np.empty(count, index_dtype)
    if code == BITMAP:
        got = index_kernels.bitmap_decode(section, count, offset, length, out)
    else:
        low, _ = index_kernels.ef_nbytes(count, length)
        got = index_kernels.ef_decode(section[:low], section[low:], count,
                                      index_kernels.ef_low_bits(count, length), offset, length,
                                      out)
    if got != count:
        what = {index_kernels.BAD_COUNT: f"not {count} indices",
                index_kernels.BAD_ORDER: "indices not strictly increasing",
                index_kernels.BAD_RANGE: "an index outside the message's range"}[got]
        raise SparcmlError(f"corrupt message: {what} in its "
                           f"{'bitmap' if code == BITMAP else 'Elias-Fano code'}")
    return out


@functools.lru_cache(maxsize=16)
def _decoder(code: int):
    from .._quant.qsgd import QSGD

    return QSGD.from_code(code, seed=0)  # decoding draws no random numbers


def decode(buf: np.ndarray, out: np.ndarray | None = None, *, streaming: bool = False,
           check: bool = False) -> Part:
    """Decode a buffer written by :meth:`Codec.encode` (views where values are raw).

    ``out``: where quantized values are decoded to (``count`` values of the value dtype);
    raw values are never copied, so the caller copies those itself. ``streaming``: see
    :meth:`sparcml.QSGD.decode` (for an ``out`` that is already in memory).

    Any byte string gives a :class:`SparcmlError` naming what is wrong or a :class:`Part` whose
    arrays lie inside ``buf`` (coded indices: a new array of ``count`` items, decoded from
    inside ``buf``): the header's sizes are checked against the buffer before any view is
    taken. ``check=True`` also checks that raw sparse indices are strictly increasing and inside
    ``[offset, offset + length)`` (O(count); messages between sparcml's own ranks skip it);
    coded indices are checked so as they are decoded, always.
    """
    if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8 or buf.ndim != 1:
        raise SparcmlError("corrupt message: expected a 1-d uint8 buffer")
    h = read_header(buf)
    fmt = h.fmt
    if fmt not in (SPARSE, DENSE):
        raise SparcmlError(f"corrupt message: unknown format {fmt}")
    value_dtype = _VALUE_BY_SIZE.get(h.value_size)
    if value_dtype is None:
        raise SparcmlError(f"corrupt message: value size {h.value_size}, expected 4 or 8")
    count, length, offset = h.count, h.length, h.offset
    if count < 0 or length < 0 or offset < 0 or offset + length >= 2**63:
        raise SparcmlError(f"corrupt message: count {count}, length {length}, offset {offset}")
    if (fmt == DENSE and count != length) or count > length:
        raise SparcmlError(f"corrupt message: {count} items for a range of {length}")
    indices = None
    start = first = h.size
    code = h.index_code
    if fmt == SPARSE:
        index_dtype = _INDEX_BY_SIZE.get(h.index_size)
        if index_dtype is None:
            raise SparcmlError(f"corrupt message: index size {h.index_size}, expected 4 or 8")
        if code not in (RAW, ELIAS_FANO, BITMAP) or (code != RAW and (
                count == 0 or length >= _CODED_LENGTH_LIMIT)):
            raise SparcmlError(f"corrupt message: index code {code} for {count} items over "
                               f"a range of {length}")
        if index_dtype.itemsize == 4 and offset + length > 2**31:
            raise SparcmlError(f"corrupt message: int32 indices for the range [{offset}, "
                               f"{offset + length})")
        idx_used = index_section_nbytes(code, count, length, index_dtype.itemsize)
        start += _pad8(idx_used)
    elif code != RAW:
        raise SparcmlError(f"corrupt message: index code {code} in a dense message")
    quantizer = None
    if h.quantized:
        try:
            quantizer = _decoder(h.qcode)
        except SparcmlError as exc:
            raise SparcmlError(f"corrupt message: quantizer code {h.qcode}: {exc}") from None
        nbytes = quantizer.encoded_nbytes(count)
    else:
        nbytes = count * value_dtype.itemsize
    if start + nbytes > buf.shape[0]:
        raise SparcmlError(f"corrupt message: the header announces {start + nbytes} bytes, "
                           f"the buffer holds {buf.shape[0]}")
    if fmt == SPARSE and code == RAW:
        indices = buf[first:first + count * index_dtype.itemsize].view(index_dtype)
        if check and count and (kernels.first_unsorted(indices) >= 0 or indices[0] < offset
                                or indices[-1] >= offset + length):
            raise SparcmlError("corrupt message: indices not strictly increasing inside the "
                               "message's range")
    elif fmt == SPARSE:  # coded indices are always checked: the decoders see every one
        indices = _decode_indices(buf[first:first + idx_used], code, count,
                                  offset, length, index_dtype)
    if quantizer is not None:
        values = quantizer.decode(buf[start:start + nbytes], count, dtype=value_dtype, out=out,
                                  streaming=streaming)
    else:
        values = buf[start:start + nbytes].view(value_dtype)
    return Part(offset, length, indices, values)
