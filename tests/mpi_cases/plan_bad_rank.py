"""Issue 21, item 1: one rank passes bad input to a persistent plan, the others good input.

Run WITHOUT ``-m mpi4py`` (a rank that raised would otherwise abort the job and hide a hang):
plans have no agreement round per call, so the error travels in the headers of the schedule's
messages; every case must raise the same error class on every rank, name the bad rank, and
leave the plan usable. Blocking and non-blocking calls, every algorithm. Rank 0 prints the
cases planned and passed (``PLAN-BAD-RANK-REPORT``: tests/mpi_cases/_mpi_checks.py).
"""

import os
import sys

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import SparseVector

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mpi_checks import done, plan, report  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
BAD = P - 1
good = SparseVector(100, np.array([1, 5]), np.ones(2, np.float32))
nan_values = SparseVector(100, np.array([1, 5]), np.array([1.0, np.nan], np.float32))


class Unreadable(SparseVector):
    """Its attributes were never set: validation raises AttributeError (a foreign class)."""


def outcome(fn):
    try:
        fn()
    except sparcml.SparcmlError as exc:
        return (type(exc).__name__, str(exc))
    except Exception as exc:  # noqa: BLE001 - reported, and fails the case
        return ("foreign " + type(exc).__name__, str(exc))
    return ("no exception", "")


def bad_inputs():
    """(label, this rank's input, expected class, quantizer or None)."""
    return [
        ("dim", SparseVector(101, np.array([1]), np.ones(1, np.float32)), "PlanInputError",
         None),
        ("dtype", SparseVector(100, np.array([1]), np.ones(1, np.float64)), "PlanInputError",
         None),
        ("foreign exception", object.__new__(Unreadable), "InvalidArgumentError", None),
        ("NaN under QSGD", nan_values, "QuantizationError", sparcml.QSGD(4, seed=3)),
    ]


cases = []
for label, bad_vec, expected, q in bad_inputs():
    for algorithm in sparcml.ALGORITHMS:
        if q is not None and not sparcml.get_algorithm(algorithm).accepts_quantizer:
            continue
        for mode in ("blocking", "nonblocking"):
            cases.append((f"{label} {algorithm} {mode}", bad_vec, expected, q, algorithm, mode))
cases += [(f"topk {label} {mode}", bad_vec, expected, None, "topk", mode)
          for label, bad_vec, expected in (
              ("NaN", nan_values, "CompressionError"),
              ("dim", SparseVector(99, np.array([1]), np.ones(1, np.float32)), "PlanInputError"))
          for mode in ("blocking", "nonblocking")]
plan(*[c[0] for c in cases])

for name, bad_vec, expected, q, algorithm, mode in cases:
    if algorithm == "topk":
        p = sparcml.topk_plan(100, np.float32, 2, comm)
        call = p.topk_allreduce if mode == "blocking" else \
            (lambda v, p=p: p.itopk_allreduce(v).wait())
    else:
        p = sparcml.plan(100, np.float32, comm, algorithm=algorithm, quantizer=q)
        call = p.allreduce if mode == "blocking" else (lambda v, p=p: p.iallreduce(v).wait())
    vec = bad_vec if rank == BAD else good
    if P == 1 and expected == "PlanInputError":
        expected = "PlanShapeError"  # the only rank passed the other shape
    if P == 1 and expected == "QuantizationError":
        expected = "no exception"  # nothing travels, so nothing is quantized (as allreduce)
    every = comm.allgather(outcome(lambda: call(vec)))
    for r, (got, msg) in enumerate(every):
        assert got == expected, f"{name}: rank {r} raised {got}: {msg}"
        if r != BAD:
            assert f"rank {BAD}" in msg, f"{name}: rank {r} not told which rank: {msg!r}"
    after = call(good)
    result = after.result if algorithm == "topk" else after
    assert result.to_dense()[[1, 5]].tolist() == [P, P], (name, result)
    done(name)

report("PLAN-BAD-RANK")
sys.exit(0)
