"""Exceptions of :mod:`sparcapps.linear`.

Every error raised on purpose derives from :class:`LinearModelError` and from the built-in
exception a caller would naturally catch (``ValueError``, ``OSError``). Each takes one message
argument, so :func:`sparcapps.linear.collective.agree_or_raise` can raise the same error on every
rank.
"""

from __future__ import annotations

__all__ = [
    "LinearModelError",
    "InputDataError",
    "NotBinaryError",
    "CheckpointError",
    "CheckpointMismatchError",
    "ModelFileError",
]


class LinearModelError(Exception):
    """Base class of the errors of :mod:`sparcapps.linear`."""


class InputDataError(LinearModelError, ValueError):
    """Training or test data that cannot be used (not a sparcml-csr file, wrong shape, NaN)."""


class NotBinaryError(InputDataError):
    """Labels with other than exactly two distinct values across all ranks."""


class CheckpointError(LinearModelError, OSError):
    """A checkpoint that cannot be read or is not a sparc-linear checkpoint."""


class CheckpointMismatchError(LinearModelError, ValueError):
    """A checkpoint of another problem: feature count, loss, global batch, ... differ."""


class ModelFileError(LinearModelError, OSError):
    """A model file that cannot be read or is not a sparc-linear model."""
