"""Exceptions of the datasets package.

Every error raised on purpose derives from :class:`DataError`; each subclass also derives from
the built-in exception a caller would naturally catch (``ValueError``, ``KeyError``, ...), so
``except ValueError`` keeps working for code that does not know this package.
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


class CatalogError(DataError, ValueError):
    """The catalog file is missing or has an invalid entry."""


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
