"""The simulator's links as calendars of busy intervals (``sparcml.sim._links``): ranks reach
a node's shared NIC in wall-clock order, and a single "free from" time made a rank that was
behind in virtual time queue behind later rounds (recursive doubling with 8 ranks per node ran
2-3x its model at P = 64 and differed run to run)."""

import numpy as np
import pytest

import sparcml.sim as sim
from sparcapps.bench.runner import BenchCase
from sparcapps.bench.simulate import _cell, _modeled_row, _simulated_row
from sparcml.sim._links import LinkCalendar


def _free_from(requests):
    """The single "free from" model the calendar replaces."""
    free, out = 0.0, []
    for ready, duration in requests:
        start = max(ready, free)
        free = start + duration
        out.append(start)
    return out


def test_in_virtual_time_order_the_calendar_is_the_free_from_model_to_the_bit():
    rng = np.random.default_rng(0)
    for _ in range(50):
        ready = np.cumsum(rng.exponential(1e-6, 300) * rng.integers(0, 2, 300))
        duration = rng.exponential(2e-6, 300) * rng.integers(0, 3, 300)  # zero-length too
        requests = list(zip(ready.tolist(), duration.tolist()))
        cal = LinkCalendar()
        assert [cal.reserve(r, d) for r, d in requests] == _free_from(requests)
        assert len(cal.starts) == len(cal.ends) and cal.starts == sorted(cal.starts)


def test_a_request_late_in_wall_time_takes_the_gap_its_virtual_time_finds():
    cal = LinkCalendar()
    assert cal.reserve(10.0, 2.0) == 10.0   # a later round reserved first
    assert cal.reserve(1.0, 3.0) == 1.0     # an earlier one: before it, not at 12
    assert cal.reserve(3.0, 7.0) == 12.0    # 4-10 is too short for 7: after the busy part
    assert cal.reserve(4.0, 6.0) == 4.0     # exactly fills 4-10
    assert (cal.starts, cal.ends) == ([1.0], [19.0])  # touching intervals merged


def test_pruning_drops_only_what_no_request_can_reach():
    requests = [(float(i), 0.5) for i in range(0, 10_000, 2)]
    whole, pruned = LinkCalendar(), LinkCalendar()
    for r, d in requests:
        whole.reserve(r, d)
        pruned.reserve(r, d)
        if pruned.due_for_pruning():
            pruned.prune(r - 100)
    assert len(pruned.starts) < len(whole.starts)
    for r in (9_000.25, 9_998.0, 9_999.0, 20_000.0):
        assert pruned.reserve(r, 1.0) == whole.reserve(r, 1.0)


def test_recursive_doubling_with_eight_ranks_per_node_follows_its_model():
    """P = 32 on 4 nodes of 8: the simulation within 1.15x of the prediction (the simulator's
    own charges replayed) and two runs within 2% (reservations that overlap in virtual time
    still go in wall-clock order). Measured: 1.1210 ms twice against 1.1208 modeled; before
    the calendars two runs gave 2.10 and 2.48 ms."""
    P, N, density = 32, 1 << 17, 0.002
    net = sim.parse_network("4x94.1gbit,ppn=8,latency=2.1us,intra=98gbit")
    cases = [BenchCase(N, density, "random", "ssar_recursive_double")]
    times = []
    for _ in range(2):
        res = sim.run(P, _cell, network=net, args=(cases, 1, 0, 0, None)).results
        row = _simulated_row([r[0] for r in res], N)
        times.append(row["timings"]["allreduce"]["median"])
    model = _modeled_row("ssar_recursive_double", P, N, "float32", net, row,
                         {"ssar_recursive_double": row})
    t_model = model["timings"]["allreduce"]["median"]
    assert max(times) <= 1.02 * min(times), times
    for t in times:
        assert t_model / 1.15 <= t <= 1.15 * t_model, (t, t_model)
