"""Global minibatches that do not depend on the number of ranks.

The training rows of all ranks, concatenated in rank order, are numbered ``0 .. n-1`` (rank r's
rows are ``offset_r .. offset_r + n_r - 1``: shards are contiguous row ranges, so this is the
row order of the file). Each epoch draws one permutation of ``0 .. n-1`` from
``numpy.random.default_rng([seed, epoch])`` -- the same on every rank and for every P -- and cuts
it into global batches of ``global_batch`` rows (the last one shorter). Each rank trains on the
rows of each global batch that lie in its shard, in permutation order. So the sequence of
global batches, as sets of rows, is the same for any P: only the order in which the gradient is
summed differs.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BatchPlan"]


class BatchPlan:
    """Which local rows each step of an epoch trains on.

    Parameters
    ----------
    counts : sequence of int
        Training rows per rank, in rank order (every rank passes the same list).
    rank : int
        This rank.
    global_batch : int
        Rows per step summed over all ranks (``batch_size * P``).
    seed : int
    shuffle : bool
        False: the batches are consecutive rows in order.
    """

    def __init__(self, counts, rank: int, global_batch: int, seed: int, shuffle: bool = True):
        counts = [int(c) for c in counts]
        if global_batch < 1:
            raise ValueError(f"global_batch must be >= 1, got {global_batch}")
        self.n_total = sum(counts)
        self.offset = sum(counts[:rank])
        self.n_local = counts[rank]
        self.global_batch = int(global_batch)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.steps_per_epoch = -(-self.n_total // self.global_batch)

    def batch_sizes(self) -> np.ndarray:
        """Global rows of each step (int64, ``steps_per_epoch`` entries)."""
        sizes = np.full(self.steps_per_epoch, self.global_batch, dtype=np.int64)
        if self.steps_per_epoch:
            sizes[-1] = self.n_total - self.global_batch * (self.steps_per_epoch - 1)
        return sizes

    def epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, bounds)``: step ``k`` of ``epoch`` trains on local rows
        ``rows[bounds[k]:bounds[k+1]]`` (int64 local row numbers, permutation order)."""
        if self.shuffle:
            perm = np.random.default_rng([self.seed, int(epoch)]).permutation(self.n_total)
        else:
            perm = np.arange(self.n_total, dtype=np.int64)
        local = perm - self.offset
        positions = np.flatnonzero((local >= 0) & (local < self.n_local))
        rows = local[positions]
        steps = np.arange(self.steps_per_epoch + 1, dtype=np.int64) * self.global_batch
        bounds = np.searchsorted(positions, steps, side="left")
        return rows, bounds
