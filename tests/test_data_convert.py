"""LIBSVM -> HDF5 conversion: round trip against scikit-learn, formats, malformed input."""

from __future__ import annotations

import bz2
import gzip
import lzma
import random

import h5py
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from sklearn.datasets import load_svmlight_file

from sparcapps.data import DataFormatError, OutputExistsError, convert_libsvm, read_rows


def _fmt_value(rng: random.Random) -> str:
    v = rng.choice([1.0, rng.uniform(-10, 10), rng.uniform(0, 1e-3), rng.uniform(1e3, 1e6)])
    style = rng.randrange(6)
    if style == 0:
        return repr(v)
    if style == 1:
        return f"{v:.3e}"
    if style == 2:
        return f"{v:g}"
    if style == 3:
        return str(int(v))
    if style == 4:
        return f"{v:.25f}"          # long mantissa: off the fast path
    return f"{v:.4f}".rstrip("0")   # may end in '.', e.g. "1."


def make_text(n_rows=400, n_features=300, seed=0, zero_based=False, labels=(-1, 1),
              extras=True) -> str:
    """A LIBSVM text with varied number formats, comments, qid fields and blank lines."""
    rng = random.Random(seed)
    lines = []
    if extras:
        lines.append("# generated for tests")
    for r in range(n_rows):
        k = rng.randrange(0, 12)
        idx = sorted(rng.sample(range(n_features), k))
        if not zero_based:
            idx = [i + 1 for i in idx]
        parts = [str(rng.choice(labels))]
        if extras and r % 7 == 0:
            parts.append(f"qid:{r}")
        parts += [f"{i}:{_fmt_value(rng)}" for i in idx]
        sep = "\t" if extras and r % 5 == 0 else " "
        line = sep.join(parts)
        if extras and r % 11 == 0:
            line += "  # trailing comment"
        lines.append(line)
        if extras and r % 13 == 0:
            lines.append("   ")
    return "\n".join(lines) + "\n"


def _h5_as_csr(path):
    X, y = read_rows(path, 0, int(h5py.File(path).attrs["n_rows"]))
    return X, y


def _assert_same_as_sklearn(src, out, plain=None, **kw):
    r = convert_libsvm(src, out, **kw)
    Xs, ys = load_svmlight_file(str(plain or src), dtype=np.float64)
    X, y = _h5_as_csr(out)
    assert X.shape == Xs.shape
    np.testing.assert_array_equal(X.indptr, Xs.indptr)
    np.testing.assert_array_equal(X.indices, Xs.indices)
    np.testing.assert_array_equal(X.data, Xs.data.astype(np.float32))
    return r, y, ys


@pytest.mark.parametrize("compress", ["plain", "gz", "bz2", "xz"])
def test_round_trip_matches_sklearn(tmp_path, compress):
    text = make_text(seed=1).encode()
    src = tmp_path / f"d.svm{'' if compress == 'plain' else '.' + compress}"
    opener = {"plain": open, "gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}[compress]
    with opener(src, "wb") as fh:
        fh.write(text)
    plain = tmp_path / "plain.txt"        # scikit-learn reads no .xz
    plain.write_bytes(text)
    # tiny chunks: lines cross chunk boundaries many times
    r, y, ys = _assert_same_as_sklearn(src, tmp_path / "d.h5", plain, chunk_bytes=997)
    np.testing.assert_array_equal(y, ys.astype(np.float32))
    assert r.task == "binary" and r.index_base == 1
    with h5py.File(tmp_path / "d.h5") as f:
        assert f.attrs["format"] == "sparcml-csr" and f.attrs["format_version"] == 1
        assert f["indptr"].dtype == np.int64 and f["indices"].dtype == np.int32
        assert f["data"].dtype == np.float32 and f["labels"].dtype == np.float32
        assert f["indices"].compression == "gzip"
        assert f.attrs["nnz"] == r.nnz and f.attrs["n_rows"] == r.n_rows == 400
        import hashlib
        assert f.attrs["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_zero_based_detected(tmp_path):
    src = tmp_path / "z.svm"
    src.write_text(make_text(seed=2, zero_based=True, extras=False))
    r = convert_libsvm(src, tmp_path / "z.h5", chunk_bytes=512)
    Xs, _ = load_svmlight_file(str(src), zero_based=True)
    X, _ = _h5_as_csr(tmp_path / "z.h5")
    assert r.index_base == 0
    np.testing.assert_array_equal(X.indices, Xs.indices)
    np.testing.assert_array_equal(X.data, Xs.data.astype(np.float32))


@pytest.mark.parametrize("labels,expected", [((0, 1), {0: -1, 1: 1}), ((1, 2), {1: -1, 2: 1}),
                                             ((-1, 1), {-1: -1, 1: 1})])
def test_binary_labels_normalized(tmp_path, labels, expected):
    src = tmp_path / "l.svm"
    src.write_text(make_text(n_rows=50, seed=3, labels=labels, extras=False))
    convert_libsvm(src, tmp_path / "l.h5")
    _, ys = load_svmlight_file(str(src))
    _, y = _h5_as_csr(tmp_path / "l.h5")
    np.testing.assert_array_equal(y, [expected[int(v)] for v in ys])


def test_multiclass_and_regression_keep_labels(tmp_path):
    src = tmp_path / "m.svm"
    src.write_text("3 1:1\n7 2:1\n5 1:2\n")
    assert convert_libsvm(src, tmp_path / "m.h5").task == "multiclass"
    np.testing.assert_array_equal(_h5_as_csr(tmp_path / "m.h5")[1], [3, 7, 5])
    src.write_text("0.5 1:1\n-2.25 2:1\n")
    assert convert_libsvm(src, tmp_path / "r.h5").task == "regression"
    with pytest.raises(DataFormatError, match="task=binary"):
        convert_libsvm(src, tmp_path / "b.h5", task="binary")
    assert not (tmp_path / "b.h5").exists()


def test_declared_features_and_wide_indices(tmp_path):
    src = tmp_path / "w.svm"
    src.write_text("1 1:1 5:2\n-1 3000000000:1.5\n")
    r = convert_libsvm(src, tmp_path / "w.h5", chunk_bytes=8)
    with h5py.File(tmp_path / "w.h5") as f:
        assert f["indices"].dtype == np.int64
        assert r.n_features == 3000000000
        np.testing.assert_array_equal(f["indices"][:], [0, 4, 2999999999])
    r = convert_libsvm(src, tmp_path / "w2.h5", n_features=2**31 + 2**30)
    with h5py.File(tmp_path / "w2.h5") as f:
        assert f["indices"].dtype == np.int64 and f.attrs["n_features"] == 2**31 + 2**30
    src.write_text("1 1:1 5:2\n")
    r = convert_libsvm(src, tmp_path / "n.h5", n_features=10)
    assert r.n_features == 10
    assert read_rows(tmp_path / "n.h5", 0, 1)[0].shape == (1, 10)


MALFORMED = [
    # (text, kwargs, line, message fragment)
    ("1 1:2\n-1 2:abc\n", {}, 2, "expected index:value with a numeric value, got '2:abc'"),
    ("1 1:2\n1 0:1 3:4\n", {"index_base": 1}, 2, "feature index 0"),
    ("1 1:2\n\n-1 3 4:1\n", {}, 3, "expected index:value, got '3'"),
    ("1 1:2\n-1 11:1\n", {"n_features": 10}, 2, "out of range"),
    ("1 1:2\n-1 10:1\n", {"n_features": 10, "index_base": 0}, 2, "out of range"),
    ("# c\n1 0:2\n-1 10:1\n", {"n_features": 10}, 3, "out of range"),   # auto -> 0-based
    ("1 3:1 2:1\n", {}, 1, "strictly increasing"),
    ("1 3:1 3:1\n", {}, 1, "strictly increasing"),
    ("1 x:1\n", {}, 1, "non-negative integer index"),
    ("1 -3:1\n", {}, 1, "non-negative integer index"),
    ("1 3:\n", {}, 1, "empty value"),
    ("abc 3:1\n", {}, 1, "expected a numeric label"),
    ("1:2 3:1\n", {}, 1, "expected a numeric label"),
    ("1 1:1_0\n", {}, 1, "numeric value"),
]


@pytest.mark.parametrize("text,kw,line,fragment", MALFORMED)
def test_malformed_input_names_file_and_line(tmp_path, text, kw, line, fragment):
    src = tmp_path / "bad.svm"
    src.write_text(text)
    out = tmp_path / "bad.h5"
    with pytest.raises(DataFormatError) as info:
        convert_libsvm(src, out, **kw)
    err = info.value
    assert err.line == line and str(src) in str(err) and f":{line}:" in str(err)
    assert fragment in str(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.svm"]


@pytest.mark.parametrize("compress", ["gz", "bz2", "xz"])
def test_truncated_compressed_file(tmp_path, compress):
    text = make_text(n_rows=3000, seed=4, extras=False).encode()
    opener = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[compress]
    blob = opener(text)
    src = tmp_path / f"t.svm.{compress}"
    src.write_bytes(blob[: len(blob) * 2 // 3])
    with pytest.raises(DataFormatError) as info:
        convert_libsvm(src, tmp_path / "t.h5", chunk_bytes=4096)
    # the line being read when the stream ended (bz2 decodes whole 900 kB blocks: line 1)
    assert info.value.line is not None and info.value.line >= (1 if compress == "bz2" else 2)
    assert "truncated" in str(info.value) and str(src) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def test_existing_output_needs_overwrite(tmp_path):
    src = tmp_path / "e.svm"
    src.write_text("1 1:1\n")
    convert_libsvm(src, tmp_path / "e.h5")
    with pytest.raises(OutputExistsError):
        convert_libsvm(src, tmp_path / "e.h5")
    convert_libsvm(src, tmp_path / "e.h5", overwrite=True)


def test_many_slow_values_in_one_chunk(tmp_path):
    # more off-fast-path values than the kernel's slow buffer holds (16384), in one line too
    vals = " ".join(f"{i}:{1 / 3:.30f}" for i in range(1, 40001))
    src = tmp_path / "s.svm"
    src.write_text(f"nan {vals}\n1 1:inf\n")
    convert_libsvm(src, tmp_path / "s.h5")
    X, y = _h5_as_csr(tmp_path / "s.h5")
    assert np.isnan(y[0]) and X.nnz == 40001
    assert np.all(X.data[:40000] == np.float32(1 / 3)) and np.isinf(X.data[-1])


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64),
       st.sampled_from(["r", "e", "g", "f"]))
def test_value_parsing_is_correctly_rounded(tmp_path_factory, v, style):
    text = {"r": repr(v), "e": f"{v:.17e}", "g": f"{v:.9g}", "f": f"{v:.12f}"}[style]
    d = tmp_path_factory.mktemp("p")
    (d / "v.svm").write_text(f"1 1:{text}\n")
    convert_libsvm(d / "v.svm", d / "v.h5")
    X, _ = _h5_as_csr(d / "v.h5")
    with np.errstate(over="ignore"):
        expected = np.float32(float(text))
    if expected == 0:
        assert X.data[0] == 0
    else:
        assert X.data[0] == expected or (np.isinf(expected) and np.isinf(X.data[0]))
