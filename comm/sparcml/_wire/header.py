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

import struct
from typing import NamedTuple

import numpy as np

from .._errors import SparcmlError

__all__ = ["MAGIC", "SHORT_MAGIC", "SPARSE", "DENSE", "RAW", "ELIAS_FANO", "BITMAP", "HEADER",
           "HEADER_SIZE", "SHORT_HEADER", "SHORT_HEADER_SIZE", "Header", "header_size",
           "read_header", "write_header", "ERROR_FLAG", "LONG_ERROR_BIT", "has_error_flag",
           "set_error_flag"]

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
ERROR_FLAG = 0x08  # the short form's error bit (flags bit 3)
LONG_ERROR_BIT = 0x02  # the long form's error bit (in the ``quantized`` byte)

def header_size(quantized: bool, count: int, length: int, offset: int) -> int:
    """Bytes of the header of a message with these fields (the short form where it fits)."""
    short = not quantized and count < _SHORT_LIMIT and length < _SHORT_LIMIT \
        and offset < _SHORT_LIMIT
    return SHORT_HEADER_SIZE if short else HEADER_SIZE


class Header(NamedTuple):
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
    error: bool = False


# the two forms as struct layouts (the fields of SHORT_HEADER and HEADER, in order): packing
# and unpacking with them costs a fraction of a microsecond, where assigning the fields of a
# structured NumPy view cost about one each (a message's header is written and read once)
_SHORT_STRUCT = struct.Struct("<HBBIII")
_LONG_STRUCT = struct.Struct("<IBBBBiiqqq")
assert _SHORT_STRUCT.size == SHORT_HEADER_SIZE and _LONG_STRUCT.size == HEADER_SIZE
_SHORT_FIRST, _SHORT_SECOND = SHORT_MAGIC & 0xFF, SHORT_MAGIC >> 8


def read_header(buf: np.ndarray) -> Header:
    """The header of ``buf`` (1-d uint8); :class:`SparcmlError` when it is no sparcml header
    (too short, bad magic, unknown flag bits). Field values are not checked here."""
    n = buf.shape[0]
    if n >= SHORT_HEADER_SIZE:
        head = _SHORT_STRUCT.unpack_from(buf)
        if head[0] == SHORT_MAGIC:
            flags = head[1]
            if flags & 0xC0 or head[2]:
                raise SparcmlError(f"corrupt message: unknown header flags {flags:#04x}")
            return Header(flags & 1, 8 if flags & 2 else 4, 8 if flags & 4 else 4, False, 0,
                          (flags >> 4) & 3, head[3], head[4], head[5], SHORT_HEADER_SIZE,
                          bool(flags & ERROR_FLAG))
    elif n >= 2 and buf[0] == _SHORT_FIRST and buf[1] == _SHORT_SECOND:
        raise SparcmlError(f"corrupt message: {n} bytes, shorter than the header")
    if n < HEADER_SIZE:
        if n < 2 or buf[0] == (MAGIC & 0xFF):
            raise SparcmlError(f"corrupt message: {n} bytes, shorter than the header")
        raise SparcmlError("corrupt message: bad magic number (not a sparcml buffer)")
    magic, fmt, index_size, value_size, quantized, qcode, index_code, count, length, offset = \
        _LONG_STRUCT.unpack_from(buf)
    if magic != MAGIC:
        raise SparcmlError("corrupt message: bad magic number (not a sparcml buffer)")
    if quantized & ~(1 | LONG_ERROR_BIT):
        raise SparcmlError(f"corrupt message: unknown quantized byte {quantized:#04x}")
    return Header(fmt, index_size, value_size, bool(quantized & 1), qcode, index_code, count,
                  length, offset, HEADER_SIZE, bool(quantized & LONG_ERROR_BIT))


def write_header(buf: np.ndarray, fmt: int, index_size: int, value_size: int,
                 qcode: int | None, count: int, length: int, offset: int,
                 index_code: int = RAW) -> int:
    """Write the header of a message into ``buf`` (uint8, at least the header's size);
    ``qcode`` the quantizer's code, or None for raw values. Returns the header's size."""
    quantized = qcode is not None
    size = header_size(quantized, count, length, offset)
    if size == SHORT_HEADER_SIZE:
        _SHORT_STRUCT.pack_into(buf, 0, SHORT_MAGIC, fmt | (index_size == 8) << 1
                                | (value_size == 8) << 2 | index_code << 4, 0, count, length,
                                offset)
        return size
    _LONG_STRUCT.pack_into(buf, 0, MAGIC, fmt, index_size, value_size, int(quantized),
                           qcode if quantized else 0, index_code, count, length, offset)
    return size


def has_error_flag(buf: np.ndarray) -> bool:
    """Whether the message in ``buf`` (uint8, a header at its start) carries the error flag;
    False for anything that is not a sparcml header (decoding reports those)."""
    n = buf.shape[0]
    if n >= SHORT_HEADER_SIZE and buf[0] == (SHORT_MAGIC & 0xFF) \
            and buf[1] == (SHORT_MAGIC >> 8):
        return bool(buf[2] & ERROR_FLAG)
    if n >= HEADER_SIZE and buf[0] == (MAGIC & 0xFF):
        return bool(buf[7] & LONG_ERROR_BIT)
    return False


def set_error_flag(buf: np.ndarray) -> None:
    """Set the error flag of the message in ``buf`` (written by :func:`write_header`)."""
    if buf[0] == (SHORT_MAGIC & 0xFF):
        buf[2] |= ERROR_FLAG
    else:
        buf[7] |= LONG_ERROR_BIT
