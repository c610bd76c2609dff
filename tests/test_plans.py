"""Persistent plans (issue 21, item 1): the API, no agreement per call, the fast path's bits,
errors that reach every rank without an agreement round, and ``sparc-bench --latency``.

The bitwise comparison of plans with the plain calls over every algorithm is in the test matrix
(tests/matrix/plans.py, simulated and real ranks by tests/test_matrix.py)."""

import sys

import numpy as np
import pytest

import sparcml
import sparcml.sim as sim
from mpirun import REPO, case_report, run_mpi
from sparcml import SparseVector
from sparcml._runtime import agreement
from sparcml._runtime.context import context_for

CASES = REPO / "tests" / "mpi_cases"


def test_plans_are_public():
    for name in ("plan", "AllreducePlan", "topk_plan", "TopKPlan", "PlanShapeError",
                 "PlanInputError"):
        assert name in sparcml.__all__ and hasattr(sparcml, name)
    assert issubclass(sparcml.PlanShapeError, sparcml.PlanInputError)
    assert issubclass(sparcml.PlanInputError, sparcml.InvalidVectorError)


def test_steady_calls_run_no_agreement(monkeypatch):
    """Creation agrees once; the calls after it never call agree()."""
    counted = []
    real = agreement.agree

    def counting(*args, **kwargs):
        counted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(agreement, "agree", counting)

    def ranks(comm):
        plans = [sparcml.plan(500, np.float32, comm, algorithm=a) for a in sparcml.ALGORITHMS]
        tplan = sparcml.topk_plan(500, np.float32, 4, comm)
        comm.Barrier()
        before = len(counted)
        vec = SparseVector(500, np.arange(comm.Get_rank(), 500, 50), np.ones(10, np.float32))
        for _ in range(3):
            for p in plans:
                p.allreduce(vec)
            tplan.topk_allreduce(vec)
        comm.Barrier()
        return before, len(counted)

    res = sim.run(3, ranks, timeout=300)
    assert all(before > 0 and after == before for before, after in res.results), res.results


def test_fast_path_keeps_its_buffers():
    """After the first calls, a lossless recursive-doubling plan reuses the same arrays."""

    def ranks(comm):
        plan = sparcml.plan(300, np.float64, comm)
        assert plan.fast and plan.algorithm == sparcml.DEFAULT_ALGORITHM
        rng = np.random.default_rng(comm.Get_rank())
        out = np.empty(300, np.float64)
        seen = []
        for call in range(6):
            vec = SparseVector(300, np.sort(rng.choice(300, 40, replace=False)),
                               rng.standard_normal(40))
            plan.allreduce(vec, out=out)
            fast = plan._state(context_for(comm)).fast
            seen.append({name: id(buf) for name, buf in fast.bufs.items()})
        return seen[2] == seen[-1] and seen[-1]

    # the fast path is taken on the plain operations only (a simulated run's shared or modeled
    # ones go through the algorithm): simulated ranks without either
    assert all(sim.run(2, ranks, timeout=120, share=False, compute="measured").results)


def test_quantized_plan_is_the_same_on_every_rank_whatever_the_seeds():
    """Quantizers seeded differently on each rank: the plan's shared streams come from the
    base seed agreed at creation, so every rank holds the same sum."""

    def ranks(comm):
        q = sparcml.QSGD(4, seed=comm.Get_rank())
        out = []
        for algorithm in ("ssar_recursive_double", "dsar_split_allgather"):
            plan = sparcml.plan(400, np.float32, comm, algorithm=algorithm, quantizer=q,
                                quantize_sparse=True)
            rng = np.random.default_rng(comm.Get_rank())
            for _ in range(2):
                vec = SparseVector.dense(rng.standard_normal(400).astype(np.float32))
                out.append(plan.allreduce(vec).values.tobytes())
        return out

    res = sim.run(3, ranks, timeout=120).results
    assert all(r == res[0] for r in res)


def test_plan_arguments_are_checked_on_every_rank():
    def ranks(comm):
        dim = 100 if comm.Get_rank() == 0 else 101
        try:
            sparcml.plan(dim, np.float32, comm)
        except sparcml.RankMismatchError as exc:
            return "dim" in str(exc)
        return False

    assert all(sim.run(3, ranks, timeout=120).results)


def test_compression_reduces_through_plans():
    """A Compression with a named algorithm keeps one plan per key; its sums are bitwise the
    plain allreduce of the same compressed vectors (error feedback computed beside it)."""
    from sparcml.compression import Compression, TopKCompressor

    def ranks(comm):
        comp = Compression(TopKCompressor(0.1), algorithm="ssar_recursive_double")
        rng = np.random.default_rng(comm.Get_rank())
        residual = np.zeros(200, np.float32)
        same = []
        for step in range(4):
            x = rng.standard_normal(200).astype(np.float32)
            got = comp.allreduce(x, key="w", comm=comm)
            g = x + residual
            vec = TopKCompressor(0.1).compress(g)
            want = sparcml.allreduce(vec, comm)
            residual = g - vec.to_dense()
            same.append(got.values.tobytes() == want.values.tobytes()
                        and got.is_dense == want.is_dense)
        return all(same) and len(comp._plans) == 1

    assert all(sim.run(2, ranks, timeout=120).results)


def test_plans_follow_the_shape_when_asked():
    """follow_shape (agreed): every rank's new dim and dtype remake the plan there, the call
    then runs (allreduce: the same sum as the plain call; top-k: k from the function of the
    dim); without it PlanShapeError, as before; one rank's other shape stays that rank's error
    (PlanInputError on every rank, nothing remade); a call that remakes the plan writes the
    caller's ``out`` and counts in its ``stats``; a bad or differing follow_shape raises on
    every rank. Simulated ranks at P = 1, 2, 3, 5: one run each, many cases."""

    def ranks(comm):
        P, r = comm.Get_size(), comm.Get_rank()
        out = []

        def vec(dim, dtype=np.float32, shift=0):
            idx = np.unique(np.array([r, (3 * r + 1 + shift) % dim, dim - 1]))
            return SparseVector(dim, idx, np.arange(1, idx.size + 1).astype(dtype))

        plan = sparcml.plan(50, np.float32, comm, follow_shape=True)
        tplan = sparcml.topk_plan(50, np.float32, 2, comm, follow_shape=lambda n: n // 20)
        for dim, dtype in ((50, np.float32), (80, np.float64), (80, np.float64), (30, np.float32)):
            got = plan.allreduce(vec(dim, dtype))
            want = sparcml.allreduce(vec(dim, dtype), comm)
            out.append(got.values.tobytes() == want.values.tobytes()
                       and (plan.dim, plan.dtype) == (dim, np.dtype(dtype)))
            top, _ = tplan.topk_allreduce(vec(dim, dtype, 1))
            k = 2 if dim == 50 else dim // 20
            ref, _ = sparcml.topk_allreduce(vec(dim, dtype, 1), k, comm)
            out.append(tplan.k == k and top.indices.tobytes() == ref.indices.tobytes()
                       and top.values.tobytes() == ref.values.tobytes())
        fixed = sparcml.plan(50, np.float32, comm)
        try:
            fixed.allreduce(vec(60))
            out.append(False)
        except sparcml.PlanShapeError:
            out.append(fixed.dim == 50)
        number = plan.number
        try:  # one rank's other shape: that rank's error everywhere, the plan kept
            plan.allreduce(vec(31 if r == P - 1 else 30))
            out.append(P == 1 and plan.dim == 31)  # (at P = 1 that rank is every rank)
        except sparcml.PlanInputError as exc:
            out.append(type(exc) is sparcml.PlanInputError and P > 1 and plan.dim == 30
                       and plan.number == number)
        # a call that remakes the plan writes the caller's out and counts in its stats
        buf, counted = np.full(40, np.nan, np.float32), sparcml.TrafficStats()
        plan.allreduce(vec(40), out=buf, stats=counted)
        want = sparcml.allreduce(vec(40), comm).to_dense()
        out.append(plan.dim == 40 and counted.calls == 1
                   and buf.tobytes() == want.tobytes())
        for bad in ("yes", r == 0 and P > 1):  # not a bool; differing across ranks
            try:
                sparcml.plan(50, np.float32, comm, follow_shape=bad)
                out.append(bad is False or bad is True and P == 1)
            except (sparcml.InvalidArgumentError, sparcml.RankMismatchError):
                out.append(True)
        return out

    for P in (1, 2, 3, 5):
        results = sim.run(P, ranks, timeout=300).results
        assert all(all(r) for r in results), (P, results)
        assert len(results[0]) == 13, results[0]


@pytest.mark.mpi
@pytest.mark.parametrize("P,native", [(1, None), (2, None), (3, None), (5, None), (5, "1")])
def test_one_bad_rank_raises_everywhere_through_a_plan(P, native):
    """Plain ``python script.py`` (no ``-m mpi4py``): a hang here would be a hang for users.
    ``native``: the O(P) phases packed in MPI's vector collectives at any P (the error flag
    in the packed messages' headers, top-k's trailer in the size exchange)."""
    env = None if native is None else {"SPARCML_NATIVE_MIN_RANKS": native}
    proc = run_mpi(P, args=[sys.executable, str(CASES / "plan_bad_rank.py")], timeout=400,
                   env=env)
    ran = case_report(proc.stdout, "PLAN-BAD-RANK")
    for algorithm in sparcml.ALGORITHMS:
        assert f"dim {algorithm} blocking" in ran and f"dim {algorithm} nonblocking" in ran
    # issue 34: the agreements' persistent request per communicator, its fallback, its frees
    assert "agreement/fallback, crossed and bad rank" in ran
    assert "agreement/comm.Free after calls" in ran
    assert "persistent request" not in proc.stderr, proc.stderr  # MPICH: one still allocated


def test_recursive_doubling_has_one_schedule_that_pairs_every_message():
    """The algorithm and its fast path run one schedule (recursive_doubling.schedule): at
    P = 1..40 every send has its receive on the peer in the same phase, every round is
    mutual (the peer's round of the same index names this rank, the other operand first),
    log2(pof2) rounds, and the fast path holds exactly that schedule."""
    from types import SimpleNamespace

    from sparcml._collectives.algorithms import recursive_doubling as rd
    from sparcml._collectives.plan_fast import FastRecursiveDoubling

    for P in range(1, 41):
        plans = [rd.schedule(r, P) for r in range(P)]
        pof2 = 1 << (P.bit_length() - 1)
        for r, steps in enumerate(plans):
            rounds = [s for s in steps if s.kind == rd.ROUND]
            assert len(rounds) == (0 if steps and steps[0].kind == rd.FOLD_SEND
                                   else pof2.bit_length() - 1), (P, r, steps)
            for i, s in enumerate(rounds):
                mate = [t for t in plans[s.peer] if t.kind == rd.ROUND][i]
                assert mate.peer == r and mate.lower != s.lower and mate.mask == s.mask
                assert s.last == (i == len(rounds) - 1) and s.role == f"rd{(i + 1) % 2}"
            pair = {rd.FOLD_SEND: rd.FOLD_RECV, rd.FOLD_RECV: rd.FOLD_SEND,
                    rd.UNFOLD_SEND: rd.UNFOLD_RECV, rd.UNFOLD_RECV: rd.UNFOLD_SEND}
            for s in steps:
                if s.kind in pair:
                    assert pair[s.kind] in [t.kind for t in plans[s.peer] if t.peer == r], \
                        (P, r, s)
        ctx = SimpleNamespace(rank=P - 1, size=P, comm=None, waiter=None)
        assert FastRecursiveDoubling(ctx, 16, np.float32).steps is rd.schedule(P - 1, P)


def test_fast_path_bounds():
    """The allreduce fast path serves up to 64 MiB dense (N = 16M float32); top-k's P = 2 plan
    path keeps 8 MiB (it sends each rank's whole input)."""
    from types import SimpleNamespace

    from sparcml._collectives.ops import PLAIN
    from sparcml._collectives.plan_fast import fits
    from sparcml._topk.plan import serves

    assert fits(1 << 24, np.float32) and not fits((1 << 24) + 1, np.float32)
    assert fits(1 << 23, np.float64) and not fits((1 << 23) + 1, np.float64)
    two = SimpleNamespace(size=2, ops=PLAIN)
    assert serves(two, 1 << 21, np.float32) and not serves(two, (1 << 21) + 1, np.float32)
    assert serves(two, 1 << 20, np.float64) and not serves(two, (1 << 20) + 1, np.float64)


FAST_PATH_BITS = r"""
import numpy as np
from mpi4py import MPI
import sparcml
from sparcml._collectives.entry import allreduce_in
from sparcml._runtime.context import context_for

comm = MPI.COMM_WORLD
ctx = context_for(comm)
checked = 0
for dtype in (np.float32, np.float64):
    for dim in (1, 7, 1000, 4099):
        for density in (0.0, 0.003, 0.1, 0.4, 0.7, 1.0):
            rng = np.random.default_rng([comm.rank, dim, int(density * 1000)])
            idx = np.flatnonzero(rng.random(dim) < density)
            vals = rng.standard_normal(idx.size).astype(dtype)
            vals[::5] *= -0.0  # negative zeros travel as they are
            vec = sparcml.SparseVector(dim, idx, vals)
            if density >= 0.7:
                vec = sparcml.SparseVector.dense(vec.to_dense())
            fast = sparcml.allreduce(vec, comm)               # the cached fast path
            slow = allreduce_in(ctx, vec, sent=[])            # the registry's algorithm
            assert fast.is_dense == slow.is_dense, (dim, density)
            assert fast.values.tobytes() == slow.values.tobytes(), (dim, density, dtype)
            if not fast.is_dense:
                assert fast.indices.tobytes() == slow.indices.tobytes()
            out = np.empty(dim, dtype)
            sparcml.allreduce(vec, comm, out=out)
            assert out.tobytes() == slow.to_dense().tobytes()
            checked += 1
assert ctx.plans, "the plain call made no fast path"
big = (8 << 20) // 4 + 1  # above the former bound (8 MiB dense), within 64 MiB: fast
rng = np.random.default_rng([comm.rank, big])
idx = np.sort(rng.choice(big, big // 1000, replace=False))
vec = sparcml.SparseVector(big, idx, rng.standard_normal(idx.size).astype(np.float32))
fast = sparcml.allreduce(vec, comm)
slow = allreduce_in(ctx, vec, sent=[])
assert ctx.plans[("allreduce", big, vec.dtype.str)].fast
assert fast.indices.tobytes() == slow.indices.tobytes()
assert fast.values.tobytes() == slow.values.tobytes()
checked += 1
total = comm.allreduce(checked)
if comm.rank == 0:
    print("FAST-PATH-CHECKED", total)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("P", [2, 3, 5])
def test_plain_allreduce_fast_path_is_bitwise_the_algorithm(P):
    proc = run_mpi(P, FAST_PATH_BITS, timeout=400)
    assert f"FAST-PATH-CHECKED {P * (2 * 4 * 6 + 1)}" in proc.stdout, proc.stdout


TOPK_TWO_RANKS = """
import numpy as np
from mpi4py import MPI
import sparcml
from sparcml._runtime.context import context_for
from sparcml._collectives.plan_core import PLANS_KEPT
from sparcml._topk.plan import TopKPlan
from sparcml._topk.topk_allreduce import _max_key, _run

comm = MPI.COMM_WORLD
ctx = context_for(comm)
r = comm.rank
checked = 0
for seed in range(120):
    rng, shared = np.random.default_rng([seed, r]), np.random.default_rng(seed)
    dim = int(shared.integers(1, 3000))
    dtype = (np.float32, np.float64)[seed % 2]
    k = int(shared.integers(0, 40))
    nnz = int(rng.integers(0, min(dim, 200) + 1)) if seed % 5 else dim
    idx = np.sort(rng.choice(dim, nnz, replace=False))
    if seed % 3 == 0:  # ties, explicit zeros, negative zeros
        vals = rng.choice([-2.0, -1.0, -0.0, 0.0, 1.0, 2.0, 0.5], nnz).astype(dtype)
    else:
        vals = rng.standard_normal(nnz).astype(dtype)
    v = sparcml.SparseVector(dim, idx, vals)
    if seed % 7 == 0:  # cancellation: the higher rank sends the lower one's negation
        v0 = comm.bcast(v if r == 0 else None)
        v = v0 if r == 0 else sparcml.SparseVector(dim, v0.indices, -v0.values)
    if seed % 11 == 0:
        v = sparcml.SparseVector.from_dense(v.to_dense())
    plan = sparcml.topk_plan(dim, dtype, k, comm)
    # the general path (reduce-scatter, selection, allgather), which the plain call takes at
    # P >= 3 and a cached plan replaces at P = 2, with the agreement's maxima
    top = comm.allreduce(_max_key(v), MPI.MAX)
    items = comm.allreduce(v.dim if v.is_dense else v.nnz, MPI.MAX)
    for repeat in range(2):  # the plain call remembers its threshold from the first
        a, a_dropped = plan.topk_allreduce(v)
        b, b_dropped = sparcml.topk_allreduce(v, k, comm)
        c, c_dropped = _run(ctx, v, k, sparcml.TrafficStats(), sparcml.default_options(),
                            top, items)
        for x, y in ((a, b), (a_dropped, b_dropped), (a, c), (a_dropped, c_dropped)):
            assert x.is_dense == y.is_dense and x.dtype == y.dtype, (seed, x, y)
            assert x.values.tobytes() == y.values.tobytes(), (seed, repeat, x, y)
            if not x.is_dense:
                assert x.indices.dtype == y.indices.dtype, (seed, x, y)
                assert x.indices.tobytes() == y.indices.tobytes(), (seed, repeat, x, y)
        checked += 1
    assert bool(plan._fast) == (comm.size == 2), "the two-rank path is P = 2's only"
    if seed % 10 == 1:  # one rank on the general path (a tuple), the other lean: one sum
        t = (dim, v.indices, v.values) if r == 0 else v
        got, _ = sparcml.topk_allreduce(t, k, comm)
        assert got.values.tobytes() == a.values.tobytes(), seed
    if seed % 10 == 2:  # one rank's other k, or a NaN: the same error on every rank
        for bad, error in (((v, k + 2), sparcml.RankMismatchError),
                           ((sparcml.SparseVector(dim, np.array([0]),
                                                  np.array([np.nan], dtype)), k + 1),
                            sparcml.CompressionError)):
            args = bad if r == comm.size - 1 else (v, k + 1)
            try:
                sparcml.topk_allreduce(*args, comm)
                raise AssertionError(f"no error on rank {r}: {seed}")
            except error:
                pass
    # the plain call ran through the cached plan of its key at P = 2 (when there was
    # something to select), the general path at P = 3; at most PLANS_KEPT plans are kept
    cached = {key: p for key, p in (ctx.plans or {}).items() if isinstance(p, TopKPlan)}
    key = ("topk", dim, np.dtype(dtype).str, k, sparcml.default_options())
    selects = k > 0 and comm.allreduce(_max_key(v), MPI.MAX) > 0
    assert (key in cached) == (comm.size == 2 and selects), (seed, key[:4], selects)
    assert len(cached) <= PLANS_KEPT
    if key in cached:
        assert cached[key].calls == 2 + (seed % 10 == 1) and cached[key].number is None
total = comm.allreduce(checked)
if r == 0:
    print("TOPK-PLAN-CHECKED", total)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("P,native", [(2, None), (3, None), (3, "1")])
def test_topk_plan_is_bitwise_the_plain_call(P, native):
    """At P = 2 the plan's one-exchange path (sparcml._topk.plan.TopKPlan._two_ranks), at 3
    its reduce-scatter (point to point with trailers, or packed in one ``Alltoallv`` with the
    trailers in the size exchange: ``native``): the result and ``dropped`` of the plain call,
    bit for bit, on ties, zeros and negative zeros, cancelling inputs, dense inputs and
    k = 0."""
    env = None if native is None else {"SPARCML_NATIVE_MIN_RANKS": native}
    proc = run_mpi(P, TOPK_TWO_RANKS, timeout=400, env=env)
    assert f"TOPK-PLAN-CHECKED {P * 240}" in proc.stdout, proc.stdout


@pytest.mark.mpi
def test_bench_latency_prints_every_row():
    proc = run_mpi(2, args=[sys.executable, "-m", "sparcapps.bench.cli", "--latency",
                            "--N", "1000", "4000", "--reps", "5", "--warmup", "1"],
                   timeout=300)
    from sparcapps.bench.latency import VARIANTS

    for n in ("1,000", "4,000"):
        assert f"latency: P=2, N={n}, 10 nonzeros per rank" in proc.stdout, proc.stdout
    for name in VARIANTS:
        rows = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith(name + " ")]
        assert len(rows) == 2 and all("x MPI_Allreduce" in r for r in rows), (name, rows)
    ratio = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("MPI_Allreduce")]
    assert all(" 1.0x MPI_Allreduce" in r for r in ratio), ratio
