"""Data sets for the SparCML applications: catalog, verified fetch, LIBSVM -> HDF5 conversion,
per-rank reading and synthetic twins.

Stable API (used by the applications)::

    from sparcapps.data import load_shard, make_url_like
    X, y = load_shard("url.h5", rank, size, split="train", test_fraction=0.2, seed=0)
    X, y = make_url_like(100_000, seed=0)                    # or out="url-like.h5"

- :func:`load_shard` ``(path, rank=0, size=1, *, split=None|"train"|"test", test_fraction=0.2,
  seed=0) -> (csr_matrix float32 (rows, n_features), float32 labels)``: reads only this rank's
  contiguous rows.
- :func:`convert_libsvm` ``(src, out, *, n_features=None, index_base="auto", task="auto", ...)``
  streams LIBSVM text (plain/.gz/.bz2/.xz) into the HDF5 CSR layout of :mod:`.csrfile`.
- :func:`make_url_like`, :func:`make_webspam_like` ``(rows, seed=0, *, features=..., out=None,
  **spec_overrides)``; :func:`make_like` with any :class:`SynthSpec`.
- :func:`fetch` ``(name, *, data_home=None, ...)`` downloads catalog files with resume and hash
  check; :func:`load_catalog`, :func:`data_home`.
- Errors: :class:`DataError` and its subclasses (:class:`DataFormatError` names file and line,
  or file and row for a damaged HDF5 file; :class:`UsageError` and its subclasses mark the
  wrong kind of input: :class:`NotCsrFileError`, :class:`SameFileError`, ...).
- Every row :func:`load_shard` returns has been validated; temporary files of writers that
  were killed are removed by the next writer (:mod:`sparcapps.atomicfile`).

The command line is ``sparc-data`` (:mod:`.cli`).
"""

from .catalog import DatasetInfo, FileEntry, data_home, get_dataset, load_catalog
from .convert import ConvertResult, convert_libsvm
from .csrfile import FORMAT, FORMAT_VERSION, CsrWriter
from .errors import (CatalogError, CatalogNotFoundError, ChecksumError, DataError,
                     DataFormatError, DownloadError, NotCsrFileError, OutputExistsError,
                     SameFileError, UnknownDatasetError, UsageError)
from .fetch import fetch
from .shards import load_shard, read_attrs, read_rows, shard_range, split_mask
from .synth import (PRESETS, URL_LIKE, WEBSPAM_LIKE, SynthSpec, make_like, make_url_like,
                    make_webspam_like, write_libsvm)

__all__ = [
    "load_shard", "read_rows", "read_attrs", "shard_range", "split_mask",
    "convert_libsvm", "ConvertResult", "CsrWriter", "FORMAT", "FORMAT_VERSION",
    "make_url_like", "make_webspam_like", "make_like", "SynthSpec", "URL_LIKE", "WEBSPAM_LIKE",
    "PRESETS", "write_libsvm",
    "fetch", "load_catalog", "get_dataset", "data_home", "DatasetInfo", "FileEntry",
    "DataError", "DataFormatError", "CatalogError", "UnknownDatasetError", "DownloadError",
    "ChecksumError", "OutputExistsError", "UsageError", "NotCsrFileError", "SameFileError",
    "CatalogNotFoundError",
]
