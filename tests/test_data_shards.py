"""Per-rank reading: shards concatenate to the whole; train/test split independent of P."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparcapps.data import (DataFormatError, load_shard, make_url_like, read_attrs, read_rows,
                            shard_range)


@pytest.fixture(scope="module")
def h5(tmp_path_factory):
    path = tmp_path_factory.mktemp("shards") / "u.h5"
    make_url_like(1003, seed=5, features=5000, out=path)
    return path


@pytest.fixture(scope="module")
def whole(h5):
    return read_rows(h5, 0, 1003)


@pytest.mark.parametrize("P", [1, 3, 4])
def test_shards_concatenate_to_whole(h5, whole, P):
    X, y = whole
    parts = [load_shard(h5, r, P) for r in range(P)]
    for Xr, yr in parts:
        assert isinstance(Xr, sp.csr_matrix) and Xr.dtype == np.float32
        assert Xr.shape[1] == 5000 and yr.dtype == np.float32 and len(yr) == Xr.shape[0]
    sizes = [Xr.shape[0] for Xr, _ in parts]
    assert max(sizes) - min(sizes) <= 1
    Xc = sp.vstack([Xr for Xr, _ in parts], format="csr")
    assert (Xc != X).nnz == 0
    np.testing.assert_array_equal(np.concatenate([yr for _, yr in parts]), y)


@pytest.mark.parametrize("P", [1, 3, 4])
def test_split_is_independent_of_P(h5, whole, P):
    X, y = whole
    ref = {s: load_shard(h5, 0, 1, split=s, test_fraction=0.25, seed=7) for s in
           ("train", "test")}
    assert ref["train"][0].shape[0] + ref["test"][0].shape[0] == 1003
    assert 0.18 < ref["test"][0].shape[0] / 1003 < 0.32
    for s in ("train", "test"):
        parts = [load_shard(h5, r, P, split=s, test_fraction=0.25, seed=7) for r in range(P)]
        Xc = sp.vstack([p[0] for p in parts], format="csr")
        assert (Xc != ref[s][0]).nnz == 0
        np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), ref[s][1])
    other = load_shard(h5, 0, 1, split="test", test_fraction=0.25, seed=8)[0]
    assert other.shape != ref["test"][0].shape or (other != ref["test"][0]).nnz


def test_more_ranks_than_rows(tmp_path):
    path = tmp_path / "tiny.h5"
    make_url_like(3, seed=0, features=100, out=path)
    shapes = [load_shard(path, r, 5)[0].shape for r in range(5)]
    assert sum(s[0] for s in shapes) == 3 and all(s[1] == 100 for s in shapes)


def test_bad_arguments(h5, tmp_path):
    with pytest.raises(ValueError, match="rank"):
        load_shard(h5, 4, 4)
    with pytest.raises(ValueError, match="size"):
        shard_range(10, 0, 0)
    with pytest.raises(ValueError, match="split"):
        load_shard(h5, 0, 1, split="valid")
    import h5py
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = [1]
    with pytest.raises(DataFormatError, match="not a sparcml-csr file"):
        load_shard(tmp_path / "other.h5", 0, 1)
    assert read_attrs(h5)["n_rows"] == 1003
