"""Synthetic twins: determinism, scale by rows, statistics, agreement with the catalog."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from sparcapps.data import (PRESETS, convert_libsvm, load_catalog, load_shard, make_url_like,
                            make_webspam_like, write_libsvm)


def test_deterministic_and_prefix_stable():
    X1, y1 = make_url_like(9000, seed=3, features=20000)
    X2, y2 = make_url_like(9000, seed=3, features=20000)
    Xs, ys = make_url_like(100, seed=3, features=20000)    # fewer rows: a prefix
    assert (X1 != X2).nnz == 0 and np.array_equal(y1, y2)
    assert (X1[:100] != Xs).nnz == 0 and np.array_equal(y1[:100], ys)
    X3, _ = make_url_like(100, seed=4, features=20000)
    assert (X3 != Xs).nnz > 0


def test_url_like_statistics():
    X, y = make_url_like(20000, seed=0)
    assert X.shape == (20000, 3_231_961) and X.dtype == np.float32
    nnz = np.diff(X.indptr)
    assert abs(nnz.mean() - 115.6) < 3
    assert set(np.unique(y)) == {-1.0, 1.0} and 0.25 < (y > 0).mean() < 0.42
    X.has_sorted_indices = False
    X.sort_indices()
    counts = np.bincount(X.indices, minlength=X.shape[1])[16:]
    # power law: the 10th most frequent sparse feature is far more common than the 1000th
    top = np.sort(counts)[::-1]
    assert top[9] > 20 * top[999] > 0


def test_webspam_like_rows_are_unit_norm():
    X, y = make_webspam_like(300, seed=1)
    assert X.shape[1] == 16_609_143
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, 1.0, atol=1e-3)
    assert 2000 < np.diff(X.indptr).mean() < 6000


def test_presets_match_catalog():
    cat = load_catalog()
    for name, entry in cat.items():
        if entry.synth:
            assert PRESETS[entry.synth].n_features == entry.features
            if entry.nnz and entry.nnz_note == "exact":
                assert abs(PRESETS[entry.synth].nnz_mean - entry.nnz / entry.rows) < 0.1


def test_h5_and_libsvm_outputs_agree(tmp_path):
    X, y = make_url_like(500, seed=2, features=3000)
    make_url_like(500, seed=2, features=3000, out=tmp_path / "a.h5")
    make_url_like(500, seed=2, features=3000, out=tmp_path / "a.svm.bz2")
    Xh, yh = load_shard(tmp_path / "a.h5", 0, 1)
    assert (Xh != X).nnz == 0 and np.array_equal(yh, y)
    convert_libsvm(tmp_path / "a.svm.bz2", tmp_path / "b.h5", n_features=3000)
    Xb, yb = load_shard(tmp_path / "b.h5", 0, 1)
    assert (Xb != X).nnz == 0 and np.array_equal(yb, y)


def test_write_libsvm_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    import scipy.sparse as sp
    X = sp.random(50, 40, density=0.2, format="csr", random_state=1, dtype=np.float64)
    X.data = np.round(X.data * 2000 - 1000, 4)
    y = rng.choice([-1.0, 1.0], 50)
    write_libsvm(tmp_path / "x.svm", X, y, decimals=4)
    Xs, ys = load_svmlight_file(str(tmp_path / "x.svm"), n_features=40)
    np.testing.assert_allclose(Xs.toarray(), X.toarray(), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(ys, y)


def test_invalid_spec():
    with pytest.raises(ValueError, match="value_kind"):
        make_url_like(10, value_kind="ternary")
