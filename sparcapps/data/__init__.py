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

from sparcapps._lazy import lazy_exports

# Names are imported on first use (PEP 562), so that ``sparc-data list`` and the catalog work
# without the [apps] extra (h5py, scipy) that the readers and writers need.
_WHERE = {
    "load_shard": "shards", "read_rows": "shards", "read_attrs": "shards",
    "shard_range": "shards", "split_mask": "shards",
    "convert_libsvm": "convert", "ConvertResult": "convert",
    "CsrWriter": "csrfile", "FORMAT": "csrfile", "FORMAT_VERSION": "csrfile",
    "make_url_like": "synth", "make_webspam_like": "synth", "make_like": "synth",
    "SynthSpec": "synth", "URL_LIKE": "synth", "WEBSPAM_LIKE": "synth", "PRESETS": "synth",
    "write_libsvm": "synth",
    "fetch": "fetch",
    "load_catalog": "catalog", "get_dataset": "catalog", "data_home": "catalog",
    "DatasetInfo": "catalog", "FileEntry": "catalog",
    **{name: "errors" for name in (
        "DataError", "DataFormatError", "CatalogError", "UnknownDatasetError", "DownloadError",
        "ChecksumError", "OutputExistsError", "UsageError", "NotCsrFileError", "SameFileError",
        "CatalogNotFoundError")},
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())


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
