"""``powersgd``: PowerSGD (Vogels et al. 2019), a rank-``r`` approximation by one power
iteration, warm started, with error feedback (the bundle's
:class:`~sparcml.compression.ResidualMemory`).

**Per tensor** (the optimizer and the DDP hook pass each bucket's parameter ``shapes``, as
PyTorch's ``powerSGD_hook`` uses each gradient's own shape): a parameter with two or more
dimensions is the matrix ``M`` of ``shape[0]`` rows by ``numel / shape[0]`` columns, compressed
at rank ``r' = min(r, rows, cols)`` when ``(rows + cols) r' < numel``; the others (biases,
norms' scales, matrices too small to gain) travel whole, exact, inside the first allreduce.
**Flat** (``shapes=None``, plain mpi4py code): the bucket is one matrix of ``rows = ceil(sqrt
n)`` by ``cols = ceil(n / rows)`` (zero-padded), which loses the layers' structure: PowerSGD at
rank 4 on such a matrix does not train a small CNN (BENCHMARKS.md, "Compressors").

Per key, on every rank, with each matrix's ``Q`` (cols x r') the same on every rank (drawn
from ``seed`` and the matrix's shape, flat: ``seed`` and the key, on the first call; then the
previous step's):

1. ``Pm = M Q`` for every matrix; one dense allreduce of all ``Pm`` (rows x r' values each)
   and the whole tensors' values;
2. ``Ph = orth(sum of Pm)`` per matrix (reduced QR; identical on every rank);
3. ``Qr = M^T Ph``; one dense allreduce of all ``Qr``: ``Q = sum over ranks`` (kept: the warm
   start);
4. result ``Ph Q^T`` (the sum of the ranks' projections ``Ph Ph^T M_r``), the whole tensors'
   sums; this rank's delivered part ``sent = Ph Qr^T`` (and its whole tensors exactly), so
   the memory keeps ``M - Ph Ph^T M``.

Two small dense allreduces, ``sum (rows + cols) r'`` values plus the whole tensors, instead of
n. A bucket with no matrix to compress travels whole through one dense allreduce. The factors
travel in the input's dtype; the products and the QR run in ``float64``.

Its cost: the two dense allreduces (:meth:`PowerSGDCompressor.predicted_seconds`).
"""

from __future__ import annotations

import math
import numpy as np
from typing import NamedTuple

from ..._collectives.algorithms import DENSE_BASELINE
from ..._errors import CompressionError
from ..._vector import SparseVector
from .._common import key_seed
from .._objects import Compression, Compressor, Reduced
from .._registry import CompressorSpec, Param, SEED, memory_of, positive_int, register_compressor


def matrix_shape(n: int) -> tuple[int, int]:
    """``(rows, cols)`` of the matrix a flat array of n values is viewed as."""
    rows = max(1, math.isqrt(max(n - 1, 0)) + 1) if n > 1 else 1
    return rows, max(1, -(-n // rows))


def orthogonalize(a: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning ``a``'s (reduced QR, signs fixed so that R's diagonal is
    >= 0: a deterministic function of ``a``)."""
    q, r = np.linalg.qr(np.asarray(a, np.float64))
    signs = np.where(np.diag(r) < 0, -1.0, 1.0)
    return q * signs


class _Piece(NamedTuple):
    """One tensor of a bucket: ``numel`` values at ``offset``; ``r > 0``: compressed as a
    ``rows`` x ``cols`` matrix at rank ``r`` (zero-padded when ``rows * cols > numel``)."""

    offset: int
    numel: int
    rows: int = 0
    cols: int = 0
    r: int = 0


class PowerSGDCompressor(Compressor):
    """Rank-``rank`` PowerSGD of each parameter matrix of a bucket (of the whole bucket when no
    shapes are given); ``seed``: the first ``Q`` (the same everywhere)."""

    takes_shapes = True  # Compression.allreduce_in passes the bucket's shapes to reduce_in

    def __init__(self, rank: int = 4, *, seed: int = 0):
        if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, (int, np.integer)) \
                or rank < 1:
            raise CompressionError(f"rank must be an integer >= 1, got {rank!r}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise CompressionError(f"seed must be an integer >= 0, got {seed!r}")
        self.rank, self.seed = int(rank), int(seed)
        # key -> [(numel, Q or None)] per piece of the bucket's plan (None: travels whole)
        self._q: dict = {}

    def plan(self, n: int, shapes=None) -> list[_Piece]:
        """The pieces of a bucket of ``n`` values: one per shape (see the module docstring),
        or, without shapes, the whole bucket as one near-square matrix."""
        if shapes is None:
            rows, cols = matrix_shape(n)
            r = min(self.rank, rows, cols)
            return [_Piece(0, n, rows, cols, r) if (rows + cols) * r < n else _Piece(0, n)]
        pieces, offset = [], 0
        for shape in shapes:
            numel = int(np.prod(shape, dtype=np.int64))
            piece = _Piece(offset, numel)
            if len(shape) >= 2 and numel > 0:
                rows = int(shape[0])
                cols = numel // rows
                r = min(self.rank, rows, cols)
                if (rows + cols) * r < numel:
                    piece = _Piece(offset, numel, rows, cols, r)
            pieces.append(piece)
            offset += numel
        return pieces

    def compresses(self, n: int, shapes=None) -> bool:
        """Whether some tensor of a bucket of n values travels as factors (else all whole)."""
        return any(p.r for p in self.plan(n, shapes))

    def num_sent(self, n: int, shapes=None) -> int:
        """Values this rank puts in the allreduces (n when the bucket travels whole)."""
        pieces = self.plan(n, shapes)
        return sum((p.rows + p.cols) * p.r if p.r else p.numel for p in pieces)

    def allreduce_values(self, n: int, shapes=None) -> tuple[int, int]:
        """Values of the first and of the second allreduce (the second is 0 when nothing is
        compressed)."""
        pieces = self.plan(n, shapes)
        return (sum(p.rows * p.r if p.r else p.numel for p in pieces),
                sum(p.cols * p.r for p in pieces))

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """Two dense allreduces, of ``rows r`` values per matrix plus the tensors that travel
        whole and of ``cols r`` per matrix (one allreduce of everything when nothing is
        compressed)."""
        first, second = self.allreduce_values(n, shapes)
        if not second:
            return model.allreduce(n * itemsize)
        return model.allreduce(first * itemsize) + model.allreduce(second * itemsize)

    def compress(self, x: np.ndarray) -> SparseVector:
        raise CompressionError("PowerSGDCompressor reduces as it compresses: use it through "
                               "Compression")

    def initial_q(self, n: int, key) -> np.ndarray:
        """The first ``Q`` of a flat bucket ``key`` (cols x r, float64), the same on every
        rank."""
        rows, cols = matrix_shape(n)
        rng = np.random.default_rng([self.seed, key_seed(key)])
        return rng.standard_normal((cols, min(self.rank, rows, cols)))

    def initial_q_of(self, rows: int, cols: int) -> np.ndarray:
        """The first ``Q`` of a parameter matrix of ``rows`` x ``cols`` (cols x r', float64):
        drawn from the seed and the shape only, so that it does not depend on the bucket."""
        rng = np.random.default_rng([self.seed, rows, cols])
        return rng.standard_normal((cols, min(self.rank, rows, cols)))

    @staticmethod
    def _dense_sum(ctx, flat: np.ndarray, stats, check) -> np.ndarray:
        """The sum over ranks of ``flat`` (a new array, the allreduce's buffer), in float64."""
        out = ctx.allreduce(SparseVector.dense(flat), algorithm=DENSE_BASELINE,
                            stats=stats, check=check)
        return np.asarray(out.to_dense(), np.float64)

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True,
                  shapes=None) -> Reduced:
        n = g.shape[0]
        pieces = self.plan(n, shapes)
        if not any(p.r for p in pieces):
            total = ctx.allreduce(SparseVector.dense(g.copy()), algorithm=DENSE_BASELINE,
                                  stats=stats, check=check)
            self._q[key] = [(p.numel, None) for p in pieces]
            return Reduced(total, SparseVector.dense(g), n, 0.0)
        saved = self._q.get(key)
        if saved is not None and [m for m, _ in saved] != [p.numel for p in pieces]:
            saved = None
        mats, qs = [], []
        for i, p in enumerate(pieces):
            if not p.r:
                qs.append(None)
                continue
            m = np.zeros(p.rows * p.cols, np.float64)
            m[:p.numel] = g[p.offset:p.offset + p.numel]
            mats.append(m.reshape(p.rows, p.cols))
            q = None if saved is None else saved[i][1]
            if q is None or q.shape != (p.cols, p.r):
                q = self.initial_q(n, key) if shapes is None else self.initial_q_of(p.rows,
                                                                                    p.cols)
            qs.append(np.asarray(q, np.float64))
        compressed = [(p, q) for p, q in zip(pieces, qs) if p.r]
        # 1. every M Q and the whole tensors, one allreduce
        first = np.concatenate([(m @ q).ravel() for m, (_, q) in zip(mats, compressed)]
                               + [g[p.offset:p.offset + p.numel] for p in pieces if not p.r]
                               ).astype(g.dtype)
        sum1 = self._dense_sum(ctx, first, stats, check)
        # 2. orthogonalize, 3. every M^T Ph, one allreduce
        phs, at = [], 0
        for p, _ in compressed:
            phs.append(orthogonalize(sum1[at:at + p.rows * p.r].reshape(p.rows, p.r)))
            at += p.rows * p.r
        qrs = [(m.T @ ph).astype(g.dtype) for m, ph in zip(mats, phs)]  # as they travel
        sum2 = self._dense_sum(ctx, np.concatenate([qr.ravel() for qr in qrs]), stats, check)
        result = np.empty(n, g.dtype)
        sent = np.empty(n, g.dtype)
        new_q, at2, j = [], 0, 0
        for p in pieces:
            a, b = p.offset, p.offset + p.numel
            if p.r:
                ph, qr = phs[j], qrs[j].astype(np.float64)
                q = sum2[at2:at2 + p.cols * p.r].reshape(p.cols, p.r)
                at2 += p.cols * p.r
                result[a:b] = (ph @ q.T).ravel()[:p.numel]
                sent[a:b] = (ph @ qr.T).ravel()[:p.numel]
                new_q.append((p.numel, q))
                j += 1
            else:
                result[a:b] = sum1[at:at + p.numel]
                sent[a:b] = g[a:b]
                at += p.numel
                new_q.append((p.numel, None))
        self._q[key] = new_q
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent),
                       first.size + sum2.size, 0.0)

    # -- state ------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """``{"q": {key: [(numel, Q or None), ...]}}``: the warm start of every tensor."""
        return {"q": {k: [[m, None if q is None else q.copy()] for m, q in v]
                      for k, v in self._q.items()}}

    def load_state_dict(self, state: dict) -> None:
        self._q = {k: [(int(m), None if q is None else np.array(q, np.float64)) for m, q in v]
                   for k, v in dict(state.get("q") or {}).items()}

    def split_state(self, key, sizes) -> list[dict]:
        saved = self._q.get(key)
        if saved is None or [m for m, _ in saved] != [int(n) for n in sizes]:
            return [{} for _ in sizes]
        return [{"q": (m, None if q is None else q.copy())} for m, q in saved]

    def join_state(self, key, pieces: list[dict]) -> None:
        if pieces and all("q" in p for p in pieces):
            self._q[key] = [(int(p["q"][0]), p["q"][1]) for p in pieces]
        else:
            self._q.pop(key, None)

    def fresh(self) -> "PowerSGDCompressor":
        return PowerSGDCompressor(self.rank, seed=self.seed)

    def __repr__(self) -> str:
        return f"PowerSGDCompressor(rank={self.rank}, seed={self.seed})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and (other.rank, other.seed) == (self.rank, self.seed)

    def __hash__(self) -> int:
        return hash((type(self), self.rank, self.seed))


RANK = Param("rank", "--powersgd-rank", "the rank of the approximation", type=positive_int,
             default=4)


def build(*, rank, seed, algorithm, error_feedback):
    return Compression(PowerSGDCompressor(rank, seed=seed), None, memory_of(error_feedback),
                       algorithm)


SPEC = register_compressor(CompressorSpec(
    name="powersgd", order=130, build=build, params=(RANK, SEED),
    recommended={"source": "Vogels et al. 2019: "
                           "error feedback and the dense run's SGD with momentum 0.9"},
    labels=(("powersgd_rank", lambda r: f"rank {r}"),),
    summary="rank --powersgd-rank PowerSGD of each parameter matrix (biases whole), warm "
            "start, error feedback (2 small dense allreduces per bucket)"))
