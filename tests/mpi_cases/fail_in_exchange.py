"""A rank that fails inside an exchange (after the agreement): ``raise`` or ``kill``.

argv[1]: "raise" (a Python error in the middle of the algorithm: the rank aborts the job with
a CollectiveFailure message) or "kill" (SIGKILL of the rank: mpiexec ends the job); argv[2]:
"blocking" or "nonblocking". The other ranks must not hang.
"""

import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml._collectives import arith, plan_fast

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
mode, call = sys.argv[1], sys.argv[2]
if rank == P - 1:
    real_add = arith.add

    def failing_add(*args, **kwargs):
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("injected failure inside the exchange")

    arith.add = failing_add
    # the plain call's fast path of recursive doubling (sparcml._collectives.plan_fast) adds
    # with its own buffers: fail there too
    plan_fast.FastRecursiveDoubling._add = lambda self, *args: failing_add()
vec = sparcml.SparseVector(1000, np.arange(rank, 1000, 7), np.ones(len(range(rank, 1000, 7)),
                                                                     np.float32))
if call == "blocking":
    sparcml.allreduce(vec)
else:
    sparcml.iallreduce(vec).wait()
print(f"rank {rank} finished (possible: its partners had sent before the failure)", flush=True)
