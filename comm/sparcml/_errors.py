"""Exceptions of the comm layer. Every error derives from :class:`SparcmlError`."""

from __future__ import annotations

__all__ = [
    "SparcmlError",
    "InvalidVectorError",
    "UnsupportedDtypeError",
    "RankMismatchError",
    "UnknownAlgorithmError",
    "IncompatibleOptionsError",
    "CompressionError",
    "QuantizationError",
    "InvalidOutputError",
    "InvalidArgumentError",
    "InvalidOptionError",
    "AgreementFieldError",
    "CollectiveFailure",
]


class SparcmlError(Exception):
    """Base class of every error raised by :mod:`sparcml`."""


class InvalidVectorError(SparcmlError, ValueError):
    """A sparse vector's indices or values break an invariant (order, range, length)."""


class UnsupportedDtypeError(SparcmlError, TypeError):
    """Values or indices of a dtype the layer does not handle."""


class RankMismatchError(SparcmlError, ValueError):
    """Ranks passed arguments that must agree (dim, dtype, algorithm) but do not."""


class UnknownAlgorithmError(SparcmlError, ValueError):
    """An algorithm name that the layer does not implement."""


class IncompatibleOptionsError(SparcmlError, ValueError):
    """Options that cannot go together (a quantizer with the ``dense`` baseline, say)."""


class CompressionError(SparcmlError, ValueError):
    """A compressor (QSGD, TopK) was configured or called with something it cannot handle."""


class QuantizationError(CompressionError):
    """Values QSGD cannot quantize (NaN, Inf, beyond float32), or an encoding of the wrong size."""


class InvalidOutputError(SparcmlError, ValueError):
    """An ``out=`` buffer of the wrong shape, dtype or layout, or one that overlaps the input."""


class InvalidArgumentError(SparcmlError, ValueError, TypeError):
    """An argument a collective could not use, found on some rank by a check that is not one
    of sparcml's own (an ``OverflowError`` from NumPy, a Numba typing error): the message names
    the rank, the original class and message. Both ``ValueError`` and ``TypeError``, so that
    callers catching either still do."""


class InvalidOptionError(InvalidArgumentError):
    """A field of :class:`sparcml.Options` (given as ``options=`` or read from its environment
    default) outside its accepted values; the message names the field (or the variable) and
    the values it accepts."""


class AgreementFieldError(InvalidArgumentError):
    """A value the ranks must agree on (``k``, a dim, an option) that cannot be compared
    across ranks: not an integer of int64's range (``2**70``, a float, a string, None). Raised
    on every rank, naming the field and the rank, before anything is exchanged."""


class CollectiveFailure(SparcmlError, RuntimeError):
    """A rank failed *during* an exchange (after the ranks agreed to start it). The exchange
    cannot be completed, so the job is aborted with this message (MPI's fail-stop semantics)."""
