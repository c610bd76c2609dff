"""Compressed indices on the wire: the bytes per entry, and the cost model's prediction of them
(sparcml.wire.index_layout, sparcml.costmodel.index_bytes)."""

import numpy as np
import pytest

from sparcml import costmodel
from sparcml.wire import BITMAP, ELIAS_FANO, RAW, Codec, Part, decode, index_layout


def _message(density, dim=1 << 20, seed=0, raw=False):
    rng = np.random.default_rng(seed)
    k = int(density * dim)
    idx = np.sort(rng.choice(dim, k, replace=False)).astype(np.int32)
    val = rng.standard_normal(k).astype(np.float32)
    buf, dense = Codec(np.int32, np.float32, code_indices=not raw).encode(Part(0, dim, idx, val))
    assert not dense
    return buf, idx, val


def test_bytes_per_entry_at_one_percent_drop_below_5_5():
    buf, idx, val = _message(0.01)
    raw, _, _ = _message(0.01, raw=True)
    assert raw.nbytes / idx.size > 8.0 and buf.nbytes / idx.size <= 5.5
    part = decode(buf)
    assert np.array_equal(part.indices, idx) and np.array_equal(part.values, val)


def test_the_smallest_code_is_chosen_by_count_and_range():
    assert index_layout(0, 100, 4) == (RAW, 0)
    assert index_layout(1000, 1 << 20, 4)[0] == ELIAS_FANO
    assert index_layout(400, 1000, 4)[0] == BITMAP
    assert index_layout(1000, 1 << 20, 4, coded=False) == (RAW, 4000)
    assert index_layout(3, 2**60, 8)[0] == RAW  # beyond the coded range limit


def test_coding_can_be_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("SPARCML_INDEX_CODING", "raw")
    assert not Codec(np.int32, np.float32).code_indices
    assert costmodel.index_bytes(1000, 1 << 20, 4) == 4.0
    monkeypatch.setenv("SPARCML_INDEX_CODING", "auto")
    assert Codec(np.int32, np.float32).code_indices


@pytest.mark.parametrize("density", [1e-4, 1e-3, 1e-2, 0.1, 0.3, 0.45])
def test_cost_model_predicts_the_index_bytes(density):
    dim = 1 << 20
    k = int(density * dim)
    _, actual = index_layout(k, dim, 4)
    predicted = costmodel.index_bytes(k, dim, 4)
    assert predicted == pytest.approx(actual / k, rel=0.03)
