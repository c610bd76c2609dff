"""PowerSGD (Vogels et al. 2019): rank-``r`` approximation by one power iteration, warm
started, with error feedback (the bundle's :class:`~sparcml.compression.ResidualMemory`).

A bucket is a flat array of n values; it is viewed as a matrix ``M`` of ``rows = ceil(sqrt
n)`` by ``cols = ceil(n / rows)`` (zero-padded; PyTorch's hook uses the parameters' own shapes,
which a flat bucket no longer has). Per key, on every rank, with ``Q`` (cols x r) the same on
every rank (drawn from ``seed`` and the key on the first call, then the previous step's):

1. ``Pm = M Q``; dense allreduce of ``Pm`` (rows x r values): ``Ps = sum over ranks``;
2. ``Ph = orth(Ps)`` (reduced QR; identical on every rank, computed from the same sum);
3. ``Qr = M^T Ph``; dense allreduce: ``Q = sum over ranks of Qr`` (kept: the warm start);
4. result ``Ph Q^T`` (the sum of the ranks' projections ``Ph Ph^T M_r``); this rank's
   delivered part ``sent = Ph Qr^T``, so the memory keeps ``M - Ph Ph^T M``.

Two small dense allreduces, ``(rows + cols) r`` values in all, instead of n. A bucket where
that is not smaller than n travels whole through one dense allreduce (as PyTorch's hook does
for vectors). The factors travel in the input's dtype; the products and the QR run in ``float64``.
"""

from __future__ import annotations

import math

import numpy as np

from .._collectives.algorithms import DENSE_BASELINE
from .._collectives.entry import allreduce_in
from .._errors import CompressionError
from .._vector import SparseVector
from ._objects import Compressor, Reduced
from ._sparsifiers import key_seed

__all__ = ["PowerSGDCompressor", "matrix_shape", "orthogonalize"]


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


class PowerSGDCompressor(Compressor):
    """Rank-``rank`` PowerSGD of each bucket; ``seed``: the first ``Q`` (the same everywhere)."""

    def __init__(self, rank: int = 4, *, seed: int = 0):
        if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, (int, np.integer)) \
                or rank < 1:
            raise CompressionError(f"rank must be an integer >= 1, got {rank!r}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise CompressionError(f"seed must be an integer >= 0, got {seed!r}")
        self.rank, self.seed = int(rank), int(seed)
        self._q: dict = {}

    def compresses(self, n: int) -> bool:
        """Whether a bucket of n values travels as factors (else whole)."""
        rows, cols = matrix_shape(n)
        return (rows + cols) * min(self.rank, rows, cols) < n

    def num_sent(self, n: int) -> int:
        """Values this rank puts in the two allreduces (n when the bucket travels whole)."""
        if not self.compresses(n):
            return n
        rows, cols = matrix_shape(n)
        return (rows + cols) * min(self.rank, rows, cols)

    def compress(self, x: np.ndarray) -> SparseVector:
        raise CompressionError("PowerSGDCompressor reduces as it compresses: use it through "
                               "Compression")

    def initial_q(self, n: int, key) -> np.ndarray:
        """The first ``Q`` of ``key`` (cols x r, float64), the same on every rank."""
        rows, cols = matrix_shape(n)
        rng = np.random.default_rng([self.seed, key_seed(key)])
        return rng.standard_normal((cols, min(self.rank, rows, cols)))

    @staticmethod
    def _dense_sum(ctx, a: np.ndarray, dtype, stats, check) -> np.ndarray:
        flat = np.array(a, dtype).ravel()  # a new array: the allreduce's buffer
        out = allreduce_in(ctx, SparseVector.dense(flat), algorithm=DENSE_BASELINE,
                           stats=stats, check=check)
        return np.asarray(out.to_dense(), np.float64).reshape(a.shape)

    def reduce_in(self, ctx, g: np.ndarray, key, *, stats=None, check=True) -> Reduced:
        n = g.shape[0]
        if not self.compresses(n):
            total = allreduce_in(ctx, SparseVector.dense(g.copy()), algorithm=DENSE_BASELINE,
                                 stats=stats, check=check)
            return Reduced(total, SparseVector.dense(g), n, 0.0)
        rows, cols = matrix_shape(n)
        m = np.zeros(rows * cols, np.float64)
        m[:n] = g
        m = m.reshape(rows, cols)
        q = self._q.get(key)
        if q is None or q.shape[0] != cols:
            q = self.initial_q(n, key)
        ph = orthogonalize(self._dense_sum(ctx, m @ q, g.dtype, stats, check))
        qr = m.T @ ph
        qr = qr.astype(g.dtype).astype(np.float64)  # as it travels
        q = self._dense_sum(ctx, qr, g.dtype, stats, check)
        self._q[key] = q
        result = (ph @ q.T).ravel()[:n].astype(g.dtype)
        sent = (ph @ qr.T).ravel()[:n].astype(g.dtype)
        return Reduced(SparseVector.dense(result), SparseVector.dense(sent),
                       self.num_sent(n), 0.0)

    def fresh(self) -> "PowerSGDCompressor":
        return PowerSGDCompressor(self.rank, seed=self.seed)

    def __repr__(self) -> str:
        return f"PowerSGDCompressor(rank={self.rank}, seed={self.seed})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and (other.rank, other.seed) == (self.rank, self.seed)

    def __hash__(self) -> int:
        return hash((type(self), self.rank, self.seed))
