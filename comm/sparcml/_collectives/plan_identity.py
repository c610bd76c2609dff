"""A persistent plan's identity, checked at every call: plans that cannot be crossed.

Each plan (:func:`sparcml.plan`, :func:`sparcml.topk_plan`) has an identity agreed at its
creation: a number, the same on every rank of its communicator (the maximum over the ranks of
each process's next number, :func:`next_plan_id` / :func:`note_plan_id`), with its operation,
dim, dtype and algorithm. Every call first reduces one small array
(:class:`PlanIdentity`: the layout of every sparcml call's agreement,
:func:`sparcml._runtime.agreement.agreement_array`, led by a signature of that identity: one
``MPI_Allreduce`` of 288 bytes, a few microseconds), so that ranks that reached different
calls at the same point (two plans called in swapped order, a ``plan`` against a
``topk_plan``, a plan against a plain call, a plan dropped on one rank while the others call
it) raise the same :class:`~sparcml.RankMismatchError` on every rank, naming each rank's call,
before any message of a schedule is sent. Headers alone cannot do this: schedules that differ
(``MPI_Allreduce`` against point-to-point rounds) never exchange a message whose header could
be read. A plan needs no collective free: dropping one on some ranks only is found at those
ranks' next sparcml call on the communicator, as a crossing.
"""

from __future__ import annotations

from .._errors import RankMismatchError
from .._runtime.agreement import agreed_maxima, agreement_array
from .._runtime.agreement_request import reduce_max

__all__ = ["PlanIdentity", "next_plan_id", "note_plan_id"]

_plan_ids = 0  # this process's plans: the next identity number is above every one used


def next_plan_id() -> int:
    """This process's proposal for a new plan's number (its agreement takes the maximum over
    the ranks, :func:`note_plan_id`, so that ranks of one communicator number it alike)."""
    return _plan_ids


def note_plan_id(number: int) -> None:
    """A plan numbered ``number`` was made: later proposals are above it."""
    global _plan_ids
    _plan_ids = max(_plan_ids, number + 1)


class PlanIdentity:
    """The per-call crossing check of a plan (see the module docstring): ``check(ctx)``
    reduces the agreement array of the plan's identity and raises the same
    :class:`~sparcml.RankMismatchError` on every rank when some rank is in another call.
    The array is sent from a read-only template through the agreement's one reduction
    (:func:`~sparcml._runtime.agreement_request.reduce_max`: the same request as every other
    agreement on the communicator), received into the buffer that reduction keeps per
    communicator (a plan may run on the blocking path's context and a communication thread's
    at once: their communicators differ), so a call allocates nothing but the received
    bytes' compare."""

    __slots__ = ("names", "template", "head", "vals")

    def __init__(self, label: str):
        self.names = (label,)
        both, self.vals, _ = agreement_array({label: 0}, {})
        both.setflags(write=False)
        self.template, self.head = both, both.tobytes()

    def check(self, ctx) -> None:
        comm = ctx.comm
        got = reduce_max(comm, self.template, ctx.waiter)
        if got.tobytes() != self.head:  # another call (or its failure) somewhere
            both = got.copy()
            agreed_maxima(comm, both, self.vals, self.names, {}, None, None)
            raise RankMismatchError(f"ranks reached different sparcml calls at the same "
                                    f"point ({self.names[0]} here)")  # pragma: no cover
