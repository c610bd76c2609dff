"""Persistent plans (issue 21, item 1): bitwise the plain calls, and errors on every rank.

Profile ``full``. For every registered algorithm, float32 and float64, sparse and dense
inputs (random float values: the comparison is of bits, not of sums), ``plan.allreduce`` and
``plan.iallreduce`` against :func:`sparcml.allreduce` with the same algorithm, over several
calls of one plan (the first and the steady ones), with and without ``out=``; ``auto``'s
plan against the plain call of the algorithm it fixed; :class:`sparcml.TopKPlan` against
:func:`sparcml.topk_allreduce` (result and dropped). At P >= 2, the last rank misbehaves
(another dim, another dtype, a NaN under QSGD, an object whose validation raises a foreign
exception): every rank raises the same class, and the plan works at its next call; every
rank passing another dim raises :class:`sparcml.PlanShapeError` on every rank.
"""

import numpy as np

import sparcml
from sparcml import SparseVector

from . import Case

DIM = 1001
DENSITIES = (0.005, 0.2, 0.9)  # sparse result, switch mid-way, dense-backed input


def bits(vec: SparseVector):
    return (vec.dim, vec.is_dense, None if vec.is_dense else vec.indices.tobytes(),
            vec.values.dtype.str, vec.values.tobytes())


def random_vec(comm, dim, density, dtype, seed):
    rng = np.random.default_rng([seed, comm.Get_rank(), dim])
    idx = np.flatnonzero(rng.random(dim) < density)
    vals = rng.standard_normal(idx.size).astype(dtype)
    if density >= 0.5:  # a dense-backed input
        dense = np.zeros(dim, dtype)
        dense[idx] = vals
        return SparseVector.dense(dense)
    return SparseVector(dim, idx, vals)


NATIVE = sparcml.Options(native_min_ranks=1)  # MPI's vector collectives at any P


def same_as_plain(comm, check, algorithm, dtype, options=None):
    """A plan of ``algorithm`` gives the plain call's bits, call after call."""
    plan = sparcml.plan(DIM, dtype, comm, algorithm=algorithm, options=options)
    check(plan.algorithm == algorithm, f"plan.algorithm {plan.algorithm}")
    for call, density in enumerate(DENSITIES * 2):
        vec = random_vec(comm, DIM, density, dtype, call)
        tag = f"[{algorithm} {np.dtype(dtype).name} d={density} call {call}]"
        want = sparcml.allreduce(vec, comm, algorithm=algorithm, options=options)
        got = plan.allreduce(vec)
        check(bits(got) == bits(want), f"{tag} plan.allreduce differs from allreduce")
        out = np.full(DIM, 7, dtype)
        got_out = plan.allreduce(vec, out=out)
        check(got_out.values is out and out.tobytes() == want.to_dense().tobytes(),
              f"{tag} out= differs")
        req = plan.iallreduce(vec)
        check(bits(req.wait()) == bits(want), f"{tag} plan.iallreduce differs")
        dense_in = vec.to_dense()
        check(bits(plan.allreduce(dense_in)) == bits(sparcml.allreduce(
            dense_in, comm, algorithm=algorithm, options=options)),
              f"{tag} ndarray input differs")
        check.same(bits(got), f"{tag} result")


def auto_plan(comm, check):
    plan = sparcml.plan(DIM, np.float32, comm, algorithm="auto", nnz=10)
    check(plan.algorithm in sparcml.ALGORITHMS, f"auto fixed {plan.algorithm!r}")
    check.same(plan.algorithm, "auto's choice")
    vec = random_vec(comm, DIM, 0.01, np.float32, 5)
    check(bits(plan.allreduce(vec)) == bits(sparcml.allreduce(vec, comm,
                                                              algorithm=plan.algorithm)),
          "auto plan differs from the plain call of its algorithm")


def quantized_plan(comm, check):
    """With QSGD: the same result on every rank, close to the exact sum."""
    q = sparcml.QSGD(8, seed=11)
    plan = sparcml.plan(DIM, np.float32, comm, algorithm="dsar_split_allgather", quantizer=q)
    for call in range(3):
        vec = random_vec(comm, DIM, 0.2, np.float32, 40 + call)
        got = plan.allreduce(vec)
        check.same(bits(got), f"quantized call {call}")
        exact = np.sum(comm.allgather(vec.to_dense()), axis=0)
        scale = float(np.max(np.abs(exact))) or 1.0
        check(np.max(np.abs(got.to_dense() - exact)) <= 0.1 * comm.Get_size() * scale,
              f"quantized call {call}: far from the sum")


def topk_same_as_plain(comm, check, dtype):
    for k in (0, 1, 10, 300):
        plan = sparcml.topk_plan(DIM, dtype, k, comm)
        for call, density in enumerate((0.01, 0.2, 0.9, 0.01)):
            vec = random_vec(comm, DIM, density, dtype, 100 + call)
            tag = f"[k={k} {np.dtype(dtype).name} d={density} call {call}]"
            want, want_dropped = sparcml.topk_allreduce(vec, k, comm)
            got, dropped = plan.topk_allreduce(vec)
            check(bits(got) == bits(want), f"{tag} result differs from topk_allreduce")
            check(bits(dropped) == bits(want_dropped), f"{tag} dropped differs")
            got_nb, _ = plan.itopk_allreduce(vec).wait()
            check(bits(got_nb) == bits(want), f"{tag} itopk_allreduce differs")


class _Unreadable(SparseVector):
    """A vector whose attributes were never set: validation raises AttributeError."""


def unreadable():
    return object.__new__(_Unreadable)


def bad_rank(comm, check, what, algorithm, options=None):
    """The last rank misbehaves in a plan call; every rank raises the same class."""
    rank, P = comm.Get_rank(), comm.Get_size()
    bad = rank == P - 1
    quantizer = sparcml.QSGD(4, seed=3) if what == "NaN under QSGD" else None
    plan = sparcml.plan(100, np.float32, comm, algorithm=algorithm, quantizer=quantizer,
                        options=options)
    good = SparseVector(100, np.array([1, 5]), np.ones(2, np.float32))
    vec = good
    expected = sparcml.InvalidVectorError
    if bad and what == "dim":
        vec = SparseVector(101, np.array([1, 5]), np.ones(2, np.float32))
    elif bad and what == "dtype":
        vec = SparseVector(100, np.array([1, 5]), np.ones(2, np.float64))
    elif what == "NaN under QSGD":
        expected = sparcml.QuantizationError
        if bad:
            vec = SparseVector(100, np.array([1, 5]), np.array([1.0, np.nan], np.float32))
    elif what == "foreign exception":
        expected = sparcml.InvalidArgumentError
        if bad:
            vec = unreadable()
    tag = f"{what}/{algorithm}"
    try:
        plan.allreduce(vec)
    except sparcml.SparcmlError as exc:
        cls, msg, ok = type(exc).__name__, str(exc), isinstance(exc, expected)
    else:
        cls, msg, ok = "no exception", "", False
    check(ok, f"{tag}: raised {cls}: {msg}")
    check.same(cls, f"{tag}: the class raised")
    if not bad:
        check(f"rank {P - 1}" in msg, f"{tag}: not told which rank: {msg!r}")
    again = plan.allreduce(good)
    check(again.to_dense()[[1, 5]].tolist() == [P, P], f"{tag}: the next call")


def every_rank_new_shape(comm, check, algorithm):
    plan = sparcml.plan(100, np.float32, comm, algorithm=algorithm)
    try:
        plan.allreduce(SparseVector(120, np.array([1]), np.ones(1, np.float32)))
    except sparcml.PlanShapeError as exc:
        shape = exc.shape
    else:
        shape = None
    check(shape == (120, np.dtype(np.float32).str), f"{algorithm}: PlanShapeError {shape}")


def topk_bad_rank(comm, check, what):
    rank, P = comm.Get_rank(), comm.Get_size()
    bad = rank == P - 1
    plan = sparcml.topk_plan(100, np.float32, 3, comm)
    good = SparseVector(100, np.array([1, 5, 9]), np.array([3, 2, 1], np.float32))
    vec, expected = good, sparcml.InvalidVectorError
    if what == "NaN":
        expected = sparcml.CompressionError
        if bad:
            vec = SparseVector(100, np.array([1, 5]), np.array([1.0, np.nan], np.float32))
    elif bad:
        vec = SparseVector(99, np.array([1]), np.ones(1, np.float32))
    try:
        plan.topk_allreduce(vec)
    except sparcml.SparcmlError as exc:
        cls, ok = type(exc).__name__, isinstance(exc, expected)
    else:
        cls, ok = "no exception", False
    check(ok, f"topk {what}: raised {cls}")
    check.same(cls, f"topk {what}: the class raised")
    result, _ = plan.topk_allreduce(good)
    check(result.indices.tolist() == [1, 5, 9] and result.values.tolist() == [3 * P, 2 * P, P],
          f"topk {what}: the next call")


def cases(profile: str, P: int, simulated: bool = False) -> list[Case]:
    if profile != "full":
        raise ValueError(f"unknown profile {profile!r}")
    out = [Case(f"same as plain {a} {np.dtype(t).name}", same_as_plain,
                {"algorithm": a, "dtype": t})
           for a in sparcml.ALGORITHMS for t in (np.float32, np.float64)]
    # the O(P) phases on MPI's Alltoallv instead of point-to-point messages (issue 21, item 2)
    out += [Case(f"same as plain {a} native", same_as_plain,
                 {"algorithm": a, "dtype": np.float32, "options": NATIVE})
            for a in sparcml.ALGORITHMS]
    out.append(Case("auto plan", auto_plan))
    out.append(Case("quantized plan", quantized_plan))
    out += [Case(f"topk same as plain {np.dtype(t).name}", topk_same_as_plain, {"dtype": t})
            for t in (np.float32, np.float64)]
    out += [Case(f"new shape everywhere {a}", every_rank_new_shape, {"algorithm": a})
            for a in sparcml.ALGORITHMS]
    if P >= 2:
        for what in ("dim", "dtype", "foreign exception"):
            out += [Case(f"bad rank {what} {a}", bad_rank, {"what": what, "algorithm": a})
                    for a in sparcml.ALGORITHMS]
        out += [Case(f"bad rank NaN under QSGD {a}", bad_rank,
                     {"what": "NaN under QSGD", "algorithm": a})
                for a in sparcml.ALGORITHMS if sparcml.get_algorithm(a).accepts_quantizer]
        out += [Case(f"bad rank {what} {a} native", bad_rank,
                     {"what": what, "algorithm": a, "options": NATIVE})
                for what in ("dim", "foreign exception") for a in sparcml.ALGORITHMS]
        out += [Case(f"topk bad rank {w}", topk_bad_rank, {"what": w}) for w in ("NaN", "dim")]
    return out
