"""Compressed indices on the wire: the bytes per entry, and the cost model's prediction of them
(sparcml._wire.codec.index_layout, sparcml._model.costmodel.index_bytes)."""

import numpy as np
import pytest

from sparcml._model import costmodel
from sparcml._options import CallOptions, default_options
from sparcml._wire.codec import BITMAP, ELIAS_FANO, RAW, Codec, Part, decode, index_layout


def _message(density, dim=1 << 20, seed=0, raw=False):
    rng = np.random.default_rng(seed)
    k = int(density * dim)
    idx = np.sort(rng.choice(dim, k, replace=False)).astype(np.int32)
    val = rng.standard_normal(k).astype(np.float32)
    buf, dense = Codec(np.int32, np.float32, options=CallOptions(code_indices=not raw)).encode(
        Part(0, dim, idx, val))
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
    """The environment gives the process defaults, resolved at the entry points: a codec or
    a cost function given no options codes whatever the environment says."""
    monkeypatch.setenv("SPARCML_INDEX_CODING", "raw")
    assert not Codec(np.int32, np.float32,
                     options=CallOptions.of(default_options())).code_indices
    assert Codec(np.int32, np.float32).code_indices
    assert costmodel.index_bytes(1000, 1 << 20, 4, coded=default_options().code_indices) == 4.0
    assert costmodel.index_bytes(1000, 1 << 20, 4) < 4.0
    shape = dict(P=4, N=1 << 20, k=1000)
    raw = costmodel.CostModel().predict("ssar_recursive_double", **shape)  # the defaults
    monkeypatch.setenv("SPARCML_INDEX_CODING", "auto")
    assert Codec(np.int32, np.float32, options=CallOptions.of(default_options())).code_indices
    assert costmodel.CostModel().predict("ssar_recursive_double", **shape) < raw


@pytest.mark.parametrize("density", [1e-4, 1e-3, 1e-2, 0.1, 0.3, 0.45])
def test_cost_model_predicts_the_index_bytes(density):
    dim = 1 << 20
    k = int(density * dim)
    _, actual = index_layout(k, dim, 4)
    predicted = costmodel.index_bytes(k, dim, 4)
    assert predicted == pytest.approx(actual / k, rel=0.03)


def test_codes_only_where_the_link_time_saved_exceeds_the_coding_time():
    count, dim = 16777, 1 << 24  # 0.1%: Elias-Fano saves about 2.5 bytes an index
    coding = 6e-9  # seconds to encode and decode an index
    assert index_layout(count, dim, 4, byte_seconds=8e-9, index_seconds=coding)[0] == ELIAS_FANO
    assert index_layout(count, dim, 4, byte_seconds=1e-10, index_seconds=coding) == \
        (RAW, 4 * count)  # shared memory: the bytes saved are worth less than the CPU
    assert index_layout(400, 1000, 4, byte_seconds=1e-9, index_seconds=1e-9)[0] == BITMAP
    rng = np.random.default_rng(3)
    idx = np.sort(rng.choice(dim, count, replace=False)).astype(np.int32)
    val = rng.standard_normal(count).astype(np.float32)
    for costs, smaller in (((1e-10, coding), False), ((8e-9, coding), True), (None, True)):
        buf, _ = Codec(np.int32, np.float32, options=CallOptions(link_costs=costs)).encode(
            Part(0, dim, idx, val))
        assert (buf.nbytes < 8 * count) == smaller, costs
        part = decode(buf)  # the header names the code: any receiver decodes it
        assert np.array_equal(part.indices, idx) and np.array_equal(part.values, val)


class _Node:
    def __init__(self, size):
        self.size, self.freed = size, False

    def Get_size(self):
        return self.size

    def Free(self):
        self.freed = True


class _Comm:
    def __init__(self, node_size):
        self.node = _Node(node_size)

    def Split_type(self, kind):
        return self.node


class _Ctx:
    def __init__(self, size, node_size):
        self.size, self.comm = size, _Comm(node_size)
        self.model = self.link_costs = None


def test_link_costs_from_the_model_or_from_where_the_ranks_are(monkeypatch):
    from sparcml import CostModel
    from sparcml._model.link_costs import NETWORK_BYTE_SECONDS, SHARED_MEMORY_BYTE_SECONDS, \
        index_coding_costs

    monkeypatch.setenv("SPARCML_INDEX_CODING", "auto")
    one_node = _Ctx(4, 4)
    assert index_coding_costs(one_node) == (SHARED_MEMORY_BYTE_SECONDS, CostModel.gamma_code)
    assert one_node.comm.node.freed
    assert index_coding_costs(_Ctx(4, 2))[0] == NETWORK_BYTE_SECONDS
    assert index_coding_costs(_Ctx(1, 1)) is None
    calibrated = _Ctx(4, 4)
    calibrated.model = CostModel(beta=3e-9, gamma_code=2e-9)
    assert index_coding_costs(calibrated) == (3e-9, 2e-9)
    # the smallest code, whatever it costs
    assert index_coding_costs(_Ctx(4, 4), "coded") is None
