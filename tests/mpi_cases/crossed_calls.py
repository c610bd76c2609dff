"""Issue 36, items 1-2: calls that cannot be crossed, one rank's failure before the agreement.

Run WITHOUT ``-m mpi4py`` (a rank that raised would otherwise abort the job and hide a hang),
under a timeout, at P >= 2: every case makes the ranks disagree (rank 0 against the others)
and must raise the same error class on every rank, never a hang or a wrong result, and the
calls after it must work. Groups:

- ``plan/...``: persistent plans called in swapped order, a ``plan`` against a ``topk_plan``
  or a plain call, a plan dropped on one rank (which goes on to a plain call or to making a
  new plan), plans of other algorithms, non-blocking; an
  ``auto`` plan whose ranks expect other nonzeros;
- ``lean/...``: the plain call's lean path with a bad ``SPARCML_*`` variable on one rank;
- ``compression/...``: every compressor of the catalog with a NaN or Inf on one rank, a
  residual of another length on one rank, an FP16 overflow on one rank.

``python crossed_calls.py [SUBSTRING]`` runs the cases whose label holds SUBSTRING. Rank 0
prints the cases planned and passed (``CROSSED-REPORT``: tests/mpi_cases/_mpi_checks.py).
"""

import gc
import os
import sys

import numpy as np
from mpi4py import MPI

import sparcml
from sparcml import SparseVector
from sparcml.compression import COMPRESSORS, build

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mpi_checks import done, plan, report  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
BAD = P - 1
ODD = rank == BAD  # the rank that differs
ONLY = sys.argv[1] if len(sys.argv) > 1 else ""


def vec(dim, dtype=np.float32):
    return SparseVector(dim, np.array([1, 7]), np.ones(2, dtype))


def outcome(fn):
    try:
        fn()
    except sparcml.SparcmlError as exc:
        return (type(exc).__name__, str(exc))
    except Exception as exc:  # noqa: BLE001 - reported, and fails the case
        return ("foreign " + type(exc).__name__, str(exc))
    return ("no exception", "")


def same_error(name, fn, expected):
    """``fn`` raises ``expected`` (a class name, or a tuple of them) alike on every rank."""
    every = comm.allgather(outcome(fn))
    expected = (expected,) if isinstance(expected, str) else expected
    classes = {got for got, _ in every}
    assert len(classes) == 1 and classes <= set(expected), f"{name}: {every}"


def summed(name, result, dim):
    want = np.zeros(dim, np.float32)
    want[[1, 7]] = P
    got = result.to_dense()
    assert np.array_equal(got, want), f"{name}: rank {rank} got {got[:10]}"


# ---- plans -------------------------------------------------------------------------------------
def swapped(algorithm, blocking):
    a = sparcml.plan(1000, np.float32, comm, algorithm=algorithm)
    b = sparcml.plan(2000, np.float32, comm, algorithm=algorithm)
    call = (lambda p, d: p.allreduce(vec(d))) if blocking else \
        (lambda p, d: p.iallreduce(vec(d)).wait())
    first, second = ((a, 1000), (b, 2000)) if not ODD else ((b, 2000), (a, 1000))
    label = f"plan/swapped {algorithm} {'blocking' if blocking else 'nonblocking'}"
    same_error(label, lambda: call(*first), "RankMismatchError")
    same_error(label, lambda: call(*second), "RankMismatchError")
    summed(label, call(a, 1000), 1000)
    summed(label, call(b, 2000), 2000)


def plan_against_topk():
    p = sparcml.plan(1000, np.float32, comm)
    t = sparcml.topk_plan(1000, np.float32, 2, comm)
    fn = (lambda: t.topk_allreduce(vec(1000))) if ODD else (lambda: p.allreduce(vec(1000)))
    same_error("plan/plan vs topk_plan", fn, "RankMismatchError")
    summed("plan/plan vs topk_plan", p.allreduce(vec(1000)), 1000)
    summed("plan/plan vs topk_plan", t.topk_allreduce(vec(1000)).result, 1000)


def plan_against_plain(algorithm):
    p = sparcml.plan(1000, np.float32, comm, algorithm=algorithm)
    fn = (lambda: sparcml.allreduce(vec(1000), comm)) if ODD else (lambda: p.allreduce(vec(1000)))
    same_error(f"plan/plan vs plain {algorithm}", fn, "RankMismatchError")
    summed("plan/plan vs plain", p.allreduce(vec(1000)), 1000)


def dropped():
    p = sparcml.plan(1000, np.float32, comm)
    if ODD:  # this rank lets its plan go and goes on to its next call
        del p
        gc.collect()
        fn = lambda: sparcml.allreduce(vec(1000), comm)  # noqa: E731
    else:
        fn = lambda: p.allreduce(vec(1000))  # noqa: E731
    same_error("plan/dropped", fn, "RankMismatchError")
    summed("plan/dropped", sparcml.allreduce(vec(1000), comm), 1000)


def dropped_then_new_plan():
    """One rank lets its plan go and makes a new one (a collective creation) while the others
    call the old plan: the creation's agreement meets the call's identity check."""
    label = "plan/dropped, then a new plan"
    p = sparcml.plan(1000, np.float32, comm)
    if ODD:
        del p
        gc.collect()
        fn = lambda: sparcml.plan(1000, np.float32, comm)  # noqa: E731
    else:
        fn = lambda: p.allreduce(vec(1000))  # noqa: E731
    same_error(label, fn, "RankMismatchError")
    summed(label, sparcml.allreduce(vec(1000), comm), 1000)
    q = sparcml.plan(1000, np.float32, comm)
    summed(label, q.allreduce(vec(1000)), 1000)


def other_algorithms(mine, theirs):
    a = sparcml.plan(1000, np.float32, comm, algorithm=mine)
    b = sparcml.plan(1000, np.float32, comm, algorithm=theirs)
    fn = (lambda: b.allreduce(vec(1000))) if ODD else (lambda: a.allreduce(vec(1000)))
    same_error(f"plan/{mine} vs {theirs}", fn, "RankMismatchError")
    summed("plan/algorithms", a.allreduce(vec(1000)), 1000)
    summed("plan/algorithms", b.allreduce(vec(1000)), 1000)


def auto_nnz():
    dim = 200_000
    p = sparcml.plan(dim, np.float32, comm, algorithm="auto", nnz=1 if ODD else dim)
    chosen = comm.allgather(p.algorithm)
    assert len(set(chosen)) == 1, f"auto plan chose {chosen}"
    summed("plan/auto nnz", p.allreduce(vec(dim)), dim)


# ---- the lean path -----------------------------------------------------------------------------
def lean_env(var, value):
    name = f"lean/{var}={value!r}"
    old = os.environ.get(var)
    if ODD:
        os.environ[var] = value
    try:
        same_error(name, lambda: sparcml.allreduce(vec(1000), comm), "InvalidOptionError")
    finally:
        if ODD:
            if old is None:
                del os.environ[var]
            else:
                os.environ[var] = old
    summed(name, sparcml.allreduce(vec(1000), comm), 1000)


def iallreduce_wait():
    """``wait=`` is local on non-blocking calls (the communication thread always waits with
    sleeps): ranks that differ in it get the sum, no error, no hang."""
    opts = sparcml.Options(wait="spin" if ODD else "yield")
    summed("lean/iallreduce wait", sparcml.iallreduce(vec(1000), comm, options=opts).wait(), 1000)
    p = sparcml.plan(1000, np.float32, comm)
    summed("lean/iallreduce wait", p.iallreduce(vec(1000)).wait(), 1000)


# ---- compression -------------------------------------------------------------------------------
def compression_bad_value(name, bad):
    label = f"compression/{name} {bad}"
    comp = build(name, density=0.25, threshold=0.5, rank=1)
    rng = np.random.default_rng(rank)
    x = rng.standard_normal(64).astype(np.float32)
    comp.allreduce(x, key="w", comm=comm)  # one good step: the memory holds a residual
    y = x.copy()
    if ODD:
        y[3] = bad
    same_error(label, lambda: comp.allreduce(y, key="w", comm=comm), "CompressionError")
    after = comp.allreduce(x, key="w", comm=comm).to_dense()
    every = comm.allgather(after.tobytes())
    assert all(e == every[0] for e in every) and np.isfinite(after).all(), label


def compression_first_step(name):
    """A NaN on one rank at a key's first step: the plan is made on every rank (the failing
    one from the input's shape) and the error raised on every rank."""
    label = f"compression/{name} nan at the first step"
    comp = build(name, density=0.25)
    x = np.linspace(-1, 1, 64).astype(np.float32)
    y = x.copy()
    if ODD:
        y[0] = np.nan
    same_error(label, lambda: comp.allreduce(y, key="w", comm=comm), "CompressionError")
    after = comp.allreduce(x, key="w", comm=comm).to_dense()
    every = comm.allgather(after.tobytes())
    assert all(e == every[0] for e in every) and np.isfinite(after).all(), label


def compression_wrong_length(name):
    label = f"compression/{name} residual length"
    comp = build(name, density=0.25, threshold=0.5, rank=1)
    x = np.linspace(-1, 1, 64).astype(np.float32)
    comp.allreduce(x, key="w", comm=comm)
    if ODD:  # this rank's memory holds a residual of another length
        comp.memory.load_state_dict(_shortened(comp.memory.state_dict()))
    same_error(label, lambda: comp.allreduce(x, key="w", comm=comm),
               ("CompressionError", "RankMismatchError"))
    comp.memory.reset()
    after = comp.allreduce(x, key="w", comm=comm).to_dense()
    every = comm.allgather(after.tobytes())
    assert all(e == every[0] for e in every) and np.isfinite(after).all(), label


def _shortened(state):
    out = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out[k] = {key: (a[:-1] if isinstance(a, np.ndarray) else a) for key, a in v.items()}
        else:
            out[k] = v
    return out


def fp16_overflow():
    label = "compression/fp16 overflow"
    comp = build("fp16")
    x = np.ones(16, np.float32)
    y = x.copy()
    if ODD:
        y[2] = 70000.0  # beyond float16's 65504: Inf once cast
    same_error(label, lambda: comp.allreduce(y, key="w", comm=comm), "CompressionError")
    after = comp.allreduce(x, key="w", comm=comm).to_dense()
    assert np.array_equal(after, np.full(16, P, np.float32)), label


# ---- the cases ---------------------------------------------------------------------------------
ALGOS = ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather", "dense",
         "allgather")
CASES = []
for algorithm in ("ssar_recursive_double", "ssar_split_allgather", "dense"):
    for blocking in (True, False):
        CASES.append((f"plan/swapped {algorithm} {'blocking' if blocking else 'nonblocking'}",
                      swapped, (algorithm, blocking)))
CASES.append(("plan/plan vs topk_plan", plan_against_topk, ()))
for algorithm in ("ssar_recursive_double", "dsar_split_allgather"):
    CASES.append((f"plan/plan vs plain {algorithm}", plan_against_plain, (algorithm,)))
CASES.append(("plan/dropped", dropped, ()))
CASES.append(("plan/dropped, then a new plan", dropped_then_new_plan, ()))
for mine, theirs in (("ssar_recursive_double", "dense"), ("dense", "ssar_split_allgather"),
                     ("ssar_split_allgather", "dsar_split_allgather"),
                     ("allgather", "ssar_recursive_double")):
    CASES.append((f"plan/{mine} vs {theirs}", other_algorithms, (mine, theirs)))
CASES.append(("plan/auto nnz", auto_nnz, ()))
for var, value in (("SPARCML_PARTITIONS", "bogus"),
                   ("SPARCML_NATIVE_MIN_RANKS", "99999999999999999999999"),
                   ("SPARCML_INDEX_CODING", "\uff52\uff41\uff57")):  # full-width "raw"
    CASES.append((f"lean/{var}", lean_env, (var, value)))
CASES.append(("lean/iallreduce wait", iallreduce_wait, ()))
BAD_VALUES = ("nan", "inf")
for name in COMPRESSORS:
    for bad in BAD_VALUES:
        CASES.append((f"compression/{name} {bad}", compression_bad_value, (name, float(bad))))
for name in ("topk", "global-topk", "dgc", "qsgd"):
    CASES.append((f"compression/{name} nan at the first step", compression_first_step, (name,)))
for name in ("topk", "global-topk", "dgc", "threshold", "efsignsgd", "randomk"):
    CASES.append((f"compression/{name} residual length", compression_wrong_length, (name,)))
CASES.append(("compression/fp16 overflow", fp16_overflow, ()))

CASES = [c for c in CASES if ONLY in c[0]]
plan(*[c[0] for c in CASES])
for label, fn, args in CASES:
    fn(*args)
    comm.Barrier()
    if rank == 0:
        print("passed", label, flush=True)
    done(label)
report("CROSSED")
sys.exit(0)
