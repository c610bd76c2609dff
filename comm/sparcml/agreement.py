"""Collective argument checks: ranks agree on what must agree, or every rank raises the same error.

One small ``Allreduce`` (max of each field and of its negation) per call; only on failure is
anything more exchanged (the messages, so that every rank can say what went wrong where).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import errors
from .errors import RankMismatchError, SparcmlError

__all__ = ["agree"]


def _reraise_everywhere(comm, local_error: BaseException | None):
    """Every rank learns of the failures; each raises the first failing rank's exception type."""
    mine = None
    if local_error is not None:
        mine = (type(local_error).__name__, str(local_error))
    failures = [(r, f) for r, f in enumerate(comm.allgather(mine)) if f is not None]
    first_rank, (cls_name, _) = failures[0]
    cls = getattr(errors, cls_name, SparcmlError)
    if not (isinstance(cls, type) and issubclass(cls, SparcmlError)):
        cls = SparcmlError
    if local_error is not None and isinstance(local_error, cls):
        raise local_error
    lines = "; ".join(f"rank {r}: {msg}" for r, (_, msg) in failures)
    raise cls(f"invalid input on {len(failures)} rank(s): {lines}")


def agree(comm: MPI.Comm, fields: dict[str, int], local_error: BaseException | None = None,
          describe: dict[str, dict[int, str]] | None = None, *, waiter=None,
          maxima: dict[str, int] | None = None) -> dict[str, int]:
    """Check that every rank passed the same integer ``fields`` and that no rank failed.

    Collective over ``comm``. ``local_error`` is this rank's own validation error, if any: it is
    re-raised here, and the other ranks raise the same exception type naming this rank.
    ``describe`` maps a field's codes to names for the message. ``waiter`` (a
    :class:`~sparcml.progress.Waiter`) completes the check's reduction. Raises
    :class:`RankMismatchError` (on every rank) naming each field whose value differs.
    ``maxima`` are integers that may differ: their maximum over ranks is returned (same dict
    keys), at no extra cost.
    """
    names = list(fields)
    maxima = maxima or {}
    vals = np.array([1 if local_error is not None else 0] + [fields[n] for n in names], np.int64)
    both = np.concatenate([vals, -vals, np.array(list(maxima.values()), np.int64)])
    if waiter is None:
        comm.Allreduce(MPI.IN_PLACE, both, op=MPI.MAX)
    else:
        waiter.collective(comm, "Allreduce", MPI.IN_PLACE, both, MPI.MAX)
    hi, lo = both[:vals.size], -both[vals.size:2 * vals.size]
    if hi[0]:
        _reraise_everywhere(comm, local_error)
    differing = [i for i in range(1, vals.size) if hi[i] != lo[i]]
    if not differing:
        return dict(zip(maxima, both[2 * vals.size:].tolist()))
    every = np.array(comm.allgather(vals))
    describe = describe or {}
    parts = []
    for i in differing:
        name = names[i - 1]
        codes = describe.get(name, {})
        per_rank = ", ".join(f"rank {r}: {codes.get(int(v), int(v))}"
                             for r, v in enumerate(every[:, i]))
        parts.append(f"{name} ({per_rank})")
    raise RankMismatchError("ranks disagree on " + "; ".join(parts) +
                            "; every rank must pass the same value")
