"""sparcml._collectives.arith with the context's workspace: bitwise the same sums, results that leave a call
never in workspace memory, and a steady loop that stops allocating."""

import numpy as np
import pytest

from sparcml._collectives import arith
from sparcml._vector import SparseVector
from sparcml._wire.codec import Codec, Part
from sparcml._runtime.workspace import Workspace


def _sparse(rng, dim, k, idx_dt=np.int32, val_dt=np.float32):
    idx = np.sort(rng.choice(dim, k, replace=False)).astype(idx_dt)
    return SparseVector.unchecked(dim, idx, rng.standard_normal(k).astype(val_dt))


def _dense(rng, dim, val_dt=np.float32):
    return SparseVector.unchecked(dim, None, rng.standard_normal(dim).astype(val_dt))


def _same(x, y):
    if isinstance(x, SparseVector):
        assert x.is_dense == y.is_dense and x.dim == y.dim
    else:
        assert (x.offset, x.length, x.is_dense) == (y.offset, y.length, y.is_dense)
    if not x.is_dense:
        assert x.indices.dtype == y.indices.dtype
        np.testing.assert_array_equal(x.indices, y.indices)
    assert x.values.dtype == y.values.dtype and x.values.tobytes() == y.values.tobytes()


def _in_workspace(ws, *arrays):
    return any(np.shares_memory(a, b) for a in arrays if a is not None
               for b in ws._buffers.values())


@pytest.mark.parametrize("kinds", ["sparse", "goes_dense", "dense_sparse", "dense_dense"])
@pytest.mark.parametrize("val_dt", [np.float32, np.float64])
def test_add_is_bitwise_the_same_with_a_workspace(kinds, val_dt):
    rng = np.random.default_rng(1)
    dim = 4000
    codec = Codec(np.int32, val_dt)
    k = 1800 if kinds == "goes_dense" else 300  # their union is past the switch rule
    a = _dense(rng, dim, val_dt) if kinds == "dense_dense" else _sparse(rng, dim, k, val_dt=val_dt)
    b = _dense(rng, dim, val_dt) if kinds.startswith("dense") else _sparse(rng, dim, k,
                                                                          val_dt=val_dt)
    expected = arith.add(a, b, codec)
    assert expected.is_dense == (kinds != "sparse")
    ws = Workspace()
    final = arith.add(a, b, codec, workspace=ws)
    _same(final, expected)
    assert not _in_workspace(ws, final.indices, final.values)
    mid = arith.add(b, a, codec, workspace=ws, intermediate=True, role="r0")
    _same(mid, expected)
    assert _in_workspace(ws, mid.values)


def test_two_roles_chain_without_clobbering_and_stop_allocating():
    rng = np.random.default_rng(2)
    dim, codec, ws = 50_000, Codec(np.int32, np.float32), Workspace()
    for step in range(5):
        vecs = [_sparse(rng, dim, 500 + 10 * (step % 2)) for _ in range(4)]
        expected = arith.add(arith.add(arith.add(vecs[0], vecs[1], codec), vecs[2], codec),
                             vecs[3], codec)
        cur = vecs[0]
        for t, v in enumerate(vecs[1:]):
            last = t == len(vecs) - 2
            cur = arith.add(cur, v, codec, workspace=ws, intermediate=not last,
                            role=f"rd{t % 2}")
        _same(cur, expected)
        assert not _in_workspace(ws, cur.indices, cur.values)
        if step == 1:
            allocations = ws.allocations
    assert ws.allocations == allocations


@pytest.mark.parametrize("case", ["sparse", "goes_dense", "some_dense", "forced", "empty"])
@pytest.mark.parametrize("intermediate", [False, True])
def test_fold_parts_is_bitwise_the_same_with_a_workspace(case, intermediate):
    rng = np.random.default_rng(3)
    offset, length, P = 1000, 3000, 4
    codec = Codec(np.int64, np.float32)
    k = {"sparse": 100, "goes_dense": 700, "some_dense": 100, "forced": 100, "empty": 0}[case]
    parts = []
    for r in range(P):
        if case == "some_dense" and r == 2:
            parts.append(Part(offset, length, None, rng.standard_normal(length).astype(np.float32)))
            continue
        idx = np.sort(rng.choice(length, k, replace=False)).astype(np.int64) + offset
        parts.append(Part(offset, length, idx, rng.standard_normal(k).astype(np.float32)))
    force = case == "forced"
    expected = arith.fold_parts(parts, offset, length, codec, force)
    assert expected.is_dense == (case in ("goes_dense", "some_dense", "forced"))
    ws = Workspace()
    got = arith.fold_parts(parts, offset, length, codec, force, workspace=ws,
                           intermediate=intermediate)
    _same(got, expected)
    if not intermediate:
        assert not _in_workspace(ws, got.indices, got.values)
    again = arith.fold_parts(parts, offset, length, codec, force, workspace=ws,
                             intermediate=intermediate)
    _same(again, expected)


def test_assemble_writes_blocks_in_place_bitwise_as_before():
    rng = np.random.default_rng(4)
    codec = Codec(np.int32, np.float64)
    dim, P = 8000, 4
    bounds = np.arange(P + 1) * dim // P
    blocks = []
    for j in range(P):
        lo, n = int(bounds[j]), int(bounds[j + 1] - bounds[j])
        if j == 1:  # a dense block with zeros in it
            v = np.where(rng.random(n) < 0.1, rng.standard_normal(n), 0.0)
            blocks.append(Part(lo, n, None, v))
        else:  # int64 indices on the wire side: the result still has the codec's index dtype
            idx = np.sort(rng.choice(n, 50, replace=False)).astype(np.int64) + lo
            blocks.append(Part(lo, n, idx, rng.standard_normal(50)))
    got = arith.assemble(blocks, dim, codec)
    idx = np.concatenate([b.indices if not b.is_dense else np.flatnonzero(b.values) + b.offset
                          for b in blocks]).astype(np.int32)
    val = np.concatenate([b.values if not b.is_dense else b.values[b.values != 0]
                          for b in blocks])
    assert not got.is_dense and got.indices.dtype == np.int32
    np.testing.assert_array_equal(got.indices, idx)
    assert got.values.tobytes() == val.tobytes()


@pytest.mark.parametrize("streams", [1, 2, 3, 5, 8, 9, 16])
def test_fold_parts_two_way_and_heap_give_the_same_bits(streams, monkeypatch):
    """Up to PAIRWISE_FOLD_MAX streams fold_parts merges two at a time, above with a heap:
    the same sum bit for bit (signed zeros, shared and lone indices, empty streams), with and
    without a workspace."""
    from sparcml._collectives import arith
    from sparcml._wire.codec import Codec, Part
    from sparcml._runtime.workspace import Workspace

    rng = np.random.default_rng(streams)
    parts = []
    for s in range(streams):
        n = 0 if s == 1 else int(rng.integers(1, 400))
        idx = np.sort(rng.choice(600, n, replace=False) * 97).astype(np.int32) + 100
        val = rng.choice([0.0, -0.0, 1.5, -2.25, 1e-30, 3e7], n).astype(np.float32)
        parts.append(Part(100, 100_000, idx, val))
    codec = Codec(np.int32, np.float32)
    got = {}
    for limit in (0, 64):  # 0: always the heap; 64: always two-way
        monkeypatch.setattr(arith, "PAIRWISE_FOLD_MAX", limit)
        for ws in (None, Workspace()):
            out = arith.fold_parts(parts, 100, 100_000, codec, workspace=ws, intermediate=True)
            assert not out.is_dense
            got[limit, ws is None] = (out.indices.copy(), out.values.view(np.int32).copy())
    first = got[0, True]
    for key, (idx, bits) in got.items():
        assert np.array_equal(idx, first[0]) and np.array_equal(bits, first[1]), key
