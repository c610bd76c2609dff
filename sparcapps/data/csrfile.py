"""The on-disk layout of a converted data set, and an append-only writer for it.

Layout (format ``sparcml-csr``, version 1), all datasets at the file's root:

``indptr``  int64, ``n_rows + 1`` entries, ``indptr[0] == 0``
``indices`` int32 when ``n_features < 2**31``, else int64; 0-based, strictly increasing per row
``data``    float32, same length as ``indices``
``labels``  float32, ``n_rows`` entries; binary tasks hold -1/+1

Readers trust none of it: :func:`open_csr` checks the format, the attributes and the dataset
shapes and dtypes on open (a few bytes read), and :func:`read_csr_rows` (through
:func:`check_rows`) checks every row it returns (indptr non-decreasing and within
``[0, nnz]``, indices in ``[0, n_features)`` and strictly increasing per row) in one compiled
pass, so a damaged file raises :class:`DataFormatError` naming the file, the row and the bad
value instead of producing an invalid matrix.

Every dataset is chunked and compressed (gzip level 1 with the shuffle filter by default).
Root attributes: ``format``, ``format_version``, ``n_rows``, ``n_features``, ``nnz``, ``task``
(``binary``, ``multiclass`` or ``regression``), ``index_base`` (of the source text: 0 or 1),
``source`` (file name of the source), ``source_sha256`` (hash of the source file's bytes, ``""``
for generated data), plus free-form ones (``generator``, ``seed``, ...).

:class:`CsrWriter` writes to a hidden temporary name beside the target and renames it only in
:meth:`CsrWriter.commit`; leaving the ``with`` block by an exception removes the temporary file,
so the target path either holds a complete file or nothing new. A writer killed outright
leaves its temporary file; the next writer of the same target removes it
(:func:`sparcapps.atomicfile.clean_stale_temps`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import h5py
import numpy as np
import scipy.sparse as sp

from sparcapps.atomicfile import clean_stale_temps, temp_path_for

from . import _csrkern as K
from .errors import DataError, DataFormatError, NotCsrFileError, OutputExistsError

__all__ = ["FORMAT", "FORMAT_VERSION", "CsrWriter", "CsrShape", "index_dtype_for",
           "check_csr_file", "open_csr", "check_rows", "read_csr_rows"]

FORMAT = "sparcml-csr"
FORMAT_VERSION = 1

_INDEX_CHUNK = 1 << 18      # elements per HDF5 chunk of indices/data (1 MiB at 4 bytes)
_ROW_CHUNK = 1 << 16        # elements per HDF5 chunk of indptr/labels
_COMPRESSIONS = ("gzip", "lzf", "none")


def index_dtype_for(n_features: int) -> np.dtype:
    """int32 when every index of ``n_features`` columns fits (``n_features < 2**31``), else int64."""
    return np.dtype(np.int32) if n_features < 2**31 else np.dtype(np.int64)


class CsrShape(NamedTuple):
    """The checked size attributes of a sparcml-csr file."""

    n_rows: int
    n_features: int
    nnz: int


_DTYPES = {"indptr": ("int32", "int64"), "indices": ("int32", "int64"),
           "data": ("float32",), "labels": ("float32",)}
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _int_attr(f: h5py.File, name: str, path) -> int:
    """Root attribute ``name`` as a Python int in ``[0, 2**63)``, else DataFormatError."""
    if name not in f.attrs:
        raise DataFormatError(path, None, f"attribute {name!r} missing")
    v = f.attrs[name]
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v[()]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise DataFormatError(path, None, f"attribute {name!r} must be an integer, "
                              f"got {v!r:.60}")
    v = int(v)
    if not 0 <= v < 2**63:
        raise DataFormatError(path, None, f"attribute {name!r} must be in [0, 2**63), got {v}")
    return v


def _str_attr(f: h5py.File, name: str):
    v = f.attrs.get(name)
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def check_csr_file(f: h5py.File, path: str | Path) -> CsrShape:
    """Check that ``f`` is a sparcml-csr file of a known version with a consistent layout.

    Checks the format attributes, ``n_rows``/``n_features``/``nnz`` (non-negative integers),
    the four datasets (present, 1-D, of the format's dtypes, of lengths ``n_rows + 1``,
    ``nnz``, ``nnz``, ``n_rows``) and ``indptr[0] == 0``, ``indptr[-1] == nnz``: a few bytes
    read, whatever the file's size. Returns the sizes; raises :class:`NotCsrFileError` for
    an HDF5 file of another kind and :class:`DataFormatError` for a damaged one.
    """
    fmt = _str_attr(f, "format")
    if not isinstance(fmt, str) or fmt != FORMAT:
        raise NotCsrFileError(path, None, f"not a {FORMAT} file (format attribute is {fmt!r}); "
                              "create one with `sparc-data convert` or `sparc-data synth`")
    version = _str_attr(f, "format_version")
    if not isinstance(version, (int, np.integer)) or int(version) != FORMAT_VERSION:
        raise DataFormatError(path, None, f"unsupported format_version {version!r:.40}, "
                              f"this reader knows {FORMAT_VERSION}")
    shape = CsrShape(*(_int_attr(f, k, path) for k in ("n_rows", "n_features", "nnz")))
    lengths = {"indptr": shape.n_rows + 1, "indices": shape.nnz, "data": shape.nnz,
               "labels": shape.n_rows}
    for name, dtypes in _DTYPES.items():
        ds = f.get(name)
        if ds is None:
            raise DataFormatError(path, None, f"dataset {name!r} missing")
        if not isinstance(ds, h5py.Dataset) or ds.ndim != 1:
            raise DataFormatError(path, None, f"{name!r} must be a 1-D dataset, got "
                                  f"{getattr(ds, 'shape', type(ds).__name__)}")
        if ds.dtype.name not in dtypes or ds.dtype.byteorder == ">":
            raise DataFormatError(path, None, f"dataset {name!r} must be "
                                  f"{' or '.join(dtypes)}, got {ds.dtype.str}")
        if ds.shape[0] != lengths[name]:
            what = "n_rows + 1" if name == "indptr" else "n_rows" if name == "labels" else "nnz"
            raise DataFormatError(path, None, f"dataset {name!r} has {ds.shape[0]} entries, "
                                  f"expected {lengths[name]} ({what} = {lengths[name]})")
    ends = f["indptr"][[0, shape.n_rows]] if shape.n_rows else f["indptr"][:1]
    if int(ends[0]) != 0:
        raise DataFormatError(path, None, f"indptr[0] must be 0, got {int(ends[0])}")
    if int(ends[-1]) != shape.nnz:
        raise DataFormatError(path, None, f"indptr[-1] must equal nnz = {shape.nnz}, "
                              f"got {int(ends[-1])}")
    return shape


def _has_hdf5_signature(path: Path) -> bool:
    """Whether the HDF5 signature is at offset 0, 512, 1024, ... (where HDF5 looks for it)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        offset = 0
        while offset + 8 <= size:
            fh.seek(offset)
            if fh.read(8) == _HDF5_SIGNATURE:
                return True
            offset = 512 if offset == 0 else 2 * offset
    return False


_READ_ERRORS = (OSError, KeyError, RuntimeError, TypeError)   # h5py's on damaged files


@contextlib.contextmanager
def open_csr(path: str | Path) -> Iterator[tuple[h5py.File, CsrShape]]:
    """Open a sparcml-csr file for reading: yields ``(h5py.File, CsrShape)`` after
    :func:`check_csr_file`.

    Raises ``FileNotFoundError`` / ``IsADirectoryError`` for a wrong path,
    :class:`NotCsrFileError` for a file that is not HDF5 or not sparcml-csr, and
    :class:`DataFormatError` for a damaged file (also for HDF5 read errors inside the block).
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, expected a {FORMAT} .h5 file")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except _READ_ERRORS as exc:
        if _has_hdf5_signature(path):
            raise DataFormatError(path, None, f"damaged or truncated HDF5 file ({exc}); "
                                  "convert or fetch it again") from None
        raise NotCsrFileError(path, None, f"not an HDF5 file; expected a {FORMAT} file made "
                              "by `sparc-data convert` or `sparc-data synth`") from None
    try:
        with f:
            yield f, check_csr_file(f, path)
    except DataError:
        raise
    except _READ_ERRORS as exc:
        raise DataFormatError(path, None, f"cannot read the file, it is damaged ({exc}); "
                              "convert or fetch it again") from None


def _row_problem(path, status, row, value, n_features) -> DataFormatError:
    if status == K.INDEX_RANGE:
        return DataFormatError(path, None, f"row {row}: feature index {value} out of range, "
                               f"expected an index in [0, {n_features}) (n_features); the "
                               "file is damaged, convert it again")
    return DataFormatError(path, None, f"row {row}: feature indices must be strictly "
                           f"increasing, got {value} after a larger or equal one; the file is "
                           "damaged, convert it again")


def check_rows(f: h5py.File, path, shape: CsrShape, start: int, stop: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Read and validate the structure of rows ``[start, stop)`` of an open, checked file:
    ``(indptr slice, indices of those rows)``, the values and labels not read.

    Raises :class:`DataFormatError` naming the row (0-based, of the file) and the bad value
    unless indptr is non-decreasing within ``[0, nnz]`` and every row's indices are strictly
    increasing in ``[0, n_features)``. One compiled pass over the indices.
    """
    ptr = f["indptr"][start:stop + 1]
    status, r = K.check_indptr(ptr, shape.nnz)
    if status == K.PTR_DECREASES:
        raise DataFormatError(path, None, f"indptr must be non-decreasing, got "
                              f"indptr[{start + r + 1}] = {ptr[r + 1]} after "
                              f"indptr[{start + r}] = {ptr[r]} (row {start + r})")
    if status == K.PTR_PAST_END:
        raise DataFormatError(path, None, f"indptr must be non-decreasing and at most nnz = "
                              f"{shape.nnz}, got indptr[{start + r + 1}] = {ptr[r + 1]} "
                              f"(row {start + r})")
    a, b = int(ptr[0]), int(ptr[-1])
    if not 0 <= a <= shape.nnz:   # start > 0 only: check_csr_file saw indptr[0] == 0
        raise DataFormatError(path, None, f"indptr must be non-decreasing from 0 to nnz = "
                              f"{shape.nnz}, got indptr[{start}] = {a}")
    indices = f["indices"][a:b]
    status, r, k = K.check_indices(ptr, indices, shape.n_features)
    if status != K.OK:
        raise _row_problem(path, status, start + r, int(indices[k]), shape.n_features)
    return ptr, indices


def read_csr_rows(f: h5py.File, path, shape: CsrShape, start: int, stop: int
                  ) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows ``[start, stop)`` of an open, checked file as ``(X, y)``, validated by
    :func:`check_rows`.

    ``X`` is a float32 ``csr_matrix`` of shape ``(stop - start, n_features)`` in canonical
    format, ``y`` float32. Memory: the rows only.
    """
    ptr, indices = check_rows(f, path, shape, start, stop)
    a, b = int(ptr[0]), int(ptr[-1])
    data = f["data"][a:b]
    y = f["labels"][start:stop]
    ptr = ptr - a
    if b - a < 2**31 and indices.dtype == np.int32:
        ptr = ptr.astype(np.int32)
    X = sp.csr_matrix((data, indices, ptr), shape=(stop - start, shape.n_features), copy=False)
    X.has_sorted_indices = True           # checked: strictly increasing per row
    return X, y


class CsrWriter:
    """Append rows to a new sparcml-csr file; the file appears at ``path`` only on commit.

    Use as a context manager::

        with CsrWriter(out, n_features=10) as w:
            w.append(row_lengths, indices, data, labels)
            w.commit(task="binary", index_base=1, source="x.svm", source_sha256="...")

    ``indices`` are written as given (the caller makes them 0-based, or fixes them up before
    commit with :meth:`add_to_indices`). When ``n_features`` is unknown the writer starts with
    int32 indices and widens to int64 the first time an index needs it.
    """

    def __init__(self, path: str | Path, *, n_features: int | None = None,
                 compression: str = "gzip", compression_level: int = 1,
                 overwrite: bool = False):
        self.path = Path(path)
        if compression not in _COMPRESSIONS:
            raise ValueError(f"compression must be one of {_COMPRESSIONS}, got {compression!r}")
        if self.path.exists() and not overwrite:
            raise OutputExistsError(f"{self.path} exists; pass overwrite=True (CLI: --force) "
                                    "to replace it")
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"output directory {self.path.parent} does not exist")
        self.n_features = n_features
        self.n_rows = 0
        self.nnz = 0
        if self.path.is_dir():
            raise IsADirectoryError(f"{self.path} is a directory, expected a file path")
        clean_stale_temps(self.path)
        self._tmp = temp_path_for(self.path)
        self._filters: dict[str, Any] = {}
        if compression == "gzip":
            self._filters = {"compression": "gzip", "compression_opts": compression_level,
                             "shuffle": True}
        elif compression == "lzf":
            self._filters = {"compression": "lzf", "shuffle": True}
        idx_dtype = index_dtype_for(n_features) if n_features is not None else np.dtype(np.int32)
        self._f = h5py.File(self._tmp, "w", rdcc_nbytes=8 << 20)
        self._committed = False
        try:
            self._f.create_dataset("indptr", data=np.zeros(1, np.int64), maxshape=(None,),
                                   chunks=(_ROW_CHUNK,), **self._filters)
            self._create_indices(idx_dtype)
            self._f.create_dataset("data", shape=(0,), dtype=np.float32, maxshape=(None,),
                                   chunks=(_INDEX_CHUNK,), **self._filters)
            self._f.create_dataset("labels", shape=(0,), dtype=np.float32, maxshape=(None,),
                                   chunks=(_ROW_CHUNK,), **self._filters)
        except BaseException:
            self.abort()
            raise

    def _create_indices(self, dtype: np.dtype, name: str = "indices") -> h5py.Dataset:
        return self._f.create_dataset(name, shape=(0,), dtype=dtype, maxshape=(None,),
                                      chunks=(_INDEX_CHUNK,), **self._filters)

    @property
    def index_dtype(self) -> np.dtype:
        return self._f["indices"].dtype

    def widen_indices(self) -> None:
        """Switch the indices dataset to int64 (copying what was written, chunk by chunk)."""
        old = self._f["indices"]
        if old.dtype == np.int64:
            return
        new = self._create_indices(np.dtype(np.int64), "indices_wide")
        new.resize((old.shape[0],))
        for a in range(0, old.shape[0], 1 << 22):
            b = min(a + (1 << 22), old.shape[0])
            new[a:b] = old[a:b].astype(np.int64)
        del self._f["indices"]
        self._f.move("indices_wide", "indices")

    def append(self, row_lengths: np.ndarray, indices: np.ndarray, data: np.ndarray,
               labels: np.ndarray) -> None:
        """Append ``len(row_lengths)`` rows; ``indices``/``data`` hold their entries in order."""
        n = len(row_lengths)
        k = len(indices)
        if len(labels) != n or len(data) != k:
            raise ValueError("append: labels must have one entry per row and data one per index")
        f = self._f
        if n:
            ptr = np.cumsum(row_lengths, dtype=np.int64)
            ptr += self.nnz
            ds = f["indptr"]
            ds.resize((self.n_rows + 1 + n,))
            ds[self.n_rows + 1:] = ptr
            ds = f["labels"]
            ds.resize((self.n_rows + n,))
            ds[self.n_rows:] = np.asarray(labels, dtype=np.float32)
        if k:
            ds = f["indices"]
            if (ds.dtype == np.int32 and self.n_features is None
                    and int(indices.max()) > np.iinfo(np.int32).max):
                self.widen_indices()
                ds = f["indices"]
            ds.resize((self.nnz + k,))
            ds[self.nnz:] = np.asarray(indices).astype(ds.dtype, copy=False)
            ds = f["data"]
            ds.resize((self.nnz + k,))
            ds[self.nnz:] = np.asarray(data, dtype=np.float32)
        self.n_rows += n
        self.nnz += k

    def add_to_indices(self, delta: int) -> None:
        """Add ``delta`` to every stored index, chunk by chunk (bounded memory)."""
        ds = self._f["indices"]
        step = 1 << 22
        for a in range(0, self.nnz, step):
            b = min(a + step, self.nnz)
            ds[a:b] = ds[a:b] + ds.dtype.type(delta)

    def map_labels(self, mapping: dict[float, float]) -> None:
        """Replace each label value ``k`` by ``mapping[k]`` (values not in the map are kept)."""
        ds = self._f["labels"]
        step = 1 << 22
        for a in range(0, self.n_rows, step):
            b = min(a + step, self.n_rows)
            y = ds[a:b]
            out = y.copy()
            for k, v in mapping.items():
                out[y == np.float32(k)] = np.float32(v)
            ds[a:b] = out

    def commit(self, *, task: str, index_base: int, source: str = "",
               source_sha256: str = "", n_features: int | None = None,
               **extra_attrs: Any) -> Path:
        """Write the attributes, close, and move the file to its final name."""
        nf = n_features if n_features is not None else self.n_features
        if nf is None:
            raise ValueError("commit: n_features unknown")
        if nf >= 2**31 and self.index_dtype != np.int64:
            self.widen_indices()
        attrs = self._f.attrs
        attrs["format"] = FORMAT
        attrs["format_version"] = FORMAT_VERSION
        attrs["n_rows"] = np.int64(self.n_rows)
        attrs["n_features"] = np.int64(nf)
        attrs["nnz"] = np.int64(self.nnz)
        attrs["task"] = task
        attrs["index_base"] = np.int64(index_base)
        attrs["source"] = source
        attrs["source_sha256"] = source_sha256
        for key, value in extra_attrs.items():
            attrs[key] = value
        self._f.close()
        os.replace(self._tmp, self.path)
        self._committed = True
        return self.path

    def abort(self) -> None:
        """Close and delete the temporary file (idempotent)."""
        try:
            if self._f.id.valid:
                self._f.close()
        finally:
            if not self._committed:
                self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "CsrWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._committed:
            self.abort()
