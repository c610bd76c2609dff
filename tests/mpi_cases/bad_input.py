"""Bad input to a collective raises the same exception, with a clear message, on every rank.

Run under mpiexec with P >= 2 via ``python -m mpi4py``. Rank 0 prints ``BAD-INPUT <n> OK``.
"""

import sys

import numpy as np
from mpi4py import MPI

import sparcml
from outcomes import outcome_everywhere
from sparcml import (InvalidOutputError, InvalidVectorError, RankMismatchError, SparseVector,
                     UnknownAlgorithmError, UnsupportedDtypeError)

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
BAD = P - 1  # the rank that misbehaves
good = (100, np.array([1, 5]), np.ones(2, np.float32))
cases = 0

scenarios = [
    ("unsorted", (100, np.array([5, 1]), np.ones(2, np.float32)), {},
     InvalidVectorError, "unsorted index 1"),
    ("duplicate", (100, np.array([5, 5]), np.ones(2, np.float32)), {},
     InvalidVectorError, "duplicate index 5"),
    ("out of range", (100, np.array([5, 100]), np.ones(2, np.float32)), {},
     InvalidVectorError, r"index 100 out of range [0, 100)"),
    ("lengths", (100, np.array([1, 5]), np.ones(3, np.float32)), {},
     InvalidVectorError, "2 indices, 3 values"),
    ("dim", (101, np.array([1, 5]), np.ones(2, np.float32)), {},
     RankMismatchError, "dim (rank 0: 100"),
    ("dtype", (100, np.array([1, 5]), np.ones(2, np.float64)), {},
     RankMismatchError, "value dtype (rank 0: float32"),
    ("int values", (100, np.array([1, 5]), np.ones(2, np.int64)), {},
     UnsupportedDtypeError, "float32 or float64, got int64"),
    ("algorithm", good, {"algorithm": "OTHER"}, RankMismatchError, "algorithm (rank 0:"),
    ("unknown algorithm", good, {"algorithm": "magic"}, UnknownAlgorithmError, "unknown algorithm"),
    ("out shape", good, {"out": np.empty(99, np.float32)}, InvalidOutputError,
     "out must be a 1-d array of 100 float32 values"),
    ("out dtype", good, {"out": np.empty(100, np.float64)}, InvalidOutputError,
     "got shape (100,) and dtype float64"),
    ("out strided", good, {"out": np.empty(200, np.float32)[::2]}, InvalidOutputError,
     "C-contiguous"),
]

for name, bad_args, bad_kwargs, exc_type, needle in scenarios:
    for algorithm in sparcml.ALGORITHMS:
        args = bad_args if rank == BAD else good
        kwargs = {"algorithm": algorithm}
        if rank == BAD:
            kwargs.update(bad_kwargs)
            if kwargs["algorithm"] == "OTHER":  # a valid algorithm, but not the others' one
                others = sparcml.ALGORITHMS
                kwargs["algorithm"] = others[(others.index(algorithm) + 1) % len(others)]
        every = outcome_everywhere(comm, exc_type, lambda: sparcml.allreduce(args, **kwargs))
        for r, (cls, msg) in enumerate(every):
            assert cls == exc_type.__name__, f"{name}/{algorithm}: rank {r} raised {cls}: {msg}"
            assert needle in msg, f"{name}/{algorithm}: rank {r} message {msg!r} lacks {needle!r}"
            if r != BAD and exc_type is not RankMismatchError:
                assert f"rank {BAD}" in msg, f"{name}: rank {r} not told which rank: {msg!r}"
        # the communicator is still usable afterwards: nothing is left in flight
        ok = sparcml.allreduce(SparseVector(*good), algorithm=algorithm)
        assert ok.to_dense()[[1, 5]].tolist() == [P, P]
        cases += 1

if rank == 0:
    print(f"BAD-INPUT {cases} OK", flush=True)
sys.exit(0)
