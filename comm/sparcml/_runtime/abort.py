"""End the whole MPI job when one rank fails, instead of leaving the others waiting."""

from __future__ import annotations

import functools
import sys
import traceback
from contextlib import contextmanager

__all__ = ["abort_on_error"]


@contextmanager
def _abort_guard(comm, exit_code):
    try:
        yield
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _abort(comm, exc.code if isinstance(exc.code, int) else exit_code, None)
        raise
    except BaseException as exc:  # noqa: BLE001 - any uncaught error must end the job
        _abort(comm, exit_code, exc)
        raise


def _abort(comm, exit_code, exc):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    if exc is not None:
        rank = comm.Get_rank()
        sys.stderr.write(f"[rank {rank}] {type(exc).__name__}: {exc}\n")
        traceback.print_exc(file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    if comm.Get_size() > 1:
        comm.Abort(exit_code)


def abort_on_error(func=None, *, comm=None, exit_code: int = 1):
    """Decorator or context manager: an uncaught exception aborts every rank of ``comm``.

    ``with abort_on_error(): main()`` or ``@abort_on_error`` over a CLI's ``main``. It prints the
    rank and the error to stderr, then calls ``comm.Abort`` (for ``size > 1``). The same for a
    user script: ``python -m mpi4py script.py`` does this for the whole script.
    """
    if func is None:
        return _abort_guard(comm, exit_code)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with _abort_guard(comm, exit_code):
            return func(*args, **kwargs)

    return wrapper
