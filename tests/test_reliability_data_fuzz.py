"""Fuzzing the data readers (issue 11), bounded in time.

- LIBSVM parser: random and mutated texts. Either a :class:`DataFormatError` naming the line,
  or exactly the matrix and labels of ``sklearn.datasets.load_svmlight_file`` on the same text.
- sparcml-csr reader: a valid small file with one mutation (a changed element, dataset or
  attribute, a deleted one, truncated bytes, flipped bytes in a data chunk). Either an error of
  :mod:`sparcapps.data.errors`, or a valid matrix; never a crash, never an invalid matrix.

Alphabet of the mutations: what LIBSVM text is made of plus a few foreign characters; not
NUL, vertical tab or form feed (scikit-learn's reader treats them differently from any LIBSVM
reader: NUL ends its comment search, VT/FF split fields), nor ``qid`` outside the first field
(scikit-learn rejects it there, we ignore it as svmlight does).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import (HealthCheck, currently_in_test_context, event, given, settings,
                        strategies as st)
from sklearn.datasets import load_svmlight_file

from sparcapps.data import CsrWriter, DataError, DataFormatError, convert_libsvm, load_shard
from sparcapps.data.cli import main

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _event(what: str) -> None:
    """Count an outcome in ``--hypothesis-show-statistics`` (a no-op outside Hypothesis)."""
    if currently_in_test_context():
        event(what)

# -- LIBSVM text ---------------------------------------------------------------------------

_LABELS = ["1", "-1", "+1", "0", "2", "0.5", "-2.25", "1e3", "1.", ".5", "nan", "-inf", "3"]
_VALUES = ["1", "0", "-0", "0.5", "1e-3", "2.5E+2", "-7", "1e400", "inf", "nan", "123456789",
           "0.1000000000000000055511151231257827", "3.", ".25", "1e-50"]
_ALPHABET = "0123456789:.-+eE #\t\r\nxa_"


@st.composite
def libsvm_lines(draw) -> str:
    """A LIBSVM text: random rows (sorted indices, varied number formats), comments, blank
    lines, qid fields, with or without a final newline."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["row", "row", "row", "comment", "blank"]))
        if kind == "comment":
            lines.append("# " + draw(st.text(_ALPHABET.replace("\n", ""), max_size=8)))
            continue
        if kind == "blank":
            lines.append(draw(st.sampled_from(["", "  ", "\t"])))
            continue
        idx = sorted(draw(st.sets(st.integers(0, 60), max_size=6)))
        parts = [draw(st.sampled_from(_LABELS))]
        if draw(st.booleans()) and draw(st.booleans()):
            parts.append(f"qid:{draw(st.integers(0, 9))}")
        parts += [f"{i}:{draw(st.sampled_from(_VALUES))}" for i in idx]
        line = draw(st.sampled_from([" ", "\t", "  "])).join(parts)
        if draw(st.booleans()) and draw(st.booleans()):
            line += " # c"
        lines.append(line)
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))


@st.composite
def mutated(draw, texts) -> str:
    """``texts`` with up to four characters inserted, deleted or replaced."""
    text = draw(texts)
    for _ in range(draw(st.integers(0, 4))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        ch = draw(st.sampled_from(_ALPHABET))
        if op == "insert":
            text = text[:pos] + ch + text[pos:]
        elif pos < len(text):
            text = text[:pos] + ("" if op == "delete" else ch) + text[pos + 1:]
    return text


def _sklearn(path: Path):
    """scikit-learn's reading, or None where it has no answer: it holds indices in a C int
    (OverflowError), and its parser stops with a bare ValueError on some lines ours reads, such
    as a ``qid:`` after the features (``-2.25 0:0.51 qid:00``, found by this test on CI)."""
    try:
        return load_svmlight_file(str(path), dtype=np.float64)
    except (OverflowError, ValueError):
        return None


def _check_text(text: str, chunk: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "t.svm", Path(d) / "t.h5"
        src.write_bytes(text.encode())
        try:
            convert_libsvm(src, out, task="regression", chunk_bytes=chunk)
        except DataFormatError as err:
            _event("error")
            assert str(src) in str(err)
            assert err.line is not None or "no data rows" in err.problem, str(err)
            assert not out.exists()
            return
        ref = _sklearn(src)
        if ref is None:
            _event("no reference (index beyond C int)")
            return
        _event("same as sklearn")
        Xs, ys = ref
        X, y = load_shard(out)
        if Xs.nnz == 0:       # no index at all: scikit-learn says 1 feature, we say 0
            assert X.shape == (Xs.shape[0], 0) and X.nnz == 0, (text, X.shape)
        else:
            assert X.shape == Xs.shape, (text, X.shape, Xs.shape)
        np.testing.assert_array_equal(X.indptr, Xs.indptr)
        np.testing.assert_array_equal(X.indices, Xs.indices)
        with np.errstate(over="ignore"):  # a mutated "1e39" is inf in both, as in the file
            np.testing.assert_array_equal(X.data, Xs.data.astype(np.float32))
            np.testing.assert_array_equal(y, ys.astype(np.float32))


@settings(max_examples=60, **SETTINGS)
@given(text=libsvm_lines(), chunk=st.sampled_from([7, 64, 1 << 20]))
def test_libsvm_random_texts_match_sklearn(text, chunk):
    _check_text(text, chunk)


@settings(max_examples=120, **SETTINGS)
@given(text=mutated(libsvm_lines()), chunk=st.sampled_from([5, 1 << 20]))
def test_libsvm_mutated_texts_error_with_line_or_match_sklearn(text, chunk):
    _check_text(text, chunk)


@pytest.mark.parametrize("text", ["1 2:3\n-1 2:3 2:4\n", "1 2:3\n1 x:1\n", "1:1\n",
                                  "1 qid:2 3:1\n", "\n\n", ""])
def test_libsvm_known_cases(text):
    """Examples the fuzzer met, kept as plain regression cases."""
    _check_text(text, 1 << 20)


# -- sparcml-csr files -----------------------------------------------------------------------

@st.composite
def csr_files(draw):
    """(n_features, rows, compression) of a small valid file."""
    nf = draw(st.integers(1, 40))
    rows = draw(st.lists(st.sets(st.integers(0, nf - 1), max_size=6), min_size=0, max_size=12))
    return nf, [sorted(r) for r in rows], draw(st.sampled_from(["none", "gzip"]))


def _write(path: Path, nf: int, rows, compression: str) -> None:
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    idx = np.array([i for r in rows for i in r], dtype=np.int64)
    data = np.linspace(0.5, 2.0, len(idx)).astype(np.float32)
    y = np.where(np.arange(len(rows)) % 2 == 0, 1.0, -1.0).astype(np.float32)
    with CsrWriter(path, n_features=nf, compression=compression) as w:
        w.append(lengths, idx, data, y)
        w.commit(task="binary", index_base=0)


_INTS = [-2**63, -2**31 - 1, -1, 0, 1, 2, 5, 39, 40, 41, 2**31 - 1, 2**31, 2**62, 2**63 - 1]
_ODD_ATTRS = [np.int64(-1), np.int64(0), np.int64(3), np.int64(2**62), np.uint64(2**64 - 1),
              np.float64(3.0), "12", b"sparcml-csr", np.array([1, 2]), np.bool_(True),
              np.int32(1), "sparcml-csr", np.array([], dtype=np.int64)]


@st.composite
def mutations(draw):
    kind = draw(st.sampled_from(["element", "element", "dataset", "drop", "attr", "attr",
                                 "truncate", "flip"]))
    name = draw(st.sampled_from(["indptr", "indices", "data", "labels"]))
    if kind == "element":
        return kind, name, draw(st.integers(0, 60)), draw(st.sampled_from(_INTS))
    if kind == "dataset":
        return kind, name, draw(st.sampled_from(["float64", "int8", "uint64", "2d", "str",
                                                 "shorter", "longer", ">i8", "group"])), None
    if kind == "drop":
        return kind, draw(st.sampled_from([name, "@format", "@n_rows", "@nnz",
                                           "@n_features", "@format_version"])), None, None
    if kind == "attr":
        return kind, draw(st.sampled_from(["n_rows", "n_features", "nnz", "format",
                                           "format_version"])), draw(st.sampled_from(
                                               range(len(_ODD_ATTRS)))), None
    if kind == "truncate":
        return kind, None, draw(st.floats(0.0, 0.999)), None
    return kind, name, draw(st.integers(0, 2**16)), draw(st.integers(1, 255))


def _replace_dataset(f, name: str, how: str) -> None:
    old = f[name][()]
    del f[name]
    if how == "2d":
        f[name] = np.repeat(old[:, None], 2, axis=1) if old.size else np.zeros((0, 2))
    elif how == "str":
        f[name] = np.array([b"x"] * max(len(old), 1))
    elif how == "shorter":
        f[name] = old[:-1] if len(old) else old
    elif how == "longer":
        f[name] = np.concatenate([old, old[-1:] if len(old) else np.zeros(1, old.dtype)])
    elif how == "group":
        f.create_group(name)
    else:
        f[name] = old.astype(how)


def _mutate(path: Path, m) -> None:
    kind, name, a, b = m
    if kind == "truncate":
        blob = path.read_bytes()
        path.write_bytes(blob[: int(len(blob) * a)])
        return
    if kind == "flip":
        with h5py.File(path, "r") as f:
            ds = f[name]
            n = ds.id.get_num_chunks()
            if n == 0:
                return
            info = ds.id.get_chunk_info(a % n)
            offset, size = info.byte_offset, info.size
        with open(path, "r+b") as fh:
            fh.seek(offset + (a % max(size, 1)))
            byte = fh.read(1)
            fh.seek(-len(byte), 1)
            fh.write(bytes([(byte[0] ^ b) if byte else b]))
        return
    with h5py.File(path, "r+") as f:
        if kind == "element":
            ds = f[name]
            if ds.shape[0]:
                ds[a % ds.shape[0]] = np.array(b).astype(ds.dtype) if ds.dtype.kind == "f" \
                    else np.array(b, dtype=np.int64).astype(ds.dtype)
        elif kind == "dataset":
            _replace_dataset(f, name, a)
        elif kind == "drop":
            if name.startswith("@"):
                del f.attrs[name[1:]]
            else:
                del f[name]
        else:
            f.attrs[name] = _ODD_ATTRS[a]


def _assert_valid(X, y, n_features=None):
    X.check_format(full_check=True)
    assert X.dtype == np.float32 and y.dtype == np.float32 and X.shape[0] == len(y)
    assert X.has_canonical_format
    if n_features is not None:
        assert X.shape[1] == n_features
    if X.nnz:
        assert 0 <= X.indices.min() and X.indices.max() < X.shape[1]


@settings(max_examples=150, **SETTINGS)
@given(spec=csr_files(), mutation=mutations(), size=st.integers(1, 4), data=st.data())
def test_mutated_csr_file_errors_cleanly_or_reads_valid(spec, mutation, size, data):
    rank = data.draw(st.integers(0, size - 1))
    split = data.draw(st.sampled_from([None, "train", "test"]))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.h5"
        _write(path, *spec)
        try:
            _mutate(path, mutation)
        except (ValueError, TypeError, OverflowError):
            _event("mutation refused by h5py")
            return
        try:
            X, y = load_shard(path, rank, size, split=split, test_fraction=0.3)
        except DataError as err:
            assert str(path) in str(err)
            _event(f"{mutation[0]}: {type(err).__name__}")
        else:
            _assert_valid(X, y)
            _event(f"{mutation[0]}: read")
        assert main(["info", str(path)]) in (0, 1, 2)     # no exception, whatever the file


@pytest.mark.parametrize("value", [np.array([], dtype=np.int64), np.array([b"sparcml-csr"] * 2),
                                   np.int64(1)])
def test_format_attribute_of_another_type(tmp_path, value):
    """Found by the fuzzer: an empty array as ``format`` made the check itself raise."""
    from sparcapps.data import NotCsrFileError
    _write(tmp_path / "f.h5", 3, [[1]], "none")
    with h5py.File(tmp_path / "f.h5", "r+") as f:
        f.attrs["format"] = value
    with pytest.raises(NotCsrFileError, match="not a sparcml-csr file"):
        load_shard(tmp_path / "f.h5")


def test_unmutated_csr_file_reads_back(tmp_path):
    rows = [[0, 3], [], [1, 2, 39]]
    _write(tmp_path / "f.h5", 40, rows, "gzip")
    X, y = load_shard(tmp_path / "f.h5")
    _assert_valid(X, y, 40)
    assert [list(X[i].indices) for i in range(3)] == rows
