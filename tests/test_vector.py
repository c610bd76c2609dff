"""SparseVector invariants, constructors, errors and the switch rule; the wire format."""

import numpy as np
import pytest

from sparcml import (InvalidVectorError, SparseVector, UnsupportedDtypeError, index_dtype_for,
                     should_be_dense)
from sparcml._wire.codec import DENSE, SHORT_HEADER_SIZE, SPARSE, Codec, Part, decode, read_header


@pytest.mark.parametrize("in_dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
def test_indices_of_any_integer_dtype_are_stored_by_dim(in_dtype):
    v = SparseVector(100, np.array([0, 5, 99], dtype=in_dtype), np.ones(3, np.float32))
    assert v.indices.dtype == np.int32
    assert v.to_dense()[[0, 5, 99]].tolist() == [1, 1, 1]
    big = SparseVector(2**31 + 10, np.array([0, 2**31 + 9], np.int64), np.ones(2))
    assert big.indices.dtype == np.int64 and big.index_dtype == np.int64
    assert index_dtype_for(2**31) == np.int32  # largest index 2**31 - 1 still fits


@pytest.mark.parametrize("val_dt", [np.float32, np.float64])
def test_values_keep_the_callers_dtype(val_dt):
    v = SparseVector(10, [1, 2], np.array([1, 2], val_dt))
    assert v.dtype == val_dt and v.to_dense().dtype == val_dt


@pytest.mark.parametrize("val_dt", [np.float32, np.float64])
def test_value_dtype_is_numpys_own_instance(val_dt):
    """A plan's steady check compares dtypes by identity: zeros (a plan's template), a
    big-endian input and the caller's array all give NumPy's own instance."""
    own = np.dtype(val_dt)
    assert SparseVector.zeros(10, val_dt).dtype is own
    assert SparseVector(10, [1], np.array([1], own.newbyteorder(">"))).dtype is own
    assert SparseVector(10, [1], np.array([1], val_dt)).values.dtype is own


def test_unsupported_value_dtype_names_the_fix():
    with pytest.raises(UnsupportedDtypeError, match="float32 or float64, got int64"):
        SparseVector(10, [1], np.array([1], np.int64))
    with pytest.raises(UnsupportedDtypeError, match="indices must be integers"):
        SparseVector(10, np.array([1.0]), np.ones(1))


@pytest.mark.parametrize("indices, match", [
    ([3, 1], "unsorted index 1 at position 1 after 3"),
    ([1, 1], "duplicate index 1 at position 1"),
    ([1, 10], r"index 10 out of range \[0, 10\)"),
    ([-1, 3], r"index -1 out of range \[0, 10\)"),
])
def test_plain_constructor_rejects_bad_indices(indices, match):
    with pytest.raises(InvalidVectorError, match=match):
        SparseVector(10, indices, np.ones(len(indices)))


def test_mismatched_lengths_and_bad_dim():
    with pytest.raises(InvalidVectorError, match="2 indices, 3 values"):
        SparseVector(10, [1, 2], np.ones(3))
    with pytest.raises(InvalidVectorError, match="dim must be >= 0"):
        SparseVector(-1, [], np.ones(0))
    with pytest.raises(InvalidVectorError, match="must be 1-d"):
        SparseVector(10, [[1]], np.ones((1, 1)))


def test_from_coo_sorts_and_sums_duplicates():
    v = SparseVector.from_coo(10, np.array([7, 2, 7, 0, 2, 7]), np.arange(6, dtype=np.float64))
    assert v.indices.tolist() == [0, 2, 7]
    assert v.values.tolist() == [3.0, 1 + 4, 0 + 2 + 5]
    with pytest.raises(InvalidVectorError, match="out of range"):
        SparseVector.from_coo(5, [5], np.ones(1))
    assert SparseVector.from_coo(5, np.array([], np.int64), np.ones(0)).nnz == 0


def test_from_dense_follows_the_switch_rule_and_round_trips():
    x = np.zeros(10, np.float32)
    x[:4] = 1  # 4 * 8 < 10 * 4: sparse
    v = SparseVector.from_dense(x)
    assert not v.is_dense and v.nnz == 4 and v.density == 0.4
    x[4] = 1   # 5 * 8 >= 10 * 4: dense
    w = SparseVector.from_dense(x)
    assert w.is_dense and w.nnz == 10 and w.count_nonzero() == 5
    np.testing.assert_array_equal(w.to_dense(), x)
    np.testing.assert_array_equal(v.to_sparse().to_dense(), v.to_dense())
    out = np.full(10, 7, np.float32)
    assert v.to_dense(out=out) is out and out.sum() == 4


@pytest.mark.parametrize("dim, idx_dt, val_dt, threshold", [
    (1000, np.int32, np.float32, 500),   # density 1/2
    (1000, np.int64, np.float32, 334),   # 12 k >= 4000
    (1000, np.int32, np.float64, 667),   # 12 k >= 8000
    (1000, np.int64, np.float64, 500),
])
def test_switch_rule_threshold(dim, idx_dt, val_dt, threshold):
    assert should_be_dense(threshold, dim, idx_dt, val_dt)
    assert not should_be_dense(threshold - 1, dim, idx_dt, val_dt)
    assert not should_be_dense(0, 0, idx_dt, val_dt)


@pytest.mark.parametrize("val_dt", [np.float32, np.float64])
def test_wire_round_trip_and_per_message_rule(val_dt):
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(np.arange(100, 200), 30, replace=False)).astype(np.int32)
    val = rng.standard_normal(30).astype(val_dt)
    buf, dense = Codec(np.int32, val_dt).encode(Part(100, 100, idx, val))
    assert not dense and read_header(buf).fmt == SPARSE and buf.nbytes % 8 == 0
    part = decode(buf)
    np.testing.assert_array_equal(part.indices, idx)
    np.testing.assert_array_equal(part.values, val)
    # the same range at the rule's threshold goes dense: 100 * s_val <= k * (4 + s_val)
    k = -(-100 * np.dtype(val_dt).itemsize // (4 + np.dtype(val_dt).itemsize))
    idx = np.arange(100, 100 + k, dtype=np.int32)
    buf, dense = Codec(np.int32, val_dt).encode(Part(100, 100, idx, np.ones(k, val_dt)))
    assert dense and read_header(buf).fmt == DENSE
    assert buf.nbytes == SHORT_HEADER_SIZE + 100 * np.dtype(val_dt).itemsize  # 8-aligned already
    part = decode(buf)
    assert part.is_dense and part.offset == 100 and part.values.sum() == k
    buf, dense = Codec(np.int32, val_dt).encode(Part(100, 100, idx[:-1], np.ones(k - 1, val_dt)))
    assert not dense
    # a dense block with few nonzeros is sent sparse
    block = np.zeros(100, val_dt)
    block[[3, 50]] = 2
    buf, dense = Codec(np.int32, val_dt).encode(Part(100, 100, None, block))
    assert not dense and decode(buf).indices.tolist() == [103, 150]


def test_unchecked_wraps_the_arrays_themselves_without_checking():
    idx = np.array([1, 4], np.int32)
    val = np.array([2.0, -1.0], np.float32)
    vec = SparseVector.unchecked(10, idx, val)
    assert vec.indices is idx and vec.values is val and vec.nnz == 2
    np.testing.assert_array_equal(vec.to_dense(), SparseVector(10, idx, val).to_dense())
    dense = np.arange(5, dtype=np.float64)
    whole = SparseVector.unchecked(5, None, dense)
    assert whole.is_dense and whole.values is dense
    # no check at all: an unsorted input is taken as it is (the constructor refuses it)
    assert SparseVector.unchecked(10, idx[::-1].copy(), val).indices[0] == 4
    with pytest.raises(InvalidVectorError):
        SparseVector(10, idx[::-1].copy(), val)
