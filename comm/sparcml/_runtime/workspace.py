"""Reusable scratch buffers for one communicator context, grown on demand.

An iterative loop repeats the same collective with inputs of about the same size. When every
intermediate array of a call (a merge's output, a block's accumulator) comes from a
:class:`Workspace`, the loop stops allocating once the buffers have grown to its sizes, and its
kernels write into memory that is already mapped: a fresh allocation may instead be pages the
allocator has just taken from the operating system, which the kernel's first stores then
fault in one by one (that alone can halve the speed of a merge).

The contract
------------
1. **Ownership.** The workspace owns every buffer it holds. ``get(role, n, dtype)`` hands out a
   view of the first ``n`` items of the buffer of ``(role, dtype)``; the caller borrows it.
2. **Lifetime of a view.** A view is good until the next ``get`` (or ``zeros``) of the same role
   and dtype, or :meth:`Workspace.clear`: that call may hand the same memory to someone else
   (and overwrite it), or grow the buffer. Different roles never share memory, so a caller may
   hold one view per role at once (double buffering is two roles). A view never dangles in the
   C sense (NumPy keeps a grown-out buffer alive while a view refers to it), but after its
   role's next ``get`` its contents belong to somebody else.
3. **Contents.** ``get`` returns whatever the last borrower left (not zeros); ``zeros`` clears
   the view first.
4. **Nothing leaves.** A result handed to the user must never alias workspace memory: it is
   fresh memory (the last kernel of a call writes into a new allocation), a copy of a view, or
   the user's own ``out=`` buffer. Otherwise the next call would overwrite a result the user
   still holds.
5. **One thread.** A workspace belongs to one :class:`~sparcml._runtime.context.CommContext`, and a
   context is used by one thread at a time: blocking calls on the caller's thread, the
   non-blocking engine's thread on its own context (a private duplicate of the communicator),
   with its own workspace. The class takes no lock.
6. **Growth and memory.** A request larger than the buffer reallocates it to
   ``max(n, growth * capacity)`` items, so slowly growing requests reallocate a logarithmic
   number of times; a role holds at most ``growth`` times the largest request it has seen, and
   keeps it until :meth:`Workspace.clear` (or until its context goes with its communicator).
"""

from __future__ import annotations

import numpy as np

__all__ = ["Workspace"]


class Workspace:
    """Scratch buffers keyed by role (a short string naming what a buffer is for) and dtype.

    Parameters
    ----------
    growth : factor by which a buffer grows when a request does not fit (> 1; default 1.5).

    Attributes
    ----------
    allocations : how many buffers have been (re)allocated so far. A steady loop that uses the
        workspace leaves it unchanged from one call to the next.

    Example
    -------
    An intermediate sum, then the final one into fresh memory::

        ws = ctx.workspace
        idx, val = ws.pair("round", a_idx.size + b_idx.size, a_idx.dtype, a_val.dtype)
        n = kernels.merge_add_into(a_idx, a_val, b_idx, b_val, idx, val)
        result = kernels.merge_add(idx[:n], val[:n], c_idx, c_val)  # leaves the call
    """

    def __init__(self, growth: float = 1.5):
        if not growth > 1:
            raise ValueError(f"growth must be > 1, got {growth!r}")
        self.growth = float(growth)
        self.allocations = 0
        self._buffers: dict[tuple[str, np.dtype], np.ndarray] = {}

    def get(self, role: str, n: int, dtype) -> np.ndarray:
        """A view of ``n`` items of ``dtype`` from the buffer of ``role`` (contents undefined)."""
        n = int(n)
        if n < 0:
            raise ValueError(f"Workspace.get({role!r}): n must be >= 0, got {n}")
        key = (role, np.dtype(dtype))
        buf = self._buffers.get(key)
        if buf is None or buf.shape[0] < n:
            capacity = n if buf is None else max(n, int(buf.shape[0] * self.growth))
            buf = self._buffers[key] = np.empty(capacity, key[1])
            self.allocations += 1
        return buf[:n]

    def zeros(self, role: str, n: int, dtype) -> np.ndarray:
        """:meth:`get`, filled with zeros."""
        view = self.get(role, n, dtype)
        view.fill(0)
        return view

    def pair(self, role: str, n: int, index_dtype, value_dtype) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, values)`` views of ``n`` items each for a sparse stream: the roles
        ``role + ".idx"`` and ``role + ".val"``."""
        return self.get(role + ".idx", n, index_dtype), self.get(role + ".val", n, value_dtype)

    @property
    def nbytes(self) -> int:
        """Bytes held in all buffers."""
        return sum(b.nbytes for b in self._buffers.values())

    def clear(self) -> None:
        """Drop every buffer (views handed out keep their memory alive until they go)."""
        self._buffers.clear()

    def __repr__(self) -> str:
        return (f"Workspace({len(self._buffers)} buffers, {self.nbytes} bytes, "
                f"{self.allocations} allocations)")
