"""Property tests: each Numba kernel against its NumPy reference (tests/reference_kernels.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_kernels as ref
from sparcml import _kernels as kernels

INDEX_DTYPES = [np.int32, np.int64]
VALUE_DTYPES = [np.float32, np.float64]


@st.composite
def sorted_stream(draw, dim=st.integers(1, 300)):
    n = draw(dim)
    support = draw(st.sets(st.integers(0, n - 1), max_size=n))
    return n, np.array(sorted(support), dtype=np.int64)


def _values(rng, n, dtype):
    # integer-valued floats: sums are exact, so kernels and references must agree bitwise
    return rng.integers(-8, 9, n).astype(dtype)


@st.composite
def stream_pair(draw):
    dim = draw(st.integers(1, 400))
    kind = draw(st.sampled_from(["random", "empty", "disjoint", "identical", "one_empty"]))
    a = np.array(sorted(draw(st.sets(st.integers(0, dim - 1), max_size=dim))), np.int64)
    if kind == "empty":
        a = b = np.empty(0, np.int64)
    elif kind == "identical":
        b = a.copy()
    elif kind == "disjoint":
        b = np.setdiff1d(np.arange(dim), a)
    elif kind == "one_empty":
        b = np.empty(0, np.int64)
    else:
        b = np.array(sorted(draw(st.sets(st.integers(0, dim - 1), max_size=dim))), np.int64)
    return dim, a, b, draw(st.integers(0, 2**32 - 1))


@pytest.mark.parametrize("idx_dt", INDEX_DTYPES)
@pytest.mark.parametrize("val_dt", VALUE_DTYPES)
@settings(max_examples=60, deadline=None)
@given(case=stream_pair())
def test_merge_add_matches_reference(idx_dt, val_dt, case):
    dim, a, b, seed = case
    rng = np.random.default_rng(seed)
    a, b = a.astype(idx_dt), b.astype(idx_dt)
    av, bv = _values(rng, a.size, val_dt), _values(rng, b.size, val_dt)
    got_i, got_v = kernels.merge_add(a, av, b, bv)
    exp_i, exp_v = ref.merge_add(a, av, b, bv)
    assert got_i.dtype == idx_dt and got_v.dtype == val_dt
    np.testing.assert_array_equal(got_i, exp_i)
    np.testing.assert_array_equal(got_v, exp_v)
    # commutative bit for bit: both partners of a recursive-doubling round compute the same
    swap_i, swap_v = kernels.merge_add(b, bv, a, av)
    np.testing.assert_array_equal(swap_i, got_i)
    np.testing.assert_array_equal(swap_v, got_v)


@pytest.mark.parametrize("idx_dt", INDEX_DTYPES)
@pytest.mark.parametrize("val_dt", VALUE_DTYPES)
@settings(max_examples=60, deadline=None)
@given(case=stream_pair(), spare=st.integers(0, 5))
def test_merge_add_into_matches_reference_and_keeps_the_tail(idx_dt, val_dt, case, spare):
    dim, a, b, seed = case
    rng = np.random.default_rng(seed)
    a, b = a.astype(idx_dt), b.astype(idx_dt)
    av, bv = _values(rng, a.size, val_dt), _values(rng, b.size, val_dt)
    cap = a.size + b.size + spare
    out_i, out_v = np.full(cap, -7, idx_dt), np.full(cap, np.nan, val_dt)
    n = kernels.merge_add_into(a, av, b, bv, out_i, out_v)
    exp_i, exp_v = ref.merge_add(a, av, b, bv)
    assert n == exp_i.size
    np.testing.assert_array_equal(out_i[:n], exp_i)
    np.testing.assert_array_equal(out_v[:n], exp_v)
    assert np.all(out_i[n:] == -7) and np.all(np.isnan(out_v[n:]))
    # the allocating kernel is the same computation, bit for bit (signed zeros included)
    got_i, got_v = kernels.merge_add(a, av, b, bv)
    np.testing.assert_array_equal(got_i, out_i[:n])
    assert got_v.tobytes() == out_v[:n].tobytes()


def test_merge_add_keeps_signed_zeros_and_nan_as_the_into_kernel():
    a, b = np.array([1, 3], np.int64), np.array([1, 2], np.int64)
    av, bv = np.array([-0.0, np.nan]), np.array([-0.0, 0.0])
    got_i, got_v = kernels.merge_add(a, av, b, bv)
    out_i, out_v = np.empty(4, np.int64), np.empty(4)
    n = kernels.merge_add_into(a, av, b, bv, out_i, out_v)
    assert n == 3 and got_v.tobytes() == out_v[:n].tobytes()
    assert np.signbit(got_v[0]) and got_v[1] == 0.0 and not np.signbit(got_v[1])


def test_into_kernels_refuse_short_outputs():
    a = np.array([0, 2, 4], np.int32)
    v = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"len\(a\) \+ len\(b\)"):
        kernels.merge_add_into(a, v, a + 1, v, np.empty(5, np.int32), np.empty(6, np.float32))
    offsets = np.array([0, 3, 6], np.int64)
    with pytest.raises(ValueError, match="merge_many_into"):
        kernels.merge_many_into(offsets, np.concatenate([a, a]), np.ones(6, np.float32),
                                np.empty(6, np.int32), np.empty(5, np.float32))
    x = np.array([0, 1, 0, 2, 3], np.float32)
    out_i, out_v = np.full(2, -1, np.int64), np.full(2, -1, np.float32)
    with pytest.raises(ValueError, match="dense_to_sparse_into"):
        kernels.dense_to_sparse_into(x, 0, out_i, out_v)
    # nothing is written past the ends: the part that fitted, and no more
    np.testing.assert_array_equal(out_i, [1, 3])


@pytest.mark.parametrize("idx_dt", INDEX_DTYPES)
@settings(max_examples=60, deadline=None)
@given(nstreams=st.integers(1, 9), dim=st.integers(1, 200), seed=st.integers(0, 2**32 - 1),
       density=st.sampled_from([0.0, 0.05, 0.5, 1.0]))
def test_merge_many_matches_reference(idx_dt, nstreams, dim, seed, density):
    rng = np.random.default_rng(seed)
    streams = [np.sort(rng.choice(dim, int(rng.binomial(dim, density)), replace=False))
               for _ in range(nstreams)]
    offsets = np.cumsum([0] + [s.size for s in streams]).astype(np.int64)
    idx = np.concatenate(streams).astype(idx_dt)
    # non-integer values: the fold order matters, and must be stream order exactly
    val = rng.standard_normal(idx.size).astype(np.float32)
    got_i, got_v = kernels.merge_many(offsets, idx, val)
    exp_i, exp_v = ref.merge_many(offsets, idx, val)
    np.testing.assert_array_equal(got_i, exp_i)
    np.testing.assert_array_equal(got_v, exp_v)
    out_i, out_v = np.full(idx.size + 2, -3, idx_dt), np.full(idx.size + 2, np.inf, np.float32)
    n = kernels.merge_many_into(offsets, idx, val, out_i, out_v)
    assert n == exp_i.size and np.all(out_i[n:] == -3) and np.all(out_v[n:] == np.inf)
    np.testing.assert_array_equal(out_i[:n], got_i)
    assert out_v[:n].tobytes() == got_v.tobytes()


@pytest.mark.parametrize("val_dt", VALUE_DTYPES)
@settings(max_examples=40, deadline=None)
@given(case=stream_pair(), offset=st.integers(0, 1000))
def test_scatter_add_matches_reference(val_dt, case, offset):
    dim, a, _, seed = case
    rng = np.random.default_rng(seed)
    val = _values(rng, a.size, val_dt)
    base = _values(rng, dim, val_dt)
    got, exp = base.copy(), base.copy()
    kernels.scatter_add(got, a + offset, val, offset)
    ref.scatter_add(exp, a + offset, val, offset)
    np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("idx_dt", INDEX_DTYPES)
@settings(max_examples=40, deadline=None)
@given(case=stream_pair(), nparts=st.integers(1, 9))
def test_split_positions_partition_the_stream(idx_dt, case, nparts):
    dim, a, _, _ = case
    bounds = ((np.arange(nparts + 1) * dim) // nparts).astype(idx_dt)
    pos = kernels.split_positions(a.astype(idx_dt), bounds)
    np.testing.assert_array_equal(pos, np.searchsorted(a, bounds))
    for j in range(nparts):
        part = a[pos[j]:pos[j + 1]]
        assert np.all((part >= bounds[j]) & (part < bounds[j + 1]))
    assert pos[0] == 0 and pos[-1] == a.size


@pytest.mark.parametrize("idx_dt", INDEX_DTYPES)
@pytest.mark.parametrize("val_dt", VALUE_DTYPES)
@settings(max_examples=40, deadline=None)
@given(dim=st.integers(0, 300), density=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
       offset=st.integers(0, 10**6), seed=st.integers(0, 2**32 - 1))
def test_dense_to_sparse_matches_reference(idx_dt, val_dt, dim, density, offset, seed):
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(dim) < density, _values(rng, dim, val_dt), 0).astype(val_dt)
    got_i, got_v = kernels.dense_to_sparse(x, offset, np.empty(0, idx_dt))
    exp_i, exp_v = ref.dense_to_sparse(x, offset, idx_dt)
    assert got_i.dtype == idx_dt
    np.testing.assert_array_equal(got_i, exp_i)
    np.testing.assert_array_equal(got_v, exp_v)
    assert kernels.count_nonzero(x) == np.count_nonzero(x)
    out_i, out_v = np.full(dim + 1, -5, idx_dt), np.full(dim + 1, 9, val_dt)
    n = kernels.dense_to_sparse_into(x, offset, out_i, out_v)
    assert n == exp_i.size and out_i[n] == -5 and out_v[n] == 9
    np.testing.assert_array_equal(out_i[:n], exp_i)
    np.testing.assert_array_equal(out_v[:n], exp_v)


def test_first_unsorted():
    assert kernels.first_unsorted(np.array([], np.int64)) == -1
    assert kernels.first_unsorted(np.array([1, 2, 5], np.int32)) == -1
    assert kernels.first_unsorted(np.array([1, 2, 2], np.int32)) == 2
    assert kernels.first_unsorted(np.array([3, 1], np.int64)) == 1
