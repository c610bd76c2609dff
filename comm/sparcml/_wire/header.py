"""Message headers of :mod:`sparcml._wire.codec`: their two forms, written and read.

The header takes one of two forms, told apart by the magic: the **short** one (16 bytes:
``SHORT_HEADER``, the flags packed in a byte, count / length / offset as uint32) for lossless
messages whose count, length and offset are below 2**32, the **long** one (40 bytes:
``HEADER``) otherwise (quantized values, or ranges past 2**32). At scale most messages are
small (at P = 1,024 a reduce-scatter message of a 1% input of 1M entries holds about 10
entries, 50-60 bytes), so the 24 bytes saved a message are a third of the bytes sent.

Long form (``HEADER``): magic ``0x53505243`` ("SPRC"), format (sparse or dense), index and
value item sizes, whether values are quantized and the quantizer's code, the index code, the
item count, the length of the index range, its offset. Short form (``SHORT_HEADER``): magic
``0x7353`` ("Ss"), a flags byte (bit 0 format, bit 1 8-byte indices, bit 2 8-byte values,
bits 4-5 the index code; the others zero), a zero byte, count / length / offset as uint32.
The first byte tells the forms apart (0x43 long, 0x53 short).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import SparcmlError

__all__ = ["MAGIC", "SHORT_MAGIC", "SPARSE", "DENSE", "RAW", "ELIAS_FANO", "BITMAP", "HEADER",
           "HEADER_SIZE", "SHORT_HEADER", "SHORT_HEADER_SIZE", "Header", "header_size",
           "read_header", "write_header"]

MAGIC = 0x53505243  # "SPRC" (the long header; its first byte in memory is 0x43, "C")
SHORT_MAGIC = 0x7353  # "Ss" (the short header; first byte 0x53)
SPARSE = 0
DENSE = 1
RAW = 0  # index codes
ELIAS_FANO = 1
BITMAP = 2
HEADER = np.dtype([("magic", "<u4"), ("format", "u1"), ("index_size", "u1"),
                   ("value_size", "u1"), ("quantized", "u1"), ("qcode", "<i4"),
                   ("index_code", "<i4"), ("count", "<i8"), ("length", "<i8"), ("offset", "<i8")])
HEADER_SIZE = HEADER.itemsize
assert HEADER_SIZE == 40
# flags: bit 0 format, bit 1 8-byte indices, bit 2 8-byte values, bits 4-5 the index code
SHORT_HEADER = np.dtype([("magic", "<u2"), ("flags", "u1"), ("zero", "u1"), ("count", "<u4"),
                         ("length", "<u4"), ("offset", "<u4")])
SHORT_HEADER_SIZE = SHORT_HEADER.itemsize
assert SHORT_HEADER_SIZE == 16
_SHORT_LIMIT = 1 << 32

def header_size(quantized: bool, count: int, length: int, offset: int) -> int:
    """Bytes of the header of a message with these fields (the short form where it fits)."""
    short = not quantized and count < _SHORT_LIMIT and length < _SHORT_LIMIT \
        and offset < _SHORT_LIMIT
    return SHORT_HEADER_SIZE if short else HEADER_SIZE


@dataclass(frozen=True)
class Header:
    """A message's header, whichever its form (``size``: its bytes)."""

    fmt: int
    index_size: int
    value_size: int
    quantized: bool
    qcode: int
    index_code: int
    count: int
    length: int
    offset: int
    size: int


def read_header(buf: np.ndarray) -> Header:
    """The header of ``buf`` (1-d uint8); :class:`SparcmlError` when it is no sparcml header
    (too short, bad magic, unknown flag bits). Field values are not checked here."""
    n = buf.shape[0]
    if n >= 2 and buf[0] == (SHORT_MAGIC & 0xFF) and buf[1] == (SHORT_MAGIC >> 8):
        if n < SHORT_HEADER_SIZE:
            raise SparcmlError(f"corrupt message: {n} bytes, shorter than the header")
        h = buf[:SHORT_HEADER_SIZE].view(SHORT_HEADER)[0]
        flags = int(h["flags"])
        if flags & 0xC8 or h["zero"]:
            raise SparcmlError(f"corrupt message: unknown header flags {flags:#04x}")
        return Header(flags & 1, 8 if flags & 2 else 4, 8 if flags & 4 else 4, False, 0,
                      (flags >> 4) & 3, int(h["count"]), int(h["length"]), int(h["offset"]),
                      SHORT_HEADER_SIZE)
    if n < HEADER_SIZE:
        if n < 2 or buf[0] == (MAGIC & 0xFF):
            raise SparcmlError(f"corrupt message: {n} bytes, shorter than the header")
        raise SparcmlError("corrupt message: bad magic number (not a sparcml buffer)")
    h = buf[:HEADER_SIZE].view(HEADER)[0]
    if h["magic"] != MAGIC:
        raise SparcmlError("corrupt message: bad magic number (not a sparcml buffer)")
    return Header(int(h["format"]), int(h["index_size"]), int(h["value_size"]),
                  bool(h["quantized"]), int(h["qcode"]), int(h["index_code"]), int(h["count"]),
                  int(h["length"]), int(h["offset"]), HEADER_SIZE)


def write_header(buf: np.ndarray, fmt: int, index_size: int, value_size: int,
                 qcode: int | None, count: int, length: int, offset: int,
                 index_code: int = RAW) -> int:
    """Write the header of a message into ``buf`` (uint8, at least the header's size);
    ``qcode`` the quantizer's code, or None for raw values. Returns the header's size."""
    quantized = qcode is not None
    size = header_size(quantized, count, length, offset)
    if size == SHORT_HEADER_SIZE:
        h = buf[:SHORT_HEADER_SIZE].view(SHORT_HEADER)
        h["magic"] = SHORT_MAGIC
        h["flags"] = fmt | (index_size == 8) << 1 | (value_size == 8) << 2 | index_code << 4
        h["zero"] = 0
        h["count"] = count
        h["length"] = length
        h["offset"] = offset
        return size
    h = buf[:HEADER_SIZE].view(HEADER)
    h["magic"] = MAGIC
    h["format"] = fmt
    h["index_size"] = index_size
    h["value_size"] = value_size
    h["quantized"] = int(quantized)
    h["qcode"] = qcode if quantized else 0
    h["index_code"] = index_code
    h["count"] = count
    h["length"] = length
    h["offset"] = offset
    return size
