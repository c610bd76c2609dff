"""Fuzzing (Hypothesis, bounded): any byte string into ``wire.decode`` is a clear error or a
part that lies inside the buffer; SparseVector construction validates or raises its own
errors."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparcml
from sparcml.qsgd import QSGD
from sparcml.wire import HEADER_SIZE, Codec, Part, decode

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _valid_message(draw_bytes, dense, quantized, n):
    codec = Codec(np.int32, np.float32, QSGD(4, bucket_size=8, seed=0) if quantized else None,
                  quantize_sparse=quantized)
    if dense:
        return codec.encode_dense(np.linspace(-1, 1, n).astype(np.float32), 3)
    idx = np.arange(0, 2 * n, 2, dtype=np.int32)
    buf, _ = codec.encode(Part(0, 4 * n + 1000, idx, np.ones(n, np.float32)))
    return buf


def _assert_part_inside(part, buf, check):
    assert part.values.shape[0] == part.nnz
    if part.indices is not None:
        assert part.indices.shape[0] == part.values.shape[0]
        assert np.shares_memory(part.indices, buf) or part.indices.size == 0
        if check and part.indices.size:
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
       st.integers(0, 400), st.booleans())
def test_mutated_messages_decode_or_raise(dense, quantized, n, flips, cut, check):
    buf = _valid_message(None, dense, quantized, n).copy()
    for pos, byte in flips:
        if pos < buf.shape[0]:
            buf[pos] = byte
    if cut < buf.shape[0] and cut % 3 == 0:
        buf = buf[:max(cut, 0)].copy()
    _decodes_inside_or_raises(buf, check)


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
    assert HEADER_SIZE == 40
