"""Issue 34, item 4: a plan for an algorithm that calls the communicator itself, one bad rank.

The toy algorithm (tests/toy_algorithm.py, registered by importing it from here: no file of
the package names it) sends with ``ctx.comm.Send``/``Recv``, not through ``ctx.ops``, so its
messages cannot carry a plan's error flag. A plan for it must still make every rank raise the
bad rank's error (its record's ``routes_through_ops`` is False: the flag rides in a reduction
beside the call), and stay usable. Run WITHOUT ``-m mpi4py`` (a rank that raised would
otherwise abort the job and hide a hang), under a timeout. ``argv[1]``: the tests directory.
Rank 0 prints the cases planned and passed (``TOY-PLAN-REPORT``).
"""

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, sys.argv[1])  # tests/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import toy_algorithm  # noqa: E402  registers it
from _mpi_checks import done, plan, report  # noqa: E402

import sparcml  # noqa: E402
from sparcml import SparseVector  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
NAME = toy_algorithm.NAME
assert not sparcml.get_algorithm(NAME).routes_through_ops
good = SparseVector(100, np.array([1, 5]), np.ones(2, np.float32))


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


bad_inputs = [
    ("dim", SparseVector(101, np.array([1]), np.ones(1, np.float32)), "PlanInputError"),
    ("dtype", SparseVector(100, np.array([1]), np.ones(1, np.float64)), "PlanInputError"),
    ("foreign exception", object.__new__(Unreadable), "InvalidArgumentError"),
]
cases = [(f"{label} bad rank {bad} {mode}", vec, expected, bad, mode)
         for label, vec, expected in bad_inputs
         for bad in sorted({0, P - 1})  # the toy's root, and a leaf
         for mode in ("blocking", "nonblocking")]
plan(*[c[0] for c in cases])

p = sparcml.plan(100, np.float32, comm, algorithm=NAME)
assert p.allreduce(good).to_dense()[[1, 5]].tolist() == [P, P]
for name, bad_vec, expected, bad, mode in cases:
    call = p.allreduce if mode == "blocking" else (lambda v: p.iallreduce(v).wait())
    every = comm.allgather(outcome(lambda: call(bad_vec if rank == bad else good)))
    for r, (got, msg) in enumerate(every):
        assert got == expected, f"{name}: rank {r} raised {got}: {msg}"
        if r != bad:
            assert f"rank {bad}" in msg, f"{name}: rank {r} not told which rank: {msg!r}"
    after = call(good)  # the plan stays usable
    assert after.to_dense()[[1, 5]].tolist() == [P, P], (name, after)
    done(name)

# through a plan (blocking and on the communication thread) too, the toy received the public
# context and nothing else
assert toy_algorithm.SEEN and set(toy_algorithm.SEEN) == {sparcml.CallContext}, \
    set(toy_algorithm.SEEN)
report("TOY-PLAN")
sys.exit(0)
