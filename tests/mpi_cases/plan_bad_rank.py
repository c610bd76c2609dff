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
    every = comm.allgather(outcome(lambda: call(vec)))
    for r, (got, msg) in enumerate(every):
        assert got == expected, f"{name}: rank {r} raised {got}: {msg}"
        if r != BAD:
            assert f"rank {BAD}" in msg, f"{name}: rank {r} not told which rank: {msg!r}"
    after = call(good)
    result = after.result if algorithm == "topk" else after
    assert result.to_dense()[[1, 5]].tolist() == [P, P], (name, result)
    done(name)


# ---- issue 34: the agreements' one persistent request per communicator ---------------------
# (sparcml._runtime.agreement_request; private names: this checks the mechanism itself)
from sparcml._runtime import agreement as _agreement  # noqa: E402
from sparcml._runtime import agreement_request as _ar  # noqa: E402
from sparcml._runtime.context import context_for  # noqa: E402



def _has_persistent_allreduce() -> bool:
    """Whether this MPI makes an ``MPI_Allreduce_init`` (the library tries the same way: Open
    MPI 5 has one while it reports MPI 3.1, so the version does not say)."""
    try:
        request = comm.Allreduce_init(np.zeros(1, np.int32), np.zeros(1, np.int32), MPI.MAX)
    except (NotImplementedError, AttributeError, MPI.Exception):
        return False
    request.Free()
    return True


PERSISTENT = _has_persistent_allreduce()
dense_in = np.linspace(-1, 1, 100).astype(np.float32) * (rank + 1)
AGREEMENT_CASES = ["one request, every site", "comm.Free after calls",
                   "comm.Free frees the thread's duplicate", "fallback, same results",
                   "fallback, crossed and bad rank", "agree on COMM_WORLD"]
plan(*[f"agreement/{c}" for c in AGREEMENT_CASES])


def reduction_of(c):
    """The agreement reduction of sparcml's duplicate of ``c`` (made at its first call)."""
    return context_for(c).comm.Get_attr(_ar._keyval)


def every_call(c):
    """A plain allreduce, a plan, a non-blocking call, a plain and a planned top-k on ``c``:
    their results, as bytes (the same on every path, persistent or not)."""
    p = sparcml.plan(100, np.float32, c)
    tp = sparcml.topk_plan(100, np.float32, 3, c)
    out = [sparcml.allreduce(good, comm=c), p.allreduce(good), p.iallreduce(good).wait(),
           sparcml.iallreduce(good, comm=c).wait()]
    out = [v.to_dense() for v in out]
    out += [sparcml.topk_allreduce(dense_in, 3, comm=c).result.to_dense(),
            tp.topk_allreduce(dense_in).result.to_dense()]
    return p, [o.tobytes() for o in out]


# every site reduces through the communicator's one request: the kept send buffer holds the
# array of the latest agreement, whichever site made it
c1 = comm.Dup()
plan_1, results_1 = every_call(c1)
red = reduction_of(c1)
assert red is not None and (red.request is not None) == PERSISTENT, (PERSISTENT, red.request)
plan_1.allreduce(good)
if P > 1:  # (one rank: a plan checks nothing)
    assert red.send.tobytes() == plan_1._identity.head, "the plan's check took another path"
sparcml.allreduce(good, comm=c1)
assert red.send[1] != plan_1._identity.template[1], "the plain call's agreement bypassed it"
ar_signature = int(red.send[1])
sparcml.topk_allreduce(dense_in, 3, comm=c1)
assert int(red.send[1]) not in (ar_signature, int(plan_1._identity.template[1]))
done("agreement/one request, every site")

# a user's comm.Free() after calls (blocking and non-blocking: the thread's context too)
# frees sparcml's duplicate's request first (MPICH would keep the duplicate otherwise)
live = len(_ar._live)
c1.Free()
assert red.request is None, "freeing the user's communicator left the agreement request"
assert len(_ar._live) <= live - (1 if PERSISTENT else 0)
done("agreement/comm.Free after calls")

# the communication thread's own duplicate goes with the user's communicator (it was kept
# until exit: MPI runs out of communicators after a few thousand)
c4 = comm.Dup()
sparcml.iallreduce(good, comm=c4).wait()
engine = context_for(c4).engine
thread_comm = engine.ctx.comm
c4.Free()
engine._thread.join(30)
assert not engine._thread.is_alive(), "the communication thread did not stop"
assert thread_comm == MPI.COMM_NULL, "the thread's duplicate was not freed"
done("agreement/comm.Free frees the thread's duplicate")

# the fallback (an MPI without persistent collectives): decided at a communicator's first
# agreement, the same results, the same errors
_ar._use_persistent = False
c2 = comm.Dup()
_, results_2 = every_call(c2)
_ar._use_persistent = True
assert reduction_of(c2).request is None, "the switch did not select the fallback"
c3 = comm.Dup()
_, results_3 = every_call(c3)
assert results_2 == results_3 == results_1, "the fallback's results differ"
done("agreement/fallback, same results")

for c in (c2, c3):  # crossed calls and one rank's bad input, on either path
    p = sparcml.plan(100, np.float32, c)
    crossed = comm.allgather(outcome(
        lambda: p.allreduce(good) if rank == 0 else sparcml.allreduce(good, comm=c)))
    if P > 1:
        assert {got for got, _ in crossed} == {"RankMismatchError"}, crossed
    bad = comm.allgather(outcome(lambda: sparcml.allreduce(
        SparseVector(101, np.array([1]), np.ones(1, np.float32)) if rank == BAD else good,
        comm=c)))
    assert {got for got, _ in bad} == {"RankMismatchError" if P > 1 else "no exception"}, bad
    assert p.allreduce(good).to_dense()[[1, 5]].tolist() == [P, P]  # usable after
    c.Free()
done("agreement/fallback, crossed and bad rank")

# an agreement on a communicator MPI frees at MPI_Finalize (COMM_WORLD itself): its request
# must be freed before (the wrapper test reads stderr for MPICH's warning)
assert _agreement.agree(comm, {"x": 1}, maxima={"r": rank}) == {"r": P - 1}
assert (comm.Get_attr(_ar._keyval).request is not None) == PERSISTENT
done("agreement/agree on COMM_WORLD")

report("PLAN-BAD-RANK")
sys.exit(0)
