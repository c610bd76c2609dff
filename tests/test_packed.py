"""Packed messages (sparcml._wire.packed, arith.fold_packed / assemble_packed): bitwise the
per-message functions they replace, on random inputs, and the per-message path for what the
kernels do not read (quantized or corrupt messages)."""

import numpy as np
import pytest

from sparcml import QSGD
from sparcml._collectives import arith
from sparcml._collectives.exchange import block_bounds, split_parts
from sparcml._errors import SparcmlError
from sparcml._options import CallOptions
from sparcml._runtime.workspace import Workspace
from sparcml._vector import SparseVector
from sparcml._wire import packed_kernels as pk
from sparcml._wire.codec import Codec, Part, decode
from sparcml._wire.packed import Packed, encode_split, scan

DTYPES = [(np.int32, np.float32), (np.int64, np.float64), (np.int32, np.float64),
          (np.int64, np.float32)]


def _bytes_equal(a, b):
    assert (a.indices is None) == (b.indices is None)
    if a.indices is not None:
        assert a.indices.dtype == b.indices.dtype
        assert a.indices.tobytes() == b.indices.tobytes()
    assert a.values.dtype == b.values.dtype
    assert a.values.tobytes() == b.values.tobytes()


def _packed(bufs):
    sizes = np.array([b.nbytes for b in bufs], np.int64)
    displs = np.zeros_like(sizes)
    np.cumsum(sizes[:-1], out=displs[1:])
    buf = np.concatenate(bufs) if bufs else np.empty(0, np.uint8)
    return buf, displs, sizes


def _values(rng, k, dtype):
    val = rng.standard_normal(k).astype(dtype)
    val[rng.random(k) < 0.05] = -0.0  # a dense message scatters onto zeros: 0.0 there
    val[rng.random(k) < 0.02] = 0.0
    if k and rng.random() < 0.1:
        val[0] = np.nan
    return val


def _random_vector(rng, dim, idt, vdt):
    k = int(dim * rng.choice([0.0, 0.001, 0.01, 0.1, 0.4, 0.6, 1.0]))
    idx = np.sort(rng.choice(dim, k, replace=False)).astype(idt)
    val = _values(rng, k, vdt)
    if rng.random() < 0.3:
        dense = np.zeros(dim, vdt)
        dense[idx] = val
        return SparseVector.unchecked(dim, None, dense)
    return SparseVector.unchecked(dim, idx, val)


@pytest.mark.parametrize("seed", range(4))
def test_encode_split_is_bitwise_codec_encode(seed):
    rng = np.random.default_rng(seed)
    dense_messages = sparse_messages = 0
    codes = set()
    for _ in range(150):
        dim = int(rng.choice([1, 7, 100, 1000, 70_000, 1 << 20]))
        size = int(rng.integers(1, 40))
        idt, vdt = DTYPES[int(rng.integers(len(DTYPES)))]
        vec = _random_vector(rng, dim, idt, vdt)
        link = None if rng.random() < 0.5 else (float(rng.random() * 1e-9),
                                                 float(rng.random() * 1e-8))
        codec = Codec(idt, vdt, options=CallOptions(code_indices=bool(rng.random() < 0.7),
                                                    link_costs=link))
        if rng.random() < 0.5:
            bounds = block_bounds(dim, size)
        else:  # uneven cuts, empty parts included
            cuts = np.sort(rng.integers(0, dim + 1, size - 1))
            bounds = np.concatenate([[0], cuts, [dim]]).astype(np.int64)
        got = encode_split(codec, vec, bounds)
        assert got.table.shape == (size, pk.NCOLS)
        for j, part in enumerate(split_parts(vec, bounds)):
            want, dense = codec.encode(part)
            assert got.message(j).tobytes() == want.tobytes(), j
            assert bool(got.table[j, pk.FMT]) == dense
            dense_messages += dense
            sparse_messages += not dense
            if not dense:
                codes.add(int(got.table[j, pk.CODE]))
    assert dense_messages and sparse_messages and codes == {0, 1, 2}  # every kind was seen


def test_encode_split_long_headers():
    """Ranges past 2**32 take the 40-byte header (int64 indices)."""
    dim = 3 << 32
    idx = np.array([5, 1 << 32, (1 << 33) + 7, dim - 1], np.int64)
    vec = SparseVector.unchecked(dim, idx, np.arange(1, 5, dtype=np.float32))
    codec = Codec(np.int64, np.float32)
    bounds = block_bounds(dim, 3)
    got = encode_split(codec, vec, bounds)
    for j, part in enumerate(split_parts(vec, bounds)):
        assert got.message(j).tobytes() == codec.encode(part)[0].tobytes()
    assert got.table[2, pk.VAL_AT] - got.table[2, pk.START] >= 40


def test_encode_split_refuses_a_quantizer():
    codec = Codec(np.int32, np.float32, QSGD(bits=4), quantize_sparse=True)
    vec = SparseVector.unchecked(10, np.array([1], np.int32), np.ones(1, np.float32))
    with pytest.raises(SparcmlError, match="lossless"):
        encode_split(codec, vec, block_bounds(10, 2))


@pytest.mark.parametrize("seed", range(4))
def test_fold_and_assemble_packed_are_bitwise_the_per_message_path(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(120):
        size = int(rng.integers(1, 30))  # pairwise (<= 8 parts) and heap folds alike
        dim = int(rng.choice([1, 50, 1000, 70_000]))
        idt, vdt = DTYPES[int(rng.integers(len(DTYPES)))]
        codec = Codec(idt, vdt, options=CallOptions(code_indices=bool(rng.random() < 0.7)))
        b = block_bounds(dim, int(rng.integers(1, 5)))
        j = int(rng.integers(len(b) - 1))
        lo, hi = int(b[j]), int(b[j + 1])
        bufs = []
        for _ in range(size):
            k = int((hi - lo) * rng.choice([0.0, 0.01, 0.1, 0.4, 0.7]))
            idx = np.sort(rng.choice(hi - lo, k, replace=False)).astype(idt) + lo
            val = (rng.choice([-1.0, -0.0, 0.5, 1.0, 3.0], k).astype(vdt)
                   if rng.random() < 0.5 else _values(rng, k, vdt))  # ties and cancellations
            bufs.append(codec.encode(Part(lo, hi - lo, idx, val))[0])
        buf, displs, sizes = _packed(bufs)
        force = bool(rng.random() < 0.3)
        want = arith.fold_parts([decode(x) for x in bufs], lo, hi - lo, codec, force)
        ws = Workspace() if rng.random() < 0.5 else None
        got = arith.fold_packed(buf, displs, sizes, lo, hi - lo, codec, force, workspace=ws,
                                intermediate=ws is not None)
        assert (got.offset, got.length) == (lo, hi - lo)
        _bytes_equal(want, got)

        blocks = []
        bb = block_bounds(dim, int(rng.integers(1, 20)))
        for m in range(bb.shape[0] - 1):
            a, z = int(bb[m]), int(bb[m + 1])
            k = int((z - a) * rng.choice([0.0, 0.05, 0.5, 1.0]))
            idx = np.sort(rng.choice(z - a, k, replace=False)).astype(idt) + a
            blocks.append(codec.encode(Part(a, z - a, idx, _values(rng, k, vdt)))[0])
        buf, displs, sizes = _packed(blocks)
        _bytes_equal(arith.assemble([decode(x) for x in blocks], dim, codec),
                     arith.assemble_packed(buf, displs, sizes, dim, codec))


def test_a_corrupt_message_is_reported_as_decode_reports_it():
    codec = Codec(np.int32, np.float32)
    bufs = [codec.encode(Part(0, 100, np.array([1, 5], np.int32),
                              np.ones(2, np.float32)))[0] for _ in range(3)]
    buf, displs, sizes = _packed(bufs)
    assert scan(buf, displs, sizes, codec)[1] == -1
    bad = buf.copy()
    bad[displs[1]] = 7
    assert scan(bad, displs, sizes, codec) == (None, 1)
    with pytest.raises(SparcmlError, match="bad magic"):
        arith.fold_packed(bad, displs, sizes, 0, 100, codec)
    with pytest.raises(SparcmlError, match="bad magic"):
        arith.assemble_packed(bad, displs, sizes, 100, codec)
    short = buf.copy()
    short[displs[2] + 4] = 99  # count 99 of a 24-byte message
    with pytest.raises(SparcmlError, match="announces"):
        arith.fold_packed(short, displs, sizes, 0, 100, codec)


def test_quantized_and_misaligned_messages_take_the_per_message_path():
    q = QSGD(bits=4, bucket_size=64)
    codec = Codec(np.int32, np.float32, q, quantize_sparse=True)
    rng = np.random.default_rng(7)
    bufs = []
    for _ in range(5):
        idx = np.sort(rng.choice(1000, 40, replace=False)).astype(np.int32)
        bufs.append(codec.encode(Part(0, 1000, idx, rng.standard_normal(40)
                                      .astype(np.float32)), seed=3)[0])
    buf, displs, sizes = _packed(bufs)
    assert scan(buf, displs, sizes, codec)[0] is None
    _bytes_equal(arith.fold_parts([decode(x) for x in bufs], 0, 1000, codec),
                 arith.fold_packed(buf, displs, sizes, 0, 1000, codec))
    lossless = Codec(np.int32, np.float32)
    plain = [lossless.encode(Part(0, 1000, np.array([3], np.int32),
                                  np.ones(1, np.float32)))[0] for _ in range(3)]
    buf, displs, sizes = _packed(plain)
    odd = np.empty(buf.nbytes + 1, np.uint8)[1:]  # not 8-byte aligned
    odd[:] = buf
    assert scan(odd, displs, sizes, lossless) == (None, 0)
    _bytes_equal(arith.fold_parts([decode(x) for x in plain], 0, 1000, lossless),
                 arith.fold_packed(odd, displs, sizes, 0, 1000, lossless))


def test_packed_message_views():
    codec = Codec(np.int32, np.float32)
    vec = SparseVector.unchecked(64, np.array([1, 40], np.int32), np.ones(2, np.float32))
    got = encode_split(codec, vec, block_bounds(64, 2))
    assert isinstance(got, Packed)
    assert [got.message(j).nbytes for j in range(2)] == list(got.table[:, pk.NBYTES])
    assert got.buf.nbytes == int(got.table[:, pk.NBYTES].sum())
