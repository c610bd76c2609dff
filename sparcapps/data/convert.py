"""Streaming conversion of LIBSVM/svmlight text to a sparcml-csr HDF5 file.

:func:`convert_libsvm` reads plain, ``.gz``, ``.bz2`` or ``.xz`` text (detected by the file's
magic bytes) in chunks of ``chunk_bytes`` decompressed bytes, parses each chunk with a Numba
kernel and appends it to the output, so peak memory is a small multiple of the chunk size,
whatever the file size. The output appears only when complete (see :class:`.csrfile.CsrWriter`).

Accepted syntax, per line: ``LABEL [qid:N] INDEX:VALUE INDEX:VALUE ... [# comment]``, fields
separated by spaces or tabs; blank lines and lines starting with ``#`` are skipped; ``qid:``
fields are ignored; indices must be strictly increasing within a line.

Index base: with ``index_base="auto"`` a file is 0-based if any index is 0, else 1-based (as
scikit-learn's ``zero_based="auto"``); ``index_base=1`` makes index 0 an error; ``index_base=0``
keeps indices as written. Stored indices are always 0-based.

Labels: ``task="auto"`` makes a file whose labels fall in {-1, +1}, {0, 1} or {1, 2} a binary
task with labels normalized to -1/+1 (the smaller value becomes -1); other integer labels make
a ``multiclass`` task and anything else ``regression``; both keep labels as written.
``task="binary"`` insists on the binary case.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from . import _parse as P
from .csrfile import CsrWriter
from .errors import DataFormatError, SameFileError

__all__ = ["convert_libsvm", "ConvertResult", "open_text"]

# The widest data set this suite converts: the linear apps keep dense weights of n_features
# float64 values (256 GiB at 2**35; the comm layer sends int64 indices from 2**31 on).
MAX_FEATURES = 2**35

_BINARY_PAIRS = ((-1.0, 1.0), (0.0, 1.0), (1.0, 2.0))
_MAX_TRACKED_LABELS = 1000
_SLOW_CAPACITY = 1 << 14


@dataclass(frozen=True)
class ConvertResult:
    """What :func:`convert_libsvm` wrote."""

    path: Path
    n_rows: int
    n_features: int
    nnz: int
    index_base: int
    task: str
    source_sha256: str
    source_bytes: int
    text_bytes: int
    seconds: float


class _HashingReader(io.RawIOBase):
    """A read-only raw stream that hashes every byte read from ``fh``."""

    def __init__(self, fh: BinaryIO):
        self._fh = fh
        self.sha256 = hashlib.sha256()
        self.nbytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._fh.readinto(b)
        if n:
            self.sha256.update(memoryview(b)[:n])
            self.nbytes += n
        return n

    def drain(self) -> None:
        buf = bytearray(1 << 20)
        while self.readinto(buf):
            pass

    def close(self) -> None:
        self._fh.close()
        super().close()


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same file: same resolved path, or (both existing) the
    same inode, which also catches hard links."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:      # b does not exist (yet)
        return False


def _check_paths(src: Path, out: Path) -> None:
    """Raise unless ``src`` is a readable LIBSVM source and ``out`` a different file."""
    if src.is_dir():
        raise IsADirectoryError(f"{src} is a directory, expected a LIBSVM file")
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such file")
    if _same_file(src, out):
        raise SameFileError(f"output {out} is the input {src} (the same file); choose another "
                            "output path, the source would be destroyed")
    if _compression_of(src) == "hdf5":
        raise DataFormatError(src, None, "is an HDF5 file, expected LIBSVM text (plain, .gz, "
                              ".bz2 or .xz); it may be converted already (see `sparc-data info`)")


def _compression_of(path: Path) -> str:
    with open(path, "rb") as fh:
        magic = fh.read(8)
    if magic.startswith(b"\x1f\x8b"):
        return "gzip"
    if magic.startswith(b"BZh"):
        return "bz2"
    if magic.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if magic.startswith(b"\x89HDF"):
        return "hdf5"
    return "plain"


def open_text(path: str | Path) -> tuple[BinaryIO, _HashingReader, str]:
    """Open ``path`` for reading decompressed bytes: (stream, raw hashing reader, kind)."""
    path = Path(path)
    kind = _compression_of(path)
    raw = _HashingReader(open(path, "rb"))
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw, kind
    if kind == "bz2":
        return bz2.BZ2File(raw, "rb"), raw, kind
    if kind == "xz":
        return lzma.LZMAFile(raw, "rb"), raw, kind
    return io.BufferedReader(raw, 1 << 20), raw, kind


def _token_text(buf: np.ndarray, a: int, b: int, limit: int = 60) -> str:
    s = bytes(buf[a:b]).decode("utf-8", "replace")
    return s if len(s) <= limit else s[:limit] + "..."


def _feature_token(buf: np.ndarray, value_start: int) -> tuple[int, int]:
    """Span of the whole ``index:value`` token whose value starts at ``value_start``."""
    a = value_start - 1
    while a > 0 and buf[a - 1] not in (32, 9, 10, 13):
        a -= 1
    b = value_start
    while b < len(buf) and buf[b] not in (32, 9, 10, 13, 35):
        b += 1
    return a, b


class _Parser:
    """Stateful chunk parser: tracks line numbers, index extremes and the label set."""

    def __init__(self, path: Path, index_base: str | int, n_features: int | None,
                 writer: CsrWriter):
        self.path = path
        self.index_base = index_base
        self.offset = 0 if index_base == 0 else 1
        self.strict_one = index_base == 1
        self.limit = -1 if n_features is None else int(n_features)
        self.writer = writer
        self.lines_done = 0          # physical lines fully consumed so far
        self.min_raw = 2**62
        self.max_raw = -1
        self.max_line = 0
        self.labels_seen: set[float] | None = set()
        self._slow = np.empty((_SLOW_CAPACITY, 4), dtype=np.int64)

    def line_of(self, buf: np.ndarray, pos: int) -> int:
        return self.lines_done + int(np.count_nonzero(buf[:pos] == 10)) + 1

    def _fail(self, buf: np.ndarray, status: int, a: int, b: int, extra: int) -> None:
        line = self.line_of(buf, a)
        tok = _token_text(buf, a, b)
        if status == P.ERR_NO_COLON:
            msg = f"expected index:value, got {tok!r}"
        elif status == P.ERR_BAD_INDEX:
            msg = f"expected index:value with a non-negative integer index, got {tok!r}"
        elif status == P.ERR_INDEX_OVERFLOW:
            msg = f"feature index too large in {tok!r}"
        elif status == P.ERR_ORDER:
            msg = (f"feature indices must be strictly increasing within a line, got {tok!r} "
                   f"after index {extra}")
        elif status == P.ERR_ZERO_INDEX:
            msg = (f"feature index 0 in {tok!r}, but the file is read as 1-based "
                   "(index_base=1); use index_base 0 or auto for a 0-based file")
        elif status == P.ERR_INDEX_RANGE:
            base = "1-based" if self.offset == 1 else "0-based"
            hi = self.limit if self.offset == 1 else self.limit - 1
            msg = (f"feature index out of range in {tok!r}: declared n_features={self.limit} "
                   f"allows indices {self.offset}..{hi} ({base})")
        elif status == P.ERR_EMPTY_VALUE:
            msg = f"expected index:value, got {tok!r} (empty value)"
        elif status == P.ERR_LABEL:
            msg = f"expected a numeric label at the start of the line, got {tok!r}"
        else:  # pragma: no cover - kernel codes are all handled above
            msg = f"parse error {status} at {tok!r}"
        raise DataFormatError(self.path, line, msg)

    def _fix_slow(self, buf, slow, n_slow, labels, values) -> None:
        for k in range(n_slow):
            kind, out, a, b = (int(x) for x in slow[k])
            text = bytes(buf[a:b])
            try:
                if b"_" in text:
                    raise ValueError(text)
                v = float(text)
            except ValueError:
                if kind == P.SLOW_LABEL:
                    raise DataFormatError(self.path, self.line_of(buf, a),
                                          f"expected a numeric label, got "
                                          f"{_token_text(buf, a, b)!r}") from None
                ta, tb = _feature_token(buf, a)
                raise DataFormatError(self.path, self.line_of(buf, a),
                                      f"expected index:value with a numeric value, got "
                                      f"{_token_text(buf, ta, tb)!r}") from None
            if kind == P.SLOW_LABEL:
                labels[out] = v
            else:
                with np.errstate(over="ignore"):   # beyond float32: inf, as a cast would
                    values[out] = np.float32(v)

    def feed(self, buf: np.ndarray, stop: int) -> None:
        """Parse the complete lines of ``buf[:stop]`` and append them to the writer.

        ``self.lines_done`` counts the lines before ``buf`` while parsing (for messages).
        """
        n_nl, n_colon = P.count_lines_and_colons(buf, stop)
        labels = np.empty(n_nl, dtype=np.float64)
        rowlen = np.empty(n_nl, dtype=np.int64)
        indices = np.empty(n_colon, dtype=np.int64)
        values = np.empty(n_colon, dtype=np.float32)
        pos = 0
        slow = self._slow
        while True:
            (status, resume, n_rows, nnz, n_slow, ea, eb, mn, mx, mxpos) = P.parse_block(
                buf, pos, stop, self.offset, self.strict_one, self.limit,
                labels, rowlen, indices, values, slow)
            if status >= 10:
                self._fail(buf, status, ea, eb, mxpos)
            self._fix_slow(buf, slow, n_slow, labels, values)
            if nnz:
                self.min_raw = min(self.min_raw, int(mn))
                if mx > self.max_raw:
                    self.max_raw = int(mx)
                    self.max_line = self.line_of(buf, int(mxpos))
            self._track_labels(labels[:n_rows])
            self.writer.append(rowlen[:n_rows], indices[:nnz], values[:nnz], labels[:n_rows])
            if status == P.OK:
                break
            if n_rows == 0 and nnz == 0:   # a single line with more slow values than room
                self._slow = slow = np.empty((2 * slow.shape[0], 4), dtype=np.int64)
            pos = resume
        self.lines_done += n_nl

    def _track_labels(self, y: np.ndarray) -> None:
        if self.labels_seen is None or not len(y):
            return
        self.labels_seen.update(np.unique(y).tolist())
        if len(self.labels_seen) > _MAX_TRACKED_LABELS:
            self.labels_seen = None

    def feed_chunk(self, data: bytes, stop: int) -> None:
        self.feed(np.frombuffer(data, dtype=np.uint8), stop)


def _decide_task(task: str, labels: set[float] | None, path: Path) -> tuple[str, dict]:
    """The task name and the label mapping to apply."""
    if task not in ("auto", "binary", "multiclass", "regression"):
        raise ValueError(f"task must be auto, binary, multiclass or regression, got {task!r}")
    if task in ("auto", "binary") and labels is not None:
        for lo, hi in _BINARY_PAIRS:
            if labels <= {lo, hi}:
                return "binary", ({lo: -1.0, hi: 1.0} if (lo, hi) != (-1.0, 1.0) else {})
    if task == "binary":
        shown = sorted(labels)[:6] if labels is not None else "more than 1000 values"
        raise DataFormatError(path, None, f"task=binary needs labels in {{-1,+1}}, {{0,1}} or "
                              f"{{1,2}}, got {shown}")
    if task == "auto":
        if labels is not None and all(float(v).is_integer() for v in labels):
            return "multiclass", {}
        return "regression", {}
    return task, {}


def convert_libsvm(src: str | Path, out: str | Path, *, n_features: int | None = None,
                   index_base: str | int = "auto", task: str = "auto",
                   chunk_bytes: int = 16 << 20, compression: str = "gzip",
                   compression_level: int = 1, overwrite: bool = False,
                   progress: bool = False) -> ConvertResult:
    """Convert the LIBSVM text file ``src`` to the sparcml-csr HDF5 file ``out``.

    Parameters
    ----------
    n_features : declared number of features; an index beyond it is an error. Default: the
        largest index seen (+1 for a 0-based file).
    index_base : ``"auto"``, ``0`` or ``1`` (see the module docstring).
    task : ``"auto"``, ``"binary"``, ``"multiclass"`` or ``"regression"``.
    chunk_bytes : decompressed bytes parsed at a time; peak memory is a few times this.
    compression : HDF5 filter, ``"gzip"`` (level ``compression_level``), ``"lzf"`` or ``"none"``.

    Raises :class:`~sparcapps.data.errors.DataFormatError` naming the file and 1-based line for
    malformed input (also for a truncated or corrupt compressed file, or one without data
    rows); no output is left. :class:`~sparcapps.data.errors.SameFileError` when ``out`` is
    ``src`` (same path after resolving links, or a hard link of it): the source is never
    replaced, even with ``overwrite=True``.
    """
    src = Path(src)
    out = Path(out)
    if index_base not in ("auto", 0, 1):
        raise ValueError(f"index_base must be 'auto', 0 or 1, got {index_base!r}")
    if n_features is not None and n_features < 1:
        raise ValueError(f"n_features must be positive, got {n_features}")
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    _check_paths(src, out)
    t0 = time.perf_counter()
    total = src.stat().st_size
    with CsrWriter(out, n_features=n_features, compression=compression,
                   compression_level=compression_level, overwrite=overwrite) as writer:
        parser = _Parser(src, index_base, n_features, writer)
        raw, text_bytes = _parse_text(src, parser, chunk_bytes, total, progress)
        base, nf = _index_base_and_features(src, parser, writer, index_base, n_features)
        if writer.n_rows == 0:
            raise DataFormatError(src, None, "no data rows: the file is empty or holds only "
                                  "comments and blank lines")
        task_name, mapping = _decide_task(task, parser.labels_seen, src)
        if mapping:
            writer.map_labels(mapping)
        sha = raw.sha256.hexdigest()
        writer.commit(task=task_name, index_base=base, source=src.name, source_sha256=sha,
                      n_features=nf, compression=compression)
        return ConvertResult(path=out, n_rows=writer.n_rows, n_features=nf, nnz=writer.nnz,
                             index_base=base, task=task_name, source_sha256=sha,
                             source_bytes=total, text_bytes=text_bytes,
                             seconds=time.perf_counter() - t0)


def _parse_text(src: Path, parser, chunk_bytes: int, total: int, progress: bool):
    """Feed the decompressed text of ``src`` to ``parser`` in chunks of ``chunk_bytes`` cut at
    line ends; returns the raw reader (its hash) and the text's length in bytes."""
    stream, raw, kind = open_text(src)
    bar = _progress_bar(total, src.name, progress)
    text_bytes = 0
    try:
        carry = b""
        while True:
            block = _read_block(stream, chunk_bytes, src, parser.lines_done + 1, kind)
            text_bytes += len(block)
            if bar is not None:
                bar.update(raw.nbytes - bar.n)
            if not block:
                if carry:
                    data = carry if carry.endswith(b"\n") else carry + b"\n"
                    parser.feed_chunk(data, len(data))
                break
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data
                continue
            parser.feed_chunk(data, cut)
            carry = data[cut:]
        raw.drain()
    finally:
        if bar is not None:
            bar.close()
        stream.close()
    return raw, text_bytes


def _read_block(stream, chunk_bytes: int, src: Path, line: int, kind: str) -> bytes:
    """The next ``chunk_bytes`` of text; a truncated or corrupt compressed stream is a
    :class:`DataFormatError` at ``line``."""
    try:
        return stream.read(chunk_bytes)
    except EOFError:
        raise DataFormatError(
            src, line,
            f"{kind} stream ended early: the file is truncated or corrupt "
            "(re-download it)") from None
    except (OSError, lzma.LZMAError, zlib_error()) as exc:
        raise DataFormatError(src, line, f"cannot decompress {kind} data: {exc}") from None


def _index_base_and_features(src: Path, parser, writer, index_base, n_features) -> tuple[int, int]:
    """The index base and feature count, now that every index has been seen (the stored
    indices shifted for a 0-based file found by ``"auto"``); an index beyond the declared
    ``n_features`` or past :data:`MAX_FEATURES` is a :class:`DataFormatError`."""
    if index_base == "auto":
        base = 0 if parser.min_raw == 0 else 1
    else:
        base = int(index_base)
    if base == 0 and index_base == "auto":
        writer.add_to_indices(1)   # stored as raw - 1 while the base was unknown
    if n_features is not None:
        if base == 0 and parser.max_raw >= n_features:
            raise DataFormatError(
                src, parser.max_line,
                f"feature index {parser.max_raw} out of range: declared "
                f"n_features={n_features} allows indices 0..{n_features - 1} (0-based file)")
        nf = int(n_features)
    else:
        nf = max(parser.max_raw + (1 if base == 0 else 0), 0)
    if nf > MAX_FEATURES:
        raise DataFormatError(
            src, parser.max_line,
            f"feature index {parser.max_raw} makes {nf} features, more than the "
            f"{MAX_FEATURES} (2**35) this suite trains on: the linear models keep a "
            f"dense weight vector of n_features values ({nf * 8 / 2**40:.3g} TiB here); "
            f"hash the features into a smaller space before converting")
    return base, nf


def zlib_error() -> type[BaseException]:
    return zlib.error


def _progress_bar(total: int, name: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm  # tqdm (the [apps] extra): only when a bar is drawn
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                desc=f"convert {name}", leave=False)
