"""Cost model of the allreduce algorithms, its calibration, and the choice of ``auto``.

Each algorithm's time is predicted from its structure (messages, bytes, merged items) with
machine parameters measured on the communicator by :func:`calibrate`:

- ``alpha``, ``beta``: point-to-point latency (s) and time per byte (s/B), from concurrent
  pairwise exchanges through the same send/probe/receive path the algorithms use;
- ``gamma_merge``: seconds per input item of a sparse merge; ``gamma_dense``: seconds per
  element of dense work (add, scatter, copy);
- ``allreduce_alpha/beta`` and ``allgather_alpha/beta``: the MPI collectives the baselines and
  the second phases use, fitted as latency + time per byte (their internal algorithm is MPI's).

The result size K is not known before the call: it is estimated from the largest input nnz k
and an overlap factor q (the share of a further input's items that are new), learnt from the
results of earlier calls on the same communicator (default: independent random supports).
Reference volumes reported beside each measurement (DESIGN 3.7): the *floor* ``(K - k) c`` bytes
every rank must receive, and the reduce-scatter + allgather volume ``(P-1)/P (k + K) c``.
All ranks hold the same parameters (calibration ends with a max-reduction), so ``auto`` makes
the same choice on every rank.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
from mpi4py import MPI

from . import kernels
from .vector import SparseVector

__all__ = ["CostModel", "calibrate", "union_size", "overlap_from_result"]

_TINY_N = 1024  # the input of the overhead calibration: dim 1024, one nonzero per rank
_MEDIUM_N = 1 << 20  # the input of the growth calibration: 2% random nonzeros per rank
_CHOICES = ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather", "dense",
            "allgather")


def union_size(k: float, m: int, dim: int, q: float = 1.0) -> float:
    """Expected support of the sum of m inputs of k items each (q: share of new items)."""
    if dim == 0 or k <= 0:
        return 0.0
    k = min(k, dim)
    keep_first = 1.0 - k / dim
    keep_next = max(0.0, 1.0 - q * k / dim)
    return dim * (1.0 - keep_first * keep_next ** max(0, m - 1))


def overlap_from_result(k: float, K: float, P: int, dim: int) -> float:
    """The q of :func:`union_size` that explains a result of K items from P inputs of k."""
    if P < 2 or k <= 0 or dim == 0:
        return 1.0
    ratio = (1.0 - min(K, dim - 0.5) / dim) / (1.0 - min(k, dim - 0.5) / dim)
    ratio = min(max(ratio, 0.0), 1.0)
    q = dim / k * (1.0 - ratio ** (1.0 / (P - 1)))
    return float(min(max(q, 0.0), 1.0))


@dataclass
class CostModel:
    """Machine parameters (seconds, bytes) and the per-algorithm predictions."""

    alpha: float = 5e-6
    beta: float = 1e-10
    gamma_merge: float = 3e-9
    gamma_dense: float = 1e-9
    allreduce_alpha: float = 2e-5
    allreduce_beta: float = 2e-10
    allgather_alpha: float = 2e-5
    allgather_beta: float = 1e-10
    # measured time of each algorithm on a tiny input (every fixed cost: latencies, the
    # agreement check, Python); 0 = not calibrated, the analytic latencies are used instead
    overhead_ssar_recursive_double: float = 0.0
    overhead_ssar_split_allgather: float = 0.0
    overhead_dsar_split_allgather: float = 0.0
    overhead_dense: float = 0.0
    overhead_allgather: float = 0.0
    # measured / analytic size-dependent time of each algorithm on a medium input (1.0 = the
    # analytic model as it is): corrects what the building blocks miss on this machine
    scale_ssar_recursive_double: float = 1.0
    scale_ssar_split_allgather: float = 1.0
    scale_dsar_split_allgather: float = 1.0
    scale_dense: float = 1.0
    scale_allgather: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)

    # -- building blocks ---------------------------------------------------------------------

    def _message(self, nbytes: float) -> float:
        return self.alpha + self.beta * nbytes

    def _allgather(self, total_bytes: float) -> float:
        return self.allgather_alpha + self.allgather_beta * total_bytes

    def _allreduce(self, nbytes: float) -> float:
        return self.allreduce_alpha + self.allreduce_beta * nbytes

    # -- predictions -------------------------------------------------------------------------

    def predict(self, algorithm: str, *, P: int, N: int, k: float, K: float | None = None,
                q: float = 1.0, s_idx: int = 4, s_val: int = 4, check: bool = True) -> float:
        """Predicted seconds of one allreduce (see :meth:`_analytic`).

        Once calibrated, the fixed cost is the one measured for the algorithm on a tiny input
        (``overhead_<algorithm>``), and what grows with the sizes is the analytic model's
        growth times the factor measured on a medium input (``scale_<algorithm>``).
        """
        t = self._analytic(algorithm, P=P, N=N, k=k, K=K, q=q, s_idx=s_idx, s_val=s_val,
                           check=check)
        overhead = getattr(self, f"overhead_{algorithm}", 0.0)
        if overhead > 0 and P > 1:
            t = overhead + getattr(self, f"scale_{algorithm}", 1.0) * self._growth(
                algorithm, t, P=P, s_idx=s_idx, s_val=s_val, check=check)
        return t

    def _growth(self, algorithm, t, *, P, s_idx, s_val, check) -> float:
        """The analytic time ``t`` less the analytic time of the tiny calibration input."""
        tiny = self._analytic(algorithm, P=P, N=_TINY_N, k=1, K=min(P, _TINY_N), q=1.0,
                              s_idx=s_idx, s_val=s_val, check=check)
        return max(0.0, t - tiny)

    def _analytic(self, algorithm: str, *, P: int, N: int, k: float, K: float | None = None,
                  q: float = 1.0, s_idx: int = 4, s_val: int = 4, check: bool = True) -> float:
        """Predicted seconds of one allreduce. ``k``: the largest input nnz; ``K``: result nnz
        (estimated from ``k`` and ``q`` when not given); ``check``: include the agreement
        check's small allreduce.

        Counts what the implementation does: per message an encode copy, the transfer and a
        merge (sparse streams) or a copy and an add (dense streams); the MPI collectives at
        their fitted cost.
        """
        c = s_idx + s_val
        dense_bytes = N * s_val
        threshold = N * s_val / c  # stream size at which the switch rule fires
        if K is None:
            K = union_size(k, P, N, q)
        gd, gm = self.gamma_dense, self.gamma_merge
        t = self.allreduce_alpha if check and P > 1 else 0.0

        def is_dense(items):
            return items >= threshold

        def stream_bytes(items):
            return dense_bytes if is_dense(items) else items * c

        def exchange(items):
            """Send a stream of ``items``, receive one alike, add them."""
            if is_dense(items):
                return gd * N + self._message(dense_bytes) + 2 * gd * N
            return gd * items * c / 4 + self._message(items * c) + gm * 2 * items

        if P == 1:
            return t + gd * (N if algorithm in ("dense", "dsar_split_allgather") else k)
        logp = math.log2(P)
        if algorithm == "dense":
            return t + gd * N + self._allreduce(dense_bytes)
        if algorithm == "allgather":
            total = P * k
            fold = (gd * (N + total) if is_dense(total) or is_dense(k)
                    else gm * total * max(1.0, logp))
            return (t + gd * k * c / 4 + self.allgather_alpha
                    + self._allgather(P * stream_bytes(k)) + fold)
        if algorithm == "ssar_recursive_double":
            pof2 = 1 << (P.bit_length() - 1)
            rem = P - pof2
            inputs = 1.0
            if rem:
                t += exchange(k) / 2  # one way only: the extra rank sends, its partner adds
                inputs = 2.0 if 2 * rem >= P else 1.0 + 2.0 * rem / P
            mask = 1
            while mask < pof2:
                t += exchange(union_size(k, int(round(inputs * mask)), N, q))
                mask <<= 1
            if rem:
                t += self._message(stream_bytes(K))
            return t
        # the split algorithms: phase 1 sends a 1/P block of the input to every other rank,
        # and each rank folds the P parts of its block
        block_k = k / P
        phase1 = ((P - 1) * self.alpha + self.beta * (P - 1) * stream_bytes(block_k * P) / P
                  + gd * k * c / 4)
        if algorithm == "ssar_split_allgather":
            block_K = union_size(block_k, P, N / P, q)
            dense_block = block_K * c >= (N / P) * s_val
            fold = gd * (N / P + k) if dense_block else gm * k * max(1.0, logp)
            gathered = P * (N / P * s_val if dense_block else block_K * c)
            assemble = 2 * gd * N if is_dense(K) else gd * K * c / 4
            return (t + phase1 + fold + self.allgather_alpha + self._allgather(gathered)
                    + assemble)
        if algorithm == "dsar_split_allgather":
            return t + phase1 + gd * (N / P + k) + self._allgather(dense_bytes)
        raise ValueError(f"no cost model for algorithm {algorithm!r}")

    def choose(self, *, P: int, N: int, k: float, q: float = 1.0, s_idx: int = 4,
               s_val: int = 4, candidates=_CHOICES) -> str:
        """The candidate with the smallest predicted time (ties: the first listed)."""
        return min(candidates, key=lambda a: self.predict(a, P=P, N=N, k=k, q=q, s_idx=s_idx,
                                                          s_val=s_val))

    @staticmethod
    def references(*, P: int, k: float, K: float, s_idx: int = 4, s_val: int = 4) -> dict:
        """Byte volumes per rank: the floor and the reduce-scatter + allgather volume."""
        c = s_idx + s_val
        return {"floor_bytes": max(0.0, K - k) * c,
                "rs_ag_bytes": (P - 1) / P * (k + K) * c}


# -- calibration ----------------------------------------------------------------------------

def _fit(xs, ts) -> tuple[float, float]:
    """Least-squares latency + slope through (bytes, seconds), both kept positive."""
    xs, ts = np.asarray(xs, float), np.asarray(ts, float)
    slope, intercept = np.polyfit(xs, ts, 1)
    slope = max(slope, 1e-13)
    intercept = max(intercept, float(ts.min()) * 0.5, 1e-7)
    return float(intercept), float(slope)


def _median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def calibrate(comm: MPI.Comm | None = None, *, reps: int = 5) -> CostModel:
    """Measure the model's parameters on ``comm`` (collective; about 0.5-2 s).

    Every rank returns the same model (the maximum over ranks of each parameter), and
    ``algorithm="auto"`` on ``comm`` uses it from then on (otherwise ``auto`` calibrates at
    its first call).
    """
    from .context import context_for

    comm = MPI.COMM_WORLD if comm is None else comm
    ctx = context_for(comm)
    model = ctx.history["model"] = _calibrate_on(ctx, reps=reps)  # what auto uses from now on
    return model


def _calibrate_on(ctx, *, reps: int = 5) -> CostModel:
    c, rank, size, waiter = ctx.comm, ctx.rank, ctx.size, ctx.waiter
    model = CostModel()
    # local compute rates
    rng = np.random.default_rng(rank)
    n = 200_000
    a = np.sort(rng.choice(50 * n, n, replace=False)).astype(np.int32)
    b = np.sort(rng.choice(50 * n, n, replace=False)).astype(np.int32)
    v = np.ones(n, np.float32)
    kernels.merge_add(a, v, b, v)
    model.gamma_merge = _median_time(lambda: kernels.merge_add(a, v, b, v), reps) / (2 * n)
    x = np.ones(1 << 20, np.float32)
    y = np.ones(1 << 20, np.float32)
    model.gamma_dense = _median_time(lambda: np.add(x, y), reps) / x.size
    if size > 1:
        # point-to-point: all ranks exchange with a partner at once, as in the butterfly
        partner = rank ^ 1 if (rank ^ 1) < size else rank
        sizes = [8, 1 << 14, 1 << 18, 1 << 21]
        times = []
        for nbytes in sizes:
            buf = np.zeros(nbytes, np.uint8)
            rbuf = np.empty(nbytes, np.uint8)

            def exchange():
                if partner == rank:
                    return
                req = c.Isend([buf, MPI.BYTE], partner, 99)
                waiter.wait(c.Irecv([rbuf, MPI.BYTE], partner, 99))
                waiter.wait(req)

            c.Barrier()
            times.append(_median_time(exchange, reps))
        model.alpha, model.beta = _fit(sizes, times)
        # the MPI collectives the baselines and second phases use
        ar_sizes, ar_times = [8, 1 << 18, 1 << 22], []
        for nbytes in ar_sizes:
            arr = np.zeros(nbytes // 4, np.float32)
            c.Barrier()
            ar_times.append(_median_time(
                lambda: waiter.collective(c, "Allreduce", MPI.IN_PLACE, arr, MPI.SUM), reps))
        model.allreduce_alpha, model.allreduce_beta = _fit(ar_sizes, ar_times)
        ag_sizes, ag_times = [8, 1 << 16, 1 << 20], []
        for per_rank in ag_sizes:
            send = np.zeros(per_rank, np.uint8)
            recv = np.empty(per_rank * size, np.uint8)
            c.Barrier()
            ag_times.append(_median_time(
                lambda: waiter.collective(c, "Allgather", [send, MPI.BYTE], [recv, MPI.BYTE]),
                reps))
        model.allgather_alpha, model.allgather_beta = _fit([s * size for s in ag_sizes], ag_times)
        # fixed costs: each algorithm on a tiny input, through the real code path
        from .algorithms import allreduce_in

        tiny = SparseVector(_TINY_N, np.array([rank % _TINY_N]), np.ones(1, np.float32))
        for algorithm in _CHOICES:
            def call():
                allreduce_in(ctx, tiny, algorithm, None, False, None, True)

            call()
            c.Barrier()
            setattr(model, f"overhead_{algorithm}", _median_time(call, 2 * reps + 1))
        # size-dependent costs: each algorithm on a medium input, against the analytic growth
        rng_medium = np.random.default_rng([7, rank])
        k_medium = _MEDIUM_N // 50
        medium = SparseVector(_MEDIUM_N, np.sort(rng_medium.choice(_MEDIUM_N, k_medium,
                                                                   replace=False)),
                              np.ones(k_medium, np.float32))
        for algorithm in _CHOICES:
            def call():
                return allreduce_in(ctx, medium, algorithm, None, False, None, True)

            result = call()
            K = result.count_nonzero() if result.is_dense else result.nnz
            c.Barrier()
            measured = _median_time(call, reps)
            growth = model._growth(algorithm, model._analytic(
                algorithm, P=size, N=_MEDIUM_N, k=k_medium, K=K), P=size, s_idx=4, s_val=4,
                check=True)
            overhead = getattr(model, f"overhead_{algorithm}")
            if growth > 0:
                factor = (measured - overhead) / growth
                setattr(model, f"scale_{algorithm}", float(min(max(factor, 0.25), 8.0)))
    params = np.array(list(model.to_dict().values()), np.float64)
    waiter.collective(c, "Allreduce", MPI.IN_PLACE, params, MPI.MAX)
    return CostModel(*params.tolist())
