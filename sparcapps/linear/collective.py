"""Collective validation: every rank raises the same error, or none does.

Validation that can fail on one rank only (its shard has a bad label, its file is unreadable)
must not leave the other ranks waiting in the next collective. :func:`agree_or_raise` is called
by every rank of ``comm`` with the error it found (or ``None``); when any rank found one, every
rank raises an error of the first failing rank's type, with that rank's message prefixed by
``rank R:``.
"""

from __future__ import annotations

from contextlib import contextmanager

from sparcml import raise_everywhere

from .errors import InputDataError, LinearModelError

__all__ = ["agree_or_raise", "collective_errors"]


def agree_or_raise(comm, local_error: BaseException | None) -> None:
    """Collective (every rank of ``comm`` calls): raise the first rank's error on every rank.

    ``local_error`` is any exception or None; its class is rebuilt on the other ranks from its
    import path and the message is prefixed ``rank R:``. The project's one agreement API,
    :func:`sparcml.raise_everywhere`, does the work (one integer ``Allreduce`` when nobody
    failed).
    """
    raise_everywhere(comm, local_error)


@contextmanager
def collective_errors(comm, *, wrap=(ValueError, OSError, KeyError)):
    """``with collective_errors(comm): validate()`` -- every rank leaves the block, then all raise
    the first failing rank's error (or none does).

    :class:`LinearModelError` passes through as it is; exceptions of the types in ``wrap``
    (validation errors of NumPy, SciPy, h5py, :mod:`sparcapps.data`) become
    :class:`InputDataError` carrying their message. Anything else is a bug and propagates
    unchanged (use :func:`sparcml.abort_on_error` around a CLI so that it ends the job).
    """
    error = None
    try:
        yield
    except LinearModelError as exc:
        error = exc
    except wrap as exc:
        error = InputDataError(f"{type(exc).__name__}: {exc}")
    agree_or_raise(comm, error)
