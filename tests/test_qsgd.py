"""QSGD: sizes, exact levels, unbiasedness and variance (statistical, seeded), edge cases, and the
Numba kernels against the NumPy references in tests/reference_kernels.py."""

import math

import numpy as np
import pytest

import reference_kernels as ref
from mpi4py import MPI

import sparcml
from sparcml._quant import kernels as quant_kernels
from sparcml._errors import CompressionError, QuantizationError, SparcmlError, UnsupportedDtypeError
from sparcml._quant.qsgd import QSGD

BITS = [2, 4, 8]
DTYPES = [np.float32, np.float64]
SNAP = {np.float32: 2.0**-22, np.float64: 2.0**-49}


def _levels(bits):
    return 2 ** (bits - 1) - 1


# -- configuration ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, word", [
    ({"bits": 3}, "bits"), ({"bits": True}, "bits"), ({"bits": "4"}, "bits"),
    ({"norm": "l1"}, "norm"), ({"bucket_size": 0}, "bucket_size"),
    ({"bucket_size": 2.5}, "bucket_size"), ({"bucket_size": 2**29}, "bucket_size"),
    ({"seed": -1}, "seed"), ({"seed": "abc"}, "seed"),
])
def test_bad_configuration_names_the_value(kwargs, word):
    with pytest.raises(CompressionError, match=word) as info:
        QSGD(**kwargs)
    assert isinstance(info.value, SparcmlError) and isinstance(info.value, ValueError)
    assert repr(next(iter(kwargs.values()))) in str(info.value) or \
        str(next(iter(kwargs.values()))) in str(info.value)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("norm", ["max", "l2"])
@pytest.mark.parametrize("bucket_size", [1, 512, 1024, 2**28 - 1])
def test_code_names_the_configuration(bits, norm, bucket_size):
    q = QSGD(bits, bucket_size, norm)
    assert 0 <= q.code < 2**31
    back = QSGD.from_code(q.code)
    assert (back.bits, back.bucket_size, back.norm) == (bits, bucket_size, norm)
    assert repr(q) == f"QSGD(bits={bits}, bucket_size={bucket_size}, norm={norm!r}, seed=None)"


def test_codes_differ_and_bad_codes_are_rejected():
    codes = {QSGD(b, bs, nm).code for b in BITS for bs in (64, 1024) for nm in ("max", "l2")}
    assert len(codes) == 12
    for bad in (3, 0, -1, (1024 << 3) | 3):
        with pytest.raises(CompressionError):
            QSGD.from_code(bad)


# -- sizes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits, n, bucket_size, expected", [
    (2, 1000, 1024, 4 + 250), (4, 1000, 1024, 4 + 500), (8, 1000, 1024, 4 + 1000),
    (2, 1001, 1024, 4 + 251), (4, 1001, 1024, 4 + 501), (2, 4096, 1024, 16 + 1024),
    (4, 4097, 1024, 20 + 2049), (8, 4097, 1024, 20 + 4097), (2, 0, 1024, 0), (8, 1, 1, 5),
    (4, 2**20, 1024, 4096 + 2**19),
])
def test_encoded_nbytes_is_exact(bits, n, bucket_size, expected):
    q = QSGD(bits, bucket_size, seed=0)
    assert q.encoded_nbytes(n) == expected
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    buf = q.encode(x)
    assert buf.dtype == np.uint8 and buf.shape == (expected,)
    assert q.decode(buf, n).shape == (n,)


def test_bytes_shrink_by_bits():
    n = 1 << 20
    sizes = [QSGD(b).encoded_nbytes(n) for b in BITS]
    assert [n * 4 / s for s in sizes] == pytest.approx([16 / (1 + 16 / 1024), 8 / (1 + 8 / 1024),
                                                       4 / (1 + 4 / 1024)])


# -- exactness --------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", ["max", "l2"])
def test_exact_levels_round_trip_exactly(bits, dtype, norm):
    """Values ``scale * l / s`` (as the decoder computes them) decode to themselves, any seed."""
    s, bucket_size = _levels(bits), 256
    rng = np.random.default_rng(bits)
    nb = 5
    scales = rng.uniform(0.01, 100.0, nb).astype(np.float32)
    levels = rng.integers(-s, s + 1, nb * bucket_size)
    levels[::bucket_size] = s  # the bucket max is its scale
    x = (np.repeat(scales.astype(np.float64), bucket_size) * levels / s).astype(dtype)
    if norm == "l2":  # make the scale the L2 norm: one big value, the rest exactly zero levels
        levels[:] = 0
        levels[::bucket_size] = s
        x = (np.repeat(scales.astype(np.float64), bucket_size) * levels / s).astype(dtype)
    for seed in range(4):
        q = QSGD(bits, bucket_size, norm, seed=seed)
        np.testing.assert_array_equal(q.quantize(x), x)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_quantized_values_requantize_to_themselves(bits, dtype):
    """Max norm: quantize is idempotent, so a second quantization on the wire changes nothing."""
    x = np.random.default_rng(1).standard_normal(5000).astype(dtype)
    once = QSGD(bits, 1000, seed=0).quantize(x)
    for seed in (1, 2):
        np.testing.assert_array_equal(QSGD(bits, 1000, seed=seed).quantize(once), once)


def test_two_bit_values_are_scale_zero_or_minus_scale():
    x = np.random.default_rng(2).standard_normal(3000).astype(np.float32)
    y = QSGD(2, 1000, seed=0).quantize(x)
    for b in range(3):
        scale = np.abs(x[b * 1000:(b + 1) * 1000]).max()
        assert set(np.unique(np.abs(y[b * 1000:(b + 1) * 1000]))) <= {0.0, scale}


# -- statistics -------------------------------------------------------------------------------

def _repeated(q, x, trials):
    """``trials`` independent quantizations of x (len(x) a multiple of bucket_size), in one call
    of the encoder: the tiled vector has identical buckets and fresh uniforms for each copy."""
    return q.quantize(np.tile(x, trials)).reshape(trials, x.size).astype(np.float64)


def _exact_moments(x, bits, bucket_size, norm):
    """Per-value scale/s and variance (scale/s)**2 f (1-f) of the rounding, from float64 math."""
    s = _levels(bits)
    b = np.abs(x.astype(np.float64)).reshape(-1, bucket_size)
    scale = np.sqrt((b * b).sum(1)) if norm == "l2" else b.max(1)
    scale32 = scale.astype(np.float32)  # rounded *up* to float32, as the encoder does
    scale32 = np.where(scale32 < scale, np.nextafter(scale32, np.float32(np.inf)), scale32)
    scale = np.repeat(scale32.astype(np.float64), bucket_size)
    r = np.abs(x) / scale * s
    f = r - np.floor(r)
    return scale / s, (scale / s) ** 2 * f * (1 - f)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("norm", ["max", "l2"])
def test_mean_of_quantizations_converges_unbiased(bits, norm):
    """For each value the mean of T quantizations has standard error sigma_i / sqrt(T) with the
    exact sigma_i**2 = (scale/s)**2 f (1-f). We require every |z_i| <= 6 (P(any of 512 fails)
    < 1e-6 under the CLT) and sum z_i**2 within chi2(n) mean + 6 sd; values with sigma_i = 0
    (exact levels) must come back exactly. Seeded, hence deterministic."""
    bucket_size, trials = 128, 4000
    x = np.random.default_rng(3).standard_normal(512)
    q = QSGD(bits, bucket_size, norm, seed=42)
    samples = _repeated(q, x, trials)
    _, var = _exact_moments(x, bits, bucket_size, norm)
    mean = samples.mean(0)
    exact = var == 0
    np.testing.assert_array_equal(mean[exact], x[exact])
    z = (mean - x)[~exact] / np.sqrt(var[~exact] / trials)
    assert np.abs(z).max() <= 6.0
    m = z.size
    assert (z * z).sum() <= m + 6 * math.sqrt(2 * m)


@pytest.mark.parametrize("bits", BITS)
def test_variance_within_bound_max_norm(bits):
    """Per value: the empirical variance never exceeds (scale/s)**2 / 4 (the two-point bound),
    and the total empirical variance matches the exact sum of (scale/s)**2 f (1-f) within 5%
    (its relative standard error here is below 1%)."""
    bucket_size, trials = 256, 3000
    x = np.random.default_rng(4).standard_normal(1024)
    samples = _repeated(QSGD(bits, bucket_size, seed=7), x, trials)
    step, var = _exact_moments(x, bits, bucket_size, "max")
    emp = samples.var(0)
    assert np.all(emp <= step**2 / 4 * (1 + 1e-9))
    assert emp.sum() == pytest.approx(var.sum(), rel=0.05)


@pytest.mark.parametrize("bits", BITS)
def test_variance_within_paper_bound_l2(bits):
    """QSGD paper (Lemma 3.1), L2 norm, bucket of d values:
    E||Q(v) - v||**2 <= min(d / s**2, sqrt(d) / s) ||v||**2; checked per bucket, empirically."""
    bucket_size, trials, s = 256, 2000, _levels(bits)
    x = np.random.default_rng(5).standard_normal(1024)
    samples = _repeated(QSGD(bits, bucket_size, "l2", seed=8), x, trials)
    sq_err = ((samples - x) ** 2).reshape(trials, -1, bucket_size).sum(2).mean(0)
    norms2 = (x.reshape(-1, bucket_size) ** 2).sum(1)
    bound = min(bucket_size / s**2, math.sqrt(bucket_size) / s) * norms2
    assert np.all(sq_err <= bound)


# -- edge cases -------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", BITS)
def test_all_zero_bucket_has_scale_zero_and_decodes_to_zero(bits):
    q = QSGD(bits, 100, seed=0)
    x = np.random.default_rng(6).standard_normal(300).astype(np.float32)
    x[100:200] = 0
    buf = q.encode(x)
    assert buf[4:8].view("<f4")[0] == 0
    y = q.decode(buf, 300)
    assert np.all(y[100:200] == 0) and not np.any(np.signbit(y[100:200]))
    assert np.all(q.quantize(np.zeros(1000, np.float32)) == 0)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("n", [1, 7, 100, 1023, 1024, 1025, 2049])
@pytest.mark.parametrize("norm", ["max", "l2"])
def test_single_and_partial_buckets_match_reference(bits, n, norm):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    q = QSGD(bits, 1024, norm)
    buf = q.encode(x, seed=123)
    scales, codes = ref.qsgd_encode(x, 1024, bits, norm == "l2", 123, SNAP[np.float32])
    nb = scales.size
    np.testing.assert_array_equal(buf[:4 * nb].view("<f4"), scales)
    np.testing.assert_array_equal(buf[4 * nb:], codes)
    np.testing.assert_array_equal(q.decode(buf, n),
                                  ref.qsgd_decode(scales, codes, n, 1024, bits, np.float32))


def test_empty_vector():
    q = QSGD(4, seed=0)
    buf = q.encode(np.empty(0, np.float32))
    assert buf.shape == (0,)
    assert q.decode(buf, 0).shape == (0,)
    assert q.quantize(np.empty(0)).dtype == np.float64


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_input_is_a_clear_error(bad, dtype):
    x = np.ones(3000, dtype)
    x[2500] = bad
    with pytest.raises(QuantizationError, match=r"non-finite value .* at position 2500"):
        QSGD(4).encode(x)


def test_values_beyond_float32_range_are_rejected():
    x = np.ones(2000)
    x[1500] = 1e39
    with pytest.raises(QuantizationError, match="bucket 1 .* float32"):
        QSGD(8).encode(x)


def test_bad_inputs():
    q = QSGD(4, 16)
    with pytest.raises(UnsupportedDtypeError):
        q.encode(np.ones(10, np.float16))
    with pytest.raises(UnsupportedDtypeError):
        q.encode(np.ones(10, np.int64))
    with pytest.raises(CompressionError, match="1-d"):
        q.encode(np.ones((2, 5), np.float32))
    buf = q.encode(np.ones(100, np.float32))
    with pytest.raises(QuantizationError, match=f"expected {buf.size} bytes"):
        q.decode(buf[:-1], 100)
    with pytest.raises(QuantizationError, match="out must be"):
        q.encode(np.ones(100, np.float32), out=np.empty(buf.size + 1, np.uint8))
    with pytest.raises(QuantizationError, match="out must be"):
        q.decode(buf, 100, out=np.empty(99, np.float32))
    with pytest.raises(UnsupportedDtypeError):
        q.decode(buf, 100, dtype=np.int32)
    corrupt = buf.copy()
    corrupt[:4] = np.array([-1.0], "<f4").view(np.uint8)
    with pytest.raises(QuantizationError, match="corrupt"):
        q.decode(corrupt, 100)


def test_out_variants_and_bytes_input():
    q = QSGD(8, 64, seed=0)
    x = np.random.default_rng(9).standard_normal(1000).astype(np.float32)
    out = np.empty(q.encoded_nbytes(1000), np.uint8)
    assert q.encode(x, out=out) is out
    dec = np.empty(1000, np.float64)
    assert q.decode(out, 1000, out=dec) is dec
    np.testing.assert_array_equal(q.decode(bytes(out), 1000), dec.astype(np.float32))
    # an unaligned slice of a larger wire buffer decodes the same
    wire = np.zeros(out.size + 3, np.uint8)
    wire[3:] = out
    np.testing.assert_array_equal(q.decode(wire[3:], 1000), dec.astype(np.float32))
    # straight into a slice of a larger array (no copy): the slice itself is returned
    dense = np.full(1010, 7.0, np.float32)
    assert q.decode(wire[3:], 1000, out=dense[5:1005]).base is dense
    np.testing.assert_array_equal(dense[5:1005], dec.astype(np.float32))
    assert np.all(dense[:5] == 7) and np.all(dense[1005:] == 7)


# -- determinism ------------------------------------------------------------------------------

def test_same_seed_same_encodings():
    x = np.random.default_rng(10).standard_normal(5000).astype(np.float32)
    a, b = QSGD(4, seed=5), QSGD(4, seed=5)
    for _ in range(3):
        np.testing.assert_array_equal(a.encode(x), b.encode(x))
    assert not np.array_equal(a.encode(x), a.encode(x))  # fresh uniforms each call
    assert not np.array_equal(QSGD(4, seed=6).encode(x), QSGD(4, seed=5).encode(x))
    np.testing.assert_array_equal(a.encode(x, seed=99), b.encode(x, seed=99))


def test_state_dict_resumes_the_sequence():
    x = np.random.default_rng(11).standard_normal(3000)
    a = QSGD(2, seed=1)
    a.encode(x)
    state = a.state_dict()
    expected = [a.encode(x) for _ in range(2)]
    b = QSGD(2, seed=None)
    b.load_state_dict(state)
    for e in expected:
        np.testing.assert_array_equal(b.encode(x), e)
    with pytest.raises(CompressionError, match="code"):
        QSGD(4).load_state_dict(state)


@pytest.mark.parametrize("dtype", DTYPES)
def test_quantize_keeps_dtype(dtype):
    x = np.random.default_rng(12).standard_normal(2000).astype(dtype)
    y = QSGD(8, seed=0).quantize(x)
    assert y.dtype == dtype
    assert np.abs(y - x).max() <= np.abs(x).max() / 127 * (1 + 1e-6)


# -- kernels against references ---------------------------------------------------------------

def test_counter_uniforms_match_reference_and_look_uniform():
    for seed in (0, 1, 2**64 - 1):
        np.testing.assert_array_equal(quant_kernels.counter_uniforms(np.uint64(seed), 1000),
                                      ref.counter_uniforms(seed, 1000))
    u = quant_kernels.counter_uniforms(np.uint64(3), 100_000)
    assert u.min() >= 0 and u.max() < 1
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    expected = u.size / 20
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 19 + 6 * math.sqrt(38)  # chi2(19): mean 19, sd sqrt(38)


@pytest.mark.parametrize("bits", BITS)
def test_pack_unpack_against_reference(bits):
    rng = np.random.default_rng(bits)
    for n in (0, 1, 3, 8, 33):
        codes = rng.integers(0, 2**bits, n).astype(np.uint8)
        packed = ref.pack_codes(codes, bits)
        assert packed.size == -(-n * bits // 8)
        np.testing.assert_array_equal(ref.unpack_codes(packed, n, bits), codes)
        # the kernel decodes codes with scale = s into the levels themselves
        s = _levels(bits)
        out = np.empty(n, np.float64)
        quant_kernels.qsgd_decode(np.full(n, s, np.float32), packed, n, 1, bits, out)
        signed = np.where(codes >> (bits - 1) == 1, -1.0, 1.0) * (codes & s)
        np.testing.assert_array_equal(out, signed)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("use_l2", [False, True])
@pytest.mark.parametrize("bucket_size", [1, 5, 64])
def test_encode_decode_kernels_against_reference(bits, dtype, use_l2, bucket_size):
    rng = np.random.default_rng(bits * 100 + bucket_size)
    n = 301
    x = (rng.standard_normal(n) * rng.choice([1e-30, 1e-3, 1.0, 1e20], n)).astype(dtype)
    x[::17] = 0
    x[5::19] = -0.0
    x[7:20] = x[7]  # ties and exact maxima
    nb = -(-n // bucket_size)
    scales = np.empty(nb, np.float32)
    codes = np.empty(-(-n * bits // 8), np.uint8)
    rc = quant_kernels.qsgd_encode(x, bucket_size, bits, use_l2, np.uint64(77), SNAP[dtype],
                                   scales, codes)
    assert rc == -1
    r_scales, r_codes = ref.qsgd_encode(x, bucket_size, bits, use_l2, 77, SNAP[dtype])
    np.testing.assert_array_equal(scales, r_scales)
    np.testing.assert_array_equal(codes, r_codes)
    out = np.empty(n, dtype)
    quant_kernels.qsgd_decode(scales, codes, n, bucket_size, bits, out)
    np.testing.assert_array_equal(out, ref.qsgd_decode(r_scales, r_codes, n, bucket_size, bits,
                                                       dtype))


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bucket_size, n", [(1000, 3 * 4096 + 13), (5001, 2 * 4096 + 5000),
                                            (3, 4096 + 7), (4096, 8192)])
def test_kernels_against_reference_across_chunks(bits, dtype, bucket_size, n):
    """Many chunks of the encoder (4096 values), buckets straddling them and bytes, and buckets
    of tiny (subnormal) values whose s / scale would overflow without the exact rescaling."""
    rng = np.random.default_rng(bits + bucket_size)
    x = rng.standard_normal(n).astype(dtype)
    x[bucket_size:2 * bucket_size] *= dtype(1e-44 if dtype == np.float32 else 1e-40)
    for use_l2 in (False, True):
        nb = -(-n // bucket_size)
        scales = np.empty(nb, np.float32)
        codes = np.empty(-(-n * bits // 8), np.uint8)
        assert quant_kernels.qsgd_encode(x, bucket_size, bits, use_l2, np.uint64(2**63 + 5),
                                         SNAP[dtype], scales, codes) == -1
        r_scales, r_codes = ref.qsgd_encode(x, bucket_size, bits, use_l2, 2**63 + 5, SNAP[dtype])
        np.testing.assert_array_equal(scales, r_scales)
        np.testing.assert_array_equal(codes, r_codes)
        out = np.empty(n, dtype)
        quant_kernels.qsgd_decode(scales, codes, n, bucket_size, bits, out)
        np.testing.assert_array_equal(out, ref.qsgd_decode(r_scales, r_codes, n, bucket_size,
                                                           bits, dtype))
    # the tiny bucket keeps nonzero levels
    assert np.count_nonzero(ref.unpack_codes(codes, n, bits)[bucket_size:2 * bucket_size])


# -- the streaming decode (large float32 outputs) ----------------------------------------------

@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("bucket_size", [1, 3, 7, 1024])
def test_streaming_decode_kernel_against_reference(bits, bucket_size):
    """Every start parity of a bucket and of ``out`` (4-byte but not 8-byte aligned), ends that do
    not fill a word, and nothing written outside ``out``."""
    rng = np.random.default_rng(bits * 10 + bucket_size)
    for n in (0, 1, 2, 3, 5, 1001, 4099):
        x = rng.standard_normal(n).astype(np.float32)
        x[::13] = 0
        q = QSGD(bits=bits, bucket_size=bucket_size, seed=5)
        buf = q.encode(x)
        nb = q.num_buckets(n)
        scales, codes = buf[:4 * nb].view("<f4"), buf[4 * nb:]
        expect = ref.qsgd_decode(scales, codes, n, bucket_size, bits, np.float32)
        for shift in (0, 1):
            guarded = np.full(n + 2, 7.0, np.float32)
            out = guarded[shift:shift + n]
            assert quant_kernels.qsgd_decode_streaming(scales, codes, n, bucket_size, bits,
                                                       out) is out
            np.testing.assert_array_equal(out, expect)
            assert guarded[shift + n] == 7.0 and (shift == 0 or guarded[0] == 7.0)


@pytest.mark.parametrize("bits", BITS)
def test_public_decode_of_a_large_output_streams_the_same_values(bits, monkeypatch):
    """QSGD.decode(streaming=True) takes the streaming kernel from STREAMING_DECODE_BYTES on
    (float32, aligned); the values are those of the ordinary kernel either way."""
    import sparcml._quant.qsgd as qsgd_module

    n = qsgd_module.STREAMING_DECODE_BYTES // 4 + 3
    x = np.random.default_rng(bits).standard_normal(n).astype(np.float32)
    q = QSGD(bits=bits, seed=9)
    buf = q.encode(x)
    calls = []
    streaming = quant_kernels.qsgd_decode_streaming
    # the kernels as QSGD reads them (its stand-in for the kernel module, sparcml._lazy)
    monkeypatch.setattr(qsgd_module.quant_kernels, "qsgd_decode_streaming",
                        lambda *a: calls.append(1) or streaming(*a))
    big = np.empty(n + 1, np.float32)
    assert q.decode(buf, n, out=big[1:]) is not None and calls == []  # not asked to stream
    got = q.decode(buf, n, out=big[1:], streaming=True)  # 4-byte aligned, not 8
    assert calls == [1]
    nb = q.num_buckets(n)
    plain = quant_kernels.qsgd_decode(buf[:4 * nb].view("<f4"), buf[4 * nb:], n, q.bucket_size,
                                      bits, np.empty(n, np.float32))
    np.testing.assert_array_equal(got, plain)
    # float64 and small outputs take the ordinary kernel
    q.decode(buf, n, dtype=np.float64, streaming=True)
    q.decode(q.encode(x[:1000]), 1000, streaming=True)
    assert calls == [1]


_ONE_RANK_CALLS = {
    "allreduce": lambda v, q, c: sparcml.allreduce(v, c, quantizer=q),
    "iallreduce": lambda v, q, c: sparcml.iallreduce(v, c, quantizer=q).wait(),
    "allgather": lambda v, q, c: sparcml.allgather(v, c, quantizer=q),
    "reduce_scatter": lambda v, q, c: sparcml.reduce_scatter(v, c, quantizer=q,
                                                             quantize_sparse=True),
    "bcast": lambda v, q, c: sparcml.bcast(v, 0, c, quantizer=q),
    "plan": lambda v, q, c: sparcml.plan(100, np.float32, c, quantizer=q).allreduce(v),
}


@pytest.mark.parametrize("call", sorted(_ONE_RANK_CALLS))
def test_one_rank_refuses_what_qsgd_cannot_encode(call):
    """At P = 1 nothing travels, but a value QSGD cannot encode raises as it does at P > 1
    (tests/mpi_cases/one_bad_rank.py), so a program tried on one rank fails the same way on
    many; the next call is unaffected."""
    q = QSGD(4, seed=3)
    bad = sparcml.SparseVector(100, np.array([1, 5]), np.array([1.0, np.nan], np.float32))
    with pytest.raises(QuantizationError, match="non-finite"):
        _ONE_RANK_CALLS[call](bad, q, MPI.COMM_SELF)
    good = sparcml.SparseVector(100, np.array([1, 5]), np.ones(2, np.float32))
    _ONE_RANK_CALLS[call](good, q, MPI.COMM_SELF)
