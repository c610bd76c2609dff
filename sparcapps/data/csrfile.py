"""The on-disk layout of a converted data set, and an append-only writer for it.

Layout (format ``sparcml-csr``, version 1), all datasets at the file's root:

``indptr``  int64, ``n_rows + 1`` entries, ``indptr[0] == 0``
``indices`` int32 when ``n_features < 2**31``, else int64; 0-based, strictly increasing per row
``data``    float32, same length as ``indices``
``labels``  float32, ``n_rows`` entries; binary tasks hold -1/+1

Every dataset is chunked and compressed (gzip level 1 with the shuffle filter by default).
Root attributes: ``format``, ``format_version``, ``n_rows``, ``n_features``, ``nnz``, ``task``
(``binary``, ``multiclass`` or ``regression``), ``index_base`` (of the source text: 0 or 1),
``source`` (file name of the source), ``source_sha256`` (hash of the source file's bytes, ``""``
for generated data), plus free-form ones (``generator``, ``seed``, ...).

:class:`CsrWriter` writes to a hidden temporary name beside the target and renames it only in
:meth:`CsrWriter.commit`; leaving the ``with`` block by an exception removes the temporary file,
so the target path either holds a complete file or nothing new.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .errors import DataFormatError, OutputExistsError

__all__ = ["FORMAT", "FORMAT_VERSION", "CsrWriter", "index_dtype_for", "check_csr_file"]

FORMAT = "sparcml-csr"
FORMAT_VERSION = 1

_INDEX_CHUNK = 1 << 18      # elements per HDF5 chunk of indices/data (1 MiB at 4 bytes)
_ROW_CHUNK = 1 << 16        # elements per HDF5 chunk of indptr/labels
_COMPRESSIONS = ("gzip", "lzf", "none")


def index_dtype_for(n_features: int) -> np.dtype:
    """int32 when every index of ``n_features`` columns fits (``n_features < 2**31``), else int64."""
    return np.dtype(np.int32) if n_features < 2**31 else np.dtype(np.int64)


def check_csr_file(f: h5py.File, path: str | Path) -> None:
    """Raise :class:`DataFormatError` unless ``f`` is a sparcml-csr file of a known version."""
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt != FORMAT:
        raise DataFormatError(path, None, f"not a {FORMAT} file (format attribute is {fmt!r}); "
                              "create one with `sparc-data convert` or `sparc-data synth`")
    version = int(f.attrs.get("format_version", -1))
    if version != FORMAT_VERSION:
        raise DataFormatError(path, None, f"unsupported format_version {version}, "
                              f"this reader knows {FORMAT_VERSION}")
    for name in ("indptr", "indices", "data", "labels"):
        if name not in f:
            raise DataFormatError(path, None, f"dataset {name!r} missing")


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
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
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
