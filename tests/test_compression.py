"""sparcml.compression._objects without torch: compressors, memories, the Compression bundle at P = 1,
and the invariants of a compressed allreduce on several ranks in the test matrix
(tests/matrix/compression.py, run on real and simulated ranks by tests/test_matrix.py).

The naive references here are the obvious NumPy loops: top-k by sorting magnitudes, the
residual as ``g - sent`` entry by entry.
"""

import sys

import numpy as np
import pytest
from mpi4py import MPI

import sparcml
from sparcml.compression._objects import (Compression, Compressor, NoneCompressor, NoneMemory, Reduced,
                                 ResidualMemory, TopKCompressor, assemble_parts)
from sparcml._runtime.context import context_for
from sparcml._wire.codec import Part


def naive_topk(x, k):
    """Positions of the k largest |x|, ties to the lower index, increasing."""
    order = sorted(range(len(x)), key=lambda i: (-abs(float(x[i])), i))
    return np.sort(np.array(order[:k], np.int64))


# -- compressors ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_compressor_keeps_the_largest_magnitudes(dtype):
    x = np.random.default_rng(0).standard_normal(1000).astype(dtype)
    before = x.copy()
    v = TopKCompressor(density=0.05).compress(x)
    assert v.dim == 1000 and v.nnz == 50 and v.dtype == dtype and not v.is_dense
    assert np.array_equal(v.indices, naive_topk(x, 50))
    assert np.array_equal(v.values, x[v.indices])
    assert np.array_equal(x, before), "the input is not modified"
    assert TopKCompressor(density=0.05).num_sent(1000) == 50
    w = TopKCompressor(k=7).compress(x)
    assert np.array_equal(w.indices, naive_topk(x, 7))
    assert TopKCompressor(k=7000).compress(x).nnz == 1000


def test_topk_compressor_per_chunk():
    x = np.random.default_rng(1).standard_normal(1030).astype(np.float32)
    v = TopKCompressor(density=0.01, chunk=512).compress(x)
    # 5 of each full chunk of 512, max(1, round(0.01 * 6)) = 1 of the last 6 values
    want = np.concatenate([naive_topk(x[:512], 5), 512 + naive_topk(x[512:1024], 5),
                           1024 + naive_topk(x[1024:], 1)])
    assert np.array_equal(v.indices, want)
    assert TopKCompressor(density=0.01, chunk=512).num_sent(1030) == 11
    assert np.array_equal(v.indices, sparcml.TopK(density=0.01, bucket_size=512)
                          .compress(x).indices)


@pytest.mark.parametrize("kwargs, match", [
    ({}, "exactly one of density and k"),
    ({"density": 0.1, "k": 3}, "exactly one of density and k"),
    ({"density": 0.0}, r"density must be a number in \(0, 1\]"),
    ({"density": 1.5}, r"density must be a number in \(0, 1\]"),
    ({"density": True}, r"density must be a number in \(0, 1\]"),
    ({"k": 0}, "k must be an integer >= 1"),
    ({"k": 2.5}, "k must be an integer >= 1"),
    ({"density": 0.1, "chunk": 0}, "chunk must be None or a number of values >= 1"),
])
def test_topk_compressor_rejects_bad_options(kwargs, match):
    with pytest.raises(sparcml.CompressionError, match=match):
        TopKCompressor(**kwargs)


def test_topk_compressor_rejects_non_finite_values():
    with pytest.raises(sparcml.CompressionError, match="NaN"):
        TopKCompressor(k=1).compress(np.array([1.0, np.nan, 2.0], np.float32))


def test_none_compressor_sends_everything_without_a_copy():
    x = np.arange(5, dtype=np.float64)
    v = NoneCompressor().compress(x)
    assert v.is_dense and v.values is x and NoneCompressor().num_sent(5) == 5
    assert NoneCompressor.lossless and not TopKCompressor.lossless


def test_compressors_compare_and_print_by_configuration():
    assert TopKCompressor(density=0.01) == TopKCompressor(density=0.01)
    assert TopKCompressor(density=0.01) != TopKCompressor(density=0.01, chunk=512)
    assert TopKCompressor(k=3) != TopKCompressor(density=0.5)
    assert NoneCompressor() == NoneCompressor() != TopKCompressor(k=3)
    assert repr(TopKCompressor(density=0.01, chunk=512)) == \
        "TopKCompressor(density=0.01, chunk=512)"
    assert repr(TopKCompressor(k=3)) == "TopKCompressor(k=3)"
    assert len({TopKCompressor(k=3), TopKCompressor(k=3), NoneCompressor()}) == 2


# -- memories ---------------------------------------------------------------------------------

def test_residual_memory_keeps_exactly_what_was_not_delivered():
    rng = np.random.default_rng(2)
    mem = ResidualMemory()
    inputs, sent_total = np.zeros(40), np.zeros(40)
    assert mem.residual("a") is None
    for step in range(5):
        x = rng.standard_normal(40)
        old = np.zeros(40) if mem.residual("a") is None else mem.residual("a").copy()
        g = mem.compensate(x, "a")
        assert np.array_equal(g, x + old) and np.array_equal(x, x)
        idx = naive_topk(g, 4)
        delivered = np.round(g[idx], 1)  # what a quantizer might deliver
        mem.update(g, "a", sparcml.SparseVector(40, idx, delivered))
        r = mem.residual("a")
        want = (x + old)
        want[idx] = want[idx] - delivered
        assert np.array_equal(r, want), "residual = g - sent, entry by entry"
        inputs += x
        sent_total[idx] += delivered
    assert np.allclose(inputs, sent_total + mem.residual("a"), rtol=0, atol=1e-12)


def test_residual_memory_with_a_dense_delivery_and_separate_keys():
    mem = ResidualMemory()
    x = np.array([1.0, 2.0, 3.0], np.float32)
    g = mem.compensate(x, 0)
    mem.update(g, 0, sparcml.SparseVector.dense(np.array([1.0, 2.5, 0.0], np.float32)))
    assert mem.residual(0).tolist() == [0.0, -0.5, 3.0] and mem.residual(1) is None
    g = mem.compensate(x, 0)
    assert g.tolist() == [1.0, 1.5, 6.0]
    mem.update(g, 0, sparcml.SparseVector.dense(g.copy()))
    assert mem.residual(0).tolist() == [0.0, 0.0, 0.0]


def test_residual_memory_reuses_two_buffers_per_key():
    mem = ResidualMemory()
    x = np.ones(8, np.float32)
    empty = sparcml.SparseVector(8, [], np.empty(0, np.float32))
    g1 = mem.compensate(x, 0)
    mem.update(g1, 0, empty)
    g2 = mem.compensate(x, 0)
    mem.update(g2, 0, empty)
    g3 = mem.compensate(x, 0)
    assert g3 is g1 and g2 is not g1, "the steady state allocates nothing"
    assert g3.tolist() == [3.0] * 8


def test_residual_memory_state_and_errors():
    mem = ResidualMemory()
    g = mem.compensate(np.arange(4, dtype=np.float32), 7)
    mem.update(g, 7, sparcml.SparseVector(4, [1], np.array([1.0], np.float32)))
    state = mem.state_dict()
    state["residuals"][7][0] = 99.0  # a copy: the memory is not changed through it
    assert mem.residual(7)[0] == 0.0
    other = ResidualMemory()
    other.load_state_dict(mem.state_dict())
    assert np.array_equal(other.residual(7), mem.residual(7))
    with pytest.raises(sparcml.CompressionError, match="call reset"):
        mem.compensate(np.zeros(5, np.float32), 7)
    with pytest.raises(sparcml.CompressionError, match="call reset"):
        mem.compensate(np.zeros(4, np.float64), 7)
    with pytest.raises(sparcml.UnsupportedDtypeError):
        mem.compensate(np.zeros(4, np.int32), 8)
    with pytest.raises(sparcml.CompressionError, match="1-d float32/float64"):
        other.load_state_dict({"residuals": {0: np.zeros((2, 2))}})
    mem.reset()
    assert mem.residual(7) is None and mem.state_dict() == {"residuals": {}}
    assert isinstance(mem.fresh(), ResidualMemory) and mem.fresh() is not mem


def test_none_memory_forgets():
    mem = NoneMemory()
    x = np.ones(3)
    assert mem.compensate(x, 0) is x
    mem.update(x, 0, sparcml.SparseVector.dense(x))
    assert mem.residual(0) is None and mem.state_dict() == {} and not mem.error_feedback


# -- parts ------------------------------------------------------------------------------------

def test_assemble_parts_sparse_dense_and_mixed():
    f32 = np.float32
    sparse = [Part(4, 4, np.array([5, 6], np.int32), np.array([2, 3], f32)),
              Part(0, 4, np.array([1], np.int32), np.array([1], f32))]
    v = assemble_parts(sparse, 8, f32)
    assert not v.is_dense and v.indices.tolist() == [1, 5, 6] and v.values.tolist() == [1, 2, 3]
    mixed = [Part(4, 4, None, np.array([0, 7, 0, 8], f32)),
             Part(0, 4, np.array([2], np.int64), np.array([5], f32))]
    w = assemble_parts(mixed, 8, f32)
    assert w.is_dense and w.to_dense().tolist() == [0, 0, 5, 0, 0, 7, 0, 8]
    assert assemble_parts([], 3, f32).nnz == 0


# -- the bundle -------------------------------------------------------------------------------

def test_compression_defaults_and_validation():
    plain = Compression()
    assert isinstance(plain.compressor, NoneCompressor) and isinstance(plain.memory, NoneMemory)
    assert plain.algorithm == sparcml.DEFAULT_ALGORITHM and not plain.lossy
    topk = Compression(TopKCompressor(density=0.1))
    assert isinstance(topk.memory, ResidualMemory) and topk.lossy
    q = Compression(quantizer=sparcml.QSGD(4))
    assert isinstance(q.memory, ResidualMemory) and q.lossy
    none = Compression.none()
    assert none.algorithm == sparcml.DENSE_BASELINE and isinstance(none.memory, NoneMemory)
    assert Compression(algorithm="auto").algorithm == "auto"
    with pytest.raises(sparcml.UnknownAlgorithmError, match="ring"):
        Compression(algorithm="ring")
    with pytest.raises(sparcml.IncompatibleOptionsError, match="quantized"):
        Compression(quantizer=sparcml.QSGD(4), algorithm=sparcml.DENSE_BASELINE)
    with pytest.raises(sparcml.IncompatibleOptionsError, match="QSGD"):
        Compression(quantizer=4)
    with pytest.raises(sparcml.IncompatibleOptionsError, match="TopKCompressor"):
        Compression(compressor="topk")
    with pytest.raises(sparcml.IncompatibleOptionsError, match="ResidualMemory"):
        Compression(memory=True)


def test_describe_names_the_configuration_without_random_state():
    a = Compression(TopKCompressor(density=0.01), sparcml.QSGD(4, seed=1))
    b = Compression(TopKCompressor(density=0.01), sparcml.QSGD(4, seed=2))
    assert a.describe() == b.describe() == repr(a)
    assert "density=0.01" in a.describe() and "bits=4" in a.describe()
    assert a.describe() != Compression(TopKCompressor(density=0.02)).describe()


def test_fresh_copies_have_an_empty_memory_and_a_seeded_quantizer():
    c = Compression(TopKCompressor(k=2), sparcml.QSGD(2, bucket_size=8, norm="l2"))
    g = c.memory.compensate(np.ones(4), 0)
    c.memory.update(g, 0, sparcml.SparseVector(4, [], np.empty(0)))
    f1, f2 = c.fresh(seed=5), c.fresh(seed=5)
    assert f1.memory is not c.memory and f1.memory.residual(0) is None
    assert f1.compressor == c.compressor and f1.describe() == c.describe()
    assert f1.quantizer.code == c.quantizer.code and f1.quantizer is not c.quantizer
    draws = [f.quantizer._rng.integers(0, 2**62) for f in (f1, f2)]
    assert draws[0] == draws[1], "the same seed gives the same rounding on every rank"


def test_a_custom_compressor_plugs_in():
    class Sign(Compressor):
        def compress(self, x):
            return sparcml.SparseVector.dense(np.sign(x).astype(x.dtype))

    c = Compression(Sign(), algorithm=sparcml.DENSE_BASELINE)
    assert isinstance(c.memory, ResidualMemory)
    ctx = context_for(MPI.COMM_SELF)
    r = c.allreduce_in(ctx, np.array([0.5, -2.0, 0.0]), key="s")
    assert r.result.to_dense().tolist() == [1.0, -1.0, 0.0]
    assert c.memory.residual("s").tolist() == [-0.5, -1.0, 0.0]


@pytest.mark.parametrize("quantizer", [None, sparcml.QSGD(4, bucket_size=4)])
def test_allreduce_at_one_rank(quantizer):
    """P = 1: nothing travels, so nothing is quantized: the result is the compressed vector
    and the residual holds what top-k left (the sent values are the input's own)."""
    c = Compression(TopKCompressor(density=0.25), quantizer=quantizer)
    rng = np.random.default_rng(3)
    inputs, sent = np.zeros(16, np.float32), np.zeros(16, np.float32)
    for step in range(4):
        x = rng.standard_normal(16).astype(np.float32)
        old = c.memory.residual(0)
        g = x + (0 if old is None else old)
        r = c.allreduce_in(context_for(MPI.COMM_SELF), x, key=0)
        assert isinstance(r, Reduced) and r.values_sent == 4
        assert np.array_equal(r.result.to_dense(), r.sent.to_dense())
        assert np.array_equal(r.sent.indices, naive_topk(g, 4))
        assert np.array_equal(r.sent.values, g[r.sent.indices])
        inputs += x
        sent += r.sent.to_dense()
    assert np.allclose(inputs, sent + c.memory.residual(0), atol=1e-5)
    full = c.allreduce_in(context_for(MPI.COMM_SELF), np.ones(16, np.float32), key=0,
                          full=True)
    assert full.result.to_dense().tolist() == [1.0] * 16 and full.values_sent == 16
    assert c.allreduce(np.ones(16, np.float32), comm=MPI.COMM_SELF, key=1).nnz == 4


def test_importing_sparcml_compression_does_not_import_torch():
    import subprocess

    code = "import sys, sparcml.compression._objects; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
