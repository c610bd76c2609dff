"""The compressors beyond top-k and QSGD (sparcml.compression: random-k, threshold-v, DGC,
signSGD / signum, EF-signSGD, FP16 / BF16, TernGrad, PowerSGD), torch-free:

- each encode / decode against a plain NumPy (or pure Python) reference: the bits, the scales,
  the seeds;
- each memory invariant at P = 1: what was not delivered is what the memory holds
  (``residual == g - sent``; the sum of the inputs == the sum of what was sent + residual);
- the catalog by name, bad options;
- and, one mpiexec job per process count (P = 1, 2, 3), every rank ending with identical
  parameters (tests/mpi_cases/compressors.py).
"""

import argparse
import math
import re
import struct
import sys
import zlib

import numpy as np
import pytest
from mpi4py import MPI

import sparcml
from mpirun import REPO, run_mpi
from sparcml._runtime.context import context_for
from sparcml.compression import (COMPRESSORS, CastCompressor, Compression, DGCCompressor,
                                 DGCMemory, EFSignCompressor, NoneMemory, PowerSGDCompressor,
                                 RandomKCompressor, ResidualMemory, SignCompressor,
                                 ThresholdCompressor, build, from_bf16, matrix_shape,
                                 pack_signs, terngrad, to_bf16, unpack_signs)


def self_ctx():
    return context_for(MPI.COMM_SELF)


def run_steps(c, inputs, key="k"):
    """Reduce each input at P = 1; per step (g, Reduced) with g the compensated input."""
    out = []
    for x in inputs:
        old = c.memory.residual(key)
        g = x + old if old is not None else x.copy()
        out.append((g, c.allreduce_in(self_ctx(), x, key=key)))
    return out


def check_memory_invariant(c, inputs, steps, key="k", atol=1e-5):
    delivered = sum(r.sent.to_dense().astype(np.float64) for _, r in steps)
    residual = c.memory.residual(key)
    assert residual is not None
    assert np.allclose(sum(x.astype(np.float64) for x in inputs), delivered + residual,
                       rtol=0, atol=atol), "sum of inputs == sum of sent + residual"


# -- random-k ---------------------------------------------------------------------------------

def reference_randomk(n, k, seed, key, step, rank=None):
    entropy = [seed, zlib.crc32(repr(key).encode()), step] + ([] if rank is None else [rank + 1])
    return np.sort(np.random.default_rng(entropy).choice(n, k, replace=False))


@pytest.mark.parametrize("shared", [True, False])
def test_randomk_draws_the_seeded_positions_and_keeps_the_rest(shared):
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(100).astype(np.float32) for _ in range(4)]
    c = Compression(RandomKCompressor(density=0.1, seed=3, shared=shared))
    assert isinstance(c.memory, ResidualMemory)
    steps = run_steps(c, inputs, key="w")
    for step, (g, r) in enumerate(steps):
        want = reference_randomk(100, 10, 3, "w", step, None if shared else 0)
        assert np.array_equal(r.sent.indices, want)
        assert np.array_equal(r.sent.values, g[want]), "exact values"
        assert np.array_equal(r.result.to_dense(), r.sent.to_dense()), "P = 1: sum == sent"
        assert r.values_sent == 10
    assert not np.array_equal(steps[0][1].sent.indices, steps[1][1].sent.indices)
    check_memory_invariant(c, inputs, steps, key="w")
    # a fresh copy starts its steps again
    again = run_steps(c.fresh(), inputs[:1], key="w")
    assert np.array_equal(again[0][1].sent.indices, steps[0][1].sent.indices)


def test_randomk_options():
    assert RandomKCompressor(k=5).num_sent(3) == 3
    assert RandomKCompressor(density=0.001).num_sent(100) == 1
    with pytest.raises(sparcml.CompressionError, match="exactly one"):
        RandomKCompressor()
    with pytest.raises(sparcml.CompressionError, match="seed"):
        RandomKCompressor(k=1, seed=-1)
    with pytest.raises(sparcml.IncompatibleOptionsError, match="no quantizer"):
        Compression(RandomKCompressor(k=1, shared=True), sparcml.QSGD(4))
    Compression(RandomKCompressor(k=1, shared=False), sparcml.QSGD(4))  # sparse: quantizable


# -- threshold-v ------------------------------------------------------------------------------

def test_threshold_keeps_every_large_entry():
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(200) for _ in range(5)]
    c = Compression(ThresholdCompressor(1.5))
    steps = run_steps(c, inputs)
    for g, r in steps:
        want = [i for i in range(200) if abs(g[i]) >= 1.5]
        assert r.sent.indices.tolist() == want
        assert np.array_equal(r.sent.values, g[want])
    assert len({r.values_sent for _, r in steps}) > 1, "a variable k"
    check_memory_invariant(c, inputs, steps, atol=1e-12)
    with pytest.raises(sparcml.CompressionError, match="threshold"):
        ThresholdCompressor(0)
    with pytest.raises(sparcml.CompressionError, match="NaN"):
        ThresholdCompressor(1.0).compress(np.array([np.nan, 1.0]))


# -- DGC --------------------------------------------------------------------------------------

def test_dgc_momentum_correction_masking_clipping_and_warmup():
    rng = np.random.default_rng(2)
    n, m, clip = 50, 0.9, 3.0
    inputs = [rng.standard_normal(n) for _ in range(6)]
    comp = DGCCompressor(0.04, warmup_steps=4, initial_density=0.5)
    # 0.5 * (0.04 / 0.5) ** (s / 4) of 50 values, then 0.04
    assert [round(comp.density_at(s) * n) for s in range(6)] == [25, 13, 7, 4, 2, 2]
    c = Compression(comp, memory=DGCMemory(m, clip_norm=clip))
    u, v = np.zeros(n), np.zeros(n)
    sents = []
    for step, x in enumerate(inputs):
        r = c.allreduce_in(self_ctx(), x, key=0)
        xc = x * min(1.0, clip / np.linalg.norm(x))          # local gradient clipping
        u = m * u + xc                                       # momentum correction
        v = v + u
        k = max(1, round(comp.density_at(step) * n))
        idx = np.sort(np.argsort(-np.abs(v), kind="stable")[:k])
        assert r.sent.indices.tolist() == idx.tolist(), f"step {step}"
        assert np.allclose(r.sent.values, v[idx])
        v[idx] = 0                                           # sent: leaves the accumulation
        u[idx] = 0                                           # momentum factor masking
        assert np.allclose(c.memory.residual(0), v) and np.allclose(c.memory.velocity(0), u)
        sents.append(r)
    state = c.memory.state_dict()
    other = DGCMemory(m, clip)
    other.load_state_dict(state)
    assert np.array_equal(other.velocity(0), c.memory.velocity(0))
    assert isinstance(Compression(DGCCompressor()).memory, DGCMemory)
    assert repr(c.memory.fresh()) == "DGCMemory(momentum=0.9, clip_norm=3.0)"
    with pytest.raises(sparcml.CompressionError, match="momentum"):
        DGCMemory(1.0)


# -- signs ------------------------------------------------------------------------------------

def reference_pack(x):
    out = bytearray((len(x) + 7) // 8)
    for i, v in enumerate(x):
        if v >= 0:
            out[i // 8] |= 1 << (i % 8)
    return np.frombuffer(bytes(out), np.uint8)


def test_sign_bits_are_packed_one_per_value():
    x = np.array([0.5, -1.0, 0.0, -0.0, 2.0, -3.0, 1.0, 1.0, -1.0, 4.0], np.float32)
    bits = pack_signs(x)
    assert bits.nbytes == 2 and np.array_equal(bits, reference_pack(x))
    assert unpack_signs(bits, 10, np.float32).tolist() == [1, -1, 1, 1, 1, -1, 1, 1, -1, 1]
    y = np.random.default_rng(3).standard_normal(1001)
    assert np.array_equal(pack_signs(y), reference_pack(y))


def test_signsgd_majority_at_one_rank_and_signum_momentum():
    x = np.array([0.3, -0.2, 0.0, -5.0])
    c = Compression(SignCompressor())
    assert isinstance(c.memory, NoneMemory)
    r = c.allreduce_in(self_ctx(), x, key=0)
    # sign(0) = 0: the zero abstains from the vote
    assert r.result.to_dense().tolist() == [1, -1, 0, -1] and r.sent.to_dense().tolist() == \
        [1, -1, 0, -1]
    s = Compression(SignCompressor(0.5)).fresh()
    seq = [np.array([1.0, -1.0]), np.array([-3.0, 0.4])]
    m = np.zeros(2)
    for x in seq:
        m = 0.5 * m + 0.5 * x
        got = s.allreduce_in(self_ctx(), x, key=0).result.to_dense()
        assert got.tolist() == np.sign(m).tolist()
    assert got.tolist() == [-1.0, -1.0], "the momentum decides, not the last gradient alone"


def test_efsignsgd_scaled_signs_and_error_feedback():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(37).astype(np.float32)
    x[[3, 20]] = 0.0
    buf = EFSignCompressor().encode(x)
    assert buf.nbytes == 2 * 5 + 4, "2 x ceil(37 / 8) bytes of ternary signs + one scale"
    scale = struct.unpack("<f", buf[-4:].tobytes())[0]
    assert scale == pytest.approx(np.abs(x.astype(np.float64)).mean(), rel=1e-6)
    assert np.array_equal(EFSignCompressor().decode(buf, 37, np.float32),
                          np.sign(x) * np.float32(scale)), "sign(0) = 0"
    chunked = EFSignCompressor(chunk=10)
    buf = chunked.encode(x)
    assert buf.nbytes == 2 * 5 + 4 * 4, "four scales: 10, 10, 10 and 7 values"
    scales = [np.abs(x[i:i + 10].astype(np.float64)).mean() for i in range(0, 37, 10)]
    want = np.sign(x) * np.repeat(scales, 10)[:37]
    assert np.allclose(chunked.decode(buf, 37, np.float32), want, rtol=1e-6)
    shapes = [(3, 4), (25,)]  # per tensor: the paper's scale
    buf = EFSignCompressor().encode(x, shapes)
    assert buf.nbytes == 2 * 5 + 2 * 4
    scales = [np.abs(x[:12].astype(np.float64)).mean(), np.abs(x[12:].astype(np.float64)).mean()]
    assert np.allclose(EFSignCompressor().decode(buf, 37, np.float32, shapes),
                       np.sign(x) * np.repeat(scales, [12, 25]), rtol=1e-6)
    inputs = [rng.standard_normal(37).astype(np.float32) for _ in range(5)]
    c = Compression(EFSignCompressor())
    steps = run_steps(c, inputs)
    for g, r in steps:
        assert np.allclose(r.sent.to_dense(), np.abs(g).mean() * np.sign(g),
                           rtol=1e-6), "37 values: one tensor"
    g, r = steps[-1]
    assert np.array_equal(c.memory.residual("k"), g - r.sent.to_dense())
    check_memory_invariant(c, inputs, steps)


# -- 16-bit floats ----------------------------------------------------------------------------

def reference_bf16(v: float) -> int:
    u = struct.unpack("<I", struct.pack("<f", v))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def test_bf16_rounds_to_nearest_even():
    vals = np.array([1.0, -2.5, 3.14159, 1e-30, 65504.0, 1.00390625, 1.01171875, 0.0],
                    np.float32)
    words = to_bf16(vals)
    assert words.tolist() == [reference_bf16(float(v)) for v in vals]
    assert from_bf16(to_bf16(np.array([1.00390625], np.float32)))[0] == 1.0, "tie to even"
    assert from_bf16(np.array([0x3F80], np.uint16)).tolist() == [1.0]
    assert np.isnan(from_bf16(to_bf16(np.array([np.nan], np.float32)))[0])


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_cast_compressor_rounds_once_and_feeds_the_error_back(fmt):
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]
    c = Compression(CastCompressor(fmt), memory=ResidualMemory())
    steps = run_steps(c, inputs)
    for g, r in steps:
        want = g.astype(np.float16).astype(np.float32) if fmt == "fp16" else \
            np.array([struct.unpack("<f", struct.pack("<I", reference_bf16(float(v)) << 16))[0]
                      for v in g], np.float32)
        assert np.array_equal(r.sent.to_dense(), want)
        assert np.array_equal(r.result.to_dense(), want)
        assert not np.array_equal(want, g), "16 bits lose something"
    check_memory_invariant(c, inputs, steps)
    assert isinstance(Compression(CastCompressor(fmt)).memory, NoneMemory)
    with pytest.raises(sparcml.CompressionError, match="fp16"):
        CastCompressor("fp8")


# -- TernGrad ---------------------------------------------------------------------------------

def test_terngrad_is_a_ternary_code_with_the_bucket_max():
    x = np.random.default_rng(6).standard_normal(300).astype(np.float32)
    q = terngrad(bucket_size=100, seed=1)
    out = q.quantize(x)
    for b in range(3):
        s = np.abs(x[b * 100:(b + 1) * 100]).max()
        part = out[b * 100:(b + 1) * 100]
        assert set(np.unique(np.abs(part)).tolist()) <= {0.0, float(s)}, "{-s, 0, s}"
        signs = np.sign(part[part != 0])
        assert np.array_equal(signs, np.sign(x[b * 100:(b + 1) * 100][part != 0]))
    means = np.mean([terngrad(bucket_size=100, seed=i).quantize(x) for i in range(400)], 0)
    assert np.abs(means - x).max() < 0.35, "unbiased"


# -- PowerSGD ---------------------------------------------------------------------------------

def test_powersgd_at_one_rank_against_numpy():
    n, r = 300, 2
    rows, cols = matrix_shape(n)
    assert (rows, cols) == (18, 17) and matrix_shape(1) == (1, 1) and matrix_shape(16) == (4, 4)
    comp = PowerSGDCompressor(r, seed=9)
    c = Compression(comp)
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(n) for _ in range(4)]
    q = np.random.default_rng([9, zlib.crc32(repr("k").encode())]).standard_normal((cols, r))
    resid = np.zeros(n)
    steps = []
    for x in inputs:
        g = x + resid
        m = np.zeros(rows * cols)
        m[:n] = g
        m = m.reshape(rows, cols)
        p, _ = np.linalg.qr(m @ q)
        q = m.T @ p
        approx = (p @ q.T).ravel()[:n]                      # warm start: q is kept
        red = c.allreduce_in(self_ctx(), x, key="k")
        assert np.allclose(red.result.to_dense(), approx, atol=1e-10)
        assert red.values_sent == (rows + cols) * r
        resid = g - approx
        assert np.allclose(c.memory.residual("k"), resid, atol=1e-10)
        steps.append((g, red))
    check_memory_invariant(c, inputs, steps, atol=1e-9)
    small = Compression(PowerSGDCompressor(4)).allreduce_in(self_ctx(), np.arange(5.0), key=0)
    assert small.result.to_dense().tolist() == [0, 1, 2, 3, 4], "small buckets go whole"


def reference_powersgd_per_tensor(steps, shapes, r, seed):
    """Plain NumPy PowerSGD at P = 1, one matrix per parameter of >= 2 dims, the rest whole:
    per step (result, residual)."""
    sizes = [int(np.prod(s)) for s in shapes]
    offsets = np.cumsum([0] + sizes)
    qs = {}
    resid = np.zeros(offsets[-1])
    out = []
    for x in steps:
        g = x + resid
        result = g.copy()  # whole tensors: exact
        for i, (shape, a, b) in enumerate(zip(shapes, offsets, offsets[1:])):
            if len(shape) < 2:
                continue
            rows, cols = shape[0], (b - a) // shape[0]
            rr = min(r, rows, cols)
            if (rows + cols) * rr >= b - a:
                continue
            m = g[a:b].reshape(rows, cols)
            q = qs.get(i)
            if q is None:
                q = np.random.default_rng([seed, rows, cols]).standard_normal((cols, rr))
            p, rt = np.linalg.qr(m @ q)
            p = p * np.where(np.diag(rt) < 0, -1.0, 1.0)
            qs[i] = q = m.T @ p
            result[a:b] = (p @ q.T).ravel()
        resid = g - result
        out.append((result, resid))
    return out


def test_powersgd_per_parameter_against_numpy():
    # a conv weight, its bias, a linear weight, its bias, a matrix too small to gain
    shapes = [(8, 3, 2, 2), (8,), (5, 12), (5,), (2, 2)]
    n = sum(int(np.prod(s)) for s in shapes)
    comp = PowerSGDCompressor(2, seed=4)
    assert [p.r for p in comp.plan(n, shapes)] == [2, 0, 2, 0, 0]
    assert comp.allreduce_values(n, shapes) == (8 * 2 + 8 + 5 * 2 + 5 + 4, 12 * 2 + 12 * 2)
    c = Compression(comp)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(n) for _ in range(4)]
    want = reference_powersgd_per_tensor(inputs, shapes, 2, 4)
    steps = []
    for x, (result, resid) in zip(inputs, want):
        old = c.memory.residual("b")
        g = x + old if old is not None else x.copy()
        red = c.allreduce_in(self_ctx(), x, key="b", shapes=shapes)
        assert np.allclose(red.result.to_dense(), result, atol=1e-10)
        assert np.allclose(c.memory.residual("b"), resid, atol=1e-10)
        assert red.values_sent == sum(comp.allreduce_values(n, shapes))
        steps.append((g, red))
    bias = slice(96, 104)
    assert np.array_equal(steps[-1][1].result.to_dense()[bias], steps[-1][0][bias]), "exact"
    assert not c.memory.residual("b")[bias].any(), "nothing of a bias is left behind"
    check_memory_invariant(c, inputs, steps, key="b", atol=1e-9)
    with pytest.raises(sparcml.CompressionError, match="hold 7 values, the array 10"):
        c.allreduce_in(self_ctx(), np.zeros(10), key="c", shapes=[(7,)])
    # only vectors: one dense allreduce of everything
    whole = Compression(PowerSGDCompressor(4)).allreduce_in(self_ctx(), np.arange(6.0),
                                                            key=0, shapes=[(2,), (4,)])
    assert whole.result.to_dense().tolist() == list(range(6)) and whole.values_sent == 6


# -- state: checkpoints and rebuilt buckets ---------------------------------------------------

STATEFUL = [("dgc", {"density_warmup_steps": 3}), ("randomk", {}), ("terngrad", {}),
            ("randomk", {"shared": True}), ("powersgd", {}), ("signum", {}),
            ("efsignsgd", {}), ("topk", {"bits": 4})]  # qsgd alone: nothing kept at P = 1


@pytest.mark.parametrize("name,extra", STATEFUL, ids=[f"{n}{sorted(e)}" for n, e in STATEFUL])
def test_compression_state_dict_resumes_bitwise(name, extra):
    """k steps, state_dict(), then the next steps: a fresh Compression that loads the state
    continues with the same results, bit for bit."""
    import copy

    shapes = [(10, 12), (10,), (6, 8)]
    n = 178
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(7)]
    c = build(name, density=0.1, rank=2, **extra).fresh(seed=3)
    for x in inputs[:4]:
        c.allreduce_in(self_ctx(), x, key=1, shapes=shapes)
    saved = copy.deepcopy(c.state_dict())
    straight = [c.allreduce_in(self_ctx(), x, key=1, shapes=shapes).result.to_dense()
                for x in inputs[4:]]
    resumed = build(name, density=0.1, rank=2, **extra).fresh(seed=99)  # another RNG state
    resumed.load_state_dict(saved)
    again = [resumed.allreduce_in(self_ctx(), x, key=1, shapes=shapes).result.to_dense()
             for x in inputs[4:]]
    assert all(np.array_equal(a, b) for a, b in zip(straight, again)), name
    fresh = build(name, density=0.1, rank=2, **extra).fresh(seed=3)
    other = [fresh.allreduce_in(self_ctx(), x, key=1, shapes=shapes).result.to_dense()
             for x in inputs[4:]]
    assert not all(np.array_equal(a, b) for a, b in zip(straight, other)), \
        f"{name}: the state made no difference (the test would pass without it)"


@pytest.mark.parametrize("name", ["dgc", "powersgd", "signum", "randomk", "topk"])
def test_state_moves_with_the_parameters_into_rebuilt_buckets(name):
    """Two buckets of two parameters each, rebuilt as buckets of other pairs (DDP's rebuild):
    split_state per parameter and join_state per new bucket give each new bucket what its
    parameters had; the reduction then goes on as if the buckets had been those from the
    start (the same results as a run keyed per parameter)."""
    shapes = {"w1": (6, 8), "b1": (6,), "w2": (4, 9), "b2": (4,)}
    sizes = {k: int(np.prod(s)) for k, s in shapes.items()}
    rng = np.random.default_rng(6)
    grads = [{k: rng.standard_normal(sizes[k]) for k in shapes} for _ in range(5)]
    old = {0: ["w1", "b1"], 1: ["w2", "b2"]}
    new = {0: ["b2", "w1"], 1: ["w2", "b1"]}

    def run(c, layout, step):
        return {key: c.allreduce_in(self_ctx(), np.concatenate([grads[step][k] for k in names]),
                                    key=key, shapes=[shapes[k] for k in names]).result
                .to_dense() for key, names in layout.items()}

    def per_param(result, layout):
        out = {}
        for key, names in layout.items():
            at = 0
            for k in names:
                out[k] = result[key][at:at + sizes[k]]
                at += sizes[k]
        return out

    moved = build(name, density=0.2, rank=2).fresh(seed=0)
    for step in range(2):
        run(moved, old, step)
    pieces = {}
    for key, names in old.items():
        pieces.update(zip(names, moved.split_state(key, [sizes[k] for k in names])))
    for key, names in new.items():
        moved.join_state(key, [pieces[k] for k in names])
    state = moved.state_dict()
    if name == "dgc":
        assert state["memory"]["velocities"][0].shape == (sizes["b2"] + sizes["w1"],)
    if name == "powersgd":
        assert [m for m, _ in state["compressor"]["q"][1]] == [sizes["w2"], sizes["b1"]]
        assert state["compressor"]["q"][1][1][1] is None, "a bias has no Q"
    # the reference: every parameter its own key from the start (top-k, DGC and the others
    # then select per parameter, so compare the compressors whose result is per parameter)
    if name in ("powersgd", "signum"):
        ref = build(name, density=0.2, rank=2).fresh(seed=0)
        single = {k: [k] for k in shapes}
        for step in range(2):
            run(ref, single, step)
        got = per_param(run(moved, new, 2), new)
        want = per_param(run(ref, single, 2), single)
        for k in shapes:
            assert np.allclose(got[k], want[k], rtol=1e-12, atol=1e-12), (name, k)
    else:  # the moved residual is the old one, reordered
        before = build(name, density=0.2, rank=2).fresh(seed=0)
        for step in range(2):
            run(before, old, step)
        r_old = per_param({k: before.memory.residual(k) for k in old}, old)
        r_new = per_param({k: moved.memory.residual(k) for k in new}, new)
        for k in shapes:
            assert np.array_equal(r_old[k], r_new[k]), (name, k)
        if name in ("dgc", "randomk"):
            assert state["compressor"]["steps"] == {0: 2, 1: 2}
    # a parameter that was in no old bucket: the new bucket starts empty
    moved.join_state(0, [pieces["w1"], {}])
    assert moved.memory.residual(0) is None
    assert 0 not in moved.state_dict()["compressor"].get("q", moved.state_dict()["compressor"]
                                                         .get("steps", {}))


# -- the catalog ------------------------------------------------------------------------------

def test_every_named_compressor_builds_and_reduces_at_one_rank():
    x = np.random.default_rng(8).standard_normal(400).astype(np.float32)
    for name in COMPRESSORS:
        c = build(name, density=0.05, threshold=1.0, bits=4 if name == "qsgd" else 0)
        r = c.fresh(seed=0).allreduce_in(self_ctx(), x, key=0)
        assert r.result.dim == 400 and np.isfinite(r.result.to_dense()).all(), name
    with pytest.raises(sparcml.CompressionError, match="unknown compressor 'zip'"):
        build("zip")
    with pytest.raises(sparcml.CompressionError, match="--threshold"):
        build("threshold")
    assert "warmup_steps=7" in build("dgc", density_warmup_steps=7).describe()


def test_build_cannot_fall_through_and_refuses_unknown_parameters():
    """Every name builds through its own registry record (no branch chain that a forgotten
    name falls through to another compressor)."""
    from sparcml.compression import compressor_names, get_compressor

    kinds = set()
    for name in compressor_names():
        spec = get_compressor(name)
        assert spec.name == name and spec.build.__module__.endswith("." + name.replace(
            "-", "_")), name  # one module per compressor, named after it
        c = build(name, threshold=1.0)
        kinds.add((type(c.compressor).__name__, repr(c.compressor), repr(c.quantizer)))
        # the class (and so its cost) in a compressor's module, or the base ones of _objects
        home = type(c.compressor).__module__
        assert home.startswith("sparcml.compression.compressors.") or \
            home == "sparcml.compression._objects", (name, home)
    assert len(kinds) == len(compressor_names()), "two names built the same compression"
    with pytest.raises(sparcml.CompressionError, match="unknown compressor parameter 'densty'"):
        build("topk", densty=0.1)
    with pytest.raises(sparcml.CompressionError, match="with shared indices takes no quant"):
        build("randomk", shared=True, bits=4)
    cost = (REPO / "comm/sparcml/compression/_cost.py").read_text()
    assert "isinstance" not in cost, "the cost of a compressor is its class's method"


def test_a_toy_compressor_is_known_to_the_apps_the_cost_model_and_the_table():
    """tests/toy_compressor.py registers itself; no other file names it, yet it is a choice
    of both deep apps' --compressor with its own flag, has its cost in the cost model and its
    row in the table of compressors."""
    import dataclasses

    from sparcml import CostModel
    from sparcml.compression import predicted_seconds, unregister_compressor
    from sparcml.sim import network_cost_model
    from sparcapps.deep import cnn, lstm
    from sparcapps.deep.compressor_table import rows_of
    from sparcapps.deep.comm_options import compressor_has_own_momentum
    from sparcapps.deep.train import _check_args, compression_from_args

    sys.path.insert(0, str(REPO / "tests"))
    import toy_compressor

    name = toy_compressor.NAME
    try:
        for app in (cnn, lstm):
            parser = app.build_parser()
            assert name in parser.format_help() and "--toy-stride" in parser.format_help()
            args = parser.parse_args(["--compressor", name, "--toy-stride", "3"])
            assert _check_args(args) == [] and not compressor_has_own_momentum(args)
            c = compression_from_args(args)
            assert isinstance(c.compressor, toy_compressor.ToyStrideCompressor)
            assert c.compressor.stride == 3 and isinstance(c.memory, ResidualMemory)
        x = np.arange(10, dtype=np.float32)
        r = build(name, stride=4).fresh(seed=0).allreduce_in(self_ctx(), x, key=0)
        assert r.result.to_dense()[[0, 4, 8]].tolist() == [0, 4, 8] and r.values_sent == 3
        # the cost model: the class's own cost, not the default
        model = CostModel()
        assert predicted_seconds(c, model, P=8, n=1000) == model.allreduce(334 * 4)
        # the table: its row, named by its label, predicted by its cost

        def record(flags, acc):
            cfg = vars(cnn.build_parser().parse_args(flags))
            return {"app": "sparc-cnn", "config": cfg, "N": 100_000, "P": 2, "status": "ok",
                    "metrics": {"test_accuracy": acc, "epochs": [{"sent_density": 0.34}],
                                "compression": compression_from_args(
                                    argparse.Namespace(**cfg)).describe()},
                    "bytes": {"sent_per_step": 1e4}, "timings": {"step": {"median": 0.1}}}

        rows = rows_of([record(["--dense"], 0.9),
                        record(["--compressor", name, "--toy-stride", "3"], 0.8)])
        by = {r["compressor"]: r for r in rows}
        assert set(by) == {"dense", f"{name} (every 3)"}, set(by)
        table_model = dataclasses.replace(
            network_cost_model("256x10gbit", 64, overhead=0.0, part_overhead=0.0,
                               factors=False),
            gamma_merge=CostModel.gamma_merge, gamma_dense=CostModel.gamma_dense)
        buckets = by[f"{name} (every 3)"]
        mb = cnn.build_parser().get_default("bucket_mb")
        n = math.ceil(100_000 / max(1, math.ceil(100_000 * 4 / max(1, int(mb * 2**20)))))
        assert buckets["comm_ms"][64] == pytest.approx(
            table_model.allreduce(math.ceil(n / 3) * 4) * 1e3)
        # no other file names it
        for root in (REPO / "comm", REPO / "sparcapps", REPO / "README.md"):
            for path in ([root] if root.is_file() else root.rglob("*.py")):
                assert name not in path.read_text(), path
    finally:
        unregister_compressor(name)
        sys.modules.pop("toy_compressor", None)
    assert name not in COMPRESSORS


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_compressors_under_mpiexec_end_with_identical_parameters(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py",
                                 str(REPO / "tests" / "mpi_cases" / "compressors.py")],
                   timeout=300)
    found = re.search(r"COMPRESSORS (\d+) OK", proc.stdout)
    assert found and int(found.group(1)) >= 13 * 3, proc.stdout + proc.stderr


# -- the apps' flags (torch-free: the parser and the Compression they build) ------------------

def test_the_apps_compressor_flag_builds_each_named_compression():
    from sparcapps.deep import lstm
    from sparcapps.deep.compressor_table import _name
    from sparcapps.deep.comm_options import compressor_has_own_momentum
    from sparcapps.deep.train import _check_args, compression_from_args

    parse = lstm.build_parser().parse_args
    for name in COMPRESSORS:
        args = parse(["--compressor", name, "--threshold", "0.01", "--powersgd-rank", "2",
                      "--compressor-momentum", "0.5", "--momentum", "0.3"]
                     + (["--bits", "4"] if name == "qsgd" else []))
        assert args.momentum == 0.3, "a --momentum given wins (the SGD's)"
        assert _check_args(args) == [], name
        c = compression_from_args(args)
        assert c.describe() == build(name, density=0.01, threshold=0.01, rank=2, momentum=0.5,
                                     bits=args.bits, seed=0).describe(), name
        assert _name({"config": vars(args)}).startswith(name)
    c = compression_from_args(parse(["--compressor", "randomk", "--shared-indices"]))
    assert c.compressor.shared
    c = compression_from_args(parse(["--compressor", "dgc", "--density-warmup-steps", "9",
                                     "--clip-norm", "2", "--compressor-momentum", "0.8"]))
    assert c.compressor.warmup_steps == 9 and c.memory.clip_norm == 2.0
    assert c.memory.momentum == 0.8
    # --momentum 0 is the SGD's: DGC keeps its own momentum
    dgc = parse(["--compressor", "dgc", "--momentum", "0"])
    assert dgc.momentum == 0.0 and compression_from_args(dgc).memory.momentum == 0.9
    own = {name for name in COMPRESSORS
           if compressor_has_own_momentum(parse(["--compressor", name]))}
    assert own == {"dgc", "signum"}, own  # their registry records: the SGD runs without
    (problem,) = _check_args(parse(["--compressor", "threshold"]))
    assert problem.startswith("--compressor threshold:") and "--threshold" in problem
    (problem,) = _check_args(parse(["--compressor", "signsgd", "--bits", "4"]))
    assert "takes no quantizer" in problem
    (problem,) = _check_args(parse(["--compressor", "topk", "--global-topk"]))
    assert "not both" in problem
    with pytest.raises(SystemExit):  # argparse refuses an unknown name: exit 2
        parse(["--compressor", "zip"])


def test_the_table_of_compressors_from_records():
    from sparcapps.deep import cnn
    from sparcapps.deep.compressor_table import markdown, rows_of

    def record(flags, acc, nbytes, density):
        cfg = vars(cnn.build_parser().parse_args(flags))
        return {"app": "sparc-cnn", "config": cfg, "N": 100_000, "P": 2, "status": "ok",
                "metrics": {"test_accuracy": acc, "epochs": [{"sent_density": density}]},
                "bytes": {"sent_per_step": nbytes}, "timings": {"step": {"median": 0.1}}}

    rows = rows_of([record(["--dense"], 0.96, 4e5, 1.0),
                    record(["--compressor", "efsignsgd"], 0.95, 1.25e4, 1.0),
                    record(["--compressor", "efsignsgd", "--seed", "1"], 0.93, 1.25e4, 1.0),
                    record(["--compressor", "threshold", "--threshold", "0.1"], 0.9, 900, 0.01),
                    record(["--compressor", "threshold", "--threshold", "0.01"], 0.9, 9e4, 0.3),
                    record(["--dense", "--lr", "0.001"], 0.1, 4e5, 1.0)])
    by = {r["compressor"]: r for r in rows}
    # efsignsgd's row names its learning rate (10 x the dense 0.1: its recommended one)
    assert list(by) == ["dense", "dense (lr 0.001)", "efsignsgd (lr 1)", "threshold (abs >= 0.01)",
                        "threshold (abs >= 0.1)"]
    assert by["efsignsgd (lr 1)"]["seeds"] == [0, 1] and by["dense"]["vs_dense"] == 0.0
    assert by["efsignsgd (lr 1)"]["vs_dense"] == pytest.approx(-0.01), "over the seeds dense ran"
    # the modeled network: an allgather of 2 bits per value receives P n / 4 bytes, more than
    # a dense allreduce's 2 * 4 n once P > 64; the measured k is used
    assert 0 < by["efsignsgd (lr 1)"]["comm_ms"][64] < by["efsignsgd (lr 1)"]["comm_ms"][256]
    assert by["efsignsgd (lr 1)"]["comm_ms"][256] > by["dense"]["comm_ms"][256]
    sparse = by["threshold (abs >= 0.1)"]
    assert sparse["comm_ms"][64] < by["threshold (abs >= 0.01)"]["comm_ms"][64], "1% against 30%"
    assert sparse["comm_ms"][64] < sparse["comm_ms"][256], "the sum of 256 selections fills in"
    assert "| sparc-cnn | efsignsgd (lr 1) | 0 1 | 2 |" in markdown(rows)
    assert by["efsignsgd (lr 1)"]["spread"] == pytest.approx(np.std([0.95, 0.93], ddof=1))
    assert "| 94.00 ± 1.41 | -1.00 |" in markdown(rows) and by["dense"]["spread"] is None


def test_the_accuracy_table_steps_to_dense_less_a_point_and_the_lr_sweep(tmp_path, capsys):
    """Steps to dense's final accuracy less one point (whole epochs, per seed, mean over the
    seeds that reached it), rows apart per learning rate, and the sweep's choice (best final
    accuracy of seed 0; a tie goes to the recommended lr)."""
    from sparcapps.deep import cnn
    from sparcapps.deep.compressor_table import (best_of_sweep, main, markdown_accuracy,
                                                 markdown_sweep, rows_of, steps_to, sweep_rows)
    from sparcapps.records import append_record, make_record

    def record(flags, curve, steps=22):
        cfg = vars(cnn.build_parser().parse_args(flags + ["--epochs", str(len(curve))]))
        epochs = [{"test_accuracy": a, "steps": steps, "sent_density": 0.01} for a in curve]
        return make_record("sparc-cnn", config=cfg, environment={}, P=2, N=1000,
                           timings={"step": {"median": 0.01}},
                           metrics={"test_accuracy": curve[-1], "epochs": epochs},
                           bytes={"sent_per_step": 100.0})

    dense = [record(["--dense", "--seed", "0"], [0.5, 0.9, 0.95, 0.96]),
             record(["--dense", "--seed", "1"], [0.6, 0.945, 0.94, 0.94])]   # target 0.94
    topk = [record(["--compressor", "topk", "--seed", "0"], [0.2, 0.5, 0.945, 0.95]),
            record(["--compressor", "topk", "--seed", "1"], [0.2, 0.5, 0.6, 0.7])]
    sweep = [record(["--compressor", "topk", "--lr", "0.0333"], [0.9, 0.95, 0.95, 0.96]),
             record(["--compressor", "topk", "--lr", "0.3"], [0.1, 0.1, 0.1, 0.1])]
    sign = [record(["--compressor", "signsgd", *lr], [0.9, 0.8, 0.7, acc])   # x1/3, x1, x3
            for lr, acc in ((["--lr", "0.001111"], 0.9), ([], 0.9), (["--lr", "0.01"], 0.8))]
    assert steps_to(dense[0], 0.94) == 66 and steps_to(topk[1], 0.94) is None
    assert steps_to({"metrics": {"epochs": [{"steps": 5}]}}, 0.1) is None, "no accuracy"
    rows = rows_of(dense + topk + sweep + sign, comm=False)
    by = {r["compressor"]: r for r in rows}
    assert by["dense"]["target"] == pytest.approx(0.94) and by["dense"]["steps"] == [66, 44]
    assert by["topk (1%)"]["steps"] == [66, None] and by["topk (1%)"]["lr"] == [0.1]
    assert by["topk (1%, lr 0.0333)"]["steps"] == [44] and by["topk (1%)"]["comm_ms"] == {}
    text = markdown_accuracy(rows)
    assert "| sparc-cnn | dense | 0.1 | 0.9 | 0 1 | 2 | 4 | 95.00 ± 1.41 | +0.00 | 55 | 100 |" \
        in text, text
    assert "| 66 (1 of 2) |" in text and "| not in 88 |" in by_text(text, "lr 0.3")
    # the sweep: one row per app and compressor, the best of seed 0; dense's for context
    (s_sign, s_topk) = sweep_rows(dense + topk + sweep + sign)
    dense_sweep = [record(["--dense", "--lr", lr], [0.9, acc])
                   for lr, acc in (("0.0333", 0.93), ("0.3", 0.97))]
    (s_dense, _, _) = sweep_rows(dense + dense_sweep + topk + sweep + sign)
    assert s_dense["compressor"] == "dense" and s_dense["baseline"] and not s_topk["baseline"]
    assert s_dense["chosen"] == pytest.approx(3) and sorted(s_dense["runs"]) == \
        pytest.approx([0.333, 1, 3])
    assert by_text(markdown_sweep([s_dense]), "dense").endswith(
        "| none: the baseline runs at x1 (best of seed 0: 0.3 (x3)) |")
    assert s_topk["compressor"] == "topk (1%)" and s_topk["chosen_lr"] == 0.0333
    assert sorted(s_topk["runs"]) == pytest.approx([0.333, 1, 3])
    assert s_sign["compressor"] == "signsgd" and s_sign["chosen"] == pytest.approx(1), "tie: x1"
    assert best_of_sweep(sign[::2]) is sign[0], "the better of x1/3 and x3"
    faster = record(["--compressor", "signsgd", "--lr", "0.02"], [0.9, 0.8, 0.7, 0.9])
    assert best_of_sweep([faster, sign[0]]) is sign[0], "a tie off x1: the smaller lr"
    assert "| sparc-cnn | topk (1%) | 0.0333 (x1/3): 96.00; 0.1 (x1): 95.00; 0.3 (x3): 10.00 " \
        "| 0.0333 (x1/3) |" in markdown_sweep([s_sign, s_topk])
    # the command line: --min-seeds leaves the sweep's single runs out
    path = tmp_path / "runs.jsonl"
    for rec in dense + topk + sweep + sign:
        append_record(path, rec)
    assert main([str(path), "--accuracy-only", "--min-seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "| topk (1%) |" in out and "lr 0.0333" not in out and "signsgd" not in out
    assert main([str(path), "--sweep"]) == 0 and "| 0.0333 (x1/3) |" in capsys.readouterr().out


def by_text(text, phrase):
    """The line of a Markdown table that holds ``phrase``."""
    (line,) = [x for x in text.splitlines() if phrase in x]
    return line


def test_the_table_keeps_emulated_runs_to_their_column_and_models_powersgd_per_matrix():
    from sparcapps.deep import cnn
    from sparcapps.deep.compressor_table import markdown, rows_of

    def record(flags, acc, step_s, net=None, shapes=None, P=2):
        cfg = vars(cnn.build_parser().parse_args(flags))
        metrics = {"test_accuracy": acc, "epochs": [{"sent_density": 0.05}]}
        if shapes is not None:
            metrics["bucket_shapes"] = shapes
        return {"app": "sparc-cnn", "config": cfg, "N": 20_600, "P": P, "status": "ok",
                "metrics": metrics, "bytes": {"sent_per_step": 1000},
                "timings": {"step": {"median": step_s}},
                "environment": {"emulated_network": net} if net else {}}

    shapes = [[[10], [10, 2000]], [[600]]]   # two buckets: a bias and a matrix, a vector
    dense_recs = [record(["--dense"], 0.9, 0.1),
                  record(["--dense"], 0.5, 0.7, "4x1gbit,ppn=1", P=4)]
    rows = rows_of(dense_recs + [
        record(["--compressor", "powersgd"], 0.8, 0.2, shapes=shapes),
        record(["--compressor", "powersgd"], 0.1, 0.9, "4x1gbit,ppn=1", shapes=shapes, P=4)])
    dense, per_matrix = rows
    (_, flat) = rows_of(dense_recs + [record(["--compressor", "powersgd"], 0.8, 0.2)])
    assert dense["accuracy"] == 0.9 and dense["seeds"] == [0] and dense["P"] == [2], \
        "the emulated run's accuracy is not the table's"
    assert dense["net_step_ms"] == pytest.approx(700) and dense["step_ms"] == pytest.approx(100)
    assert per_matrix["net_step_ms"] == pytest.approx(900) and flat["net_step_ms"] is None
    assert per_matrix["accuracy"] == 0.8 and per_matrix["net"] == ["4x1gbit,ppn=1 P=4"]
    # per matrix: allreduces of 10 x 4 + 10 and of 2000 x 4 values, and the vector bucket
    # whole; flat: 144 x 4 and 144 x 4 values of the near-square view of 20,600
    from sparcml import CostModel
    from sparcml.sim import network_cost_model
    import dataclasses

    model = dataclasses.replace(network_cost_model("256x10gbit", 64, overhead=0.0,
                                                   factors=False),
                                gamma_merge=CostModel.gamma_merge,
                                gamma_dense=CostModel.gamma_dense)
    want = model.allreduce(50 * 4) + model.allreduce(8000 * 4) + model.allreduce(600 * 4)
    assert per_matrix["comm_ms"][64] == pytest.approx(want * 1e3)
    assert flat["comm_ms"][64] == pytest.approx(2e3 * model.allreduce(576 * 4))
    text = markdown(rows)
    assert "step ms (emulated net (4x1gbit,ppn=1 P=4), measured)" in text
    assert "| 100 | 700 |" in text


def test_the_readme_lists_every_compressor_with_its_flag():
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("| `--compressor` | what travels"):]
    table = table[:table.index("\n\n")]
    for name in COMPRESSORS:
        assert re.search(rf"^\| `{name}[` ]", table, re.M), f"README lacks {name}"
    assert "randomk --shared-indices" in table


def test_the_table_simulates_a_rows_step_on_the_event_level_simulator():
    """``--simulate``: one step's reductions on P simulated ranks (no torch, no MPI launch:
    the ranks are threads of sparcml.sim)."""
    from sparcapps.deep import cnn
    from sparcapps.deep._simstep import simulate_step
    from sparcapps.deep.compressor_table import _compression
    from sparcapps.deep.compressor_table import markdown, rows_of

    shapes = [[[10], [10, 200]], [[600]]]   # two buckets: 2,010 and 600 values
    n = [2010, 600]

    def record(flags, density=1.0):
        cfg = vars(cnn.build_parser().parse_args(flags))
        return {"app": "sparc-cnn", "config": cfg, "N": sum(n), "P": 2, "status": "ok",
                "metrics": {"test_accuracy": 0.9, "epochs": [{"sent_density": density}],
                            "bucket_shapes": shapes},
                "bytes": {"sent_per_step": 1000}, "timings": {"step": {"median": 0.1}}}

    for P in (1, 3, 4):
        seconds, res = simulate_step(record(["--dense"]), P, _compression, timeout=60)
        (values, stats), *_ = res.results
        assert values == sum(n)
        # dense: the bandwidth-optimal allreduce's 2 (P-1)/P of each bucket, on the sim's wire
        assert stats.bytes_sent == pytest.approx(2 * (P - 1) / P * 4 * sum(n))
        # beyond the reduction only the small agreement collectives (288 bytes each: the
        # plans' creation and, per call, their identity check, issue 36)
        assert all(0 <= w - stats.bytes_sent <= 800 * (P - 1) for w in res.wire_bytes), \
            "beyond the reduction only the small agreement collectives"
        assert (seconds > 1e-5) == (P > 1), "communication alone: ~0 at P = 1"
        for flags, density in ((["--compressor", "topk", "--density", "0.05"], 0.05),
                               (["--compressor", "threshold", "--threshold", "0.01"], 0.07)):
            sparse_s, res = simulate_step(record(flags, density), P, _compression, timeout=60)
            for (values, stats), wire in zip(res.results, res.wire_bytes):
                assert abs(values - sum(density * k for k in n)) <= 2, flags
                assert 0 <= wire - stats.bytes_sent <= 800 * (P - 1)  # agreements, as above
                assert stats.bytes_sent <= 2 * (P - 1) * 8 * values, "indices and values"
            if P > 1:
                assert 0 < sparse_s < seconds, flags
    # powersgd per matrix and fp16 (a user-defined MPI sum, which the simulator applies)
    rows = rows_of([record(["--dense"]), record(["--compressor", "powersgd"], 0.4),
                    record(["--compressor", "fp16"])], simulate=(3,))
    by = {r["compressor"]: r for r in rows}
    assert 0 < by["fp16"]["comm_ms"][3] < by["dense"]["comm_ms"][3]
    # PowerSGD per matrix: fewer bytes than dense on the wire (at these sizes latency-bound:
    # its time is not compared)
    assert by["powersgd (rank 4)"]["comm_ms"][3] > 0
    _, low_rank = simulate_step(record(["--compressor", "powersgd"], 0.4), 3, _compression,
                                 timeout=60)
    _, dense = simulate_step(record(["--dense"]), 3, _compression, timeout=60)
    assert max(low_rank.wire_bytes) < min(dense.wire_bytes)
    assert "comm ms P=3 (simulated) |" in markdown(rows)
    assert "comm ms P=64 (predicted) |" in markdown(rows_of([record(["--dense"])]))
