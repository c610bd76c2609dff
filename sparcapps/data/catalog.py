"""The data set catalog (``catalog.toml``, package data of :mod:`sparcapps.data`) and the
data home.

Data home (where fetched and converted files go), first that applies: an explicit argument
(CLI ``--data-home``), the environment variable ``SPARCML_DATA_HOME``, the ``datasets/``
directory of the source checkout when running from one (an editable install), else the
per-user cache ``$XDG_CACHE_HOME/sparcml`` (``~/.cache/sparcml`` when ``XDG_CACHE_HOME`` is
unset). Each data set's files go to ``DATA_HOME/NAME/``.

Catalog, first that applies: an explicit argument (CLI ``--catalog``), the environment
variable ``SPARCML_CATALOG``, the catalog shipped with the package (read with
:mod:`importlib.resources`, so it is found in a wheel install too).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .errors import CatalogError, CatalogNotFoundError, UnknownDatasetError

__all__ = ["DatasetInfo", "FileEntry", "load_catalog", "get_dataset", "data_home",
           "catalog_path", "check_plain_name", "HASH_ALGORITHMS"]

HASH_ALGORITHMS = ("sha256", "md5")
_HEX_LENGTH = {"sha256": 64, "md5": 32}
_CHECKOUT = Path(__file__).resolve().parents[2]
_CATALOG_RESOURCE = "catalog.toml"


@dataclass(frozen=True)
class FileEntry:
    """One downloadable file of a data set."""

    url: str
    filename: str
    split: str = "all"
    format: str = "libsvm"
    size: int | None = None
    hash: str = ""          # "sha256:HEX", "md5:HEX" or "" (unknown)

    @property
    def hash_algorithm(self) -> str | None:
        return self.hash.split(":", 1)[0] if self.hash else None

    @property
    def hash_value(self) -> str | None:
        return self.hash.split(":", 1)[1].lower() if self.hash else None


@dataclass(frozen=True)
class DatasetInfo:
    """A catalog entry."""

    name: str
    title: str
    task: str
    rows: int | None = None
    features: int | None = None
    nnz: int | None = None
    nnz_note: str = ""
    synth: str | None = None
    license: str = ""
    files: tuple[FileEntry, ...] = field(default_factory=tuple)


def catalog_path(path: str | Path | None = None) -> Path | None:
    """The catalog file given explicitly or by ``SPARCML_CATALOG``; None for the packaged one."""
    if path is None:
        path = os.environ.get("SPARCML_CATALOG") or None
    return None if path is None else Path(path)


def _checkout_datasets() -> Path | None:
    """``datasets/`` of the source checkout this module runs from, else None (a wheel)."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "datasets").is_dir():
        return _CHECKOUT / "datasets"
    return None


def data_home(path: str | Path | None = None) -> Path:
    """The data home (see the module docstring); not created here."""
    if path is not None:
        return Path(path)
    env = os.environ.get("SPARCML_DATA_HOME")
    if env:
        return Path(env)
    checkout = _checkout_datasets()
    if checkout is not None:
        return checkout
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "sparcml"


def check_plain_name(kind: str, value: str) -> str:
    """Return ``value`` if it is a plain file name (one path component that stays inside the
    directory it is joined to), else raise :class:`CatalogError`.

    Refused: empty names, ``.`` and ``..``, names starting with ``.`` (hidden files, and the
    temporary files of :mod:`sparcapps.atomicfile`), ``/`` or ``\\`` anywhere (absolute and
    nested paths, on every platform), NUL and other control characters. Spaces are allowed.
    """
    bad = (not value or value.startswith(".") or "/" in value or "\\" in value
           or any(ord(c) < 32 or ord(c) == 127 for c in value))
    if bad:
        raise CatalogError(f"{kind} must be a plain name (no '/', '\\', leading '.' or "
                           f"control characters), got {value!r}")
    return value


def _file_entry(name: str, raw: dict) -> FileEntry:
    try:
        entry = FileEntry(url=str(raw["url"]), filename=str(raw["filename"]),
                          split=str(raw.get("split", "all")),
                          format=str(raw.get("format", "libsvm")),
                          size=int(raw["size"]) if raw.get("size") else None,
                          hash=str(raw.get("hash", "")).strip())
    except KeyError as exc:
        raise CatalogError(f"data set {name!r}: file entry lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"data set {name!r}: bad file entry ({exc}); expected size as an "
                           "integer number of bytes") from None
    check_plain_name(f"data set {name!r}: filename", entry.filename)
    if entry.hash:
        algo, _, value = entry.hash.partition(":")
        if algo not in HASH_ALGORITHMS or len(value) != _HEX_LENGTH[algo] or any(
                c not in "0123456789abcdefABCDEF" for c in value):
            raise CatalogError(f"data set {name!r}, file {entry.filename}: hash must be "
                               f"'sha256:HEX' (64 digits) or 'md5:HEX' (32), got {entry.hash!r}")
    if entry.size is not None and entry.size <= 0:
        raise CatalogError(f"data set {name!r}, file {entry.filename}: size must be a positive "
                           f"number of bytes, got {entry.size}")
    return entry


def load_catalog(path: str | Path | None = None) -> dict[str, DatasetInfo]:
    """Read the catalog: ``{name: DatasetInfo}`` in file order."""
    p = catalog_path(path)
    try:
        if p is None:
            resource = resources.files(__package__) / _CATALOG_RESOURCE
            p = Path(str(resource))
            raw = tomllib.loads(resource.read_text(encoding="utf-8"))
        else:
            with open(p, "rb") as fh:
                raw = tomllib.load(fh)
    except FileNotFoundError:
        raise CatalogNotFoundError(f"catalog {p} not found; pass --catalog PATH or set "
                                   "SPARCML_CATALOG") from None
    except IsADirectoryError:
        raise CatalogNotFoundError(f"catalog {p} is a directory, expected a TOML file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CatalogError(f"catalog {p}: not valid TOML: {exc}") from None
    out: dict[str, DatasetInfo] = {}
    datasets = raw.get("datasets", {})
    if not isinstance(datasets, dict):
        raise CatalogError(f"catalog {p}: expected a [datasets.NAME] table per data set")
    for name, d in datasets.items():
        check_plain_name(f"catalog {p}: data set name", name)
        files = d.get("files", []) if isinstance(d, dict) else None
        if not isinstance(files, list) or not all(isinstance(x, dict) for x in files):
            raise CatalogError(f"catalog {p}: data set {name!r} must be a table with "
                               "[[datasets.NAME.files]] tables")
        try:
            out[name] = DatasetInfo(
                name=name, title=str(d.get("title", name)), task=str(d["task"]),
                rows=d.get("rows"), features=d.get("features"), nnz=d.get("nnz"),
                nnz_note=str(d.get("nnz_note", "")), synth=d.get("synth"),
                license=str(d.get("license", "")),
                files=tuple(_file_entry(name, f) for f in files))
        except KeyError as exc:
            raise CatalogError(f"catalog {p}: data set {name!r} lacks {exc.args[0]!r}") from None
    return out


def get_dataset(name: str, catalog: str | Path | dict | None = None) -> DatasetInfo:
    """The catalog entry ``name``; :class:`UnknownDatasetError` lists the known names."""
    cat = catalog if isinstance(catalog, dict) else load_catalog(catalog)
    try:
        return cat[name]
    except KeyError:
        raise UnknownDatasetError(f"unknown data set {name!r}; known: "
                                  f"{', '.join(cat) or '(none)'}") from None
