"""Exceptions of the datasets package.

Every error raised on purpose derives from :class:`DataError`; each subclass also derives from
the built-in exception a caller would naturally catch (``ValueError``, ``KeyError``, ...), so
``except ValueError`` keeps working for code that does not know this package.

:class:`UsageError` and its subclasses mark a command given something it cannot use (a file of
the wrong kind, an unknown name, an output that is an input): ``sparc-data`` exits with status
2 for them and 1 for the other errors (the data itself is bad or a download failed).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "DataError",
    "DataFormatError",
    "CatalogError",
    "UnknownDatasetError",
    "DownloadError",
    "ChecksumError",
    "OutputExistsError",
    "UsageError",
    "NotCsrFileError",
    "SameFileError",
    "CatalogNotFoundError",
]


class DataError(Exception):
    """Base class of all errors of :mod:`sparcapps.data`."""


class DataFormatError(DataError, ValueError):
    """Malformed input: names the file, the 1-based line (when known) and the problem.

    ``str(err)`` reads ``"PATH:LINE: PROBLEM"`` (or ``"PATH: PROBLEM"`` when no line applies);
    the parts are kept as the attributes ``path``, ``line`` and ``problem``.
    """

    def __init__(self, path: str | Path, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class UsageError(DataError, ValueError):
    """The caller gave something the operation cannot use (wrong kind of file, unknown name,
    an output that is an input); the message says what was expected."""


class NotCsrFileError(DataFormatError, UsageError):
    """The file is not HDF5, or an HDF5 file that is not in the sparcml-csr format."""


class SameFileError(UsageError):
    """An output path that is (or links to) one of the inputs."""


class CatalogError(DataError, ValueError):
    """The catalog file is missing or has an invalid entry."""


class CatalogNotFoundError(CatalogError, UsageError):
    """The catalog file does not exist or is not a file."""


class UnknownDatasetError(DataError, KeyError):
    """A data set name that is not in the catalog."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DownloadError(DataError, OSError):
    """A download failed (network error, HTTP error, or too many interruptions)."""


class ChecksumError(DataError, ValueError):
    """A file's hash differs from the expected one; the message names both hashes."""

    def __init__(self, path: str | Path, algorithm: str, expected: str, actual: str,
                 hint: str = ""):
        self.path = str(path)
        self.algorithm = algorithm
        self.expected = expected
        self.actual = actual
        msg = (f"{self.path}: {algorithm} mismatch: expected {expected}, got {actual}"
               + (f"; {hint}" if hint else ""))
        super().__init__(msg)


class OutputExistsError(DataError, FileExistsError):
    """The output file exists and overwriting was not requested."""
