"""Balanced partitions of the split algorithms (sparcml._collectives.partition): the boundary arithmetic on
one process (the collective behaviour: tests/matrix/partitions.py)."""

import numpy as np
import pytest

from sparcml import SparseVector
from sparcml._collectives import partition
from sparcml._collectives.exchange import block_bounds
from sparcml._wire.codec import Codec

CODEC = Codec(np.int32, np.float32)


def test_balanced_bounds_cut_equal_weight_and_interpolate_inside_bins():
    edges = np.array([0, 10, 20, 30, 40], np.int64)
    weights = np.array([30.0, 10.0, 0.0, 0.0])  # 3/4 of the weight in the first bin
    b = partition.balanced_bounds(edges, weights, 4)
    assert b.tolist() == [0, 3, 7, 10, 40]  # inside the first bin, as if spread evenly
    assert partition.balanced_bounds(edges, np.ones(4), 2).tolist() == [0, 20, 40]
    assert partition.balanced_bounds(edges, np.zeros(4), 2).tolist() == [0, 20, 40]


class _OneProcess:
    """A context whose collectives reduce the inputs of ``ranks`` simulated ranks."""

    def __init__(self, ranks):
        self.size, self.comm, self.ranks = len(ranks), None, ranks
        self.partition_memory = None
        self.waiter = self

    def collective(self, comm, name, *args):
        pass  # the counts below are already the sums over the simulated ranks


def _received(vecs, bounds):
    return np.array([sum(int(np.searchsorted(v.indices, bounds[j + 1])
                             - np.searchsorted(v.indices, bounds[j])) for v in vecs)
                     for j in range(len(bounds) - 1)])


@pytest.mark.parametrize("P", [2, 3, 5, 8])
def test_estimate_balances_a_power_law_support(P, monkeypatch):
    dim = 300_000
    vecs = []
    for r in range(P):  # every rank holds the low (frequent) features, few of the others
        rng = np.random.default_rng([7, r])
        idx = np.unique((rng.random(20_000) ** 6 * dim).astype(np.int64))
        vecs.append(SparseVector(dim, idx, np.ones(idx.size, np.float32)))
    counts = partition._counts
    monkeypatch.setattr(partition, "_counts", lambda vec, e: sum(counts(v, e) for v in vecs))
    ctx = _OneProcess(vecs)
    equal = _received(vecs, block_bounds(dim, P))
    bounds = partition._estimate(ctx, vecs[0], partition.SPARSE_KIND, CODEC)
    got = _received(vecs, bounds)
    assert equal.max() / equal.mean() > 1.5  # today's cut is skewed
    assert got.max() / got.mean() <= 1.1, (bounds, got)
    # the dense kind weighs the dense phase too: its blocks stay much closer to N / P
    dense = partition._estimate(ctx, vecs[0], partition.DENSE_KIND, CODEC)
    assert np.diff(dense).min() > np.diff(bounds).min()


def test_policy_default_comes_from_the_environment(monkeypatch):
    from sparcml import InvalidOptionError, default_options

    monkeypatch.delenv("SPARCML_PARTITIONS", raising=False)
    assert default_options().partitions == partition.BALANCED
    monkeypatch.setenv("SPARCML_PARTITIONS", "Equal")
    assert default_options().partitions == partition.EQUAL
    monkeypatch.setenv("SPARCML_PARTITIONS", "skewed")
    with pytest.raises(InvalidOptionError, match="expected one of balanced, equal"):
        default_options()
