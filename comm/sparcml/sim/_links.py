"""A link's reservations in virtual time: the busy intervals of one network interface (a
node's NIC, shared by its ranks) or of one rank's memory link.

Ranks are threads, so they reach a shared link in wall-clock order, not in virtual-time
order: with a single "free from" time per link, a rank one round behind in virtual time but
late in wall time queued behind a later round's reservation, and the delay cascaded (recursive
doubling with 8 ranks per node ran 2-3x slower than its model and differed run to run). A
calendar of busy intervals places each message in the first gap at or after the time it is
ready that is long enough for it, so only messages that overlap in virtual time delay each
other. When reservations come in virtual-time order (one rank per node) the result is the
single "free from" time's, to the bit.
"""

from __future__ import annotations

from bisect import bisect_right

# intervals kept per link before the ones every rank has passed are dropped
_PRUNE_EVERY = 4096


class LinkCalendar:
    """The busy intervals of one link, sorted and disjoint (touching ones merged).

    ``floor``: the virtual time before which the link counts as busy: intervals are dropped
    once no request can be ready before their end (the world prunes at the earliest clock of
    a running rank and the earliest start of a message in flight), so no request meets it."""

    __slots__ = ("starts", "ends", "floor", "_since_prune")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.floor = 0.0
        self._since_prune = 0

    def reserve(self, ready: float, duration: float) -> float:
        """Reserve ``duration`` seconds from the first gap at or after ``ready`` that holds
        it; returns the reservation's start."""
        starts, ends = self.starts, self.ends
        start = max(ready, self.floor)
        i = bisect_right(ends, start)  # the first interval that ends after ``start``
        n = len(starts)
        # (a zero-length request inside or at the start of an interval waits for its end too)
        while i < n and (starts[i] < start + duration or starts[i] <= start):
            start = max(start, ends[i])
            i += 1
        end = start + duration
        # insert [start, end) before interval i, merging with the neighbours it touches
        if i > 0 and ends[i - 1] == start:
            if i < n and starts[i] == end:
                ends[i - 1] = ends[i]
                del starts[i], ends[i]
            else:
                ends[i - 1] = end
        elif i < n and starts[i] == end:
            starts[i] = start
        else:
            starts.insert(i, start)
            ends.insert(i, end)
        self._since_prune += 1
        return start

    def due_for_pruning(self) -> bool:
        return self._since_prune >= _PRUNE_EVERY and len(self.starts) > 1

    def prune(self, before: float) -> None:
        """Drop the intervals that end at or before ``before`` (no rank's clock is earlier)."""
        i = bisect_right(self.ends, before)
        if i:
            self.floor = max(self.floor, self.ends[i - 1])
            del self.starts[:i], self.ends[:i]
        self._since_prune = 0
