"""What training apps on simulated ranks need of the simulator (issue 33): ``Allreduce`` in
MPICH's summation order (a float sum with MPICH's bits), the bitwise operations a
DistributedOptimizer's flags use, and modeled times that do not depend on the machine's timing
when a rank reduces on its non-blocking engine's thread."""

import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from sparcml import sim


def _tree(parts):
    """MPICH 4's order, written out: pairs (2i, 2i+1) for i < P - pof2, then a balanced tree."""
    P = len(parts)
    pof2 = 1 << (P.bit_length() - 1)
    rem = P - pof2
    vals = [parts[2 * i] + parts[2 * i + 1] for i in range(rem)] + list(parts[2 * rem:])
    while len(vals) > 1:
        vals = [vals[j] + vals[j + 1] for j in range(0, len(vals), 2)]
    return vals[0]


@pytest.mark.parametrize("P", [1, 2, 3, 4, 5, 7, 8])
def test_allreduce_sums_in_mpichs_order(P):
    def body(comm):
        rng = np.random.default_rng([comm.Get_rank(), 5])
        x = (rng.standard_normal(4000) * 10.0 ** rng.integers(-4, 4, 4000)).astype(np.float32)
        out = np.empty_like(x)
        comm.Allreduce(x, out, op=MPI.SUM)
        flags = np.array([1 << comm.Get_rank() % 8, 3], np.uint8)
        comm.Allreduce(MPI.IN_PLACE, flags, op=MPI.BOR)
        both = np.array([3 if comm.Get_rank() % 2 else 7], np.uint8)
        comm.Allreduce(MPI.IN_PLACE, both, op=MPI.BAND)
        return x, out, flags, both

    res = sim.run(P, body, timeout=60).results
    parts = [r[0] for r in res]
    want = _tree(parts)
    for _, out, flags, both in res:
        assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
        assert flags[0] == np.bitwise_or.reduce([1 << r % 8 for r in range(P)]) and flags[1] == 3
        assert both[0] == (3 if P > 1 else 7)
    if P >= 4:  # the order matters here: a sum in rank order has other bits
        seq = parts[0].copy()
        for p in parts[1:]:
            seq += p
        assert not np.array_equal(seq, want)


def test_modeled_time_on_the_engine_thread_is_the_same_every_run():
    """A rank that reduces on its non-blocking engine (as DistributedOptimizer does): its
    kernels charged as the rank's, nothing measured, so three runs give the same clocks; the
    engine's thread ends with its rank."""
    from sparcml import QSGD
    from sparcml._runtime.nonblocking import submit
    from sparcml.compression import Compression, ResidualMemory, TopKCompressor

    def body(comm, engine):
        c = Compression(TopKCompressor(density=0.01), quantizer=QSGD(4),
                        memory=ResidualMemory()).fresh(seed=0)
        rng = np.random.default_rng(comm.Get_rank())
        for _ in range(6):
            x = rng.standard_normal(9000).astype(np.float32)
            if engine:
                submit(comm, "step", lambda ctx, v: c.allreduce_in(ctx, v, key=0), x).wait()
            else:
                c.reduce(x, 0, comm)
        return comm.clock()

    threads = threading.active_count()
    runs = [sim.run(3, body, args=(True,), network="1x10gbit,ppn=3", timeout=60).times
            for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    # each rank's engine thread ended with its rank (not 9 threads waiting forever)
    deadline = time.monotonic() + 10
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads
    blocking = sim.run(3, body, args=(False,), network="1x10gbit,ppn=3", timeout=60).times
    # the same kernels are charged on either thread: the clocks agree to within the calls'
    # Python (a call through the engine is charged like one on the rank's own thread)
    assert np.allclose(runs[0], blocking, rtol=0.1)
