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
"""

from __future__ import annotations

from mpi4py import MPI

from .costmodel import CostModel

__all__ = ["index_coding_costs", "SHARED_MEMORY_BYTE_SECONDS", "NETWORK_BYTE_SECONDS"]

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
    found = ctx.link_costs  # assumed at the context's first call
    if found is None:
        node = ctx.comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            one_node = node.Get_size() == ctx.size
        finally:
            node.Free()
        found = ctx.link_costs = (
            SHARED_MEMORY_BYTE_SECONDS if one_node else NETWORK_BYTE_SECONDS,
            CostModel.gamma_code)
    return found
