"""The narrow, public, immutable context of one call: what plugins receive.

An algorithm's ``run`` (:class:`sparcml.Algorithm`) and a compressor's hooks
(``compress_in``, ``reduce_in``: :mod:`sparcml.compression`) receive a
:class:`CallContext`, never sparcml's per-communicator state (:class:`~sparcml._runtime.context.
CommContext`, internal): its docstring is the one statement of what a plugin may use. sparcml
builds one per call (:func:`call_context`: nine slots filled, about a microsecond); what the
package's own helpers keep per communicator (the split algorithms' partitions) they reach
from it through :func:`context_of`, which is not part of the contract.

Also: the collective calls a compressor makes on its communicator (:meth:`CallContext.
allreduce`) are given to this module by :mod:`sparcml._collectives.entry` when that is
imported (:func:`use_allreduce`): the runtime imports no feature above it.
"""

from __future__ import annotations

from .tags import Tags

__all__ = ["CallContext", "call_context", "context_of", "use_allreduce"]

_NO_TAGS = Tags("(no algorithm)", {})
# sparcml._collectives.entry.allreduce_in, given by that module when it is imported
_allreduce_in: list = []


def use_allreduce(allreduce_in) -> None:
    """Make ``allreduce_in`` what :meth:`CallContext.allreduce` runs (called once, by
    :mod:`sparcml._collectives.entry`, which defines it)."""
    _allreduce_in[:] = [allreduce_in]


class _Fields:
    """The slots of a :class:`CallContext`, writable: :func:`call_context` fills one with plain
    attribute stores, then makes it a CallContext (a third of the cost of nine
    ``object.__setattr__`` calls)."""

    __slots__ = ("comm", "rank", "size", "ops", "options", "workspace", "tags", "waiter",
                 "_context")


class CallContext(_Fields):
    """What a plugin receives for one call on one communicator; read-only.

    ``comm``: sparcml's own duplicate of the user's communicator (mpi4py): its messages never
    meet the user's. Send with the algorithm's ``tags`` only. ``rank``, ``size``: this rank and
    the number of ranks of ``comm``.

    ``ops``: the operations an algorithm moves and adds data through (encode, decode, add,
    send and receive vectors, gather; :mod:`sparcml._collectives.ops` documents each): under a
    persistent plan they carry the plan's error flag in the messages, and in a simulation
    they share buffers between the simulated ranks. An algorithm that routes every message
    through them declares ``routes_through_ops=True`` (see :class:`sparcml.Algorithm`).

    ``options``: the call's options as resolved at its entry point (after the ranks agreed on
    them; the same on every rank): ``options.options`` (the :class:`sparcml.Options`),
    ``options.code_indices`` (sparse indices may travel coded), ``options.link_costs``,
    ``options.partitions``, ``options.node_shm``, ``options.ranks_per_node`` and
    ``options.native(P)`` (whether the phases that exchange with all P ranks run as MPI vector
    collectives). A compressor's hooks get the :class:`~sparcml.compression.Compression`'s
    options, resolved without link costs.

    ``workspace``: reusable scratch buffers of this communicator's calls (pass it on as
    ``workspace=`` to ``ops``; a result must never live in it), or None.

    ``tags``: the message tags the algorithm declared (``Algorithm(tags=("up", "down"))``),
    allocated by :func:`sparcml.register`: ``ctx.tags.up`` (the same number on every rank);
    empty for a compressor.

    ``waiter``: the call's waiting policy (spin, or test and sleep when a node's ranks
    outnumber its cores): ``waiter.wait(request)``, ``waiter.waitall(requests)``,
    ``waiter.collective(comm, "Allreduce", *args)`` (a blocking MPI collective by name, waited
    for under the policy). Use it instead of blocking MPI calls where a wait may be long.

    :meth:`allreduce`: sparcml's allreduce on this communicator (for compressors that reduce
    part of their data densely; an algorithm must not call it: it runs inside a collective).

    Nothing else: sparcml's per-communicator state (plans, cost model, ``auto``'s memory) is
    not reachable from here. Assigning an attribute raises :class:`AttributeError`. A test
    may build one (``CallContext(comm, rank=..., size=..., ops=..., options=..., waiter=...)``);
    sparcml builds the ones it passes.
    """

    __slots__ = ()

    def __init__(self, comm, *, rank: int, size: int, ops, options, waiter, workspace=None,
                 tags: Tags = _NO_TAGS):
        _set = object.__setattr__
        _set(self, "comm", comm)
        _set(self, "rank", rank)
        _set(self, "size", size)
        _set(self, "ops", ops)
        _set(self, "options", options)
        _set(self, "workspace", workspace)
        _set(self, "tags", tags)
        _set(self, "waiter", waiter)
        _set(self, "_context", None)

    def __setattr__(self, name, value):
        raise AttributeError(f"a CallContext is read-only (cannot set {name!r})")

    def __delattr__(self, name):
        raise AttributeError(f"a CallContext is read-only (cannot delete {name!r})")

    def __repr__(self) -> str:
        return (f"CallContext(rank={self.rank}, size={self.size}, "
                f"tags={dict(self.tags)!r})")

    def allreduce(self, vec, *, algorithm: str, stats=None, check: bool = True):
        """:func:`sparcml.allreduce` of ``vec`` with ``algorithm`` on this call's communicator
        and its state (collective; the same keywords' meaning). For compressors' hooks."""
        if self._context is None:
            raise AttributeError("this CallContext was not made by sparcml: it has no "
                                 "communicator state to run an allreduce on")
        return _allreduce_in[0](self._context, vec, algorithm=algorithm, stats=stats,
                                check=check)


def call_context(ctx, options, tags=None) -> CallContext:
    """The :class:`CallContext` of a call on the internal context ``ctx``
    (:class:`~sparcml._runtime.context.CommContext`), with the call's resolved ``options``
    and an algorithm's allocated ``tags`` (None: none)."""
    view = _Fields()
    view.comm = ctx.comm
    view.rank = ctx.rank
    view.size = ctx.size
    view.ops = ctx.ops
    view.options = options
    view.workspace = ctx.workspace
    view.tags = _NO_TAGS if tags is None else tags
    view.waiter = ctx.waiter
    view._context = ctx
    view.__class__ = CallContext  # read-only from here on
    return view


def context_of(ctx):
    """The internal context behind ``ctx`` (a :class:`CallContext` made by
    :func:`call_context`), or ``ctx`` itself: for sparcml's own helpers that keep
    per-communicator state, never for plugins."""
    inner = getattr(ctx, "_context", None)
    return ctx if inner is None else inner
