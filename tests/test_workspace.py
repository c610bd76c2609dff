"""sparcml._runtime.workspace: reuse, growth, roles kept apart, and a merge loop that stops allocating."""

import numpy as np
import pytest

from sparcml import _kernels as kernels
from sparcml._runtime.workspace import Workspace


def test_get_reuses_the_buffer_while_the_request_fits():
    ws = Workspace()
    a = ws.get("merge", 100, np.float32)
    b = ws.get("merge", 60, np.float32)
    assert a.shape == (100,) and b.shape == (60,) and b.dtype == np.float32
    assert np.shares_memory(a, b) and ws.allocations == 1
    assert ws.get("merge", 0, np.float32).shape == (0,) and ws.allocations == 1


def test_growth_is_geometric():
    ws = Workspace(growth=2.0)
    ws.get("r", 10, np.int64)
    ws.get("r", 11, np.int64)  # grows to max(11, 2 * 10)
    assert ws.nbytes == 20 * 8 and ws.allocations == 2
    ws.get("r", 20, np.int64)
    assert ws.allocations == 2
    ws.get("r", 100, np.int64)  # a jump larger than the factor takes the request itself
    assert ws.nbytes == 100 * 8 and ws.allocations == 3
    for n in range(1, 10_000, 7):  # a slowly growing request reallocates O(log n) times
        ws.get("slow", n, np.float64)
    assert ws.allocations - 3 <= 15


def test_roles_and_dtypes_never_share_memory():
    ws = Workspace()
    views = [ws.get("a", 50, np.float32), ws.get("b", 50, np.float32),
             ws.get("a", 50, np.float64), *ws.pair("s", 50, np.int32, np.float32)]
    for i, x in enumerate(views):
        for y in views[i + 1:]:
            assert not np.shares_memory(x, y)


def test_zeros_clears_what_the_last_borrower_left():
    ws = Workspace()
    ws.get("acc", 8, np.float64)[:] = 5
    z = ws.zeros("acc", 6, np.float64)
    assert np.all(z == 0)
    assert ws.get("acc", 8, np.float64)[7] == 5  # only the view was cleared


def test_a_grown_out_view_keeps_its_memory_and_clear_drops_everything():
    ws = Workspace()
    old = ws.get("x", 4, np.float32)
    old[:] = 3
    new = ws.get("x", 1000, np.float32)
    assert not np.shares_memory(old, new) and np.all(old == 3)
    ws.clear()
    assert ws.nbytes == 0 and np.all(old == 3)
    assert not np.shares_memory(new, ws.get("x", 10, np.float32))


def test_bad_arguments():
    with pytest.raises(ValueError, match="growth must be > 1"):
        Workspace(growth=1.0)
    with pytest.raises(ValueError, match="n must be >= 0"):
        Workspace().get("x", -1, np.float32)


def test_a_steady_merge_loop_allocates_nothing_and_matches_the_allocating_kernel():
    rng = np.random.default_rng(3)
    ws = Workspace()
    before = None
    for step in range(6):
        streams = []
        for _ in range(3):
            idx = np.unique(rng.integers(0, 5000, 400 + step % 2)).astype(np.int32)
            streams.append((idx, rng.standard_normal(idx.size).astype(np.float32)))
        # two rounds into alternating roles (double buffering), as recursive doubling does
        (ai, av), (bi, bv), (ci, cv) = streams
        i1, v1 = ws.pair("round0", ai.size + bi.size, np.int32, np.float32)
        n1 = kernels.merge_add_into(ai, av, bi, bv, i1, v1)
        i2, v2 = ws.pair("round1", n1 + ci.size, np.int32, np.float32)
        n2 = kernels.merge_add_into(i1[:n1], v1[:n1], ci, cv, i2, v2)
        exp_i, exp_v = kernels.merge_add(*kernels.merge_add(ai, av, bi, bv), ci, cv)
        np.testing.assert_array_equal(i2[:n2], exp_i)
        assert v2[:n2].tobytes() == exp_v.tobytes()
        if step == 2:
            before = ws.allocations
    assert ws.allocations == before

