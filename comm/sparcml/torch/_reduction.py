"""One flat gradient's reduction on the communication thread, and the per-step agreement on
non-finite gradients: shared by :class:`~sparcml.torch.DistributedOptimizer` and the DDP
communication hook (:mod:`sparcml.torch._hooks`).

:func:`reduce_flat` is the one call site of the compression (memory, compressor, quantizer,
allreduce algorithm: :meth:`sparcml.compression.Compression.allreduce_in`) for both.

Inf and NaN (a mixed-precision step whose loss scale is too large): a rank whose bucket holds
one contributes zeros for that bucket instead of raising inside the exchange (its error-feedback
memory takes part as usual: compensating zeros sends some of the residual); the ranks then
agree, once per step, on which buckets held a non-finite value on *any* rank
(:func:`agree_flags`: one small ``Allreduce`` of a flag per bucket), and those buckets' averaged
gradients become NaN on *every* rank. So ``torch.amp.GradScaler`` finds an Inf/NaN on every rank
alike, every rank skips the step and lowers the scale alike, and no rank's weights move away
from the others'.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..compression._objects import Compression, Reduced

__all__ = ["reduce_flat", "agree_flags", "NONFINITE", "MODIFIED"]

#: flag bits of one bucket (or, for MODIFIED, of the whole step)
NONFINITE = 1
MODIFIED = 2


def reduce_flat(ctx, compression: Compression, flat: np.ndarray, key, *, full: bool,
                check: bool, stats=None, shapes=None) -> tuple[Reduced, bool]:
    """Compress and allreduce ``flat`` (1-d float32/float64) under ``key``: the
    :class:`~sparcml.compression.Reduced` of the call and whether ``flat`` was finite (when it
    was not, zeros were reduced in its place). ``shapes``: the shapes of the parameters the
    bucket concatenates (PowerSGD compresses each matrix on its own). Collective in submission
    order on the communication thread's context ``ctx``; ``flat`` is not modified."""
    finite = bool(np.isfinite(flat).all())
    x = flat if finite else np.zeros_like(flat)
    return compression.allreduce_in(ctx, x, key=key, stats=stats, check=check,
                                     full=full, shapes=shapes), finite


def agree_flags(ctx, flags: np.ndarray) -> np.ndarray:
    """The bitwise OR over the ranks of ``flags`` (uint8, the same length on every rank), in
    place; collective on ``ctx`` (nothing is sent at P = 1)."""
    if ctx.size > 1:
        ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, [flags, MPI.UINT8_T],
                              MPI.BOR)
    return flags
