"""User errors of the deep apps, found on any rank, reported once; a finished resume.

:func:`collectively` runs a step that may fail for a reason the user must fix (a data set
missing from the data home, a checkpoint of another run) on every rank and turns a failure on
any rank into the same :class:`UsageError` on every rank, so that the app prints one line on
rank 0 and exits with status 2 instead of a traceback per rank. :func:`finished` is what
``--resume`` of a checkpoint that has all its epochs does. Importing this module imports
neither torch nor MPI.
"""

from __future__ import annotations

from .checkpoint import CheckpointError
from .data import DeepDataError

__all__ = ["UsageError", "ModelOptionsError", "collectively", "finished"]


class UsageError(Exception):
    """Bad data or a checkpoint the user must fix, found on one or more ranks (every rank
    raises it, with the distinct messages of the failing ranks)."""


class ModelOptionsError(ValueError):
    """``--width`` / ``--depth`` that the chosen model cannot take (a user error, reported as
    one line like a missing data set)."""


def collectively(comm, make):
    """``make()`` on every rank; a data or checkpoint error on any rank becomes the same
    :class:`UsageError` on every rank (one ``allgather`` of the messages). Collective."""
    error = None
    try:
        result = make()
    except (DeepDataError, CheckpointError, ModelOptionsError) as exc:
        error, result = " ".join(str(exc).split()), None
    errors = comm.allgather(error)
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        ranks: dict[str, list[int]] = {}
        for r, e in failed:
            ranks.setdefault(e, []).append(r)
        size = comm.Get_size()
        raise UsageError("; ".join(
            e if size == 1 else f"{e} (rank{'s' if len(rs) > 1 else ''} "
                                 f"{', '.join(map(str, rs))})" for e, rs in ranks.items()))
    return result


def finished(run) -> int:
    """``--resume`` of a checkpoint that has all ``--epochs`` already: say so, record
    nothing (the finished run's record exists), exit 0."""
    if run.progress is not None:
        run.progress.close()
    if run.comm.Get_rank() == 0:
        print(f"{run.app}: {run.args.resume} is a finished run ({run.start_epoch} epochs, "
              f"--epochs {run.args.epochs}); nothing to train and no record appended (raise "
              f"--epochs to train further)", flush=True)
    return 0
