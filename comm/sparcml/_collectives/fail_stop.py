"""Fail-stop inside an exchange: a rank that fails after the ranks agreed to run aborts the job.

Package-internal (every entry point that runs a schedule after its agreement uses it: the
plain calls, the plans, the top-k call, the gather/scatter collectives). A rank that fails
*during* an exchange (out of memory, a signal, a bug) cannot complete what the other ranks
are in; it prints why and aborts the job (:class:`~sparcml.CollectiveFailure`), as MPI's
default error handler does, rather than leaving them waiting.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from mpi4py import MPI

from .._errors import CollectiveFailure

__all__ = ["fail_stop", "abort_job"]


@contextmanager
def fail_stop(comm, what: str):
    """``with fail_stop(comm, "bcast"): exchange()``: a rank that fails inside an exchange the
    other ranks are in prints why and aborts the job (:class:`CollectiveFailure`); at P = 1 or
    after MPI is finalized the error propagates as it is."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - the exchange cannot be completed
        abort_job(comm, what, exc)
        raise


def abort_job(comm, what: str, exc: BaseException) -> None:
    """What :func:`fail_stop` does with ``exc`` (for a hot path that catches it itself, without
    a context manager's frame): abort the job unless P = 1 or MPI is finalized (then the
    caller re-raises)."""
    if comm.Get_size() == 1 or MPI.Is_finalized():
        return
    failure = CollectiveFailure(
        f"rank {comm.Get_rank()} failed during {what} after the ranks agreed to run it: "
        f"{type(exc).__name__}: {exc}; the other ranks cannot complete this collective, so "
        f"the job is aborted")
    sys.stderr.write(f"[sparcml] {failure}\n")
    sys.stderr.flush()
    comm.Abort(1)
