"""One rank fails outside any collective while the others wait in allreduce: the job must end.

argv[1] == "wrapper": uses sparcml.abort_on_error (run with plain ``python``);
otherwise relies on ``python -m mpi4py``.
"""

import sys

import numpy as np
from mpi4py import MPI

import sparcml


def main():
    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 1:
        vec = sparcml.SparseVector(10, np.array([3, 1]), np.ones(2))  # raises
    else:
        vec = sparcml.SparseVector(10, np.array([1, 3]), np.ones(2))
    sparcml.allreduce(vec, algorithm="ssar_split_allgather")
    print("UNREACHABLE", flush=True)


if len(sys.argv) > 1 and sys.argv[1] == "wrapper":
    sparcml.abort_on_error(main)()
else:
    main()
