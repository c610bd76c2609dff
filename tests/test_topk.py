"""TopK with error feedback: conservation over many steps (with and without QSGD), k = 0,
k >= n, ties, per-bucket mode, no error feedback, checkpoints, and the selection kernels against
the stable-sort references in tests/reference_kernels.py."""

import numpy as np
import pytest

import reference_kernels as ref
from sparcml._errors import CompressionError, UnsupportedDtypeError
from sparcml._quant.qsgd import QSGD
from sparcml._topk.local import TopK, select_topk
from sparcml._vector import SparseVector

DTYPES = [np.float32, np.float64]


def _dense(vec):
    out = np.zeros(vec.dim, np.float64)
    out[vec.indices] = vec.values
    return out


# -- configuration ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, word", [
    ({}, "exactly one"), ({"k": 3, "density": 0.1}, "exactly one"), ({"k": -1}, "k must"),
    ({"k": 2.0}, "k must"), ({"k": True}, "k must"), ({"density": 1.5}, "density"),
    ({"density": -0.1}, "density"), ({"density": "0.1"}, "density"),
    ({"k": 1, "bucket_size": 0}, "bucket_size"), ({"k": 1, "bucket_size": 2.0}, "bucket_size"),
])
def test_bad_configuration(kwargs, word):
    with pytest.raises(CompressionError, match=word):
        TopK(**kwargs)


def test_repr():
    assert repr(TopK(density=0.01, bucket_size=512)) == \
        "TopK(density=0.01, error_feedback=True, bucket_size=512)"


# -- selection --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 17, 1000, 70_001])
def test_global_selection_matches_stable_sort(dtype, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    x[::5] = x[0]  # many ties, both signs
    x[1::7] = -x[0]
    x[2::11] = 0
    x[3::13] = -0.0
    for k in sorted({0, 1, 2, n // 3, n // 2, n - 1, n, n + 5}):
        got = select_topk(x, k)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, ref.topk_select(x, min(k, n)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_pass_selection_is_exact_or_says_it_missed(dtype):
    """The sampled one-pass kernel (vectors of 2**17 values or more) gives the stable-sort
    selection, or MISSED (then select_topk runs the exact kernel): ties, zeros at the
    threshold, a sorted vector, blocks of different scales, NaN and Inf."""
    from sparcml._topk import sampled_kernels as stk
    from sparcml._topk.local import _KEYS

    key_dtype, absmask, inf_key = _KEYS[np.dtype(dtype)]
    rng = np.random.default_rng(5)
    n = 200_003
    cases = {
        "normal": rng.standard_normal(n),
        "ties": rng.integers(-3, 4, n).astype(float),
        "zeros": np.where(rng.random(n) < 0.05, rng.standard_normal(n), 0.0),
        "sorted": np.sort(rng.standard_normal(n)),
        "blocks": np.repeat(10.0 ** rng.integers(-3, 4, n // 1000 + 1), 1000)[:n]
        * rng.standard_normal(n),
    }
    used = 0
    for name, x in cases.items():
        x = x.astype(dtype)
        for k in (1, 7, 2000, n // 30, n // 3, n - 1):
            out = np.empty(k, np.int32)
            rc = stk.topk_select_sampled(x.view(key_dtype), absmask, inf_key, k, out)
            want = ref.topk_select(x, k)
            np.testing.assert_array_equal(select_topk(x, k), want)
            if rc != stk.MISSED:
                assert rc == -1, (name, k, rc)
                np.testing.assert_array_equal(out, want, err_msg=f"{name} k={k}")
                used += 1
        for bad in (np.nan, np.inf, -np.inf):
            y = x.copy()
            y[n // 2] = bad
            for k in (1, 2000, n // 3):
                rc = stk.topk_select_sampled(y.view(key_dtype), absmask, inf_key, k,
                                             np.empty(k, np.int32))
                assert rc in (-2, stk.MISSED), (name, bad, k, rc)
                with pytest.raises(CompressionError):
                    select_topk(y, k)
    assert used >= 20  # the one pass answered most cases itself (the rest: ties and zeros)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, bucket_size, k_full, k_last", [
    (1000, 100, 3, None), (1030, 100, 3, 1), (1030, 100, 100, 30), (99, 100, 5, 2),
    (1024, 512, 0, None), (513, 512, 512, 1), (1030, 100, 40, 7), (1030, 100, 33, 29),
])
def test_bucket_selection_matches_stable_sort(dtype, n, bucket_size, k_full, k_last):
    x = np.random.default_rng(n).integers(-5, 6, n).astype(dtype)  # heavy ties
    got = select_topk(x, k_full, bucket_size, k_last)
    rest = n % bucket_size
    expected = ref.topk_select_buckets(x, bucket_size, min(k_full, bucket_size),
                                       min(k_full if k_last is None else k_last, rest))
    np.testing.assert_array_equal(got, expected)


def test_ties_go_to_the_lower_index():
    x = np.array([1.0, -1.0, 1.0, 1.0, 2.0, -2.0], np.float32)
    vec = TopK(k=3, error_feedback=False).compress(x)
    assert vec.indices.tolist() == [0, 4, 5]
    vec = TopK(k=4, error_feedback=False).compress(x)
    assert vec.indices.tolist() == [0, 1, 4, 5]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("bucket_size", [None, 64])
@pytest.mark.parametrize("k", [0, 10, 1000])
def test_non_finite_is_a_clear_error_and_keeps_the_residual(bad, bucket_size, k):
    tk = TopK(k=k, bucket_size=bucket_size)
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    tk.compress(x)
    before = None if tk.residual is None else tk.residual.copy()
    y = x.copy()
    y[321] = bad
    with pytest.raises(CompressionError, match="position 321"):
        tk.compress(y)
    np.testing.assert_array_equal(tk.residual, before)


# -- error feedback ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("quantizer", [None, QSGD(4, 64, seed=0), QSGD(2, 32, "l2", seed=1)],
                         ids=["plain", "qsgd4", "qsgd2-l2"])
@pytest.mark.parametrize("kwargs", [{"density": 0.01}, {"k": 37}, {"k": 3, "bucket_size": 100}],
                         ids=["density", "k", "bucket"])
def test_sent_plus_residual_equals_inputs(dtype, quantizer, kwargs):
    """sum(inputs) == sum(sent) + residual, elementwise, up to the rounding of the float ops of
    each step: ``g = x + r`` and ``r = g - sent`` each round by at most eps * |result|, so the
    drift is bounded by eps * sum over steps of (|g| + |r_new|)."""
    rng = np.random.default_rng(1)
    n, steps = 2000, 60
    eps = np.finfo(dtype).eps
    tk = TopK(**kwargs)
    total_in = np.zeros(n)
    total_sent = np.zeros(n)
    budget = np.zeros(n)
    for _ in range(steps):
        x = rng.standard_normal(n).astype(dtype)
        before = np.zeros(n) if tk.residual is None else tk.residual.astype(np.float64)
        vec = tk.compress(x, quantizer=quantizer)
        assert isinstance(vec, SparseVector) and vec.dim == n and vec.dtype == dtype
        assert vec.nnz == tk.num_kept(n)
        total_in += x
        total_sent += _dense(vec)
        budget += eps * (np.abs(x + before) + np.abs(tk.residual))
    drift = np.abs(total_sent + tk.residual - total_in)
    assert np.all(drift <= budget + 1e-12)
    assert np.abs(total_sent).sum() > 0


def test_k_zero_sends_nothing_and_keeps_everything():
    tk = TopK(k=0)
    x = np.arange(10, dtype=np.float32)
    for step in range(1, 4):
        vec = tk.compress(x)
        assert vec.nnz == 0 and vec.dim == 10 and vec.indices.dtype == np.int32
        np.testing.assert_array_equal(tk.residual, step * x)
    assert TopK(density=0.0).compress(x).nnz == 0


@pytest.mark.parametrize("k", [10, 11, 1000])
def test_k_at_least_n_sends_everything(k):
    tk = TopK(k=k)
    x = np.random.default_rng(2).standard_normal(10)
    vec = tk.compress(x)
    assert vec.indices.tolist() == list(range(10))
    np.testing.assert_array_equal(vec.values, x)
    assert np.all(tk.residual == 0)
    vec = TopK(density=1.0).compress(x)
    assert vec.nnz == 10


def test_residual_carries_unsent_values_forward():
    tk = TopK(k=1)
    vec = tk.compress(np.array([3.0, 2.0, 0.0], np.float32))
    assert vec.indices.tolist() == [0]
    vec = tk.compress(np.array([0.0, 0.5, 1.0], np.float32))
    assert vec.indices.tolist() == [1] and vec.values.tolist() == [2.5]
    np.testing.assert_array_equal(tk.residual, [0.0, 0.0, 1.0])


def test_quantization_error_goes_into_the_residual():
    q = QSGD(2, 4, seed=3)
    tk = TopK(k=4)
    x = np.array([4.0, 1.0, 3.0, 0.0, 2.0], np.float32)
    vec = tk.compress(x, quantizer=q)
    kept = np.array([4.0, 1.0, 3.0, 2.0], np.float32)
    assert vec.indices.tolist() == [0, 1, 2, 4]
    assert set(vec.values.tolist()) <= {0.0, 4.0}  # 2-bit: 0 or the scale
    np.testing.assert_array_equal(tk.residual[[0, 1, 2, 4]], kept - vec.values)
    # sent values survive a second max-norm quantization on the wire unchanged
    np.testing.assert_array_equal(QSGD(2, 4, seed=9).quantize(vec.values), vec.values)


def test_no_error_feedback_leaves_no_residual():
    tk = TopK(density=0.1, error_feedback=False)
    x = np.random.default_rng(3).standard_normal(100)
    a = tk.compress(x)
    b = tk.compress(x, quantizer=QSGD(8, seed=0))
    assert tk.residual is None
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.indices, ref.topk_select(x, 10))


# -- bucket mode ------------------------------------------------------------------------------

def test_bucket_mode_keeps_k_per_bucket():
    n, bucket_size = 1030, 100
    x = np.random.default_rng(4).standard_normal(n)
    tk = TopK(density=0.05, bucket_size=bucket_size, error_feedback=False)
    vec = tk.compress(x)
    per_bucket = np.bincount(vec.indices // bucket_size, minlength=11)
    assert per_bucket.tolist() == [5] * 10 + [2]  # last bucket: round(0.05 * 30) = 2 (half up)
    assert vec.nnz == tk.num_kept(n) == 52
    # k=K means density K / n in each bucket
    assert TopK(k=103, bucket_size=100).num_kept(n) == 10 * 10 + 3
    # at least one per bucket when the density is positive
    assert TopK(density=1e-6, bucket_size=100).num_kept(n) == 11


def test_density_count_rounds_half_up_and_keeps_one():
    assert TopK(density=0.01).num_kept(5_000_000) == 50_000
    assert TopK(density=0.25).num_kept(10) == 3  # 2.5 -> 3
    assert TopK(density=1e-9).num_kept(10) == 1
    assert TopK(density=0.5).num_kept(0) == 0


# -- state and misuse -------------------------------------------------------------------------

def test_state_dict_resumes_exactly():
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(500).astype(np.float32) for _ in range(6)]
    a = TopK(k=20)
    for x in xs[:3]:
        a.compress(x)
    state = a.state_dict()
    b = TopK(k=20)
    b.load_state_dict(state)
    for x in xs[3:]:
        va, vb = a.compress(x), b.compress(x)
        np.testing.assert_array_equal(va.indices, vb.indices)
        np.testing.assert_array_equal(va.values, vb.values)
    np.testing.assert_array_equal(a.residual, b.residual)
    with pytest.raises(CompressionError, match="saved by a TopK"):
        TopK(k=21).load_state_dict(state)
    fresh = TopK(k=20)
    fresh.load_state_dict(TopK(k=20).state_dict())
    assert fresh.residual is None


def test_shape_and_dtype_changes_need_reset():
    tk = TopK(k=2)
    tk.compress(np.ones(10, np.float32))
    with pytest.raises(CompressionError, match="reset"):
        tk.compress(np.ones(11, np.float32))
    with pytest.raises(CompressionError, match="reset"):
        tk.compress(np.ones(10, np.float64))
    tk.reset()
    assert tk.residual is None
    assert tk.compress(np.ones(11, np.float64)).dim == 11


def test_bad_inputs_and_input_untouched():
    tk = TopK(k=2)
    with pytest.raises(UnsupportedDtypeError):
        tk.compress(np.ones(10, np.int32))
    with pytest.raises(CompressionError, match="1-d"):
        tk.compress(np.ones((2, 5), np.float32))
    x = np.random.default_rng(6).standard_normal(50)
    copy = x.copy()
    for _ in range(3):
        tk.compress(x, quantizer=QSGD(4, seed=0))
    np.testing.assert_array_equal(x, copy)
    # non-contiguous input is fine
    vec = TopK(k=3, error_feedback=False).compress(x[::2])
    np.testing.assert_array_equal(vec.indices, ref.topk_select(x[::2], 3))


def test_select_topk_is_public_and_checks_its_arguments():
    import sparcml

    x = np.array([0.5, -3.0, 1.0, 2.0], np.float32)
    assert sparcml.select_topk(x, 2).tolist() == [1, 3]
    assert sparcml.select_topk(x.astype(np.float64)[::-1], 1).tolist() == [2]  # not contiguous
    assert sparcml.select_topk(x, 1, bucket_size=2).tolist() == [1, 3]
    with pytest.raises(sparcml.UnsupportedDtypeError, match="float32 or float64"):
        sparcml.select_topk(x.astype(np.float16), 1)
    with pytest.raises(sparcml.InvalidArgumentError, match="1-d"):
        sparcml.select_topk(x.reshape(2, 2), 1)
    for bad in ({"k": -1}, {"k": 1.5}, {"k": True}, {"k": 1, "bucket_size": 0},
                {"k": 1, "bucket_size": 2, "k_last": -2}):
        with pytest.raises(sparcml.InvalidArgumentError):
            sparcml.select_topk(x, **bad)
    with pytest.raises(sparcml.CompressionError):
        sparcml.select_topk(np.array([1.0, np.nan], np.float32), 1)
