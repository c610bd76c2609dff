"""Issue 36, item 3: inputs checked before any work (the simulator's P, network and timeout)."""

import math
import time

import pytest

import sparcml
import sparcml.sim as sim
from sparcml.sim._network import NetworkSpec
from sparcml.sim._runner import RANK_STATE_BYTES, check_memory


def _noop(comm):
    return comm.Get_rank()


def test_huge_P_is_refused_at_once_with_an_estimate():
    t0 = time.perf_counter()
    with pytest.raises(sparcml.InvalidArgumentError, match=r"P = 1,000,000,000,000 .*PiB"):
        sim.run(10**12, _noop, network="1000000000000x10gbit")
    assert time.perf_counter() - t0 < 5  # no rank was built


def test_check_memory_compares_the_estimate_with_what_is_available():
    check_memory(1000, available=1000 * RANK_STATE_BYTES)
    with pytest.raises(sparcml.InvalidArgumentError, match="GiB available"):
        check_memory(1001, available=1000 * RANK_STATE_BYTES)


@pytest.mark.parametrize("field,value", [("bandwidth", -1.0), ("bandwidth", math.nan),
                                         ("bandwidth", 0.0), ("intra_bandwidth", math.inf),
                                         ("latency", -1e-6), ("intra_latency", math.nan),
                                         ("nodes", 0), ("ppn", 1.5), ("bandwidth", "10gbit")])
def test_network_spec_built_directly_is_checked(field, value):
    good = sim.parse_network("4x10gbit")
    fields = {f: getattr(good, f) for f in ("nodes", "ppn", "bandwidth", "latency",
                                            "intra_bandwidth", "intra_latency", "text")}
    NetworkSpec(**fields)  # the parsed values pass
    fields[field] = value
    with pytest.raises(sparcml.InvalidArgumentError, match=f"NetworkSpec.{field}"):
        NetworkSpec(**fields)


@pytest.mark.parametrize("timeout", [math.nan, "10", -1, 0, math.inf, True])
def test_bad_timeout_is_an_invalid_argument(timeout):
    with pytest.raises(sparcml.InvalidArgumentError, match="timeout"):
        sim.run(2, _noop, timeout=timeout)


def test_good_timeout_runs():
    assert sim.run(2, _noop, timeout=60, compute="measured").results == [0, 1]
