"""``topk_allreduce`` and ``hierarchical=True`` on one node whose ``/dev/shm`` is too small for
the shared-memory window (run by tests/test_small_shm.py inside a private mount namespace with
a small tmpfs there): no SIGBUS, the same bits as the message path. Prints one hash line per
call on rank 0 (``argv[1]``: N)."""

import hashlib
import sys

import numpy as np
from mpi4py import MPI

import sparcml

comm = MPI.COMM_WORLD
n = int(sys.argv[1])
x = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
got, dropped = sparcml.topk_allreduce(sparcml.SparseVector.from_dense(x), n // 100, comm)
h = sparcml.allreduce(sparcml.SparseVector.from_dense(x), comm,
                      algorithm="ssar_recursive_double", hierarchical=True)
digests = [hashlib.sha256(a.tobytes()).hexdigest()[:16]
           for a in (got.to_dense(), dropped.to_dense(), h.to_dense())]
every = comm.gather(digests)
if comm.rank == 0:
    print("HASHES", " ".join(d for ds in every for d in ds), flush=True)
