"""What a byte on the links and a coded index cost: the per-message index coding's inputs.

Coded indices (:mod:`sparcml._wire.codec`) save bytes for CPU: about 6 ns to encode and decode an
index here, against 2-3 bytes saved. On a 1 Gbit/s link (8 ns a byte) coding wins by 3x; on
shared memory (a tenth of a ns a byte) raw indices win. :func:`index_coding_costs` gives a
call's ``(seconds per byte, seconds per coded index)`` for :class:`sparcml._wire.codec.Codec`'s
``link_costs``:

- from the calibrated cost model when the context has one (``beta`` measured by concurrent
  pairwise exchanges, ``gamma_code`` by encoding and decoding; :mod:`sparcml._model.auto`);
- else assumed from where the ranks are: all on one node (``COMM_TYPE_SHARED``),
  :data:`SHARED_MEMORY_BYTE_SECONDS`; any on another node, :data:`NETWORK_BYTE_SECONDS`
  (1 Gbit/s, so that any network of that speed or slower gets coded indices); the coding
  cost is the model's default ``gamma_code``.

``Options(index_coding="coded")`` codes whenever the code is smaller (the link costs are
ignored), ``"raw"`` never codes; ``"auto"`` (the default) weighs them. The choice is the
sender's, per message; the header names the code, so receivers decode any.

:func:`call_options` resolves a call's :class:`~sparcml.Options` on a context into the
:class:`~sparcml._options.CallOptions` its codec carries (index coding split into
``code_indices`` and ``link_costs``), once per ``Options`` object and cost model.
"""

from __future__ import annotations

from mpi4py import MPI

from .._options import CallOptions, Options
from .costmodel import CostModel

__all__ = ["index_coding_costs", "call_options", "LinkCosts", "SHARED_MEMORY_BYTE_SECONDS",
           "NETWORK_BYTE_SECONDS"]

SHARED_MEMORY_BYTE_SECONDS = 1e-10  # 10 GB/s: a copy through shared memory
NETWORK_BYTE_SECONDS = 8e-9  # 1 Gbit/s


def index_coding_costs(ctx, index_coding: str = "auto") -> tuple[float, float] | None:
    """``(seconds per byte, seconds per coded index)`` for the messages of a call on ``ctx``
    with the call's ``Options.index_coding``, or None (code whenever smaller: ``"coded"``, or
    a single rank). Collective the first time on a context without a calibrated model (a node
    split): every rank calls it in the same call, after the call's agreement."""
    if ctx.size == 1 or index_coding == "coded":
        return None
    model = ctx.model
    if model is not None:
        return float(model.beta), float(model.gamma_code)
    found = _memory(ctx)
    if found.assumed is None:  # assumed at the context's first call
        node = ctx.comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            one_node = node.Get_size() == ctx.size
        finally:
            node.Free()
        found.assumed = (SHARED_MEMORY_BYTE_SECONDS if one_node else NETWORK_BYTE_SECONDS,
                         CostModel.gamma_code)
    return found.assumed


class LinkCosts:
    """``ctx.link_costs``: the link costs assumed from where the ranks are (``assumed``,
    None until the first call that needs them) and the latest :func:`call_options` per
    ``Options`` object (``resolved``: ``id -> (options, model, CallOptions)``)."""

    __slots__ = ("assumed", "resolved")

    def __init__(self):
        self.assumed: tuple[float, float] | None = None
        self.resolved: dict = {}


_RESOLVED_KEPT = 16  # per context: the latest Options objects resolved


def _memory(ctx) -> LinkCosts:
    found = ctx.link_costs
    if found is None:
        found = ctx.link_costs = LinkCosts()
    return found


def call_options(ctx, options: Options) -> CallOptions:
    """``options`` (a call's agreed :class:`~sparcml.Options`) resolved on ``ctx``: index
    coding split into ``code_indices`` and :func:`index_coding_costs`, the rest as given.
    Cached per ``Options`` object (by identity, while the context's cost model is the same
    object), so that a loop of calls with one ``Options`` resolves it once. Collective where
    :func:`index_coding_costs` is: every rank calls it at the same point of a call."""
    memory = _memory(ctx)
    entry = memory.resolved.get(id(options))
    model = ctx.model
    if entry is not None and entry[0] is options and entry[1] is model:
        return entry[2]
    resolved = CallOptions.of(options, index_coding_costs(ctx, options.index_coding))
    cache = memory.resolved
    if len(cache) >= _RESOLVED_KEPT and id(options) not in cache:
        cache.pop(next(iter(cache)))
    cache[id(options)] = (options, model, resolved)
    return resolved
