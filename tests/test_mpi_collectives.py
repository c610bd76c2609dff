"""Issue 21, items 2-3: MPI's vector collectives for the phases that exchange with every rank.

The formulas of :mod:`sparcml._model.mpi_collectives` (MPICH's algorithm choices), the
simulated communicator's ``Alltoall``/``Alltoallv``/``Gather``/``Gatherv`` (data, one event
charged by those formulas, bytes), and what the collective path changes in a simulated run
(no point-to-point message left in the split algorithms, the same bits) and in the cost
model. Correctness of both paths at many P: ``tests/matrix/allreduce.py``'s ``native``
profile (``tests/test_matrix.py``)."""

import numpy as np
import pytest
from mpi4py import MPI

import sparcml
import sparcml.sim as sim
from sparcml import Options
from sparcml._model import mpi_collectives as mpi
from sparcml._model.costmodel import CostModel

NEVER = 2**31 - 1
NET = "64x10gbit,latency=5us"
ALPHA, BETA = 5e-6, 8 / 10e9


def test_mpich_algorithm_choices():
    assert mpi.allgatherv_algorithm(64, 100_000) == "recursive doubling"  # < 512 KiB, pof2
    assert mpi.allgatherv_algorithm(64, 1 << 20) == "ring"
    assert mpi.allgatherv_algorithm(48, 50_000) == "bruck"  # < 80 KiB, not a power of two
    assert mpi.allgatherv_algorithm(48, 100_000) == "ring"
    o = mpi.LIBRARY_MESSAGE_SECONDS
    assert mpi.allgatherv_time(48, 100_000, 0, ALPHA, BETA) == pytest.approx(
        47 * (ALPHA + o) + 100_000 * BETA)
    assert mpi.allgatherv_time(64, 1000, 10, ALPHA, BETA) == pytest.approx(
        6 * (ALPHA + o) + 990 * BETA)
    # Alltoall of 4 bytes: Bruck from 8 ranks, scattered below
    assert mpi.alltoall_time(1024, 4, ALPHA, BETA) == pytest.approx(
        10 * (ALPHA + o) + 10 * 512 * 4 * BETA)
    assert mpi.alltoall_time(4, 4, ALPHA, BETA) == pytest.approx(ALPHA + 3 * o + 12 * BETA)
    # Alltoallv: batches of 32 posted messages, the larger of a rank's two directions
    assert mpi.alltoallv_time(1024, 10, 500, ALPHA, BETA) == pytest.approx(
        32 * ALPHA + 1023 * o + 500 * BETA)
    assert mpi.gather_time(8, 4, ALPHA, BETA) == pytest.approx(3 * (ALPHA + o) + 28 * BETA)
    assert mpi.gatherv_time(8, 700, ALPHA, BETA) == pytest.approx(ALPHA + 7 * o + 700 * BETA)
    for fn, args in ((mpi.alltoall_time, (4,)), (mpi.alltoallv_time, (4, 4)),
                     (mpi.allgatherv_time, (4, 4)), (mpi.gather_time, (4,)),
                     (mpi.gatherv_time, (4,))):
        assert fn(1, *args, ALPHA, BETA) == 0.0


def _vector_collectives(comm):
    P, r = comm.Get_size(), comm.Get_rank()
    sizes = np.arange(P, dtype=np.intc) + 10 * r
    got = np.empty(P, np.intc)
    comm.Alltoall([sizes, MPI.INT], [got, MPI.INT])
    t0 = comm.clock()
    counts = np.array([(r + j) % 3 + 1 for j in range(P)], np.intc)  # to rank j
    rcounts = np.array([(j + r) % 3 + 1 for j in range(P)], np.intc)  # from rank j
    send = np.concatenate([np.full(c, 10 * r + j, np.uint8) for j, c in enumerate(counts)])
    recv = np.zeros(int(rcounts.sum()), np.uint8)
    sd = np.r_[0, np.cumsum(counts)[:-1]]
    rd = np.r_[0, np.cumsum(rcounts)[:-1]]
    comm.Alltoallv([send, (counts, sd), MPI.BYTE], [recv, (rcounts, rd), MPI.BYTE])
    t1 = comm.clock()
    mine = np.full(r + 1, r, np.uint8)
    lens = np.empty(P, np.intc) if r == 0 else None
    comm.Gather([np.array([r + 1], np.intc), MPI.INT], None if lens is None else [lens, MPI.INT])
    out = None
    if r == 0:
        out = np.zeros(int(lens.sum()), np.uint8)
        comm.Gatherv([mine, MPI.BYTE], [out, (lens, np.r_[0, np.cumsum(lens)[:-1]]),
                                        MPI.BYTE])
    else:
        comm.Gatherv([mine, MPI.BYTE], None)
    return got, recv, rcounts, (t0, t1), out


def test_simulated_vector_collectives_move_the_data_as_one_event():
    P = 5
    res = sim.run(P, _vector_collectives, network=NET)
    for r, (got, recv, rcounts, _, out) in enumerate(res.results):
        assert got.tolist() == [r + 10 * j for j in range(P)]
        want = np.concatenate([np.full(c, 10 * j + r, np.uint8) for j, c in enumerate(rcounts)])
        assert recv.tolist() == want.tolist()
    # one event: every rank leaves at the scattered algorithm's time from the last entry (the
    # arrays built around it are measured compute: well under 5 ms)
    peak = max(max(sum((q + j) % 3 + 1 for j in range(P) if j != q),
                   sum((j + q) % 3 + 1 for j in range(P) if j != q)) for q in range(P))
    cost = mpi.alltoallv_time(P, peak, peak, ALPHA, BETA)
    start = max(r[3][0] for r in res.results)
    for r in res.results:
        # (under modeled compute nothing is charged around it: equal up to rounding)
        assert cost * (1 - 1e-9) <= r[3][1] - start < cost + 5e-3
    assert res.results[0][4].tolist() == [j for j in range(P) for _ in range(j + 1)]
    assert res.messages == [0] * P  # no point-to-point message
    # wire bytes: the Alltoall's 4 per peer, the Alltoallv's blocks to others, the Gather and
    # Gatherv of the non-roots
    for r in range(P):
        out = sum((r + j) % 3 + 1 for j in range(P) if j != r)
        gathered = 0 if r == 0 else 4 + r + 1
        assert res.wire_bytes[r] == 4 * (P - 1) + out + gathered


def _split_calls(comm, algorithm, native):
    vec = sparcml.SparseVector(50_000, np.arange(comm.Get_rank(), 50_000, 37),
                               np.ones(len(range(comm.Get_rank(), 50_000, 37)), np.float32))
    stats = sparcml.TrafficStats()
    res = sparcml.allreduce(vec, comm, algorithm=algorithm, stats=stats,
                            options=Options(native_min_ranks=1 if native else NEVER,
                                            partitions="equal"))
    return res.to_dense(), stats.bytes_sent


@pytest.mark.parametrize("algorithm", ["ssar_split_allgather", "dsar_split_allgather"])
def test_split_algorithms_post_no_python_message_on_the_collective_path(algorithm):
    """At P = 24 the point-to-point path posts P - 1 messages per rank; the collective path
    none (its phases are one Alltoallv and one Allgatherv each): the same bits, the same
    bytes but the 4 per peer of the size exchange."""
    P = 24
    native = sim.run(P, _split_calls, args=(algorithm, True), network=f"{P}x10gbit")
    p2p = sim.run(P, _split_calls, args=(algorithm, False), network=f"{P}x10gbit")
    assert native.messages == [0] * P
    assert p2p.messages == [P - 1] * P
    for a, b in zip(native.results, p2p.results):
        assert a[0].tobytes() == b[0].tobytes()
        assert a[1] == b[1] + 4 * (P - 1)
    assert [a - b for a, b in zip(native.wire_bytes, p2p.wire_bytes)] == [4 * (P - 1)] * P


def test_cost_model_charges_the_collective_path_without_python_per_message():
    """From ``native_min_ranks`` ranks the split phase 1 costs MPI's rounds and sparcml's
    Python once per part, not P - 1 point-to-point messages at ``alpha``."""
    model = CostModel(alpha=1e-4, collective_alpha=5e-6, part_overhead=2e-6, beta=1e-9)
    shape = dict(P=1024, N=1 << 24, k=1 << 14)
    p2p = model.predict("ssar_split_allgather", options=Options(native_min_ranks=NEVER),
                        **shape)
    native = model.predict("ssar_split_allgather", **shape)
    assert p2p - native > 1023 * 1e-4 - 1024 * 2e-6 - 1e-3
    below = Options(native_min_ranks=2048)  # below the threshold: messages
    assert model.predict("ssar_split_allgather", options=below, **shape) == p2p
    assert model.collective_step(1024) == 5e-6
    assert CostModel(allgather_alpha=2e-5).collective_step(16) == pytest.approx(5e-6)
    topk_p2p = model.predict_topk(P=1024, N=1 << 24, k_local=1 << 14, k=1 << 14,
                                  options=Options(native_min_ranks=NEVER))
    assert model.predict_topk(P=1024, N=1 << 24, k_local=1 << 14, k=1 << 14) < topk_p2p


def test_messages_past_mpis_int_counts_keep_the_point_to_point_path(monkeypatch):
    """MPI's counts are ints: where the blocks could hold more than 2**31 - 1 bytes per rank
    (a bound every rank computes from the agreed bounds), phase 1 stays point to point."""
    from sparcml._collectives import exchange

    monkeypatch.setattr(exchange, "MAX_COUNT", 1000)
    P = 4
    res = sim.run(P, _split_calls, args=("ssar_split_allgather", True), network=f"{P}x10gbit")
    assert res.messages == [P - 1] * P
