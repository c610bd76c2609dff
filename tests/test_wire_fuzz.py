"""Fuzzing (Hypothesis, bounded): any byte string into ``wire.decode`` is a clear error or a
part that lies inside the buffer; SparseVector construction validates or raises its own
errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparcml
from sparcml._wire import index_kernels
from sparcml._options import CallOptions
from sparcml._quant.qsgd import QSGD
from sparcml._wire.codec import (BITMAP, ELIAS_FANO, HEADER_SIZE, RAW, SHORT_HEADER_SIZE, Codec, Part,
                         decode, read_header)

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _valid_message(dense, quantized, n, coding="raw"):
    """A valid message; sparse ones with their indices ``raw``, Elias-Fano (``gaps``: spread
    over a wide range) or in a ``bitmap`` (a dense stretch; its values not quantized, since a
    quantized sparse message goes dense before a bitmap is its smallest code)."""
    quantized = quantized and (dense or coding != "bitmap")
    codec = Codec(np.int32, np.float32, QSGD(4, bucket_size=8, seed=0) if quantized else None,
                  quantize_sparse=quantized, options=CallOptions(code_indices=coding != "raw"))
    if dense:
        return codec.encode_dense(np.linspace(-1, 1, n).astype(np.float32), 3)
    if coding == "bitmap":  # density 1/3: a bitmap takes at most the bytes of Elias-Fano
        n += 15
        step, length = 1, 3 * n
    else:
        step, length = 2, 4 * n + 1000
    idx = np.arange(5, 5 + step * n, step, dtype=np.int32)
    buf, went_dense = codec.encode(Part(0, length, idx, np.ones(n, np.float32)))
    assert not went_dense and read_header(buf).index_code == \
        {"raw": RAW, "gaps": ELIAS_FANO, "bitmap": BITMAP}[coding]
    return buf


def _assert_part_inside(part, buf, check):
    assert part.values.shape[0] == part.nnz
    if part.indices is not None:
        assert part.indices.shape[0] == part.values.shape[0]
        coded = read_header(buf).index_code != RAW
        # raw indices are a view of the buffer; coded ones are decoded, and checked, always
        assert coded or np.shares_memory(part.indices, buf) or part.indices.size == 0
        if (check or coded) and part.indices.size:
            assert np.all(np.diff(part.indices.astype(np.int64)) > 0)
            assert part.offset <= part.indices[0] and part.indices[-1] < part.offset + part.length


def _decodes_inside_or_raises(buf, check):
    """``decode`` raises a SparcmlError, or returns a part whose arrays lie in ``buf``."""
    try:
        part = decode(buf, check=check)
    except sparcml.SparcmlError:
        return
    _assert_part_inside(part, buf, check)


@SETTINGS
@given(st.binary(max_size=200), st.booleans())
def test_random_bytes_decode_or_raise(data, check):
    _decodes_inside_or_raises(np.frombuffer(data, np.uint8).copy(), check)


@SETTINGS
@given(st.booleans(), st.booleans(), st.integers(1, 40),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, 400), st.booleans(), st.sampled_from(["raw", "gaps", "bitmap"]))
def test_mutated_messages_decode_or_raise(dense, quantized, n, flips, cut, check, coding):
    buf = _valid_message(dense, quantized, n, coding).copy()
    for pos, byte in flips:
        if pos < buf.shape[0]:
            buf[pos] = byte
    if cut < buf.shape[0] and cut % 3 == 0:
        buf = buf[:max(cut, 0)].copy()
    _decodes_inside_or_raises(buf, check)


@SETTINGS
@given(st.integers(1, 5000), st.data(), st.sampled_from([np.int32, np.int64]),
       st.booleans())
def test_coded_indices_round_trip(length, data, index_dtype, quantized):
    """Every support survives the wire bit for bit, in whichever code is the smallest."""
    idx = np.array(sorted(data.draw(st.sets(st.integers(0, length - 1), max_size=300))),
                   index_dtype)
    offset = data.draw(st.integers(0, 2**20))
    vals = np.arange(1, idx.size + 1, dtype=np.float32)
    codec = Codec(index_dtype, np.float32, QSGD(8, bucket_size=8, seed=0) if quantized else None,
                  quantize_sparse=quantized)
    buf, dense = codec.encode(Part(offset, length, idx + offset, vals))
    if dense:
        return
    part = decode(buf)
    assert part.indices.dtype == index_dtype and np.array_equal(part.indices, idx + offset)
    raw, _ = Codec(index_dtype, np.float32, options=CallOptions(code_indices=False)).encode(
        Part(offset, length, idx + offset, vals))
    assert buf.nbytes <= raw.nbytes or quantized


def test_each_code_rejects_a_corrupt_support():
    """A bitmap or Elias-Fano section whose set bits do not give ``count`` increasing indices
    in range raises a SparcmlError naming the problem, with or without ``check``."""
    n = 20
    for coding, end, bit, problem in (("gaps", None, 7, "not 20 indices"),
                                      ("bitmap", 13, 0, "not 35 indices"),
                                      ("bitmap", 14, 7, "an index outside the message's range")):
        buf = _valid_message(False, False, n, coding).copy()
        if end is None:  # the high part ends where the values start (padding aside)
            low, high = index_kernels.ef_nbytes(n, 4 * n + 1000)
            end = low + high
        buf[read_header(buf).size + end - 1] |= 1 << bit  # a bit past every real one
        for check in (False, True):
            with pytest.raises(sparcml.SparcmlError, match=f"corrupt message: {problem}"):
                decode(buf, check=check)


@SETTINGS
@given(st.integers(-5, 2**64), st.lists(st.integers(-2**63, 2**64 - 1), max_size=8),
       st.sampled_from(["<i4", ">i4", "<i8", ">i8", "<u8", "i2", "f8"]),
       st.sampled_from(["<f4", ">f4", "<f8", "f2", "i4"]))
def test_sparse_vector_construction_validates(dim, raw, idx_dtype, val_dtype):
    try:
        with np.errstate(invalid="ignore"):
            idx = np.array(raw).astype(idx_dtype)
    except (OverflowError, ValueError):
        return
    vals = np.ones(len(raw)).astype(val_dtype)
    try:
        v = sparcml.SparseVector(dim, idx, vals)
    except sparcml.SparcmlError:
        return
    assert 0 <= dim < 2**63
    ii = v.indices.astype(np.int64)
    assert np.all(np.diff(ii) > 0) and (ii.size == 0 or (ii[0] >= 0 and ii[-1] < dim))
    assert v.values.dtype.isnative and v.indices.dtype.isnative


def test_header_size_is_the_layout():
    assert HEADER_SIZE == 40 and SHORT_HEADER_SIZE == 16


@pytest.mark.parametrize("offset,length", [(0, 100), (2**32 - 101, 100), (2**32 - 100, 100),
                                           (2**40, 100), (0, 2**32)])
@pytest.mark.parametrize("quantized", [False, True])
def test_short_header_where_every_field_fits(offset, length, quantized):
    """Lossless messages whose count, length and offset fit in 32 bits carry the 16-byte
    header, the others the 40-byte one; both decode to the same part, dense or sparse."""
    idx = np.array([offset + 3, offset + 50], np.int64)
    vals = np.array([1.5, -2.0], np.float32)
    codec = Codec(np.int64, np.float32, QSGD(8, bucket_size=8, seed=0) if quantized else None,
                  quantize_sparse=quantized)
    short = not quantized and offset + length <= 2**32 and length < 2**32
    want = SHORT_HEADER_SIZE if short else HEADER_SIZE
    buf, dense = codec.encode(Part(offset, length, idx, vals))
    assert not dense and read_header(buf).size == want
    part = decode(buf)
    assert np.array_equal(part.indices, idx) and part.offset == offset
    np.testing.assert_allclose(part.values, vals, rtol=0.02)
    block = np.arange(100, dtype=np.float32)
    buf = codec.encode_dense(block, offset)
    fits = not quantized and offset < 2**32
    assert read_header(buf).size == (SHORT_HEADER_SIZE if fits else HEADER_SIZE)
    assert buf.nbytes == codec.dense_nbytes(100, offset)
    part = decode(buf)
    assert part.is_dense and part.offset == offset
    np.testing.assert_allclose(part.values, block, atol=1.0)


def test_a_short_header_with_unknown_flags_is_corrupt():
    buf, _ = Codec(np.int32, np.float32).encode(Part(0, 1000, np.array([5], np.int32),
                                                      np.ones(1, np.float32)))
    assert read_header(buf).size == SHORT_HEADER_SIZE
    for flip in (1 << 6, 1 << 7):
        bad = buf.copy()
        bad[2] |= flip
        with pytest.raises(sparcml.SparcmlError, match="unknown header flags"):
            decode(bad)
    flagged = buf.copy()  # bit 3: a persistent plan's error flag, read and otherwise ignored
    flagged[2] |= 1 << 3
    assert read_header(flagged).error and not read_header(buf).error
    assert decode(flagged).indices.tolist() == [5]
    with pytest.raises(sparcml.SparcmlError, match="shorter than the header"):
        decode(buf[:10].copy())
