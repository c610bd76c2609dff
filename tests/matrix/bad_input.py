"""Bad input to allreduce raises the same exception, with a clear message, on every rank; the
communicator stays usable. P >= 2: the last rank misbehaves (profile ``full``)."""

import numpy as np

import sparcml
from sparcml import (InvalidOutputError, InvalidVectorError, RankMismatchError, SparseVector,
                     UnknownAlgorithmError, UnsupportedDtypeError)

from . import Case

GOOD = (100, np.array([1, 5]), np.ones(2, np.float32))

SCENARIOS = [
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
    ("algorithm", GOOD, {"algorithm": "OTHER"}, RankMismatchError, "algorithm (rank 0:"),
    ("unknown algorithm", GOOD, {"algorithm": "magic"}, UnknownAlgorithmError,
     "unknown algorithm"),
    ("out shape", GOOD, {"out": np.empty(99, np.float32)}, InvalidOutputError,
     "out must be a 1-d array of 100 float32 values"),
    ("out dtype", GOOD, {"out": np.empty(100, np.float64)}, InvalidOutputError,
     "got shape (100,) and dtype float64"),
    ("out strided", GOOD, {"out": np.empty(200, np.float32)[::2]}, InvalidOutputError,
     "C-contiguous"),
]


def scenario(comm, check, name, bad_args, bad_kwargs, exc_type, needle):
    """The last rank passes ``bad_args``/``bad_kwargs`` through every algorithm."""
    rank, P = comm.Get_rank(), comm.Get_size()
    bad = P - 1
    for algorithm in sparcml.ALGORITHMS:
        args = bad_args if rank == bad else GOOD
        kwargs = {"algorithm": algorithm}
        if rank == bad:
            kwargs.update(bad_kwargs)
            if kwargs["algorithm"] == "OTHER":  # a valid algorithm, but not the others' one
                others = sparcml.ALGORITHMS
                kwargs["algorithm"] = others[(others.index(algorithm) + 1) % len(others)]
        try:
            sparcml.allreduce(args, comm, **kwargs)
        except exc_type as exc:
            cls, msg = type(exc).__name__, str(exc)
        else:
            cls, msg = "no exception", ""
        tag = f"{name}/{algorithm}"
        check(cls == exc_type.__name__, f"{tag}: raised {cls}: {msg}")
        check(needle in msg, f"{tag}: message {msg!r} lacks {needle!r}")
        if rank != bad and exc_type is not RankMismatchError:
            check(f"rank {bad}" in msg, f"{tag}: not told which rank: {msg!r}")
        # the communicator is still usable afterwards: nothing is left in flight
        ok = sparcml.allreduce(SparseVector(*GOOD), comm, algorithm=algorithm)
        check(ok.to_dense()[[1, 5]].tolist() == [P, P], f"{tag}: the next call")


def _vector(dim=100, dtype=np.float32) -> SparseVector:
    return SparseVector(dim, np.array([1, 5]), np.ones(2, dtype))


# The plain call's lean path (a SparseVector, the default algorithm, no out or quantizer:
# sparcml._collectives.entry._lean_call) beside the general path on another rank, or a
# lean call that differs: the same agreement, so the same errors and sums either way
LEAN = [
    ("lean/dim", lambda: _vector(101), {}, RankMismatchError, "dim (rank 0: 100"),
    ("lean/dtype", lambda: _vector(dtype=np.float64), {}, RankMismatchError,
     "value dtype (rank 0: float32"),
    ("lean/tuple dim", lambda: (101, np.array([1, 5]), np.ones(2, np.float32)), {},
     RankMismatchError, "dim (rank 0: 100"),
    ("lean/unsorted", lambda: (100, np.array([5, 1]), np.ones(2, np.float32)), {},
     InvalidVectorError, "unsorted index 1"),
    ("lean/options", _vector, {"options": sparcml.Options(partitions="equal")},
     RankMismatchError, "options.partitions (rank 0: 'balanced'"),
    ("lean/algorithm", _vector, {"algorithm": "dsar_split_allgather"}, RankMismatchError,
     "algorithm (rank 0: ssar_recursive_double"),
    ("lean/out", _vector, {"out": np.empty(99, np.float32)}, InvalidOutputError,
     "out must be a 1-d array of 100 float32 values"),
    ("lean/beside a tuple", lambda: GOOD, {}, None, ""),
    ("lean/beside an out", _vector, {"out": np.empty(100, np.float32)}, None, ""),
]


def lean_scenario(comm, check, name, bad_input, bad_kwargs, exc_type, needle):
    """Every rank but the last calls on the lean path; the last passes ``bad_input()``."""
    rank, P = comm.Get_rank(), comm.Get_size()
    bad = P - 1
    for repeat in range(2):  # the second call finds the lean path's cached agreement
        args = bad_input() if rank == bad else _vector()
        kwargs = bad_kwargs if rank == bad else {}
        try:
            result = sparcml.allreduce(args, comm, **kwargs)
        except Exception as exc:  # noqa: BLE001 - compared with the expected class below
            cls, msg, result = type(exc).__name__, str(exc), None
        else:
            cls, msg = "no exception", ""
        tag = f"{name}#{repeat}"
        if exc_type is None:
            check(result is not None and result.to_dense()[[1, 5]].tolist() == [P, P]
                  and result.nnz in (2, 100), f"{tag}: {cls}: {msg} or a wrong sum")
        else:
            check(cls == exc_type.__name__, f"{tag}: raised {cls}: {msg}")
            check(needle in msg, f"{tag}: message {msg!r} lacks {needle!r}")
        ok = sparcml.allreduce(_vector(), comm)
        check(ok.to_dense()[[1, 5]].tolist() == [P, P], f"{tag}: the next call")


def cases(profile: str, P: int, simulated: bool = False) -> list[Case]:
    """One case per scenario; needs P >= 2 (a rank that differs from the others)."""
    if profile != "full":
        raise ValueError(f"unknown profile {profile!r}")
    if P < 2:
        raise ValueError("bad_input needs P >= 2")
    return [Case(s[0], scenario, dict(zip(("name", "bad_args", "bad_kwargs", "exc_type",
                                           "needle"), s)))
            for s in SCENARIOS] + \
        [Case(s[0], lean_scenario, dict(zip(("name", "bad_input", "bad_kwargs", "exc_type",
                                            "needle"), s)))
         for s in LEAN]
