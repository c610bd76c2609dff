"""A toy allreduce registered through the registry alone (imported by the registry tests).

``toy_reduce_to_root``: every rank sends its dense vector to rank 0, which adds them in rank order
and sends the sum back. Nothing else in the code base knows it. It calls the communicator itself
(``ctx.comm.Send``/``Recv``, with the two message tags it declares and the registry allocates), not
``ctx.ops``, so it leaves ``routes_through_ops`` False: a plan made for it carries its error flag
beside each call (tests/mpi_cases/toy_algorithm_plan.py). Written with public names only
(``tests/test_public_api.py`` checks): what an algorithm author needs is :class:`sparcml.Algorithm`
(whose docstring states the ``run`` and ``cost`` contracts), :class:`sparcml.CallContext` (what
``run`` receives: its tags are ``ctx.tags``), :func:`sparcml.register` and
:meth:`sparcml.SparseVector.unchecked`. Installed as a plugin (the entry-point group
``sparcml.algorithms`` naming this module) it is loaded by :func:`sparcml.load_plugins`, which the
CLIs call.
"""

import numpy as np

from sparcml import ALGORITHMS, Algorithm, SparseVector, register

NAME = "toy_reduce_to_root"


SEEN = []  # the type of every context run() received (tests check: sparcml.CallContext)


def run(ctx, vec, *, stats, codec, out=None, sent=None):
    SEEN.append(type(ctx))
    tags = ctx.tags  # allocated by register(): "up" and "down"
    dense = vec.to_dense()
    if ctx.rank == 0:
        total = dense.copy()
        buf = np.empty_like(dense)
        for src in range(1, ctx.size):
            ctx.comm.Recv(buf, source=src, tag=tags.up)
            total += buf
        for dst in range(1, ctx.size):
            ctx.comm.Send(total, dest=dst, tag=tags.down)
    else:
        ctx.comm.Send(dense, dest=0, tag=tags.up)
        total = np.empty_like(dense)
        ctx.comm.Recv(total, source=0, tag=tags.down)
    stats.add_message(dense.nbytes, True)
    return SparseVector.unchecked(vec.dim, None, total)


def cost(model, *, P, N, k, K, q, s_idx, s_val, options):
    return 2 * (P - 1) * model.message(N * s_val)


if NAME not in ALGORITHMS:
    register(Algorithm(name=NAME, run=run, cost=cost, summary="toy: reduce to rank 0, send back",
                       accepts_quantizer=False, in_auto=False, tags=("up", "down")))
