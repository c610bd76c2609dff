"""Issue 25 item 1: a value the ranks agree on that one rank cannot even pack (``k = 2**70``,
``SPARCML_RANKS_PER_NODE=10**23``, a float, a string, None) and bad or mismatched options.

Run WITHOUT ``-m mpi4py``: each case must raise the same SparcmlError subclass on every rank,
naming the field (and, on the other ranks, the bad rank), and the next good call must work.
Rank 0 prints ``BAD-AGREED-VALUES <cases> OF <cases> OK``.
"""

import os
import sys

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import Options, SparseVector

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
BAD = P - 1
good = (100, np.array([1, 5]), np.ones(2, np.float32))


def outcome(fn):
    try:
        fn()
    except sparcml.SparcmlError as exc:
        return (type(exc).__name__, str(exc))
    except Exception as exc:  # noqa: BLE001 - reported, and fails the case
        return ("foreign " + type(exc).__name__, str(exc))
    return ("no exception", "")


def sane_afterwards(label):
    ok = sparcml.allreduce(SparseVector(*good))
    assert ok.to_dense()[[1, 5]].tolist() == [P, P], label
    top = sparcml.topk_allreduce(SparseVector(*good), 1).result
    assert top.indices.tolist() == [1], label


def env_on_bad(var, value, fn):
    """``fn`` with ``var=value`` in this rank's environment when it is the bad one."""
    def call(bad):
        if bad:
            os.environ[var] = value
        try:
            return fn()
        finally:
            os.environ.pop(var, None)
    return call


def allreduce(**kw):
    return lambda: sparcml.allreduce(good, **kw)


CALLS = {"allreduce": allreduce(),
         "allreduce hierarchical": allreduce(hierarchical=True),
         "topk_allreduce": lambda: sparcml.topk_allreduce(good, 1),
         "allgather": lambda: sparcml.allgather(good),
         "reduce_scatter": lambda: sparcml.reduce_scatter(good),
         "bcast": lambda: sparcml.bcast(SparseVector(*good))}

cases = [
    # the two: k beyond int64, and a grouping beyond int64 with hierarchical=True
    ("k 2**70", lambda bad: sparcml.topk_allreduce(good, 2**70 if bad else 1),
     "AgreementFieldError", "k must be an integer that int64 holds"),
    ("k uint64 max", lambda bad: sparcml.topk_allreduce(good, np.uint64(2**64 - 1) if bad
                                                        else 1),
     "AgreementFieldError", "k must be"),
    ("k nan", lambda bad: sparcml.topk_allreduce(good, float("nan") if bad else 1),
     "InvalidArgumentError", "k must be an integer"),
    ("k None", lambda bad: sparcml.topk_allreduce(good, None if bad else 1),
     "InvalidArgumentError", "k must be an integer"),
    ("itopk k 2**70", lambda bad: sparcml.itopk_allreduce(good, 2**70 if bad else 1).wait(),
     "AgreementFieldError", "k must be"),
    ("bcast root 2**70", lambda bad: sparcml.bcast(SparseVector(*good), root=2**70 if bad else 0),
     "InvalidArgumentError", "rank"),
    ("dim 2**70", lambda bad: sparcml.allreduce((2**70, np.array([1]), np.ones(1, np.float32))
                                                if bad else good),
     "InvalidVectorError", "2**63"),
]
for name, fn in CALLS.items():
    cases += [
        (f"{name}: ranks per node 10**23", env_on_bad(
            "SPARCML_RANKS_PER_NODE", "99999999999999999999999", fn),
         "InvalidOptionError", "SPARCML_RANKS_PER_NODE='99999999999999999999999'"),
        (f"{name}: partitions", env_on_bad("SPARCML_PARTITIONS", "skewed", fn),
         "InvalidOptionError", "SPARCML_PARTITIONS='skewed'"),
        (f"{name}: index coding", env_on_bad("SPARCML_INDEX_CODING", "yes", fn),
         "InvalidOptionError", "SPARCML_INDEX_CODING='yes'"),
        (f"{name}: node shm", env_on_bad("SPARCML_NODE_SHM", "2", fn),
         "InvalidOptionError", "SPARCML_NODE_SHM='2'"),
        (f"{name}: auto tuning", env_on_bad("SPARCML_AUTO_TUNING", "maybe", fn),
         "InvalidOptionError", "SPARCML_AUTO_TUNING='maybe'"),
        (f"{name}: wait", env_on_bad("SPARCML_WAIT", "busy", fn),
         "InvalidOptionError", "SPARCML_WAIT='busy'"),
    ]
# options= that is not an Options, on one rank
cases += [
    ("options dict", lambda bad: sparcml.allreduce(good, options={"wait": "spin"} if bad
                                                   else None),
     "InvalidOptionError", "sparcml.Options or None"),
    ("options string, topk", lambda bad: sparcml.topk_allreduce(good, 1, options="raw" if bad
                                                                else Options()),
     "InvalidOptionError", "sparcml.Options or None"),
]
# a valid option that differs on one rank: every agreed field is named; wait is per rank
if P > 1:
    for field, value in [("partitions", "equal"), ("index_coding", "raw"),
                         ("node_shm", False), ("ranks_per_node", 1), ("auto_tuning", False),
                         ("native_min_ranks", 1)]:
        for name, call in [("allreduce", lambda o: sparcml.allreduce(good, options=o)),
                           ("topk_allreduce", lambda o: sparcml.topk_allreduce(good, 1,
                                                                               options=o)),
                           ("bcast", lambda o: sparcml.bcast(SparseVector(*good), options=o))]:
            cases.append((f"{name}: {field} differs",
                          lambda bad, call=call, field=field, value=value: call(
                              Options(**{field: value}) if bad else Options()),
                          "RankMismatchError", f"options.{field}"))

n = 0
for label, call, cls, needle in cases:
    every = comm.allgather(outcome(lambda: call(rank == BAD)))
    for r, (got, msg) in enumerate(every):
        assert got == cls, f"{label}: rank {r} raised {got}: {msg}"
        assert needle in msg, f"{label}: rank {r}: {msg!r} lacks {needle!r}"
        if r != BAD:
            assert f"rank {BAD}" in msg, f"{label}: rank {r} not told which rank: {msg!r}"
    sane_afterwards(label)
    n += 1

# the wait policy: agreed as the policy each rank would use ("auto" is one answer for all)
from sparcml._runtime.context import context_for  # noqa: E402

auto_yields = context_for(comm).waiter.auto
for wait in ("spin", "yield", "auto"):
    label = f"wait {wait!r} on one rank"
    every = comm.allgather(outcome(lambda: sparcml.allreduce(
        good, options=Options(wait=wait if rank == BAD else "auto"))))
    differs = P > 1 and (wait == "yield") != auto_yields and wait != "auto"
    for r, (got, msg) in enumerate(every):
        if differs:
            assert got == "RankMismatchError" and "options.wait" in msg, (label, r, got, msg)
        else:
            assert got == "no exception", (label, r, got, msg)
    sane_afterwards(label)
    n += 1
    cases.append(label)

if rank == 0:
    print(f"BAD-AGREED-VALUES {n} OF {len(cases)} OK", flush=True)
sys.exit(0)
