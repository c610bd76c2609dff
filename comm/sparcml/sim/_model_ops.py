"""The operations of a simulation under ``compute="model"``: each kernel charged its rate
times its exact work (:mod:`sparcml.sim._rates`), whatever it took on this machine.

Package-internal. :class:`ModelOps` wraps the run's operations (the sharing ones of
:mod:`sparcml.sim._sharing`, or the plain ones): every method is the wrapped one's, and the
kernels also charge the calling rank:

- ``add``, ``fold_parts``, ``assemble``, ``encode``, ``decode``: ``op + rate x work``;
- the packed kernels (``encode_split``, ``fold_packed``, ``assemble_packed``: P messages in
  one call) one ``op``, a per-message rate times the messages, and their rate times their work;
- every index encoded or decoded in a compressed code (Elias-Fano, bitmap): ``coded_index``.

A sparse fold's work is its entries times ``log2`` of its streams (a heap merge) plus what it
writes. A memoized kernel (computed once for many ranks) is charged to every rank that calls
it, as a real rank would compute it. Methods it does not know (moving bytes, the sharing
operations' own) are passed through unchanged.
"""

from __future__ import annotations

import math

import numpy as np

from .._wire.codec import RAW, SPARSE
from .._wire.header import read_header
from .._wire.packed import scan
from ._credit import charge_work, modeled
from .._lazy import lazy_module
pk = lazy_module("sparcml._wire.packed_kernels")

__all__ = ["ModelOps", "work_add", "work_fold", "work_assemble", "packed_items",
           "coded_indices", "coded_in_table"]


def _n(x) -> int:
    return int(x.values.shape[0])


def _merge_levels(streams: int) -> float:
    return max(1.0, math.log2(max(streams, 1)))


def work_add(a, b, out) -> int:
    """Entries an ``add`` reads and writes."""
    return _n(a) + _n(b) + _n(out)


def work_fold(parts, out, force_dense: bool = False) -> float:
    """A ``fold_parts``'s work: when it adds into a dense block (forced, or a part is dense),
    the entries read and written; else the entries of the streams times ``log2`` of their
    number (the heap merge) + those written."""
    read = sum(p.nnz for p in parts)
    if force_dense or any(p.is_dense for p in parts):
        return read + _n(out)
    return read * _merge_levels(sum(1 for p in parts if p.nnz)) + _n(out)


def work_assemble(blocks, out) -> int:
    """Entries an ``assemble`` reads and writes."""
    return sum(_n(b) for b in blocks) + _n(out)


def coded_indices(buf) -> int:
    """Indices of the message in ``buf`` in a compressed code (0 for raw ones or dense)."""
    h = read_header(buf)
    return h.count if h.fmt == SPARSE and h.index_code != RAW else 0


def packed_items(buf, displs, sizes, codec) -> tuple[np.ndarray, int, bool, bool]:
    """``(items per message, of which coded indices, whether a message is dense, whether the
    packed kernels read them)`` of a packed buffer (they do not read quantized messages: the
    per-message path decodes each)."""
    table, _ = scan(buf, displs, sizes, codec)
    if table is None:
        headers = [read_header(buf[int(d):int(d) + int(n)]) for d, n in zip(displs, sizes)]
        coded = sum(h.count for h in headers if h.fmt == SPARSE and h.index_code != RAW)
        return (np.array([h.count for h in headers], np.int64), coded,
                any(h.fmt != SPARSE for h in headers), False)
    return table[:, pk.COUNT], coded_in_table(table), bool(table[:, pk.FMT].any()), True


def coded_in_table(table) -> int:
    """Indices in a compressed code in the sparse messages of a packed table."""
    coded = (table[:, pk.FMT] == SPARSE) & (table[:, pk.CODE] != RAW)
    return int(table[coded, pk.COUNT].sum())


class ModelOps:
    """``inner``'s operations; the kernels charge their modeled cost in rank threads."""

    def __init__(self, inner, rates: dict):
        self._inner = inner
        self._rates = rates

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _charge(self, kernel: str, work: float, coded: int = 0, calls: int = 1,
                per_message: str | None = None, messages: int = 0) -> None:
        r = self._rates
        seconds = calls * r["op"] + r[kernel] * work + r["coded_index"] * coded
        if per_message is not None:
            seconds += r[per_message] * messages
        charge_work(seconds)

    def encode(self, codec, part, *, known_dense=False, seed=None):
        out = self._inner.encode(codec, part, known_dense=known_dense, seed=seed)
        if modeled():
            self._charge("encode", out[0].nbytes, coded_indices(out[0]))
        return out

    def decode(self, buf, out=None, *, streaming=False, check=False):
        part = self._inner.decode(buf, out, streaming=streaming, check=check)
        if modeled():
            self._charge("decode", buf.nbytes, coded_indices(buf))
        return part

    def add(self, a, b, codec, *, workspace=None, intermediate=False, role="add"):
        out = self._inner.add(a, b, codec, workspace=workspace, intermediate=intermediate,
                              role=role)
        if modeled():
            self._charge("add", work_add(a, b, out))
        return out

    def fold_parts(self, parts, offset, length, codec, force_dense=False, *, workspace=None,
                   intermediate=False, role="fold"):
        out = self._inner.fold_parts(parts, offset, length, codec, force_dense,
                                     workspace=workspace, intermediate=intermediate, role=role)
        if modeled():
            self._charge("fold", work_fold(parts, out, force_dense))
        return out

    def assemble(self, blocks, dim, codec):
        out = self._inner.assemble(blocks, dim, codec)
        if modeled():
            self._charge("assemble", work_assemble(blocks, out))
        return out

    def encode_split(self, codec, vec, bounds):
        out = self._inner.encode_split(codec, vec, bounds)
        if modeled():
            self._charge("encode", out.buf.nbytes, coded_in_table(out.table),
                         per_message="encode_part", messages=out.table.shape[0])
        return out

    def fold_packed(self, buf, displs, sizes, offset, length, codec, force_dense=False, *,
                    workspace=None, intermediate=False, role="fold"):
        out = self._inner.fold_packed(buf, displs, sizes, offset, length, codec, force_dense,
                                      workspace=workspace, intermediate=intermediate,
                                      role=role)
        if modeled():
            self._charge_read("fold", buf, displs, sizes, codec, out, force_dense)
        return out

    def assemble_packed(self, buf, displs, sizes, dim, codec):
        out = self._inner.assemble_packed(buf, displs, sizes, dim, codec)
        if modeled():
            self._charge_read("assemble", buf, displs, sizes, codec, out)
        return out

    def _charge_read(self, kernel, buf, displs, sizes, codec, out, force_dense=False):
        """A packed read: one call, or (messages the kernels do not read) one decode per
        message and the per-message kernel."""
        counts, coded, any_dense, packed = packed_items(buf, displs, sizes, codec)
        read = int(counts.sum())
        merge = kernel == "fold" and not (force_dense or any_dense)
        work = read * (_merge_levels(int(np.count_nonzero(counts))) if merge else 1) + _n(out)
        messages = sizes.shape[0]
        if packed:
            self._charge(kernel, work, coded, per_message="decode_part", messages=messages)
        else:  # decoded one by one, then summed or assembled
            self._charge("decode", int(sizes.sum()), calls=messages)
            self._charge(kernel, work, coded)
