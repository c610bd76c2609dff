"""Message tags: every point-to-point tag sparcml sends with is allocated here, by name.

An owner (an algorithm of the registry, :mod:`sparcml._registry`, which allocates
the tags an :class:`~sparcml.Algorithm` declares in its ``tags``; or a module of the comm layer
with messages of its own) asks for its tags by name::

    TAGS = message_tags("sparcml.exchange", "split")
    comm.Isend(buf, dest, TAGS.split)

The number of ``(owner, name)`` is a function of the two names alone (CRC-32 into
``[TAG_FIRST, TAG_LAST]``), so every process gets the same numbers whatever it imported first,
and no number is picked by hand. Two names that map to the same number raise
:class:`~sparcml.SparcmlError` when the second is allocated (naming both: rename one), so no
two owners share a tag in one process. ``TAG_LAST`` is the upper bound the MPI standard
guarantees for ``MPI_TAG_UB``. The tags travel on sparcml's own duplicates of the user's
communicators, so they never meet a user's messages.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from .._errors import SparcmlError

__all__ = ["Tags", "message_tags", "release_tags", "allocated_tags", "TAG_FIRST", "TAG_LAST"]

TAG_FIRST = 100    # below: left to nothing (small numbers are what hand-picked tags use)
TAG_LAST = 32767   # the least MPI_TAG_UB the MPI standard allows

_TAKEN: dict[int, tuple[str, str]] = {}  # tag -> (owner, name)


class Tags(Mapping):
    """An owner's allocated tags: ``tags.NAME`` or ``tags["NAME"]`` (read-only)."""

    __slots__ = ("owner", "_tags")

    def __init__(self, owner: str, tags: dict[str, int]):
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "_tags", dict(tags))

    def __getattr__(self, name: str) -> int:
        try:
            return self._tags[name]
        except KeyError:
            raise AttributeError(f"{self.owner} declared no message tag {name!r}; it has "
                                 f"{', '.join(self._tags) or 'none'}") from None

    def __setattr__(self, name, value):
        raise AttributeError("allocated tags are read-only")

    def __getitem__(self, name: str) -> int:
        return self._tags[name]

    def __iter__(self):
        return iter(self._tags)

    def __len__(self) -> int:
        return len(self._tags)

    def __repr__(self) -> str:
        return f"Tags({self.owner!r}, {self._tags!r})"


def _number(owner: str, name: str) -> int:
    return TAG_FIRST + zlib.crc32(f"{owner}/{name}".encode()) % (TAG_LAST - TAG_FIRST + 1)


def message_tags(owner: str, *names: str) -> Tags:
    """Allocate the tags ``names`` of ``owner`` (idempotent: the same numbers each time).

    Raises :class:`~sparcml.SparcmlError` for a name that is not an identifier or a number
    that another owner's tag already holds in this process."""
    tags = {}
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise SparcmlError(f"a message tag name must be an identifier, got {name!r} "
                               f"(of {owner})")
        tag = _number(owner, name)
        holder = _TAKEN.get(tag)
        if holder is not None and holder != (owner, name):
            raise SparcmlError(f"message tag {name!r} of {owner} maps to {tag}, which tag "
                               f"{holder[1]!r} of {holder[0]} holds; rename one of them")
        tags[name] = tag
    for name, tag in tags.items():
        _TAKEN[tag] = (owner, name)
    return Tags(owner, tags)


def release_tags(owner: str) -> None:
    """Give back every tag of ``owner`` (an algorithm unregistered)."""
    for tag in [t for t, (o, _) in _TAKEN.items() if o == owner]:
        del _TAKEN[tag]


def allocated_tags() -> dict[int, tuple[str, str]]:
    """A copy of the allocation: tag -> (owner, name)."""
    return dict(_TAKEN)
